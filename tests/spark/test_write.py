"""Batch writes: typed arrow round trips, raw entries, formats, overwrite, fencing, abort."""

from __future__ import annotations

import datetime as dt
import decimal

import pytest
from chispa import assert_df_equality
from pyspark.errors import PySparkException
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)
from spark_helpers import WriterProc, read_log

from bk_spark.datasource.formats import ARROW_ENTRY_BYTES, FORMAT_PROPERTY
from bk_spark.errors import NoSuchLedgerError
from bk_spark.log import LEDGER_LOG_KEY, log_ledgers, log_metadata

TYPED = StructType([
    StructField("id", LongType(), False),
    StructField("b", ByteType()), StructField("s", ShortType()), StructField("i", IntegerType()),
    StructField("f", FloatType()), StructField("d", DoubleType()),
    StructField("flag", BooleanType()), StructField("name", StringType()),
    StructField("blob", BinaryType()), StructField("price", DecimalType(20, 4)),
    StructField("day", DateType()), StructField("at", TimestampType()),
    StructField("local", TimestampNTZType()),
    StructField("tags", ArrayType(StringType())),
    StructField("attrs", MapType(StringType(), LongType())),
    StructField("nested", StructType([
        StructField("x", LongType(), False),
        StructField("ys", ArrayType(StructType([StructField("z", DoubleType())]))),
    ])),
])


def typed_rows(n: int) -> list[tuple]:
    base = dt.datetime(2024, 2, 29, 23, 59, 59, 123456, tzinfo=dt.UTC)
    rows = []
    for k in range(n):
        null = k % 7 == 3  # every nullable column null in some rows
        rows.append((
            k, None if null else k % 128 - 64, None if null else k % 30000,
            None if null else k * 3, None if null else k / 4, None if null else k / 3,
            None if null else k % 2 == 0, None if null else f"name-{k}-é",
            None if null else bytes([k % 256]) * 3,
            None if null else (decimal.Decimal(k) / decimal.Decimal(7)).quantize(
                decimal.Decimal("0.0001")),
            None if null else dt.date(2024, 1, 1) + dt.timedelta(days=k % 400),
            None if null else base + dt.timedelta(seconds=k),
            None if null else dt.datetime(2020, 1, 1) + dt.timedelta(microseconds=k),
            None if null else [f"t{k}", None, "x"],
            None if null else {"a": k, "b": None},
            None if null else (k, [(float(k),), None]),
        ))
    return rows


def write(df, uri: str, log: str, mode: str = "append", **options: str) -> None:  # type: ignore[no-untyped-def]
    w = df.write.format("bookkeeper").mode(mode).option("metadataServiceUri", uri) \
        .option("log", log)
    for k, v in options.items():
        w = w.option(k, v)
    w.save()


def test_arrow_round_trip_keeps_every_column_type_and_null(spark, bk, uri, log_name):
    name = log_name()
    df = spark.createDataFrame(typed_rows(3000), TYPED).repartition(2)
    write(df, uri, name)
    assert log_metadata(bk, name).properties[FORMAT_PROPERTY] == "arrow"
    back = read_log(spark, uri, name)
    assert back.schema == TYPED
    assert_df_equality(df.orderBy("id"), back.orderBy("id"))


def test_arrow_rows_are_packed_into_bounded_entries(spark, bk, uri, log_name):
    name = log_name()
    rows = 2 * int(3.4 * ARROW_ENTRY_BYTES / 116)  # ~116 bytes a row, ~3.4 entries a task
    df = spark.range(0, rows, 1, 2).selectExpr("id", "repeat('x', 100) AS pad")
    write(df, uri, name)
    ledgers = log_ledgers(bk, name)
    assert len(ledgers) == 2  # one per task
    assert all(info.last_entry_id >= 2 for info in ledgers)  # several entries each
    back = read_log(spark, uri, name, includePositions="true")
    assert back.columns == ["id", "pad", "log", "ledger_id", "entry_id", "timestamp"]
    assert back.count() == rows
    assert back.select("ledger_id", "entry_id").distinct().count() == \
        sum(i.last_entry_id + 1 for i in ledgers)


def test_raw_write_turns_each_value_into_one_entry(spark, bk, uri, log_name):
    name = log_name()
    df = spark.range(100).selectExpr("CAST(id AS STRING) AS value")
    write(df, uri, name, entryFormat="raw")
    write(spark.createDataFrame([(b"\x00\xff",)], "value binary"), uri, name)  # format kept
    rows = read_log(spark, uri, name).collect()
    assert sorted(bytes(r.value) for r in rows) == \
        sorted([str(i).encode() for i in range(100)] + [b"\x00\xff"])
    assert log_metadata(bk, name).properties[FORMAT_PROPERTY] == "raw"


def test_appending_widens_nullability_and_refuses_other_schemas(spark, bk, uri, log_name):
    name = log_name()
    write(spark.range(3).selectExpr("id", "'a' AS tag"), uri, name)  # id not nullable
    write(spark.createDataFrame([(None, "b")], "id long, tag string"), uri, name)
    back = read_log(spark, uri, name)
    assert back.schema["id"].nullable
    assert back.count() == 4
    with pytest.raises(PySparkException, match="holds rows of schema"):
        write(spark.range(3).selectExpr("CAST(id AS STRING) AS id"), uri, name)


def test_raw_log_refuses_arrow_and_rows_without_value(spark, bk, uri, log_name):
    name = log_name()
    write(spark.range(3).selectExpr("CAST(id AS STRING) AS value"), uri, name,
          entryFormat="raw")
    with pytest.raises(PySparkException, match="option 'entryFormat'.*holds raw"):
        write(spark.range(3).selectExpr("CAST(id AS STRING) AS value"), uri, name,
              entryFormat="arrow")
    with pytest.raises(PySparkException, match="'value' column"):
        write(spark.range(3), uri, name)


def test_overwrite_replaces_the_log_atomically_and_deletes_old_ledgers(
        spark, bk, uri, log_name):
    name = log_name()
    write(spark.range(10).selectExpr("id"), uri, name)
    old = [i.ledger_id for i in log_ledgers(bk, name)]
    write(spark.range(100, 103).selectExpr("CAST(id AS STRING) AS s"), uri, name,
          mode="overwrite")
    back = read_log(spark, uri, name)
    assert back.columns == ["s"] and sorted(r.s for r in back.collect()) == \
        ["100", "101", "102"]
    for lid in old:
        with pytest.raises(NoSuchLedgerError):
            bk.open_ledger(lid, recovery=False)


def test_batch_write_fences_a_live_log_writer(spark, bk, uri, log_name):
    """The commit takes the log over (fences its last two ledgers): the writer that owned
    the log stops; nothing it had acknowledged is lost, nothing lands after the commit."""
    name = log_name()
    writer = WriterProc(uri, name, "zombie")
    try:
        writer.wait_for(lambda lines: sum(x.startswith("ack") for x in lines) >= 100)
        write(spark.range(5).selectExpr("CONCAT('spark-', id) AS value"), uri, name,
              password="pw")
        writer.wait_for(lambda lines: any(x.startswith("lost") for x in lines))
        acked = {x.split()[4] for x in writer.acks()}
    finally:
        writer.stop()
    rows = read_log(spark, uri, name, password="pw").collect()
    in_log = [bytes(r.value).decode() for r in
              sorted(rows, key=lambda r: (r.ledger_id, r.entry_id))]
    zombie = [v for v in in_log if v.startswith("zombie")]
    assert acked <= set(zombie)  # every acknowledged append survived the takeover
    assert sorted(in_log[len(zombie):]) == [f"spark-{i}" for i in range(5)]  # at the end


def test_failed_write_leaves_no_ledger_behind(spark, bk, uri, log_name):
    name = log_name()
    write(spark.range(3).selectExpr("id"), uri, name)
    before = [i.ledger_id for i in log_ledgers(bk, name)]
    boom = F.udf(lambda x: x if x < 150 else 1 // 0, "long")
    with pytest.raises(PySparkException):
        write(spark.range(0, 200, 1, 2).select(boom("id").alias("id")), uri, name)
    assert [i.ledger_id for i in log_ledgers(bk, name)] == before
    mine = [lid for lid in bk.list_ledgers()
            if dict(bk.ledger_metadata(lid).custom_metadata).get(LEDGER_LOG_KEY) == name]
    assert sorted(mine) == sorted(before)  # the partial ledgers were deleted


def test_default_save_mode_is_refused(spark, uri, log_name):
    with pytest.raises(PySparkException, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
        spark.range(1).write.format("bookkeeper").option("metadataServiceUri", uri) \
            .option("log", log_name()).save()
