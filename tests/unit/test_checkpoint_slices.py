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

import bookie_server.storage as storage_module
from bookie_server.config import BookieConfig
from bookie_server.index import IndexStore
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


def test_a_kill_9_anywhere_in_a_sliced_checkpoint_replays_every_acknowledged_entry(
        tmp_path, monkeypatch):
    """Two ledgers of 3,000 entries (~3 journal files) are checkpointed 256 entries at a
    time. At every few of the checkpoint's pauses (while it reads locations, while it
    writes the batch), an add runs to completion from another thread (the checkpoint holds
    no lock there) and the data directory is copied; another copy is taken when the batch
    begins to be written and one after the checkpoint. Every copy, restarted, holds every
    entry acknowledged before it was taken. Fails on a wrong order: the position read
    after the slices (the mid-checkpoint adds are then neither in the batch nor replayed),
    or the journal released before the batch is durable."""
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
        shutil.copytree(data, image)
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

    append = IndexStore.append

    def append_then_image(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        crash_image("batch")
        return append(self, *args, **kwargs)

    release = Journal.release_before

    def release_after_image(self, position):  # type: ignore[no-untyped-def]
        crash_image("release")
        return release(self, position)

    monkeypatch.setattr(storage_module, "Yielder", AddsAtPauses)
    monkeypatch.setattr(IndexStore, "append", append_then_image)
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


def test_an_add_during_a_checkpoint_of_300k_entries_waits_at_most_a_few_ms(tmp_path):
    """A checkpoint of 300,000 changed entries (before: the state lock held for their
    whole lookup and the GIL for their whole encoding, 6-25 ms on an idle machine, 200 ms
    in a loaded sandbox) does not hold up lone adds made meanwhile for more than a slice:
    the slowest one of them is within 20 ms even on this shared machine (before: the whole
    encoding's GIL hold plus the state lock's)."""
    storage = BookieStorage(make_config(tmp_path / "bookie", journal_file_size=64 * MiB,
                                        entry_log_size=64 * MiB))
    storage.start()
    try:
        body = b"x" * 100
        for first in range(0, 300_000, 5000):
            storage.add_entries(1, KEY, [(e, e - 1, body, b"") for e in range(first,
                                                                           first + 5000)])
        stop = threading.Event()
        slowest = [0.0]

        def lone_adds() -> None:
            e = 0
            while not stop.is_set():
                began = time.perf_counter()
                storage.add_entries(2, KEY, [(e, e - 1, body, b"")])
                slowest[0] = max(slowest[0], time.perf_counter() - began)
                e += 1

        adder = threading.Thread(target=lone_adds)
        adder.start()
        time.sleep(0.05)
        pauses = []

        class Counting(Yielder):
            def __call__(self) -> None:
                pauses.append(1)
                super().__call__()

        storage_module.Yielder, original = Counting, storage_module.Yielder
        try:
            storage.checkpoint()
        finally:
            storage_module.Yielder = original
            stop.set()
            adder.join()
        assert len(pauses) >= 300_000 // storage_module.CHECKPOINT_SLICE
        assert slowest[0] < 0.020, f"a lone add took {slowest[0] * 1e3:.1f} ms"
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
    began = time.monotonic()
    storage.start()  # its own checkpoint after the replay, then the interval's
    try:
        deadline = began + 3
        while len(runs) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(runs) >= 2
        first = runs[1] - began
        assert config.checkpoint_phase_s - 0.05 <= first < config.checkpoint_phase_s + 0.3
    finally:
        storage.close()
