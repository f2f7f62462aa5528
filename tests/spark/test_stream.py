"""Streaming reads: admission control, lag in progress, open ledgers, data loss."""

from __future__ import annotations

import shutil
import time
from dataclasses import replace

import pyarrow as pa
import pytest
from pyspark.errors import PySparkException
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxRows
from pyspark.sql.types import StringType, StructField, StructType

from bk_spark.datasource import connections
from bk_spark.datasource.options import ReadOptions, WriteOptions
from bk_spark.datasource.source import resolve_read_format, scan_spec
from bk_spark.datasource.stream import BookKeeperStreamReader
from bk_spark.datasource.writer import BookKeeperBatchWriter
from bk_spark.errors import LogFormatError, LogTruncatedError
from bk_spark.io.metadata_store import Versioned
from bk_spark.io.zk import zk_operations
from bk_spark.log import create_log, log_ledgers, open_log_writer, truncate_log
from bk_spark.log.store import log_store, update_log
from bk_spark.protocol.digest import master_key
from bk_spark.protocol.log_format import Position


def fill(bk, name: str, n: int, roll_every: int | None = None, close: bool = True):  # type: ignore[no-untyped-def]
    """Append ``n`` entries (a new ledger every ``roll_every``)."""
    w = open_log_writer(bk, name)
    step = roll_every or n
    for lo in range(0, n, step):
        if lo:
            w.roll()
        for f in [w.append_async(f"{name}:{i}".encode()) for i in range(lo, min(n, lo + step))]:
            f.result()
    if close:
        w.close()
    return w


def stream(spark, uri: str, log: str, **options: str):  # type: ignore[no-untyped-def]
    r = spark.readStream.format("bookkeeper").option("metadataServiceUri", uri) \
        .option("log", log).option("startingOffsets", "earliest")
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def run_available_now(df, tmp_path, name: str):  # type: ignore[no-untyped-def]
    """Run to the end with availableNow into a foreachBatch sink, checkpoint under
    ``tmp_path/name``; returns (rows, (batch sizes, progress))."""
    got: list = []

    def collect(batch_df, _batch_id):  # type: ignore[no-untyped-def]
        got.extend(batch_df.collect())

    q = (df.writeStream.foreachBatch(collect)
         .option("checkpointLocation", str(tmp_path / name)).trigger(availableNow=True)
         .start())
    q.awaitTermination(300)
    if q.exception() is not None:
        raise q.exception()
    progress = q.recentProgress
    return got, ([p["numInputRows"] for p in progress], progress)


def test_max_entries_per_trigger_sizes_batches_under_available_now(
        spark, bk, uri, log_name, tmp_path):
    name = log_name()
    fill(bk, name, 250, roll_every=60)
    rows, (sizes, progress) = run_available_now(
        stream(spark, uri, name, maxEntriesPerTrigger="70"), tmp_path, "q_max_entries")
    assert [s for s in sizes if s] == [70, 70, 70, 40]
    assert sorted(int(bytes(r.value).split(b":")[1]) for r in rows) == list(range(250))
    # reportLatestOffset: the progress shows how far the log goes (the lag).
    latest = progress[0]["sources"][0]["latestOffset"]
    assert name in latest and latest != progress[0]["sources"][0]["endOffset"]


SCHEMA = StructType([StructField("value", StringType())])


def reader(uri: str, name: str, **options: str) -> BookKeeperStreamReader:
    o = ReadOptions.parse({"metadataServiceUri": uri, "log": name, **options},
                          streaming=True)
    rf = resolve_read_format(o)
    return BookKeeperStreamReader(o, scan_spec(o, rf), rf.stored)


def entries_between(r: BookKeeperStreamReader, start: dict, end: dict) -> int:
    return sum(s.entries for p in r.partitions(start, end) for s in p.slices)


def test_max_bytes_per_trigger_limits_batches_by_ledger_lengths(bk, uri, log_name):
    name = log_name()
    fill(bk, name, 100)  # entries of ~80 bytes
    r = reader(uri, name, startingOffsets="earliest", maxBytesPerTrigger="500")
    start = r.initialOffset()
    end = r.latestOffset(start, r.getDefaultReadLimit())
    first = log_ledgers(bk, name)[0]
    size = bk.ledger_metadata(first.ledger_id).length / (first.last_entry_id + 1)
    assert entries_between(r, start, end) == int(500 // size)
    tiny = reader(uri, name, startingOffsets="earliest", maxBytesPerTrigger="1")
    assert entries_between(tiny, start, tiny.latestOffset(start, ReadMaxBytes(1))) == 1


def test_min_entries_per_trigger_waits_until_enough_or_max_delay(bk, uri, log_name):
    name = log_name()
    w = fill(bk, name, 5, close=False)
    r = reader(uri, name, startingOffsets="earliest", minEntriesPerTrigger="20",
               maxTriggerDelay="2s")
    start = r.initialOffset()
    time.sleep(0.3)  # the LAC of the last entry travels with the next add or within 50 ms
    assert r.latestOffset(start, r.getDefaultReadLimit()) == start  # 5 < 20: wait
    for f in [w.append_async(b"more") for _ in range(20)]:
        f.result()
    time.sleep(0.3)
    end = r.latestOffset(start, r.getDefaultReadLimit())
    assert entries_between(r, start, end) >= 20
    w.append(b"one")
    time.sleep(0.3)
    assert r.latestOffset(end, r.getDefaultReadLimit()) == end
    time.sleep(2.0)  # maxTriggerDelay passed: a batch with what there is
    assert entries_between(r, end, r.latestOffset(end, r.getDefaultReadLimit())) >= 1
    w.close()


def test_open_ledger_is_read_up_to_its_lac_then_continued(bk, uri, log_name):
    name = log_name()
    w = fill(bk, name, 10, close=False)
    time.sleep(0.3)
    r = reader(uri, name, startingOffsets="earliest")
    start = r.initialOffset()
    end = r.latestOffset(start, ReadAllAvailable())
    assert entries_between(r, start, end) == 10
    # The progress' latestOffset: the readable end, and the lag behind it (none).
    assert r.reportLatestOffset() == {
        name: {**end[name], "lag": {"entries": 0, "bytes": 0}}}
    w.roll()
    for f in [w.append_async(b"x") for _ in range(5)]:
        f.result()
    w.close()
    end2 = r.latestOffset(end, ReadAllAvailable())
    assert entries_between(r, end, end2) == 5
    assert r.latestOffset(end2, ReadMaxRows(3)) == end2  # nothing new: the same offset


def test_fail_on_data_loss_fails_or_skips_truncated_unread_ledgers(
        spark, bk, uri, log_name, tmp_path):
    name = log_name()
    fill(bk, name, 20)  # ledger A, read by a first run
    rows, _ = run_available_now(stream(spark, uri, name), tmp_path, "q_loss_first")
    assert len(rows) == 20
    shutil.copytree(tmp_path / "q_loss_first", tmp_path / "q_loss_skip")
    fill(bk, name, 20)  # ledger B: never read...
    fill(bk, name, 20)  # ledger C
    ledgers = log_ledgers(bk, name)
    truncate_log(bk, name, before=Position(ledgers[-1].ledger_id, 0, ledgers[-1].index))

    with pytest.raises(PySparkException, match="truncated before they were read.*"
                                               "failOnDataLoss=false") as failed:
        run_available_now(stream(spark, uri, name), tmp_path, "q_loss_first")
    # The message names real ledgers: where the log starts now, never a placeholder.
    assert "ledger -1" not in str(failed.value)
    assert f"now starts at entry 0 of ledger {ledgers[-1].ledger_id}" in str(failed.value)
    rows, _ = run_available_now(stream(spark, uri, name, failOnDataLoss="false"), tmp_path,
                                "q_loss_skip")
    assert sorted(bytes(r.value) for r in rows) == \
        sorted(f"{name}:{i}".encode() for i in range(20))  # ledger C only


def test_truncated_data_is_skipped_by_the_reader_when_not_fail_on_data_loss(
        bk, uri, log_name):
    name = log_name()
    fill(bk, name, 60, roll_every=20)
    r = reader(uri, name, startingOffsets="earliest", failOnDataLoss="false")
    start = r.initialOffset()
    ledgers = log_ledgers(bk, name)
    truncate_log(bk, name, before=Position(ledgers[2].ledger_id, 0, ledgers[2].index))
    end = r.latestOffset(start, ReadAllAvailable())
    rows = [b for p in r.partitions(start, end) for b in r.read(p)]
    assert sum(b.num_rows for b in rows) == 20  # the last ledger only
    assert r.latestOffset(end, ReadAllAvailable()) == end
    strict = reader(uri, name, startingOffsets="earliest")
    with pytest.raises(LogTruncatedError, match="failOnDataLoss=false"):
        strict.latestOffset(start, ReadAllAvailable())


def test_an_idle_stream_keeps_one_zookeeper_watch_on_its_log_however_long_it_waits(
        bk, uri, log_name):
    """Nothing readable past the query's position on a log nobody writes: every
    latestOffset waits on a watch of the log's metadata. Spark asks several times a
    second, and kazoo keeps every watcher armed on a path until the path changes: one
    per wait grew the driver's memory without bound (and ran them all at the next change).
    """
    name = log_name()
    fill(bk, name, 3)  # closed: the query's end is past the log's last ledger
    r = reader(uri, name, startingOffsets="earliest")
    start = r.initialOffset()
    end = r.latestOffset(start, ReadAllAvailable())
    for _ in range(12):
        assert r.latestOffset(end, ReadAllAvailable()) == end
    client = connections.client(r.options.uri, r.options.security)  # the reader's
    # kazoo's table of armed data watchers (no public accessor): the one way to count them.
    armed = client.zk._data_watchers.get(log_store(client).path(name), ())
    assert len(armed) <= 1
    fill(bk, name, 2)  # news still ends the wait: the next batch has it
    deadline = time.monotonic() + 30
    while (later := r.latestOffset(end, ReadAllAvailable())) == end and \
            time.monotonic() < deadline:
        pass
    assert entries_between(r, end, later) == 2


def test_a_ledger_truncated_while_a_task_reads_it_is_data_loss_not_a_read_error(
        bk, uri, log_name):
    """Truncation changes the log first, then deletes each dropped ledger: its data on the
    bookies, then its metadata. A task reading the ledger in between finds no entries
    where the ledger still exists: data loss like a ledger already gone (skipped with
    failOnDataLoss=false, the data-loss error otherwise), not a NoSuchEntryError."""
    name = log_name()
    fill(bk, name, 40, roll_every=20)
    lenient = reader(uri, name, startingOffsets="earliest", failOnDataLoss="false")
    start = lenient.initialOffset()
    end = lenient.latestOffset(start, ReadAllAvailable())
    parts = lenient.partitions(start, end)
    strict = reader(uri, name, startingOffsets="earliest")
    first, second = log_ledgers(bk, name)
    # truncate_log up to where it deletes the ledger's metadata (its last step).
    update_log(bk, name, needs_change=lambda m: m.first_index <= first.index,
               make_change=lambda m: m.truncated(second.index))
    md = bk.ledger_metadata(first.ledger_id)
    for b in {b for _first, ens in md.ensembles for b in ens}:
        bk.bookies.get(b).delete_ledger(first.ledger_id, master_key(b""))
    rows = [b for p in parts for b in lenient.read(p)]
    assert sum(b.num_rows for b in rows) == 20  # the second ledger only
    with pytest.raises(LogTruncatedError, match=f"ledger {first.ledger_id} of log "
                                                f"'{name}'.*failOnDataLoss=false"):
        [b for p in parts for b in strict.read(p)]


def test_a_log_empty_when_the_query_started_then_written_in_arrow_fails_the_query_clearly(
        bk, uri, log_name):
    """A query's schema is fixed when it starts: an empty log reads as raw. Rows written in
    arrow since must not reach the query as raw values (Arrow IPC bytes in ``value``)."""
    name = log_name()
    create_log(bk, name)
    r = reader(uri, name, startingOffsets="earliest")
    start = r.initialOffset()
    assert r.spec.entry_format == "raw"
    o = WriteOptions.parse({"metadataServiceUri": uri, "log": name}, streaming=False)
    w = BookKeeperBatchWriter(o, SCHEMA, False)  # an empty log is written in arrow
    w.commit([w.write(iter([pa.RecordBatch.from_pydict({"value": ["a", "b"]})]))])
    with pytest.raises(LogFormatError, match=f"log '{name}' now holds arrow rows of "
                                             f"struct<value:string>.*restart the query"):
        r.latestOffset(start, ReadAllAvailable())


def test_a_query_resumes_from_a_checkpoint_written_in_the_older_offset_form(
        spark, bk, uri, log_name, tmp_path):
    """Checkpoints store Position's string form; one written before it (separate index,
    ledger, entry numbers) is read on restart and the query goes on where it stopped."""
    import json

    name = log_name()
    fill(bk, name, 30)
    rows, _ = run_available_now(stream(spark, uri, name), tmp_path, "q_old_form")
    assert len(rows) == 30
    for f in (tmp_path / "q_old_form" / "offsets").iterdir():
        if f.name.isdigit():
            lines = f.read_text().splitlines()
            d = json.loads(lines[2])[name]
            assert set(d) == {"position", "log_id"}, d
            old = {**older_offset_form(d["position"]), "log_id": d["log_id"]}
            f.write_text("\n".join(lines[:2] + [json.dumps({name: old})]) + "\n")
            crc = f.with_name(f".{f.name}.crc")
            crc.unlink(missing_ok=True)
    fill(bk, name, 20)
    rows, _ = run_available_now(stream(spark, uri, name), tmp_path, "q_old_form")
    assert sorted(bytes(r.value) for r in rows) == sorted(f"{name}:{i}".encode()
                                                          for i in range(20))


def test_a_micro_batchs_read_task_reads_no_zookeeper_node_of_a_password_log_left_open(
        bk, uri, log_name):
    """Issue 28: the read task of a micro-batch gets the open ledger's metadata in its
    slice, as the planner's kept handle read it (the writer, with a password, is left
    open), so it reads no ZooKeeper node before fetching the entries (before: the ledger's
    metadata, one request per micro-batch, ~1.6 ms of a 5-7 ms task); the rows are the
    log's."""
    name = log_name()
    w = open_log_writer(bk, name, password=b"p")
    for i in range(5):
        w.append(f"{name}:{i}".encode())
    r = reader(uri, name, startingOffsets="earliest", password="p")
    zk = connections.client(uri, r.options.security).zk
    start = r.initialOffset()
    end = r.latestOffset(start, ReadAllAvailable())
    rows: list[bytes] = []
    for round_ in range(2):
        parts = r.partitions(start, end)
        before = zk_operations(zk).total()
        got = [v for p in parts for b in r.read(p) for v in b.column("value").to_pylist()]
        assert zk_operations(zk).total() - before == 0
        assert got, round_
        rows += got
        for i in range(5 * round_ + 5, 5 * round_ + 10):
            w.append(f"{name}:{i}".encode())
        start, end = end, r.latestOffset(end, ReadAllAvailable())
    assert rows == [f"{name}:{i}".encode() for i in range(len(rows))]
    w.close()


def test_a_read_task_whose_planned_metadata_is_stale_reads_it_again_and_gets_every_row(
        bk, uri, log_name):
    """The metadata a slice carries (the planner's read, issue 28) can be older than a
    change of the ledger's ensemble (a fragment re-replicated to other bookies): the task
    that cannot read with it reads the metadata again and reads every row (here the
    carried ensemble of a ledger with one copy per entry lists its two bookies swapped, so
    each asks the bookie without the entry)."""
    name = log_name()
    w = open_log_writer(bk, name, password=b"p", ensemble_size=2, write_quorum_size=1,
                        ack_quorum_size=1)
    for i in range(6):
        w.append(f"{name}:{i}".encode())
    r = reader(uri, name, startingOffsets="earliest", password="p")
    start = r.initialOffset()
    end = r.latestOffset(start, ReadAllAvailable())
    parts = r.partitions(start, end)
    sl = parts[0].slices[0]
    assert sl.metadata is not None
    md = sl.metadata.value
    (_first, ensemble), = md.ensembles
    stale = replace(sl, metadata=Versioned(replace(md, ensembles=((0, ensemble[::-1]),)),
                                           sl.metadata.version))
    part = replace(parts[0], slices=(stale, *parts[0].slices[1:]))
    rows = [v for b in r.read(part) for v in b.column("value").to_pylist()]
    assert rows == [f"{name}:{i}".encode() for i in range(sl.first_entry, sl.last_entry + 1)]
    w.close()


def older_offset_form(position: str) -> dict[str, int]:
    """The offset form of checkpoints before Position's string form."""
    p = Position.parse(position)
    return {"index": p.ledger_index, "ledger": p.ledger_id, "entry": p.entry_id}


def test_micro_batches_read_no_zookeeper_node_while_the_log_does_not_change(
        bk, uri, log_name):
    """Issue 28: planning a micro-batch (``latestOffset``, ``partitions``) reads the log's
    metadata again only once its watch fired, and keeps the open ledger's read handle: no
    ZooKeeper request while entries go on into the same ledger (before: the log's metadata
    twice and the ledger's once per batch). A roll is seen at once all the same."""
    name = log_name()
    w = fill(bk, name, 5, close=False)
    r = reader(uri, name, startingOffsets="earliest")
    zk = connections.client(uri, r.options.security).zk
    start = r.initialOffset()
    end = r.latestOffset(start, ReadAllAvailable())
    assert entries_between(r, start, end) == 5
    before = zk_operations(zk).total()
    for i in range(3):
        w.append(f"more {i}".encode())
        nxt = r.latestOffset(end, ReadAllAvailable())  # waits for the entry's LAC
        assert entries_between(r, end, nxt) == 1
        end = nxt
    assert zk_operations(zk).total() - before == 0
    w.roll()
    w.append(b"after the roll")
    deadline = time.monotonic() + 20
    got = 0
    while got < 1 and time.monotonic() < deadline:
        nxt = r.latestOffset(end, ReadAllAvailable())
        got, end = got + entries_between(r, end, nxt), nxt
    assert got == 1
    w.close()
