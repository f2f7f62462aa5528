"""A replicated log made of ledgers (ledgers-to-logs.txt, bookkeeper-protocol.txt).

"A log in BookKeeper is built from some number of ledgers, with a fixed order. A ledger
represents a single segment of the log. [...] there can only ever be one leader that adds
entries to a single ledger." The ordered ledger list lives in ZooKeeper and changes only by
compare-and-swap (CAS), through :func:`bk_spark.io.metadata_store.metadata_update_loop`;
its layout (a compact tail in ``<root>/logs/<name>`` plus immutable spilled segments under
``<root>/logs/<name>/segments/<n>``, ~22 bytes per ledger) and the entry framing (a 9-byte
timestamp header; 10 bytes for a null value) are documented in :mod:`bk_spark.protocol.log_format`.

One protocol step, one place:

* :func:`open_log_writer` -> :func:`_take_over`: opening a log as its writer, the seed's
  five steps; no write is served before step 5 succeeds.
* :meth:`LogWriter.roll`: rolling ledgers, the seed's four steps; appends continue into the
  previous ledger until the CAS succeeded.
* :class:`_InOrderAcks`: acknowledgements in append order across ledgers.
* :class:`LogReader`: reading closed ledgers whole and the open last one up to its
  last-add-confirmed without fencing; tailing with long-polls and a metadata watch.
* :func:`truncate_log`, :func:`delete_log`: admin, CAS first, then deleting ledgers.
* :func:`commit_ledgers`: adding ledgers written and closed elsewhere (one per Spark task)
  as the log's new owner, in one CAS with a transaction id (exactly-once sinks).

Usage::

    with BookKeeper(uri) as bk:
        w = open_log_writer(bk, "events", roll_max_entries=10_000)
        pos = w.append(b"hello")                       # Position(ledger_id, entry_id)
        w.close()
        r = open_log_reader(bk, "events", start="earliest")
        for record in r.read_available():
            print(record.position, record.timestamp_ms, record.payload)  # None: null
"""

from __future__ import annotations

import dataclasses
import logging
import math
import random
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError, RolledBackError
from kazoo.protocol.states import WatchedEvent

from bk_spark.core.futures import (
    InFlightWindow,
    SharedConditionFuture,
    complete_in_order,
    complete_results,
    shared_condition,
)
from bk_spark.core.ledger import LedgerHandle
from bk_spark.core.reader import ReadHandle
from bk_spark.errors import (
    BKError,
    InvalidConfigError,
    LedgerClosedError,
    LedgerFencedError,
    LedgerStateError,
    LogExistsError,
    LogNotFoundError,
    LogOwnershipLostError,
    LogTruncatedError,
    MetadataVersionError,
    NoSuchLedgerError,
    UnauthorizedError,
)
from bk_spark.io.metadata_store import DEFAULT_MAX_ATTEMPTS, Versioned, metadata_update_loop
from bk_spark.protocol import log_rules
from bk_spark.protocol.ledger_metadata import LedgerMetadata, LedgerState
from bk_spark.protocol.log_format import (
    LedgerInfo,
    LogLimits,
    LogMetadata,
    LogRecord,
    Position,
    PropertiesUpdate,
    Segment,
    bisect_timestamp,
    decode_entry,
    encode_entry,
    entry_timestamp,
    first_segment_for_timestamp,
    now_ms,
    validate_log_name,
)
from bk_spark.protocol.log_rules import TXN_PROPERTY, LogDecision, committed_txn

if TYPE_CHECKING:
    from bk_spark.core.client import BookKeeper

log = logging.getLogger(__name__)

__all__ = [
    "ClosedLedger", "CommitResult", "LedgerInfo", "LogLimits", "LogMetadata", "LogReader",
    "LogRecord", "LogWriter", "LogWriterConfig", "Position", "commit_ledgers", "committed_txn",
    "LogView", "create_log", "delete_log", "ledger_end", "list_logs", "log_incarnation",
    "log_ledgers", "log_metadata", "open_log_view", "watch_log",
    "open_log_reader", "open_log_writer", "truncate_log", "update_log_properties",
    "WrittenLedger", "unlisted_ledgers", "write_closed_ledger",
]

#: Custom metadata key naming the log a ledger was created for (finds orphans).
LEDGER_LOG_KEY = "bk-spark.log"


# ======================================================================== metadata store


class LogMetadataStore:
    """Log metadata in ZooKeeper (a kazoo recipe): versioned read, CAS write, segments.

    A write that spills or drops segments commits the segment znodes and the main znode's
    CAS in one ZooKeeper transaction, so a segment exists iff a stored main znode lists it.
    """

    def __init__(self, zk: KazooClient, root: str) -> None:
        self._zk = zk
        self.logs_path = f"{root.rstrip('/')}/logs"

    def path(self, name: str) -> str:
        return f"{self.logs_path}/{validate_log_name(name)}"

    def segment_path(self, name: str, number: int) -> str:
        return f"{self.path(name)}/segments/{number:010d}"

    def names(self) -> list[str]:
        try:
            return sorted(self._zk.retry(self._zk.get_children, self.logs_path))
        except NoNodeError:
            return []

    def create(self, name: str, md: LogMetadata) -> Versioned[LogMetadata]:
        path = self.path(name)
        data = md.to_bytes()
        self._zk.retry(self._zk.ensure_path, self.logs_path)

        def commit() -> list[Any]:
            t = self._zk.transaction()
            t.create(path, data)
            t.create(f"{path}/segments", b"")
            return t.commit()

        results = self._zk.retry(commit)
        if any(isinstance(r, NodeExistsError) for r in results):
            raise LogExistsError(f"log {name!r} already exists")
        _raise_first_error(results)
        return Versioned(md.without_pending(), 0)

    def read(self, name: str, watch: Callable[[WatchedEvent], None] | None = None
             ) -> Versioned[LogMetadata]:
        try:
            data, stat = self._zk.retry(self._zk.get, self.path(name), watch=watch)
        except NoNodeError:
            raise _not_found(name) from None
        return Versioned(LogMetadata.from_bytes(data), stat.version)

    def write(self, name: str, md: LogMetadata, version: int) -> Versioned[LogMetadata]:
        """Compare-and-swap the main znode (plus its pending segment creates/deletes)."""
        path = self.path(name)
        data = md.to_bytes()
        segments = [(self.segment_path(name, s.number), s.to_bytes()) for s in md.new_segments]
        dropped = [self.segment_path(name, n) for n in md.dropped_segments]

        def commit() -> list[Any]:
            t = self._zk.transaction()
            for p, d in segments:
                t.create(p, d)
            for p in dropped:
                t.delete(p)
            t.set_data(path, data, version=version)
            return t.commit()

        results = self._zk.retry(commit)
        failed = [r for r in results
                  if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
        if failed:
            if self._zk.retry(self._zk.exists, path) is None:
                raise _not_found(name)
            # A bad version, or a segment another CAS already created/deleted: both mean
            # the main znode changed since it was read.
            raise MetadataVersionError(
                f"log {name!r}: metadata changed since version {version} (another client "
                f"wrote it): re-read it and decide again")
        return Versioned(md.without_pending(), results[-1].version)

    def read_segment(self, name: str, number: int) -> Segment:
        try:
            data, _stat = self._zk.retry(self._zk.get, self.segment_path(name, number))
        except NoNodeError:
            raise LogTruncatedError(
                f"log {name!r}: segment {number} was removed by truncation") from None
        return Segment.from_bytes(data)

    def delete_tree(self, name: str) -> None:
        try:
            self._zk.retry(self._zk.delete, self.path(name), recursive=True)
        except NoNodeError:
            pass


def _raise_first_error(results: list[Any]) -> None:
    for r in results:
        if isinstance(r, Exception) and not isinstance(r, RolledBackError):
            raise BKError(f"ZooKeeper transaction failed: {r!r}")


def _not_found(name: str) -> LogNotFoundError:
    return LogNotFoundError(
        f"log {name!r} does not exist: create it (create_log) or open a writer with "
        f"create_if_missing=True")


def _store(bk: BookKeeper) -> LogMetadataStore:
    return LogMetadataStore(bk.zk, bk.msu.root)


def _read_attempts(bk: BookKeeper, name: str, attempts: int, create_if_missing: bool
                   ) -> Iterator[Versioned[LogMetadata]]:
    """Step 1 of the read-modify-CAS protocols of logs (take over, commit): read the list
    of ledgers, up to ``attempts`` times with a growing random pause between attempts (the
    caller goes on to the next attempt when its CAS lost). A missing log is created first
    when ``create_if_missing`` (a log created concurrently by another client is fine)."""
    store = _store(bk)
    attempt = 0
    while attempt < attempts:
        if attempt:
            time.sleep(random.uniform(0, min(0.5, 0.02 * attempt)))
        attempt += 1
        try:
            current = store.read(name)
        except LogNotFoundError:
            if not create_if_missing:
                raise
            try:
                create_log(bk, name)
            except LogExistsError:
                pass
            continue
        yield current


def _update_log(bk: BookKeeper, name: str, needs_change: Callable[[LogMetadata], bool],
                make_change: Callable[[LogMetadata], LogMetadata],
                current: Versioned[LogMetadata] | None = None,
                max_attempts: int = DEFAULT_MAX_ATTEMPTS,
                allow_deleting: bool = False) -> Versioned[LogMetadata]:
    """Every change of a log's metadata: :func:`metadata_update_loop` over the log store.

    A log being deleted is not found (unless ``allow_deleting``).
    """
    store = _store(bk)

    def needs(m: LogMetadata) -> bool:
        if m.deleting and not allow_deleting:
            raise LogNotFoundError(f"log {name!r} is being deleted")
        return needs_change(m)

    return metadata_update_loop(
        read=lambda: store.read(name),
        write=lambda md, version: store.write(name, md, version),
        needs_change=needs, make_change=make_change, current=current,
        max_attempts=max_attempts)


# ======================================================================== ledger helpers


def _describe_ledger(bk: BookKeeper, ledger_id: int, password: bytes
                     ) -> tuple[int, int | None]:
    """Fence (recovery-open) a ledger; its ``(last entry id, last entry's timestamp)``.

    For a ledger already CLOSED the recovery open changes nothing and only reads.
    """
    rh = bk.open_ledger(ledger_id, password, recovery=True)
    last = rh.last_add_confirmed
    if last < 0:
        return -1, None
    (entry,) = rh.read_entries(last, last)
    return last, entry_timestamp(entry.payload)


def _fence_and_describe(bk: BookKeeper, md: LogMetadata, password: bytes
                        ) -> dict[int, tuple[int, int | None]] | None:
    """Step 2 of opening a log, for every new owner (writer take-over, commit): recovery-open
    :func:`~bk_spark.protocol.log_rules.ledgers_to_fence` and return each one's ``(last
    entry, last timestamp)``; None when one was deleted meanwhile (the list changed: the
    caller starts again at step 1)."""
    try:
        return {info.ledger_id: _describe_ledger(bk, info.ledger_id, password)
                for info in log_rules.ledgers_to_fence(md)}
    except NoSuchLedgerError:
        return None


def _delete_ledger_quietly(bk: BookKeeper, ledger_id: int, password: bytes) -> None:
    """Delete a ledger, logging (not raising) a failure, except a wrong password: that one
    the caller can act on, and a run again with the right one finishes the job."""
    try:
        bk.delete_ledger(ledger_id, password)
    except NoSuchLedgerError:
        pass
    except UnauthorizedError:
        raise
    except BKError as exc:
        log.warning("ledger %d: could not delete it: %s", ledger_id, exc)


def unlisted_ledgers(bk: BookKeeper, name: str, ledger_ids: list[int]) -> list[int] | None:
    """After a CAS adding ``ledger_ids`` to log ``name`` failed: those the log does not list,
    to delete. A CAS whose answer was lost may have succeeded, and deleting a listed ledger
    would lose acknowledged data; so when the list cannot be read now the answer is None:
    keep them all (an orphan is safe). A log that no longer exists lists none."""
    try:
        md = _store(bk).read(name).value
    except LogNotFoundError:
        return list(ledger_ids)
    except BKError:
        return None
    return [lid for lid in ledger_ids if md.find_in_tail(lid) is None]


class LogView:
    """One read of a log's ledger list, with its spilled segments loaded when needed.

    The one home of "which ledger is at absolute index *i*" and "where in the log is ledger
    *L*" (the log reader, truncation, deletion, commits and the Spark source all ask it).
    Segments are immutable once written, so :meth:`refreshed` keeps the loaded ones.
    """

    def __init__(self, store: LogMetadataStore, name: str, md: LogMetadata,
                 segments: dict[int, Segment] | None = None) -> None:
        self.name = name
        self.md = md
        self._store = store
        self._segments: dict[int, Segment] = {} if segments is None else segments

    def refreshed(self, md: LogMetadata) -> LogView:
        """A view of a newer read ``md`` of the same log, sharing the loaded segments."""
        return LogView(self._store, self.name, md, self._segments)

    def at(self, index: int) -> LedgerInfo | None:
        """The live ledger at absolute ``index`` (None: truncated or not added yet)."""
        md = self.md
        if not md.first_index <= index < md.end_index:
            return None
        if index >= md.tail_start:
            return md.tail_ledger(index)
        s = md.segment_for(index)
        if s is None:  # pragma: no cover - the layout keeps segments contiguous
            return None
        return self._segment(s.number).ledgers[index - s.start]

    def index_of_ledger(self, ledger_id: int) -> int | None:
        """The absolute index of live ledger ``ledger_id`` (None: not in the log)."""
        info = self.md.find_in_tail(ledger_id)
        if info is not None:
            return info.index
        for s in self.md.live_segments:
            for r in self._segment(s.number).ledgers:
                if r.ledger_id == ledger_id and r.index >= self.md.first_index:
                    return r.index
        return None

    def index_of(self, position: Position) -> int:
        """The absolute index of ``position``'s ledger; :class:`LogTruncatedError` when it
        is no longer (or never was) in the log."""
        md, name = self.md, self.name
        if position.ledger_id < 0:
            if not 0 <= position.ledger_index <= md.end_index:
                raise InvalidConfigError(f"position {position}: no ledger_id and no valid "
                                         f"ledger_index in log {name!r}")
            if position.ledger_index < md.first_index:
                raise LogTruncatedError(f"log {name!r}: {position} was truncated")
            return position.ledger_index
        info = self.at(position.ledger_index)
        if info is not None and info.ledger_id == position.ledger_id:
            return info.index
        index = self.index_of_ledger(position.ledger_id)
        if index is None:
            raise LogTruncatedError(
                f"log {name!r}: ledger {position.ledger_id} of {position} is not in the log "
                f"(truncated, or never part of it)")
        return index

    def ledgers(self) -> list[LedgerInfo]:
        """Every live ledger, in log order."""
        out: list[LedgerInfo] = []
        for s in self.md.live_segments:
            out.extend(r for r in self._segment(s.number).ledgers
                       if r.index >= self.md.first_index)
        out.extend(self.md.tail)
        return out

    def _segment(self, number: int) -> Segment:
        if number not in self._segments:
            self._segments[number] = self._store.read_segment(self.name, number)
        return self._segments[number]


def open_log_view(bk: BookKeeper, name: str) -> LogView:
    """A :class:`LogView` of the current ledger list of log ``name``."""
    store = _store(bk)
    return LogView(store, name, store.read(name).value)


def watch_log(bk: BookKeeper, name: str, on_change: Callable[[], None]) -> LogMetadata:
    """The current metadata of log ``name``; ``on_change()`` runs once (on a ZooKeeper
    thread) at its next change (a roll, a close recorded, a truncation, a deletion)."""
    return _store(bk).read(name, watch=lambda _event: on_change()).value


def ledger_end(bk: BookKeeper, info: LedgerInfo, password: bytes) -> tuple[int, bool]:
    """``(last readable entry, closed)`` of a log's ledger: the readable end of a ledger.

    From the log metadata when the ledger is described (closed, its end recorded), else
    through a non-fencing open: its last-add-confirmed while the writer still adds, or its
    last entry once closed. Never fences (readers do not disturb the writer)."""
    if info.is_described:
        assert info.last_entry_id is not None
        return info.last_entry_id, True
    rh = bk.open_ledger(info.ledger_id, password, recovery=False)
    return rh.last_add_confirmed, rh.is_closed


# ======================================================================== writer


@dataclass(frozen=True)
class LogWriterConfig:
    """How a log writer creates and rolls its ledgers.

    ``roll_max_entries`` / ``roll_max_bytes`` (payload bytes) / ``roll_max_age_s``: roll
    once the current ledger reaches any of them (None: never; the age counts only for a
    ledger with entries). ``max_open_attempts``: how often opening restarts at step 1 after
    a lost CAS before giving up. ``limits``: when ledger rows spill into segments.
    """

    ensemble_size: int = 3
    write_quorum_size: int = 2
    ack_quorum_size: int = 2
    password: bytes = b""
    digest: str = "crc32c"
    roll_max_entries: int | None = None
    roll_max_bytes: int | None = None
    roll_max_age_s: float | None = None
    max_open_attempts: int = 30
    close_timeout_s: float = 60.0
    limits: LogLimits = field(default_factory=LogLimits)
    #: Called with the new ledger's id right after a roll's CAS succeeded (step 3) and
    #: before the previous ledger is closed (step 4), on the rolling thread: the window in
    #: which two ledgers of one writer are open. For fault injection and tests (the fault
    #: harness pauses there); it must not raise.
    after_roll_cas: Callable[[int], None] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        LedgerMetadata.validate_quorums(self.ensemble_size, self.write_quorum_size,
                                        self.ack_quorum_size)
        if isinstance(self.password, str):
            object.__setattr__(self, "password", self.password.encode())
        for opt in ("roll_max_entries", "roll_max_bytes", "roll_max_age_s"):
            value = getattr(self, opt)
            if value is not None and (isinstance(value, bool) or value <= 0):
                raise InvalidConfigError(f"{opt} must be > 0 or None, got {value!r}")
        if self.max_open_attempts < 1:
            raise InvalidConfigError(
                f"max_open_attempts must be >= 1, got {self.max_open_attempts}")

    @property
    def rolls(self) -> bool:
        return any(v is not None for v in
                   (self.roll_max_entries, self.roll_max_bytes, self.roll_max_age_s))


class _Segment:
    """The appends to one ledger of the log, in append order.

    Their futures are the ledger's tokens (:meth:`LedgerHandle.add_entry_token`), so the
    ledger hands them back a run at a time, in entry order, to :meth:`complete_run` (its
    :meth:`LedgerHandle.complete_runs_with`); nothing is kept per append here but a count.
    """

    __slots__ = ("acks", "ledger_id", "index", "appended", "completed", "sealed", "held")

    def __init__(self, acks: _InOrderAcks, ledger_id: int, index: int) -> None:
        self.acks, self.ledger_id, self.index = acks, ledger_id, index
        self.appended = 0  # adds started (the writer counts them under its lock)
        self.completed = 0  # adds completed
        self.sealed = False  # no more appends: the writer moved on to the next ledger
        self.held: list[tuple[list[Future[Position]], int, BaseException | None]] = []

    def complete_run(self, futures: list[Future[Position]], first: int,
                     error: BaseException | None) -> None:
        self.acks._on_run(self, futures, first, error)


class _InOrderAcks:
    """Completes a writer's futures in append order, across ledgers.

    Within one ledger the ledger handle already decides adds in entry order; across a roll
    the new ledger's first entries may be confirmed before the previous ledger's last ones.
    So a ledger's runs are completed at once only while its segment is the oldest one not
    wholly completed; a later segment's runs wait until every earlier append is completed.
    The first failed add fails it and every later one (with ``translate(error, ledger_id)``):
    nothing after an add whose fate is unknown is reported as written.
    """

    def __init__(self, translate: Callable[[BaseException, int], BKError]) -> None:
        self._segments: deque[_Segment] = deque()
        #: One deliverer at a time (keeps the order); a writer changing segments takes it
        #: before its own lock (lock order: this -> the writer's lock).
        self.lock = threading.RLock()
        self._translate = translate
        self._error: BKError | None = None

    def open_segment(self, ledger_id: int, index: int) -> _Segment:
        """Appends go to ``ledger_id`` (the ledger at ``index`` of the log) from now on."""
        with self.lock:
            if self._segments:
                self._segments[-1].sealed = True
            segment = _Segment(self, ledger_id, index)
            self._segments.append(segment)
            self._advance()
        return segment

    def _on_run(self, segment: _Segment, futures: list[Future[Position]], first: int,
                error: BaseException | None) -> None:
        with self.lock:
            if self._segments[0] is not segment:
                segment.held.append((futures, first, error))  # an earlier ledger is not done
                return
            self._complete(segment, futures, first, error)
            self._advance()

    def _advance(self) -> None:
        """Drop wholly completed sealed segments; complete what the next one held back."""
        segments = self._segments
        while len(segments) > 1 and segments[0].sealed and (
                segments[0].completed >= segments[0].appended):
            segments.popleft()
            head = segments[0]
            held, head.held = head.held, []
            for futures, first, error in held:
                self._complete(head, futures, first, error)

    def _complete(self, segment: _Segment, futures: list[Future[Position]], first: int,
                  error: BaseException | None) -> None:
        segment.completed += len(futures)
        if error is not None and self._error is None:
            self._error = self._translate(error, segment.ledger_id)
        if self._error is None:
            lid, index = segment.ledger_id, segment.index
            complete_results(futures, [Position(lid, e, index)
                                       for e in range(first, first + len(futures))])
        else:
            complete_in_order([(f, None, _copy_error(self._error)) for f in futures])


def _copy_error(err: BKError) -> BKError:
    try:
        return type(err)(*err.args)
    except TypeError:  # pragma: no cover - every BKError takes its message
        return err


class LogWriter:
    """The single writer of a log (use :func:`open_log_writer`).

    ``append_async`` may have thousands of appends in flight; their futures complete in
    append order with the :class:`Position` each entry got. If another writer takes the log
    (fences this writer's ledger, or wins the CAS of a roll), every add not yet acknowledged
    and every later call fails with :class:`LogOwnershipLostError`.
    """

    def __init__(self, bk: BookKeeper, name: str, config: LogWriterConfig,
                 lh: LedgerHandle, md: Versioned[LogMetadata], ts_floor: int) -> None:
        self._bk = bk
        self.name = name
        self.config = config
        self._md = md
        self._lh = lh
        info = md.value.find_in_tail(lh.id)
        assert info is not None
        self._index = info.index
        self._ts_floor = ts_floor
        self._last_ts: int | None = None  # timestamp of the current ledger's last entry
        self._entries = 0
        self._bytes = 0
        self._started = time.monotonic()
        self._error: BKError | None = None
        self._error_lock = threading.Lock()
        self._closed = False
        # Lock order: the acknowledgement deliverer -> _lock -> _error_lock.
        self._lock = threading.RLock()
        self._wakeup = threading.Condition(self._lock)
        self._meta_lock = threading.Lock()  # one metadata-changing operation at a time
        # closed ledgers whose (last entry, last timestamp) is not recorded yet
        self._ends_to_record: dict[int, tuple[int, int | None]] = {}
        self._acks = _InOrderAcks(self._on_add_failed)
        self._segment = self._acks.open_segment(lh.id, self._index)
        lh.complete_runs_with(self._segment.complete_run)
        self._futures_condition = shared_condition()  # see core/futures.py
        c = config
        self._roll_entries = c.roll_max_entries if c.roll_max_entries is not None else math.inf
        self._roll_bytes = c.roll_max_bytes if c.roll_max_bytes is not None else math.inf
        self._roller: threading.Thread | None = None
        if config.rolls:
            self._roller = threading.Thread(target=self._roll_loop, daemon=True,
                                            name=f"log-roller-{name}")
            self._roller.start()

    # ----------------------------------------------------------------- state
    @property
    def ledger_id(self) -> int:
        """The ledger new appends go to."""
        return self._lh.id

    @property
    def metadata(self) -> LogMetadata:
        """The log metadata as this writer last wrote or read it."""
        return self._md.value

    @property
    def properties(self) -> dict[str, Any]:
        return dict(self._md.value.properties)

    @property
    def is_closed(self) -> bool:
        return self._closed

    def _check_usable(self) -> None:
        if self._error is not None:
            raise _copy_error(self._error)
        if self._closed:
            raise LedgerClosedError(f"the writer of log {self.name!r} is closed: open a new one")

    def _set_error(self, err: BKError) -> BKError:
        """Stop the writer with ``err`` (the first error wins); returns the error kept."""
        with self._error_lock:
            if self._error is None:
                self._error = err
            kept = self._error
        with self._lock:
            self._wakeup.notify_all()
        return kept

    def _lost_by_fencing(self, ledger_id: int) -> LogOwnershipLostError:
        return LogOwnershipLostError(
            f"log {self.name!r}: another writer took over the log (ledger {ledger_id} was "
            f"fenced); this writer has stopped. Appends not acknowledged may or may not be "
            f"in the log; open a new writer to continue.")

    def _on_add_failed(self, exc: BaseException, ledger_id: int) -> BKError:
        if isinstance(exc, LedgerFencedError):
            err: BKError = self._lost_by_fencing(ledger_id)
        elif isinstance(exc, BKError):
            err = exc
        else:
            err = BKError(f"log {self.name!r}: add to ledger {ledger_id} failed: {exc!r}")
        return self._set_error(err)

    # ----------------------------------------------------------------- appending
    def append(self, payload: bytes | None, timeout: float | None = None) -> Position:
        """Append one entry; returns its position once it is acknowledged.

        ``payload=None`` appends a null value: readers get ``LogRecord.payload is None``
        (``b""`` is an empty value, a different entry; see log_format.py's framing).
        """
        return self.append_async(payload).result(timeout)

    def append_async(self, payload: bytes | None) -> Future[Position]:
        """Start appending one entry; the future yields its position when acknowledged.

        The entry is stamped ``max(now, last timestamp of the log)`` (log_format.py).
        ``None`` is a null value (:meth:`append`).
        """
        if payload is not None:
            payload = bytes(payload)
        with self._lock:
            if self._error is not None or self._closed:
                self._check_usable()  # raises
            ts = time.time_ns() // 1_000_000  # now_ms(), inlined: the hot path
            if ts < self._ts_floor:
                ts = self._ts_floor
            self._ts_floor = ts
            lh = self._lh
            fut: Future[Position] = SharedConditionFuture(self._futures_condition)
            try:
                lh.add_entry_token(encode_entry(payload, ts), fut)  # completed by _segment
            except LedgerFencedError:
                raise _copy_error(self._set_error(self._lost_by_fencing(lh.id))) from None
            self._segment.appended += 1
            self._last_ts = ts
            self._entries += 1
            if payload is not None:
                self._bytes += len(payload)
            # (rolling by age is the roller's own timer)
            if self._entries >= self._roll_entries or self._bytes >= self._roll_bytes:
                self._wakeup.notify_all()
        return fut

    # ----------------------------------------------------------------- rolling
    def _roll_due(self) -> bool:
        c = self.config
        return (c.roll_max_entries is not None and self._entries >= c.roll_max_entries) or \
            (c.roll_max_bytes is not None and self._bytes >= c.roll_max_bytes) or \
            (c.roll_max_age_s is not None and self._entries > 0
             and time.monotonic() - self._started >= c.roll_max_age_s)

    def _roll_loop(self) -> None:
        """Background rolling by entry count, bytes and age."""
        age = self.config.roll_max_age_s
        while True:
            with self._lock:
                while not (self._closed or self._error or self._roll_due()):
                    wait = None
                    if age is not None:
                        wait = max(0.01, self._started + age - time.monotonic()) \
                            if self._entries else age
                    self._wakeup.wait(wait)
                if self._closed or self._error:
                    return
            try:
                with self._meta_lock:
                    with self._lock:
                        due = self._roll_due() and not self._closed
                    if due:
                        self._roll_locked(None)
            except (LogOwnershipLostError, LogNotFoundError):
                return
            except Exception as exc:  # e.g. no bookies or ZooKeeper away for now
                log.warning("log %r: rolling failed, retrying in 1s: %s", self.name, exc)
                with self._lock:
                    self._wakeup.wait(1.0)

    def roll(self, properties: PropertiesUpdate | None = None) -> int:
        """Roll to a new ledger; returns its id. Appends continue meanwhile.

        ``properties`` (see :meth:`LogMetadata.with_properties`) are changed in the same CAS.
        """
        with self._meta_lock:
            return self._roll_locked(properties)

    def _roll_locked(self, properties: PropertiesUpdate | None) -> int:
        """The seed's "Rolling ledgers":

        1. Create a new ledger
        2. Add the new ledger to the ledger list
        3. Write the new ledger list to the datastore using CAS
        4. Close the previous ledger

        "By deferring the closing of the previous ledger until step 4, we can continue
        writing to the log while we perform metadata update operations to add the new
        ledger." Appends switch to the new ledger right after step 3. Then the previous
        ledger's last entry and timestamp are recorded for seeks (one more CAS).
        """
        self._check_usable()
        # Step 1: create a new ledger.
        new = _create_ledger(self._bk, self.name, self.config)
        # Steps 2 and 3: add it to the ledger list; write the list back with a CAS.
        try:
            md, first_ts = self._cas_add_ledger(new.id, properties)
        except BaseException as exc:
            self._forget_unlisted_ledger(new.id)
            if isinstance(exc, LogOwnershipLostError | LogNotFoundError):
                self._set_error(exc)
            raise
        self._md = md
        if self.config.after_roll_cas is not None:
            self.config.after_roll_cas(new.id)
        with self._acks.lock, self._lock:  # (lock order: see _InOrderAcks.lock)
            prev, prev_last_ts = self._lh, self._last_ts
            info = md.value.find_in_tail(new.id)
            assert info is not None
            self._segment = self._acks.open_segment(new.id, info.index)
            new.complete_runs_with(self._segment.complete_run)
            self._lh, self._index = new, info.index
            self._ts_floor = max(self._ts_floor, first_ts)
            self._last_ts, self._entries, self._bytes = None, 0, 0
            self._started = time.monotonic()
        # Step 4: close the previous ledger (waits for its outstanding adds).
        self._close_ledger(prev)
        self._record_description(prev.id, prev.last_add_confirmed, prev_last_ts)
        return new.id

    def _ownership_check(self, m: LogMetadata, ledger_id: int) -> None:
        if not log_rules.owns(m, ledger_id):
            last = m.last_ledger
            raise LogOwnershipLostError(
                f"log {self.name!r}: another writer took over the log (its last ledger is "
                f"{last.ledger_id if last else None}, not this writer's {ledger_id}); this "
                f"writer has stopped. Appends not acknowledged may or may not be in the log; "
                f"open a new writer to continue.")

    def _cas_add_ledger(self, new_id: int, properties: PropertiesUpdate | None
                        ) -> tuple[Versioned[LogMetadata], int]:
        current_id = self._lh.id
        first_ts = [0]

        def needs_change(m: LogMetadata) -> bool:
            decision = log_rules.roll(m, current_id, new_id)
            if decision is LogDecision.LOST:
                self._ownership_check(m, current_id)
            return decision is LogDecision.CHANGE  # DONE: our own CAS landed

        def make_change(m: LogMetadata) -> LogMetadata:
            m = self._apply_descriptions(m)
            first_ts[0] = max(now_ms(), self._ts_floor, m.max_known_ts_ms)
            m = m.with_ledger_added(new_id, first_ts[0])
            if properties is not None:
                m = m.with_properties(properties)
            return m.spilled(self.config.limits)

        md = _update_log(self._bk, self.name, needs_change=needs_change,
                         make_change=make_change, current=self._md)
        return md, first_ts[0] or max(now_ms(), self._ts_floor)

    def _forget_unlisted_ledger(self, ledger_id: int) -> None:
        """Delete a ledger whose CAS failed, unless the log lists it after all."""
        for lid in unlisted_ledgers(self._bk, self.name, [ledger_id]) or []:
            _delete_ledger_quietly(self._bk, lid, self.config.password)

    def _close_ledger(self, lh: LedgerHandle) -> None:
        try:
            lh.close(self.config.close_timeout_s)
        except (LedgerFencedError, LedgerStateError):
            raise _copy_error(self._set_error(self._lost_by_fencing(lh.id))) from None
        except BKError as exc:
            # The previous ledger must be closed before the next roll makes it third to
            # last (a new owner fences only the last two): stop this writer.
            raise _copy_error(self._set_error(BKError(
                f"log {self.name!r}: could not close ledger {lh.id} ({exc}); this writer "
                f"has stopped, open a new one"))) from None

    def _apply_descriptions(self, m: LogMetadata) -> LogMetadata:
        for lid, (last, ts) in self._ends_to_record.items():
            m = m.with_ledger_described(lid, last, ts)
        return m

    def _record_description(self, ledger_id: int, last_entry: int, last_ts: int | None
                            ) -> None:
        """Record a closed ledger's last entry and timestamp in the log metadata (any client
        may: they are facts of a closed ledger); on failure the next CAS carries them."""
        self._ends_to_record[ledger_id] = (last_entry, last_ts if last_entry >= 0 else None)
        try:
            self._md = _update_log(
                self._bk, self.name,
                needs_change=lambda m: any(m.undescribed(lid) for lid in self._ends_to_record),
                make_change=self._apply_descriptions, current=self._md)
        except BKError as exc:
            log.warning("log %r: could not record the end of ledger %d yet: %s",
                        self.name, ledger_id, exc)
            return
        self._ends_to_record.clear()

    # ----------------------------------------------------------------- properties
    def update_properties(self, update: PropertiesUpdate) -> dict[str, Any]:
        """CAS the log properties, only while this writer still owns the log.

        ``update``: a mapping merged in (None removes a key) or a function from the current
        properties to the new ones. Returns the properties written.
        """
        with self._meta_lock:
            self._check_usable()
            current_id = self._lh.id

            def make_change(m: LogMetadata) -> LogMetadata:
                self._ownership_check(m, current_id)
                return self._apply_descriptions(m).with_properties(update)

            try:
                self._md = _update_log(self._bk, self.name, needs_change=lambda m: True,
                                       make_change=make_change, current=self._md)
            except (LogOwnershipLostError, LogNotFoundError) as exc:
                raise _copy_error(self._set_error(exc)) from None
            self._ends_to_record.clear()
            return dict(self._md.value.properties)

    # ----------------------------------------------------------------- closing
    def close(self) -> None:
        """Wait for outstanding appends, close the current ledger, record its end.

        A writer that lost the log closes quietly (its adds already failed).
        """
        with self._meta_lock:
            with self._lock:
                if self._closed:
                    return
                self._closed = True
                self._wakeup.notify_all()
                lh, last_ts, error = self._lh, self._last_ts, self._error
            if error is None:
                try:
                    lh.close(self.config.close_timeout_s)
                except (LedgerFencedError, LedgerStateError):
                    log.info("log %r: ledger %d was fenced before close", self.name, lh.id)
                else:
                    self._record_description(lh.id, lh.last_add_confirmed, last_ts)
        if self._roller is not None and self._roller is not threading.current_thread():
            self._roller.join(5.0)

    def __enter__(self) -> LogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _create_ledger(bk: BookKeeper, name: str, config: LogWriterConfig) -> LedgerHandle:
    return bk.create_ledger(config.ensemble_size, config.write_quorum_size,
                            config.ack_quorum_size, config.digest, config.password,
                            custom_metadata={LEDGER_LOG_KEY: name})


def _take_over(bk: BookKeeper, name: str, config: LogWriterConfig, create_if_missing: bool
               ) -> tuple[LedgerHandle, Versioned[LogMetadata], int]:
    """Opening a log as its writer, exactly the seed's steps ("Opening a log"):

    1. Read the list of ledgers for the log
    2. Fence the last two ledgers in the list. "Two ledgers are fenced because the writer
       may be writing to the second-to-last ledger while adding the last ledger to the list."
    3. Create a new ledger
    4. Add the new ledger to the ledger list
    5. Write the new ledger back to the datastore using a CAS operation

    "The CAS operation will fail if the list of ledgers has changed between reading it and
    writing back the new list. When the CAS operation fails, the leader must start at step 1
    again" (deleting the ledger it created); "the node must not serve any writes until step
    5 completes successfully": the writer exists only after it.

    The CAS of step 5 also records the last entry and timestamp of the fenced ledgers.
    Returns the new ledger, the metadata written and the timestamp floor for its entries.
    """
    for current in _read_attempts(bk, name, config.max_open_attempts, create_if_missing):
        taken = _take_over_from(bk, name, config, current)
        if taken is not None:
            return taken
    raise LogOwnershipLostError(
        f"log {name!r}: could not take over the log in {config.max_open_attempts} attempts: "
        f"other writers keep taking it. Make sure only one node thinks it is the leader.")


def _take_over_from(bk: BookKeeper, name: str, config: LogWriterConfig,
                    current: Versioned[LogMetadata]
                    ) -> tuple[LedgerHandle, Versioned[LogMetadata], int] | None:
    """Steps 2-5 of :func:`_take_over` from the list read in step 1; None: start again."""
    md = current.value
    if md.deleting:
        raise LogNotFoundError(f"log {name!r} is being deleted")
    # Step 2: fence the last two ledgers (and read the end of any older ledger whose end
    # was never recorded: those are closed already, so their recovery open fences nothing).
    described = _fence_and_describe(bk, md, config.password)
    if described is None:
        return None  # truncated meanwhile: the list changed
    # Step 3: create a new ledger.
    lh = _create_ledger(bk, name, config)
    first_ts = [0]

    def make_change(m: LogMetadata) -> LogMetadata:
        # Step 4: add the new ledger to the ledger list.
        for lid, (last, ts) in described.items():
            m = m.with_ledger_described(lid, last, ts)
        first_ts[0] = max(now_ms(), m.max_known_ts_ms)
        return m.with_ledger_added(lh.id, first_ts[0]).spilled(config.limits)

    # Step 5: write it back with a CAS; a lost CAS deletes the ledger and restarts at 1.
    try:
        written = _update_log(bk, name, needs_change=lambda m: m.find_in_tail(lh.id) is None,
                              make_change=make_change, current=current, max_attempts=1)
    except MetadataVersionError:
        log.info("log %r: lost the CAS taking over the log; starting again", name)
        _delete_ledger_quietly(bk, lh.id, config.password)
        return None
    except LogNotFoundError:
        _delete_ledger_quietly(bk, lh.id, config.password)
        raise
    return lh, written, first_ts[0] or max(now_ms(), written.value.max_known_ts_ms)


def open_log_writer(bk: BookKeeper, name: str, *, create_if_missing: bool = True,
                    ensemble_size: int | None = None, write_quorum_size: int | None = None,
                    ack_quorum_size: int | None = None, password: bytes = b"",
                    roll_max_entries: int | None = None, roll_max_bytes: int | None = None,
                    roll_max_age_s: float | None = None, digest: str = "crc32c",
                    limits: LogLimits | None = None,
                    after_roll_cas: Callable[[int], None] | None = None) -> LogWriter:
    """Become the writer of log ``name`` (fencing any previous writer); see :func:`_take_over`.

    ``create_if_missing``: create the log if it does not exist (else
    :class:`LogNotFoundError`). Quorums and ``password`` apply to the ledgers this writer
    creates; a quorum not given is the log's (recorded by :func:`create_log`), else 3/2/2
    (:func:`~bk_spark.protocol.log_rules.log_quorums`). ``roll_max_*``: automatic rolling
    (:class:`LogWriterConfig`).
    """
    validate_log_name(name)
    given = (ensemble_size, write_quorum_size, ack_quorum_size)
    properties: Mapping[str, Any] = {}
    if None in given:
        try:
            properties = _store(bk).read(name).value.properties
        except LogNotFoundError:
            pass
    e, qw, qa = log_rules.log_quorums(properties, given)
    config = LogWriterConfig(
        ensemble_size=e, write_quorum_size=qw,
        ack_quorum_size=qa, password=password, digest=digest,
        roll_max_entries=roll_max_entries, roll_max_bytes=roll_max_bytes,
        roll_max_age_s=roll_max_age_s, limits=limits or LogLimits(),
        after_roll_cas=after_roll_cas)
    lh, md, ts_floor = _take_over(bk, name, config, create_if_missing)
    return LogWriter(bk, name, config, lh, md, ts_floor)


# ======================================================================== reader

Start = Literal["earliest", "latest"] | Position | None

#: Longest a tailing reader goes without re-reading the log metadata (besides its watch).
_REFRESH_S = 5.0
#: Longest single wait of :meth:`LogReader.tail` before it looks again.
_WAIT_CHUNK_S = 0.5


class LogReader:
    """Reads a log in order without disturbing its writer (use :func:`open_log_reader`).

    Closed ledgers are read whole; a ledger still open (the writer's current one) through a
    non-fencing open up to its last-add-confirmed. A reader moves past a ledger only once
    it is closed: during a roll the writer may still be adding to the previous ledger.
    """

    def __init__(self, bk: BookKeeper, name: str, password: bytes = b"") -> None:
        self._bk = bk
        self.name = validate_log_name(name)
        self._password = password.encode() if isinstance(password, str) else bytes(password)
        self._store = _store(bk)
        self._view: LogView | None = None
        self._changed = threading.Event()
        self._closed = False
        self._refreshed_at = 0.0
        self._md = self._refresh()
        self._index = self._md.value.first_index
        self._entry = 0
        self._handle: ReadHandle | None = None

    # ----------------------------------------------------------------- metadata
    def _on_change(self, _event: WatchedEvent) -> None:
        if not self._closed:
            self._changed.set()

    def _refresh(self) -> Versioned[LogMetadata]:
        """Re-read the log metadata and re-arm the watch that flags its next change."""
        self._changed.clear()
        self._md = self._store.read(self.name, watch=self._on_change)
        self._view = (LogView(self._store, self.name, self._md.value) if self._view is None
                      else self._view.refreshed(self._md.value))
        self._refreshed_at = time.monotonic()
        return self._md

    def _maybe_refresh(self) -> None:
        if self._changed.is_set() or time.monotonic() - self._refreshed_at > _REFRESH_S:
            self._refresh()

    def _ledger_at(self, index: int) -> LedgerInfo | None:
        """The ledger at ``index`` (None: not added yet); truncated: an error."""
        assert self._view is not None
        md = self._view.md
        if index < md.first_index:
            raise LogTruncatedError(
                f"log {self.name!r}: ledger #{index} was truncated (the log starts at ledger "
                f"#{md.first_index})")
        return self._view.at(index)

    def _handle_for(self, info: LedgerInfo) -> ReadHandle:
        if self._handle is None or self._handle.id != info.ledger_id:
            try:
                self._handle = self._bk.open_ledger(info.ledger_id, self._password,
                                                    recovery=False)
            except NoSuchLedgerError:
                raise self._truncated(info) from None
        return self._handle

    def _truncated(self, info: LedgerInfo) -> BKError:
        self._refresh()
        if info.index < self._md.value.first_index:
            return LogTruncatedError(
                f"log {self.name!r}: ledger {info.ledger_id} was truncated while reading")
        return NoSuchLedgerError(f"log {self.name!r}: ledger {info.ledger_id} is missing")

    @property
    def metadata(self) -> LogMetadata:
        return self._md.value

    @property
    def position(self) -> Position:
        """The next position to read (``ledger_id`` -1: the ledger not added yet)."""
        info = self._ledger_at(self._index)
        return Position(info.ledger_id if info else -1, self._entry, self._index)

    # ----------------------------------------------------------------- seeking
    def seek(self, start: Start = None, timestamp_ms: int | None = None) -> Position:
        """Move to ``start`` ("earliest", "latest", a :class:`Position`) or to the first
        entry appended at or after ``timestamp_ms``; returns the new position."""
        if timestamp_ms is not None and start is not None:
            raise InvalidConfigError("give either start or timestamp_ms, not both")
        self._refresh()
        md = self._md.value
        if timestamp_ms is not None:
            self._seek_timestamp(int(timestamp_ms))
        elif start is None or start == "earliest":
            self._index, self._entry = md.first_index, 0
        elif start == "latest":
            self._seek_latest()
        elif isinstance(start, Position):
            if start.entry_id < 0:
                raise InvalidConfigError(f"start position {start}: entry_id must be >= 0")
            assert self._view is not None
            self._index = self._view.index_of(start)
            self._entry = start.entry_id
        else:
            raise InvalidConfigError(
                f"start must be 'earliest', 'latest', a Position or None, got {start!r}")
        return self.position

    def _seek_latest(self) -> None:
        md = self._md.value
        last = md.last_ledger
        if last is None:
            self._index, self._entry = md.end_index, 0
            return
        self._index = last.index
        self._entry = (last.last_entry_id if last.is_described
                       else self._handle_for(last).read_last_add_confirmed()) + 1

    def _seek_timestamp(self, ts: int) -> None:
        """Pick the ledger from the metadata, then binary-search the entries inside it.

        Timestamps never decrease in log order: the first ledger that may hold ``ts`` or
        later (a described ledger whose last timestamp is older cannot) holds the answer
        unless all of its entries are older; only then look at the next one.
        """
        md = self._md.value
        seg = first_segment_for_timestamp(md, ts)
        first = max(md.first_index, seg.start if seg is not None else md.tail_start)
        for index in range(first, md.end_index):
            info = self._ledger_at(index)
            assert info is not None
            if not info.may_hold_timestamp(ts):
                continue
            rh = self._handle_for(info)
            last = rh.read_last_add_confirmed()

            def ts_of(entry_id: int, rh: ReadHandle = rh) -> int:
                return entry_timestamp(rh.read_entries(entry_id, entry_id)[0].payload)

            if last >= 0 and ts_of(last) >= ts:
                self._index, self._entry = index, bisect_timestamp(0, last, ts_of, ts)
                return
            if not rh.is_closed:  # all older so far: wait for new entries here
                self._index, self._entry = index, last + 1
                return
        self._seek_latest()  # every entry is older

    # ----------------------------------------------------------------- reading
    def read_available(self) -> Iterator[LogRecord]:
        """Every record readable now, in log order; never waits for new entries."""
        self._maybe_refresh()
        while True:
            info = self._ledger_at(self._index)
            if info is None:
                return
            rh = self._handle_for(info)
            last = rh.read_last_add_confirmed()
            if self._entry <= last:
                yield from self._read(rh, info, last)
            if not rh.is_closed:
                # Open: move on only once it is closed, which the writer does after a roll.
                if self._ledger_at(self._index + 1) is None:
                    self._maybe_refresh()
                    if self._ledger_at(self._index + 1) is None:
                        return
                if rh.refresh_metadata().state != LedgerState.CLOSED:
                    return
                continue  # closed now: read its rest
            if self._ledger_at(self._index + 1) is None:
                self._maybe_refresh()
                if self._ledger_at(self._index + 1) is None:
                    return
            self._index, self._entry = self._index + 1, 0

    def _read(self, rh: ReadHandle, info: LedgerInfo, last: int) -> Iterator[LogRecord]:
        try:
            for e in rh.iter_entries(self._entry, last):
                ts, payload = decode_entry(e.payload)
                self._entry = e.entry_id + 1
                yield LogRecord(Position(info.ledger_id, e.entry_id, info.index), payload, ts)
        except NoSuchLedgerError:
            raise self._truncated(info) from None

    def tail(self, timeout: float | None = None) -> Iterator[LogRecord]:
        """Records as they are appended, crossing into new ledgers; stops after ``timeout``
        seconds without a new record (None: never)."""
        idle_until = None if timeout is None else time.monotonic() + timeout
        while True:
            got = False
            for record in self.read_available():
                got = True
                yield record
            if got:
                idle_until = None if timeout is None else time.monotonic() + timeout
                continue
            left = _WAIT_CHUNK_S if idle_until is None else idle_until - time.monotonic()
            if left <= 0:
                return
            self._wait(min(left, _WAIT_CHUNK_S))

    def _wait(self, seconds: float) -> None:
        """Long-poll the open ledger for the next entry, or wait for the metadata to change."""
        info = self._ledger_at(self._index)
        if info is not None and self._handle is not None and \
                self._handle.id == info.ledger_id and not self._handle.is_closed:
            self._handle.wait_for_entry(self._entry, seconds)
        else:
            self._changed.wait(seconds)

    def close(self) -> None:
        self._closed = True

    def __enter__(self) -> LogReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_log_reader(bk: BookKeeper, name: str, start: Start = None,
                    timestamp_ms: int | None = None, password: bytes = b"") -> LogReader:
    """A reader of log ``name`` positioned at ``start`` ("earliest" (also None), "latest":
    after the last readable entry, a :class:`Position`) or at the first entry appended at
    or after ``timestamp_ms``."""
    reader = LogReader(bk, name, password)
    reader.seek(start, timestamp_ms)
    return reader


# ======================================================================== admin


def list_logs(bk: BookKeeper) -> list[str]:
    """Names of all logs, sorted."""
    return _store(bk).names()


def log_metadata(bk: BookKeeper, name: str) -> LogMetadata:
    """The main znode of log ``name`` (tail ledgers, segment summaries, properties)."""
    return _store(bk).read(name).value


def log_incarnation(md: LogMetadata) -> str:
    """Which incarnation of its name a log is: the log id fixed at creation, so a log
    deleted and created again under the same name is told apart from the old one (a
    reader's position in the old log means nothing in the new one). A log created before
    log ids existed is named by its creation time (``ctime-<ms>``), also fixed."""
    return md.log_id or f"ctime-{md.ctime_ms}"


def log_ledgers(bk: BookKeeper, name: str) -> list[LedgerInfo]:
    """Every live ledger of log ``name`` in log order (reads the spilled segments)."""
    return open_log_view(bk, name).ledgers()


def create_log(bk: BookKeeper, name: str, *, properties: dict[str, Any] | None = None,
               quorums: tuple[int, int, int] | None = None) -> LogMetadata:
    """Create an empty log (:class:`LogExistsError` if it exists) with a new random log id
    (:func:`log_incarnation`). ``quorums`` ``(E, Qw, Qa)``: recorded in its properties for
    the writers that give none (:func:`~bk_spark.protocol.log_rules.log_quorums`)."""
    props = dict(properties or {})
    if quorums is not None:
        props.update(log_rules.quorum_properties(quorums))
    md = LogMetadata(ctime_ms=now_ms(), log_id=uuid.uuid4().hex).with_properties(props)
    return _store(bk).create(name, md).value


def update_log_properties(bk: BookKeeper, name: str, update: PropertiesUpdate
                          ) -> dict[str, Any]:
    """CAS the properties of log ``name`` whoever writes it (a writer that must own the log
    uses :meth:`LogWriter.update_properties`). Returns the properties written."""
    md = _update_log(bk, name, needs_change=lambda m: True,
                     make_change=lambda m: m.with_properties(update))
    return dict(md.value.properties)


def truncate_log(bk: BookKeeper, name: str, before: Position, password: bytes = b""
                 ) -> list[int]:
    """Drop the whole ledgers entirely before ``before``'s ledger, then delete them
    (``password``: the ledgers', which their bookies check before deleting data).

    The ledger list is changed first (CAS), so no reader is sent to a deleted ledger; then
    each dropped ledger is deleted from its bookies and the metadata store, reclaiming its
    space. A ledger that is not closed yet (and every one after it) is kept. Returns the ids
    of the ledgers dropped.
    """
    view = open_log_view(bk, name)
    md = view.md
    try:
        before_index = view.index_of(before)
    except LogTruncatedError:
        return []  # already truncated past it
    target = md.truncated(before_index).first_index
    if target <= md.first_index:
        return []
    dropped = []
    for index in range(md.first_index, target):
        info = view.at(index)
        assert info is not None
        dropped.append(info.ledger_id)
    _update_log(bk, name, needs_change=lambda m: m.first_index < target,
                make_change=lambda m: m.truncated(target))
    for lid in dropped:
        _delete_ledger_quietly(bk, lid, password)
    log.info("log %r: truncated %d ledgers before ledger #%d", name, len(dropped), target)
    return dropped


def delete_log(bk: BookKeeper, name: str, password: bytes = b"") -> list[int]:
    """Delete log ``name`` and all its ledgers (``password``: theirs); returns the ledger ids
    deleted.

    First a CAS marks the log as being deleted (a writer's next CAS fails with
    :class:`LogNotFoundError`), then every ledger is deleted, then the znodes. Interrupted,
    it can be run again.
    """
    store = _store(bk)
    md = _update_log(bk, name, needs_change=lambda m: not m.deleting,
                     make_change=lambda m: m.marked_deleting(), allow_deleting=True).value
    ledgers = [r.ledger_id for r in LogView(store, name, md).ledgers()]
    for lid in ledgers:
        _delete_ledger_quietly(bk, lid, password)
    store.delete_tree(name)
    return ledgers


# ======================================================================== committing ledgers

@dataclass(frozen=True)
class ClosedLedger:
    """A ledger written and closed outside the log, ready to be added to it: its id, last
    entry id and the timestamps of its first and last entries (log entry frames)."""

    ledger_id: int
    last_entry_id: int
    first_ts_ms: int
    last_ts_ms: int


@dataclass(frozen=True)
class CommitResult:
    """What :func:`commit_ledgers` did. ``committed`` is False when the transaction id was
    already committed (nothing was added). ``dropped``: the ledgers a ``replace`` removed
    from the log (and deleted)."""

    committed: bool
    metadata: LogMetadata
    dropped: tuple[int, ...] = ()


@dataclass(frozen=True)
class WrittenLedger:
    """What :func:`write_closed_ledger` wrote: the closed ledger, ready for
    :func:`commit_ledgers`, and how many entries it holds."""

    ledger: ClosedLedger
    entries: int


def write_closed_ledger(bk: BookKeeper, name: str, payloads: Iterable[bytes | None], *,
                        ensemble_size: int = 3, write_quorum_size: int = 2,
                        ack_quorum_size: int = 2, password: bytes = b"", ts_floor: int = 0,
                        custom_metadata: Mapping[str, str] | None = None,
                        on_created: Callable[[int], None] | None = None,
                        max_in_flight_entries: int = 4096,
                        max_in_flight_bytes: int = 64 << 20) -> WrittenLedger | None:
    """Write ``payloads`` (log entries: each framed with its timestamp, never below
    ``ts_floor``) into one NEW ledger created for log ``name``, close it, and return it
    (None: no payload, no ledger created). The ledger is not in the log: add it with
    :func:`commit_ledgers` (one per Spark task, committed together).

    ``on_created(ledger_id)`` runs as soon as the ledger exists, before its first add, so
    the caller can record it for clean-up (a failed or abandoned write leaves a ledger no
    log lists). Adds are pipelined within the in-flight limits (:class:`InFlightWindow`);
    a failed add raises.
    """
    lh: LedgerHandle | None = None
    window = InFlightWindow(max_in_flight_entries, max_in_flight_bytes)
    first_ts = last_ts = 0
    entries = 0
    for payload in payloads:
        if lh is None:
            lh = bk.create_ledger(ensemble_size, write_quorum_size, ack_quorum_size,
                                  password=password,
                                  custom_metadata={LEDGER_LOG_KEY: name,
                                                   **(custom_metadata or {})})
            if on_created is not None:
                on_created(lh.id)
        ts = last_ts = ts_floor = max(now_ms(), ts_floor)
        first_ts = first_ts or ts
        window.push(lh.add_entry_async(encode_entry(payload, ts)),
                    len(payload) if payload is not None else 0)
        entries += 1
    if lh is None:
        return None
    window.drain()
    lh.close()
    return WrittenLedger(ClosedLedger(lh.id, lh.last_add_confirmed, first_ts, last_ts),
                         entries)


def commit_ledgers(bk: BookKeeper, name: str, ledgers: list[ClosedLedger], *,
                   txn_key: str | None = None, txn_id: int | None = None,
                   properties: PropertiesUpdate | None = None, replace: bool = False,
                   password: bytes = b"", create_if_missing: bool = True,
                   limits: LogLimits | None = None, max_attempts: int = 30) -> CommitResult:
    """Append closed ``ledgers`` to log ``name`` in one CAS with transaction ``txn_id``.

    For writers that fill ledgers elsewhere (e.g. Spark tasks, one ledger each) and add
    them all at once, exactly once. The seed's "Opening a log" with the new ledgers
    created beforehand:

    1. Read the list of ledgers. If ``txn_key`` already committed ``txn_id`` or a later id,
       add nothing: ``CommitResult(committed=False)`` (a replayed or zombie commit).
    2. Fence the last two ledgers in the list (and read the end of any older ledger whose end
       is not recorded): no earlier writer of the log can append after this commit.
    3. (The ledgers were created and closed by the caller.)
    4. Add them, described (last entry, timestamps), to the ledger list, with the
       transaction id and ``properties``; ``replace``: drop every earlier ledger first.
    5. Write the list back with a CAS; when it fails, start again at step 1.

    ``properties`` is applied as in :meth:`LogMetadata.with_properties` (a function may
    raise to refuse the commit). With ``replace`` the dropped ledgers are deleted after the
    CAS. Ledgers must be closed; their order in ``ledgers`` is their order in the log.
    """
    validate_log_name(name)
    if (txn_key is None) != (txn_id is None):
        raise InvalidConfigError("give txn_key and txn_id together (or neither)")
    limits = limits or LogLimits()
    password = password.encode() if isinstance(password, str) else bytes(password)
    store = _store(bk)
    for current in _read_attempts(bk, name, max_attempts, create_if_missing):
        done = _commit_from(bk, store, name, current, ledgers, txn_key, txn_id, properties,
                            replace, password, limits)
        if done is not None:
            return done
    raise LogOwnershipLostError(
        f"log {name!r}: could not commit ledgers in {max_attempts} attempts: other writers "
        f"keep taking the log")


def _with_closed_ledgers(m: LogMetadata, ledgers: list[ClosedLedger]) -> LogMetadata:
    """``m`` with described rows for ``ledgers`` appended to its tail (in one step: a
    commit may add thousands)."""
    present = {r.ledger_id for r in m.tail}
    rows = []
    for i, c in enumerate(ledgers):
        if c.ledger_id in present:
            raise ValueError(f"ledger {c.ledger_id} is already in the log")
        present.add(c.ledger_id)
        rows.append(LedgerInfo(c.ledger_id, m.end_index + i, c.first_ts_ms).described(
            c.last_entry_id, c.last_ts_ms if c.last_entry_id >= 0 else None))
    return dataclasses.replace(m, tail=m.tail + tuple(rows))


def _commit_from(bk: BookKeeper, store: LogMetadataStore, name: str,
                 current: Versioned[LogMetadata], ledgers: list[ClosedLedger],
                 txn_key: str | None, txn_id: int | None,
                 properties: PropertiesUpdate | None, replace: bool, password: bytes,
                 limits: LogLimits) -> CommitResult | None:
    """Steps 1-5 of :func:`commit_ledgers` from the list read; None: start again."""
    md = current.value
    ids = [c.ledger_id for c in ledgers]

    def check(m: LogMetadata) -> LogDecision:
        decision = log_rules.commit_check(m, ids, txn_key, txn_id)
        if decision is LogDecision.DELETED:
            raise LogNotFoundError(f"log {name!r} is being deleted")
        return decision

    first = check(md)
    if first is not LogDecision.CHANGE:  # DONE: our own CAS landed; COMMITTED: a replay
        return CommitResult(first is LogDecision.DONE, md)
    # Step 2: fence the last two ledgers.
    described = _fence_and_describe(bk, md, password)
    if described is None:
        return None  # truncated meanwhile: the list changed
    dropped = tuple(r.ledger_id for r in LogView(store, name, md).ledgers()) if replace else ()

    made: list[LogMetadata] = []

    def make_change(m: LogMetadata) -> LogMetadata:
        # Step 4: add the ledgers, the transaction id and the properties.
        for lid, (last, ts) in described.items():
            m = m.with_ledger_described(lid, last, ts)
        if replace:
            m = m.truncated(m.end_index)
        m = _with_closed_ledgers(m, ledgers)
        if properties is not None:
            m = m.with_properties(properties)
        if txn_key is not None:
            m = m.with_properties(
                lambda p: {**p, TXN_PROPERTY: {**(p.get(TXN_PROPERTY) or {}), txn_key: txn_id}})
        made.append(m.spilled(limits))
        return made[-1]

    # Step 5: CAS against the version read in step 1; a lost CAS starts again at step 1.
    try:
        written = _update_log(bk, name,
                              needs_change=lambda m: check(m) is LogDecision.CHANGE,
                              make_change=make_change, current=current, max_attempts=1)
    except MetadataVersionError:
        log.info("log %r: lost the CAS committing ledgers; starting again", name)
        return None
    if not (made and written.value == made[-1]) and \
            check(written.value) is not LogDecision.DONE:
        return CommitResult(False, written.value)  # another commit of the same txn id won
    for lid in dropped:
        _delete_ledger_quietly(bk, lid, password)
    return CommitResult(True, written.value, dropped)
