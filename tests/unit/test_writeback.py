"""Write-back smoothing: a bookie's background writes reach the disk a chunk at a time (so
the journal's syncs never wait behind a burst), and the checkpoint's snapshot of changed
entries is taken without per-entry work under the state lock."""

from __future__ import annotations

import errno
import os
import threading
import time

import numpy as np
import pytest
from test_journal import Recorder, open_journal
from test_storage import add, assert_has, make_config, open_storage, simulate_crash

from bookie_server import entrylog as entrylog_mod
from bookie_server import journal as journal_mod
from bookie_server import writeback
from bookie_server.entrylog import EntryLogs
from bookie_server.index import EntryIndex, LedgerSnapshot, LedgerState
from bookie_server.journal import JournalRecord, RecordType
from bookie_server.location import join_location
from bookie_server.writeback import PacedWriter, write_paced, write_zeros_paced

KiB, MiB = 1024, 1 << 20


def test_paced_writes_write_the_same_bytes_as_one_write(tmp_path):
    parts = [os.urandom(n) for n in (10, 3 * KiB, 70 * KiB, 1, 200 * KiB)]
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        assert write_paced(fd, parts, 100, chunk=64 * KiB) == sum(map(len, parts))
        w = PacedWriter(fd, 100 + sum(map(len, parts)), chunk=4 * KiB)
        w.write([b"tail" * 3000])
        w.finish()
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == bytes(100) + b"".join(parts) + b"tail" * 3000


def test_paced_writer_writes_back_each_chunk_before_going_on(tmp_path, monkeypatch):
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(writeback, "write_back", lambda fd, off, n: calls.append((off, n)))
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        write_paced(fd, [bytes(10 * KiB)], 0, chunk=4 * KiB)
    finally:
        os.close(fd)
    # never more than one chunk written and not yet written back
    assert calls == [(0, 4 * KiB), (4 * KiB, 4 * KiB), (8 * KiB, 2 * KiB)]


def test_zero_fill_is_paced_and_stops_when_told(tmp_path):
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    seen: list[int] = []
    try:
        write_zeros_paced(fd, 10 * KiB, chunk=4 * KiB, pace=lambda n: seen.append(n) or True)
        assert seen == [4 * KiB, 8 * KiB, 10 * KiB]
        with pytest.raises(InterruptedError):
            write_zeros_paced(fd, 10 * KiB, chunk=4 * KiB, pace=lambda n: False)
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == bytes(10 * KiB)


@pytest.fixture
def linux_write_back() -> None:
    """The bookie runs on Linux, where ``sync_file_range`` exists: a test of the write-back
    fails, rather than skips, where it does not."""
    assert writeback.available(), "sync_file_range is missing (bk-spark bookies run on Linux)"


@pytest.mark.usefixtures("linux_write_back")
def test_entry_logs_write_back_what_they_grow_by_before_any_sync(tmp_path):
    logs = EntryLogs(tmp_path / "logs", 64 * MiB, writeback_chunk=256 * KiB)
    logs.open()
    try:
        for _ in range(8):
            logs.append([os.urandom(100 * KiB)])
        deadline = time.monotonic() + 10
        while logs.written_back < 512 * KiB and time.monotonic() < deadline:
            time.sleep(0.01)
        # the flusher wrote back whole pages of what was appended, with no sync() call
        assert 512 * KiB <= logs.written_back <= 800 * KiB
    finally:
        logs.close()


@pytest.mark.usefixtures("linux_write_back")
def test_a_failed_entry_log_write_back_fails_every_later_sync(tmp_path, monkeypatch):
    """A write-back error is reported once per open file: ``sync_file_range`` on the log's
    descriptor advances its error cursor (mm/filemap.c, file_fdatawait_range), so the
    checkpoint's ``fdatasync`` on that descriptor returns 0 for pages that never reached
    the disk. The flusher's error must fail the sync itself (the checkpoint then fails
    the storage instead of releasing the journal that still holds those entries)."""
    calls: list[int] = []

    def eio(fd: int, offset: int, nbytes: int) -> None:
        calls.append(offset)
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(entrylog_mod, "write_back", eio)
    logs = EntryLogs(tmp_path / "logs", 64 * MiB, writeback_chunk=256 * KiB)
    logs.open()
    try:
        logs.append([os.urandom(300 * KiB)])
        deadline = time.monotonic() + 10
        while not calls and time.monotonic() < deadline:
            time.sleep(0.01)
        assert calls, "the flusher never wrote back"
        for _ in range(2):  # the sync right after, and every later one
            with pytest.raises(OSError) as err:
                logs.sync()
            assert err.value.errno == errno.EIO
    finally:
        logs.close()


@pytest.mark.usefixtures("linux_write_back")
def test_a_checkpoint_after_a_failed_write_back_releases_no_journal_file(tmp_path, monkeypatch):
    """The checkpoint's guarantee: the journal files it releases are covered by entry logs
    and an index that are durable. After a failed write-back of the logs it fails (and
    with it the bookie) instead, and a restart replays the entries from the journal."""
    calls: list[int] = []

    def eio(fd: int, offset: int, nbytes: int) -> None:
        calls.append(offset)
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(entrylog_mod, "write_back", eio)
    config = make_config(tmp_path, entry_log_size=16 * MiB)
    s = open_storage(config)
    try:
        for i in range(15):  # ~1.5 MB: more than one write-back chunk, a few journal files
            add(s, 1, i * 100, 100)
        deadline = time.monotonic() + 10
        while not calls and time.monotonic() < deadline:
            time.sleep(0.01)
        assert calls, "the flusher never wrote back"
        first_file = min(s._journal.file_seqs())
        with pytest.raises(OSError):
            s.checkpoint()
        assert min(s._journal.file_seqs()) == first_file
    finally:
        monkeypatch.undo()
        simulate_crash(s)
    s = open_storage(config)
    try:
        assert_has(s, 1, range(1500))
    finally:
        s.close()


def test_entry_logs_without_write_back_leave_everything_to_sync(tmp_path):
    logs = EntryLogs(tmp_path / "logs", 64 * MiB, writeback_chunk=0)
    logs.open()
    try:
        logs.append([bytes(2 * MiB)])
        time.sleep(0.05)
        assert logs.written_back == 0
        logs.sync()
    finally:
        logs.close()


def test_journal_fill_waits_for_its_pace_but_never_keeps_the_writer_waiting(
        tmp_path, monkeypatch):
    # A pace so slow that a 1 MiB file would take 100 s to fill: the writer, rolling
    # through several files, must still finish at once (it hurries the allocator).
    monkeypatch.setattr(journal_mod, "MIN_FILL_RATE", 10 * KiB)
    rec = Recorder()
    j = open_journal(tmp_path, rec, file_size=MiB)
    j.replay(None, lambda *a: None)
    j.start()
    started = time.monotonic()
    try:
        for i in range(12):  # 3 MiB of records: at least two rolls
            done = threading.Event()
            j.submit([JournalRecord(RecordType.DELETE, bytes(256 * KiB - 16)),
                      JournalRecord(RecordType.DELETE, i.to_bytes(8, "little"), done)])
            assert done.wait(20)
    finally:
        j.close()
    assert time.monotonic() - started < 20
    assert len(j.file_seqs()) >= 3


def test_journal_fill_goes_at_its_pace_while_the_writer_does_not_need_it(tmp_path):
    j = open_journal(tmp_path, Recorder(), file_size=MiB)
    j._fill_started = time.monotonic()
    j._byte_rate = 0.0  # an idle writer: the floor rate applies
    started = time.monotonic()
    assert j._pace_fill(journal_mod.MIN_FILL_RATE // 20)  # 1/20 s worth at the floor rate
    assert time.monotonic() - started >= 0.03
    j._hurry.set()  # the writer waits for the file: no more pauses
    started = time.monotonic()
    assert j._pace_fill(journal_mod.MIN_FILL_RATE // 2)
    assert time.monotonic() - started < 0.1
    j._closing = True
    assert not j._pace_fill(1)


def test_dirty_ranges_merge_and_cover_each_id_once():
    state = LedgerState(1, b"k")
    for first, last in [(0, 9), (10, 19), (15, 30), (100, 100), (50, 60), (0, 5)]:
        state.mark_dirty(first, last)
    assert len(state.dirty) == 4  # adjacent and overlapping runs extend the last range
    ids = state.take_dirty()
    assert ids.tolist() == list(range(0, 31)) + list(range(50, 61)) + [100]
    assert state.dirty == [] and state.take_dirty().size == 0


def test_index_lookup_matches_get_for_dense_sparse_and_missing_ids():
    index = EntryIndex()
    for e in [*range(10, 40, 2), 5, 10**12]:  # dense with holes, one before, one far after
        index[e] = join_location(1000 + e, 100 + e % 7)
    ids = np.array([3, 5, 10, 11, 12, 38, 39, 40, 10**12, 10**12 + 1], dtype=np.int64)
    got_ids, highs, lens = index.lookup(ids)
    want = [(e, index.get(e)) for e in ids.tolist() if index.get(e) is not None]
    assert got_ids.tolist() == [e for e, _ in want]
    assert [join_location(int(h), int(n)) for h, n in zip(highs, lens, strict=True)] == \
        [loc for _, loc in want]
    assert EntryIndex().lookup(ids)[0].size == 0


def test_index_lookup_of_one_run_of_ids_matches_get_at_every_edge():
    index = EntryIndex()
    for e in range(10, 60):
        if e % 3:  # holes: the ids of another write set
            index[e] = join_location(1000 + e, 100 + e % 7)
    for first, last in [(10, 59), (10, 10), (11, 12), (40, 59), (5, 20), (50, 70), (0, 9)]:
        ids = np.arange(first, last + 1, dtype=np.int64)
        got_ids, highs, lens = index.lookup(ids)
        want = [(e, index.get(e)) for e in ids.tolist() if index.get(e) is not None]
        assert got_ids.tolist() == [e for e, _ in want]
        assert [join_location(int(h), int(n)) for h, n in zip(highs, lens, strict=True)] == \
            [loc for _, loc in want]


def test_a_changed_snapshot_records_the_stored_entries_of_the_dirty_ranges():
    state = LedgerState(7, b"key")
    state.index.put_batch([0, 1, 3, 4], 5000, [(k << 32) | 10 for k in range(4)])
    state.mark_dirty(0, 4)  # 2 is not on this bookie (another write set): skipped
    snap = LedgerSnapshot.changed(state)
    assert snap.count == 4 and snap.columns is not None
    assert snap.columns[0].tolist() == [0, 1, 3, 4]
    assert state.dirty == []
