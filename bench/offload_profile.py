"""Where the offloader's and the ``bookkeeper`` source's time goes over an offloaded arrow
log (issue 29), in one process, without Spark's JVM in the timed parts.

    /work/wt/heavy --bench timeout 600 python -m bench.offload_profile [rows] [--spark]

One fresh 3-bookie sandbox; the bench's arrow log (:func:`bench.spark_bench.bench_frame`)
written through Spark; then, each timed and profiled (cProfile, top functions by own time):

* the log reader's rate over the log (the throughput's reference);
* one offload of every ledger (``Offloader.tick``): MB/s of Parquet and of entries;
* the source's planning and every partition's ``read()`` over the offloaded ledgers,
  in this process (``read_partition``): rows/s.

``--spark`` adds ``spark.read.parquet`` and the source into ``noop``, best of two each.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _top(prof: cProfile.Profile, n: int = 18) -> str:
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(n)
    lines = [ln for ln in out.getvalue().splitlines() if ln.strip()]
    start = next(i for i, ln in enumerate(lines) if "ncalls" in ln)
    return "\n".join(lines[start:start + n + 1])


def run(uri: str, tmpdir: Path, rows: int, with_spark: bool) -> None:
    from bench.offload_bench import _policy
    from bench.spark_bench import _noop, _session, _timed, bench_frame
    from bk_spark.core.client import BookKeeper
    from bk_spark.datasource import BookKeeperDataSource
    from bk_spark.datasource.scan import read_partition
    from bk_spark.log import open_log_reader, open_log_view
    from bk_spark.offload.metrics import OffloadMetrics
    from bk_spark.offload.offloader import Offloader, OffloaderConfig
    from bk_spark.protocol import offload_rules as rules

    spark = _session()
    target = (tmpdir / "offload").as_uri()
    name = f"prof-offload-{int(time.time())}"
    (bench_frame(spark, rows).write.format("bookkeeper").option("metadataServiceUri", uri)
     .option("log", name).option("entryFormat", "arrow").mode("append").save())
    with BookKeeper(uri) as bk:
        t0 = time.perf_counter()
        nbytes = sum(len(r.payload or b"") for r in open_log_reader(bk, name).read_available())
        t_read = time.perf_counter() - t0
        print(f"log reader: {nbytes / 1e6:.1f} MB of entries in {t_read:.2f} s = "
              f"{nbytes / t_read / 1e6:.1f} MB/s")
        _policy(bk, name, target)
        off = Offloader(bk, "prof", OffloaderConfig(), OffloadMetrics())
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        off.tick()
        prof.disable()
        t_off = time.perf_counter() - t0
        written = off.metrics.bytes._value.get()
        md = open_log_view(bk, name).md
        print(f"offload: {written / 1e6:.1f} MB Parquet in {t_off:.2f} s = "
              f"{written / t_off / 1e6:.1f} MB/s parquet, {nbytes / t_off / 1e6:.1f} MB/s of "
              f"entries ({t_read / t_off:.2f}x the log reader)")
        print(_top(prof))
    ds = BookKeeperDataSource({"metadataServiceUri": uri, "log": name})
    reader = ds.reader(ds.schema())
    t0 = time.perf_counter()
    parts = reader.partitions()
    t_plan = time.perf_counter() - t0
    prof = cProfile.Profile()
    got = 0
    t0 = time.perf_counter()
    prof.enable()
    for p in parts:
        for b in reader.read(p):
            got += b.num_rows
    prof.disable()
    t_src = time.perf_counter() - t0
    print(f"source over Parquet, in process: {len(parts)} partitions planned in "
          f"{t_plan:.2f} s; {got:,} rows read in {t_src:.2f} s = {got / t_src:,.0f} rows/s")
    print(_top(prof))
    assert got == rows, (got, rows)
    assert read_partition is not None
    if with_spark:
        path = rules.offload_dir(target, name, md.log_id)

        def src() -> Any:
            return (spark.read.format("bookkeeper").option("metadataServiceUri", uri)
                    .option("log", name).load())

        import statistics

        from bench.memory_source import MemorySource

        spark.dataSource.register(MemorySource)

        def floor() -> Any:
            return spark.read.format("bench_memory").option("rows", rows).load()

        _noop(spark.read.parquet(path))
        _noop(src())
        _noop(floor())
        t: dict[str, list[float]] = {"pq": [], "src": [], "floor": []}
        for _ in range(6):  # alternating; the machine is shared: best and median of six
            t["pq"].append(_timed(lambda: _noop(spark.read.parquet(path))))
            t["src"].append(_timed(lambda: _noop(src())))
            t["floor"].append(_timed(lambda: _noop(floor())))
        mn = {k: min(v) for k, v in t.items()}
        md = {k: statistics.median(v) for k, v in t.items()}
        print(f"spark -> noop, best of 6: parquet {rows / mn['pq']:,.0f} rows/s, bookkeeper "
              f"source {rows / mn['src']:,.0f} rows/s ({mn['pq'] / mn['src']:.2f}x), in-memory "
              f"floor {rows / mn['floor']:,.0f} rows/s ({mn['pq'] / mn['floor']:.2f}x); "
              f"medians: source {md['pq'] / md['src']:.2f}x, floor "
              f"{md['pq'] / md['floor']:.2f}x", flush=True)


def main() -> None:
    from bk_spark.sandbox import Sandbox, free_port

    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    rows = int(args[0]) if args else 1_000_000
    with tempfile.TemporaryDirectory() as d:
        sb = Sandbox(Path(d) / "sandbox", n_bookies=3, zk_port=free_port(),
                     first_bookie_port=0, bookie_args=["--no-offload"])
        sb.start()
        try:
            run(sb.metadata_service_uri, Path(d), rows, "--spark" in sys.argv)
        finally:
            from pyspark.sql import SparkSession

            active = SparkSession.getActiveSession()
            if active is not None:
                active.stop()
            sb.stop()


if __name__ == "__main__":
    main()
