"""Stream one log, aggregate, write the result to another log exactly once.

    spark-submit examples/stream_aggregate.py --metadata-service-uri zk://127.0.0.1:2181/ledgers
    python examples/stream_aggregate.py --source events --sink user_totals

Reads log ``--source`` (``events`` from produce_events.py) from its first entry, at most
``--max-entries`` entries per micro-batch, counts events and buys and sums amounts per
user, and writes the totals to log ``--sink`` in complete mode: every micro-batch
atomically replaces the sink log's ledgers in one compare-and-swap with the batch id (a
restart from the checkpoint never commits a batch twice). ``trigger(availableNow=True)``:
the query stops once it has read what was there when it started; run it again later to
continue from its checkpoint.
"""

from __future__ import annotations

import os
import tempfile

from _spark import parser, session
from pyspark.sql import functions as F


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--source", default="events")
    p.add_argument("--sink", default="user_totals")
    p.add_argument("--max-entries", type=int, default=4,
                   help="maxEntriesPerTrigger (an arrow entry holds thousands of rows)")
    p.add_argument("--checkpoint", default=os.path.join(tempfile.gettempdir(),
                                                        "bk-spark-stream-aggregate"))
    args = p.parse_args()
    spark = session("stream-aggregate")
    uri = args.metadata_service_uri
    events = (spark.readStream.format("bookkeeper").option("metadataServiceUri", uri)
              .option("log", args.source).option("startingOffsets", "earliest")
              .option("maxEntriesPerTrigger", args.max_entries).load())
    totals = events.groupBy("user").agg(
        F.count("*").alias("events"), F.sum(F.when(F.col("kind") == "buy", 1)).alias("buys"),
        F.sum("amount").alias("amount"))
    q = (totals.writeStream.format("bookkeeper").outputMode("complete")
         .option("metadataServiceUri", uri).option("log", args.sink)
         .option("checkpointLocation", args.checkpoint)
         .trigger(availableNow=True).start())
    q.awaitTermination()
    for prog in q.recentProgress:
        src = prog["sources"][0]
        print(f"micro-batch {prog['batchId']}: {prog['numInputRows']} events, "
              f"offsets {src['startOffset']} -> {src['endOffset']}")
    result = spark.read.format("bookkeeper").option("metadataServiceUri", uri) \
        .option("log", args.sink).load()
    result.orderBy("user").show(truncate=False)
    spark.stop()


if __name__ == "__main__":
    main()
