"""Log appends vs ledger adds, A/B on fresh processes (issue 17, point 2).

    flock /tmp/bk-heavy.lock .venv/bin/python -m bench.log_profile --pairs 3 [--spy DIR]

Each pair starts a fresh 3-bookie sandbox and runs ``bench.__main__.ledger_add`` and
``bench.__main__.log_append`` (100k entries of 1 KiB, 2000 in flight, E3 Qw2 Qa2, the log
rolling every 20,000 entries), each in a fresh client process; the order alternates between
pairs (``--base DIR``: each pair also runs the log append of the code in ``DIR``). Each
run prints its rate and the client process's CPU per entry; ``--spy DIR`` also
records each client's measured part with py-spy (raw collapsed stacks, 1000 Hz,
``--nonblocking``, attached by the client to itself) into ``DIR``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child(kind: str, uri: str, n: int, roll: int, spy: str) -> None:
    import os
    import signal

    from bench.__main__ import ledger_add, log_append
    from bk_spark.allocator import tune_allocator

    tune_allocator()
    recorder = None
    if spy:  # py-spy attached to this process for the measured part only
        recorder = subprocess.Popen(
            [str(Path(sys.executable).parent / "py-spy"), "record", "--nonblocking",
             "--threads", "--format", "raw", "--rate", "1000", "-o", spy,
             "--pid", str(os.getpid())], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
    t0, c0 = time.perf_counter(), os.times()
    if kind == "ledger":
        rate = ledger_add(uri, n)[0]
        extra = ""
    else:
        rate, nledgers = log_append(uri, n, roll)
        extra = f" ({nledgers} ledgers)"
    c1, wall = os.times(), time.perf_counter() - t0
    if recorder is not None:
        recorder.send_signal(signal.SIGINT)
        recorder.wait(30)
    cpu = (c1.user - c0.user) + (c1.system - c0.system)
    print(f"RESULT {kind} {rate:.0f} {cpu / n * 1e6:.1f} {cpu / wall:.2f}{extra}", flush=True)


def run_child(kind: str, uri: str, n: int, roll: int, spy: Path | None, tag: str,
              root: Path = ROOT) -> tuple[float, float, float]:
    out_file = ""
    if spy is not None:
        spy.mkdir(parents=True, exist_ok=True)
        out_file = str(spy / f"{tag}-{kind}.txt")
    cmd = [sys.executable, "-m", "bench.log_profile", "--child", kind, uri, str(n), str(roll),
           out_file]
    out = subprocess.run(cmd, cwd=root, capture_output=True, text=True, check=True).stdout
    line = next(x for x in out.splitlines() if x.startswith("RESULT"))
    _, _, rate, us, cores = line.split()[:5]
    return float(rate), float(us), float(cores)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--roll", type=int, default=20_000)
    p.add_argument("--spy", type=Path, default=None)
    p.add_argument("--child", nargs=5, default=None)
    p.add_argument("--base", type=Path, default=None,
                   help="a checkout of the code before (e.g. a worktree of main, with this "
                        "file copied into its bench/): each pair also runs its log append")
    a = p.parse_args()
    if a.child:
        kind, uri, n, roll, spy = a.child
        child(kind, uri, int(n), int(roll), spy)
        return
    from bk_spark.sandbox import Sandbox, free_port

    ratios, base_ratios = [], []
    for rep in range(a.pairs):
        with tempfile.TemporaryDirectory(prefix="bk-logprof-", dir=ROOT) as tmp:
            sb = Sandbox(Path(tmp) / "sandbox", n_bookies=3, zk_port=free_port(),
                         first_bookie_port=0)
            sb.start()
            try:
                order = ("ledger", "log") if rep % 2 == 0 else ("log", "ledger")
                if a.base is not None:
                    order = (*order, "base") if rep % 2 == 0 else ("base", *order)
                got = {k: run_child("log" if k == "base" else k, sb.metadata_service_uri,
                                    a.n, a.roll, a.spy, f"pair{rep + 1}-{k}",
                                    a.base if k == "base" else ROOT) for k in order}
            finally:
                sb.stop()
                shutil.rmtree(Path(tmp) / "sandbox", ignore_errors=True)
        (lr, lus, lc), (gr, gus, gc) = got["ledger"], got["log"]
        ratios.append(gr / lr)
        base = ""
        if "base" in got:
            br, bus, bc = got["base"]
            base_ratios.append(br / lr)
            base += (f"; base log {br:,.0f} e/s ({bus:.1f} us CPU/entry, {bc:.2f} cores): "
                     f"{br / lr:.2f}x")
        print(f"pair {rep + 1} ({' then '.join(order)}): ledger {lr:,.0f} e/s "
              f"({lus:.1f} us CPU/entry, {lc:.2f} cores), log {gr:,.0f} e/s "
              f"({gus:.1f} us CPU/entry, {gc:.2f} cores): {gr / lr:.2f}x{base}", flush=True)
    print(f"median ratio {statistics.median(ratios):.2f}x "
          f"(runs {' '.join(f'{r:.2f}' for r in ratios)})")
    if base_ratios:
        print(f"base median ratio {statistics.median(base_ratios):.2f}x "
              f"(runs {' '.join(f'{r:.2f}' for r in base_ratios)})")


if __name__ == "__main__":
    main()
