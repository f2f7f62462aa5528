"""Tiered storage against real bookies and ZooKeeper: closed ledgers of a log offloaded to
Parquet (Pulsar's LedgerOffloader, in one CAS loop) and read back transparently.

Ledgers carry a password and the writer is left open, as a user's would be.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from bk_spark.cli.offload import offload_status_facts
from bk_spark.core import BookKeeper
from bk_spark.errors import LogTruncatedError, NoSuchLedgerError
from bk_spark.io.parquet_reads import parquet_read_metrics
from bk_spark.log import (
    Position,
    delete_log,
    log_metadata,
    open_log_reader,
    open_log_view,
    open_log_writer,
    truncate_log,
    update_log_properties,
)
from bk_spark.log.store import update_log
from bk_spark.offload.metrics import OffloadMetrics
from bk_spark.offload.offloader import Offloader, OffloaderConfig, offload_ledger
from bk_spark.protocol import offload_rules as rules

PW = b"p"


@pytest.fixture
def bk(module_cluster) -> Iterator[BookKeeper]:
    client = BookKeeper(module_cluster.uri)
    yield client
    client.close()


def _offloader(bk: BookKeeper) -> Offloader:
    return Offloader(bk, "test", OffloaderConfig(passwords=(b"", PW)), OffloadMetrics())


def _policy(bk: BookKeeper, name: str, target: str, after: str = "0", lag_ms: int = -1
            ) -> None:
    update_log_properties(bk, name, {rules.POLICY_PROPERTY: rules.OffloadPolicy(
        after=after, target=target, deletion_lag_ms=lag_ms).to_json()})


def _write(bk: BookKeeper, name: str, n: int, per_ledger: int = 4):
    """A log of ``n`` records (every 7th null) in ledgers of ``per_ledger``, all closed (a
    last roll: every record is readable); the writer is returned open on an empty ledger."""
    w = open_log_writer(bk, name, password=PW, roll_max_entries=per_ledger,
                        ensemble_size=3, write_quorum_size=2, ack_quorum_size=2)
    for i in range(n):
        w.append(None if i % 7 == 3 else f"r{i}".encode())
    w.roll()
    return w


def _records(bk: BookKeeper, name: str, **kw) -> list[tuple]:
    with open_log_reader(bk, name, password=PW, **kw) as r:
        return [(x.position.ledger_id, x.position.entry_id, x.position.ledger_index,
                 x.payload, x.timestamp_ms) for x in r.read_available()]


def _tiers(bk: BookKeeper, name: str) -> list[str]:
    view = open_log_view(bk, name)
    states = rules.states_of(view.md.properties)
    return [rules.tier(states.get(r.ledger_id)).value for r in view.ledgers()]


def test_offloaded_ledgers_read_back_the_same_records_positions_and_timestamps(
        bk, tmp_path: Path):
    name = "off-same"
    w = _write(bk, name, 19)
    before = _records(bk, name)
    _policy(bk, name, tmp_path.as_uri())
    _offloader(bk).tick()
    tiers = _tiers(bk, name)
    assert tiers[:-1] == ["both"] * (len(tiers) - 1) and tiers[-1] == "bookies"  # open one
    served = parquet_read_metrics()
    reads, entries = served.reads._value.get(), served.entries._value.get()
    assert _records(bk, name) == before
    # "reads served from Parquet": one per offloaded ledger read, and its entries
    assert served.reads._value.get() - reads == len(tiers) - 1
    assert served.entries._value.get() - entries == len(before)
    # from a position inside an offloaded ledger, and from a timestamp
    second = before[5]
    assert _records(bk, name, start=Position(second[0], second[1], second[2])) == before[5:]
    assert _records(bk, name, timestamp_ms=before[9][4])[0][4] >= before[9][4]
    # the offload path is a Parquet table on its own: every offloaded row once
    table = pq.read_table(tmp_path / name).sort_by([("ledger_id", "ascending"),
                                                    ("entry_id", "ascending")])
    assert table.num_rows == len(before)
    assert list(zip(table.column("ledger_id").to_pylist(), table.column("entry_id").to_pylist(),
                    table.column("value").to_pylist(), strict=True)) == \
        [(a, b, d) for a, b, _c, d, _e in before]
    assert None in table.column("value").to_pylist()
    # a second pass changes nothing (offloading twice is harmless)
    md = log_metadata(bk, name)
    _offloader(bk).tick()
    assert log_metadata(bk, name).properties == md.properties
    w.close()


def test_a_crashed_attempt_never_counts_and_the_next_one_removes_its_file(bk, tmp_path):
    name = "off-crash"
    _write(bk, name, 5)
    view = open_log_view(bk, name)
    first = view.ledgers()[0]
    # what an offloader killed mid-file leaves: an id recorded, half a file at its path
    stale = rules.OffloadState("crashed0000", tmp_path.as_uri())
    update_log(bk, name, needs_change=lambda m: True, make_change=lambda m: m.with_properties(
        lambda p: rules.with_state(p, first.ledger_id, stale)))
    stale_path = rules.offload_file(name, view.md.log_id, first.ledger_id, stale)
    Path(stale_path.removeprefix("file://")).parent.mkdir(parents=True)
    Path(stale_path.removeprefix("file://")).write_bytes(b"PAR1 half a file")
    before = _records(bk, name)  # read from the bookies: not complete
    assert _tiers(bk, name)[0] == "offloading"
    _policy(bk, name, tmp_path.as_uri())
    state = offload_ledger(bk, name, first.ledger_id, (PW,), None)
    assert state is not None and state.complete and state.offload_id != "crashed0000"
    assert not Path(stale_path.removeprefix("file://")).exists()
    assert _records(bk, name) == before


def test_deletion_lag_drops_the_bookie_copy_and_reads_go_on_from_parquet(bk, tmp_path):
    name = "off-lag"
    w = _write(bk, name, 10)
    before = _records(bk, name)
    # a reader that started on the bookies, before the offload
    reader = open_log_reader(bk, name, password=PW)
    it = reader.read_available()
    got = [next(it) for _ in range(2)]
    _policy(bk, name, tmp_path.as_uri(), lag_ms=0)
    off = _offloader(bk)
    off.tick()
    off.tick()  # the deletion lag (0) passed: the bookie copies go
    ids = [r.ledger_id for r in open_log_view(bk, name).ledgers()]
    assert _tiers(bk, name)[:2] == ["offloaded", "offloaded"]
    with pytest.raises(NoSuchLedgerError):
        bk.ledger_metadata(ids[0])
    got += list(it)
    reader.close()
    assert [(x.position.ledger_id, x.position.entry_id, x.payload, x.timestamp_ms)
            for x in got] == [(a, b, d, e) for a, b, _c, d, e in before]
    assert _records(bk, name) == before
    # truncation: metadata first, then the bookie ledgers and the Parquet files
    files_before = sorted(p.name for p in (tmp_path / name).rglob("*.parquet"))
    assert len(files_before) == 3  # 4 + 4 + 2 records
    truncate_log(bk, name, Position(ids[1], 0, 1), PW)
    assert sorted(p.name for p in (tmp_path / name).rglob("*.parquet")) == files_before[1:]
    assert _records(bk, name) == [r for r in before if r[0] != ids[0]]
    with pytest.raises(LogTruncatedError):
        _records(bk, name, start=Position(ids[0], 0, 0))
    w.close()
    delete_log(bk, name, PW)
    assert list((tmp_path / name).rglob("*.parquet")) == []


def test_an_unreachable_target_is_retried_reads_stay_on_bookies_and_nothing_is_deleted(
        bk, tmp_path):
    name = "off-unreachable"
    _write(bk, name, 6)
    before = _records(bk, name)
    blocker = tmp_path / "not-a-dir"
    blocker.write_bytes(b"")  # a file where the target directory should be
    _policy(bk, name, blocker.as_uri() + "/sub", lag_ms=0)
    off = _offloader(bk)
    off.tick()
    assert off.metrics.failures._value.get() >= 1
    assert _tiers(bk, name)[0] == "offloading"
    assert _records(bk, name) == before
    for r in open_log_view(bk, name).ledgers():
        bk.ledger_metadata(r.ledger_id)  # still on the bookies
    # operators see it: the per-log gauges, and why in `bk offload status`
    assert off.metrics.log_failing.labels(name)._value.get() == 1
    assert off.metrics.log_backlog.labels(name)._value.get() == 2  # 4 + 2 records
    status = {r["log"]: r for r in offload_status_facts(bk)["logs"]}[name]
    assert status["backlog"] == 2 and "cannot write" in status["failing"]["reason"]
    _policy(bk, name, (tmp_path / "ok").as_uri(), lag_ms=-1)  # reachable again
    off.tick()
    assert _tiers(bk, name)[0] == "both"
    assert _records(bk, name) == before
    assert off.metrics.log_failing.labels(name)._value.get() == 0
    assert off.metrics.log_lag.labels(name)._value.get() == 0
    status = {r["log"]: r for r in offload_status_facts(bk)["logs"]}[name]
    assert status["failing"] is None and status["backlog"] == 0 and status["lag_ms"] == 0


def test_bookies_run_with_offload_elect_one_offloader_that_offloads_within_seconds(
        cluster_factory, tmp_path):
    """`bk bookie --offload` in every bookie, one elected; policy 0: a ledger closed is
    complete within 10 s (the issue's target), shown by `bk offload status`."""
    from bk_spark.cli.offload import offload_status_facts

    cluster = cluster_factory(3, extra_args=[
        "--offload", "--offload-target", tmp_path.as_uri(), "--recovery-password", "p",
        "--no-autorecovery"])
    with BookKeeper(cluster.uri) as bk:
        name = "off-elected"
        w = open_log_writer(bk, name, password=PW)
        for i in range(4):
            w.append(f"e{i}".encode())
        update_log_properties(bk, name, {rules.POLICY_PROPERTY: rules.OffloadPolicy(
            after="0").to_json()})
        closed_at = time.monotonic()
        w.roll()
        while _tiers(bk, name)[0] != "both":
            assert time.monotonic() - closed_at < 10
            time.sleep(0.1)
        status = offload_status_facts(bk)
        assert status["offloader"] in {b.bookie_id for b in cluster.bookies} | {None} and \
            status["offloader"] is not None
        assert status["logs"][0]["tiers"]["both"] == 1
        assert [r.payload for r in open_log_reader(bk, name, password=PW).read_available()] \
            == [f"e{i}".encode() for i in range(4)]
        w.close()


def test_an_s3_target_offloads_reads_and_truncates_through_an_s3_emulator(
        bk, monkeypatch):
    """S3 through pyarrow's S3 filesystem against moto's server (an emulator of the S3
    API, started and stopped here: not a real object store). Credentials come from the
    environment and are never part of the recorded target."""
    import pyarrow.fs as pafs
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test-key")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test-secret")
        monkeypatch.setenv("AWS_REGION", "us-east-1")
        s3 = pafs.S3FileSystem(endpoint_override=f"http://{host}:{port}", scheme="http",
                               allow_bucket_creation=True)
        s3.create_dir("offload")
        target = f"s3://offload/tier?endpoint_override=http://{host}:{port}&scheme=http"
        name = "off-s3"
        w = _write(bk, name, 9)
        before = _records(bk, name)
        _policy(bk, name, target, lag_ms=0)
        off = _offloader(bk)
        off.tick()
        off.tick()
        assert _tiers(bk, name)[:3] == ["offloaded"] * 3
        assert "test-secret" not in str(log_metadata(bk, name).properties)
        listed = s3.get_file_info(pafs.FileSelector("offload/tier", recursive=True))
        objects = sorted(i.path for i in listed if i.type == pafs.FileType.File)
        assert len(objects) == 3
        assert _records(bk, name) == before
        ids = [r.ledger_id for r in open_log_view(bk, name).ledgers()]
        truncate_log(bk, name, Position(ids[1], 0, 1), PW)
        listed = s3.get_file_info(pafs.FileSelector("offload/tier", recursive=True))
        assert sorted(i.path for i in listed if i.type == pafs.FileType.File) == objects[1:]
        w.close()
        # gone with its emulator otherwise: every later offloader pass of this module would
        # retry the stopped endpoint (the Iceberg test took 19 s instead of 1)
        delete_log(bk, name, PW)
        listed = s3.get_file_info(pafs.FileSelector("offload/tier", recursive=True))
        assert [i for i in listed if i.type == pafs.FileType.File] == []
    finally:
        server.stop()


def test_offloaded_files_are_committed_to_an_iceberg_table_in_order_and_expired_on_truncate(
        bk, tmp_path):
    """pyiceberg's SQL catalog on SQLite: the table holds the offloaded rows, read back
    with pyiceberg; truncation expires the dropped ledger's file."""
    from bk_spark.io.iceberg import catalog, table_name

    name = "off-iceberg"
    w = _write(bk, name, 10)  # 4 + 4 + 2
    before = _records(bk, name)
    cat_uri = f"sqlite:///{tmp_path}/catalog.db"
    update_log_properties(bk, name, {rules.POLICY_PROPERTY: rules.OffloadPolicy(
        after="0", target=(tmp_path / "t").as_uri(), deletion_lag_ms=-1,
        iceberg_catalog=cat_uri).to_json()})
    _offloader(bk).tick()
    table = catalog(cat_uri, (tmp_path / "wh").as_uri()).load_table(table_name(name))
    rows = table.scan().to_arrow().sort_by([("ledger_id", "ascending"),
                                            ("entry_id", "ascending")])
    assert list(zip(rows.column("ledger_id").to_pylist(), rows.column("entry_id").to_pylist(),
                    rows.column("value").to_pylist(), strict=True)) == \
        [(a, b, d) for a, b, _c, d, _e in before]
    # one commit per ledger, in log order
    history = [s.snapshot_id for s in table.snapshots()]
    assert len(history) == 3
    ids = [r.ledger_id for r in open_log_view(bk, name).ledgers()]
    truncate_log(bk, name, Position(ids[1], 0, 1), PW)

    def iceberg_rows() -> list[tuple]:
        t = catalog(cat_uri, (tmp_path / "wh").as_uri()).load_table(table_name(name))
        rows = t.scan().to_arrow().sort_by([("ledger_id", "ascending"),
                                            ("entry_id", "ascending")])
        return list(zip(rows.column("ledger_id").to_pylist(),
                        rows.column("entry_id").to_pylist(), rows.column("value").to_pylist(),
                        strict=True))

    # right after truncate_log, before any offloader pass: the table is the log's rows
    # (the dropped file was expired before it was deleted; before, the scan failed on it)
    rows = iceberg_rows()
    assert rows == [(a, b, d) for a, b, _c, d, _e in _records(bk, name)]
    assert {r[0] for r in rows} == set(ids[1:3])
    # truncated past every offloaded ledger: the table is empty, and the offloader's next
    # pass (its prefix now empty) leaves it so
    truncate_log(bk, name, Position(ids[3], 0, 3), PW)
    _offloader(bk).tick()
    assert iceberg_rows() == []
    w.close()


def test_a_reader_reading_a_ledger_from_its_bookies_while_it_is_truncated_sees_data_loss(
        bk):
    """The long race's failure on main: a reader in the middle of a ledger on its bookies
    (its next batch not fetched yet) when truncate_log drops the ledger and deletes it
    from the bookies: every bookie answers "no such ledger", which the read plan reports as
    NoSuchEntryError. That is data loss (LogTruncatedError), not an error."""
    name = "off-truncated-mid-read"
    w = open_log_writer(bk, name, password=PW, ensemble_size=3, write_quorum_size=2,
                        ack_quorum_size=2)
    futures = [w.append_async(b"x%d" % i) for i in range(12_000)]  # batches of 2Ki, 8Ki
    futures[-1].result(timeout=60)
    w.roll()
    w.append(b"after")
    ids = [r.ledger_id for r in open_log_view(bk, name).ledgers()]
    reader = open_log_reader(bk, name, password=PW)
    it = reader.read_available()
    assert next(it).payload == b"x0"
    truncate_log(bk, name, Position(ids[1], 0, 1), PW)
    with pytest.raises(LogTruncatedError):
        for _ in it:
            pass
    reader.close()
    w.close()


#: The race's writer: one append every 15 ms (about 22 ledgers of 3 a second).
_WRITE_PERIOD_S = 0.015


def _race(bk: BookKeeper, tmp_path: Path, name: str, reads: int) -> None:
    """A writer rolling every 3 entries, the offloader (policy 0, deletion lag 0) and a
    truncator running while readers read from earliest ``reads`` times, then delete_log:
    every record read is the one acknowledged at its position, in order, once; a reader
    may only see data loss (LogTruncatedError), never another error."""
    w = open_log_writer(bk, name, password=PW, roll_max_entries=3)
    acked: dict[tuple[int, int], bytes] = {}
    stop = threading.Event()
    errors: list[BaseException] = []
    _policy(bk, name, tmp_path.as_uri(), lag_ms=0)

    def write() -> None:
        # A fixed pace, whatever an append or a roll costs: with rolls in 4 ZooKeeper
        # operations (13 before) an unpaced writer rolled twice as often, the offloader fell
        # behind, and each read read 15 ledgers from the bookies instead of 6 (3,000 reads
        # took 700 s instead of 136 s).
        i = 0
        next_at = time.monotonic()
        while not stop.is_set():
            payload = f"v{i}".encode()
            p = w.append(payload)
            acked[(p.ledger_id, p.entry_id)] = payload
            i += 1
            next_at = max(next_at + _WRITE_PERIOD_S, time.monotonic() - _WRITE_PERIOD_S)
            stop.wait(max(0.0, next_at - time.monotonic()))

    off = _offloader(bk)
    truncated: list[int] = []

    def offload() -> None:
        while not stop.is_set():
            off.tick()
            stop.wait(0.01)

    def truncate() -> None:
        while not stop.is_set():
            ledgers = open_log_view(bk, name).ledgers()
            if len(ledgers) > 6:
                victim = ledgers[len(ledgers) // 3]
                truncated.extend(truncate_log(bk, name,
                                              Position(victim.ledger_id, 0, victim.index), PW))
            stop.wait(0.05)

    threads = [threading.Thread(target=f) for f in (write, offload, truncate)]

    def guarded(t: threading.Thread) -> threading.Thread:
        run = t.run

        def wrapped() -> None:
            try:
                run()
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                errors.append(exc)
                stop.set()
        t.run = wrapped  # type: ignore[method-assign]
        return t

    for t in threads:
        guarded(t).start()
    read_records = lost = 0
    try:
        for _ in range(reads):
            seen: list[tuple[int, int]] = []
            try:
                with open_log_reader(bk, name, password=PW) as r:
                    for x in r.read_available():
                        key = (x.position.ledger_id, x.position.entry_id)
                        assert x.payload == acked.get(key, x.payload), key
                        assert key in acked or x.position.ledger_index >= 0
                        seen.append((x.position.ledger_index, x.position.entry_id))
            except LogTruncatedError:
                lost += 1
            assert seen == sorted(set(seen)), "out of order or duplicated"
            read_records += len(seen)
            assert not errors, errors
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not errors, errors
    assert read_records > 0 and truncated and off.metrics.ledgers._value.get() > 0
    w.close()
    delete_log(bk, name, PW)
    assert list(tmp_path.rglob("*.parquet")) == []


def test_readers_racing_offload_deletion_lag_truncate_and_delete_log_see_no_wrong_row(
        bk, tmp_path):
    _race(bk, tmp_path, "off-race", reads=40)


@pytest.mark.long
@pytest.mark.timeout(900)
def test_readers_racing_offload_deletion_lag_truncate_and_delete_log_long(bk, tmp_path):
    _race(bk, tmp_path, "off-race-long", reads=3000)


# A log whose newest ledgers live only in Parquet (offloaded, their bookie copies dropped after
# the deletion lag) takes a new writer, as any log does: every new owner's step 2 ("fence the
# last two ledgers") tried to recovery-open ledgers that no longer exist, and the take-over
# gave up ("other writers keep taking the log").
def _payloads(bk: BookKeeper, name: str) -> list[bytes | None]:
    with open_log_reader(bk, name, password=PW) as r:
        return [x.payload for x in r.read_available()]


def test_a_log_whose_last_ledgers_are_only_in_parquet_takes_a_new_writer(bk, tmp_path):
    name = "off-takeover"
    w = open_log_writer(bk, name, password=PW, roll_max_entries=3)
    for i in range(7):
        w.append(f"r{i}".encode())
    w.close()  # every ledger closed and described: all of them may be offloaded
    update_log_properties(bk, name, {rules.POLICY_PROPERTY: rules.OffloadPolicy(
        after="0", target=tmp_path.as_uri(), deletion_lag_ms=0).to_json()})
    off = _offloader(bk)
    for _ in range(3):
        off.tick()
    view = open_log_view(bk, name)
    states = rules.states_of(view.md.properties)
    assert [states[r.ledger_id].dropped for r in view.ledgers()] == [True] * len(view.ledgers())

    w2 = open_log_writer(bk, name, password=PW)  # before the fix: LogOwnershipLostError
    w2.append(b"after")
    w2.close()
    assert _payloads(bk, name) == [f"r{i}".encode() for i in range(7)] + [b"after"]


def test_the_source_counts_its_reads_served_from_parquet_as_the_log_reader_does(
        bk, tmp_path: Path):
    """The bookkeeper source's read() of offloaded ledgers (in process, as a Spark worker
    runs it) counts offload_parquet_reads / _read_entries: one read per file it reads, and
    the entries it gave; the open ledger, read from the bookies, counts nothing."""
    from bk_spark.datasource import BookKeeperDataSource

    name = "off-source-counted"
    w = _write(bk, name, 10)
    _policy(bk, name, tmp_path.as_uri())
    _offloader(bk).tick()
    tiers = _tiers(bk, name)
    assert tiers[:-1] == ["both"] * (len(tiers) - 1)
    ds = BookKeeperDataSource({"metadataServiceUri": bk.msu.uri, "log": name,
                               "password": PW.decode()})
    reader = ds.reader(ds.schema())
    served = parquet_read_metrics()
    reads, entries = served.reads._value.get(), served.entries._value.get()
    rows = sum(b.num_rows for p in reader.partitions() for b in reader.read(p))
    assert rows == 10
    assert served.reads._value.get() - reads == len(tiers) - 1  # ledgers of 4, 4, 2
    assert served.entries._value.get() - entries == 10
    w.close()
