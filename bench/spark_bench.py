"""Spark figures for ``make bench``, each beside Spark's own Parquet (or the trigger) in the
same run, on the same rows.

``spark_bench(uri, tmpdir, results)`` needs a running cluster at ``uri``; it starts (or
reuses) a local[2] SparkSession and records:

* batch write of an arrow log vs ``df.write.parquet`` (rows/s), with
  :data:`ARROW_WRITE_CONF` (the setting the README recommends for writes), and with Spark's
  defaults;
* batch read of that log vs ``spark.read.parquet`` of the same rows, into Spark's ``noop``
  sink (rows/s);
* the floor of any Python data source: the same rows from an in-memory Python source
  (``bench.memory_source``) vs Parquet;
* raw read: one entry per row (rows/s), vs the ensemble's own batched read rate of the
  same entries (one client, ``ReadEntries`` striped over the bookies in parallel), and
  that rate with packed reads;
* streaming end-to-end latency: entry appended -> row in a ``foreachBatch`` sink, p50 /
  p99, vs the trigger interval; and with no trigger interval (Spark's default), vs a
  Python streaming source with no I/O in the same run (:class:`TickSource`: Spark's own
  cost of a micro-batch).

Run alone: ``python -m bench.spark_bench zk://127.0.0.1:2181/ledgers``.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition


class ResultSink(Protocol):
    def add(self, what: str, value: str, reference: str, ratio: str) -> None: ...


#: Spark settings the README recommends for writes to the data source, set around the
#: timed writes. Spark 4 caps the Arrow batches it sends a Python writer at
#: ``maxBytesPerBatch`` (64 MB by default) by measuring the batch after EVERY row
#: (``BatchedPythonArrowInput.writeSizedBatch``): for the bench's 5 narrow columns that
#: check took ~60% of the executor threads' CPU of the write (bench/profiles.md). At
#: ``Int.MaxValue`` Spark skips it, and batches are bounded by ``maxRecordsPerBatch``
#: (10,000 rows) only. Parquet's write does not go through it.
ARROW_WRITE_CONF = {"spark.sql.execution.arrow.maxBytesPerBatch": str(2**31 - 1)}


def _session() -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from bk_spark.datasource import BookKeeperDataSource

    spark = (SparkSession.builder.master("local[2]").appName("bk-spark-bench")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.python.filterPushdown.enabled", "true").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(BookKeeperDataSource)
    return spark


def _timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def _bk(spark: Any, uri: str, log: str, **options: Any) -> Any:
    r = spark.read.format("bookkeeper").option("metadataServiceUri", uri).option("log", log)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def _noop(df: Any) -> None:
    df.write.format("noop").mode("overwrite").save()


def stream_latency(spark: Any, uri: str, tmpdir: Path, trigger_s: float | None = 0.5,
                   seconds: float = 20.0, interval_s: float = 0.02, source: str = "bk",
                   **options: str) -> list[float]:
    """Seconds from append to the row in a foreachBatch sink, for entries appended every
    ``interval_s`` while a query with a ``trigger_s`` processing-time trigger runs (None:
    no trigger interval, Spark's default: the next micro-batch as soon as one ends).

    ``source``: ``bk``, the bookkeeper source with ``options``; ``tick``:
    :class:`TickSource` (no I/O), whose row ``i`` is due at ``t0 + i * interval_s`` and
    carries that time: the same-run reference, Spark's own cost of a micro-batch."""
    from bk_spark.core import BookKeeper
    from bk_spark.log import open_log_writer

    log = f"bench-stream-{source}-{time.time_ns()}"
    lat: list[float] = []

    def sink(batch: Any, _batch_id: int) -> None:
        now = time.time()
        for r in batch.select("value").collect():
            v = bytes(r.value)
            if v != b"start":
                lat.append(now - float(v.decode()))

    with BookKeeper(uri) as bk:
        w = None
        if source == "bk":
            w = open_log_writer(bk, log)
            w.append(b"start")
            r = (spark.readStream.format("bookkeeper").option("metadataServiceUri", uri)
                 .option("log", log).option("startingOffsets", "latest"))
            for k, v in options.items():
                r = r.option(k, v)
            src = r.load()
        else:
            spark.dataSource.register(TickSource)
            src = (spark.readStream.format("bench_tick")
                   .option("intervalMs", str(interval_s * 1000)).load())
        writer = (src.writeStream.foreachBatch(sink)
                  .option("checkpointLocation", str(tmpdir / f"{log}-ckpt")))
        if trigger_s is not None:
            writer = writer.trigger(processingTime=f"{int(trigger_s * 1000)} milliseconds")
        q = writer.start()
        try:
            time.sleep(8.0)  # the first micro-batch of a query starts the Python workers
            lat.clear()
            stop = time.monotonic() + seconds
            if w is not None:
                while time.monotonic() < stop:
                    w.append_async(repr(time.time()).encode())
                    time.sleep(interval_s)
                w.close()
                time.sleep(3 * (trigger_s or 0.5) + 2.0)
            else:
                time.sleep(seconds)
        finally:
            q.stop()
    return lat


class TickSource(DataSource):
    """``bench_tick``: a Python streaming source with no I/O, the same-run reference for the
    streaming latency. Row ``i`` is "appended" at ``t0 + i * intervalMs`` and carries that
    time as its value, as the bench's log entries carry theirs; ``latestOffset`` waits (at
    most 250 ms) until the next row is due when none is, as the bookkeeper source waits
    for its log's LAC, so neither polls. What is left is Spark's own cost of a micro-batch
    with a Python source and a Python sink."""

    @classmethod
    def name(cls) -> str:
        return "bench_tick"

    def schema(self) -> str:
        return "value binary"

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _TickReader(float(self.options.get("intervalMs", "20")) / 1e3)


class _TickReader(DataSourceStreamReader):
    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.t0 = time.time()

    def _due(self) -> int:
        """Rows due by now."""
        return int((time.time() - self.t0) / self.interval_s) + 1

    def initialOffset(self) -> dict:  # noqa: N802 - Spark's name
        return {"n": self._due()}

    def latestOffset(self, start: dict, limit: Any) -> dict:  # noqa: N802 - Spark's name
        if self._due() <= start["n"]:  # wait for the next row, as the bookkeeper source
            due = self.t0 + start["n"] * self.interval_s
            time.sleep(min(0.25, max(0.0, due - time.time())))
        return {"n": max(start["n"], self._due())}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        if end["n"] <= start["n"]:
            return []
        return [InputPartition((self.t0, self.interval_s, start["n"], end["n"]))]

    def read(self, partition: InputPartition) -> Any:
        t0, interval_s, lo, hi = partition.value
        values = [repr(t0 + i * interval_s).encode() for i in range(lo, hi)]
        yield pa.RecordBatch.from_arrays([pa.array(values, pa.binary())], ["value"])


def write_bk_with(spark: Any, conf: dict[str, str], frame: Any, uri: str, log: str) -> None:
    """:func:`write_bk` with the session's SQL settings ``conf`` (restored after)."""
    before = {k: spark.conf.get(k, None) for k in conf}
    for k, v in conf.items():
        spark.conf.set(k, v)
    try:
        write_bk(frame, uri, log)
    finally:
        for k, v in before.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


def write_bk(frame: Any, uri: str, log: str, **options: Any) -> None:
    w = frame.write.format("bookkeeper").mode("append") \
        .option("metadataServiceUri", uri).option("log", log)
    for k, v in options.items():
        w = w.option(k, v)
    w.save()


def bench_frame(spark: Any, rows: int) -> Any:
    """The rows every batch figure writes: 5 columns, 2 partitions."""
    return spark.range(0, rows, 1, 2).selectExpr(
        "id", "id % 1000 AS user", "CAST(id AS DOUBLE) * 0.5 AS amount",
        "CONCAT('event-', id) AS name", "TIMESTAMP_SECONDS(1700000000 + id) AS ts")


def batch_vs_parquet(spark: Any, uri: str, df: Any, log: str, parquet: str,
                     warm: Any = None) -> dict[str, float]:
    """Seconds to write ``df`` to arrow log ``log`` (with :data:`ARROW_WRITE_CONF`) and to
    Parquet at ``parquet``, each the best of two writes in alternation (log, Parquet,
    Parquet, log: the machine drifts); ``bk_write_default``: one more write of the log
    with Spark's defaults; and the best of two reads of each into Spark's ``noop`` sink.

    Both paths are warmed up first by writing ``warm`` (default: 1,000 rows of ``df``),
    rows like ``df``'s in as many partitions, so every Python worker runs and the JVM's
    JIT has compiled both paths (a first 2M-row write spent ~1 s of CPU in the JIT
    compiler threads; a 1,000-row warm-up, in one partition, left that and one worker's
    start to the first timed write).
    Used by the local[2] figures and by the cluster's (bench/cluster_bench.py)."""
    rows = df.count()
    warm = df.limit(1000) if warm is None else warm
    write_bk_with(spark, ARROW_WRITE_CONF, warm, uri, f"{log}-warm")
    _noop(_bk(spark, uri, f"{log}-warm"))
    warm.write.mode("overwrite").parquet(parquet)
    _noop(spark.read.parquet(parquet))
    bk_w, pq_w = [], []
    for i in range(2):
        for kind in (("bk", "pq") if i == 0 else ("pq", "bk")):
            if kind == "bk":
                target = log if i == 0 else f"{log}-again"
                bk_w.append(_timed(lambda t=target: write_bk_with(
                    spark, ARROW_WRITE_CONF, df, uri, t)))
            else:
                pq_w.append(_timed(lambda: df.write.mode("overwrite").parquet(parquet)))
    out = {"bk_write": min(bk_w), "pq_write": min(pq_w),
           "bk_write_default": _timed(lambda: write_bk(df, uri, f"{log}-default"))}
    n_bk = _bk(spark, uri, log).count()
    assert n_bk == rows, (n_bk, rows)
    out["bk_read"] = min(_timed(lambda: _noop(_bk(spark, uri, log))) for _ in range(2))
    out["pq_read"] = min(_timed(lambda: _noop(spark.read.parquet(parquet))) for _ in range(2))
    return out


def memory_floor(spark: Any, rows: int) -> float:
    """Best of two reads -> noop of ``rows`` rows from an in-memory Python data source
    (:mod:`bench.memory_source`, after a warm-up that builds its batches in the workers):
    Spark's own cost of any Python data source, the floor of the arrow log read."""
    from bench.memory_source import MemorySource

    spark.dataSource.register(MemorySource)

    def read() -> None:
        _noop(spark.read.format("bench_memory").option("rows", rows).load())

    read()
    read()
    return min(_timed(read) for _ in range(2))


def raw_vs_ensemble(spark: Any, uri: str, log: str, n: int) -> dict[str, float]:
    """Rates of the same entries of raw log ``log`` (best of two each, alternating): a
    Spark read into ``noop`` (rows/s), and one client reading them with batched
    ``ReadEntries`` striped over each ledger's ensemble, all bookies in parallel, one
    ``Entry`` message per entry (``ensemble``) and packed (``packed``) (e/s:
    :func:`bench.__main__.ensemble_reads`)."""
    from bench.__main__ import ensemble_reads

    _noop(_bk(spark, uri, log))  # warm-up: this log's workers and clients
    ensemble_reads(uri, log)
    spark_s, ens, packed = [], [], []
    for _ in range(2):
        spark_s.append(n / _timed(lambda: _noop(_bk(spark, uri, log))))
        ens.append(ensemble_reads(uri, log))
        packed.append(ensemble_reads(uri, log, packed=True))
    return {"spark": max(spark_s), "ensemble": max(ens), "packed": max(packed)}


def streaming_rows(spark: Any, uri: str, tmpdir: Path, results: ResultSink,
                   seconds: float = 15.0) -> dict[str, list[float]]:
    """The streaming figures (see the module docstring) into ``results``; returns the
    latencies (seconds) by query kind, for the charts."""
    stream_latencies: dict[str, list[float]] = {}
    trigger_s = 0.5
    lat = stream_latency(spark, uri, tmpdir, trigger_s=trigger_s)
    if lat:
        results.add("Spark streaming append -> foreachBatch row, p50 / p99",
                    f"{_pct(lat, 0.5) * 1e3:.0f} / {_pct(lat, 0.99) * 1e3:.0f} ms",
                    f"{trigger_s * 1e3:.0f} ms trigger interval",
                    f"{_pct(lat, 0.5) / trigger_s:.2f}x")
    # No trigger interval: the bookkeeper source beside Spark's own cost of a micro-batch
    # in the same run, a Python source with no I/O (a read task per batch, as ours).
    lat0 = stream_latency(spark, uri, tmpdir, trigger_s=None)
    tick = stream_latency(spark, uri, tmpdir, trigger_s=None, seconds=seconds, source="tick")
    if lat0:
        results.add("Spark streaming append -> foreachBatch row, no trigger interval, "
                    "p50 / p99 (goal 150 / 400 ms)",
                    f"{_pct(lat0, 0.5) * 1e3:.0f} / {_pct(lat0, 0.99) * 1e3:.0f} ms",
                    f"{_pct(tick, 0.5) * 1e3:.0f} / {_pct(tick, 0.99) * 1e3:.0f} ms "
                    "no-I/O source" if tick else "-",
                    f"{_pct(lat0, 0.5) / _pct(tick, 0.5):.2f}x / "
                    f"{_pct(lat0, 0.99) / _pct(tick, 0.99):.2f}x" if tick else "-")
    if tick:
        stream_latencies["no trigger interval, a no-I/O source (Spark's floor)"] = tick
    if lat0:
        stream_latencies["no trigger interval"] = lat0
    if lat:
        stream_latencies[f"{trigger_s * 1e3:.0f} ms trigger"] = lat
    return stream_latencies


def spark_bench(uri: str, tmpdir: Path, results: ResultSink, rows: int = 2_000_000,
                raw_rows: int = 200_000) -> dict[str, list[float]]:
    """Record the Spark figures into ``results`` (see the module docstring); returns the
    streaming latencies (seconds) by query trigger, for the charts."""
    stream_latencies: dict[str, list[float]] = {}
    spark = _session()
    tmpdir = Path(tmpdir)
    stamp = int(time.time())
    arrow_log, raw_log = f"bench-arrow-{stamp}", f"bench-raw-{stamp}"
    df = bench_frame(spark, rows)
    parquet = str(tmpdir / "bench.parquet")

    t = batch_vs_parquet(spark, uri, df, arrow_log, parquet, bench_frame(spark, rows // 5))
    t_bk_r = t["bk_read"]
    results.add(f"Spark batch write, arrow log ({rows:,} rows, 5 cols)",
                f"{rows / t['bk_write']:,.0f} rows/s",
                f"{rows / t['pq_write']:,.0f} rows/s parquet",
                f"{t['pq_write'] / t['bk_write']:.2f}x")
    results.add("Spark batch write, arrow log, Spark's default arrow maxBytesPerBatch",
                f"{rows / t['bk_write_default']:,.0f} rows/s",
                f"{rows / t['pq_write']:,.0f} rows/s parquet",
                f"{t['pq_write'] / t['bk_write_default']:.2f}x")
    results.add("Spark batch read, arrow log -> noop", f"{rows / t_bk_r:,.0f} rows/s",
                f"{rows / t['pq_read']:,.0f} rows/s parquet", f"{t['pq_read'] / t_bk_r:.2f}x")

    t_floor = memory_floor(spark, rows)
    results.add("Spark batch read, in-memory Python source (floor) -> noop",
                f"{rows / t_floor:,.0f} rows/s", f"{rows / t['pq_read']:,.0f} rows/s parquet",
                f"{t['pq_read'] / t_floor:.2f}x")

    raw = spark.range(0, raw_rows, 1, 2).selectExpr("CAST(REPEAT('r', 100) AS BINARY) AS value")
    write_bk(raw, uri, raw_log, entryFormat="raw")
    r = raw_vs_ensemble(spark, uri, raw_log, raw_rows)
    results.add("Spark batch read, raw log (1 entry = 1 row of 100 B)",
                f"{r['spark']:,.0f} rows/s",
                f"{r['ensemble']:,.0f} e/s ensemble batched reads",
                f"{r['spark'] / r['ensemble']:.2f}x")
    results.add("ensemble packed reads of the same entries (one client)",
                f"{r['packed']:,.0f} e/s", f"{r['ensemble']:,.0f} e/s ReadEntries per entry",
                f"{r['packed'] / r['ensemble']:.2f}x")

    stream_latencies.update(streaming_rows(spark, uri, tmpdir, results))
    return stream_latencies


class _Print:
    def add(self, what: str, value: str, reference: str, ratio: str) -> None:
        print(f"{what:<55} {value:>26}  ref {reference:>30}  {ratio}", flush=True)


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory(prefix="bk-spark-bench-") as d:
        spark_bench(sys.argv[1] if len(sys.argv) > 1 else "zk://127.0.0.1:2181/ledgers",
                    Path(d), _Print(),
                    rows=int(sys.argv[2]) if len(sys.argv) > 2 else 2_000_000)
