"""BookieStorage: the guarantees a bookie's storage engine keeps, on real files."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from bk_spark.errors import (
    BKError,
    InvalidRequestError,
    LedgerFencedError,
    NoSuchLedgerError,
    ReadOnlyError,
    TooLargeError,
    UnauthorizedError,
)
from bookie_server.config import BookieConfig
from bookie_server.storage import BookieStorage, StorageMetrics, StoredEntry

KEY = b"master-key"
MiB = 1 << 20


def make_config(tmp_path: Path, **overrides) -> BookieConfig:
    settings = dict(
        data_dir=tmp_path / "bookie",
        journal_file_size=1 * MiB,
        max_entry_size=64 * 1024,
        entry_log_size=256 * 1024,
        checkpoint_interval_s=0,  # background tasks off unless a test turns them on
        gc_interval_s=0,
        disk_check_interval_s=0,
    )
    settings.update(overrides)
    return BookieConfig(**settings)


class CountingMetrics(StorageMetrics):
    def __init__(self) -> None:
        self.syncs = 0
        self.added_entries = 0
        self.read_entries = 0

    def journal_sync(self, seconds: float, records: int, nbytes: int) -> None:
        self.syncs += 1

    def added(self, n: int, nbytes: int) -> None:
        self.added_entries += n

    def read(self, n: int, nbytes: int) -> None:
        self.read_entries += n


@pytest.fixture
def config(tmp_path: Path) -> BookieConfig:
    return make_config(tmp_path)


def open_storage(config: BookieConfig, metrics: StorageMetrics | None = None) -> BookieStorage:
    storage = BookieStorage(config, metrics)
    storage.start()
    return storage


@pytest.fixture
def storage(config: BookieConfig):
    s = open_storage(config)
    yield s
    s.close()


def payload(ledger_id: int, entry_id: int, size: int = 1000) -> bytes:
    seed = f"{ledger_id}:{entry_id};".encode()
    return (seed * (size // len(seed) + 1))[:size]


def entries(ledger_id: int, first: int, count: int, size: int = 1000):
    return [
        (e, e - 1, payload(ledger_id, e, size), b"dg%d" % e) for e in range(first, first + count)
    ]


def add(storage: BookieStorage, ledger_id: int, first: int, count: int, size: int = 1000, **kw):
    storage.add_entries(ledger_id, KEY, entries(ledger_id, first, count, size), **kw)


def assert_has(storage: BookieStorage, ledger_id: int, ids, size: int = 1000) -> None:
    ids = list(ids)
    found, missing = storage.read_entries(ledger_id, ids, max_entries=len(ids) + 1)
    assert missing == []
    assert [e.entry_id for e in found] == ids
    for e in found:
        assert e.payload == payload(ledger_id, e.entry_id, size)
        assert e.digest == b"dg%d" % e.entry_id
        assert e.lac == e.entry_id - 1


def simulate_crash(storage: BookieStorage) -> None:
    """Stop without the final checkpoint: restart must rebuild from the journal."""
    storage.checkpoint = lambda: None  # type: ignore[method-assign]
    storage.close()


def data_dir_size(config: BookieConfig) -> int:
    total = 0
    for p in Path(config.data_dir).rglob("*"):
        try:  # the background GC may delete a file between listing and stat
            if p.is_file():
                total += p.stat().st_size
        except FileNotFoundError:
            continue
    return total


# -- adds and reads -------------------------------------------------------------------------


def test_added_entries_are_read_back_with_lac_and_digest(storage):
    add(storage, 1, 0, 50)
    found, missing = storage.read_entries(1, range(50))
    assert missing == []
    assert found[0] == StoredEntry(1, 0, -1, payload(1, 0), b"dg0")
    assert_has(storage, 1, range(50))
    assert storage.ledger_state(1) == (48, 49, False)
    assert storage.ledger_ids() == [1]


def test_read_reports_missing_ids_and_unknown_ledgers(storage):
    add(storage, 1, 0, 5)
    found, missing = storage.read_entries(1, [7, 3, 1, 3])
    assert [e.entry_id for e in found] == [1, 3]
    assert missing == [7]
    with pytest.raises(NoSuchLedgerError):
        storage.read_entries(2, [0])
    with pytest.raises(NoSuchLedgerError):
        storage.ledger_state(2)


def test_read_stops_at_max_entries_and_max_bytes_but_returns_the_first(storage):
    add(storage, 1, 0, 20, size=1000)
    found, missing = storage.read_entries(1, range(20), max_entries=5)
    assert [e.entry_id for e in found] == [0, 1, 2, 3, 4] and missing == []
    found, _ = storage.read_entries(1, range(20), max_bytes=3 * 1100)
    assert [e.entry_id for e in found] == [0, 1, 2]
    found, _ = storage.read_entries(1, range(20), max_bytes=10)
    assert [e.entry_id for e in found] == [0]


def test_readd_of_an_entry_overwrites_it(storage):
    add(storage, 1, 0, 3)
    storage.add_entries(1, KEY, [(1, 0, b"rewritten", b"d")], recovery=True)
    found, _ = storage.read_entries(1, [0, 1, 2])
    assert [e.payload for e in found] == [payload(1, 0), b"rewritten", payload(1, 2)]


def test_entries_in_one_request_go_in_order_and_last_copy_wins(storage):
    storage.add_entries(1, KEY, [(0, -1, b"a", b""), (1, -1, b"b", b""), (0, -1, b"c", b"")])
    found, _ = storage.read_entries(1, [0, 1])
    assert [e.payload for e in found] == [b"c", b"b"]


def test_large_request_spanning_entry_logs_reads_back(storage):
    add(storage, 1, 0, 10, size=60 * 1024)  # 600 KiB through 256 KiB entry logs
    assert_has(storage, 1, range(10), size=60 * 1024)


# -- validation -----------------------------------------------------------------------------


def test_too_large_entry_is_refused_and_nothing_is_added(storage, config):
    batch = entries(1, 0, 2) + [(2, 1, bytes(config.max_entry_size + 1), b"")]
    with pytest.raises(TooLargeError):
        storage.add_entries(1, KEY, batch)
    with pytest.raises(NoSuchLedgerError):
        storage.ledger_state(1)


@pytest.mark.parametrize(
    "ledger_id, batch, lac",
    [
        (-1, [(0, -1, b"x", b"")], -1),
        (1, [(-5, -1, b"x", b"")], -1),
        (1, [(0, -2, b"x", b"")], -1),
        (1, [(0, -1, b"x", b"")], -3),
        (1, [(0, -1, None, b"")], -1),
        (1, [(0, -1, "text", b"")], -1),
        (1, [(2**63, -1, b"x", b"")], -1),
        (2**63, [(0, -1, b"x", b"")], -1),
        (1, [(0, -1, b"x")], -1),
    ],
)
def test_negative_ids_and_malformed_entries_are_invalid(storage, ledger_id, batch, lac):
    with pytest.raises(InvalidRequestError):
        storage.add_entries(ledger_id, KEY, batch, lac=lac)
    assert storage.ledger_ids() == []


def test_negative_ids_are_invalid_for_reads_fences_and_deletes(storage):
    add(storage, 1, 0, 1)
    with pytest.raises(InvalidRequestError):
        storage.read_entries(1, [-1, 0])
    with pytest.raises(InvalidRequestError):
        storage.fence(-1, KEY)
    with pytest.raises(InvalidRequestError):
        storage.delete_ledger(-1)


def test_negative_ledger_ids_are_invalid_for_ledger_state_and_lac_waits(storage):
    # the storage checks every operation's ids itself (the gRPC service no longer does)
    with pytest.raises(InvalidRequestError):
        storage.ledger_state(-1)
    with pytest.raises(InvalidRequestError):
        storage.wait_for_lac(-1, -1, 0.0)


def test_wrong_master_key_is_unauthorized(storage):
    add(storage, 1, 0, 1)
    with pytest.raises(UnauthorizedError):
        storage.add_entries(1, b"other", entries(1, 1, 1))
    with pytest.raises(UnauthorizedError):
        storage.fence(1, b"other")
    with pytest.raises(UnauthorizedError):
        storage.add_entries(1, b"other", [], lac=5)
    assert storage.ledger_state(1) == (-1, 0, False)


# -- fencing --------------------------------------------------------------------------------


def test_fenced_ledger_refuses_plain_adds_but_takes_recovery_adds(storage):
    add(storage, 1, 0, 5)
    assert storage.fence(1, KEY) == (3, 4)
    with pytest.raises(LedgerFencedError):
        add(storage, 1, 5, 1)
    with pytest.raises(LedgerFencedError):
        storage.add_entries(1, KEY, [], lac=4)
    add(storage, 1, 5, 1, recovery=True)
    assert storage.ledger_state(1) == (4, 5, True)
    assert storage.fence(1, KEY) == (4, 5)  # fencing again is harmless


def test_fence_of_an_unknown_ledger_creates_it_fenced(storage):
    assert storage.fence(9, KEY) == (-1, -1)
    assert storage.ledger_state(9) == (-1, -1, True)
    with pytest.raises(LedgerFencedError):
        add(storage, 9, 0, 1)  # a late add from the old writer
    with pytest.raises(UnauthorizedError):
        storage.add_entries(9, b"other", entries(9, 0, 1))


def test_fence_returns_every_add_accepted_before_it(storage):
    results: list[tuple[int, int]] = []

    def writer(t: int) -> None:
        for i in range(20):
            try:
                add(storage, 1, t * 1000 + i * 2, 2)
            except LedgerFencedError:
                return

    add(storage, 1, 100_000, 1)
    threads = [threading.Thread(target=writer, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    results.append(storage.fence(1, KEY))
    for t in threads:
        t.join()
    lac, last = results[0]
    assert storage.ledger_state(1)[:2] == (lac, last)  # nothing got in after the fence


def test_fence_persists_across_restart(config):
    s = open_storage(config)
    add(s, 1, 0, 3)
    s.fence(1, KEY)
    s.fence(2, KEY)
    s.close()
    s = open_storage(config)
    assert s.ledger_state(1) == (1, 2, True)
    assert s.ledger_state(2) == (-1, -1, True)
    with pytest.raises(LedgerFencedError):
        add(s, 1, 3, 1)
    s.close()


def test_fence_survives_a_crash_before_any_checkpoint(config):
    s = open_storage(config)
    add(s, 1, 0, 3)
    s.fence(1, KEY)
    simulate_crash(s)
    s = open_storage(config)
    assert s.ledger_state(1) == (1, 2, True)
    with pytest.raises(LedgerFencedError):
        add(s, 1, 3, 1)
    s.close()


# -- LAC ------------------------------------------------------------------------------------


def test_lac_is_the_max_of_entry_lacs_and_explicit_lacs(storage):
    storage.add_entries(1, KEY, [(0, -1, b"a", b""), (1, 5, b"b", b""), (2, 3, b"c", b"")])
    assert storage.ledger_state(1) == (5, 2, False)
    storage.add_entries(1, KEY, [], lac=9)
    assert storage.ledger_state(1) == (9, 2, False)
    storage.add_entries(1, KEY, [], lac=4)
    assert storage.ledger_state(1) == (9, 2, False)
    storage.add_entries(1, KEY, [], lac=-1)  # nothing to do
    assert storage.ledger_state(1) == (9, 2, False)


def test_explicit_lac_persists_across_crash_and_restart(config):
    s = open_storage(config)
    add(s, 1, 0, 2)
    s.add_entries(1, KEY, [], lac=1)
    simulate_crash(s)
    s = open_storage(config)
    assert s.ledger_state(1) == (1, 1, False)
    s.close()
    s = open_storage(config)
    assert s.ledger_state(1) == (1, 1, False)
    s.close()


def test_wait_for_lac_returns_when_the_lac_passes_the_previous_one(storage):
    add(storage, 1, 0, 1)
    timer = threading.Timer(0.1, lambda: add(storage, 1, 1, 2))
    timer.start()
    began = time.monotonic()
    lac, last, fenced = storage.wait_for_lac(1, previous_lac=-1, timeout_s=5)
    timer.join()
    assert time.monotonic() - began < 4
    assert (lac, fenced) == (1, False) and last >= 1


def test_wait_for_lac_times_out_with_the_current_state(storage):
    add(storage, 1, 0, 3)
    began = time.monotonic()
    assert storage.wait_for_lac(1, previous_lac=1, timeout_s=0.2) == (1, 2, False)
    assert 0.15 < time.monotonic() - began < 3
    assert storage.wait_for_lac(1, previous_lac=0, timeout_s=5) == (1, 2, False)  # no wait
    with pytest.raises(NoSuchLedgerError):
        storage.wait_for_lac(2, previous_lac=-1, timeout_s=0.1)


# -- durability -----------------------------------------------------------------------------


def test_index_and_states_persist_across_restart(config):
    s = open_storage(config)
    for ledger in range(1, 4):
        add(s, ledger, 0, 100)
    s.close()
    s = open_storage(config)
    assert s.ledger_ids() == [1, 2, 3]
    for ledger in range(1, 4):
        assert_has(s, ledger, range(100))
        assert s.ledger_state(ledger) == (98, 99, False)
    s.close()


def test_acknowledged_entries_survive_a_crash_before_any_checkpoint(config):
    s = open_storage(config)
    add(s, 1, 0, 300)  # rolls over several 1 MiB journal files
    add(s, 2, 0, 10)
    s.delete_ledger(2)
    simulate_crash(s)
    s = open_storage(config)
    assert s._journal.replayed > 0
    assert_has(s, 1, range(300))
    assert s.ledger_ids() == [1]
    add(s, 1, 300, 10)  # and the bookie goes on
    s.close()
    s = open_storage(config)
    assert_has(s, 1, range(310))
    s.close()


def test_restart_after_a_checkpoint_replays_only_what_came_after(config):
    s = open_storage(config)
    add(s, 1, 0, 50)
    s.checkpoint()
    add(s, 1, 50, 5)
    simulate_crash(s)
    s = open_storage(config)
    assert s._journal.replayed == 1
    assert_has(s, 1, range(55))
    s.close()


def test_checkpoint_removes_old_journal_files(config):
    s = open_storage(config)
    journal_dir = Path(config.data_dir) / "journal"
    for i in range(60):
        add(s, 1, i * 100, 100)  # ~6.3 MB of journal: several 1 MiB files
    before = s._journal.file_seqs()
    assert len(before) >= 6
    s.checkpoint()
    after = s._journal.file_seqs()
    assert len(after) <= 2  # the current file and the prepared next one
    assert min(after) > min(before)
    assert len(list(journal_dir.glob("*.jnl"))) <= 4  # plus at most two recycled spares
    assert_has(s, 1, range(6000))
    s.close()


def test_periodic_checkpoint_runs_in_the_background(tmp_path):
    config = make_config(tmp_path, checkpoint_interval_s=0.05)
    s = open_storage(config)
    for i in range(30):
        add(s, 1, i * 100, 100)
    deadline = time.monotonic() + 5
    while len(s._journal.file_seqs()) > 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(s._journal.file_seqs()) <= 2
    s.close()


# -- group commit ---------------------------------------------------------------------------


def test_concurrent_adders_share_journal_syncs(config):
    metrics = CountingMetrics()
    s = open_storage(config, metrics)
    syncs_before = metrics.syncs
    threads_n, adds_each = 16, 20

    def adder(t: int) -> None:
        for i in range(adds_each):
            add(s, t + 1, i * 4, 4)

    threads = [threading.Thread(target=adder, args=(t,)) for t in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    adds = threads_n * adds_each
    assert metrics.added_entries == adds * 4
    assert metrics.syncs - syncs_before < adds
    for t in range(threads_n):
        assert_has(s, t + 1, range(adds_each * 4))
    s.close()


# -- delete and garbage collection ------------------------------------------------------------


def assert_refuses_adds_and_fences(s: BookieStorage, ledger_id: int) -> None:
    with pytest.raises(NoSuchLedgerError, match="deleted"):
        add(s, ledger_id, 7, 1)
    with pytest.raises(NoSuchLedgerError, match="deleted"):
        add(s, ledger_id, 7, 1, recovery=True)
    with pytest.raises(NoSuchLedgerError, match="deleted"):
        s.fence(ledger_id, KEY)
    with pytest.raises(NoSuchLedgerError):
        s.read_entries(ledger_id, [0])


def test_deleted_ledger_refuses_every_add_and_fence_across_restarts_and_checkpoints(config):
    s = open_storage(config)
    add(s, 1, 0, 5)
    add(s, 2, 0, 5)
    s.fence(3, KEY)  # fenced, then deleted: the old writer's next add must be refused
    s.delete_ledger(1)
    s.delete_ledger(3)
    s.delete_ledger(4)  # never seen here: remembered all the same
    with pytest.raises(NoSuchLedgerError):
        s.delete_ledger(1)
    for lid in (1, 3, 4):
        assert_refuses_adds_and_fences(s, lid)
    simulate_crash(s)  # from the journal
    s = open_storage(config)
    assert s.ledger_ids() == [2]
    for lid in (1, 3, 4):
        assert_refuses_adds_and_fences(s, lid)
    s.close()  # from an incremental checkpoint batch
    s = open_storage(config)
    for lid in (1, 3, 4):
        assert_refuses_adds_and_fences(s, lid)
    s._index._min_rewrite = 0  # the next checkpoint writes a full snapshot
    add(s, 2, 5, 1)
    s.checkpoint()
    s.close()
    s = open_storage(config)  # from a full snapshot
    for lid in (1, 3, 4):
        assert_refuses_adds_and_fences(s, lid)
    assert s.deleted(3) and not s.deleted(2) and not s.deleted(5)
    add(s, 5, 0, 1)  # a ledger never seen (and never deleted) is created by its first add
    assert s.ledger_state(5) == (-1, 0, False)
    s.close()


def test_deleted_ledgers_beyond_the_limit_fall_under_a_persisted_floor(tmp_path):
    config = make_config(tmp_path, deleted_ledgers_max=3)
    s = open_storage(config)
    for lid in range(10, 16):
        add(s, lid, 0, 1)
        s.delete_ledger(lid)
    for lid in (10, 12, 15):
        assert_refuses_adds_and_fences(s, lid)
    simulate_crash(s)
    s = open_storage(config)
    for lid in (10, 12, 15):
        assert_refuses_adds_and_fences(s, lid)
    s.close()
    s = open_storage(config)
    assert s.deleted(11) and s.deleted(15) and not s.deleted(16)
    add(s, 16, 0, 1)
    s.close()


def test_delete_then_gc_shrinks_the_data_directory(config):
    s = open_storage(config)
    for ledger in range(1, 5):
        add(s, ledger, 0, 300)  # ~1.2 MB over several entry logs
    s.checkpoint()
    full = data_dir_size(config)
    logs_before = len(list(Path(config.data_dir).rglob("*.log")))
    for ledger in range(1, 5):
        s.delete_ledger(ledger)
    s.gc()
    assert data_dir_size(config) < full - 1_000_000
    assert len(list(Path(config.data_dir).rglob("*.log"))) < logs_before
    assert s.ledger_ids() == []
    s.close()
    s = open_storage(config)
    assert s.ledger_ids() == []
    s.close()


def test_gc_compacts_sparse_logs_and_keeps_live_entries(config):
    s = open_storage(config)
    for i in range(30):  # two ledgers interleaved through every entry log, 3:1
        add(s, 1, i * 30, 30)
        add(s, 2, i * 10, 10)
    s.delete_ledger(1)
    s.checkpoint()
    full = data_dir_size(config)
    logs_before = sorted(Path(config.data_dir).rglob("*.log"))
    s.gc()
    logs_after = sorted(Path(config.data_dir).rglob("*.log"))
    assert not set(logs_before[:-1]) & set(logs_after)  # every old log went
    assert data_dir_size(config) < full - 600_000
    assert_has(s, 2, range(300))
    simulate_crash(s)  # compaction's index changes were checkpointed before logs went
    s = open_storage(config)
    assert_has(s, 2, range(300))
    s.close()


def test_gc_in_the_background_reclaims_deleted_ledgers(tmp_path):
    config = make_config(tmp_path, gc_interval_s=0.05)
    s = open_storage(config)
    add(s, 1, 0, 600)
    full = data_dir_size(config)
    s.delete_ledger(1)
    deadline = time.monotonic() + 5
    while data_dir_size(config) > full - 400_000 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert data_dir_size(config) <= full - 400_000
    s.close()


# -- readonly mode ------------------------------------------------------------------------------


def test_readonly_when_over_max_disk_bytes_and_writable_again_after_gc(config):
    s = open_storage(config)
    add(s, 9, 0, 3000)  # warm up: the journal reaches its steady number of files
    s.delete_ledger(9)
    s.gc()
    baseline, _ = s.disk_usage()
    s.config.max_disk_bytes = baseline + 2_000_000
    modes: list[bool] = []
    s.on_mode_change = modes.append
    written = 0
    while not s.check_disk():
        add(s, 1, written, 100)
        written += 100
        assert written < 5000, "never went readonly"
    assert s.read_only and modes == [True]
    with pytest.raises(ReadOnlyError):
        add(s, 1, written, 1)
    with pytest.raises(ReadOnlyError):
        add(s, 1, written, 1, recovery=True)
    assert s.fence(1, KEY)[1] == written - 1  # fences and reads go on
    assert_has(s, 1, range(100))
    s.delete_ledger(1)  # so do deletes, which is how space comes back
    assert s.check_disk()  # nothing reclaimed yet
    s.gc()
    assert s.check_disk() is False and not s.read_only
    assert modes == [True, False]
    add(s, 2, 0, 1)
    s.close()


def test_disk_check_runs_in_the_background(tmp_path):
    config = make_config(tmp_path, disk_check_interval_s=0.05, max_disk_bytes=1)
    s = BookieStorage(config)
    modes: list[bool] = []
    s.on_mode_change = modes.append
    s.start()
    assert s.read_only and modes == [True]
    config.max_disk_bytes = None
    deadline = time.monotonic() + 5
    while s.read_only and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not s.read_only and modes == [True, False]
    s.close()


def test_forced_readonly(storage):
    modes: list[bool] = []
    storage.on_mode_change = modes.append
    storage.set_forced_read_only(True)
    with pytest.raises(ReadOnlyError):
        add(storage, 1, 0, 1)
    storage.set_forced_read_only(False)
    add(storage, 1, 0, 1)
    assert modes == [True, False]


def test_disk_usage_counts_the_data_directory(storage, config):
    # the journal may preallocate its next file meanwhile: compare when nothing changed
    # around the measurement (a 1 MiB file appeared between the two in one CI run)
    for _ in range(20):
        before = data_dir_size(config)
        used, free = storage.disk_usage()
        if data_dir_size(config) == before:
            break
    assert used == before and free > 0


# -- lifecycle --------------------------------------------------------------------------------


def test_close_is_idempotent_and_refuses_later_writes(config):
    s = open_storage(config)
    add(s, 1, 0, 1)
    s.close()
    s.close()
    with pytest.raises(BKError):
        add(s, 1, 1, 1)
    with pytest.raises(BKError):
        s.fence(1, KEY)


# -- which entries a bookie holds (the Auditor's periodic check) -----------------------------


def test_held_ranges_name_every_gap_including_one_left_by_a_lost_entry_log(config):
    from bookie_server.entrylog import LOG_SUFFIX
    from bookie_server.location import log_of as log_of_location

    s = open_storage(config)
    add(s, 1, 0, 30, size=30 * 1024)  # ~8 entries per 256 KiB entry log
    add(s, 1, 40, 5)
    assert s.held_ranges(1, 0, 100) == [(0, 29), (40, 44)]
    assert s.held_ranges(1, 10, 42) == [(10, 29), (40, 42)]
    assert s.held_ranges(1, 31, 38) == []
    with pytest.raises(NoSuchLedgerError):
        s.held_ranges(2, 0, 5)
    with pytest.raises(InvalidRequestError):
        s.held_ranges(1, 5, 4)
    log_of = {e: log_of_location(s._state(1).index.get(e)) for e in range(30)}
    s.close()
    lost = sorted(set(log_of.values()))[1]  # a log in the middle of the ledger's entries
    (Path(config.data_dir) / "ledgers" / "logs" / f"{lost:016x}{LOG_SUFFIX}").unlink()
    gone = [e for e in range(30) if log_of[e] == lost]
    assert gone and gone[0] > 0 and gone[-1] < 29
    s = open_storage(config)
    try:
        assert s.held_ranges(1, 0, 44) == [(0, gone[0] - 1), (gone[-1] + 1, 29), (40, 44)]
    finally:
        s.close()


def test_held_ranges_cost_follows_stored_entries_not_the_width_of_the_range(storage):
    add(storage, 1, 0, 3)
    storage.add_entries(1, KEY, [(10**12, 2, b"far", b"")], recovery=True)  # sparse, far out
    started = time.monotonic()
    assert storage.held_ranges(1, 0, 2**63 - 1) == [(0, 2), (10**12, 10**12)]
    assert storage.held_ranges(1, 1, 10**12 - 1) == [(1, 2)]
    assert time.monotonic() - started < 1.0


def _crc_entries(ledger_id: int, first: int, count: int, size: int = 1000):
    """Entries as a crc32c writer frames them (digest field: ledger length + CRC32C)."""
    from bk_spark.io.entry import EntryCodec
    from bk_spark.protocol.digest import DigestManager

    codec = EntryCodec(ledger_id, DigestManager("crc32c"))
    out = []
    for e in range(first, first + count):
        wire = codec.encode(e, e - 1, (e + 1) * size, payload(ledger_id, e, size))
        out.append((e, e - 1, wire.payload, wire.digest))
    return out


def _log_path(config: BookieConfig, storage: BookieStorage, ledger_id: int, entry_id: int):
    from bookie_server.entrylog import LOG_SUFFIX
    from bookie_server.location import log_of, offset_of

    loc = storage._state(ledger_id).index.get(entry_id)
    path = Path(config.data_dir) / "ledgers" / "logs" / f"{log_of(loc):016x}{LOG_SUFFIX}"
    return path, offset_of(loc)


def test_a_zero_filled_entry_log_holds_nothing_when_read_back(config):
    """BookKeeper's AuditorPeriodicCheckTest.testEntryLogCorruption, on the bookie's side:
    the index still lists the entries, but reading them back finds zeros, not records."""
    s = open_storage(config)
    try:
        s.add_entries(1, KEY, _crc_entries(1, 0, 20))
        s.add_entries(1, KEY, entries(1, 20, 5))  # a digest the bookie cannot check
        assert s.held_ranges(1, 0, 24, verify=100) == [(0, 24)]
        path, _ = _log_path(config, s, 1, 0)
        with open(path, "r+b") as f:
            size = f.seek(0, 2)
            f.seek(0)
            f.write(bytes(size))
        assert s.held_ranges(1, 0, 24) == [(0, 24)]  # the index alone counts them
        assert s.held_ranges(1, 0, 24, verify=100) == []
        # the budget bounds the read-back: first and last always, so one entry per end
        assert s.held_ranges(1, 0, 24, verify=2) == [(1, 23)]
    finally:
        s.close()


def test_a_rotted_payload_of_a_crc32c_entry_is_not_held(config):
    from bookie_server.location import length_of

    s = open_storage(config)
    try:
        s.add_entries(1, KEY, _crc_entries(1, 0, 10))
        path, offset = _log_path(config, s, 1, 4)
        with open(path, "r+b") as f:  # one bit of entry 4's payload (the record's end)
            length = length_of(s._state(1).index.get(4))
            f.seek(offset + length - 1)
            byte = f.read(1)
            f.seek(offset + length - 1)
            f.write(bytes([byte[0] ^ 1]))
        assert s.held_ranges(1, 0, 9, verify=10) == [(0, 3), (5, 9)]
        assert s.held_ranges(1, 0, 9, verify=0) == [(0, 9)]
    finally:
        s.close()


# -- packed reads (read_records) ------------------------------------------------------------


def test_a_packed_read_answers_the_same_entries_as_entry_by_entry(storage):
    add(storage, 1, 0, 60, size=300)
    for ids in (range(60), list(range(0, 60, 3)), [59, 7, 3, 3, 70]):
        recs, missing = storage.read_records(1, ids)
        found, missing2 = storage.read_entries(1, ids)
        assert missing == missing2
        assert recs.entry_ids.tolist() == [e.entry_id for e in found]
        d = recs.data
        assert [d[a:b] for a, b in zip(recs.payload_starts.tolist(),
                                       recs.payload_ends.tolist(), strict=True)] == \
            [e.payload for e in found]
        assert [d[a:b] for a, b in zip(recs.digest_starts.tolist(),
                                       recs.payload_starts.tolist(), strict=True)] == \
            [e.digest for e in found]
        assert recs.lacs.tolist() == [e.lac for e in found]


def test_a_striped_read_returns_only_the_ids_asked_in_order(storage):
    # a bookie of an E=3 Qw=2 ensemble holds entries e % 3 in {0, 2}; a striped reader asks
    # it for e % 3 == 0 only: the records in between are read (one span) but not returned
    for lo in range(0, 300, 30):
        storage.add_entries(5, KEY, [x for x in entries(5, lo, 30, size=120)
                                     if x[0] % 3 != 1])
    asked = list(range(0, 300, 3))
    recs, missing = storage.read_records(5, asked)
    assert missing == []
    assert recs.entry_ids.tolist() == asked
    assert [recs.data[a:b] for a, b in zip(recs.payload_starts.tolist(),
                                           recs.payload_ends.tolist(), strict=True)] == \
        [payload(5, e, 120) for e in asked]
    assert len(recs.data) == sum(int(n) for n in recs.payload_ends - recs.starts)


def test_a_read_of_entries_stored_out_of_id_order_answers_in_id_order(storage):
    add(storage, 2, 10, 5, size=200)  # stored first: higher offsets for lower ids below
    add(storage, 2, 0, 10, size=200)
    add(storage, 2, 3, 1, size=200)  # an overwrite: entry 3 now lies after all the others
    recs, missing = storage.read_records(2, range(15))
    assert missing == [] and recs.entry_ids.tolist() == list(range(15))
    assert_has(storage, 2, range(15), size=200)


def test_a_packed_read_stops_at_max_bytes_like_an_entry_by_entry_read(storage):
    add(storage, 1, 0, 20)
    recs, missing = storage.read_records(1, range(20), max_bytes=3500)
    found, _ = storage.read_entries(1, range(20), max_bytes=3500)
    assert recs.entry_ids.tolist() == [e.entry_id for e in found] == [0, 1, 2]
    recs, _ = storage.read_records(1, range(20), max_bytes=10)  # the first one at least
    assert recs.entry_ids.tolist() == [0]


def test_a_corrupt_record_header_in_an_entry_log_is_an_error_not_data(storage, config):
    add(storage, 1, 0, 3)
    storage.checkpoint()
    (log,) = sorted((Path(config.data_dir) / "ledgers" / "logs").glob("*.log"))
    raw = bytearray(log.read_bytes())
    at = raw.find(payload(1, 1)) - 3 - 30  # entry 1's record header (digest "dg1")
    raw[at + 12] ^= 0xFF  # its entry id
    log.write_bytes(bytes(raw))
    with pytest.raises(BKError, match="corrupt"):
        storage.read_records(1, [1])


def test_a_read_of_small_entries_between_large_ones_of_another_ledger_reads_little_more(
        storage, monkeypatch):
    """An entry log interleaves every ledger: a read of one ledger's 100-byte entries that
    lie between another's 60 KB entries reads about its own records, not the whole stretch
    of the log (a span over every gap up to 64 KiB read 458x the answer)."""
    import bookie_server.storage as st

    for e in range(0, 200, 10):  # interleaved: 10 small entries of 7, one large of 8
        storage.add_entries(7, KEY, entries(7, e, 10, size=100))
        storage.add_entries(8, KEY, entries(8, e // 10, 1, size=60_000))
    read: list[int] = []
    real = st.read_exact

    def counted(fd: int, n: int, offset: int) -> bytes:
        read.append(n)
        return real(fd, n, offset)

    monkeypatch.setattr(st, "read_exact", counted)
    recs, missing = storage.read_records(7, range(200))
    assert missing == [] and recs.entry_ids.tolist() == list(range(200))
    assert [recs.data[a:b] for a, b in zip(recs.payload_starts.tolist(),
                                           recs.payload_ends.tolist(), strict=True)] == \
        [payload(7, e, 100) for e in range(200)]
    assert sum(read) <= 2 * len(recs.data) + 4096 * len(read), (sum(read), len(recs.data))


def test_held_ranges_count_entries_gc_moves_to_a_new_log_while_the_question_runs(config):
    """GC compacts a ledger's entries into entry logs created after a HeldEntries question
    began: those entries are held all the same (which logs exist is read with the index, under
    the state lock; read before it, the new logs were unknown and the bookie reported a
    fragment it holds as missing, and the Auditor marked a healthy ledger)."""
    s = open_storage(config)
    for i in range(30):  # two ledgers interleaved through every entry log, 3:1
        add(s, 1, i * 30, 30)
        add(s, 2, i * 10, 10)
    s.delete_ledger(1)
    s.checkpoint()
    real_log_ids = s._logs.log_ids
    gc_runs: list[threading.Thread] = []

    def log_ids_then_gc():
        ids = real_log_ids()
        if not gc_runs:  # GC runs right after the question listed the logs
            gc_runs.append(threading.Thread(target=s.gc))
            gc_runs[0].start()
            gc_runs[0].join(0.5)  # (it waits for the state lock, if the question holds it)
        return ids

    s._logs.log_ids = log_ids_then_gc
    try:
        assert s.held_ranges(2, 0, 299) == [(0, 299)]
        gc_runs[0].join(10)
        assert s.held_ranges(2, 0, 299, verify=8) == [(0, 299)]
        assert_has(s, 2, range(300))
    finally:
        s._logs.log_ids = real_log_ids
        s.close()
