"""The journal: record format, group commit, replay that never serves torn or stale data."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import pytest

import bookie_server.journal as journal_module
from bookie_server.journal import (
    RECORD_HEADER,
    Journal,
    JournalPosition,
    JournalRecord,
    RecordType,
    decode_add,
    decode_delete,
    decode_fence,
    decode_lac,
    encode_adds,
    encode_delete,
    encode_fence,
    encode_lac,
    frame,
    iter_file_records,
)

MiB = 1 << 20
FILE_SIZE = 1 * MiB


class Recorder:
    """on_synced / on_failed / on_sync callbacks that remember what happened."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.synced: list[JournalRecord] = []
        self.ends: list[JournalPosition] = []
        self.groups: list[tuple[int, int]] = []  # (records, bytes) per sync
        self.failed: list[BaseException] = []

    def on_synced(self, records: list[JournalRecord], end: JournalPosition) -> None:
        with self.lock:
            self.synced.extend(records)
            self.ends.append(end)
        for record in records:
            if isinstance(record.token, threading.Event):
                record.token.set()

    def on_failed(self, records: list[JournalRecord], error: BaseException) -> None:
        self.failed.append(error)

    def on_sync(self, seconds: float, records: int, nbytes: int) -> None:
        self.groups.append((records, nbytes))


def open_journal(directory: Path, recorder: Recorder | None = None, **kw) -> Journal:
    recorder = recorder or Recorder()
    kw.setdefault("file_size", FILE_SIZE)
    return Journal(
        directory,
        on_synced=recorder.on_synced,
        on_failed=recorder.on_failed,
        on_sync=recorder.on_sync,
        **kw,
    )


def replay(directory: Path, start=None, **kw) -> tuple[list[tuple[int, bytes]], JournalPosition]:
    journal = open_journal(directory, **kw)
    out: list[tuple[int, bytes]] = []
    end = journal.replay(start, lambda rtype, body, pos: out.append((rtype, bytes(body))))
    return out, end


def body(i: int, size: int = 100) -> bytes:
    return i.to_bytes(4, "little") * (size // 4)


def write_records(directory: Path, bodies: list[bytes], **kw) -> JournalPosition:
    journal = open_journal(directory, **kw)
    journal.replay(None, lambda *a: None)
    start = journal.start()
    journal.submit([JournalRecord(RecordType.DELETE, b) for b in bodies])
    journal.close()  # writes and syncs everything queued
    return start


def test_add_fence_lac_delete_codecs_round_trip():
    entries = [(5, 3, b"payload-5", b"digest5"), (6, 4, b"", b""), (7, 6, b"x" * 1000, b"d")]
    (batch,) = encode_adds(42, b"secret", entries, record_cap=1 << 20)
    decoded = decode_add(memoryview(batch.body))
    assert (decoded.ledger_id, decoded.master_key) == (42, b"secret")
    assert decoded.entry_ids == [5, 6, 7] and decoded.spans == batch.spans
    assert (decoded.max_lac, decoded.min_entry, decoded.max_entry) == (6, 5, 7)
    assert bytes(decoded.entries) == bytes(batch.entries)
    assert decode_fence(memoryview(encode_fence(9, b"k"))) == (9, b"k")
    assert decode_lac(memoryview(encode_lac(9, 77, b"k"))) == (9, 77, b"k")
    assert decode_delete(memoryview(encode_delete(2**62))) == 2**62


def test_large_add_is_split_into_records_under_the_cap():
    entries = [(i, i - 1, bytes(1000), b"") for i in range(100)]
    batches = encode_adds(1, b"k", entries, record_cap=10_000)
    assert len(batches) > 1
    assert all(len(b.body) <= 10_000 + 64 for b in batches)
    assert [e for b in batches for e in b.entry_ids] == list(range(100))


def test_records_replay_in_order_across_rolled_files(tmp_path):
    bodies = [body(i, 9000) for i in range(400)]  # ~3.6 MiB: rolls over several 1 MiB files
    write_records(tmp_path, bodies)
    assert len(list(tmp_path.glob("*.jnl"))) >= 4
    replayed, _ = replay(tmp_path)
    assert [b for _, b in replayed] == bodies
    assert {t for t, _ in replayed} == {RecordType.DELETE}


def test_replay_from_a_position_skips_what_came_before(tmp_path):
    recorder = Recorder()
    journal = open_journal(tmp_path, recorder)
    journal.replay(None, lambda *a: None)
    journal.start()
    for i in range(10):
        done = threading.Event()
        journal.submit([JournalRecord(RecordType.DELETE, body(i), done)])
        done.wait(5)
    journal.close()
    replayed, _ = replay(tmp_path, start=recorder.ends[3])
    assert [b for _, b in replayed] == [body(i) for i in range(4, 10)]


def test_preallocated_file_is_zero_filled_and_zeros_end_replay(tmp_path):
    bodies = [body(i) for i in range(3)]
    start = write_records(tmp_path, bodies)
    path = tmp_path / f"{start.seq:016x}.jnl"
    st = path.stat()
    assert st.st_size == FILE_SIZE
    assert st.st_blocks * 512 >= FILE_SIZE  # physically allocated, not sparse
    replayed, end = replay(tmp_path, start=start)
    assert [b for _, b in replayed] == bodies
    assert end == (start.seq, 3 * (RECORD_HEADER.size + len(bodies[0])))


def test_torn_tail_record_is_dropped_and_earlier_records_survive(tmp_path):
    bodies = [body(i, 400) for i in range(10)]
    start = write_records(tmp_path, bodies, preallocate=False)
    path = tmp_path / f"{start.seq:016x}.jnl"
    size = path.stat().st_size
    os.truncate(path, size - 150)  # the last record loses its tail
    replayed, end = replay(tmp_path, start=start, preallocate=False)
    assert [b for _, b in replayed] == bodies[:9]
    assert end.offset == 9 * (RECORD_HEADER.size + 400)


@pytest.mark.parametrize("where", ["header", "body"])
def test_corrupt_record_ends_replay_there(tmp_path, where):
    bodies = [body(i, 400) for i in range(10)]
    start = write_records(tmp_path, bodies)
    path = tmp_path / f"{start.seq:016x}.jnl"
    record = RECORD_HEADER.size + 400
    offset = 5 * record + (5 if where == "header" else 200)
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x40]))
    replayed, end = replay(tmp_path, start=start)
    assert [b for _, b in replayed] == bodies[:5]
    assert end.offset == 5 * record


def test_record_of_another_file_generation_never_checks_out():
    data = frame(7, RecordType.DELETE, body(1))
    assert list(iter_file_records(memoryview(data), 7)) != []
    assert list(iter_file_records(memoryview(data), 8)) == []  # same bytes, recycled file


def test_stale_records_of_a_recycled_file_are_not_replayed(tmp_path):
    old = [body(i, 9000) for i in range(100)]  # fills most of the first 1 MiB file
    write_records(tmp_path, old)
    first = min(tmp_path.glob("*.jnl"))
    first_inode = first.stat().st_ino

    journal = open_journal(tmp_path)
    assert journal.replay(None, lambda *a: None).offset > 0
    start = journal.start()
    journal.release_before(start)  # the old files become spares
    assert not first.exists()
    new = [body(1000 + i, 9000) for i in range(250)]  # rolls into the recycled files
    journal.submit([JournalRecord(RecordType.DELETE, b) for b in new])
    journal.close()

    inodes = {p.stat().st_ino for p in tmp_path.glob("*.jnl")}
    assert first_inode in inodes  # the old file was reused in place, stale records and all
    replayed, _ = replay(tmp_path, start=start)
    assert [b for _, b in replayed] == new


def test_replay_after_restart_continues_in_a_fresh_file(tmp_path):
    write_records(tmp_path, [body(1)])
    journal = open_journal(tmp_path)
    end = journal.replay(None, lambda *a: None)
    start = journal.start()
    assert start.seq > end.seq and start.offset == 0
    journal.close()


def test_concurrent_submitters_share_syncs(tmp_path):
    recorder = Recorder()
    journal = open_journal(tmp_path, recorder)
    journal.start()
    per_thread, threads_n = 20, 32

    def submitter(t: int) -> None:
        for i in range(per_thread):
            done = threading.Event()
            journal.submit([JournalRecord(RecordType.DELETE, body(t * 1000 + i), done)])
            assert done.wait(10)

    threads = [threading.Thread(target=submitter, args=(t,)) for t in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    journal.close()
    assert len(recorder.synced) == per_thread * threads_n
    assert journal.syncs < per_thread * threads_n / 2
    assert max(records for records, _ in recorder.groups) > 1


def test_groups_respect_max_group_bytes(tmp_path):
    recorder = Recorder()
    journal = open_journal(tmp_path, recorder, max_group_bytes=8192)
    journal.start()
    journal.submit([JournalRecord(RecordType.DELETE, body(i, 1000)) for i in range(100)])
    journal.close()
    assert len(recorder.synced) == 100
    assert max(nbytes for _, nbytes in recorder.groups) <= 8192
    assert len(recorder.groups) >= 100 * 1009 // 8192


def test_checkpointed_files_are_recycled_and_the_directory_stays_bounded(tmp_path):
    recorder = Recorder()
    journal = open_journal(tmp_path, recorder)
    journal.start()
    for round_ in range(6):
        done = threading.Event()
        records = [JournalRecord(RecordType.DELETE, body(i, 9000)) for i in range(60)]
        records[-1].token = done
        journal.submit(records)
        assert done.wait(10)
        journal.release_before(recorder.ends[-1])
        assert len(list(tmp_path.glob("*.jnl"))) <= 4, round_  # current, next, 2 spares
    journal.close()


def test_the_next_file_is_ready_before_the_first_record(tmp_path):
    journal = open_journal(tmp_path, file_size=8 * MiB)
    start = journal.start()
    # The file after the current one is already zero-filled and named: the first adds'
    # roll never waits for it, nor shares the disk and CPU with its zeros.
    assert journal.file_seqs() == [start.seq, start.seq + 1]
    assert all(p.stat().st_size == 8 * MiB for p in tmp_path.glob("*.jnl"))
    journal.close()


def test_a_zero_fill_in_progress_gives_way_to_a_spare_that_appears(tmp_path, monkeypatch):
    # An idle writer: the allocator fills at the floor rate, here 2 MiB/s, so an 8 MiB
    # file's fill is still going when a checkpoint releases two old files.
    monkeypatch.setattr(journal_module, "MIN_FILL_RATE", 2 * MiB)
    size = 8 * MiB
    write_records(tmp_path, [body(1, 1000)], file_size=size)  # files 1 and 2
    journal = open_journal(tmp_path, file_size=size)
    journal.replay(None, lambda *a: None)
    journal._fill_started = time.monotonic()
    prepared = []
    filler = threading.Thread(target=lambda: prepared.append(journal._prepare(9, abortable=True)))
    filler.start()
    time.sleep(0.2)
    journal.release_before((3, 0))  # files 1 and 2 become spares mid-fill
    filler.join(5)
    assert not filler.is_alive()
    os.close(prepared[0].fd)
    assert (journal.recycled, journal.filled) == (1, 0)
    assert prepared[0].path.stat().st_size == size
    assert list(tmp_path.glob("*.tmp")) == []


def test_submit_after_close_raises(tmp_path):
    journal = open_journal(tmp_path)
    journal.start()
    journal.close()
    with pytest.raises(Exception, match="closed"):
        journal.submit([JournalRecord(RecordType.DELETE, b"x")])


def test_unwritable_journal_fails_pending_records(tmp_path):
    recorder = Recorder()
    journal = open_journal(tmp_path, recorder)
    journal.start()
    os.close(journal._current.fd)  # the disk goes away under the writer
    journal._current.fd = os.open(os.devnull, os.O_RDONLY)
    journal.submit([JournalRecord(RecordType.DELETE, b"x")])
    journal.close()
    assert recorder.failed and not recorder.synced
    with pytest.raises(Exception, match="failed"):
        journal.submit([JournalRecord(RecordType.DELETE, b"y")])


def test_copying_a_journal_directory_replays_identically(tmp_path):
    bodies = [body(i, 300) for i in range(50)]
    write_records(tmp_path / "a", bodies)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    assert replay(tmp_path / "a")[0] == replay(tmp_path / "b")[0]


def test_group_commit_does_not_wait_for_a_group_that_will_not_come(tmp_path):
    """A lone record (no arrivals to predict more) is synced at once, even with a group
    wait of an hour configured: the wait is only for records the arrival rate says come
    within it (bk_spark.protocol.batching.batch_wait)."""
    recorder = Recorder()
    journal = open_journal(tmp_path, recorder, max_group_wait_s=3600.0)
    journal.start()
    try:
        done = threading.Event()
        journal.submit([JournalRecord(RecordType.DELETE, body(1), token=done)])
        assert done.wait(20), "the lone record waited for a group"
    finally:
        journal.close()
    assert len(recorder.synced) == 1


@pytest.mark.parametrize("count", [200, 3, 1])
@pytest.mark.parametrize("form", ["numpy", "list"])
@pytest.mark.parametrize("cap", [1 << 20, 10_000, 1])
def test_a_packed_add_makes_the_same_add_records_as_its_entries(cap, form, count):
    """``encode_records`` (a packed add's columns: numpy ``Records`` or, for a few records,
    a plain ``RecordList``) and ``encode_adds`` (one tuple per entry) write byte-identical
    ADD bodies, split under the same cap, with the same spans, so the journal and its replay
    cannot tell them apart."""
    import numpy as np

    from bk_spark.protocol.records import pack_records, parse_record_list, parse_records
    from bookie_server.journal import encode_records

    entries = [(i * 3, i - 2, bytes([i % 251]) * (i * 37 % 2000), b"dg" * (i % 7))
               for i in range(count)]
    parse = parse_records if form == "numpy" else parse_record_list
    recs = parse(*pack_records([(42, *e) for e in entries]))
    packed = encode_records(42, b"secret", recs, record_cap=cap)
    plain = encode_adds(42, b"secret", entries, record_cap=cap)
    assert [bytes(b.body) for b in packed] == [bytes(b.body) for b in plain]
    for p, q in zip(packed, plain, strict=True):
        assert isinstance(p.entry_ids, np.ndarray if form == "numpy" else list)
        assert list(map(int, p.entry_ids)) == q.entry_ids
        assert list(map(int, p.spans)) == q.spans
        assert (p.max_lac, p.min_entry, p.max_entry, p.entries_start) == \
            (q.max_lac, q.min_entry, q.max_entry, q.entries_start)
        replayed = decode_add(memoryview(p.body))
        assert replayed.entry_ids == q.entry_ids and replayed.spans == q.spans
