"""Produce events into a log with Spark (typed rows, arrow entries, exactly-once appends).

    spark-submit examples/produce_events.py --metadata-service-uri zk://127.0.0.1:2181/ledgers
    python examples/produce_events.py --log events --rows 20000 --batches 3

Each batch is one ``df.write.format("bookkeeper").mode("append")``: every task writes a
new ledger, the driver adds them all to the log in one compare-and-swap.
"""

from __future__ import annotations

import time

from _spark import parser, session

from bk_spark import BookKeeper


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--log", default="events")
    p.add_argument("--rows", type=int, default=20_000, help="events per batch")
    p.add_argument("--batches", type=int, default=3)
    args = p.parse_args()
    spark = session("produce-events")
    uri = args.metadata_service_uri
    for b in range(args.batches):
        first = b * args.rows
        events = spark.range(first, first + args.rows, 1, 2).selectExpr(
            "id AS event_id",
            "CONCAT('user-', id % 10) AS user",
            "ELEMENT_AT(ARRAY('view', 'click', 'buy'), CAST(id % 3 AS INT) + 1) AS kind",
            "CAST((id % 1000) / 10 AS DECIMAL(10, 2)) AS amount",
            "TIMESTAMP_SECONDS(1700000000 + id) AS event_time")
        t0 = time.perf_counter()
        (events.write.format("bookkeeper").mode("append")
         .option("metadataServiceUri", uri).option("log", args.log).save())
        print(f"batch {b}: appended {args.rows} events to log {args.log!r} in "
              f"{time.perf_counter() - t0:.2f}s")
    with BookKeeper(uri) as bk:
        ledgers = bk.log_ledgers(args.log)
    total = spark.read.format("bookkeeper").option("metadataServiceUri", uri) \
        .option("log", args.log).load()
    print(f"log {args.log!r}: {len(ledgers)} ledgers, {total.count()} events, schema "
          f"{total.schema.simpleString()}")
    spark.stop()


if __name__ == "__main__":
    main()
