"""The bookie's add path alone (issue 28, §1 and §3): throughput, lone-add latency, CPU.

    python -m bench.bookie_path [--runs 3] [--n 100000] [--spy DIR] [--ledger]
    python bench/bookie_path.py ...   (the A/B form: the tree on PYTHONPATH is measured)

Each run starts a fresh bookie process (no ZooKeeper) and measures, beside same-run
references:

* ``bookie add 1 KiB, 2000 in flight``: :func:`bench.__main__.bookie_add` (the `make bench`
  figure) against the disk's batched append rate (256 records per fdatasync, the better of
  appending and overwriting a preallocated file, as `make bench` compares), the bookie's
  and the client's CPU per entry from ``/proc/<pid>/stat``;
* a lone add: serial ``AddEntries`` of one 1 KiB entry through a bare gRPC stub (no
  BookieClient: the bookie's share of a lone add), p50 / p99, against one raw gRPC unary
  round trip (``bench/echo_server.py``) plus one fdatasync of a 1 KiB overwrite of a
  preallocated file (what a journal sync costs);
* ``writer add 1 KiB, 2000 in flight``: the same with the client framing its entries as a
  ledger writer does (:meth:`EntryCodec.frame_run`, crc32c digests, then ``send_batch``),
  in whichever format the tree on ``PYTHONPATH`` sends (packed records, or ``Entry``
  messages before issue 28's packed adds), so an A/B of two trees compares their wire
  formats end to end;
* ``--ledger``: after each bookie run, a ledger E3/Qw2/Qa2 (3 sandbox bookies, ZooKeeper)
  taking the same adds (:func:`bench.__main__.ledger_add`), with the CPU per entry of the
  client and of each bookie;
* ``--spy DIR``: a py-spy record (``--threads``) of the bookie (and, with ``--ledger``, of
  the first sandbox bookie and the client) during the throughput runs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc

# Run as a file (the A/B form), ``bench`` and ``bk_spark`` both come from PYTHONPATH's tree.
from bench.__main__ import (
    ROOT,
    KiB,
    _AddTally,
    bookie_add,
    disk_append_rate,
    ledger_add,
    lone_adds,
    pct,
)


def writer_add(bookie_id: str, n: int, size: int = KiB, in_flight: int = 2000
               ) -> tuple[float, float, float, float]:
    """:func:`bench.__main__.bookie_add` with the entries framed as a ledger writer frames
    them (:meth:`EntryCodec.frame_run`, crc32c): ``(e/s, MB/s, p50 ms, p99 ms)``."""
    from bk_spark.io.bookie_client import BookieClient
    from bk_spark.io.entry import EntryCodec
    from bk_spark.protocol.digest import DigestManager

    client = BookieClient(bookie_id)
    codec = EntryCodec(2, DigestManager("crc32c", b""))  # bookie_add writes ledger 1
    tally = _AddTally(n, in_flight)
    data = b"p" * size
    chunk = max(in_flight // 2, 1)

    class Sink:
        def __init__(self, t: float) -> None:
            self.t = t

        def on_added(self, tokens: list, err) -> None:  # type: ignore[no-untyped-def]
            tally.record(len(tokens), err, self.t)

    t0 = time.perf_counter()
    length = 0
    try:
        for first in range(0, n, chunk):
            ids = range(first, min(first + chunk, n))
            for _ in ids:
                tally.window.acquire()
            wire, ends = codec.frame_run(first, first - 1, length, [data] * len(ids))
            length = ends[-1]
            client.send_batch(2, b"k", wire, list(ids), Sink(time.perf_counter()))
        tally.finish()
    finally:
        client.close()
    dt = time.perf_counter() - t0
    return n / dt, n * size / dt / 1e6, pct(tally.lat, 0.5) * 1e3, pct(tally.lat, 0.99) * 1e3


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads)."""
    return sum(proc_user_sys_s(pid))


def proc_user_sys_s(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of a process (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def fdatasync_p50(directory: Path, n: int = 300) -> float:
    """Seconds of one 1 KiB overwrite + fdatasync of a preallocated file (median)."""
    path = directory / "sync.bin"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.pwrite(fd, b"\0" * (4 << 20), 0)
        os.fsync(fd)
        rec = b"r" * KiB
        lat = []
        for i in range(n):
            t = time.perf_counter()
            os.pwrite(fd, rec, (i * KiB) % (4 << 20))
            os.fdatasync(fd)
            lat.append(time.perf_counter() - t)
        return statistics.median(lat)
    finally:
        os.close(fd)
        path.unlink()


def echo_p50(n: int = 1000) -> float:
    """Seconds of one raw unary gRPC round trip with 1 KiB (median), serial."""
    from bk_spark.sandbox import free_port, stop_pid, wait_for_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "echo_server.py"), str(port)])
    try:
        wait_for_port(port, 20, proc)
        ch = grpc.insecure_channel(f"127.0.0.1:{port}")
        echo = ch.unary_unary("/bench.Echo/Echo")
        small = b"x" * KiB
        for _ in range(100):
            echo(small)
        lat = []
        for _ in range(n):
            t = time.perf_counter()
            echo(small)
            lat.append(time.perf_counter() - t)
        ch.close()
        return statistics.median(lat)
    finally:
        stop_pid(proc.pid)
        proc.wait()


def spy_on(spy: Path | None, pid: int, name: str) -> subprocess.Popen | None:
    """Start ``py-spy record --threads`` of ``pid`` into ``spy/name.txt`` (None: no spy)."""
    if spy is None:
        return None
    spy.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [os.environ.get("PYSPY", "py-spy"), "record", "--threads", "--nonblocking",
         "-r", "200", "-f", "raw", "-o", str(spy / f"{name}.txt"), "--pid", str(pid)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop_spies(spies: list[subprocess.Popen | None]) -> None:
    for p in spies:
        if p is not None:
            p.send_signal(2)
    for p in spies:
        if p is not None:
            p.wait(30)


def measured(fn, pids: list[int], n: int, spies: list) -> tuple[tuple, list[float]]:
    """``fn()``'s result and the CPU microseconds per entry (``n``) of each of ``pids``."""
    if any(spies):
        time.sleep(1.0)  # py-spy attached
    before = [proc_user_sys_s(p) for p in pids]
    try:
        result = fn()
    finally:
        stop_spies(spies)
    after = [proc_user_sys_s(p) for p in pids]
    return result, [CpuPerEntry((u1 - u0) / n * 1e6, (s1 - s0) / n * 1e6)
                    for (u0, s0), (u1, s1) in zip(before, after, strict=True)]


class CpuPerEntry(float):
    """Microseconds of CPU per entry (user + system), printed as ``total (u user, s sys)``."""

    def __new__(cls, user: float, system: float) -> CpuPerEntry:
        self = super().__new__(cls, user + system)
        self.user, self.system = user, system
        return self

    def __format__(self, spec: str) -> str:
        return (f"{float(self):{spec}} ({self.user:{spec}} user + {self.system:{spec}} "
                f"sys)")


def one_run(tmp: Path, n: int, spy: Path | None, rep: int, ledger: bool) -> dict:
    from bk_spark.sandbox import BookieProcess, Sandbox, free_port

    b = BookieProcess("zk://127.0.0.1:1/unused", tmp / f"bookie-{rep}", port=free_port(),
                      extra_args=["--no-register"])
    b.start()
    out: dict = {}
    me = os.getpid()
    try:
        assert b.pid is not None
        lat = lone_adds(b.bookie_id)
        out["lone_p50"], out["lone_p99"] = pct(lat, 0.5), pct(lat, 0.99)
        (eps, _mbs, p50, p99), (cpu, client) = measured(
            lambda: writer_add(b.bookie_id, n), [b.pid, me], n,
            [spy_on(spy, b.pid, f"bookie-{rep}"), spy_on(spy, me, f"bookie-client-{rep}")])
        out.update(eps=eps, p50=p50, p99=p99, cpu_us=cpu, client_us=client)
        (beps, *_), _ = measured(lambda: bookie_add(b.bookie_id, n), [b.pid], n, [])
        out["bench_eps"] = beps
    finally:
        b.stop()
        shutil.rmtree(tmp / f"bookie-{rep}", ignore_errors=True)
    if ledger:
        sb = Sandbox(tmp / f"sandbox-{rep}", n_bookies=3, zk_port=free_port(),
                     first_bookie_port=0, bookie_args=["--no-offload"])
        sb.start()
        try:
            pids = [bk.pid for bk in sb.bookies]
            (leps, _m, lp50, lp99, _lid), cpus = measured(
                lambda: ledger_add(sb.metadata_service_uri, n), [me, *pids], n,
                [spy_on(spy, pids[0], f"ledger-bookie-{rep}"),
                 spy_on(spy, me, f"ledger-client-{rep}")])
            out.update(leps=leps, lp50=lp50, lp99=lp99, lclient_us=cpus[0],
                       lbookies_us=cpus[1:])
        finally:
            sb.stop()
            shutil.rmtree(tmp / f"sandbox-{rep}", ignore_errors=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--spy", type=Path)
    ap.add_argument("--ledger", action="store_true")
    args = ap.parse_args()
    from bk_spark.allocator import tune_allocator

    tune_allocator()
    with tempfile.TemporaryDirectory(prefix="bk-bpath-", dir=ROOT) as tmpd:
        tmp = Path(tmpd)
        sync = fdatasync_p50(tmp)
        rt = echo_p50()
        disk = max(disk_append_rate(tmp, 256), disk_append_rate(tmp, 256, preallocated=True))
        print(f"reference: raw gRPC round trip p50 {rt * 1e3:.3f} ms, 1 KiB fdatasync p50 "
              f"{sync * 1e3:.3f} ms, sum {(rt + sync) * 1e3:.3f} ms; disk 1 KiB records "
              f"256/fdatasync {disk:,.0f} rec/s (make bench's reference)", flush=True)
        for rep in range(args.runs):
            r = one_run(tmp, args.n, args.spy, rep, args.ledger)
            print(f"run {rep + 1}: writer add 1 KiB 2000 in flight {r['eps']:,.0f} e/s "
                  f"= {r['eps'] / disk:.2f}x disk "
                  f"(p50 {r['p50']:.1f} / p99 {r['p99']:.1f} ms), bookie CPU "
                  f"{r['cpu_us']:.2f} us/entry (client {r['client_us']:.2f}); make bench's "
                  f"bookie add {r['bench_eps']:,.0f} e/s = {r['bench_eps'] / disk:.2f}x; "
                  f"lone add p50 {r['lone_p50'] * 1e3:.3f} / "
                  f"p99 {r['lone_p99'] * 1e3:.3f} ms = {r['lone_p50'] / (rt + sync):.2f}x "
                  f"(round trip + fdatasync)", flush=True)
            if args.ledger:
                print(f"       ledger E3/Qw2/Qa2 {r['leps']:,.0f} e/s = "
                      f"{r['leps'] / r['eps']:.2f}x writer add "
                      f"({r['leps'] / r['bench_eps']:.2f}x bookie add) (p50 {r['lp50']:.1f} / "
                      f"p99 {r['lp99']:.1f} ms), CPU us/entry: client {r['lclient_us']:.2f}, "
                      f"bookies " + " / ".join(f"{c:.2f}" for c in r["lbookies_us"]),
                      flush=True)


if __name__ == "__main__":
    main()
