"""Where a streaming micro-batch's time goes: append -> row in a foreachBatch sink.

One SparkSession, one sandbox; queries run one after the other, each for ``--seconds``,
with an entry (a row) due every 20 ms, all into the same foreachBatch sink:

* ``bk``: the ``bookkeeper`` source (timed: every ``latestOffset``, ``partitions`` and
  ``read`` call of the source is recorded, see :class:`TimedSource`);
* ``tick``: a trivial Python streaming source (:class:`bench.spark_bench.TickSource`,
  no I/O at all): Spark's own floor for a Python source and a Python sink;
* ``bklacN``: ``bk`` with the writer's client sending its explicit LAC ``N`` ms after it
  fell idle (``BookKeeperConfig.explicit_lac_interval_s``; ``bk``: the default);
* ``rate``: Spark's built-in ``rate-micro-batch`` source (JVM), one row per batch: the
  floor of a micro-batch with a Python sink (no latency: its rows carry no append time).

For each: latency p50 / p90 / p99, and the medians of the query progress' ``durationMs``
over the batches that read rows. ``--conf k=v`` sets Spark confs (repeatable);
``--order bk,tick,bk,tick`` chooses the queries.

Run: ``flock /tmp/heavy.lock .venv/bin/python -m bench.stream_profile``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bk_spark.datasource import BookKeeperDataSource
from bk_spark.datasource.stream import BookKeeperStreamReader

TRACE_ENV = "BK_STREAM_TRACE"


def _trace(what: str, t0: float, **extra: Any) -> None:
    path = os.environ.get(TRACE_ENV)
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"what": what, "at": time.time(), "ms": (time.perf_counter() - t0)
                                * 1e3, "pid": os.getpid(), **extra}) + "\n")


class TimedReader(BookKeeperStreamReader):
    """The source's stream reader, every planning call and read timed into $BK_STREAM_TRACE."""

    def latestOffset(self, start: dict, limit: Any) -> dict:  # noqa: N802 - Spark's name
        t0 = time.perf_counter()
        out = super().latestOffset(start, limit)
        _trace("latestOffset", t0, new=out != start)
        return out

    def partitions(self, start: dict, end: dict) -> list:
        t0 = time.perf_counter()
        out = super().partitions(start, end)
        _trace("partitions", t0, n=len(out))
        return out

    def read(self, partition: Any) -> Any:
        t0 = time.perf_counter()
        rows = 0
        for b in super().read(partition):
            rows += b.num_rows
            yield b
        _trace("read", t0, rows=rows)



class TimedSource(BookKeeperDataSource):
    @classmethod
    def name(cls) -> str:
        return "bookkeeper_timed"

    def streamReader(self, schema: Any) -> Any:  # noqa: N802 - Spark's name
        r = super().streamReader(schema)
        return TimedReader(r.options, r.spec)


def run_query(spark: Any, kind: str, uri: str, ckpt: Path, seconds: float,
              interval_s: float, jfr: Path | None = None) -> dict[str, Any]:
    from bk_spark.core import BookKeeper
    from bk_spark.log import open_log_writer

    lat: list[float] = []
    lat_called: list[float] = []
    collect_s: list[float] = []

    def sink(batch: Any, batch_id: int) -> None:
        called = time.time()
        rows = batch.select("value").collect()
        now = time.time()
        collect_s.append(now - called)
        for r in rows:
            v = bytes(r.value)
            if v != b"start" and kind != "rate":
                sent = float(v.decode())
                lat.append(now - sent)
                lat_called.append(called - sent)

    name = f"prof-{kind}-{time.time_ns()}"
    if kind == "rate":
        src = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 1).load() \
            .selectExpr("CAST(CAST(value AS STRING) AS BINARY) AS value")
    elif kind == "tick":
        src = spark.readStream.format("bench_tick").option(
            "intervalMs", int(interval_s * 1000)).load()
    bk = None
    if kind == "bk":
        bk = BookKeeper(uri)
    elif kind.startswith("bklac"):  # bklacN: the writer's client sends its LAC N ms idle
        from bk_spark.core import BookKeeperConfig

        bk = BookKeeper(uri, BookKeeperConfig(explicit_lac_interval_s=int(kind[5:]) / 1e3))
    w = None
    try:
        if bk is not None:
            w = open_log_writer(bk, name)
            w.append(b"start")
            src = (spark.readStream.format("bookkeeper_timed")
                   .option("metadataServiceUri", uri).option("log", name)
                   .option("startingOffsets", "latest").load())
        q = src.writeStream.foreachBatch(sink).option("checkpointLocation",
                                                       str(ckpt / name)).start()
        try:
            time.sleep(8.0)  # the first batch of a query starts the Python workers
            lat.clear()
            lat_called.clear()
            collect_s.clear()
            t_start = time.time()
            if jfr is not None:
                _jcmd(spark, "JFR.start", f"name={kind}", "settings=profile",
                      f"filename={jfr}")
            stop = time.monotonic() + seconds
            if w is not None:
                while time.monotonic() < stop:
                    w.append_async(repr(time.time()).encode())
                    time.sleep(interval_s)
            else:
                time.sleep(seconds)
            t_end = time.time()
            if jfr is not None:
                _jcmd(spark, "JFR.stop", f"name={kind}")
            time.sleep(2.0)
            progs = [p for p in q.recentProgress
                     if p["numInputRows"] > 0 and
                     t_start <= _ts(p["timestamp"]) <= t_end]
        finally:
            q.stop()
    finally:
        if w is not None:
            w.close()
        if bk is not None:
            bk.close()
    durations: dict[str, list[float]] = {}
    for p in progs:
        for k, v in p["durationMs"].items():
            durations.setdefault(k, []).append(v)
    return {"kind": kind, "lat": lat, "lat_called": lat_called, "collect": collect_s,
            "batches": len(progs),
            "durations": {k: statistics.median(v) for k, v in durations.items()},
            "rows_per_batch": statistics.median(p["numInputRows"] for p in progs)
            if progs else 0}


def _jcmd(spark: Any, *args: str) -> None:
    import subprocess

    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    subprocess.run(["jcmd", str(pid), *args], check=True, capture_output=True)


def _ts(s: str) -> float:
    from datetime import datetime

    return datetime.strptime(s.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def summarize_trace(path: Path, since: float) -> dict[str, str]:
    calls: dict[str, list[float]] = {}
    if not path.exists():
        return {}
    for line in path.read_text().splitlines():
        d = json.loads(line)
        if d["at"] < since:
            continue
        key = d["what"] + ("(new)" if d.get("new") else "(idle)" if "new" in d else "")
        calls.setdefault(key, []).append(d["ms"])
    return {k: f"n={len(v)} median {statistics.median(v):.1f} ms p90 {_pct(v, .9):.1f} ms"
            for k, v in calls.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--order", default="bk,tick,rate,bk,tick")
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--interval", type=float, default=0.02)
    ap.add_argument("--conf", action="append", default=[])
    ap.add_argument("--jfr", type=Path, default=None,
                    help="directory: a JFR recording of the driver JVM per query")
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from bench.spark_bench import TickSource
    from bk_spark.sandbox import Sandbox, free_port

    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="bk-streamprof-", dir=root) as d:
        d = Path(d)
        trace = d / "trace.jsonl"
        os.environ[TRACE_ENV] = str(trace)
        sb = Sandbox(d / "sb", n_bookies=3, zk_port=free_port(), first_bookie_port=0)
        sb.start()
        try:
            b = (SparkSession.builder.master("local[2]").appName("bk-stream-profile")
                 .config("spark.ui.enabled", "false")
                 .config("spark.sql.shuffle.partitions", "2"))
            for c in args.conf:
                k, v = c.split("=", 1)
                b = b.config(k, v)
            spark = b.getOrCreate()
            spark.sparkContext.setLogLevel("ERROR")
            spark.dataSource.register(TimedSource)
            spark.dataSource.register(TickSource)
            try:
                for i, kind in enumerate(args.order.split(",")):
                    since = time.time()
                    jfr = None
                    if args.jfr is not None:
                        args.jfr.mkdir(parents=True, exist_ok=True)
                        jfr = args.jfr / f"{i}-{kind}.jfr"
                    r = run_query(spark, kind, sb.metadata_service_uri, d / "ck",
                                  args.seconds, args.interval, jfr)
                    lat = r["lat"]
                    print(f"== {kind}: {r['batches']} batches with rows, "
                          f"{r['rows_per_batch']} rows/batch (median)")
                    for what, v in (("row collected in the sink", lat),
                                    ("sink called", r["lat_called"])):
                        if v:
                            print(f"   append -> {what}: p50 / p90 / p99 "
                                  f"{_pct(v, .5) * 1e3:.0f} / {_pct(v, .9) * 1e3:.0f} / "
                                  f"{_pct(v, .99) * 1e3:.0f} ms ({len(v)} rows)")
                    if r["collect"]:
                        print(f"   collect() in the sink: median "
                              f"{statistics.median(r['collect']) * 1e3:.0f} ms")
                    print("   durationMs medians: " + ", ".join(
                        f"{k} {v:.0f}" for k, v in sorted(r["durations"].items())))
                    for k, v in summarize_trace(trace, since + 8.0).items():
                        print(f"   {k:22} {v}")
                    sys.stdout.flush()
            finally:
                spark.stop()
        finally:
            sb.stop()


if __name__ == "__main__":
    main()
