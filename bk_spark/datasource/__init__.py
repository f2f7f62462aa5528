"""The ``bookkeeper`` PySpark data source: logs of a bk-spark cluster as DataFrames.

Batch and streaming reads (Arrow record batches, filter pushdown, admission control) and
exactly-once batch writes and streaming sink (one new ledger per task, one compare-and-swap
per commit). Installed, it is found by name in any SparkSession (the top-level module
``pyspark_bookkeeper`` exposes ``DefaultSource``); ``spark.dataSource.register(
BookKeeperDataSource)`` registers it for one session.

Usage (a cluster at ``uri``, e.g. started with ``bk sandbox start``)::

    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]")
             .config("spark.sql.python.filterPushdown.enabled", "true").getOrCreate())
    uri = "zk://127.0.0.1:2181/ledgers"
    events = spark.range(1000).selectExpr("id", "id % 7 AS user", "current_timestamp() AS t")
    (events.write.format("bookkeeper").mode("append")
        .option("metadataServiceUri", uri).option("log", "events").save())

    df = spark.read.format("bookkeeper").option("metadataServiceUri", uri) \\
        .option("log", "events").load()                      # same columns and types
    df.groupBy("user").count().show()

    raw = (spark.readStream.format("bookkeeper").option("metadataServiceUri", uri)
           .option("log", "events").option("startingOffsets", "earliest")
           .option("maxEntriesPerTrigger", 100).load())
    q = (raw.selectExpr("CAST(entry_id AS STRING) AS value").writeStream
         .format("bookkeeper").option("metadataServiceUri", uri).option("log", "copy")
         .option("checkpointLocation", "/tmp/ckpt-copy").trigger(availableNow=True).start())
    q.awaitTermination()

One job per file: :mod:`~bk_spark.datasource.options` (every option, validated),
:mod:`~bk_spark.datasource.source` (the DataSource), :mod:`~bk_spark.datasource.planning`
and :mod:`~bk_spark.datasource.reader` (batch reads), :mod:`~bk_spark.datasource.filters`
(pushdown), :mod:`~bk_spark.datasource.offsets` and :mod:`~bk_spark.datasource.stream`
(streaming reads), :mod:`~bk_spark.datasource.scan` (``read()``),
:mod:`~bk_spark.datasource.writer` and :mod:`~bk_spark.log.pending` (writes),
:mod:`~bk_spark.datasource.formats` (raw and arrow entries),
:mod:`~bk_spark.datasource.connections` (a client per worker process).
"""

from bk_spark.datasource.source import BookKeeperDataSource

__all__ = ["BookKeeperDataSource"]
