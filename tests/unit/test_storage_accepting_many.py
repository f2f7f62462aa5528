"""A stream message's requests accepted as one (``BookieStorage.accepting_many``, issue 28:
a thousand ledgers' one-entry adds): one journal submission, each add still refused or
answered on its own, and nothing accepted between them (fencing keeps its guarantee).
Real files and the real ``fdatasync``, counted."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from bk_spark.errors import UnauthorizedError
from bk_spark.protocol.records import pack_records
from bookie_server.config import BookieConfig
from bookie_server.storage import BookieStorage

KEY = b"k"
MiB = 1 << 20


def make_storage(tmp_path: Path) -> BookieStorage:
    storage = BookieStorage(BookieConfig(
        data_dir=tmp_path / "bookie", journal_file_size=4 * MiB, max_entry_size=64 * 1024,
        entry_log_size=4 * MiB, checkpoint_interval_s=0, gc_interval_s=0,
        disk_check_interval_s=0))
    storage.start()
    return storage


def test_adds_accepted_as_one_share_one_journal_sync_and_a_fence_waits_for_all_of_them(
        tmp_path, monkeypatch) -> None:
    real = os.fdatasync
    journal_syncs: list[int] = []

    def counted(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".jnl"):
            journal_syncs.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", counted)
    storage = make_storage(tmp_path)
    try:
        storage.add_records(1, KEY, *pack_records([(1, 0, -1, b"first", b"d")]))
        answers: dict[int, object] = {}
        all_done = threading.Event()
        fenced: list[tuple[int, int]] = []
        n = 50

        def done_for(lid: int):  # type: ignore[no-untyped-def]
            def done(err: object) -> None:
                answers[lid] = err
                if len(answers) == n:
                    all_done.set()
            return done

        fencer = threading.Thread(target=lambda: fenced.append(storage.fence(1, KEY)))
        before = len(journal_syncs)
        with storage.accepting_many():
            for lid in range(1, n + 1):  # ledger 1's entry 1, and entry 0 of 49 others
                eid = 1 if lid == 1 else 0
                storage.add_records_then(lid, KEY, *pack_records(
                    [(lid, eid, eid - 1, b"e%d" % lid, b"d")]), done_for(lid))
                if lid == 1:
                    fencer.start()  # another thread's fence: waits for the whole block
            with pytest.raises(UnauthorizedError):  # refused on its own, the rest go on
                storage.add_records_then(2, b"other", *pack_records(
                    [(2, 1, 0, b"x", b"d")]), lambda err: answers.setdefault(-1, err))
            fencer.join(0.2)
            assert fencer.is_alive() and not fenced
            assert answers == {}  # nothing answered before the journal has it
        assert all_done.wait(10)
        fencer.join(10)
        assert answers == {lid: None for lid in range(1, n + 1)}
        # the fence came after every add of the block: it includes ledger 1's entry 1
        assert fenced and fenced[0][1] == 1
        # the block's 50 adds were synced together (the fence's record is its own)
        assert len(journal_syncs) - before <= 2
        for lid in range(2, n + 1):
            recs, missing = storage.read_records(lid, [0])
            assert not missing and recs.entry_ids.tolist() == [0]
    finally:
        storage.close()


def test_a_journal_that_refuses_the_block_fails_every_add_of_it(tmp_path) -> None:
    storage = make_storage(tmp_path)
    got: list[object] = []
    try:
        with storage.accepting_many():
            for lid in (1, 2, 3):
                storage.add_records_then(lid, KEY, *pack_records(
                    [(lid, 0, -1, b"e", b"d")]), got.append)
            storage._journal.close()  # the journal goes away before the block submits
    finally:
        storage.close()
    assert len(got) == 3 and all(err is not None for err in got)
