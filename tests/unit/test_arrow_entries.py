"""Arrow entries of a Spark write (datasource/formats.py, pack side): pure, no bookies."""

from __future__ import annotations

import random

import pyarrow as pa

from bk_spark.datasource.formats import pack_arrow, unpack_arrow


def _rows(payloads: list[bytes]) -> list[dict]:
    return [r for p in payloads for b in unpack_arrow(p) for r in b.to_pylist()]


def test_rows_are_packed_in_order_into_entries_of_about_the_target_size() -> None:
    batches = [pa.record_batch({"id": pa.array(range(i * 1000, (i + 1) * 1000), pa.int64())})
               for i in range(10)]
    payloads = list(pack_arrow(batches, target_bytes=16_000))
    assert len(payloads) == 5  # 8 bytes a row: 2,000 rows an entry
    assert [r["id"] for r in _rows(payloads)] == list(range(10_000))


def test_an_entry_over_max_bytes_is_split_however_uneven_the_rows() -> None:
    # The batch's average row (~2 KiB) hides 10 rows of 100 KB at its end: gathered by the
    # average, one entry would hold all of them (1 MB).
    rnd = random.Random(0)  # incompressible rows
    values = [b"x"] * 490 + [rnd.randbytes(100_000) for _ in range(10)]
    batch = pa.record_batch({"v": pa.array(values, pa.binary())})
    max_bytes = 250_000
    payloads = list(pack_arrow([batch], target_bytes=1 << 20, max_bytes=max_bytes))
    assert all(len(p) <= max_bytes for p in payloads)
    assert [r["v"] for r in _rows(payloads)] == values


def test_a_single_row_over_max_bytes_is_left_to_the_ledger_to_refuse() -> None:
    batch = pa.record_batch({"v": pa.array([random.Random(0).randbytes(200_000)], pa.binary())})
    payloads = list(pack_arrow([batch], max_bytes=100_000))
    assert len(payloads) == 1 and len(payloads[0]) > 100_000


def test_nulls_and_empty_values_survive_every_split_point() -> None:
    # Splits in halves land at every offset of the validity bitmaps (not only at bytes):
    # each row must come back once, in order, null or empty as it went in.
    rnd = random.Random(1)
    n = 301
    values = [None if i % 5 == 0 else b"" if i % 5 == 1 else rnd.randbytes(3_000)
              for i in range(n)]
    texts = [None if i % 3 == 0 else "" if i % 3 == 1 else f"t{i}" for i in range(n)]
    lists = [None if i % 4 == 0 else [] if i % 4 == 1 else [i, None] for i in range(n)]
    batch = pa.record_batch({"v": pa.array(values, pa.binary()),
                             "t": pa.array(texts, pa.string()),
                             "l": pa.array(lists, pa.list_(pa.int64()))})
    for max_bytes in (4_000, 20_000, 90_000):
        payloads = list(pack_arrow([batch.slice(3), batch.slice(0, 3)], target_bytes=1 << 20,
                                   max_bytes=max_bytes))
        assert len(payloads) > 2 and all(len(p) <= max_bytes for p in payloads)
        assert _rows(payloads) == batch.slice(3).to_pylist() + batch.slice(0, 3).to_pylist()


def test_a_running_stream_refuses_a_log_whose_format_or_schema_is_not_the_querys() -> None:
    import json

    import pytest
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from bk_spark.datasource.formats import (
        FORMAT_PROPERTY,
        SCHEMA_PROPERTY,
        check_still_readable,
        schema_property,
    )
    from bk_spark.errors import LogFormatError

    ids = StructType([StructField("id", LongType(), False)])
    names = StructType([StructField("name", StringType())])

    def arrow(schema: StructType) -> dict:
        return {FORMAT_PROPERTY: "arrow", SCHEMA_PROPERTY: schema_property(schema)}

    check_still_readable({}, False, "l", "raw", None)  # empty, no format yet: nothing to read
    check_still_readable({}, True, "l", "raw", None)  # ledgers, no format recorded: raw
    check_still_readable({FORMAT_PROPERTY: "raw"}, True, "l", "raw", None)
    nullable_ids = json.loads(ids.json())
    nullable_ids["fields"][0]["nullable"] = True  # appends may widen nullability
    check_still_readable(arrow(StructType.fromJson(nullable_ids)), True, "l", "arrow", ids)
    # Empty when the query started (read as raw), written in arrow since.
    with pytest.raises(LogFormatError, match="'l' now holds arrow rows of struct<id:bigint>, "
                                             "but this streaming query reads raw entries"):
        check_still_readable(arrow(ids), True, "l", "raw", None)
    with pytest.raises(LogFormatError, match="now holds raw entries.*restart the query"):
        check_still_readable({}, True, "l", "arrow", ids)
    with pytest.raises(LogFormatError, match="struct<name:string>, but .* struct<id:bigint>"):
        check_still_readable(arrow(names), True, "l", "arrow", ids)
