"""The Spark driver of the fault suite: a streaming query copying one log into another.

    python -m bk_spark.faults.spark_driver URI SRC DST CHECKPOINT [--max-entries N]
                                           [--available-now]

Reads log SRC (raw entries, from the earliest) at most N entries per micro-batch and writes
every entry's ``value`` to log DST through the ``bookkeeper`` sink, with CHECKPOINT as its
checkpoint location. Prints ``started`` once the query runs and ``done`` when it terminates
(``--available-now``: after everything SRC holds now). The harness kills it with ``kill -9``
(its process group: the JVM and the Python workers die with it) and starts it again.
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bk_spark.faults.spark_driver")
    p.add_argument("uri")
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("checkpoint")
    p.add_argument("--max-entries", type=int, default=200)
    p.add_argument("--available-now", action="store_true")
    args = p.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("bk-faults-sink")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    src = (spark.readStream.format("bookkeeper").option("metadataServiceUri", args.uri)
           .option("log", args.src).option("password", "fault-pw")
           .option("startingOffsets", "earliest")
           .option("maxEntriesPerTrigger", args.max_entries).load())
    writer = (src.select("value").writeStream.format("bookkeeper")
              .option("metadataServiceUri", args.uri).option("log", args.dst)
              .option("entryFormat", "raw").option("checkpointLocation", args.checkpoint))
    writer = (writer.trigger(availableNow=True) if args.available_now
              else writer.trigger(processingTime="0 seconds"))
    q = writer.start()
    print("started", flush=True)
    q.awaitTermination()
    print("done", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
