"""Spark batch reads vs their references, on fresh processes, with where the time goes
(issue 17, point 3).

    flock /tmp/heavy.lock .venv/bin/python -m bench.read_profile --runs 3 [--spy DIR]

One fresh 3-bookie sandbox and one local[2] SparkSession (as ``make bench``): the arrow log
of ``--rows`` rows (5 columns) and the same rows as Parquet, a raw log of ``--raw-rows``
entries of 100 B. After a warm-up of every path, each run times, in alternating order,

* ``spark.read.parquet -> noop`` and the arrow log read ``-> noop``;
* the raw log read ``-> noop`` and the ensemble's own batched read rate of the same entries
  (:func:`bench.__main__.ensemble_reads`);

and prints, for each timed read, the CPU every process took meanwhile (from ``/proc``:
the bookies, ZooKeeper, Spark's JVM, its Python workers, this driver), and the phases
from Spark's event log (query start -> first task, tasks, last task -> query end).
``--spy DIR`` records the last run's reads with py-spy (raw collapsed stacks, 500 Hz):
the Python workers (each ``pyspark.daemon`` with its forked children) and the bookies.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TICK = os.sysconf("SC_CLK_TCK")


# ----------------------------------------------------------------------------- processes
def _procs() -> dict[int, tuple[int, str, float]]:
    """pid -> (parent pid, command line, CPU seconds) of every process now."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
            cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        rest = stat[stat.rindex(")") + 2:].split()
        out[int(d)] = (int(rest[1]), cmd, (int(rest[11]) + int(rest[12])) / TICK)
    return out


def _descendants(procs: dict[int, tuple[int, str, float]], root: int) -> set[int]:
    kids: dict[int, list[int]] = defaultdict(list)
    for pid, (ppid, _c, _t) in procs.items():
        kids[ppid].append(pid)
    out, todo = set(), [root]
    while todo:
        p = todo.pop()
        for k in kids.get(p, ()):
            if k not in out:
                out.add(k)
                todo.append(k)
    return out


class CpuMeter:
    """CPU seconds per process group between :meth:`start` and :meth:`stop` (processes that
    exit meanwhile are not counted: Spark's workers are reused, so few do)."""

    def __init__(self, groups: Callable[[], dict[str, set[int]]]) -> None:
        self.groups = groups
        self._t0: dict[int, float] = {}

    def start(self) -> None:
        self._t0 = {p: t for p, (_pp, _c, t) in _procs().items()}

    def stop(self) -> dict[str, float]:
        now = _procs()
        out: dict[str, float] = {}
        for name, pids in self.groups().items():
            out[name] = sum(now[p][2] - self._t0.get(p, 0.0) for p in pids if p in now)
        return out


# ----------------------------------------------------------------------------- event log
def phases(event_dir: Path, since_ms: float) -> dict[str, float]:
    """From Spark's event log: the last SQL execution started after ``since_ms``: seconds
    from its start to its first task's launch, the tasks' span, from the last task's end to
    its end, and the tasks' run time summed."""
    files = sorted((f for f in event_dir.rglob("*") if f.is_file()),
                   key=lambda p: p.stat().st_mtime)
    if not files:
        return {}
    ex_start = ex_end = None
    launches, finishes, runs = [], [], []
    for line in files[-1].read_text(errors="replace").splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        kind = ev.get("Event", "")
        if kind.endswith("SQLExecutionStart") and ev["time"] >= since_ms:
            ex_start, ex_end = ev["time"], None
            launches, finishes, runs = [], [], []
        elif kind.endswith("SQLExecutionEnd") and ex_start is not None and ex_end is None:
            ex_end = ev["time"]
        elif kind == "SparkListenerTaskEnd" and ex_start is not None and ex_end is None:
            info = ev["Task Info"]
            launches.append(info["Launch Time"])
            finishes.append(info["Finish Time"])
            runs.append(ev["Task Metrics"]["Executor Run Time"])
    if ex_start is None or ex_end is None or not launches:
        return {}
    return {"to_first_task": (min(launches) - ex_start) / 1e3,
            "tasks": (max(finishes) - min(launches)) / 1e3,
            "after_tasks": (ex_end - max(finishes)) / 1e3,
            "task_run_sum": sum(runs) / 1e3, "n_tasks": len(runs),
            "longest_task": max(runs) / 1e3}


# ----------------------------------------------------------------------------- py-spy
class Spy:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.procs: list[subprocess.Popen] = []

    def start(self, tag: str, targets: dict[str, int]) -> None:
        exe = str(Path(sys.executable).parent / "py-spy")
        for name, pid in targets.items():
            self.procs.append(subprocess.Popen(
                [exe, "record", "--nonblocking", "--subprocesses", "--threads",
                 "--format", "raw", "--rate", "250", "-o", str(self.dir / f"{tag}-{name}.txt"),
                 "--pid", str(pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(1.5)

    def stop(self) -> None:
        for p in self.procs:
            p.send_signal(signal.SIGINT)
        for p in self.procs:
            p.wait(60)
        self.procs = []


def _ensemble(uri: str, log: str) -> float:
    from bench.__main__ import ensemble_reads

    return ensemble_reads(uri, log)


# ----------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--raw-rows", type=int, default=200_000)
    ap.add_argument("--spy", type=Path, default=None)
    ap.add_argument("--jfr", type=Path, default=None,
                    help="record the last run's reads in Spark's JVM with Flight Recorder")
    ap.add_argument("--only", default="",
                    help="comma list of: arrow, parquet, memory, raw, ensemble")
    args = ap.parse_args()
    only = set(args.only.split(",")) if args.only else {"arrow", "parquet", "raw", "ensemble"}

    from bench.spark_bench import _bk, _noop, bench_frame, write_bk
    from bk_spark.allocator import tune_allocator
    from bk_spark.sandbox import Sandbox, free_port

    tune_allocator()
    tmp = Path(tempfile.mkdtemp(prefix="bk-read-profile-", dir=ROOT))
    events = tmp / "events"
    events.mkdir()
    sb = Sandbox(tmp / "sandbox", n_bookies=3, zk_port=free_port(), first_bookie_port=0)
    sb.start()
    spark = None
    try:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        from pyspark.sql import SparkSession

        from bench.memory_source import MemorySource
        from bk_spark.datasource import BookKeeperDataSource

        spark = (SparkSession.builder.master("local[2]").appName("bk-read-profile")
                 .config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", "2")
                 .config("spark.eventLog.enabled", "true")
                 .config("spark.eventLog.dir", f"file://{events}")
                 .config("spark.eventLog.compress", "false")
                 .config("spark.eventLog.rolling.enabled", "false")
                 .config("spark.sql.python.filterPushdown.enabled", "true").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(BookKeeperDataSource)
        spark.dataSource.register(MemorySource)
        uri = sb.metadata_service_uri
        jvm_pid = spark.sparkContext._gateway.proc.pid
        bookie_pids = {f"bookie{i}": b.pid for i, b in enumerate(sb.bookies)}
        zk_pid = getattr(getattr(sb.zk, "proc", None), "pid", None)

        def groups() -> dict[str, set[int]]:
            procs = _procs()
            workers = {p for p in _descendants(procs, jvm_pid) if "python" in procs[p][1]}
            g = {"jvm": {jvm_pid}, "py_workers": workers, "driver": {os.getpid()},
                 "bookies": set(bookie_pids.values())}
            if zk_pid:
                g["zk"] = {zk_pid}
            return g

        meter = CpuMeter(groups)
        arrow_log, raw_log = "profile-arrow", "profile-raw"
        parquet = str(tmp / "bench.parquet")
        df = bench_frame(spark, args.rows)
        t0 = time.perf_counter()
        write_bk(df, uri, arrow_log)
        print(f"wrote arrow log in {time.perf_counter() - t0:.1f} s", flush=True)
        df.write.mode("overwrite").parquet(parquet)
        raw = spark.range(0, args.raw_rows, 1, 2).selectExpr(
            "CAST(REPEAT('r', 100) AS BINARY) AS value")
        t0 = time.perf_counter()
        write_bk(raw, uri, raw_log, entryFormat="raw")
        print(f"wrote raw log in {time.perf_counter() - t0:.1f} s", flush=True)
        assert _bk(spark, uri, arrow_log).count() == args.rows
        assert _bk(spark, uri, raw_log).count() == args.raw_rows

        reads: dict[str, Callable[[], Any]] = {
            "arrow": lambda: _noop(_bk(spark, uri, arrow_log)),
            "parquet": lambda: _noop(spark.read.parquet(parquet)),
            "memory": lambda: _noop(spark.read.format("bench_memory")
                                    .option("rows", args.rows).load()),
            "raw": lambda: _noop(_bk(spark, uri, raw_log)),
            "ensemble": lambda: _ensemble(uri, raw_log),
        }
        rows = {"arrow": args.rows, "parquet": args.rows, "memory": args.rows,
                "raw": args.raw_rows,
                "ensemble": args.raw_rows}
        for _ in range(3):  # warm-up: workers, daemons, clients, page cache, the JIT
            for name in reads:
                if name in only:
                    reads[name]()
        results: dict[str, list[float]] = defaultdict(list)
        spy = Spy(args.spy) if args.spy else None
        for run in range(args.runs):
            order = [n for n in ("arrow", "parquet", "memory", "raw", "ensemble") if n in only]
            if run % 2:
                order = [n for n in ("memory", "parquet", "arrow", "ensemble", "raw")
                         if n in only]
            for name in order:
                last = spy is not None and run == args.runs - 1
                if last:
                    targets = dict(bookie_pids)
                    procs = _procs()
                    for p in _descendants(procs, jvm_pid):
                        if procs[p][1].rstrip().endswith("pyspark.daemon pyspark.worker") and \
                                procs[p][0] == jvm_pid:
                            targets[f"daemon{p}"] = p
                    if name == "ensemble":
                        targets = dict(bookie_pids)
                    spy.start(f"{name}", targets)
                jfr = args.jfr is not None and run == args.runs - 1 and name != "ensemble"
                if jfr:
                    args.jfr.mkdir(parents=True, exist_ok=True)
                    subprocess.run(["jcmd", str(jvm_pid), "JFR.start", f"name={name}",
                                    "settings=profile",
                                    f"filename={args.jfr / (name + '.jfr')}"],
                                   check=True, capture_output=True)
                since = time.time() * 1000
                meter.start()
                t0 = time.perf_counter()
                out = reads[name]()
                dt = time.perf_counter() - t0
                cpu = meter.stop()
                if jfr:
                    subprocess.run(["jcmd", str(jvm_pid), "JFR.stop", f"name={name}"],
                                   check=True, capture_output=True)
                if last:
                    spy.stop()
                if name == "ensemble":
                    rate = out
                    dt = rows[name] / rate
                else:
                    rate = rows[name] / dt
                results[name].append(rate)
                ph = phases(events, since) if name != "ensemble" else {}
                cpus = " ".join(f"{k} {v:.2f}" for k, v in cpu.items() if v >= 0.005)
                phs = " ".join(f"{k} {v:.2f}" for k, v in ph.items())
                print(f"run {run + 1} {name:<8} {dt:6.3f} s {rate:>12,.0f} rows/s | cpu s: "
                      f"{cpus} | {phs}", flush=True)
        print("== medians")
        med = {k: statistics.median(v) for k, v in results.items()}
        for k, v in results.items():
            print(f"{k:<8} median {med[k]:>12,.0f} rows/s  runs {[round(x) for x in v]}")
        if "arrow" in med and "parquet" in med:
            ratios = [a / p for a, p in zip(results["arrow"], results["parquet"], strict=True)]
            print(f"arrow / parquet: median {statistics.median(ratios):.2f}x "
                  f"runs {[round(r, 2) for r in ratios]}")
        if "memory" in med and "parquet" in med:
            ratios = [a / p for a, p in zip(results["memory"], results["parquet"], strict=True)]
            print(f"memory / parquet: median {statistics.median(ratios):.2f}x "
                  f"runs {[round(r, 2) for r in ratios]}")
        if "raw" in med and "ensemble" in med:
            ratios = [a / p for a, p in zip(results["raw"], results["ensemble"], strict=True)]
            print(f"raw / ensemble: median {statistics.median(ratios):.2f}x "
                  f"runs {[round(r, 2) for r in ratios]}")
    finally:
        if spark is not None:
            spark.stop()
        sb.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
