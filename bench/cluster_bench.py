"""Figures beyond one machine, on the multi-host test bed (namespaces), in one run.

``python -m bench.cluster_bench [--quick]`` (also part of ``make bench`` when network
namespaces are available):

1. The bed: 3 ZooKeepers, 5 bookies on 5 hosts, each behind its link
   (:mod:`bk_spark.testbed.link`), a Spark standalone master and 2 workers (1 core each).
2. Ledger add throughput with 10 ms of injected link delay vs without: a client on the
   client host adds N entries of 1 KiB to a ledger (E=3, Qw=2, Qa=2), 10,000 in flight
   (an application window: it must exceed rate x round trip, ~90k/s x 20 ms, or the
   application, not the writer, is what cannot hide the delay). This
   kernel has no ``tc netem``, so the delay is the links': every byte the client sends a
   bookie arrives 10 ms later (the round trip grows by 10 ms). The reference runs through
   the same links with 0 ms, so the ratio measures the delay alone, not the relay's cost.
   Three pairs of runs alternate (0, 10 | 10, 0 | 0, 10 ms), each a new ledger; the ratio
   is of the medians, and every run is printed. Goal >= 0.8x: the writer's pipeline hides
   latency.
3. Spark batch write and read of an arrow log through the standalone cluster
   (``spark-submit --master spark://...``, executors on the workers, bookies on their
   hosts) vs Parquet on the same cluster, same rows, same run
   (:func:`bench.spark_bench.batch_vs_parquet`).
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KiB = 1024


def add_rate(uri: str, n: int, size: int = KiB, window: int = 10_000) -> dict[str, float]:
    """Adds of ``size`` bytes to a new ledger, ``window`` in flight (runs on the client)."""
    from bk_spark.core.client import BookKeeper, BookKeeperConfig
    from bk_spark.io.bookie_client import ClientConfig

    # a long link wants rate x round trip in flight: the bound holds the whole window (the
    # default, 2 MiB, is ~2,000 adds of 1 KiB: one round trip of 10 ms caps it near 100k/s)
    config = BookKeeperConfig(client=ClientConfig(adds_in_flight_max_bytes=window * size))
    with BookKeeper(uri, config) as bk:
        lh = bk.create_ledger(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2)
        data = b"d" * size
        pending: deque = deque()
        t0 = time.perf_counter()
        for _ in range(n):
            if len(pending) >= window:
                pending.popleft().result(300)
            pending.append(lh.add_entry_async(data))
        for f in pending:
            f.result(300)
        seconds = time.perf_counter() - t0
        lh.close()
        bk.delete_ledger(lh.id)
    return {"entries_per_s": n / seconds, "mb_per_s": n * size / seconds / 1e6}


def spark_job(uri: str, tmpdir: str, rows: int) -> dict[str, float]:
    """The Spark figures (run under spark-submit on the cluster: no master set here)."""
    from pyspark.sql import SparkSession

    from bench.spark_bench import batch_vs_parquet, bench_frame
    from bk_spark.datasource import BookKeeperDataSource

    spark = (SparkSession.builder.appName("bk-spark-cluster-bench")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(BookKeeperDataSource)
    try:
        t = batch_vs_parquet(spark, uri, bench_frame(spark, rows),
                             f"bench-cluster-{int(time.time())}", f"{tmpdir}/bench.parquet")
    finally:
        spark.stop()
    return {**t, "rows": rows}


def cluster_bench(results, quick: bool = False) -> dict[str, float] | None:
    """Steps 1-3; adds rows to ``results`` (``add(what, value, reference, ratio)``) and
    returns the figures, or None (printed) when namespaces are unavailable."""
    from bk_spark.testbed import TestBed, TestBedConfig
    from bk_spark.testbed.network import namespaces_available

    ok, why = namespaces_available()
    if not ok:
        print(f"cluster figures skipped: network namespaces unavailable ({why})")
        return None
    n_adds = 60_000 if quick else 300_000
    rows = 300_000 if quick else 1_000_000
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bk-bench-cluster-", dir=ROOT) as tmp, \
            TestBed(TestBedConfig(base_dir=Path(tmp), links=True)) as bed:
        uri = bed.metadata_service_uri
        me = str(Path(__file__).resolve())

        def adds(delay_ms: float) -> float:
            for i in range(1, bed.config.bookies + 1):
                bed.set_link(f"bk{i}", delay_ms=delay_ms)
            time.sleep(0.3)  # the links poll their control files every 0.1 s
            res = bed.run([sys.executable, me, "adds", uri, str(n_adds)], timeout=600)
            return json.loads(res.stdout.strip().splitlines()[-1])["entries_per_s"]

        adds(0)  # warm-up: connections, the bookies' journals
        runs: dict[float, list[float]] = {0: [], 10: []}
        for delay in (0, 10, 10, 0, 0, 10):
            runs[delay].append(adds(delay))
            print(f"  adds through the links, {delay} ms: {runs[delay][-1]:,.0f} e/s",
                  flush=True)
        for i in range(1, bed.config.bookies + 1):
            bed.set_link(f"bk{i}")
        ref, delayed = statistics.median(runs[0]), statistics.median(runs[10])
        print(f"  all runs: 0 ms {[round(r) for r in runs[0]]}, "
              f"10 ms {[round(r) for r in runs[10]]}", flush=True)
        out.update(add_ref=ref, add_delayed=delayed, add_ratio=delayed / ref)
        results.add("ledger adds (1 KiB, E3 Qw2 Qa2, 10k in flight), 10 ms link delay, "
                    "median of 3 (goal >= 0.8x)", f"{delayed:,.0f} e/s",
                    f"{ref:,.0f} e/s same links, 0 ms", f"{delayed / ref:.2f}x")
        job = bed.run(bed.submit_argv(me, "spark", uri, tmp, str(rows)), timeout=1200)
        t = json.loads(job.stdout.strip().splitlines()[-1])
        out.update({f"spark_{k}": v for k, v in t.items()})
        where = "standalone, 2 workers, bookies on 5 hosts"
        results.add(f"Spark batch write, arrow log, {where} ({rows:,} rows)",
                    f"{rows / t['bk_write']:,.0f} rows/s",
                    f"{rows / t['pq_write']:,.0f} rows/s parquet",
                    f"{t['pq_write'] / t['bk_write']:.2f}x")
        results.add(f"Spark batch read, arrow log -> noop, {where}",
                    f"{rows / t['bk_read']:,.0f} rows/s",
                    f"{rows / t['pq_read']:,.0f} rows/s parquet",
                    f"{t['pq_read'] / t['bk_read']:.2f}x")
    return out


class _Print:
    def add(self, what: str, value: str, reference: str, ratio: str) -> None:
        print(f"{what:<70} {value:>18}  ref {reference:>30}  {ratio}", flush=True)


def main(argv: list[str]) -> None:
    if argv[:1] == ["adds"]:
        print(json.dumps(add_rate(argv[1], int(argv[2]))), flush=True)
    elif argv[:1] == ["spark"]:
        print(json.dumps(spark_job(argv[1], argv[2], int(argv[3]))), flush=True)
    else:
        sys.path.insert(0, str(ROOT))
        cluster_bench(_Print(), quick="--quick" in argv)


if __name__ == "__main__":
    main(sys.argv[1:])
