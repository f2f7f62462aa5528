"""Mutual TLS's cost, for ``make bench``: ledger adds and a Spark batch read against a
secure sandbox (bookies requiring client certificates; ZooKeeper over TLS, with ACLs) as
ratios to the same figures against a plain sandbox in the same run (goal: >= 0.8x).

The two sandboxes run one at a time and the figures alternate plain, secure, plain, ...
(this machine's rates drift between runs); each ratio is the median of the pairs' ratios.

Run alone: ``python -m bench.tls_bench [--quick]``.
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.spark_bench import ResultSink, _bk, _noop, _Print, _session

REPEATS = 3


def _spark_options(sb: Any) -> dict[str, str]:
    f = sb.secure_files
    if f is None:
        return {}
    return {"tlsCaCert": str(f["ca"]), "tlsCert": str(f["client_cert"]),
            "tlsKey": str(f["client_key"]), "zkAuthSecretFile": str(f["zk_auth"]),
            "zkTlsCaCert": str(f["ca"]), "zkTlsCert": str(f["client_cert"]),
            "zkTlsKey": str(f["client_key"])}


def _security(sb: Any) -> Any:
    from bk_spark.security import ClientSecurity

    f = sb.secure_files
    if f is None:
        return ClientSecurity()
    return ClientSecurity(str(f["ca"]), str(f["client_cert"]), str(f["client_key"]),
                          sb.zk_security)


def _spark_read(sb: Any, rows: int) -> float:
    """rows/s of a batch read of an arrow log of ``rows`` rows into Spark's noop sink (the
    best of two reads; the log is written first, untimed)."""
    spark = _session()
    uri, opts = sb.metadata_service_uri, _spark_options(sb)
    log = f"tls-bench-{int(time.time() * 1000)}"
    df = spark.range(0, rows, 1, 2).selectExpr("id", "id % 1000 AS user",
                                               "CONCAT('event-', id) AS name")
    df.write.format("bookkeeper").mode("append").option("metadataServiceUri", uri) \
        .option("log", log).options(**opts).save()
    best = float("inf")
    for _ in range(2):
        t0 = time.perf_counter()
        _noop(_bk(spark, uri, log, **opts))
        best = min(best, time.perf_counter() - t0)
    return rows / best


def tls_bench(tmpdir: Path, results: ResultSink, n_adds: int = 50_000, rows: int = 1_000_000,
              spark: bool = True) -> None:
    """Record ledger add and Spark read with mutual TLS, each as a ratio to plain."""
    from bench.__main__ import ledger_add
    from bk_spark.datasource import connections
    from bk_spark.sandbox import Sandbox, free_port

    adds: dict[bool, list[float]] = {False: [], True: []}
    reads: dict[bool, list[float]] = {False: [], True: []}
    for rep in range(REPEATS):
        for secure in (False, True):
            d = Path(tmpdir) / f"{'secure' if secure else 'plain'}-{rep}"
            sb = Sandbox(d, n_bookies=3, zk_port=free_port(), first_bookie_port=0,
                         secure=secure)
            sb.start()
            try:
                adds[secure].append(ledger_add(sb.metadata_service_uri, n_adds,
                                               security=_security(sb))[0])
                if spark:
                    reads[secure].append(_spark_read(sb, rows))
            finally:
                connections.close_all()
                if spark:
                    from pyspark.sql import SparkSession

                    active = SparkSession.getActiveSession()
                    if active is not None:  # its workers hold clients of this sandbox
                        active.stop()
                sb.stop()
                shutil.rmtree(d, ignore_errors=True)
            print(f"   run {rep + 1} {'mTLS ' if secure else 'plain'}: ledger add "
                  f"{adds[secure][-1]:,.0f} e/s"
                  + (f", Spark read {reads[secure][-1]:,.0f} rows/s" if spark else ""),
                  flush=True)

    def ratio(figs: dict[bool, list[float]]) -> float:
        return statistics.median(s / p for s, p in zip(figs[True], figs[False], strict=True))

    results.add(f"ledger add 1 KiB with mutual TLS + ZK TLS and ACLs (median of {REPEATS})",
                f"{statistics.median(adds[True]):,.0f} e/s",
                f"{statistics.median(adds[False]):,.0f} e/s plain", f"{ratio(adds):.2f}x")
    if spark:
        results.add(f"Spark batch read ({rows:,} rows) with mutual TLS + ZK TLS and ACLs",
                    f"{statistics.median(reads[True]):,.0f} rows/s",
                    f"{statistics.median(reads[False]):,.0f} rows/s plain",
                    f"{ratio(reads):.2f}x")


if __name__ == "__main__":
    quick = "--quick" in sys.argv
    with tempfile.TemporaryDirectory(prefix="bk-tls-bench-") as d:
        tls_bench(Path(d), _Print(), n_adds=20_000 if quick else 50_000,
                  rows=200_000 if quick else 1_000_000, spark="--no-spark" not in sys.argv)
