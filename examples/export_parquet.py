"""Export a log to Parquet with a batch read (filters on positions are pushed down).

    spark-submit examples/export_parquet.py --metadata-service-uri zk://127.0.0.1:2181/ledgers
    python examples/export_parquet.py --log events --out /tmp/events.parquet

The read plans one input partition per ledger range, reads closed ledgers whole and an open
ledger up to its last-add-confirmed (without disturbing its writer), and moves the rows as
Arrow record batches.
"""

from __future__ import annotations

import os
import tempfile
import time

from _spark import parser, session


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--log", default="events")
    p.add_argument("--out", default=os.path.join(tempfile.gettempdir(),
                                                 "bk-spark-events.parquet"))
    args = p.parse_args()
    spark = session("export-parquet")
    uri = args.metadata_service_uri
    df = spark.read.format("bookkeeper").option("metadataServiceUri", uri) \
        .option("log", args.log).option("minPartitions", 2).load()
    t0 = time.perf_counter()
    df.write.mode("overwrite").parquet(args.out)
    back = spark.read.parquet(args.out)
    n = back.count()
    print(f"exported log {args.log!r} to {args.out}: {n} rows in "
          f"{time.perf_counter() - t0:.2f}s, {df.rdd.getNumPartitions()} input partitions")
    assert back.exceptAll(df).count() == 0 and df.exceptAll(back).count() == 0
    print("Parquet copy equals the log: OK")
    back.groupBy("kind").count().orderBy("kind").show()
    spark.stop()


if __name__ == "__main__":
    main()
