"""The Spark driver of the fault suite: a streaming query copying one log into another.

    python -m bk_spark.faults.spark_driver URI SRC DST CHECKPOINT [--max-entries N]
                                           [--available-now] [--side SRC2 DST2 CKPT2]
                                           [--cluster]

Reads log SRC (raw entries, from the earliest) at most N entries per micro-batch and writes
every entry's ``value`` to log DST through the ``bookkeeper`` sink, with CHECKPOINT as its
checkpoint location. Prints ``started`` once the query runs and ``done`` when it terminates
(``--available-now``: after everything SRC holds now). ``--side``: a second query in the
same session copies SRC2 (a log the harness truncates, deletes and creates again while it
runs) into DST2 with ``failOnDataLoss=false``, so every loss is a logged warning and
nothing else is skipped. ``--cluster``: spark-submit's ``--master`` (the test bed's
standalone master) instead of ``local[2]``. The harness kills it with ``kill -9``
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
    p.add_argument("--side", nargs=3, metavar=("SRC2", "DST2", "CKPT2"))
    p.add_argument("--cluster", action="store_true",
                   help="run on spark-submit's --master (a cluster) instead of local[2]")
    args = p.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    from pyspark.sql import SparkSession

    builder = SparkSession.builder if args.cluster else SparkSession.builder.master("local[2]")
    spark = (builder.appName("bk-faults-sink")
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
    if args.side:
        side_src, side_dst, side_ckpt = args.side
        side = (spark.readStream.format("bookkeeper").option("metadataServiceUri", args.uri)
                .option("log", side_src).option("startingOffsets", "earliest")
                .option("failOnDataLoss", "false")
                .option("maxEntriesPerTrigger", max(1, args.max_entries // 10)).load())
        (side.select("value").writeStream.format("bookkeeper")
         .option("metadataServiceUri", args.uri).option("log", side_dst)
         .option("entryFormat", "raw").option("checkpointLocation", side_ckpt)
         .trigger(processingTime="0 seconds").start())
    print("started", flush=True)
    if args.side:
        spark.streams.awaitAnyTermination()
    else:
        q.awaitTermination()
    print("done", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
