"""Reading a log's ledger list without changing it: :class:`LogView` (the ledger at an
index, the index of a ledger or position, the live ledgers), the readable end of one of
its ledgers (:func:`ledger_end`), a watch (:func:`watch_log`), and the one
delete-unless-listed rule after a lost CAS (:func:`unlisted_ledgers`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from bk_spark.errors import (
    BKError,
    InvalidConfigError,
    LogNotFoundError,
    LogTruncatedError,
)
from bk_spark.io.log_store import LogMetadataStore
from bk_spark.log.store import log_store
from bk_spark.protocol.log_format import (
    LedgerInfo,
    LogMetadata,
    Position,
    Segment,
)

if TYPE_CHECKING:
    from bk_spark.core.client import BookKeeper

log = logging.getLogger(__name__)


def unlisted_ledgers(bk: BookKeeper, name: str, ledger_ids: list[int]) -> list[int] | None:
    """After a CAS adding ``ledger_ids`` to log ``name`` failed: those the log does not list,
    to delete. A CAS whose answer was lost may have succeeded, and deleting a listed ledger
    would lose acknowledged data; so when the list cannot be read now the answer is None:
    keep them all (an orphan is safe). A log that no longer exists lists none."""
    try:
        md = log_store(bk).read(name).value
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


def open_log_view(bk: BookKeeper, name: str, md: LogMetadata | None = None) -> LogView:
    """A :class:`LogView` of the current ledger list of log ``name`` (``md``: of that
    metadata, read already, e.g. by :func:`watch_log`)."""
    store = log_store(bk)
    return LogView(store, name, store.read(name).value if md is None else md)


def watch_log(bk: BookKeeper, name: str, on_change: Callable[[], None]) -> LogMetadata:
    """The current metadata of log ``name``; ``on_change()`` runs once (on a ZooKeeper
    thread) at its next change (a roll, a close recorded, a truncation, a deletion)."""
    return log_store(bk).read(name, watch=lambda _event: on_change()).value


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
