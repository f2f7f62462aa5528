"""A streaming query copying one log into another, exactly once; tests kill it by PID.

    python stream_copy.py URI SRC DST CHECKPOINT [--max-entries N] [--available-now]

Reads SRC (raw) from the earliest entry, at most N entries per micro-batch, and writes the
``value`` of every entry to DST (raw) through the bookkeeper sink. Prints ``started`` once
the query runs and ``done`` when it terminates (``--available-now``).
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("uri")
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("checkpoint")
    p.add_argument("--max-entries", type=int, default=100)
    p.add_argument("--available-now", action="store_true")
    args = p.parse_args()

    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("stream-copy")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    src = (spark.readStream.format("bookkeeper").option("metadataServiceUri", args.uri)
           .option("log", args.src).option("startingOffsets", "earliest")
           .option("maxEntriesPerTrigger", args.max_entries).load())
    writer = (src.select("value").writeStream.format("bookkeeper")
              .option("metadataServiceUri", args.uri).option("log", args.dst)
              .option("entryFormat", "raw").option("checkpointLocation", args.checkpoint))
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="0 seconds")
    q = writer.start()
    print("started", flush=True)
    q.awaitTermination()
    print("done", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
