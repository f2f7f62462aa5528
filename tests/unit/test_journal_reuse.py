"""Journal files reused at throughput rates: a roll prompts a checkpoint that gives the
file just left back as a spare, instead of the allocator zero-filling a new one
(bookie_server.journal.roll_wants_checkpoint; bench/profiles.md, "Checkpoints invisible
to adds")."""

from __future__ import annotations

from pathlib import Path

import pytest

import bookie_server.journal as journal_module
from bookie_server.config import BookieConfig
from bookie_server.journal import (
    REUSE_MIN_GAP_S,
    REUSE_MIN_RATE,
    roll_wants_checkpoint,
)
from bookie_server.storage import BookieStorage

MiB = 1 << 20


@pytest.mark.parametrize("rate, spares, since, wanted", [
    (REUSE_MIN_RATE, 0, REUSE_MIN_GAP_S, True),  # throughput, no spare left: reuse
    (REUSE_MIN_RATE * 0.5, 0, 5.0, False),  # a paced load: the interval's checkpoints only
    (REUSE_MIN_RATE * 2, 1, 5.0, False),  # a spare is there for the next roll
    (REUSE_MIN_RATE * 2, 0, REUSE_MIN_GAP_S / 2, False),  # one was just done
])
def test_a_roll_prompts_a_checkpoint_only_at_throughput_rates(rate, spares, since, wanted):
    assert roll_wants_checkpoint(rate, spares, since) is wanted


def test_a_bookie_writing_at_throughput_rate_reuses_its_journal_files(tmp_path: Path,
                                                                      monkeypatch):
    """24 MiB of adds through 1 MiB journal files with the interval checkpoint 10 s away:
    the files come back as spares (before: none reused, every file zero-filled), and every
    entry reads back after a restart."""
    monkeypatch.setattr(journal_module, "REUSE_MIN_RATE", 0)  # any rate: the test is short
    monkeypatch.setattr(journal_module, "REUSE_MIN_GAP_S", 0.0)
    config = BookieConfig(data_dir=tmp_path / "bookie", journal_file_size=1 * MiB,
                          max_entry_size=64 * 1024, entry_log_size=8 * MiB,
                          checkpoint_interval_s=10.0, gc_interval_s=0,
                          disk_check_interval_s=0)
    storage = BookieStorage(config)
    storage.start()
    body = b"r" * 1000
    try:
        for first in range(0, 24_000, 200):
            storage.add_entries(7, b"k", [(e, e - 1, body, b"") for e in range(first,
                                                                           first + 200)])
        journal = storage._journal
        assert journal.recycled >= 5, (journal.recycled, journal.filled)
        assert journal.filled < 20
    finally:
        storage.close()
    storage = BookieStorage(config)
    storage.start()
    try:
        found, missing = storage.read_entries(7, range(24_000), max_entries=24_000,
                                              max_bytes=64 * MiB)
        assert missing == [] and len(found) == 24_000
    finally:
        storage.close()
