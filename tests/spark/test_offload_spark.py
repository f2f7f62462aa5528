"""The `bookkeeper` source reads offloaded ledgers from Parquet (tiered storage): the same
rows, positions and timestamps as from bookies; a stream from earliest crosses from
Parquet to the bookies exactly once. Ledgers with a password, writers left open."""

from __future__ import annotations

import datetime as dt
import time

import pyarrow.parquet as pq
from spark_helpers import offload_now, read_log

from bk_spark.log import open_log_reader, open_log_view, open_log_writer
from bk_spark.protocol import offload_rules as rules

PW = "p"



def _fill(bk, name: str, n: int, every: int):  # type: ignore[no-untyped-def]
    w = open_log_writer(bk, name, password=PW.encode(), roll_max_entries=every)
    for i in range(n):
        w.append(None if i % 5 == 2 else f"{name}:{i}".encode())
    return w


def test_batch_and_stream_reads_cross_from_parquet_to_bookies_exactly_once(
        spark, bk, uri, log_name, tmp_path):
    name = log_name()
    w = _fill(bk, name, 30, every=8)  # ledgers of 8, 8, 8 closed; 6 in the open one
    w.roll()
    for i in range(30, 34):
        w.append(f"{name}:{i}".encode())  # the open ledger: on bookies
    offload_now(bk, name, tmp_path / "t", lag_ms=0, password=PW)
    view = open_log_view(bk, name)
    states = rules.states_of(view.md.properties)
    tiers = [rules.tier(states.get(r.ledger_id)).value for r in view.ledgers()]
    assert tiers == ["offloaded"] * 4 + ["bookies"]
    with open_log_reader(bk, name, password=PW.encode()) as r:
        expected = [(x.position.ledger_id, x.position.entry_id, x.payload, x.timestamp_ms)
                    for x in r.read_available()]
    assert len(expected) >= 33
    rows = read_log(spark, uri, name, password=PW).collect()
    got = [(r.ledger_id, r.entry_id, None if r.value is None else bytes(r.value),
            int(r.timestamp.timestamp() * 1000 + 0.5)) for r in rows]
    assert got == expected
    # filters pushed into the Parquet scan
    cut = expected[10][3]
    df = read_log(spark, uri, name, password=PW)
    assert df.filter(df.timestamp >= dt.datetime.fromtimestamp(cut / 1000, dt.UTC)).count() == \
        sum(1 for e in expected if e[3] >= cut)
    assert df.filter(df.entry_id == 3).count() == sum(1 for e in expected if e[1] == 3)
    # a stream from earliest: every row exactly once, across both tiers
    seen: list = []
    q = (spark.readStream.format("bookkeeper").option("metadataServiceUri", uri)
         .option("log", name).option("password", PW).option("startingOffsets", "earliest")
         .option("maxEntriesPerTrigger", "7").load()
         .writeStream.foreachBatch(lambda b, _i: seen.extend(b.collect()))
         .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True)
         .start())
    q.awaitTermination(300)
    assert q.exception() is None
    assert sorted((r.ledger_id, r.entry_id) for r in seen) == \
        sorted((e[0], e[1]) for e in expected)
    w.close()


def test_an_arrow_log_offloads_its_typed_columns_and_reads_back_the_same(
        spark, bk, uri, log_name, tmp_path):
    name = log_name()
    df = spark.createDataFrame([(i, None if i % 4 == 1 else f"s{i}") for i in range(50)],
                               "n long, s string")
    (df.repartition(2).write.format("bookkeeper").option("metadataServiceUri", uri)
     .option("log", name).option("password", PW).option("entryFormat", "arrow")
     .mode("append").save())
    before = sorted(tuple(r) for r in read_log(spark, uri, name, password=PW,
                                               includePositions="true").collect())
    offload_now(bk, name, tmp_path / "t", lag_ms=-1, password=PW)
    view = open_log_view(bk, name)
    states = rules.states_of(view.md.properties)
    assert {rules.tier(states.get(r.ledger_id)).value for r in view.ledgers()} == {"both"}
    after = sorted(tuple(r) for r in read_log(spark, uri, name, password=PW,
                                              includePositions="true").collect())
    assert after == before
    # the offload path is a table of its own: typed columns plus positions
    table = pq.read_table(tmp_path / "t" / name)
    assert table.schema.names[:2] == ["n", "s"] and table.num_rows == 50
    path = rules.offload_dir((tmp_path / "t").as_uri(), name, view.md.log_id)
    assert sorted(spark.read.parquet(path).select("n", "s").collect()) == sorted(df.collect())


def test_read_log_unions_spark_parquet_scan_with_the_source_exactly_at_the_boundary(
        spark, bk, uri, log_name, tmp_path):
    from bk_spark.spark import read_log as read_both

    name = log_name()
    w = _fill(bk, name, 20, every=6)  # 6, 6, 6 closed, the open one on bookies
    offload_now(bk, name, tmp_path / "t", lag_ms=-1, password=PW)
    for i in range(20, 23):
        w.append(f"{name}:{i}".encode())
    # an idle writer tells the bookies its last entry explicit_lac_interval_s later: until
    # then a reader sees up to the entry before it (BookKeeper's LAC); wait for all 23 so
    # both reads below see the same snapshot
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        expected = sorted(tuple(r) for r in read_log(spark, uri, name, password=PW).collect())
        if len(expected) == 23:
            break
        time.sleep(0.1)
    assert len(expected) == 23
    df = read_both(spark, name, uri=uri, password=PW)
    got = sorted(tuple(r) for r in df.collect())
    assert got == expected and len({(r[1], r[2]) for r in got}) == len(got)
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert "FileScan parquet" in plan or "Parquet" in plan
    w.close()
