"""Reading a log in order without disturbing its writer: closed ledgers whole, the open last
one up to its last-add-confirmed (non-fencing); tailing with long-polls and a metadata
watch. An offloaded ledger (its offload complete:
:data:`~bk_spark.protocol.offload_rules.READ_FROM`) is read from its Parquet file, with the
same positions, timestamps and values in the same order.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal

from bk_spark.core.reader import ReadHandle
from bk_spark.errors import (
    BKError,
    InvalidConfigError,
    LogTruncatedError,
    NoSuchEntryError,
    NoSuchLedgerError,
)
from bk_spark.io.metadata_store import Versioned
from bk_spark.log.store import log_store
from bk_spark.log.view import LogView
from bk_spark.protocol import offload_rules
from bk_spark.protocol.digest import password_bytes
from bk_spark.protocol.ledger_metadata import LedgerState
from bk_spark.protocol.log_format import (
    LedgerInfo,
    LogMetadata,
    LogRecord,
    Position,
    bisect_timestamp,
    decode_entry,
    entry_timestamp,
    first_segment_for_timestamp,
    validate_log_name,
)

if TYPE_CHECKING:
    from bk_spark.core.client import BookKeeper


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
        self._password = password_bytes(password)
        self._store = log_store(bk)
        self._view: LogView | None = None
        self._changed = threading.Event()
        self._closed = False
        self._refreshed_at = 0.0
        self._md = self._refresh()
        self._index = self._md.value.first_index
        self._entry = 0
        self._handle: ReadHandle | None = None

    # ----------------------------------------------------------------- metadata
    def _on_change(self, _event: object) -> None:
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

    def _handle_for(self, info: LedgerInfo, best_effort: bool = False) -> ReadHandle:
        if self._handle is None or self._handle.id != info.ledger_id:
            try:
                self._handle = self._bk.open_ledger(info.ledger_id, self._password,
                                                    recovery=False,
                                                    best_effort_lac=best_effort)
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
        # A writer lists its next ledger shortly before it switches to it (a roll, issue
        # 28): until then new entries still go to the ledger before it, still open.
        for info in md.tail[:-1]:
            if info.index >= md.first_index and not info.is_described:
                rh = self._handle_for(info)
                lac = rh.read_last_add_confirmed()
                if not rh.is_closed:
                    self._index, self._entry = info.index, lac + 1
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
            if self._offloaded(info) is not None:
                from bk_spark.io.offload_files import first_entry_at

                entry = first_entry_at(self._offloaded_file(info), ts)
                if entry is not None:
                    self._index, self._entry = index, entry
                    return
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
        """Every record readable now, in log order; never waits for new entries.

        The open ledger is read up to its LAC read with quorum coverage
        (:meth:`ReadHandle.read_last_add_confirmed`: raises BookieUnavailableError when
        too many of its bookies are down)."""
        return self._read_ready(best_effort=False)

    def _read_ready(self, best_effort: bool) -> Iterator[LogRecord]:
        """:meth:`read_available`; ``best_effort``: the open ledger's LAC is what its live
        bookies know (:meth:`ReadHandle.try_read_last_add_confirmed`, for tailing)."""
        self._maybe_refresh()
        while True:
            info = self._ledger_at(self._index)
            if info is None:
                return
            if self._offloaded(info) is not None:
                yield from self._read_offloaded(info)
                if self._ledger_at(self._index + 1) is None:
                    self._maybe_refresh()
                    if self._ledger_at(self._index + 1) is None:
                        return
                self._index, self._entry = self._index + 1, 0
                continue
            try:
                rh = self._handle_for(info, best_effort)
            except NoSuchLedgerError:
                if self._offloaded(info) is not None:  # deleted after its offload
                    continue
                raise
            last = (rh.try_read_last_add_confirmed() if best_effort
                    else rh.read_last_add_confirmed())
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
        except (NoSuchEntryError, NoSuchLedgerError) as exc:
            # The bookies answer no entry / no ledger: the ledger is being deleted from
            # them (data first, its metadata after). Offloaded, then deleted after its lag:
            # the rest from Parquet. Truncated meanwhile: data loss (LogTruncatedError),
            # as for a ledger gone before it was opened. Otherwise the error stands.
            error = self._truncated(info)  # re-reads the log metadata
            if self._offloaded(info) is not None:
                yield from self._read_offloaded(info)
                return
            if isinstance(error, LogTruncatedError) or isinstance(exc, NoSuchLedgerError):
                raise error from None
            raise

    # ----------------------------------------------------------------- offloaded ledgers
    def _offloaded(self, info: LedgerInfo) -> offload_rules.OffloadState | None:
        """The complete offload state of ``info``'s ledger when readers read it from
        Parquet (None: read it from the bookies)."""
        state = offload_rules.states_of(self._md.value.properties).get(info.ledger_id)
        return state if offload_rules.read_from(state) is offload_rules.Source.PARQUET \
            else None

    def _offloaded_file(self, info: LedgerInfo) -> str:
        state = self._offloaded(info)
        assert state is not None
        return offload_rules.offload_file(self.name, self._md.value.log_id, info.ledger_id,
                                          state)

    def _read_offloaded(self, info: LedgerInfo) -> Iterator[LogRecord]:
        """The records of an offloaded ledger from ``self._entry`` on, from its Parquet
        file; a file gone meanwhile is a truncation (:class:`LogTruncatedError`)."""
        from bk_spark.io.offload_files import entry_records
        from bk_spark.io.parquet_reads import parquet_read_served

        served = 0
        try:
            for entry_id, ts, payload in entry_records(self._offloaded_file(info),
                                                       self._entry):
                self._entry = entry_id + 1
                served += 1
                yield LogRecord(Position(info.ledger_id, entry_id, info.index), payload, ts)
        except FileNotFoundError:
            raise self._truncated(info) from None
        finally:  # the "reads served from Parquet" metric: every read of a file, counted
            parquet_read_served(served)

    def tail(self, timeout: float | None = None) -> Iterator[LogRecord]:
        """Records as they are appended, crossing into new ledgers; stops after ``timeout``
        seconds without a new record (None: never).

        Tailing reads the open ledger's LAC best effort (from whatever bookies answer, as
        BookKeeper's tailing readers do), so it goes on while most bookies of a ledger with
        a small write quorum are down; a stale LAC only delays a record to the next poll."""
        idle_until = None if timeout is None else time.monotonic() + timeout
        while True:
            got = False
            for record in self._read_ready(best_effort=True):
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
