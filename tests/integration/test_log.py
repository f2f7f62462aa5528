"""Logs made of ledgers against real bookies and ZooKeeper (ledgers-to-logs.txt).

Writers that compete for a log run as separate processes (procs/log_writer.py) and are
killed by their PID.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest

from bk_spark.core import BookKeeper
from bk_spark.errors import (
    InvalidConfigError,
    LogExistsError,
    LogNotFoundError,
    LogOwnershipLostError,
    LogTruncatedError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
    UnauthorizedError,
)
from bk_spark.io.bookie_client import BookieClient
from bk_spark.log import (
    LEDGER_LOG_KEY,
    LogRecord,
    Position,
    create_log,
    delete_log,
    list_logs,
    log_ledgers,
    log_metadata,
    open_log_reader,
    open_log_writer,
    pending,
    truncate_log,
    update_log_properties,
)
from bk_spark.log.testing import after_roll_cas
from bk_spark.protocol.ledger_metadata import LedgerState
from bk_spark.protocol.log_format import LogLimits

PROCS = Path(__file__).parent / "procs"
PW = b"pw"


@pytest.fixture
def bk(cluster, metadata_uri: str) -> Iterator[BookKeeper]:
    client = BookKeeper(metadata_uri)
    yield client
    client.close()


def payloads(records: list[LogRecord]) -> list[bytes]:
    return [r.payload for r in records]


def read_all(bk: BookKeeper, name: str, **kw) -> list[LogRecord]:
    return list(open_log_reader(bk, name, password=PW, **kw).read_available())


class WriterProc:
    """procs/log_writer.py in its own process; its stdout lines collected by a thread."""

    def __init__(self, uri: str, name: str, tag: str, *args: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
        self.proc = subprocess.Popen(
            [sys.executable, str(PROCS / "log_writer.py"), uri, name, tag, *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.lines: list[str] = []
        self._cv = threading.Condition()
        self._reader = threading.Thread(target=self._collect, daemon=True)
        self._reader.start()

    def _collect(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cv:
                self.lines.append(line.strip())
                self._cv.notify_all()

    def wait_for(self, predicate, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
        with self._cv:
            if not self._cv.wait_for(lambda: predicate(self.lines), timeout):
                raise AssertionError(f"writer process: timed out; last lines "
                                     f"{self.lines[-5:]}, stderr: {self.stderr()}")

    def stderr(self) -> str:
        if self.proc.poll() is None:
            return "(running)"
        assert self.proc.stderr is not None
        return self.proc.stderr.read()[-3000:]

    def acks(self) -> dict[tuple[int, int], str]:
        """Acknowledged (ledger id, entry id) -> payload."""
        out = {}
        for line in list(self.lines):
            if line.startswith("ack "):
                _, lid, eid, _index, text = line.split(" ", 4)
                out[(int(lid), int(eid))] = text
        return out

    def kill9(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._reader.join(5)

    def finish(self, timeout: float = 60.0) -> None:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill9()
            raise
        self._reader.join(5)
        assert self.proc.returncode == 0, self.stderr()


def assert_log_holds_every_ack_in_place(records: list[LogRecord],
                                        acks: dict[tuple[int, int], str]) -> None:
    at = {(r.position.ledger_id, r.position.entry_id): r.payload.decode() for r in records}
    missing = {k: v for k, v in acks.items() if at.get(k) != v}
    assert not missing, f"acknowledged entries lost or moved: {list(missing.items())[:5]}"


def assert_writers_never_interleave(records: list[LogRecord]) -> None:
    """Each writer session's entries form one contiguous run, in its append order, and
    every ledger holds the entries of one session only."""
    sessions: list[str] = []
    last_seq: dict[str, int] = {}
    by_ledger: dict[int, set[str]] = {}
    for r in records:
        tag, session, seq = r.payload.decode().split(":")
        s = f"{tag}:{session}"
        if not sessions or sessions[-1] != s:
            assert s not in sessions, f"writer session {s} interleaves with {sessions[-1]}"
            sessions.append(s)
        assert int(seq) > last_seq.get(s, -1)
        last_seq[s] = int(seq)
        by_ledger.setdefault(r.position.ledger_id, set()).add(s)
    assert all(len(v) == 1 for v in by_ledger.values()), by_ledger


# ------------------------------------------------------------------------------ writing


def test_writer_appends_in_order_and_positions_follow_the_log_order(bk: BookKeeper) -> None:
    w = open_log_writer(bk, "orders", password=PW)
    first = w.ledger_id
    futures = [w.append_async(f"e{i}".encode()) for i in range(2000)]
    w.roll()
    futures += [w.append_async(f"e{i}".encode()) for i in range(2000, 3000)]
    positions = [f.result(30) for f in futures]
    assert positions == sorted(positions) and len(set(positions)) == 3000
    assert positions[0] == Position(first, 0, 0)
    assert positions[-1].ledger_id == w.ledger_id != first
    w.close()
    records = read_all(bk, "orders")
    assert payloads(records) == [f"e{i}".encode() for i in range(3000)]
    assert [r.position for r in records] == positions
    ledgers = log_ledgers(bk, "orders")
    assert [i.ledger_id for i in ledgers] == [first, w.ledger_id]
    assert all(i.is_described for i in ledgers)  # both closed, their ends recorded
    assert sum(i.last_entry_id + 1 for i in ledgers) == 3000


def test_opening_a_writer_fences_the_last_two_ledgers_and_adds_a_new_one(bk: BookKeeper
                                                                          ) -> None:
    a = open_log_writer(bk, "fence", password=PW)
    a.append(b"a0")
    l1 = a.ledger_id
    a.roll()
    l2 = a.ledger_id
    a.append(b"a1")
    with BookKeeper(bk.msu.uri) as other:
        b = open_log_writer(other, "fence", password=PW)
        assert [i.ledger_id for i in log_ledgers(bk, "fence")] == [l1, l2, b.ledger_id]
        assert bk.ledger_metadata(l2).state == LedgerState.CLOSED  # fenced and recovered
        with pytest.raises(LogOwnershipLostError, match="another writer took over"):
            a.append(b"a2")
        with pytest.raises(LogOwnershipLostError):
            a.roll()
        with pytest.raises(LogOwnershipLostError):
            a.update_properties({"x": 1})
        a.close()
        b.append(b"b0")
        b.close()
    assert payloads(read_all(bk, "fence")) == [b"a0", b"a1", b"b0"]


def test_a_writer_stopped_by_a_failed_add_raises_a_copy_of_its_error_to_every_append(
        cluster, bk: BookKeeper) -> None:
    """A ledger add that fails (here: a bookie of a 3/3/3 ensemble dies and no other bookie
    can replace it) stops the writer; every later append, on the hot path too, raises its
    own copy of the writer's error, not the ledger's one exception object raised again and
    again (whose traceback would grow with every raise, from every thread)."""
    w = open_log_writer(bk, "stopped", password=PW, ensemble_size=3, write_quorum_size=3,
                        ack_quorum_size=3)
    w.append(b"a")
    victim = bk.ledger_metadata(w.ledger_id).ensembles[0][1][0]
    next(b for b in cluster.bookies if b.bookie_id == victim).kill()
    with pytest.raises(NotEnoughBookiesError):
        w.append(b"b", timeout=60)
    raised = []
    for payload in (b"c", b"d", bytearray(b"e"), b"f", None):
        with pytest.raises(NotEnoughBookiesError) as info:
            w.append_async(payload)
        raised.append(info.value)
    assert len({id(e) for e in raised}) == len(raised)
    depths = {len(traceback.extract_tb(e.__traceback__)) for e in raised}
    assert len(depths) == 1, depths  # each its own traceback, none grown by earlier raises
    w.close()


def test_a_writer_that_loses_the_roll_cas_stops_and_leaves_no_ledger_behind(
        bk: BookKeeper) -> None:
    a = open_log_writer(bk, "cas", password=PW)
    a.append(b"a0")
    with BookKeeper(bk.msu.uri) as other:
        b = open_log_writer(other, "cas", password=PW)
        before = set(bk.list_ledgers())
        with pytest.raises(LogOwnershipLostError, match="last ledger is"):
            a.roll()
        assert set(bk.list_ledgers()) == before  # the ledger made for the roll is deleted
        b.close()
    a.close()


def test_roll_by_entry_count_starts_a_new_ledger_once_the_count_is_reached(
        bk: BookKeeper) -> None:
    w = open_log_writer(bk, "count", password=PW, roll_max_entries=50)
    for i in range(230):
        w.append(f"{i}".encode())
    w.close()
    ledgers = log_ledgers(bk, "count")
    sizes = [i.last_entry_id + 1 for i in ledgers]
    assert sum(sizes) == 230 and len(sizes) >= 3
    assert all(50 <= s <= 100 for s in sizes[:-1]), sizes  # appends go on during a roll
    assert payloads(read_all(bk, "count")) == [f"{i}".encode() for i in range(230)]


def test_appends_from_many_threads_across_rolls_keep_order_nulls_and_timestamps(
        bk: BookKeeper) -> None:
    """Four threads append (values, empty values and nulls) while the writer rolls every
    300 entries: every append is acknowledged with the position that holds it, each
    thread's appends in its own order; timestamps never decrease in log order, across
    ledgers too, and each ledger's recorded first and last timestamps bound its entries.
    (Entries are stamped a round at a time by each ledger's sender, two ledgers in flight
    during a roll.)"""
    w = open_log_writer(bk, "threads", password=PW, roll_max_entries=300)
    acked: dict[int, list[tuple[bytes | None, Position]]] = {}

    def value(t: int, i: int) -> bytes | None:
        return None if i % 97 == 5 else b"" if i % 89 == 3 else f"{t}:{i}".encode()

    def appender(t: int) -> None:
        futs = []
        for i in range(700):
            futs.append((value(t, i), w.append_async(value(t, i))))
            if i % 20 == 19:
                time.sleep(0.02)  # time for rolls meanwhile
        acked[t] = [(v, f.result(60)) for v, f in futs]

    threads = [threading.Thread(target=appender, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    w.close()
    records = read_all(bk, "threads")
    assert len(records) == 2800
    held = {r.position: r.payload for r in records}
    for t, appends in acked.items():
        positions = [p for _, p in appends]
        assert positions == sorted(positions), t
        assert [held[p] for p in positions] == [v for v, _ in appends]
    stamps = [r.timestamp_ms for r in records]
    assert stamps == sorted(stamps)
    ledgers = log_ledgers(bk, "threads")
    assert len(ledgers) >= 3
    for info in ledgers:
        own = [r.timestamp_ms for r in records if r.position.ledger_id == info.ledger_id]
        assert info.last_entry_id == len(own) - 1
        if own:
            assert info.first_ts_ms <= own[0] and info.last_ts_ms == own[-1]


def wait_for_spare(bk: BookKeeper, name: str, timeout: float = 20.0) -> int:
    """The id of the spare ledger the writer of ``name`` prepared (registered pending)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ids = pending.registered(bk, name)
        if ids:
            (spare,) = ids
            return spare
        time.sleep(0.02)
    raise AssertionError(f"no spare ledger of log {name!r} after {timeout}s")


def log_owned_ledgers(bk: BookKeeper, name: str) -> set[int]:
    """Every ledger whose metadata names log ``name`` (listed or not)."""
    return {lid for lid in bk.list_ledgers()
            if dict(bk.ledger_metadata(lid).custom_metadata).get(LEDGER_LOG_KEY) == name}


def test_a_roll_takes_the_ledger_prepared_once_the_current_one_is_half_way(
        bk: BookKeeper) -> None:
    w = open_log_writer(bk, "spare", password=PW, roll_max_entries=40)
    first = w.ledger_id
    for i in range(20):
        w.append(f"{i}".encode())
    spare = wait_for_spare(bk, "spare")  # prepared at half of roll_max_entries
    assert spare not in [i.ledger_id for i in log_ledgers(bk, "spare")]
    assert w.ledger_id == first
    for i in range(20, 40):
        w.append(f"{i}".encode())
    deadline = time.monotonic() + 20
    while w.ledger_id == first and time.monotonic() < deadline:
        time.sleep(0.02)
    assert w.ledger_id == spare  # the roll used it: claimed, then listed by the CAS
    assert [i.ledger_id for i in log_ledgers(bk, "spare")] == [first, spare]
    assert pending.registered(bk, "spare") == []
    w.close()
    assert payloads(read_all(bk, "spare")) == [f"{i}".encode() for i in range(40)]
    assert log_owned_ledgers(bk, "spare") == {first, spare}


def test_a_spare_recovered_meanwhile_is_not_rolled_into(bk: BookKeeper) -> None:
    """AutoRecovery fences and closes an OPEN ledger without adds whose bookie died: a roll
    must not switch to such a spare (its adds would fail as if the log were taken)."""
    w = open_log_writer(bk, "spare-fenced", password=PW, roll_max_entries=40)
    first = w.ledger_id
    for i in range(20):
        w.append(f"{i}".encode())
    spare = wait_for_spare(bk, "spare-fenced")
    bk.recover_ledger(spare, PW)  # what AutoRecovery does after its grace period
    for i in range(20, 60):
        w.append(f"{i}".encode())
    deadline = time.monotonic() + 20
    while w.ledger_id == first and time.monotonic() < deadline:
        time.sleep(0.02)
    assert w.ledger_id not in (first, spare)  # rolled into a fresh ledger
    w.append(b"after")
    w.close()
    assert spare not in bk.list_ledgers()
    assert payloads(read_all(bk, "spare-fenced")) == [
        *(f"{i}".encode() for i in range(60)), b"after"]
    assert log_owned_ledgers(bk, "spare-fenced") == {
        i.ledger_id for i in log_ledgers(bk, "spare-fenced")}


def test_an_unused_spare_ledger_is_deleted_when_the_writer_closes(bk: BookKeeper) -> None:
    w = open_log_writer(bk, "spare-close", password=PW, roll_max_entries=100)
    for i in range(60):
        w.append_async(f"{i}".encode())
    spare = wait_for_spare(bk, "spare-close")
    w.close()
    assert spare not in bk.list_ledgers()
    assert pending.registered(bk, "spare-close") == []
    assert log_owned_ledgers(bk, "spare-close") == {
        i.ledger_id for i in log_ledgers(bk, "spare-close")}


def test_the_next_writer_deletes_the_spare_of_a_writer_that_lost_the_log(
        bk: BookKeeper) -> None:
    a = open_log_writer(bk, "spare-lost", password=PW, roll_max_entries=100)
    for i in range(60):
        a.append(f"A:{i}".encode())
    spare = wait_for_spare(bk, "spare-lost")
    with BookKeeper(bk.msu.uri) as other:
        b = open_log_writer(other, "spare-lost", password=PW)
        assert spare not in bk.list_ledgers()  # swept when b opened the log
        assert pending.registered(bk, "spare-lost") == []
        with pytest.raises(LogOwnershipLostError):
            for i in range(60, 200):  # its ledger is fenced: an append fails
                a.append(f"A:{i}".encode())
        a.close()
        b.append(b"B:0")
        b.close()
    listed = {i.ledger_id for i in log_ledgers(bk, "spare-lost")}
    assert log_owned_ledgers(bk, "spare-lost") == listed  # nothing left behind
    assert payloads(read_all(bk, "spare-lost"))[-1] == b"B:0"


def test_a_killed_writers_spare_ledger_is_deleted_by_the_next_writer(
        bk: BookKeeper, metadata_uri: str) -> None:
    # the roll at 2,000 entries is seconds away from the spare made at 1,000
    p = WriterProc(metadata_uri, "spare-crash", "A", "--roll-every", "2000", "--window", "2")
    spare = wait_for_spare(bk, "spare-crash", timeout=60)
    p.kill9()
    assert pending.registered(bk, "spare-crash") == [spare]  # left behind, pending
    assert spare in bk.list_ledgers()
    w = open_log_writer(bk, "spare-crash", password=PW)
    assert spare not in bk.list_ledgers()
    assert pending.registered(bk, "spare-crash") == []
    w.close()


def test_roll_by_bytes_and_by_age_of_a_ledger_with_entries(bk: BookKeeper) -> None:
    w = open_log_writer(bk, "bytes", password=PW, roll_max_bytes=1000)
    for _ in range(40):
        w.append(b"x" * 100)
        time.sleep(0.002)
    w.close()
    sizes = [i.last_entry_id + 1 for i in log_ledgers(bk, "bytes")]
    assert sum(sizes) == 40 and len(sizes) >= 2
    assert all(s >= 10 for s in sizes[:-1]), sizes  # each rolled at >= 1000 bytes

    w = open_log_writer(bk, "age", password=PW, roll_max_age_s=0.3)
    first = w.ledger_id
    time.sleep(0.6)
    assert w.ledger_id == first  # an empty ledger is not rolled for its age
    w.append(b"x")
    deadline = time.monotonic() + 10
    while w.ledger_id == first and time.monotonic() < deadline:
        time.sleep(0.05)
    assert w.ledger_id != first  # rolled once its entries are 0.3 s old
    w.close()
    assert payloads(read_all(bk, "age")) == [b"x"]


def test_properties_change_by_cas_only_while_the_writer_owns_the_log(bk: BookKeeper) -> None:
    create_log(bk, "props", properties={"format": "json"})
    with pytest.raises(LogExistsError):
        create_log(bk, "props")
    w = open_log_writer(bk, "props", password=PW, create_if_missing=False)
    assert w.update_properties({"last_batch": 1}) == {"format": "json", "last_batch": 1}
    new = w.roll(properties={"last_batch": 2})
    md = log_metadata(bk, "props")
    assert md.properties["last_batch"] == 2 and md.last_ledger.ledger_id == new
    assert update_log_properties(bk, "props", {"schema": "s"})["schema"] == "s"
    assert w.update_properties(lambda p: {**p, "last_batch": p["last_batch"] + 1}) == {
        "format": "json", "last_batch": 3, "schema": "s"}
    w.close()


def test_admin_lists_creates_and_deletes_logs_with_their_ledgers(bk: BookKeeper) -> None:
    with pytest.raises(LogNotFoundError, match="create_if_missing"):
        open_log_writer(bk, "absent", create_if_missing=False)
    with pytest.raises(InvalidConfigError):
        open_log_writer(bk, "bad/name")
    for name in ("b-log", "a-log"):
        with open_log_writer(bk, name, password=PW) as w:
            w.append(b"x")
            w.roll()
            w.append(b"y")
    assert list_logs(bk) == ["a-log", "b-log"]
    ids = [i.ledger_id for i in log_ledgers(bk, "a-log")]
    with pytest.raises(UnauthorizedError, match="password"):
        delete_log(bk, "a-log")  # the bookies check the ledgers' password
    assert delete_log(bk, "a-log", PW) == ids
    assert list_logs(bk) == ["b-log"]
    for lid in ids:
        with pytest.raises(NoSuchLedgerError):
            bk.ledger_metadata(lid)
    with pytest.raises(LogNotFoundError):
        log_metadata(bk, "a-log")


# ------------------------------------------------------------------------------ processes


def test_dueling_writer_processes_never_interleave_or_lose_acknowledged_entries(
        bk: BookKeeper, metadata_uri: str) -> None:
    create_log(bk, "duel")
    a = WriterProc(metadata_uri, "duel", "A", "--seconds", "6", "--reopen")
    a.wait_for(lambda lines: sum(x.startswith("ack") for x in lines) >= 20)
    b = WriterProc(metadata_uri, "duel", "B", "--seconds", "5", "--reopen")
    a.finish()
    b.finish()
    assert any(x.startswith("lost") for x in a.lines + b.lines), "the writers never dueled"
    records = read_all(bk, "duel")
    assert_log_holds_every_ack_in_place(records, {**a.acks(), **b.acks()})
    assert_writers_never_interleave(records)
    sessions = {":".join(r.payload.decode().split(":")[:2]) for r in records}
    assert {s[0] for s in sessions} == {"A", "B"}


def test_writer_killed_mid_roll_next_owner_fences_both_last_ledgers_and_continues(
        bk: BookKeeper, metadata_uri: str) -> None:
    p = WriterProc(metadata_uri, "crash", "A", "--roll-age", "0.3",
                   "--stall-after-roll-cas", "--window", "5")
    p.wait_for(lambda lines: any(x.startswith("roll-cas") for x in lines))
    rolled_at = len(p.lines)
    # the roll (for age, which holds no append back; a full ledger would) stalls after its
    # CAS; appends go on into the previous ledger
    p.wait_for(lambda lines: sum(x.startswith("ack") for x in lines[rolled_at:]) >= 30)
    p.kill9()
    acks = p.acks()
    prev, last = [i.ledger_id for i in log_ledgers(bk, "crash")][-2:]
    assert {lid for lid, _e in acks} == {prev}
    assert bk.ledger_metadata(prev).state == LedgerState.OPEN
    assert bk.ledger_metadata(last).state == LedgerState.OPEN
    w = open_log_writer(bk, "crash", password=PW)
    assert bk.ledger_metadata(prev).state == LedgerState.CLOSED
    assert bk.ledger_metadata(last).state == LedgerState.CLOSED
    assert bk.ledger_metadata(prev).last_entry_id >= max(e for _l, e in acks)
    for i in range(10):
        w.append(f"B:1:{i}".encode())
    w.close()
    records = read_all(bk, "crash")
    assert_log_holds_every_ack_in_place(records, acks)
    assert_writers_never_interleave(records)
    assert payloads(records)[-10:] == [f"B:1:{i}".encode() for i in range(10)]


# ------------------------------------------------------------------------------ reading


def test_a_tailing_reader_sees_every_entry_of_a_live_writer_in_order(bk: BookKeeper) -> None:
    w = open_log_writer(bk, "live", password=PW, roll_max_entries=150)
    reader = open_log_reader(bk, "live", start="earliest", password=PW)
    n = 600

    def write() -> None:
        for i in range(n):
            if i % 50 == 0:
                w.append(f"{i}".encode())  # now and then wait: give rolls time to happen
                time.sleep(0.02)
            else:
                w.append_async(f"{i}".encode())
        w.close()

    t = threading.Thread(target=write)
    t.start()
    seen: list[LogRecord] = []
    for record in reader.tail(timeout=10):
        seen.append(record)
        if len(seen) == n:
            break
    t.join()
    assert payloads(seen) == [f"{i}".encode() for i in range(n)]
    assert len({r.position.ledger_id for r in seen}) >= 3  # it crossed rolled ledgers
    assert [r.timestamp_ms for r in seen] == sorted(r.timestamp_ms for r in seen)
    assert reader.position == Position(seen[-1].position.ledger_id,
                                       seen[-1].position.entry_id + 1,
                                       seen[-1].position.ledger_index)


def test_reader_starts_at_latest_or_at_a_position_and_reads_the_open_ledger_up_to_lac(
        bk: BookKeeper) -> None:
    w = open_log_writer(bk, "starts", password=PW)
    positions = [w.append(f"{i}".encode()) for i in range(5)]
    time.sleep(0.3)  # an idle writer sends its last-add-confirmed within 50 ms
    latest = open_log_reader(bk, "starts", start="latest", password=PW)
    assert latest.position == Position(positions[-1].ledger_id, 5, 0)
    assert list(latest.read_available()) == []
    w.roll()
    positions += [w.append(f"{i}".encode()) for i in range(5, 8)]
    time.sleep(0.3)
    # the writer is live: its ledger is read without fencing, up to the last-add-confirmed
    assert payloads(list(latest.read_available())) == [b"5", b"6", b"7"]
    from_pos = read_all(bk, "starts", start=Position(positions[3].ledger_id, 3))
    assert payloads(from_pos) == [b"3", b"4", b"5", b"6", b"7"]
    w.append(b"8")  # still the owner: nobody fenced it
    w.close()


def test_truncation_removes_whole_ledgers_their_data_and_spilled_segments(
        bk: BookKeeper) -> None:
    limits = LogLimits(segment_ledgers=2, tail_max=4)
    w = open_log_writer(bk, "trunc", password=PW, limits=limits)
    for k in range(8):
        for i in range(5):
            w.append(f"{k}.{i}".encode())
        if k < 7:
            w.roll()
    w.close()
    md = log_metadata(bk, "trunc")
    assert len(md.segments) >= 2  # the ledger list spilled into segment znodes
    ledgers = log_ledgers(bk, "trunc")
    assert len(ledgers) == 8 and len(read_all(bk, "trunc")) == 40
    bookies = bk.ledger_metadata(ledgers[0].ledger_id).last_ensemble
    cut = Position(ledgers[5].ledger_id, 2)
    dropped = truncate_log(bk, "trunc", cut, PW)
    assert dropped == [i.ledger_id for i in ledgers[:5]]
    assert [i.ledger_id for i in log_ledgers(bk, "trunc")] == [i.ledger_id for i in ledgers[5:]]
    for lid in dropped:
        with pytest.raises(NoSuchLedgerError):
            bk.ledger_metadata(lid)
        for b in bookies:
            c = BookieClient(b)
            try:
                with pytest.raises(NoSuchLedgerError):
                    c.read_entries(lid, entry_ids=[0])
            finally:
                c.close()
    seg_path = f"{bk.msu.root}/logs/trunc/segments"
    live = {f"{s.number:010d}" for s in log_metadata(bk, "trunc").segments}
    assert set(bk.zk.get_children(seg_path)) == live
    assert payloads(read_all(bk, "trunc"))[0] == b"5.0"  # whole ledgers only
    with pytest.raises(LogTruncatedError):
        open_log_reader(bk, "trunc", start=Position(ledgers[0].ledger_id, 0), password=PW)
    assert truncate_log(bk, "trunc", cut, PW) == []


def test_timestamp_seek_lands_on_the_first_entry_at_or_after_the_timestamp(
        bk: BookKeeper) -> None:
    w = open_log_writer(bk, "seek", password=PW, limits=LogLimits(segment_ledgers=1,
                                                                   tail_max=3))
    for k in range(6):
        for i in range(30):
            w.append(f"{k}.{i}".encode())
            if i % 10 == 9:
                time.sleep(0.005)
        time.sleep(0.02)
        w.roll()
    for i in range(30):  # the last ledger stays open: seek inside it without fencing
        w.append(f"6.{i}".encode())
        time.sleep(0.001)
    time.sleep(0.3)  # an idle writer sends its last-add-confirmed within 50 ms
    records = read_all(bk, "seek")
    assert len(records) == 210 and len(log_metadata(bk, "seek").segments) >= 2
    stamps = [r.timestamp_ms for r in records]
    targets = {stamps[0] - 1000, stamps[0], stamps[-1], stamps[-1] + 1}
    targets |= {stamps[i] + d for i in range(0, 210, 13) for d in (0, 1)}
    for target in sorted(targets):
        expected = next((r for r in records if r.timestamp_ms >= target), None)
        got = read_all(bk, "seek", timestamp_ms=target)
        if expected is None:
            assert got == []
        else:
            assert got[0] == expected, target
            assert len(got) == 210 - records.index(expected)
    w.close()


def test_the_client_opens_logs_like_ledgers_and_a_writer_or_reader_takes_its_password_once(
        cluster, metadata_uri: str) -> None:
    import bk_spark

    with bk_spark.BookKeeper(metadata_uri) as bk:
        w = bk.open_log_writer("facade", password=PW, roll_max_entries=2)
        positions = [w.append(f"{i}".encode()) for i in range(5)]  # ledgers of 2, 2, 1
        assert w.truncate(positions[2]) == [positions[0].ledger_id]  # the writer's password
        w.close()
        r = bk.open_log_reader("facade", "earliest", password=PW)
        assert payloads(list(r.read_available())) == [b"2", b"3", b"4"]
        assert bk.log_ledgers("facade")[0].ledger_id == positions[2].ledger_id
        assert payloads(read_all(bk, "facade")) == [b"2", b"3", b"4"]  # the older style
        with pytest.raises(UnauthorizedError, match="password"):
            bk.delete_log("facade")  # the bookies check the ledgers' password
        ids = [i.ledger_id for i in bk.log_ledgers("facade")]
        assert bk.delete_log("facade", password=PW) == ids and "facade" not in bk.list_logs()


def test_a_reader_seeking_latest_while_the_next_ledger_is_listed_misses_no_later_append(
        bk: BookKeeper) -> None:
    """Between a roll's CAS and its switch (a window the roller now opens ahead of a full
    ledger, issue 28) appends still go to the previous ledger: "latest" is there, not at
    the start of the ledger just listed (a reader seeking then skipped what was appended
    to the previous ledger after its seek)."""
    w = open_log_writer(bk, "latest-listed", password=PW)
    w.append(b"before")
    readers = []

    def listed(_new: int) -> None:
        readers.append(open_log_reader(bk, "latest-listed", "latest", password=PW))
        w.append(b"after the seek")  # into the previous ledger: not switched yet

    after_roll_cas(w, listed)
    w.roll()
    w.append(b"in the next ledger")
    w.close()
    got = payloads(list(readers[0].read_available()))
    assert got[-2:] == [b"after the seek", b"in the next ledger"], got
