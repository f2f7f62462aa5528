"""A checkpoint works in slices and stays invisible to adds, and a crash at any point of it
loses nothing acknowledged (bench/profiles.md, "Checkpoints invisible to adds").

The crash images are copies of the bookie's data directory taken while the checkpoint is
stopped at one of its pauses: what a kill -9 at that moment leaves (the page cache
survives a killed process), each restarted as a new storage."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pytest

import bookie_server.index as index_module
import bookie_server.storage as storage_module
from bookie_server.config import BookieConfig
from bookie_server.index import EntryIndex, IndexStore
from bookie_server.journal import Journal
from bookie_server.storage import BookieStorage
from bookie_server.writeback import Yielder

MiB = 1 << 20
KEY = b"k"


def make_config(data_dir: Path, **overrides) -> BookieConfig:
    settings = dict(data_dir=data_dir, journal_file_size=1 * MiB, entry_log_size=1 * MiB,
                    max_entry_size=64 * 1024,
                    checkpoint_interval_s=0, gc_interval_s=0, disk_check_interval_s=0)
    settings.update(overrides)
    return BookieConfig(**settings)


def payload(ledger_id: int, entry_id: int) -> bytes:
    return (b"%d/%d;" % (ledger_id, entry_id)) * 60


def add(storage: BookieStorage, ledger_id: int, first: int, count: int) -> None:
    storage.add_entries(ledger_id, KEY, [(e, e - 1, payload(ledger_id, e), b"d%d" % e)
                                         for e in range(first, first + count)])


def check_image(image: Path, acked: dict[int, int]) -> None:
    storage = BookieStorage(make_config(image))
    storage.start()
    try:
        for ledger_id, top in acked.items():
            found, missing = storage.read_entries(ledger_id, range(top + 1),
                                                  max_entries=top + 1)
            assert missing == [], f"{image.name}: ledger {ledger_id} lost {missing[:5]}..."
            assert [e.payload for e in found] == [payload(ledger_id, e)
                                                  for e in range(top + 1)]
    finally:
        storage.close()


def _copy_if_present(src: str, dst: str) -> None:
    """Copy one file of a running bookie's directory; a file gone since the listing (the
    journal allocator renaming a filled spare's ``.tmp``) is not in the image, as it would
    not be in the directory a kill -9 leaves at that instant."""
    try:
        shutil.copy2(src, dst)
    except FileNotFoundError:
        pass


@pytest.mark.parametrize("full", [False, True], ids=["incremental", "full"])
def test_a_kill_9_anywhere_in_a_sliced_checkpoint_replays_every_acknowledged_entry(
        tmp_path, monkeypatch, full):
    """Two ledgers of 3,000 entries (~3 journal files) are checkpointed 256 entries at a
    time. At every few of the checkpoint's pauses (while it reads locations, while it
    writes the batch), an add runs to completion from another thread (the checkpoint holds
    no lock there) and the data directory is copied; another copy is taken when the batch
    begins to be written and one after the checkpoint. Every copy, restarted, holds every
    entry acknowledged before it was taken. Fails on a wrong order: the position read
    after the slices (the mid-checkpoint adds are then neither in the batch nor replayed),
    or the journal released before the batch is durable. Both forms of a checkpoint: an
    incremental batch, and a full snapshot (a new index generation)."""
    monkeypatch.setattr(storage_module, "CHECKPOINT_SLICE", 256)
    data = tmp_path / "bookie"
    storage = BookieStorage(make_config(data))
    storage.start()
    acked = {1: -1, 2: -1}
    for ledger_id in acked:
        for first in range(0, 3000, 500):
            add(storage, ledger_id, first, 500)
        acked[ledger_id] = 2999
    images: list[tuple[Path, dict[int, int]]] = []

    def crash_image(tag: str) -> None:
        image = tmp_path / f"image-{len(images)}-{tag}"
        shutil.copytree(data, image, copy_function=_copy_if_present)
        images.append((image, dict(acked)))

    calls = [0]

    class AddsAtPauses(Yielder):
        def __call__(self) -> None:
            calls[0] += 1
            if calls[0] % 4:
                return
            ledger_id = 1 + calls[0] // 4 % 2
            adder = threading.Thread(target=add, args=(storage, ledger_id,
                                                       acked[ledger_id] + 1, 20))
            adder.start()
            adder.join(10)
            assert not adder.is_alive(), "an add waited for the checkpoint's pause"
            acked[ledger_id] += 20
            crash_image("pause")

    write = IndexStore.rewrite if full else IndexStore.append

    def append_then_image(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        crash_image("batch")
        return write(self, *args, **kwargs)

    release = Journal.release_before

    def release_after_image(self, position):  # type: ignore[no-untyped-def]
        crash_image("release")
        return release(self, position)

    monkeypatch.setattr(storage_module, "Yielder", AddsAtPauses)
    monkeypatch.setattr(IndexStore, "rewrite" if full else "append", append_then_image)
    monkeypatch.setattr(IndexStore, "wants_rewrite", property(lambda self: full))
    monkeypatch.setattr(Journal, "release_before", release_after_image)
    storage.checkpoint()
    monkeypatch.undo()
    crash_image("after")
    add(storage, 1, acked[1] + 1, 10)  # the journal goes on past the checkpoint
    acked[1] += 10
    crash_image("later")
    storage.close()
    paused = [image for image, _ in images if image.name.endswith("pause")]
    assert len(paused) >= 8, f"the checkpoint paused only {calls[0]} times"
    for image, expected in images:
        check_image(image, expected)
    check_image(data, acked)


def test_a_checkpoint_of_300k_entries_holds_the_state_lock_a_slice_at_a_time(tmp_path,
                                                                            monkeypatch):
    """A checkpoint of 300,000 changed entries looks their locations up at most
    CHECKPOINT_SLICE at a time under the state lock (before: all 300,000 in one lookup,
    4-30 ms with the journal writer's apply waiting on the lock), pauses between slices
    with no lock held, and writes the batch in parts of at most a slice's column; lone
    adds made meanwhile all complete, and the entries read back after a restart."""
    config = make_config(tmp_path / "bookie", journal_file_size=64 * MiB,
                         entry_log_size=64 * MiB)
    storage = BookieStorage(config)
    storage.start()
    body = b"x" * 100
    for first in range(0, 300_000, 5000):
        storage.add_entries(1, KEY, [(e, e - 1, body, b"") for e in range(first, first + 5000)])
    looked_up: list[tuple[int, bool]] = []
    lookup = EntryIndex.lookup

    def recorded(self, ids):  # type: ignore[no-untyped-def]
        looked_up.append((len(ids), storage._state_lock.locked()))
        return lookup(self, ids)

    pauses: list[bool] = []

    class Counting(Yielder):
        def __call__(self) -> None:
            # Held by this (the checkpoint's) thread, the plain lock cannot be taken again:
            # the acquire times out. Held by the lone adds' apply, it is taken once freed.
            free = storage._state_lock.acquire(timeout=1.0)
            if free:
                storage._state_lock.release()
            pauses.append(not free)
            super().__call__()

    parts: list[int] = []
    body_parts = index_module.batch_body_parts

    def sized(*args, **kwargs):  # type: ignore[no-untyped-def]
        for part in body_parts(*args, **kwargs):
            parts.append(len(part))
            yield part

    stop = threading.Event()
    lone = [0]

    def lone_adds() -> None:
        while not stop.is_set():
            storage.add_entries(2, KEY, [(lone[0], lone[0] - 1, body, b"")])
            lone[0] += 1

    adder = threading.Thread(target=lone_adds)
    adder.start()
    monkeypatch.setattr(EntryIndex, "lookup", recorded)
    monkeypatch.setattr(storage_module, "Yielder", Counting)
    monkeypatch.setattr(index_module, "batch_body_parts", sized)
    try:
        storage.checkpoint()
    finally:
        monkeypatch.undo()
        stop.set()
        adder.join()
    slices = -(-300_000 // storage_module.CHECKPOINT_SLICE)
    assert sum(n for n, _ in looked_up) == 300_000 and len(looked_up) == slices
    assert all(n <= storage_module.CHECKPOINT_SLICE and held for n, held in looked_up)
    assert len(pauses) >= slices and not any(pauses)
    assert max(parts) <= 8 * storage_module.CHECKPOINT_SLICE
    storage.close()
    storage = BookieStorage(config)
    storage.start()
    try:
        found, missing = storage.read_entries(1, range(300_000), max_entries=300_000,
                                              max_bytes=64 * MiB)
        assert missing == [] and len(found) == 300_000
        assert storage.read_entries(2, range(lone[0]), max_entries=lone[0] + 1)[1] == []
    finally:
        storage.close()


def test_bookies_started_together_checkpoint_at_their_own_phase(tmp_path):
    """Three bookies of one host get three different phases within the interval, and a
    storage's first interval checkpoint runs at its phase, not a whole interval after it
    started (before: every bookie at the same multiples of the interval)."""
    interval = 1.0
    configs = [make_config(tmp_path / f"b{port}", port=port, checkpoint_interval_s=interval)
               for port in range(3181, 3200)]
    phases = [c.checkpoint_phase_s for c in configs]
    assert all(0 <= p < interval for p in phases)
    assert len({round(p, 3) for p in phases[:3]}) == 3
    config = next(c for c in configs if 0.1 <= c.checkpoint_phase_s <= 0.5)
    storage = BookieStorage(config)
    runs: list[float] = []
    checkpoint = storage.checkpoint

    def timed() -> None:
        runs.append(time.monotonic())
        checkpoint()

    storage.checkpoint = timed  # type: ignore[method-assign]
    storage.start()  # its own checkpoint (runs[0]), then the thread with the interval's
    started = time.monotonic()
    try:
        deadline = started + 3
        while len(runs) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(runs) >= 2
        # The thread counts its phase from when it starts: after runs[0], before start()
        # returned. A whole interval (1 s) from then would be past the upper bound.
        phase = config.checkpoint_phase_s
        assert runs[0] + phase - 0.01 <= runs[1] < started + phase + 0.4
    finally:
        storage.close()
