"""The bookie's add path (issue 28): group commit's guarantees with few thread hand-offs.

Real files and the real ``fdatasync``, counted: no mock of the journal or the server.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from bookie_server.config import BookieConfig
from bookie_server.entrylog import EntryLogs
from bookie_server.journal import ADD_HEADER, RecordType, decode_add, iter_file_records
from bookie_server.location import log_of, offset_of
from bookie_server.storage import BookieStorage

KEY = b"k"
MiB = 1 << 20


def make_storage(tmp_path: Path, **overrides) -> BookieStorage:
    settings = dict(data_dir=tmp_path / "bookie", journal_file_size=1 * MiB,
                    max_entry_size=64 * 1024, entry_log_size=4 * MiB,
                    checkpoint_interval_s=0, gc_interval_s=0, disk_check_interval_s=0)
    settings.update(overrides)
    storage = BookieStorage(BookieConfig(**settings))
    storage.start()
    return storage


class CountedSyncs:
    """``os.fdatasync`` that still syncs, and remembers, for every journal file it synced,
    the file's bytes as that sync made them durable and the thread that called it."""

    def __init__(self, monkeypatch) -> None:
        self.real = os.fdatasync
        self.lock = threading.Lock()
        self.durable: list[bytes] = []  # journal images, in sync order
        self.threads: set[int] = set()
        monkeypatch.setattr(os, "fdatasync", self)

    def __call__(self, fd: int) -> None:
        if not os.readlink(f"/proc/self/fd/{fd}").endswith(".jnl"):
            self.real(fd)
            return
        image = os.pread(fd, 1 * MiB, 0)  # only the writer thread writes journal files
        self.real(fd)
        with self.lock:
            self.durable.append(image)
            self.threads.add(threading.get_ident())

    def was_synced(self, marker: bytes) -> bool:
        with self.lock:
            return any(marker in image for image in self.durable)


def marked(thread: int, i: int) -> bytes:
    return (b"<t%02d-e%04d>" % (thread, i)) * 40


def test_an_add_is_acknowledged_only_after_the_fdatasync_of_its_record(tmp_path, monkeypatch):
    syncs = CountedSyncs(monkeypatch)
    storage = make_storage(tmp_path)
    early: list[bytes] = []

    def adder(t: int) -> None:
        for i in range(25):
            payload = marked(t, i)
            storage.add_entries(t + 1, KEY, [(i, i - 1, payload, b"d")])
            if not syncs.was_synced(payload):  # acknowledged: it must be durable already
                early.append(payload)

    threads = [threading.Thread(target=adder, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    storage.close()
    assert early == []
    assert 0 < len(syncs.durable) < 8 * 25  # and concurrent adds shared syncs


def test_an_add_is_applied_and_released_by_the_thread_that_synced_it(tmp_path, monkeypatch):
    """No hand-off between a group's fdatasync and its acknowledgement but the one back to
    the waiting request thread: the entry-log write and the index update run on the
    journal writer, right after its sync."""
    syncs = CountedSyncs(monkeypatch)
    appended_by: set[int] = set()
    real_append = EntryLogs.append

    def append(self, buffers):  # type: ignore[no-untyped-def]
        appended_by.add(threading.get_ident())
        return real_append(self, buffers)

    monkeypatch.setattr(EntryLogs, "append", append)
    storage = make_storage(tmp_path)
    try:
        for i in range(5):
            storage.add_entries(1, KEY, [(i, i - 1, marked(0, i), b"d")])
        assert storage.read_entries(1, range(5))[0][4].payload == marked(0, 4)
    finally:
        storage.close()
    assert len(syncs.threads) == 1
    assert appended_by == syncs.threads


def test_adds_of_one_ledger_are_applied_in_journal_order(tmp_path):
    """Concurrent writers of one ledger: the entry log holds the entries in the order the
    journal does (each group applied whole, in order, before the next)."""
    storage = make_storage(tmp_path)
    n_threads, each = 6, 40

    def adder(t: int) -> None:
        for i in range(each):
            e = i * n_threads + t
            storage.add_entries(1, KEY, [(e, -1, marked(t, i), b"d")])

    threads = [threading.Thread(target=adder, args=(t,)) for t in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    index = storage._ledgers[1].index
    stored = sorted(range(n_threads * each), key=lambda e: (log_of(index[e]),
                                                             offset_of(index[e])))
    storage.close()
    journaled: list[int] = []
    for path in sorted((tmp_path / "bookie" / "journal").glob("*.jnl")):
        seq = int(path.name.split(".")[0], 16)
        for rtype, body, _end in iter_file_records(memoryview(path.read_bytes()), seq):
            if rtype == RecordType.ADD and ADD_HEADER.unpack_from(body, 0)[0] == 1:
                journaled += decode_add(body).entry_ids
    assert journaled == stored
    assert sorted(journaled) == list(range(n_threads * each))


def test_a_packed_add_is_stored_as_sent_and_replays_after_a_restart(tmp_path):
    """``add_records``: the records come back byte for byte from reads, the index and the
    LAC are those of the same entries added one tuple each, overwrites (a recovery's
    write-back) replace, and all of it is there after a restart (journal replay after a
    kill -9: tests/integration/test_packed_adds.py)."""
    import numpy as np
    import pytest

    from bk_spark.errors import LedgerFencedError, UnauthorizedError
    from bk_spark.protocol.records import pack_records

    storage = make_storage(tmp_path)
    entries = [(5, e, e - 1, (b"%d;" % e) * (e % 300 + 1), b"d" * 12) for e in range(3000)]
    data, lengths = pack_records(entries)
    assert storage.add_records(5, KEY, data, lengths) == 3000
    plain = [(e, lac, p, d) for _l, e, lac, p, d in entries]
    storage.add_entries(6, KEY, plain)
    for lid in (5, 6):
        recs, missing = storage.read_records(lid, range(0, 3000), max_entries=5000,
                                             max_bytes=64 * MiB)
        assert missing == [] and len(recs) == 3000
        if lid == 5:
            assert recs.data == data
        assert storage.ledger_state(lid) == (2998, 2999, False)
    with pytest.raises(UnauthorizedError):
        storage.add_records(5, b"other", *pack_records(entries[:1]))
    storage.fence(5, KEY)
    with pytest.raises(LedgerFencedError):
        storage.add_records(5, KEY, *pack_records(entries[:1]))
    again = [(5, e, 2999, b"recovered %d" % e, b"r" * 12) for e in (10, 11, 12)]
    storage.add_records(5, KEY, *pack_records(again), recovery=True)
    storage.close()

    storage = make_storage(tmp_path)
    try:
        recs, _ = storage.read_records(5, range(9, 14), master_key=KEY)
        payloads = [recs.data[a:b] for a, b in zip(recs.payload_starts.tolist(),
                                                    recs.payload_ends.tolist(), strict=True)]
        assert payloads == [entries[9][3], b"recovered 10", b"recovered 11", b"recovered 12",
                            entries[13][3]]
        assert storage.ledger_state(5) == (2999, 2999, True)
        assert np.array_equal(storage.read_records(6, range(3000))[0].entry_ids,
                              np.arange(3000))
    finally:
        storage.close()


def test_a_packed_adds_callback_form_returns_at_once_and_answers_after_the_fdatasync(
        tmp_path, monkeypatch):
    """``add_records_then`` (the add stream's form of a packed add): the caller is not
    parked while the journal syncs, ``done(None)`` comes only once the records are durable
    and readable, a refusal (wrong key, fenced) raises at once and never calls ``done``."""
    import pytest

    from bk_spark.errors import LedgerFencedError, UnauthorizedError
    from bk_spark.protocol.records import pack_records

    syncs = CountedSyncs(monkeypatch)
    gate = threading.Event()
    counted = syncs.__call__

    def held(fd: int) -> None:  # the journal's fdatasync waits for the gate
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".jnl"):
            gate.wait(10)
        counted(fd)

    monkeypatch.setattr(os, "fdatasync", held)
    storage = make_storage(tmp_path)
    try:
        answered = threading.Event()
        seen: list[tuple[object, bool, int]] = []

        def done(err) -> None:  # type: ignore[no-untyped-def]
            payload = marked(1, 7)
            seen.append((err, syncs.was_synced(payload), len(storage.read_records(
                9, range(8))[0])))
            answered.set()

        records = pack_records([(9, e, e - 1, marked(1, e), b"d") for e in range(8)])
        assert storage.add_records_then(9, KEY, *records, done) == 8  # returns at once
        assert not answered.wait(0.2) and seen == []  # nothing acknowledged before the sync
        gate.set()
        assert answered.wait(10)
        assert seen == [(None, True, 8)]
        refused: list[object] = []
        with pytest.raises(UnauthorizedError):
            storage.add_records_then(9, b"other", *records, refused.append)
        storage.fence(9, KEY)
        with pytest.raises(LedgerFencedError):
            storage.add_records_then(9, KEY, *records, refused.append)
        assert refused == []
    finally:
        gate.set()
        storage.close()
