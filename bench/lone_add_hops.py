"""Where a lone add's time goes on the client: per-hop timestamps (issue 28, §1).

One writer adds 1 KiB entries one at a time (E3 Qw2 Qa2, three sandbox bookies, password
ledger), and each hop of the request path is timestamped by wrapping the client's methods
in this process (the wrappers cost ~1 µs each):

  call      ``add_entry`` called
  handed    the round's shipping began (``_ship_round``: the entry id is taken; a lone add
            ships inline on the caller's thread, a later one on the client's I/O loop)
  shipped   the round encoded, the first bookie's share handed to ``BookieClient.send_batch``
  issued    the last bookie's RPC issued (``send_batch`` returned)
  answer1   the first bookie's answer reached the client (``_batch_done``)
  answer2   the second one (Qa = 2: the add is decided here)
  decided   ``_deliver`` returned: acknowledgement counted and the future completed
  woken     the caller's ``result()`` returned

Also measured in the same run, as references: one raw gRPC unary round trip (1 KiB, to a
trivial server) and one fdatasync'd 1 KiB append. ``--spy DIR`` records py-spy profiles of
this process and of one bookie while the adds run (raw collapsed stacks, 1000 Hz).

Run: ``python -m bench.lone_add_hops [--adds N] [--spy DIR]`` (starts its own sandbox).
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

KiB = 1024
HOPS = ("handed", "shipped", "issued", "answer1", "answer2", "decided", "woken")


def _wrap(cls: type, name: str, before: str | None = None, after: str | None = None,
          stamps: dict | None = None) -> None:
    """Record ``stamps[before]`` on entry (first time per add) and ``stamps[after]`` on
    exit of ``cls.name``."""
    orig = getattr(cls, name, None)
    if orig is None:
        return
    assert stamps is not None

    @functools.wraps(orig)
    def wrapped(*args, **kwargs):  # type: ignore[no-untyped-def]
        if before is not None:
            key = before
            if key == "answer1" and "answer1" in stamps:
                key = "answer2"
            stamps.setdefault(key, time.perf_counter())
        try:
            return orig(*args, **kwargs)
        finally:
            if after == "issued":  # the last bookie's
                stamps[after] = time.perf_counter()
            elif after is not None:
                stamps.setdefault(after, time.perf_counter())

    setattr(cls, name, wrapped)


def measure(uri: str, n: int) -> dict[str, np.ndarray]:
    """Per-hop durations (s) of ``n`` serial adds: hop name -> array."""
    from bk_spark.core import BookKeeper
    from bk_spark.core.ledger import LedgerHandle
    from bk_spark.io.bookie_client import BookieClient

    stamps: dict[str, float] = {}
    _wrap(LedgerHandle, "_ship_round", before="handed", stamps=stamps)
    _wrap(LedgerHandle, "_send", before="shipped", stamps=stamps)
    _wrap(BookieClient, "send_batch", after="issued", stamps=stamps)
    _wrap(BookieClient, "_batch_done", before="answer1", stamps=stamps)
    _wrap(LedgerHandle, "_deliver", after="decided", stamps=stamps)
    out: dict[str, list[float]] = {h: [] for h in HOPS}
    out["total"] = []
    with BookKeeper(uri) as bk:
        lh = bk.create_ledger(3, 2, 2, password=b"p")
        data = b"h" * KiB
        for _ in range(50):
            lh.add_entry(data)
        for _ in range(n):
            stamps.clear()
            t0 = time.perf_counter()
            lh.add_entry(data)
            t_end = time.perf_counter()
            time.sleep(0.002)  # late answers (the third bookie's, the LAC) land before the next
            stamps["woken"] = t_end
            prev = t0
            for h in HOPS:
                t = stamps.get(h, prev)
                out[h].append(t - prev)
                prev = max(prev, t)
            out["total"].append(t_end - t0)
        lh.close()
    return {k: np.asarray(v) for k, v in out.items()}


def main() -> None:
    from bench.__main__ import disk_append_rate, grpc_round_trips
    from bk_spark.sandbox import Sandbox, free_port

    n = int(sys.argv[sys.argv.index("--adds") + 1]) if "--adds" in sys.argv else 1000
    spy = Path(sys.argv[sys.argv.index("--spy") + 1]) if "--spy" in sys.argv else None
    with tempfile.TemporaryDirectory(prefix="bk-hops-") as tmp:
        calls, _ = grpc_round_trips(1.0)
        fsync_s = 1.0 / disk_append_rate(Path(tmp), 1, seconds=1.0)
        sb = Sandbox(Path(tmp) / "sandbox", n_bookies=3, zk_port=free_port(),
                     first_bookie_port=0)
        sb.start()
        procs = []
        try:
            if spy is not None:
                spy.mkdir(parents=True, exist_ok=True)
                exe = str(Path(sys.executable).parent / "py-spy")
                for name, pid in (("client", os.getpid()), ("bookie", sb.bookies[0].proc.pid)):
                    procs.append(subprocess.Popen(
                        [exe, "record", "--nonblocking", "-r", "1000", "-f", "raw",
                         "--threads", "-o", str(spy / f"{name}.txt"), "--pid", str(pid)],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                time.sleep(1.0)
            hops = measure(sb.metadata_service_uri, n)
        finally:
            for p in procs:
                p.send_signal(2)
                p.wait(30)
            sb.stop()
    rt = 1.0 / calls
    total = hops["total"]
    print(f"{n} lone adds, 1 KiB, E3 Qw2 Qa2: p50 {np.median(total) * 1e3:.3f} ms, "
          f"p99 {np.percentile(total, 99) * 1e3:.3f} ms")
    print(f"references: raw gRPC round trip {rt * 1e3:.3f} ms, fdatasync'd append "
          f"{fsync_s * 1e3:.3f} ms; lone add p50 / (round trip + fsync) = "
          f"{np.median(total) / (rt + fsync_s):.2f}x")
    print("| hop (from the previous) | p50 ms | mean ms | p99 ms |")
    print("|---|---|---|---|")
    for h in HOPS:
        v = hops[h] * 1e3
        print(f"| {h} | {np.median(v):.3f} | {v.mean():.3f} | {np.percentile(v, 99):.3f} |")


if __name__ == "__main__":
    main()
