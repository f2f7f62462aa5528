"""Batch reads: raw logs, live writers, ledgers by id, partitions, filter pushdown."""

from __future__ import annotations

import datetime as dt
import re
import time

import pytest
from pyspark.errors import PySparkException
from spark_helpers import WriterProc, read_log

from bk_spark.datasource import BookKeeperDataSource
from bk_spark.datasource.formats import RAW_SCHEMA
from bk_spark.log import log_ledgers, open_log_writer


def append_ledgers(bk, name: str, sizes: list[int], pause_s: float = 0.0):  # type: ignore[no-untyped-def]
    """A closed log of ``len(sizes)`` ledgers; returns [(position, payload)]."""
    w = open_log_writer(bk, name)
    out = []
    for i, n in enumerate(sizes):
        if i:
            time.sleep(pause_s)
            w.roll()
        for j in range(n):
            payload = f"{name}:{i}:{j}".encode()
            out.append((w.append(payload), payload))
    w.close()
    return out


def test_format_is_found_by_name_without_registration(spark, bk, uri, log_name):
    name = log_name()
    append_ledgers(bk, name, [3])
    assert read_log(spark, uri, name).count() == 3


def test_explicit_registration_works_too(spark, bk, uri, log_name):
    name = log_name()
    append_ledgers(bk, name, [2])
    spark.dataSource.register(BookKeeperDataSource)
    assert read_log(spark, uri, name).count() == 2


def test_raw_read_returns_every_entry_appended_by_the_python_api(spark, bk, uri, log_name):
    name = log_name()
    before = dt.datetime.now(dt.UTC)
    written = append_ledgers(bk, name, [30, 1, 19])
    df = read_log(spark, uri, name)
    assert df.schema == RAW_SCHEMA
    rows = df.collect()
    got = sorted((r.ledger_id, r.entry_id, bytes(r.value), r.log) for r in rows)
    assert got == sorted((p.ledger_id, p.entry_id, v, name) for p, v in written)
    assert all(before - dt.timedelta(seconds=1) <= r.timestamp.replace(tzinfo=dt.UTC)
               <= dt.datetime.now(dt.UTC) for r in rows)


def test_read_stops_at_lac_of_a_live_writer_which_keeps_writing(spark, bk, uri, log_name):
    name = log_name()
    writer = WriterProc(uri, name, "live", "--roll-every", "150")
    try:
        writer.wait_for(lambda lines: sum(x.startswith("ack") for x in lines) >= 300)
        rows = read_log(spark, uri, name, password="pw").collect()
        acked_after_read = len(writer.acks())
        # A prefix of the log: whole closed ledgers, then the open one up to its LAC.
        payloads = [bytes(r.value).decode() for r in
                    sorted(rows, key=lambda r: (r.ledger_id, r.entry_id))]
        seqs = [int(p.split(":")[2]) for p in payloads]
        assert seqs == list(range(len(seqs)))
        assert 300 - 1 <= len(seqs) <= acked_after_read
        # The writer was not fenced: it goes on appending to its ledger.
        writer.wait_for(lambda lines: sum(x.startswith("ack") for x in lines)
                        >= acked_after_read + 100)
        assert not any(x.startswith("lost") for x in writer.lines)
    finally:
        writer.stop()


def test_ledgers_option_reads_ledgers_by_id(spark, bk, uri, log_name):
    name = log_name()
    written = append_ledgers(bk, name, [5, 7])
    second = written[5][0].ledger_id
    plain = bk.create_ledger(3, 2, 2)
    for i in range(4):
        plain.add_entry(f"plain-{i}".encode())
    plain.close()
    df = spark.read.format("bookkeeper").option("metadataServiceUri", uri) \
        .option("ledgers", f"{second},{plain.id}").load()
    rows = {(r.ledger_id, r.entry_id): r for r in df.collect()}
    assert len(rows) == 11
    assert bytes(rows[(second, 0)].value) == written[5][1]  # log frame removed
    assert rows[(second, 0)].log == name
    assert bytes(rows[(plain.id, 3)].value) == b"plain-3"  # stored bytes as they are
    assert rows[(plain.id, 3)].log is None and rows[(plain.id, 3)].timestamp is None


def test_timestamp_filters_on_ledgers_read_by_id_drop_the_null_timestamps_of_plain_ledgers(
        spark, bk, uri, log_name):
    name = log_name()
    written = append_ledgers(bk, name, [5])
    framed = written[0][0].ledger_id
    plain = bk.create_ledger(3, 2, 2)
    for i in range(4):
        plain.add_entry(f"plain-{i}".encode())
    plain.close()
    df = spark.read.format("bookkeeper").option("metadataServiceUri", uri) \
        .option("ledgers", f"{framed},{plain.id}").load()
    for cond in ("timestamp > TIMESTAMP '2000-01-01 00:00:00'", "timestamp IS NOT NULL"):
        rows = df.filter(cond).collect()
        assert sorted((r.ledger_id, r.entry_id) for r in rows) == \
            [(framed, e) for e in range(5)], cond
    assert df.filter("timestamp IS NULL").count() == 4


def test_min_partitions_splits_large_ledgers_into_entry_ranges(spark, bk, uri, log_name):
    name = log_name()
    append_ledgers(bk, name, [400, 3])
    assert read_log(spark, uri, name).rdd.getNumPartitions() == 1  # packed
    df = read_log(spark, uri, name, minPartitions="8")
    assert df.rdd.getNumPartitions() >= 8
    assert df.count() == 403
    assert df.select("ledger_id", "entry_id").distinct().count() == 403


def test_starting_and_ending_offsets_are_positions(spark, bk, uri, log_name):
    name = log_name()
    written = append_ledgers(bk, name, [10, 10])
    (p3, _), (p15, _) = written[3], written[15]
    start = f'{{"{name}": {{"ledger": {p3.ledger_id}, "entry": 3}}}}'
    end = f'{{"{name}": {{"ledger": {p15.ledger_id}, "entry": {p15.entry_id}}}}}'
    df = read_log(spark, uri, name, startingOffsets=start, endingOffsets=end)
    got = sorted(bytes(r.value) for r in df.collect())
    assert got == sorted(v for _p, v in written[3:15])


def test_an_ending_offset_past_a_closed_ledgers_end_reads_that_ledger_to_its_end(
        spark, bk, uri, log_name):
    name = log_name()
    written = append_ledgers(bk, name, [10, 10])
    first, last = written[0][0].ledger_id, written[-1][0].ledger_id
    for lid, n in ((first, 10), (last, 20)):  # ledger 0..9 closed; the log's last, closed
        end = f'{{"{name}": {{"ledger": {lid}, "entry": 15}}}}'
        got = sorted(bytes(r.value) for r in
                     read_log(spark, uri, name, endingOffsets=end).collect())
        assert got == sorted(v for _p, v in written[:n])


def test_pushdown_on_positions_shows_in_plan_and_reads_fewer_entries(
        spark, bk, uri, log_name, spark_cluster):
    name = log_name()
    written = append_ledgers(bk, name, [300, 300])
    second = written[300][0].ledger_id
    before = spark_cluster.entries_read()
    assert read_log(spark, uri, name).count() == 600
    full = spark_cluster.entries_read() - before

    df = read_log(spark, uri, name).filter(
        f"ledger_id = {second} AND entry_id >= 10 AND entry_id < 20")
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert not re.search(r"\bFilter \(", plan)  # every predicate went into the scan
    before = spark_cluster.entries_read()
    rows = df.collect()
    filtered = spark_cluster.entries_read() - before
    assert sorted(r.entry_id for r in rows) == list(range(10, 20))
    assert {r.ledger_id for r in rows} == {second}
    assert full >= 600 and filtered <= 10 + 2


def test_pushdown_of_in_lists_and_log_names(spark, bk, uri, log_name):
    a, b = log_name("a"), log_name("b")
    append_ledgers(bk, a, [20])
    append_ledgers(bk, b, [20])
    df = read_log(spark, uri, f"{a},{b}").filter(
        f"log = '{b}' AND entry_id IN (1, 5, 19, 40)")
    assert sorted((r.log, r.entry_id) for r in df.collect()) == [(b, 1), (b, 5), (b, 19)]
    none = read_log(spark, uri, a).filter(f"log = '{b}'")
    assert none.count() == 0


def test_timestamp_filter_skips_ledgers_by_their_time_range(
        spark, bk, uri, log_name, spark_cluster):
    name = log_name()
    append_ledgers(bk, name, [100, 100, 100], pause_s=0.3)
    ledgers = log_ledgers(bk, name)
    cut_ms = ledgers[2].first_ts_ms
    cut = dt.datetime.fromtimestamp(cut_ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    df = read_log(spark, uri, name).filter(f"timestamp >= TIMESTAMP '{cut}'")
    before = spark_cluster.entries_read()
    rows = df.collect()
    read = spark_cluster.entries_read() - before
    assert {r.ledger_id for r in rows} == {ledgers[2].ledger_id}
    assert len(rows) == 100
    assert read < 150  # the first two ledgers were skipped from the metadata alone


def test_reads_work_with_filter_pushdown_disabled(spark, bk, uri, log_name):
    name = log_name()
    append_ledgers(bk, name, [50])
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")
    try:
        df = read_log(spark, uri, name).filter("entry_id < 5")
        assert sorted(r.entry_id for r in df.collect()) == [0, 1, 2, 3, 4]
        assert re.search(r"\bFilter \(", df._jdf.queryExecution().executedPlan().toString())
    finally:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")


def test_reading_a_missing_log_fails_naming_the_option(spark, uri, log_name):
    with pytest.raises(PySparkException, match="option 'log'.*does not exist"):
        read_log(spark, uri, log_name("missing")).count()


def test_columns_of_an_arrow_log_named_like_positions_are_not_pushed(spark, uri, log_name):
    name = log_name()
    rows = [(1, "x"), (2, "y")]
    spark.createDataFrame(rows, "entry_id long, log string").write.format("bookkeeper") \
        .mode("append").option("metadataServiceUri", uri).option("log", name).save()
    df = read_log(spark, uri, name).filter("entry_id = 2 AND log = 'y'")
    assert [(r.entry_id, r.log) for r in df.collect()] == [(2, "y")]
