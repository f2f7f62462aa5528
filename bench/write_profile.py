"""Spark batch writes of an arrow log vs Parquet, A/B with per-process CPU (issue 17, point 4).

    flock /tmp/heavy.lock .venv/bin/python -m bench.write_profile --runs 4 \
        --kinds bk,bk:conf,pq [--read] [--spy DIR] [--perf DIR] [--jfr DIR]

Starts a fresh 3-bookie sandbox and a local[2] SparkSession (``bench.spark_bench``'s),
warms both paths up (two writes of 400,000 rows each: both Python workers, the JIT), then
writes ``bench_frame`` (2,000,000 rows, 5 columns, 2 partitions) once per kind and run, in
alternating order: ``bk`` (an arrow log, Spark's defaults), ``bk:conf`` (an arrow log with
``bench.spark_bench.ARROW_WRITE_CONF``), ``pq`` (Parquet). Each write prints its seconds and
the CPU seconds each process group used meanwhile (the Spark JVM and its busiest threads,
the Python workers, the bookies, ZooKeeper, this process; ``others``: the rest of the
machine), from ``/proc``; the end, each kind's median and its ratios to the Parquet writes
of the same runs. ``--read`` also times a read of each log written (best of 2, noop sink);
``--spy DIR`` records the Python workers and the bookies with py-spy (raw stacks), ``--perf
DIR`` with ``perf record -g``, ``--jfr DIR`` the JVM with Java Flight Recorder, each
during the log writes only.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_TICK = os.sysconf("SC_CLK_TCK")


def _cpu(pid: int) -> float:
    """User + system CPU seconds of ``pid`` (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def _machine() -> float:
    """CPU seconds the whole machine was busy (all cores, since boot)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v[:8]) - v[3] - v[4]) / _TICK


def _threads(pid: int) -> dict[str, float]:
    """CPU seconds of ``pid``'s threads by name (digits dropped: one row per pool)."""
    out: dict[str, float] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                raw = f.read()
        except OSError:
            continue
        name = raw[raw.index("(") + 1:raw.rindex(")")]
        name = "".join(c for c in name if not c.isdigit()).strip(" -#")
        fields = raw.rsplit(")", 1)[1].split()
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / _TICK
    return out


def _children(pid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        if ppid == pid:
            out.append(int(d))
    return out


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        kids = _children(todo.pop())
        out += kids
        todo += kids
    return out


class Groups:
    """The processes whose CPU a write is charged with, by group."""

    def __init__(self, jvm: int, bookies: list[int], zk: int) -> None:
        self.jvm, self.bookies, self.zk = jvm, bookies, zk

    def snapshot(self) -> dict[str, dict[int, float]]:
        workers = [p for p in _descendants(self.jvm)]
        return {"jvm": {self.jvm: _cpu(self.jvm)},
                "py-workers": {p: _cpu(p) for p in workers},
                "bookies": {p: _cpu(p) for p in self.bookies},
                "zk": {self.zk: _cpu(self.zk)},
                "driver-py": {os.getpid(): _cpu(os.getpid())}}

    @staticmethod
    def delta(a: dict[str, dict[int, float]], b: dict[str, dict[int, float]]
              ) -> dict[str, float]:
        return {g: sum(v - a[g].get(p, 0.0) for p, v in b[g].items()) for g in b}


def _spy(pids: list[int], out: Path, tag: str) -> list[subprocess.Popen]:
    exe = str(Path(sys.executable).parent / "py-spy")
    return [subprocess.Popen(
        [exe, "record", "--nonblocking", "--threads", "--format", "raw", "--rate", "250",
         "-o", str(out / f"{tag}-{pid}.txt"), "--pid", str(pid)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for pid in pids]


def _perf(groups: dict[str, list[int]], out: Path, tag: str) -> list[subprocess.Popen]:
    return [subprocess.Popen(
        ["perf", "record", "-F", "299", "-g", "-o", str(out / f"{tag}-{name}.data"), "-p",
         ",".join(map(str, pids))], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for name, pids in groups.items()]


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--kinds", default="bk,bk:conf,pq", help="comma-separated: bk, bk:conf, pq")
    p.add_argument("--read", action="store_true")
    p.add_argument("--spy", type=Path, default=None)
    p.add_argument("--perf", type=Path, default=None)
    p.add_argument("--jfr", type=Path, default=None)
    args = p.parse_args()

    from bench.spark_bench import (
        ARROW_WRITE_CONF,
        _bk,
        _noop,
        _session,
        bench_frame,
        write_bk,
        write_bk_with,
    )
    from bk_spark.sandbox import Sandbox, free_port

    jcmd = str(Path(os.path.realpath(shutil.which("java") or "java")).parent / "jcmd")
    with tempfile.TemporaryDirectory(prefix="bk-wprof-", dir=ROOT) as tmp:
        tmpd = Path(tmp)
        sb = Sandbox(tmpd / "sandbox", n_bookies=3, zk_port=free_port(), first_bookie_port=0)
        sb.start()
        spark = None
        try:
            uri = sb.metadata_service_uri
            spark = _session()
            jvm = int(spark.sparkContext._jvm.ProcessHandle.current().pid())
            df = bench_frame(spark, args.rows)
            parquet = str(tmpd / "bench.parquet")
            for _ in range(2):  # both Python workers, and the JIT of both paths
                write_bk_with(spark, ARROW_WRITE_CONF, bench_frame(spark, 400_000), uri,
                              "warm")
                write_bk(bench_frame(spark, 400_000), uri, "warm")
                bench_frame(spark, 400_000).write.mode("overwrite").parquet(parquet)
            assert sb.zk.proc is not None
            groups = Groups(jvm, [b.pid for b in sb.bookies if b.pid], sb.zk.proc.pid)
            kinds = args.kinds.split(",")
            runs: dict[str, list[float]] = {k: [] for k in kinds}
            a = groups.snapshot()
            time.sleep(2.0)
            d = Groups.delta(a, groups.snapshot())
            print("idle 2 s: cpu-s " + "  ".join(f"{g} {v:.2f}" for g, v in d.items()))
            for i in range(args.runs):
                for kind in (kinds if i % 2 == 0 else kinds[::-1]):
                    tools: list[subprocess.Popen] = []
                    tag = f"run{i}-{kind.replace(':', '-')}"
                    if kind != "pq":
                        if args.spy is not None:
                            args.spy.mkdir(parents=True, exist_ok=True)
                            tools += _spy(_descendants(jvm) + groups.bookies, args.spy, tag)
                        if args.perf is not None:
                            args.perf.mkdir(parents=True, exist_ok=True)
                            tools += _perf({"bookies": groups.bookies,
                                            "workers": _descendants(jvm)}, args.perf, tag)
                        if args.jfr is not None:
                            args.jfr.mkdir(parents=True, exist_ok=True)
                            subprocess.run([jcmd, str(jvm), "JFR.start", "name=w",
                                            "settings=profile"], capture_output=True)
                        if tools:
                            time.sleep(1.0)
                    a, ta, m0 = groups.snapshot(), _threads(jvm), _machine()
                    log = f"bench-{tag}"
                    if kind == "pq":
                        dt = _timed(lambda: df.write.mode("overwrite").parquet(parquet))
                    elif kind == "bk:conf":
                        dt = _timed(lambda: write_bk_with(spark, ARROW_WRITE_CONF, df, uri,
                                                          log))  # noqa: B023
                    else:
                        dt = _timed(lambda: write_bk(df, uri, log))  # noqa: B023
                    b = groups.snapshot()
                    d = Groups.delta(a, b)
                    d["others"] = _machine() - m0 - sum(d.values())
                    tb = _threads(jvm)
                    if args.jfr is not None and kind != "pq":
                        subprocess.run([jcmd, str(jvm), "JFR.stop", "name=w",
                                        f"filename={args.jfr / f'{tag}.jfr'}"],
                                       capture_output=True)
                    for t in tools:
                        t.send_signal(signal.SIGINT)
                    for t in tools:
                        t.wait(30)
                    runs[kind].append(dt)
                    cpu = "  ".join(f"{g} {v:.2f}" for g, v in d.items())
                    print(f"{kind} run {i}: {dt:.2f} s {args.rows / dt:,.0f} rows/s  "
                          f"cpu-s: {cpu}  total {sum(d.values()):.2f}", flush=True)
                    td = sorted(((v - ta.get(k, 0.0), k) for k, v in tb.items()), reverse=True)
                    print("   jvm threads: " + ", ".join(f"{k} {v:.2f}" for v, k in td[:6]
                                                         if v >= 0.02), flush=True)
                    wk = sorted(((v - a["py-workers"].get(q, 0.0), q)
                                 for q, v in b["py-workers"].items()), reverse=True)
                    print("   python workers: " + ", ".join(f"{q} {v:.2f}" for v, q in wk
                                                            if v >= 0.01), flush=True)
                    if args.read and kind != "pq":
                        rt = min(_timed(lambda: _noop(_bk(spark, uri, log)))  # noqa: B023
                                 for _ in range(2))
                        print(f"   read of it (noop sink, best of 2): {rt:.2f} s", flush=True)
            pq = runs.get("pq")
            for kind, ts in runs.items():
                line = f"{kind}: median {statistics.median(ts):.2f} s, runs " + \
                    ", ".join(f"{t:.2f}" for t in ts)
                if pq and kind != "pq":
                    ratios = [q / w for w, q in zip(ts, pq, strict=True)]
                    line += f"; parquet / it: median {statistics.median(ratios):.2f}x (" + \
                        ", ".join(f"{r:.2f}" for r in ratios) + ")"
                print(line, flush=True)
        finally:
            if spark is not None:
                spark.stop()
            sb.stop()
            shutil.rmtree(tmpd / "sandbox", ignore_errors=True)


if __name__ == "__main__":
    main()
