"""Issue 28 §2's A/B: unary calls vs one long-lived bidirectional stream, threaded gRPC vs
``grpc.aio``, between two Python processes on loopback (no bookie: the transport alone).

For each of the four (server API x call shape) a client sends 1 KiB requests and gets
16-byte answers, as an add and its acknowledgement:

* serial: one request at a time (a lone add's round trip), p50 / p99 over ``--n`` of them;
* pipelined: ``--window`` requests in flight (closed loop), messages/s.

The client uses the same API as the server (threaded with threaded, aio with aio).
Run: ``python -m bench.transport_ab [--n 3000] [--window 64]``.
"""

from __future__ import annotations

import asyncio
import queue
import subprocess
import sys
import threading
import time
from concurrent import futures

import grpc
import numpy as np

KiB = 1024
OPTS = [("grpc.max_receive_message_length", 64 << 20),
        ("grpc.max_send_message_length", 64 << 20)]


# ----------------------------------------------------------------------------- servers
def serve_threaded(port: int) -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16), options=OPTS)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("bench.Echo", {
        "Echo": grpc.unary_unary_rpc_method_handler(lambda req, ctx: req[:16]),
        "EchoStream": grpc.stream_stream_rpc_method_handler(
            lambda it, ctx: (r[:16] for r in it)),
    }),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    server.wait_for_termination()


def serve_aio(port: int) -> None:
    async def echo(req, ctx):  # type: ignore[no-untyped-def]
        return req[:16]

    async def echo_stream(it, ctx):  # type: ignore[no-untyped-def]
        async for r in it:
            yield r[:16]

    async def main() -> None:
        server = grpc.aio.server(options=OPTS)
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("bench.Echo", {
            "Echo": grpc.unary_unary_rpc_method_handler(echo),
            "EchoStream": grpc.stream_stream_rpc_method_handler(echo_stream),
        }),))
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        await server.wait_for_termination()

    asyncio.run(main())


# ----------------------------------------------------------------------------- clients
def threaded_client(port: int, n: int, window: int) -> dict[str, float]:
    ch = grpc.insecure_channel(f"127.0.0.1:{port}", OPTS)
    unary = ch.unary_unary("/bench.Echo/Echo")
    stream = ch.stream_stream("/bench.Echo/EchoStream")
    msg = b"x" * KiB
    out: dict[str, float] = {}
    for _ in range(200):
        unary(msg)
    lat = np.empty(n)
    for i in range(n):
        t = time.perf_counter()
        unary(msg)
        lat[i] = time.perf_counter() - t
    out["unary serial p50"], out["unary serial p99"] = np.percentile(lat, [50, 99]) * 1e3
    for i in range(n):  # as the client calls: a future, whose answer comes on gRPC's
        t = time.perf_counter()  # channel-spin thread, started anew when the channel idles
        unary.future(msg).result()
        lat[i] = time.perf_counter() - t
    out["unary future serial p50"], out["unary future serial p99"] = \
        np.percentile(lat, [50, 99]) * 1e3
    sem = threading.Semaphore(window)
    t0 = time.perf_counter()
    for _ in range(n * 4):
        sem.acquire()
        unary.future(msg).add_done_callback(lambda f: sem.release())
    for _ in range(window):
        sem.acquire()
    out["unary pipelined msg/s"] = n * 4 / (time.perf_counter() - t0)

    q: queue.SimpleQueue = queue.SimpleQueue()
    answers = stream(iter(q.get, None))
    for _ in range(200):
        q.put(msg)
        next(answers)
    for i in range(n):
        t = time.perf_counter()
        q.put(msg)
        next(answers)
        lat[i] = time.perf_counter() - t
    out["stream serial p50"], out["stream serial p99"] = np.percentile(lat, [50, 99]) * 1e3
    t0 = time.perf_counter()
    sent = got = 0
    total = n * 4
    while got < total:
        while sent < total and sent - got < window:
            q.put(msg)
            sent += 1
        next(answers)
        got += 1
    out["stream pipelined msg/s"] = total / (time.perf_counter() - t0)
    q.put(None)
    ch.close()
    return out


def aio_client(port: int, n: int, window: int) -> dict[str, float]:
    async def main() -> dict[str, float]:
        out: dict[str, float] = {}
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", OPTS) as ch:
            unary = ch.unary_unary("/bench.Echo/Echo")
            msg = b"x" * KiB
            for _ in range(200):
                await unary(msg)
            lat = np.empty(n)
            for i in range(n):
                t = time.perf_counter()
                await unary(msg)
                lat[i] = time.perf_counter() - t
            out["unary serial p50"], out["unary serial p99"] = \
                np.percentile(lat, [50, 99]) * 1e3
            sem = asyncio.Semaphore(window)

            async def one() -> None:
                async with sem:
                    await unary(msg)

            t0 = time.perf_counter()
            await asyncio.gather(*(one() for _ in range(n * 4)))
            out["unary pipelined msg/s"] = n * 4 / (time.perf_counter() - t0)
            call = ch.stream_stream("/bench.Echo/EchoStream")()
            for _ in range(200):
                await call.write(msg)
                await call.read()
            for i in range(n):
                t = time.perf_counter()
                await call.write(msg)
                await call.read()
                lat[i] = time.perf_counter() - t
            out["stream serial p50"], out["stream serial p99"] = \
                np.percentile(lat, [50, 99]) * 1e3
            total = n * 4

            async def writer() -> None:
                for _ in range(total):
                    await sem.acquire()
                    await call.write(msg)

            async def reader() -> None:
                for _ in range(total):
                    await call.read()
                    sem.release()

            t0 = time.perf_counter()
            await asyncio.gather(writer(), reader())
            out["stream pipelined msg/s"] = total / (time.perf_counter() - t0)
            await call.done_writing()
        return out

    return asyncio.run(main())


def main() -> None:
    if sys.argv[1:2] == ["serve"]:
        (serve_aio if sys.argv[2] == "aio" else serve_threaded)(int(sys.argv[3]))
        return
    from bk_spark.sandbox import free_port, stop_pid, wait_for_port

    n = int(sys.argv[sys.argv.index("--n") + 1]) if "--n" in sys.argv else 3000
    window = int(sys.argv[sys.argv.index("--window") + 1]) if "--window" in sys.argv else 64
    rows: dict[str, dict[str, float]] = {}
    for api in ("threaded", "aio", "threaded", "aio"):  # alternating, fresh servers
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-m", "bench.transport_ab", "serve", api,
                                 str(port)])
        try:
            wait_for_port(port, 20, proc)
            got = (threaded_client if api == "threaded" else aio_client)(port, n, window)
        finally:
            stop_pid(proc.pid)
            proc.wait()
        for k, v in got.items():
            rows.setdefault(f"{api} {k}", {}).setdefault("runs", []).append(v)  # type: ignore[attr-defined]
    print("| figure | run 1 | run 2 |")
    print("|---|---|---|")
    for k, v in rows.items():
        runs = v["runs"]
        fmt = "{:,.0f}" if "msg/s" in k else "{:.3f} ms"
        print(f"| {k} | " + " | ".join(fmt.format(r) for r in runs) + " |")  # type: ignore[union-attr]


if __name__ == "__main__":
    main()
