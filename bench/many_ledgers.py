"""1,000 open ledgers in one client (issue 28's figure): rate, CPU per entry, profiles.

    python -m bench.many_ledgers [--runs 2] [--seconds 3] [--spy DIR] [--ledgers 1000]
    python bench/many_ledgers.py ...   (the A/B form: the tree on PYTHONPATH is measured)

Each run starts a fresh sandbox (ZooKeeper + 3 bookies) and measures
:func:`bench.latency.many_ledgers_rate` (``--ledgers`` password ledgers E3/Qw2/Qa2, 2,000
adds of 1 KiB in flight spread round robin over them, closed loop) beside one ledger with
the same window (:func:`bench.latency.windowed_rate`), with the CPU per entry of the client
process and of each bookie from ``/proc/<pid>/stat`` over the timed adds, the client's
per thread (``/proc/self/task``), the bookies' stream requests per entry (their ``Info``)
and the stream messages the client sent. ``--spy DIR``: a py-spy record (``--threads``,
200 Hz, raw) of the client and the first bookie during the many-ledger run (slower: the
spies share the 2 cores). ``--switch-interval S``: the client's GIL switch interval
(diagnosis: what its threads' GIL hand-offs cost).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a file: bench and bk_spark from PYTHONPATH's tree
    sys.path.insert(0, os.environ.get("PYTHONPATH", "").split(os.pathsep)[0] or ".")

from bench.bookie_path import proc_user_sys_s, spy_on, stop_spies  # noqa: E402
from bench.latency import many_ledgers_rate, windowed_rate  # noqa: E402


def _info(uri_bookies: list[str]) -> list[tuple[int, int, int]]:
    """(stream add requests, units, ledger parts of units) served per bookie, as ``Info``
    reports (a bookie that predates units: 0 for both)."""
    from bk_spark.io.bookie_client import BookieClient

    out = []
    for b in uri_bookies:
        c = BookieClient(b)
        try:
            resp = c.info()
            out.append((int(getattr(resp, "stream_add_requests", 0)),
                        int(getattr(resp, "stream_add_units", 0)),
                        int(getattr(resp, "stream_unit_parts", 0))))
        finally:
            c.close()
    return out


def thread_cpu() -> dict[str, float]:
    """CPU seconds of each of this process's threads (by name; gRPC's and other unnamed
    threads together)."""
    import re
    import threading

    names = {t.native_id: re.sub(r"\d+", "N", t.name) for t in threading.enumerate()}
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        name = names.get(int(task.name), "other (native)")
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def one_run(tmp: Path, seconds: float, spy: Path | None, rep: int, n_ledgers: int) -> dict:
    from bk_spark.sandbox import Sandbox, free_port

    sb = Sandbox(tmp / f"sandbox-{rep}", n_bookies=3, zk_port=free_port(),
                 first_bookie_port=0)
    sb.start()
    try:
        uri = sb.metadata_service_uri
        one = windowed_rate(uri, 2000, seconds)
        pids = [os.getpid()] + [b.pid for b in sb.bookies]
        ids = [b.bookie_id for b in sb.bookies]
        marks: dict[str, object] = {}

        def sent(bk: object) -> int:  # stream messages the client sent so far
            total = 0
            for c in list(getattr(bk.bookies, "_clients", {}).values()):  # type: ignore[attr-defined]
                st = getattr(c, "_stream", None)
                total += getattr(st, "messages_sent", 0) if st is not None else 0
            return total

        def timed(n: int | None, bk: object) -> None:  # around the timed adds only
            if n is None:
                marks["spies"] = [spy_on(spy, sb.bookies[0].pid, f"many-bookie-{rep}"),
                                  spy_on(spy, os.getpid(), f"many-client-{rep}")
                                  ] if spy else []
                if spy:
                    time.sleep(1.0)  # attached
                marks["req0"] = _info(ids)
                marks["before"] = [proc_user_sys_s(p) for p in pids]
                marks["threads0"] = thread_cpu()
                marks["msgs0"] = sent(bk)
                marks["t0"] = time.perf_counter()
            else:
                marks["wall"] = time.perf_counter() - marks["t0"]  # type: ignore[operator]
                marks["after"] = [proc_user_sys_s(p) for p in pids]
                marks["threads1"] = thread_cpu()
                stop_spies(marks["spies"])  # type: ignore[arg-type]
                marks["req1"] = _info(ids)
                marks["n"] = n
                marks["msgs"] = sent(bk) - marks["msgs0"]  # type: ignore[operator]

        rate, threads = many_ledgers_rate(uri, n_ledgers=n_ledgers, seconds=seconds,
                                          timed=timed)
        before, after, wall = marks["before"], marks["after"], marks["wall"]
        req0, req1, n = marks["req0"], marks["req1"], marks["n"]
        cpu = [((u1 - u0) + (s1 - s0)) / n * 1e6
               for (u0, s0), (u1, s1) in zip(before, after, strict=True)]
        reqs = [(r1[0] - r0[0]) / n for r0, r1 in zip(req0, req1, strict=True)]
        units = [r1[1] - r0[1] for r0, r1 in zip(req0, req1, strict=True)]
        parts = [(r1[2] - r0[2]) / n for r0, r1 in zip(req0, req1, strict=True)]
        t0_, t1_ = marks["threads0"], marks["threads1"]
        per_thread = {k: (v - t0_.get(k, 0.0)) / n * 1e6 for k, v in t1_.items()}  # type: ignore[union-attr]
        return {"msgs": marks["msgs"], "per_thread": per_thread, "one": one, "many": rate,
                "threads": threads, "cpu": cpu, "wall": wall, "n": n, "reqs": reqs,
                "units": units, "parts": parts}
    finally:
        sb.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--ledgers", type=int, default=1000)
    ap.add_argument("--spy", type=Path)
    ap.add_argument("--switch-interval", type=float, default=0.0,
                    help="diagnosis: the client process's sys.setswitchinterval (s)")
    args = ap.parse_args()
    if args.switch_interval > 0:
        sys.setswitchinterval(args.switch_interval)
    from bk_spark.allocator import tune_allocator

    tune_allocator()
    with tempfile.TemporaryDirectory(prefix="bk-many-") as tmp:
        for rep in range(args.runs):
            r = one_run(Path(tmp), args.seconds, args.spy, rep, args.ledgers)
            cpu = ", ".join(f"{c:.1f}" for c in r["cpu"])
            reqs = ", ".join(f"{q:.2f}" for q in r["reqs"])
            print(f"run {rep}: one ledger {r['one']:,.0f} e/s; {args.ledgers} ledgers "
                  f"{r['many']:,.0f} e/s ({r['many'] / r['one']:.2f}x), {r['threads']} "
                  f"threads; CPU us/entry client, bookies: {cpu}; stream requests per "
                  f"entry per bookie: {reqs}; stream messages {r['msgs']:,} "
                  f"({sum(r['reqs']) * r['n'] / max(r['msgs'], 1):.1f} requests each); "
                  f"units per bookie: {', '.join(map(str, r['units']))} (ledger parts per "
                  f"entry per bookie: {', '.join(f'{q:.2f}' for q in r['parts'])})",
                  flush=True)
            print("  client threads, CPU us/entry: " + ", ".join(
                f"{k} {v:.1f}" for k, v in sorted(r["per_thread"].items(), key=lambda kv: -kv[1])
                if v >= 0.5), flush=True)


if __name__ == "__main__":
    main()
