"""The Spark read tasks' own work, without Spark: ``read_partition`` of every partition of
an arrow log and of a raw log, in one process, with its CPU and the bookies' (issue 17,
point 3).

    flock /tmp/heavy.lock .venv/bin/python -m bench.read_tasks --runs 3 [--spy DIR]

A fresh 3-bookie sandbox; the arrow log is written with the data source's own packing
(:func:`bk_spark.datasource.formats.pack_arrow`, the rows of ``bench.spark_bench``'s
frame, two ledgers as two Spark tasks write them), the raw log as 100-byte entries. Each
run reads every planned partition (the planner of a batch read, run here) in turn and
prints wall time, this process's CPU and the bookies' CPU, per format, and what a full
``gc.collect()`` then costs (Spark's worker runs one after every task); then the ensemble
reference (:func:`bench.__main__.ensemble_reads`). ``--spy DIR`` records the last run of
each read with py-spy (this process, 1000 Hz, and the bookies).
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _cpu(pid: int) -> float:
    rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


def arrow_rows(n: int, start: int = 0) -> Any:
    import numpy as np
    import pyarrow as pa

    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.RecordBatch.from_arrays(
        [pa.array(ids), pa.array(ids % 1000), pa.array(ids * 0.5),
         pa.array([f"event-{i}" for i in ids.tolist()]),
         pa.array((1_700_000_000 + ids) * 1_000_000, pa.timestamp("us", tz="UTC"))],
        names=["id", "user", "amount", "name", "ts"])


def write_logs(uri: str, rows: int, raw_rows: int) -> None:
    from pyspark.sql.types import (
        DoubleType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    from bk_spark.core import BookKeeper
    from bk_spark.datasource.formats import FORMAT_PROPERTY, SCHEMA_PROPERTY, pack_arrow
    from bk_spark.log import create_log, open_log_writer

    schema = StructType([StructField("id", LongType(), False),
                         StructField("user", LongType(), False),
                         StructField("amount", DoubleType(), False),
                         StructField("name", StringType(), False),
                         StructField("ts", TimestampType(), True)])
    with BookKeeper(uri) as bk:
        create_log(bk, "arrow", properties={FORMAT_PROPERTY: "arrow",
                                            SCHEMA_PROPERTY: schema.json()})
        half = rows // 2
        for part in range(2):  # two ledgers, as two Spark tasks write them
            w = open_log_writer(bk, "arrow")
            futs = []
            for lo in range(part * half, (part + 1) * half, 100_000):
                for payload in pack_arrow([arrow_rows(min(100_000, rows - lo), lo)]):
                    futs.append(w.append_async(payload))
            for f in futs:
                f.result(60)
            w.close()
        w = open_log_writer(bk, "raw")
        value = b"r" * 100
        futs = [w.append_async(value) for _ in range(raw_rows)]
        for f in futs:
            f.result(60)
        w.close()


def plan(uri: str, log: str) -> tuple[Any, list[Any]]:
    from bk_spark.datasource import BookKeeperDataSource

    ds = BookKeeperDataSource({"metadataServiceUri": uri, "log": log})
    reader = ds.reader(ds.schema())
    return reader, reader.partitions()


def read_all(reader: Any, parts: list[Any]) -> int:
    n = 0
    for p in parts:
        for b in reader.read(p):
            n += b.num_rows
    return n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--raw-rows", type=int, default=200_000)
    ap.add_argument("--spy", type=Path, default=None)
    ap.add_argument("--native", action="store_true", help="py-spy --native (C frames too)")
    ap.add_argument("--only", default="arrow,raw,ensemble")
    args = ap.parse_args()

    from bench.__main__ import ensemble_reads
    from bk_spark.allocator import tune_allocator
    from bk_spark.sandbox import Sandbox, free_port

    tune_allocator()
    tmp = Path(tempfile.mkdtemp(prefix="bk-read-tasks-", dir=ROOT))
    sb = Sandbox(tmp / "sandbox", n_bookies=3, zk_port=free_port(), first_bookie_port=0)
    sb.start()
    try:
        uri = sb.metadata_service_uri
        t0 = time.perf_counter()
        write_logs(uri, args.rows, args.raw_rows)
        print(f"wrote the logs in {time.perf_counter() - t0:.1f} s", flush=True)
        bookies = [b.pid for b in sb.bookies]
        rows = {"arrow": args.rows, "raw": args.raw_rows}
        res: dict[str, list[float]] = {}
        for name in ("arrow", "raw"):
            reader, parts = plan(uri, name)
            print(f"{name}: {len(parts)} partitions of "
                  f"{[sum(s.entries for s in p.slices) for p in parts]} entries", flush=True)
            assert read_all(reader, parts) == rows[name]  # warm-up
        for run in range(args.runs):
            for name in args.only.split(","):
                spy = None
                if args.spy is not None and run == args.runs - 1:
                    args.spy.mkdir(parents=True, exist_ok=True)
                    exe = str(Path(sys.executable).parent / "py-spy")
                    targets = {"client": os.getpid()} | {f"bookie{i}": p
                                                          for i, p in enumerate(bookies)}
                    spy = [subprocess.Popen(
                        [exe, "record", "--threads", "--format", "raw",
                         *(["--native"] if args.native else ["--nonblocking"]),
                         "--rate", "1000", "-o", str(args.spy / f"{name}-{k}.txt"),
                         "--pid", str(p)], stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL) for k, p in targets.items()]
                    time.sleep(1.5)
                b0 = [_cpu(p) for p in bookies]
                c0 = os.times()
                t0 = time.perf_counter()
                if name == "ensemble":
                    rate = ensemble_reads(uri, "raw")
                    dt = args.raw_rows / rate
                else:
                    reader, parts = plan(uri, name)
                    tp = time.perf_counter() - t0
                    assert read_all(reader, parts) == rows[name]
                    dt = time.perf_counter() - t0
                    rate = rows[name] / dt
                wall = time.perf_counter() - t0
                g0 = time.perf_counter()
                freed = gc.collect()
                gc_ms = (time.perf_counter() - g0) * 1e3
                c1 = os.times()
                bcpu = sum(_cpu(p) for p in bookies) - sum(b0)
                if spy is not None:
                    for s in spy:
                        s.send_signal(signal.SIGINT)
                    for s in spy:
                        s.wait(60)
                cpu = c1.user - c0.user + c1.system - c0.system
                n = rows.get(name, args.raw_rows)
                res.setdefault(name, []).append(rate)
                extra = f" (planning {tp * 1e3:.0f} ms)" if name != "ensemble" else ""
                extra += f" gc.collect {gc_ms:.0f} ms, {freed} freed"
                print(f"run {run + 1} {name:<8} {dt:6.3f} s {rate:>12,.0f} rows/s | client "
                      f"{cpu:.2f} s ({cpu / wall:.2f} cores, {cpu / n * 1e6:.2f} us/row), "
                      f"bookies {bcpu:.2f} s ({bcpu / n * 1e6:.2f} us/row){extra}", flush=True)
        for k, v in res.items():
            print(f"{k:<8} median {statistics.median(v):>12,.0f} rows/s runs "
                  f"{[round(x) for x in v]}")
    finally:
        sb.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
