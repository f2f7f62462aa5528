"""BookieStorage: the bookie's storage engine, the one facade the gRPC service calls.

Theory of operation
-------------------
A write request goes through three steps, each in one place:

1. **Accept** (caller thread, :meth:`BookieStorage.add_entries` and friends; a packed add,
   :meth:`BookieStorage.add_records`, checks its records at once and journals them as they
   came; :meth:`~BookieStorage.add_entries_then` and :meth:`~BookieStorage.add_records_then`
   are their callback forms, the add stream's, and all four share one accept step,
   ``_add_batches``): validate
   everything (ids, sizes and keys with :mod:`bookie_server.validation`, once per
   operation; master key, fenced flag, readonly mode) and raise a typed
   :class:`~bk_spark.errors.BKError` before anything is written. Under the submit lock the
   request's journal records are queued, so the journal order *is* the order in which
   requests were accepted: an add accepted before a fence is synced no later than the fence
   and applied before it.
2. **Journal** (:mod:`bookie_server.journal`): the writer thread writes every queued record
   with one write and one fdatasync (group commit).
3. **Apply** (the same journal writer thread, right after the group's fdatasync,
   :meth:`BookieStorage._on_synced`): under the state lock, the entries of the whole group
   go to the current entry log with one write, then the index, LAC and ledger states are
   updated in journal order, and only then are the waiting callers released. So an
   acknowledged add is durable (journal) and readable (index), and a fence returns a LAC
   and last entry that include every add accepted before it.

Thread hand-offs of one request (issue 28): gRPC's poll thread -> an RPC pool thread
(accept) -> the journal writer (write, fdatasync, apply, release) -> the pool thread
(answer) -> the poll thread: two from arrival to the journal write, two from the fdatasync
to the answer. Applying on the writer thread costs the next group the time of one
entry-log copy (page cache) and a numpy index update; the records queued meanwhile join
that next group.

A **checkpoint** (every ``checkpoint_interval_s``, on :meth:`~BookieStorage.close`, before
GC deletes logs) takes the applied journal position and the changed ledger states under
the state lock, fsyncs the entry logs, appends the changes to the index file
(:mod:`bookie_server.index`), and only then releases the journal files wholly before that
position. A restart loads the index and replays the journal from that position; every
journal change is idempotent in order (add overwrites, fence sets, LAC takes the max,
delete removes), so replaying records a checkpoint already covered is harmless.

**GC** (:mod:`bookie_server.gc`, every ``gc_interval_s`` or :meth:`~BookieStorage.gc`):
rotates the current entry log when most of it is dead, compacts logs whose live fraction
is below ``gc_compaction_threshold`` (copies their live entries to the current log),
checkpoints so the persisted index no longer points into them, then deletes every
non-current log with no live entry. It sees the storage through the state lock, the entry
logs, the live bytes and :class:`~bookie_server.gc.GcStorage` (applied states, moved
entries, the checkpoint).

**Deleted ledgers stay deleted** (:mod:`bookie_server.tombstones`): a delete leaves a
tombstone, journaled with the delete and kept in the index, so that no add (plain or
recovery) and no fence can bring the ledger back, before or after a restart: an old writer
of a fenced-then-deleted ledger is refused (NoSuchLedger), never acknowledged. Memory is
bounded by ``deleted_ledgers_max`` ids plus a floor.

**Master key** (BookKeeper's ledger key): the first add or fence of a ledger stores the
request's master key with the ledger (journaled with that record); every later add, fence,
read and delete must present the same key (:func:`_key_matches`, the one comparison) or is
refused with ``UnauthorizedError``. The gRPC service may pass ``None`` for a peer whose
certificate already authorizes it (admin, bookie identities).

**Readonly mode** (:mod:`bookie_server.disk`): a disk check every
``disk_check_interval_s`` turns the bookie readonly when the file system is fuller than
``disk_usage_threshold`` or the data directory holds more than ``max_disk_bytes``, and
writable again below ``threshold - 0.05`` / 90% of ``max_disk_bytes``. Readonly refuses
adds; fences, reads and deletes go on.

Locks, in the only order they nest: submit lock -> journal queue lock; state lock ->
entry-log lock; GC's lock -> checkpoint lock -> state lock or submit lock (a checkpoint
takes them one after the other, never both); GC's lock -> state lock. The disk check's
mode lock nests with none of them. Data layout: ``data_dir/journal/`` (journal files) and
``data_dir/ledgers/`` (``index-*.idx`` and ``logs/*.log``).
"""

from __future__ import annotations

import hmac
import logging
import random
import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path
from typing import TypeVar

import numpy as np

from bk_spark.errors import (
    BKError,
    BookieStorageError,
    CorruptedEntryError,
    InvalidRequestError,
    LedgerFencedError,
    NoSuchLedgerError,
    ReadOnlyError,
    UnauthorizedError,
)
from bk_spark.io.entry import EntryCodec
from bk_spark.protocol.add_stream import failing_parts, unit_parts
from bk_spark.protocol.audit_rules import verification_sample
from bk_spark.protocol.digest import DigestManager
from bk_spark.protocol.records import (
    HEADER_SIZE,
    MalformedRecordsError,
    RecordList,
    Records,
    parse_records,
)
from bookie_server.config import BookieConfig
from bookie_server.disk import DiskMonitor
from bookie_server.entrylog import EntryLogs, read_exact
from bookie_server.gc import EntryLogGC, LiveBytes
from bookie_server.index import (
    CHECKPOINT_SLICE,
    IndexStore,
    LedgerSnapshot,
    LedgerState,
    dirty_ids,
)
from bookie_server.journal import (
    AddBatch,
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
    encode_records,
    roll_wants_checkpoint,
)
from bookie_server.limbo import (
    ANSWERS_UNKNOWN,
    REFUSES_PLAIN_ADDS,
    MarkKind,
    RepairMarks,
    RepairProgress,
)
from bookie_server.location import (
    high_of,
    length_of,
    location_base,
    log_of,
    offset_of,
    split_highs,
)
from bookie_server.tombstones import DeletedLedgers
from bookie_server.validation import (
    check_entries,
    check_entry_ids,
    check_entry_range,
    check_id,
    check_key,
    check_lac,
    check_records,
    refused_records,
)
from bookie_server.writeback import Yielder

log = logging.getLogger(__name__)

MiB = 1024 * 1024
#: Records of one log at most this far apart are read with one pread (a striped read's)...
READ_SPAN_GAP = 64 * 1024
#: ...when the gap is also at most this or the record before it: what a read takes in
#: besides the records asked stays under their own size plus this per record (an entry log
#: interleaves every ledger: small entries of one between large ones of another).
READ_SPAN_SMALL_GAP = 4 * 1024

#: What one HeldEntries question reads back at most to verify (besides one record).
VERIFY_MAX_BYTES = 8 * MiB
#: A crc32c entry's digest field: the ledger length (8 bytes) and the CRC32C (4 bytes).
CRC32C_DIGEST_FIELD = 12
_CRC32C = DigestManager("crc32c")

ADD = int(RecordType.ADD)
FENCE = int(RecordType.FENCE)
LAC = int(RecordType.LAC)
DELETE = int(RecordType.DELETE)


@dataclass(frozen=True, slots=True)
class StoredEntry:
    """One entry as stored by the bookie (digest kept opaque for the reader to verify)."""

    ledger_id: int
    entry_id: int
    lac: int
    payload: bytes
    digest: bytes


class StorageMetrics:
    """Metrics sink with no-op methods; the server subclasses it with Prometheus counters."""

    def journal_sync(self, seconds: float, records: int, nbytes: int) -> None:
        """One group commit: its write+fdatasync time, journal records and bytes."""

    def added(self, n: int, nbytes: int) -> None:
        """Entries acknowledged (and their payload bytes)."""

    def read(self, n: int, nbytes: int) -> None:
        """Entries returned by a read (and their payload bytes)."""


class _Waiter:
    """A caller blocked until its journal records are synced and applied."""

    __slots__ = ("_lock", "error")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self.error: BaseException | None = None

    def done(self, error: BaseException | None = None) -> None:
        self.error = error
        self._lock.release()

    def wait(self) -> None:
        self._lock.acquire()
        if self.error is not None:
            raise BookieStorageError(f"write failed ({self.error}): restart the bookie"
                                     ) from self.error


class _AddDone:
    """The waiter of an add's last journal record: calls back once it is synced and applied
    (:meth:`BookieStorage.add_entries_then`)."""

    __slots__ = ("fn", "metrics", "n", "nbytes")

    def __init__(self, fn: AddCallback, metrics: StorageMetrics, n: int, nbytes: int) -> None:
        self.fn, self.metrics, self.n, self.nbytes = fn, metrics, n, nbytes

    def done(self, error: BaseException | None = None) -> None:
        try:
            if error is None:
                self.metrics.added(self.n, self.nbytes)
                self.fn(None)
            else:
                self.fn(BookieStorageError(f"write failed ({error}): restart the bookie"))
        except Exception:  # noqa: BLE001 - the group's other waiters must still be released
            log.exception("an add's completion failed")


#: An add's completion (:meth:`BookieStorage.add_entries_then`): None once it is synced and
#: applied, else the error its write failed with.
AddCallback = Callable[[BKError | None], None]

_T = TypeVar("_T")


def _wait_for(start: Callable[[AddCallback], _T]) -> _T:
    """The blocking form of an add's callback form: ``start(done)`` (which raises its
    validation's typed error at once), then wait for ``done`` and raise the write's error."""
    waiter = _Waiter()
    outcome: list[BKError | None] = []

    def done(error: BKError | None) -> None:
        outcome.append(error)
        waiter.done()

    result = start(done)
    waiter.wait()
    if outcome[0] is not None:
        raise outcome[0]
    return result


class _Op:
    """What the journal writer applies for one journal record once it is synced."""

    __slots__ = ("kind", "state", "batch", "lac", "waiter", "ledger_id")

    def __init__(
        self,
        kind: int,
        batch: AddBatch | None = None,
        lac: int = -1,
        waiter: _Waiter | _AddDone | None = None,
        ledger_id: int = -1,
    ) -> None:
        self.kind = kind
        self.ledger_id = ledger_id
        self.state: LedgerState | None = None
        self.batch = batch
        self.lac = lac
        self.waiter = waiter


def _as_lists(*columns: Sequence[int] | np.ndarray) -> list[list[int]]:
    """Columns of an :class:`AddBatch` (lists, or numpy arrays of a packed add) as lists of
    Python ints, for the per-entry paths (overwrites)."""
    return [c.tolist() if isinstance(c, np.ndarray) else list(c) for c in columns]


def _key_matches(state: LedgerState, master_key: bytes | None) -> bool:
    """The one master-key check: the key stored with the ledger on its first add (or fence)
    must equal the request's. ``None`` means the caller was authorized otherwise (the gRPC
    service passes it for a peer whose certificate names an admin or bookie identity)."""
    return master_key is None or hmac.compare_digest(state.master_key, master_key)


def _unauthorized(ledger_id: int) -> UnauthorizedError:
    return UnauthorizedError(
        f"wrong master key for ledger {ledger_id}: open it with the password it was created with"
    )


class BookieStorage:
    """The storage engine of one bookie (see the module docstring). Thread-safe."""

    def __init__(self, config: BookieConfig, metrics: StorageMetrics | None = None) -> None:
        self.config = config
        self._metrics = metrics if metrics is not None else StorageMetrics()
        data_dir = Path(config.data_dir)
        self._data_dir = data_dir
        self._ledgers_dir = data_dir / "ledgers"
        self._record_cap = max(
            64 * 1024, min(config.journal_max_group_bytes, config.journal_file_size // 4)
        )

        self._submit_lock = threading.RLock()  # re-entered by adds in accepting_many()
        # accepting_many(): the journal records of the adds accepted so far, queued at its end
        self._accepted: list[JournalRecord] | None = None
        self._state_lock = threading.Lock()
        self._lac_cond = threading.Condition(self._state_lock)
        self._lac_waiters = 0
        self._checkpoint_lock = threading.Lock()

        # Accepted view (submit lock): what validation and reads see.
        self._ledgers: dict[int, LedgerState] = {}
        # Applied view (state lock): what checkpoints persist and GC accounts for.
        self._applied: dict[int, LedgerState] = {}
        self._dirty: dict[int, LedgerState] = {}
        self._deleted: set[int] = set()
        # Tombstones (accepted view, submit lock): every ledger deleted here, see the
        # module docstring; checkpoints persist them with the deletes.
        self._tombstones = DeletedLedgers(config.deleted_ledgers_max)
        self._live = LiveBytes()
        self._applied_pos = JournalPosition(0, 0)

        self._logs = EntryLogs(self._ledgers_dir / "logs", config.entry_log_size)
        self._index = IndexStore(self._ledgers_dir)
        # Repair marks (bookie_server.limbo): ledgers a bookie that lost its data keeps
        # fenced / in limbo until self-repair copied them back.
        self._marks = RepairMarks(self._ledgers_dir)
        self._gc = EntryLogGC(self, config, self._state_lock, self._logs, self._live)
        self._journal = Journal(
            data_dir / "journal",
            file_size=config.journal_file_size,
            on_synced=self._on_synced,
            on_failed=self._on_journal_failed,
            max_group_wait_s=config.journal_max_group_wait_ms / 1000.0,
            max_group_bytes=config.journal_max_group_bytes,
            preallocate=config.journal_preallocate,
            on_sync=self._metrics.journal_sync,
            on_half=self._on_journal_half,
        )
        # A checkpoint the journal asked for (_on_journal_half); when the last one ended.
        self._checkpoint_wanted = threading.Event()
        self._checkpointed_at = time.monotonic()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._started = False
        self._closed = False
        self._failure: BaseException | None = None
        self._disk = DiskMonitor(config, data_dir)
        # Which held entries a HeldEntries question reads back (used under the state lock).
        self._verify_rng = random.Random()

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Create the directories, load the index, replay the journal from the last
        checkpoint, checkpoint the result, and start the background threads (checkpoint, GC,
        disk check; one whose ``*_interval_s`` is <= 0 is not started)."""
        if self._started or self._closed:
            raise BookieStorageError("storage already started (or closed)")
        self._data_dir.mkdir(parents=True, exist_ok=True)
        self._ledgers_dir.mkdir(parents=True, exist_ok=True)
        self._marks.load()
        applied, position = self._index.load(self._tombstones)
        self._applied = applied
        self._ledgers = dict(applied)
        for state in applied.values():
            per_log: dict[int, int] = {}
            for loc in state.index.values():
                log_id = log_of(loc)
                per_log[log_id] = per_log.get(log_id, 0) + length_of(loc)
            for log_id, nbytes in per_log.items():
                self._live.add(log_id, state.ledger_id, nbytes)
        self._logs.open()
        missing = set(self._live.log_ids()) - set(self._logs.log_ids())
        if missing:
            log.error("index points into missing entry logs %s", sorted(missing))
        began = time.monotonic()
        end = self._journal.replay(position, self._replay_record)
        if self._journal.replayed:
            log.info(
                "replayed %d journal records from %s to %s in %.2fs",
                self._journal.replayed,
                position,
                end,
                time.monotonic() - began,
            )
        self._applied_pos = self._journal.start(min_seq=end.seq)
        self._started = True
        self.checkpoint()
        self.check_disk()
        cfg = self.config
        if cfg.checkpoint_interval_s and cfg.checkpoint_interval_s > 0:
            thread = threading.Thread(target=self._checkpoints, name="storage-checkpoint",
                                      daemon=True)
            thread.start()
            self._threads.append(thread)
        for name, interval, task in (
            ("storage-gc", cfg.gc_interval_s, self.gc),
            ("storage-disk-check", cfg.disk_check_interval_s, self.check_disk),
        ):
            if interval and interval > 0:
                thread = threading.Thread(
                    target=self._every, args=(interval, task), name=name, daemon=True
                )
                thread.start()
                self._threads.append(thread)

    def close(self) -> None:
        """Stop the threads, sync everything accepted, final checkpoint. Idempotent."""
        with self._submit_lock:
            if self._closed:
                return
            self._closed = True
        if not self._started:
            return
        self._stop.set()
        self._checkpoint_wanted.set()
        for thread in self._threads:
            thread.join()
        self._journal.close()  # writes, syncs and applies everything already accepted
        with self._lac_cond:
            self._lac_cond.notify_all()
        try:
            if self._failure is None:
                self.checkpoint()
        finally:
            self._logs.close()
            self._index.close()
            self._marks.close()

    def _checkpoints(self) -> None:
        """The checkpoint thread: every ``checkpoint_interval_s`` from the bookie's phase
        (:attr:`~bookie_server.config.BookieConfig.checkpoint_phase_s`), and whenever a
        journal file half written asks for one (:meth:`_on_journal_half`)."""
        interval = self.config.checkpoint_interval_s
        due = time.monotonic() + self.config.checkpoint_phase_s
        while True:
            self._checkpoint_wanted.wait(max(0.0, due - time.monotonic()))
            # Cleared before the stop is looked at: close() sets the stop, then the event,
            # so a stop arriving after this line still wakes the next wait at once.
            self._checkpoint_wanted.clear()
            if self._stop.is_set() or self._failure is not None:
                return
            if time.monotonic() >= due:
                due += interval * max(1, int((time.monotonic() - due) // interval) + 1)
            try:
                self.checkpoint()
            except Exception:  # noqa: BLE001 - a background task must not die silently
                log.exception("checkpoint failed")

    def _on_journal_half(self) -> None:
        """The journal's current file is half written (writer thread, after the group
        that got there was applied): ask the checkpoint thread for a checkpoint now when
        :func:`~bookie_server.journal.roll_wants_checkpoint` says so, so the files before
        it come back as spares before the allocator needs one, rather than new ones being
        zero-filled."""
        if roll_wants_checkpoint(self._journal.byte_rate, self._journal.spares,
                                 time.monotonic() - self._checkpointed_at):
            self._checkpoint_wanted.set()

    def _every(self, interval: float, task: Callable[[], object]) -> None:
        while not self._stop.wait(interval):
            if self._failure is not None:
                return
            try:
                task()
            except Exception:  # noqa: BLE001 - a background task must not die silently
                log.exception("background task %s failed", getattr(task, "__name__", task))

    def _check_writable(self) -> None:
        if self._failure is not None:
            raise BookieStorageError(f"bookie storage failed ({self._failure}): restart the bookie")
        if self._closed or not self._started:
            raise BookieStorageError("bookie storage is not running")

    def _fail(self, error: BaseException) -> None:
        if self._failure is None:
            self._failure = error
            log.error("bookie storage failed, refusing writes: %s", error)

    # -- accept ------------------------------------------------------------------------------

    def add_entries(
        self,
        ledger_id: int,
        master_key: bytes,
        entries: Sequence[tuple[int, int, bytes, bytes]],
        *,
        recovery: bool = False,
        lac: int = -1,
    ) -> None:
        """Store entries ``(entry_id, lac, payload, digest)`` of one ledger durably.

        Everything is validated first (nothing is added when a typed error is raised); the
        entries are journaled and the call returns once the group's fdatasync is done and
        they are readable. Re-adding an entry overwrites it. ``recovery`` adds are accepted
        on a fenced ledger. ``lac >= 0`` also advances the ledger's LAC (explicit LAC; with no
        entries that is the whole request). The blocking form of :meth:`add_entries_then`;
        :meth:`add_records` is the same for the entries of a packed add.
        """
        _wait_for(lambda done: self.add_entries_then(ledger_id, master_key, entries, done,
                                                     recovery=recovery, lac=lac))

    def add_entries_then(
        self,
        ledger_id: int,
        master_key: bytes,
        entries: Sequence[tuple[int, int, bytes, bytes]],
        done: AddCallback,
        *,
        recovery: bool = False,
        lac: int = -1,
    ) -> None:
        """:meth:`add_entries` without waiting (the add stream's form: no thread parks per
        request): validation raises its typed error here, before anything is written; once
        the group's fdatasync is done and the entries are applied (readable), ``done(None)``
        runs on the journal writer thread (keep it short), or ``done(error)`` if the write
        failed. Nothing is acknowledged before the fdatasync."""
        check_id("ledger id", ledger_id)
        master_key = check_key(master_key)
        check_lac(lac)
        entries, nbytes = check_entries(entries, self.config.max_entry_size)
        if not entries and lac < 0:
            done(None)
            return
        self._check_not_read_only()
        try:
            batches = encode_adds(ledger_id, master_key, entries, self._record_cap)
        except (TypeError, ValueError, struct.error) as exc:  # ids >= 2**63, str payloads
            raise InvalidRequestError(f"malformed entry: {exc}") from exc
        self._add_batches(ledger_id, master_key, batches, recovery, lac,
                          _AddDone(done, self._metrics, len(entries), nbytes))

    def add_records(
        self,
        ledger_id: int,
        master_key: bytes,
        records: bytes,
        record_lengths: bytes,
        *,
        recovery: bool = False,
        lac: int = -1,
    ) -> int:
        """:meth:`add_entries` for a packed add: the entries as records back to back
        (``AddRequest.records``, :mod:`bk_spark.protocol.records`) and each record's length
        (``record_lengths``, u32 little endian each). They are checked all at once
        (:func:`~bookie_server.validation.check_records`: the rules of ``check_entries``,
        as strict) and journaled and appended to the entry log as they came, with no Python
        object per entry. Same guarantees as :meth:`add_entries`; returns how many entries
        were stored. The blocking form of :meth:`add_records_then`."""
        return _wait_for(lambda done: self.add_records_then(
            ledger_id, master_key, records, record_lengths, done, recovery=recovery, lac=lac))

    def add_records_then(
        self,
        ledger_id: int,
        master_key: bytes,
        records: bytes,
        record_lengths: bytes,
        done: AddCallback,
        *,
        recovery: bool = False,
        lac: int = -1,
    ) -> int:
        """:meth:`add_records` without waiting, as :meth:`add_entries_then` is for
        :meth:`add_entries` (the add stream's form): validation raises here, ``done(err)``
        runs on the journal writer thread after the fdatasync and apply. Returns how many
        entries the request carries."""
        check_id("ledger id", ledger_id)
        master_key = check_key(master_key)
        check_lac(lac)
        recs, nbytes = check_records(ledger_id, records, record_lengths,
                                     self.config.max_entry_size)
        n = len(recs)
        if not n and lac < 0:
            done(None)
            return 0
        self._check_not_read_only()
        batches = encode_records(ledger_id, master_key, recs, self._record_cap)
        self._add_batches(ledger_id, master_key, batches, recovery, lac,
                          _AddDone(done, self._metrics, n, nbytes))
        return n

    def _check_not_read_only(self) -> None:
        if self._disk.read_only:
            raise ReadOnlyError(
                f"bookie {self.config.bookie_id} is readonly (disk full): write to other bookies"
            )

    def _add_batches(self, ledger_id: int, master_key: bytes, batches: list[AddBatch],
                     recovery: bool, lac: int, waiter: _AddDone) -> None:
        """The accept step of every add (Entry messages or packed, blocking or not), after
        validation: the master key, fenced and repair checks under the submit lock, the
        ADD records (and the explicit LAC's) queued in that order; ``waiter`` is called
        back once the last of them is synced and applied. Raises its typed error before
        anything is queued."""
        records = self._add_records_of(ledger_id, master_key, batches, lac)
        records[-1].token.waiter = waiter
        with self._submit_lock:
            self._check_writable()
            state, created = self._accepting_state(ledger_id, master_key, recovery)
            for record in records:
                record.token.state = state
            if self._accepted is not None:  # accepting_many(): queued with the others
                self._accepted += records
            else:
                self._journal.submit(records)
            if created:
                self._ledgers[ledger_id] = state

    @staticmethod
    def _add_records_of(ledger_id: int, master_key: bytes, batches: list[AddBatch], lac: int
                        ) -> list[JournalRecord]:
        """The journal records of one ledger's add: its ADD batches, then its explicit LAC's
        record (``lac >= 0``)."""
        records = [JournalRecord(ADD, batch.body, _Op(ADD, batch=batch)) for batch in batches]
        if lac >= 0:
            body = encode_lac(ledger_id, lac, master_key)
            records.append(JournalRecord(LAC, body, _Op(LAC, lac=lac)))
        return records

    def _keyed_state(self, ledger_id: int, master_key: bytes) -> tuple[LedgerState, bool]:
        """Under the submit lock: the ledger's state for a request made with ``master_key``
        (an add's or a fence's): a ledger this bookie never saw gets a new state with that
        key, unless it was deleted; a known one must have that key. Returns the state and
        whether it is new (the caller keeps it once its journal records are queued)."""
        state = self._ledgers.get(ledger_id)
        if state is None:
            self._check_not_deleted(ledger_id)
            return LedgerState(ledger_id, master_key), True
        if not _key_matches(state, master_key):
            raise _unauthorized(ledger_id)
        return state, False

    def _accepting_state(self, ledger_id: int, master_key: bytes, recovery: bool
                         ) -> tuple[LedgerState, bool]:
        """Under the submit lock: the checks every add of a ledger passes before anything of
        it is queued (the one home of them: a unary add, a stream request, each part of a
        unit alike): not deleted, the master key, not fenced unless ``recovery``, not in a
        repair that refuses plain adds. Returns the ledger's state and whether it is new
        (the caller keeps it once its records are queued). Raises the typed error."""
        state, created = self._keyed_state(ledger_id, master_key)
        if state.fenced and not recovery:
            raise LedgerFencedError(
                f"ledger {ledger_id} is fenced: it is being recovered, stop writing"
            )
        if not recovery and self._marks.refuses_plain_adds(ledger_id):
            raise LedgerFencedError(
                f"ledger {ledger_id} is fenced on bookie {self.config.bookie_id}: it is "
                f"being repaired after a data loss, stop writing")
        return state, created

    def add_records_many_then(
        self,
        ledger_ids: Sequence[int],
        master_keys: Sequence[bytes],
        counts: Sequence[int],
        lacs: Sequence[int],
        records: bytes,
        record_lengths: bytes,
        done: AddCallback,
    ) -> list[BKError | None]:
        """A unit (``AddStreamRequest.adds``): plain adds and explicit LACs of many ledgers,
        part i being ``counts[i]`` records of ledger ``ledger_ids[i]`` with its master key and
        explicit LAC ``lacs[i]`` (-1: none), the records of every part back to back. Each
        part is held to exactly what :meth:`add_records_then` holds one ledger's add to, in
        one pass: the records parsed and checked at once (numpy over the whole unit, the
        rules of :func:`~bookie_server.validation.check_records`; a part holding a record
        that breaks one gets that check's own error), then, under the submit lock,
        :meth:`_accepting_state` per part (deleted, master key, fenced, repair). Returns one
        outcome per part: the error that refused it, or None for a part accepted; the
        accepted parts' journal records are queued with one submission (inside
        :meth:`accepting_many`), and ``done(err)`` runs once, after the fdatasync and apply
        of all of them (at once when none was accepted). A part refused never stops
        another. Raises :class:`InvalidRequestError` (every part refused) for a unit whose
        layout is broken: columns of different lengths, records that do not parse or do
        not add up to the counts."""
        k = len(ledger_ids)
        if not (len(master_keys) == len(counts) == len(lacs) == k):
            raise InvalidRequestError(
                f"malformed adds of {k} ledgers: {len(master_keys)} master keys, "
                f"{len(counts)} counts, {len(lacs)} lacs")
        try:
            recs = parse_records(records, record_lengths)
        except MalformedRecordsError as exc:
            raise InvalidRequestError(f"malformed records: {exc}") from None
        n = len(recs)
        parts = unit_parts(counts, n)
        if parts is None:
            raise InvalidRequestError(f"malformed adds: {n} records, counts of "
                                      f"{sum(counts)} for {k} ledgers")
        errors: list[BKError | None] = [None] * k
        offsets = [0, *accumulate(counts)]
        max_size = self.config.max_entry_size
        starts: list[int] = []
        ends: list[int] = []
        eids: list[int] = []
        rlacs: list[int] = []
        psizes: list[int] = []
        if n:
            sizes = recs.payload_lengths
            bad = refused_records(recs, np.asarray(ledger_ids, dtype=np.int64)[parts],
                                  max_size)
            for i in failing_parts(parts, bad):  # the part's own check says what is wrong
                a, b = offsets[i], offsets[i + 1]
                lo, hi = int(recs.starts[a]), int(recs.payload_ends[b - 1])
                try:
                    check_records(ledger_ids[i], records[lo:hi], record_lengths[4 * a:4 * b],
                                  max_size)
                    errors[i] = InvalidRequestError(f"malformed records of ledger "
                                                    f"{ledger_ids[i]}")
                except BKError as exc:
                    errors[i] = exc
            starts, ends = recs.starts.tolist(), recs.payload_ends.tolist()
            eids, rlacs, psizes = recs.entry_ids.tolist(), recs.lacs.tolist(), sizes.tolist()
        try:
            self._check_not_read_only()
        except ReadOnlyError as exc:
            done(None)
            return [exc] * k
        data = memoryview(records)
        queued: list[JournalRecord] = []
        total_n = total_bytes = 0
        with self.accepting_many():
            try:
                for i in range(k):
                    if errors[i] is not None:
                        continue
                    lid, lac = ledger_ids[i], lacs[i]
                    a, b = offsets[i], offsets[i + 1]
                    try:
                        check_id("ledger id", lid)
                        key = check_key(master_keys[i])
                        check_lac(lac)
                        if a == b and lac < 0:
                            continue
                        batches: list[AddBatch] = []
                        if a < b:
                            lo = starts[a]
                            part = RecordList(
                                data[lo:ends[b - 1]], [x - lo for x in starts[a:b]],
                                [lid] * (b - a), eids[a:b], rlacs[a:b],
                                [x - lo + HEADER_SIZE for x in starts[a:b]], [],
                                [x - lo for x in ends[a:b]])
                            batches = encode_records(lid, key, part, self._record_cap)
                        part_records = self._add_records_of(lid, key, batches, lac)
                        self._check_writable()
                        state, created = self._accepting_state(lid, key, False)
                    except BKError as exc:
                        errors[i] = exc
                        continue
                    except Exception as exc:  # noqa: BLE001 - only this part fails: the
                        # parts queued before it are written and answered as stored
                        log.exception("unit part of ledger %d refused", lid)
                        errors[i] = InvalidRequestError(
                            f"ledger {lid}: the bookie could not accept the adds: {exc!r}")
                        continue
                    for record in part_records:
                        record.token.state = state
                    if created:
                        self._ledgers[lid] = state
                    queued += part_records
                    total_n += b - a
                    total_bytes += sum(psizes[a:b])
            finally:  # what was accepted is queued, whatever happened to the rest
                if queued:
                    queued[-1].token.waiter = _AddDone(done, self._metrics, total_n,
                                                       total_bytes)
                    assert self._accepted is not None
                    self._accepted += queued
        if not queued:
            done(None)
        return errors

    @contextmanager
    def accepting_many(self) -> Iterator[None]:
        """Accept the adds made in this block (on this thread) as one: the submit lock held
        throughout, so nothing else is accepted between them (a fence after all of them
        still includes every one), and their journal records queued together at the end:
        one journal submission and one wake-up of its writer for a stream message's many
        requests, not one each (issue 28: a thousand ledgers' one-entry adds). Each add
        still validates, raises and calls back on its own; if the journal refuses the
        submission, every add accepted in the block is called back with its error."""
        with self._submit_lock:
            if self._accepted is not None:  # nested: the outer block submits
                yield
                return
            self._accepted = []
            try:
                yield
            finally:
                records, self._accepted = self._accepted, None
                if records:
                    try:
                        self._journal.submit(records)
                    except BaseException as exc:  # noqa: BLE001 - none may wait forever
                        self._release(records, exc)

    def fence(self, ledger_id: int, master_key: bytes) -> tuple[int, int]:
        """Fence a ledger: plain adds are refused from now on. Durable before it returns.

        A ledger the bookie never saw is created fenced, with this master key, so a late add
        from an old writer is refused. Returns ``(lac, last entry id or -1)``, which include
        every add accepted before the fence.
        """
        check_id("ledger id", ledger_id)
        master_key = check_key(master_key)
        waiter = _Waiter()
        with self._submit_lock:
            self._check_writable()
            state, created = self._keyed_state(ledger_id, master_key)
            if not created and state.fence_synced:
                return state.lac, state.last_entry
            op = _Op(FENCE, waiter=waiter)
            op.state = state
            self._journal.submit([JournalRecord(FENCE, encode_fence(ledger_id, master_key), op)])
            state.fenced = True
            if created:
                self._ledgers[ledger_id] = state
        waiter.wait()
        return state.lac, state.last_entry

    # -- repair marks (bookie_server.limbo, bookie_server.self_repair) ----------------------

    def in_limbo(self, ledger_id: int) -> bool:
        """Whether reads, LAC reads and fences of ``ledger_id`` answer UNKNOWN for what this
        bookie does not hold (the ledger is in limbo, :mod:`bookie_server.limbo`)."""
        return self._marks.kind(ledger_id) in ANSWERS_UNKNOWN

    def repair_mark(self, ledger_id: int) -> MarkKind | None:
        """The ledger's repair mark, None when it has none (repaired, or never marked)."""
        return self._marks.kind(ledger_id)

    def begin_repair(self, marks: dict[int, MarkKind]) -> None:
        """Persist the marks of a repair that begins (durable on return: call before the
        bookie serves)."""
        self._marks.begin(marks)

    def repair_marks(self) -> dict[int, MarkKind]:
        """The marks not cleared yet."""
        return self._marks.pending()

    def repair_in_progress(self) -> bool:
        """A repair began and has not completed (a restart resumes it)."""
        return self._marks.in_progress()

    def repair_progress(self) -> RepairProgress:
        return self._marks.progress()

    def clear_repair_mark(self, ledger_id: int, master_key: bytes | None,
                          entries: int = 0, nbytes: int = 0) -> None:
        """The ledger is repaired: fence it durably with its ``master_key`` (a journaled
        fence, so an old writer stays refused once the mark is gone; ``None``: the ledger was
        deleted, nothing to fence), then clear its mark durably."""
        if master_key is not None and self._marks.kind(ledger_id) in REFUSES_PLAIN_ADDS:
            try:
                self.fence(ledger_id, master_key)
            except NoSuchLedgerError:  # deleted here meanwhile: its tombstone refuses adds
                pass
        self._marks.clear(ledger_id, entries, nbytes)

    def retire_repair_mark(self, ledger_id: int, refuse_plain_adds: bool) -> None:
        """No fragment of the ledger names this bookie any more (AutoRecovery replaced it):
        its mark is no longer left to repair; with ``refuse_plain_adds`` its plain adds
        stay refused for good (a forgotten fence it has no key to write again). Durable."""
        self._marks.retire(ledger_id, refuse_plain_adds)

    def finish_repair(self) -> None:
        """Every mark is cleared: record that the repair completed."""
        self._marks.finish()

    def delete_ledger(self, ledger_id: int, master_key: bytes | None = None) -> None:
        """Delete a ledger: durable before it returns; GC reclaims its data later.

        ``master_key`` must match the ledger's (``None``: authorized by the caller). The
        ledger stays deleted (a tombstone): adds and fences of it are refused from now on,
        after a restart too. A ledger this bookie never saw is remembered as deleted all
        the same (an old writer's first add may still be on its way); deleting a ledger a
        second time raises NoSuchLedgerError.
        """
        check_id("ledger id", ledger_id)
        key = None if master_key is None else check_key(master_key)
        waiter = _Waiter()
        with self._submit_lock:
            self._check_writable()
            state = self._ledgers.get(ledger_id)
            if state is None:
                self._check_not_deleted(ledger_id)
            elif not _key_matches(state, key):
                raise _unauthorized(ledger_id)
            op = _Op(DELETE, waiter=waiter, ledger_id=ledger_id)
            op.state = state
            self._tombstones.add(ledger_id)
            self._ledgers.pop(ledger_id, None)
            self._journal.submit([JournalRecord(DELETE, encode_delete(ledger_id), op)])
        waiter.wait()

    def _check_not_deleted(self, ledger_id: int) -> None:
        """Raise NoSuchLedgerError for a ledger deleted here (caller holds the submit lock)."""
        if ledger_id in self._tombstones:
            raise NoSuchLedgerError(
                f"ledger {ledger_id} was deleted on this bookie: it takes no more adds or "
                f"fences (its writer must stop)"
            )

    def deleted(self, ledger_id: int) -> bool:
        """Whether this bookie deleted ``ledger_id`` (it refuses every add and fence)."""
        with self._submit_lock:
            return ledger_id in self._tombstones and ledger_id not in self._ledgers

    # -- apply -------------------------------------------------------------------------------

    def _on_synced(self, records: list[JournalRecord], end: JournalPosition) -> None:
        """Apply a synced group and release its waiters (journal writer thread, after the
        group's fdatasync: no hand-off to another thread between the sync and the ack)."""
        error = self._failure
        if error is None:
            try:
                self._apply_group(records, end)
            except BaseException as exc:  # noqa: BLE001 - fail the storage, not the writer
                log.exception("applying journaled changes failed")
                self._fail(exc)
                error = exc
        self._release(records, error)

    def _on_journal_failed(self, records: list[JournalRecord], error: BaseException) -> None:
        self._fail(error)
        self._release(records, error)

    @staticmethod
    def _release(records: list[JournalRecord], error: BaseException | None) -> None:
        for record in records:
            op = record.token
            if op is not None and op.waiter is not None:
                op.waiter.done(error)

    def _apply_group(self, records: list[JournalRecord], end: JournalPosition) -> None:
        """Apply one synced group in journal order: one entry-log write for all its adds."""
        ops: list[_Op] = [record.token for record in records]
        with self._state_lock:
            adds = [op for op in ops if op.kind == ADD]
            places = self._logs.append([op.batch.entries for op in adds]) if adds else []
            place = iter(places)
            wake = False
            for op in ops:
                kind = op.kind
                if kind == ADD:
                    log_id, offset = next(place)
                    wake |= self._apply_add(op.state, op.batch, log_id, offset)
                elif kind == FENCE:
                    self._apply_fence(op.state)
                elif kind == LAC:
                    wake |= self._apply_lac(op.state, op.lac)
                elif kind == DELETE:
                    if op.state is not None:
                        self._apply_delete(op.state)
                        wake = True
                    else:  # a tombstone only: the next checkpoint keeps it
                        self._deleted.add(op.ledger_id)
            self._applied_pos = end
            if wake and self._lac_waiters:
                self._lac_cond.notify_all()

    def _apply_add(self, state: LedgerState, batch: AddBatch, log_id: int, offset: int) -> bool:
        ledger_id = state.ledger_id
        self._applied[ledger_id] = state
        base = location_base(log_id, offset)
        entry_ids = batch.entry_ids
        index = state.index
        live = self._live
        n = len(entry_ids)
        if batch.min_entry > state.last_entry:  # all new: the common case, no per-entry work
            before = len(index)
            index.put_batch(entry_ids, high_of(base), batch.spans)
            live.add(log_id, ledger_id, batch.nbytes)
            if len(index) - before != n:  # an entry twice in one batch
                ids, spans = _as_lists(entry_ids, batch.spans)
                dead = sum(
                    length_of(base + span)
                    for eid, span in zip(ids, spans, strict=True)
                    if index[eid] != base + span
                )
                live.sub(log_id, ledger_id, dead)
        else:  # overwrites (recovery writes entries back): the old copies die
            ids, spans = _as_lists(entry_ids, batch.spans)
            get = index.get
            for entry_id, span in zip(ids, spans, strict=True):
                old = get(entry_id)
                if old is not None:
                    live.sub(log_of(old), ledger_id, length_of(old))
                index[entry_id] = base + span
            live.add(log_id, ledger_id, batch.nbytes)
        if batch.max_entry > state.last_entry:
            state.last_entry = batch.max_entry
        if batch.max_entry - batch.min_entry < 4 * n + 64:
            state.mark_dirty(batch.min_entry, batch.max_entry)  # a writer's batch: dense
        else:  # ids far apart (a hand-made request): no range over the gaps
            for entry_id in _as_lists(entry_ids, ())[0]:
                state.mark_dirty(entry_id, entry_id)
        self._dirty[ledger_id] = state
        if batch.max_lac > state.lac:
            state.lac = batch.max_lac
            return True
        return False

    def _apply_fence(self, state: LedgerState) -> None:
        self._applied[state.ledger_id] = state
        state.fenced = state.fence_synced = True
        self._dirty[state.ledger_id] = state

    def _apply_lac(self, state: LedgerState, lac: int) -> bool:
        self._applied[state.ledger_id] = state
        self._dirty[state.ledger_id] = state
        if lac > state.lac:
            state.lac = lac
            return True
        return False

    def _apply_delete(self, state: LedgerState) -> None:
        ledger_id = state.ledger_id
        if self._applied.get(ledger_id) is state:
            del self._applied[ledger_id]
        if self._dirty.get(ledger_id) is state:
            del self._dirty[ledger_id]
        state.deleted = True
        self._live.drop_ledger(ledger_id)
        self._deleted.add(ledger_id)

    def _replay_state(self, ledger_id: int, master_key: bytes) -> LedgerState:
        state = self._applied.get(ledger_id)
        if state is None:
            state = self._applied[ledger_id] = self._ledgers[ledger_id] = LedgerState(
                ledger_id, master_key
            )
        return state

    def _replay_record(self, rtype: int, body: memoryview, position: JournalPosition) -> None:
        """Re-apply one journal record at start-up (single-threaded)."""
        if rtype == ADD:
            batch = decode_add(body)
            state = self._replay_state(batch.ledger_id, batch.master_key)
            ((log_id, offset),) = self._logs.append([batch.entries])
            self._apply_add(state, batch, log_id, offset)
        elif rtype == FENCE:
            ledger_id, key = decode_fence(body)
            self._apply_fence(self._replay_state(ledger_id, key))
        elif rtype == LAC:
            ledger_id, lac, key = decode_lac(body)
            self._apply_lac(self._replay_state(ledger_id, key), lac)
        elif rtype == DELETE:
            ledger_id = decode_delete(body)
            state = self._applied.get(ledger_id)
            if state is not None:
                self._apply_delete(state)
            else:
                self._deleted.add(ledger_id)  # a tombstone only: the next checkpoint keeps it
            self._ledgers.pop(ledger_id, None)
            self._tombstones.add(ledger_id)
        self._applied_pos = position

    # -- read --------------------------------------------------------------------------------

    def _state(self, ledger_id: int) -> LedgerState:
        state = self._ledgers.get(ledger_id)
        if state is None:
            raise NoSuchLedgerError(f"ledger {ledger_id} is not on this bookie")
        return state

    def read_entries(
        self,
        ledger_id: int,
        entry_ids: Iterable[int],
        *,
        max_entries: int = 10_000,
        max_bytes: int = 16 * MiB,
        master_key: bytes | None = None,
    ) -> tuple[list[StoredEntry], list[int]]:
        """Entries of one ledger: ``(found ascending, missing)``, one object per entry
        (:meth:`read_records` answers the same read as packed records)."""
        recs, missing = self.read_records(ledger_id, entry_ids, max_entries=max_entries,
                                          max_bytes=max_bytes, master_key=master_key)
        data = recs.data
        entries = [
            StoredEntry(ledger_id, eid, lac, data[ps:pe], data[ds:ps])
            for eid, lac, ds, ps, pe in zip(
                recs.entry_ids.tolist(), recs.lacs.tolist(), recs.digest_starts.tolist(),
                recs.payload_starts.tolist(), recs.payload_ends.tolist(), strict=True)
        ]
        return entries, missing

    def read_records(
        self,
        ledger_id: int,
        entry_ids: Iterable[int],
        *,
        max_entries: int = 10_000,
        max_bytes: int = 16 * MiB,
        master_key: bytes | None = None,
    ) -> tuple[Records, list[int]]:
        """Entries of one ledger as stored records (:mod:`bk_spark.protocol.records`), back
        to back in ascending entry id, and the ids not here: ``(records, missing)``.

        Looks at no more than ``max_entries`` ids and stops before ``max_bytes`` of records
        (ids past the stop are neither found nor missing), but returns at least one entry when
        the first id present is. Raises NoSuchLedgerError for an unknown ledger and
        UnauthorizedError when ``master_key`` is not the ledger's (``None``: not checked).
        The lookups are numpy operations on the index; records close to each other in an
        entry log are read with one pread (:meth:`_read_located`); every record's header is
        checked against the index (its length, ledger and entry id).
        """
        check_id("ledger id", ledger_id)
        state = self._state(ledger_id)
        if not _key_matches(state, None if master_key is None else check_key(master_key)):
            raise _unauthorized(ledger_id)
        budget = max(1, max_entries)
        if isinstance(entry_ids, range) and entry_ids.step > 0:
            check_entry_ids(entry_ids)
            window = entry_ids[:budget]
            ids = np.arange(window.start, window.stop, window.step, dtype=np.int64)
        else:
            unique = sorted(set(entry_ids))
            check_entry_ids(unique)
            ids = np.asarray(unique[:budget], dtype=np.int64)
        with self._state_lock:
            highs, lens = state.index.get_many(ids)
            lens64 = lens.astype(np.int64)
            present = lens64 > 0
            before = np.cumsum(lens64) - lens64  # bytes of the records found before each
            over = present & (before > 0) & (before + lens64 > max_bytes)
            stop = int(np.argmax(over)) if bool(over.any()) else len(ids)
            present = present[:stop]
            missing = ids[:stop][~present].tolist()
            found = ids[:stop][present]
            log_ids, offsets = split_highs(highs[:stop][present])
            lens64 = lens64[:stop][present]
            pinned = self._logs.acquire(np.unique(log_ids).tolist())
        try:
            data = self._read_located(log_ids, offsets, lens64, pinned)
        finally:
            self._logs.release(pinned.values())
        try:
            recs = parse_records(data, lens64)
        except MalformedRecordsError as exc:
            raise CorruptedEntryError(f"an entry log of ledger {ledger_id} is corrupt: "
                                      f"{exc}") from None
        wrong = (recs.ledger_ids != ledger_id) | (recs.entry_ids != found)
        if bool(wrong.any()):
            i = int(np.argmax(wrong))
            raise CorruptedEntryError(
                f"entry log {int(log_ids[i]):x} is corrupt at {int(offsets[i])}: expected "
                f"entry {ledger_id}/{int(found[i])}, found {int(recs.ledger_ids[i])}/"
                f"{int(recs.entry_ids[i])}")
        self._metrics.read(len(recs), int(recs.payload_lengths.sum()))
        return recs, missing

    def _read_located(self, log_ids: np.ndarray, offsets: np.ndarray, lens: np.ndarray,
                      pinned: dict) -> bytes:
        """The records at ``(log_ids, offsets, lens)``, back to back in the order given.

        Records are read in log and offset order, one pread per *span*: records of one log
        whose gaps are at most :data:`READ_SPAN_GAP` and at most the record before or
        :data:`READ_SPAN_SMALL_GAP` (the entries of a striped read skip the ones other
        bookies serve; the bytes read stay within about twice the records'). When that order
        is the order given (one writer's entries: always, but after compaction or a
        recovery's rewrite), a span of adjacent
        records is the answer as read, and the records of a span with gaps are cut out with
        one numpy mask (record, gap, record, ...); otherwise they are cut out one by one
        and joined."""
        n = len(lens)
        if n == 0:
            return b""
        order = np.lexsort((offsets, log_ids))
        lo, off, ln = log_ids[order], offsets[order], lens[order]
        ends = off + ln
        gaps = off[1:] - ends[:-1]
        merge_up_to = np.minimum(READ_SPAN_GAP, np.maximum(READ_SPAN_SMALL_GAP, ln[:-1]))
        cut = np.flatnonzero((lo[1:] != lo[:-1]) | (gaps > merge_up_to) | (gaps < 0)) + 1
        first = np.concatenate(([0], cut))
        last = np.concatenate((cut, [n])) - 1
        in_order = bool(np.all(order[1:] > order[:-1]))
        if in_order:  # the usual case: the records of each span are cut out in numpy
            parts: list[bytes] = []
            for a, b in zip(first.tolist(), last.tolist(), strict=True):
                start = int(off[a])
                data = read_exact(pinned[int(lo[a])].fd, int(ends[b]) - start, start)
                if bool(np.all(off[a + 1:b + 1] == ends[a:b])):
                    parts.append(data)  # adjacent records: the span is the answer
                    continue
                runs = np.empty(2 * (b + 1 - a), dtype=np.int64)  # record, gap, record, ...
                runs[0::2] = ln[a:b + 1]
                runs[1:-1:2] = off[a + 1:b + 1] - ends[a:b]
                runs[-1] = 0
                keep = np.repeat(np.tile(np.array([True, False]), b + 1 - a), runs)
                parts.append(np.frombuffer(data, np.uint8)[keep].tobytes())
            return parts[0] if len(parts) == 1 else b"".join(parts)
        spans: list[memoryview] = []
        span_of = np.empty(n, dtype=np.int64)
        for k, (a, b) in enumerate(zip(first.tolist(), last.tolist(), strict=True)):
            start = int(off[a])
            spans.append(memoryview(read_exact(pinned[int(lo[a])].fd, int(ends[b]) - start,
                                               start)))
            span_of[order[a:b + 1]] = k
        rel = np.empty(n, dtype=np.int64)
        rel[order] = off - off[first[np.searchsorted(first, np.arange(n), "right") - 1]]
        return b"".join([spans[k][r:r + m] for k, r, m in zip(
            span_of.tolist(), rel.tolist(), lens.tolist(), strict=True)])

    def held_ranges(self, ledger_id: int, first: int, last: int, *, verify: int = 0
                    ) -> list[tuple[int, int]]:
        """Which entries of ``first..last`` this bookie holds, as ascending disjoint
        ``(first, last)`` ranges (the Auditor's periodic check asks it per fragment).

        Answered from the index; an entry whose entry log is gone from the disk (a lost
        file: the index still points into it, see :meth:`start`) is not held. With
        ``verify`` > 0, up to that many of the held entries
        (:func:`~bk_spark.protocol.audit_rules.verification_sample`: the first, the last,
        the rest at random), and at most :data:`VERIFY_MAX_BYTES` of records, are read back
        and checked (:meth:`_corrupt_entries`); an entry that fails is not held either. So
        the cost of one question is bounded whatever the fragment's size. Raises
        NoSuchLedgerError for a ledger this bookie knows nothing of.
        """
        check_id("ledger id", ledger_id)
        check_entry_range(first, last)
        state = self._state(ledger_id)
        held: list[int] = []
        locations: list[int] = []
        pinned: dict = {}
        with self._state_lock:
            # which logs exist, read with the index it is checked against: GC compacts
            # under this lock, into logs created after any earlier listing
            present = set(self._logs.log_ids())
            get = state.index.get
            for entry_id in state.index.ids_between(first, last):
                loc = get(entry_id)
                if loc is None or log_of(loc) not in present:
                    continue
                held.append(entry_id)
                locations.append(loc)
            picks: list[tuple[int, int]] = []
            if verify > 0 and held:
                spent = 0
                for i in verification_sample(len(held), verify, self._verify_rng):
                    spent += length_of(locations[i])
                    if picks and spent > VERIFY_MAX_BYTES:
                        break
                    picks.append((held[i], locations[i]))
                try:  # pinned under the state lock, as a read does: GC cannot delete them
                    pinned = self._logs.acquire({log_of(loc) for _e, loc in picks})
                except BKError:
                    picks = []
        if picks:
            try:
                bad = self._corrupt_entries(ledger_id, picks, pinned)
            finally:
                self._logs.release(pinned.values())
            if bad:
                log.warning("ledger %d: entries %s of this bookie are corrupt on disk (read "
                            "back for the Auditor's check); they do not count as held",
                            ledger_id, sorted(bad))
                held = [e for e in held if e not in bad]
        ranges: list[tuple[int, int]] = []
        start = prev = -2
        for entry_id in held:
            if entry_id != prev + 1:
                if start >= 0:
                    ranges.append((start, prev))
                start = entry_id
            prev = entry_id
        if start >= 0:
            ranges.append((start, prev))
        return ranges

    def master_key(self, ledger_id: int) -> bytes:
        """The master key stored with a ledger this bookie has (on its first add or fence):
        what re-replication adds to a replacement bookie with when it knows no password.
        The caller authorizes (the gRPC service answers bookie and admin roles only; the
        in-process AutoRecovery reads its own bookie's)."""
        check_id("ledger id", ledger_id)
        return bytes(self._state(ledger_id).master_key)

    def _corrupt_entries(self, ledger_id: int, picks: Sequence[tuple[int, int]],
                         pinned: dict) -> set[int]:
        """The entries of ``picks`` (entry id, location) whose stored record does not check
        out: a short read, a header that disagrees with the index (length, ledger, entry:
        a zero-filled log fails here), a digest outside the record, or, for crc32c ledgers
        (the only digest a bookie can check without the ledger's password), a checksum
        that does not match the payload."""
        bad: set[int] = set()
        for entry_id, loc in picks:
            length = length_of(loc)
            try:
                data = read_exact(pinned[log_of(loc)].fd, length, offset_of(loc))
                recs = parse_records(data, np.asarray([length], dtype=np.int64))
            except (BKError, OSError):
                bad.add(entry_id)
                continue
            if int(recs.ledger_ids[0]) != ledger_id or int(recs.entry_ids[0]) != entry_id:
                bad.add(entry_id)
            elif (int(recs.digest_lengths[0]) == CRC32C_DIGEST_FIELD and
                  not bool(EntryCodec(ledger_id, _CRC32C).verify_records(recs)[0])):
                bad.add(entry_id)
        return bad

    def ledger_state(self, ledger_id: int) -> tuple[int, int, bool]:
        """``(lac, last entry id or -1, fenced)`` of a ledger this bookie has."""
        check_id("ledger id", ledger_id)
        state = self._state(ledger_id)
        return state.lac, state.last_entry, state.fenced

    def wait_for_lac(
        self, ledger_id: int, previous_lac: int, timeout_s: float
    ) -> tuple[int, int, bool]:
        """Long poll: return ``ledger_state`` as soon as the LAC exceeds ``previous_lac``, or
        when ``timeout_s`` has passed."""
        check_id("ledger id", ledger_id)
        state = self._state(ledger_id)
        deadline = time.monotonic() + max(0.0, timeout_s)
        with self._lac_cond:
            while state.lac <= previous_lac and not state.deleted and not self._closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._lac_waiters += 1
                try:
                    self._lac_cond.wait(remaining)
                finally:
                    self._lac_waiters -= 1
            if state.deleted:
                raise NoSuchLedgerError(f"ledger {ledger_id} was deleted")
            return state.lac, state.last_entry, state.fenced

    def ledger_ids(self) -> list[int]:
        with self._submit_lock:
            return sorted(self._ledgers)

    # -- checkpoint --------------------------------------------------------------------------

    def checkpoint(self) -> None:
        """Make everything applied so far durable outside the journal, then release the
        journal files it covers. A failure here fails the storage (restart replays)."""
        with self._checkpoint_lock:
            if self._failure is not None or not self._started:
                return
            try:
                self._checkpoint_locked()
                self._checkpointed_at = time.monotonic()
            except BaseException as exc:
                self._fail(exc)
                raise

    def _checkpoint_locked(self) -> None:
        """One checkpoint (the checkpoint lock held). Atomic under the state lock: the
        applied journal position, the deletes and which ledgers and entry ranges changed
        up to it (O(ledgers), no per-entry work). Then, a slice of at most
        :data:`~bookie_server.index.CHECKPOINT_SLICE` entries at a time, each under the
        state lock, the locations of those entries (:meth:`_locations`), and the batch
        encoded and written a slice at a time, with the GIL and the lock let go between
        slices (:class:`~bookie_server.writeback.Yielder`): the journal writer's apply
        never waits for more than one slice (bench/profiles.md, "Checkpoints invisible to
        adds").

        Why a location read after the position is still right: it is the entry's
        location then or later (a later one comes from an overwrite or a compaction
        applied after the position, which marked the entry dirty again for the next
        checkpoint and is replayed from the journal after a crash); every one is read
        before the entry logs' fsync below, so it points at synced data; entries added
        after the position (ids past the ledger's last entry then) are left to the next
        checkpoint. The journal files before the position are released only after the
        batch is durable."""
        full = self._index.wants_rewrite
        pace = Yielder()
        with self._state_lock:
            position = self._applied_pos
            deleted, self._deleted = self._deleted, set()
            states = list(self._applied.values() if full else self._dirty.values())
            taken = [(st, st.fenced, st.lac, st.last_entry, st.take_dirty_ranges(),
                      st.index.extent() if full else None) for st in states]
            self._dirty = {}
        snaps = [LedgerSnapshot(st.ledger_id, st.master_key, fenced, lac, last,
                                pieces=self._locations(st, last, ranges, extent, pace))
                 for st, fenced, lac, last, ranges, extent in taken]
        # Every delete applied up to ``position`` put its tombstone in under the submit
        # lock before it was journaled, so this copy holds all of them (and maybe a few
        # newer ones, which the journal replays anyway).
        with self._submit_lock:
            tombstones = self._tombstones.ids() if full else []
            floor = self._tombstones.floor
        self._logs.sync()
        if full:
            self._index.rewrite(position, snaps, tombstones, floor, between=pace)
        else:
            self._index.append(position, deleted, snaps, floor, between=pace)
        self._journal.release_before(position)

    def _locations(self, state: LedgerState, last: int, ranges: list[list[int]],
                   extent: tuple[int, dict[int, int]] | None, pace: Yielder
                   ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """The locations a checkpoint records for one ledger, as column pieces read a
        slice at a time under the state lock (``pace`` between slices, no lock held):
        the dirty ``ranges`` (an incremental checkpoint), or with ``extent``
        (:meth:`~bookie_server.index.EntryIndex.extent`, taken with the position) every
        entry (a full one); ids past ``last`` (the ledger's last entry at the position)
        are not recorded."""
        index = state.index
        pieces = []
        if extent is None:
            ids = dirty_ids(ranges, last)
            for a in range(0, len(ids), CHECKPOINT_SLICE):
                with self._state_lock:
                    pieces.append(index.lookup(ids[a:a + CHECKPOINT_SLICE]))
                pace()
            return pieces
        dense, sparse = extent
        for a in range(0, dense, CHECKPOINT_SLICE):
            with self._state_lock:
                pieces.append(index.dense_columns(a, a + CHECKPOINT_SLICE, last))
            pace()
        if sparse:
            with self._state_lock:
                pieces.append(index.lookup(np.array(sorted(e for e in sparse if e <= last),
                                                    dtype=np.int64)))
        return pieces

    # -- garbage collection (bookie_server.gc) --------------------------------------------

    def gc(self) -> None:
        """Reclaim the space of deleted and overwritten entries now (:mod:`bookie_server.gc`)."""
        self._gc.run()

    def is_running(self) -> bool:
        """Started, not closed, not failed (GC runs only then)."""
        return self._failure is None and self._started and not self._closed

    def applied_state(self, ledger_id: int) -> LedgerState | None:
        """A ledger's applied state, None when deleted or unknown (caller holds the state
        lock)."""
        return self._applied.get(ledger_id)

    def entry_moved(self, state: LedgerState, entry_id: int) -> None:
        """An entry's location changed (compaction): the next checkpoint persists it
        (caller holds the state lock)."""
        state.mark_dirty(entry_id, entry_id)
        self._dirty[state.ledger_id] = state

    # -- disk usage and readonly mode (bookie_server.disk) ------------------------------------

    @property
    def read_only(self) -> bool:
        """Whether adds are refused now (disk full or forced readonly)."""
        return self._disk.read_only

    @property
    def on_mode_change(self) -> Callable[[bool], None] | None:
        """Called with the new readonly flag on every change of mode."""
        return self._disk.on_mode_change

    @on_mode_change.setter
    def on_mode_change(self, callback: Callable[[bool], None] | None) -> None:
        self._disk.on_mode_change = callback

    def disk_usage(self) -> tuple[int, int]:
        """``(bytes in files under data_dir, bytes free for us on its file system)``."""
        return self._disk.disk_usage()

    def check_disk(self) -> bool:
        """Run the disk check now; returns the resulting readonly flag."""
        return self._disk.check_disk()

    def set_forced_read_only(self, forced: bool) -> None:
        """Force readonly mode on (or lift the force), e.g. for maintenance."""
        self._disk.set_forced_read_only(forced)
