"""The plain `bookkeeper` source over an offloaded arrow log reads each ledger's Parquet file
as Arrow record batches, planned by row groups (issue 29): the rows, positions, timestamps
and order are exactly those the bookies returned, across row groups that cut entries in
two, a file written before the log's schema widened, null values, several partitions per
file, and position / timestamp filters pushed into the scan. A password, as a user has."""

from __future__ import annotations

import datetime as dt

import pytest
from spark_helpers import offload_now, read_log

from bk_spark.io import offload_files
from bk_spark.log import open_log_view
from bk_spark.protocol import offload_rules as rules

PW = "p"



def _rows(df) -> list[tuple]:  # type: ignore[no-untyped-def]
    return [tuple(r) for r in df.collect()]


def test_the_source_over_an_offloaded_arrow_log_returns_exactly_the_bookies_rows(
        spark, bk, uri, log_name, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    # row groups of 40 rows: every entry (75 rows, one per Spark task) spans two or three
    monkeypatch.setattr(offload_files, "ROW_GROUP_BYTES", 1, raising=False)
    monkeypatch.setattr(offload_files, "MIN_ROW_GROUP_ROWS", 40, raising=False)
    monkeypatch.setattr(offload_files, "ROW_GROUP_ROWS", 40)
    name = log_name()

    def write(df) -> None:  # type: ignore[no-untyped-def]
        (df.write.format("bookkeeper").option("metadataServiceUri", uri).option("log", name)
         .option("password", PW).option("entryFormat", "arrow").mode("append").save())

    def read(**options: str):  # type: ignore[no-untyped-def]
        return read_log(spark, uri, name, password=PW, includePositions="true", **options)

    # 1. non-null columns, offloaded before the schema widens (the file keeps them non-null)
    write(spark.range(0, 300, 1, 4).selectExpr("id AS n", "CONCAT('s', id) AS s"))
    first = _rows(read())
    # both copies kept for now: a Spark append fences the log's last two ledgers, and
    # fails while their bookie copies are gone (a limit of the commit, not of reads)
    offload_now(bk, name, tmp_path / "t", lag_ms=-1, password=PW)
    # 2. the same columns with nulls: the log's schema widens to nullable
    write(spark.createDataFrame([(i, None if i % 3 == 0 else f"x{i}") for i in range(300, 600)],
                                "n long, s string").repartition(4))
    offloaded = {lid for lid, st in rules.states_of(open_log_view(bk, name).md.properties)
                 .items() if st.complete}
    second = [r for r in _rows(read()) if r[3] not in offloaded]  # from the bookies
    expected = first + second
    assert len(expected) == 600 and len(second) == 300
    assert read().schema["n"].nullable and read().schema["s"].nullable
    offload_now(bk, name, tmp_path / "t", lag_ms=0, password=PW)
    view = open_log_view(bk, name)
    states = rules.states_of(view.md.properties)
    assert {rules.tier(states.get(r.ledger_id)).value for r in view.ledgers()} == \
        {"offloaded"}  # nothing left on the bookies: every row below is from Parquet

    # the same rows, positions, timestamps, in the same order; one partition or many
    assert _rows(read()) == expected
    assert _rows(read(minPartitions="7")) == expected
    df = read(minPartitions="5")
    assert df.rdd.getNumPartitions() >= 5
    # position and timestamp filters, pushed into the Parquet scan
    lid, eid = expected[100][3], expected[100][4]
    got = _rows(df.filter((df.ledger_id == lid) & (df.entry_id >= eid)))
    assert got == [r for r in expected if r[3] == lid and r[4] >= eid]
    got = _rows(df.filter(df.entry_id.isin(0, 2)))
    assert got == [r for r in expected if r[4] in (0, 2)]
    cut = expected[450][5]
    got = _rows(df.filter(df.timestamp >= cut))
    assert got == [r for r in expected if r[5] >= cut] and 0 < len(got) < 600
    assert _rows(df.filter(df.timestamp > dt.datetime(2100, 1, 1, tzinfo=dt.UTC))) == []
    # without the position columns: the typed columns only, in order
    plain = _rows(read_log(spark, uri, name, password=PW))
    assert plain == [r[:2] for r in expected]
