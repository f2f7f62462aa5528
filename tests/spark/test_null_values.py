"""Null values in raw logs: a null ``value`` is written, stored and read back as null, apart
from an empty one, through Spark (batch and stream) and through the Python API."""

from __future__ import annotations

from spark_helpers import read_log

from bk_spark.log import open_log_reader, open_log_writer


def values_in_log_order(df) -> list[bytes | None]:  # type: ignore[no-untyped-def]
    rows = df.orderBy("ledger_id", "entry_id").collect()
    return [None if r.value is None else bytes(r.value) for r in rows]


def test_null_and_empty_raw_values_stay_apart_through_spark_batch_and_stream(
        spark, bk, uri, log_name, tmp_path):
    name = log_name()
    # Spark -> log: binary and string columns, one task each (one ledger per write).
    (spark.createDataFrame([(b"a",), (None,), (b"",), (b"\x00",)], "value binary")
     .coalesce(1).write.format("bookkeeper").mode("append")
     .option("metadataServiceUri", uri).option("log", name).option("entryFormat", "raw")
     .save())
    (spark.createDataFrame([("",), (None,), ("s",)], "value string")
     .coalesce(1).write.format("bookkeeper").mode("append")
     .option("metadataServiceUri", uri).option("log", name).save())
    # Python API -> log: None is a null value, b"" an empty one.
    w = open_log_writer(bk, name)
    for payload in (None, b"", b"z"):
        w.append(payload)
    w.close()
    expected = [b"a", None, b"", b"\x00", b"", None, b"s", None, b"", b"z"]

    # log -> Python API
    got = [r.payload for r in open_log_reader(bk, name).read_available()]
    assert got == expected

    # log -> Spark batch
    back = read_log(spark, uri, name)
    assert back.schema["value"].nullable
    assert values_in_log_order(back) == expected
    assert back.where("value IS NULL").count() == 3
    assert back.where("length(value) = 0").count() == 3

    # log -> Spark stream
    collected: list = []

    def collect(batch_df, _batch_id):  # type: ignore[no-untyped-def]
        collected.extend(batch_df.collect())

    q = (spark.readStream.format("bookkeeper").option("metadataServiceUri", uri)
         .option("log", name).option("startingOffsets", "earliest").load()
         .writeStream.foreachBatch(collect)
         .option("checkpointLocation", str(tmp_path / "null-stream"))
         .trigger(availableNow=True).start())
    q.awaitTermination(300)
    assert q.exception() is None
    streamed = sorted(collected, key=lambda r: (r.ledger_id, r.entry_id))
    assert [None if r.value is None else bytes(r.value) for r in streamed] == expected
