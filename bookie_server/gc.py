"""Entry-log garbage collection and compaction: how a bookie gets disk space back.

Theory of operation
-------------------
Entry logs (:mod:`bookie_server.entrylog`) are only ever appended to, so the space of a
deleted ledger's entries, and of entries overwritten (a recovery writing an entry back) or
moved, comes back only when a whole log is deleted. :class:`LiveBytes` counts, per log and
ledger, the bytes of the records the index points to; it is GC's only input. A non-current
log's live bytes only ever go down (adds go to the current log), so a log found with none
can go.

One GC pass (:meth:`EntryLogGC.run`, every ``gc_interval_s`` or
:meth:`BookieStorage.gc <bookie_server.storage.BookieStorage.gc>`), one pass at a time:

1. **Plan** (under the state lock): rotate the current entry log when most of it is dead
   (:func:`should_rotate`), then pick the logs to act on (:func:`plan_gc`): *empty* logs
   hold no live entry, *sparse* logs have a live fraction below
   ``gc_compaction_threshold``. The current log is never picked.
2. **Compact** each sparse log: its live entries are read in chunks of about
   :data:`COMPACTION_CHUNK_BYTES` without any lock, then, under the state lock, appended
   to the current log and the index repointed; an entry deleted or overwritten meanwhile
   is skipped (the index no longer points at the copy read).
3. **Checkpoint**, so that the persisted index no longer points into those logs (a
   restart must never look for an entry in a deleted log).
4. **Delete** (under the state lock) every planned log that is still not current and
   still has no live byte.

What GC needs from the storage, and nothing else: the state lock, the entry logs and the
live bytes (given when it is built), and the :class:`GcStorage` calls: whether the
storage runs, a ledger's applied state (its index), marking a moved entry for the next
checkpoint, and the checkpoint itself.

Locks: GC's own lock (one pass at a time) is taken first; under it GC takes the state
lock (-> entry-log lock inside :class:`~bookie_server.entrylog.EntryLogs`), and calls the
checkpoint with no other lock held. It never takes the submit lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Protocol

from bookie_server.config import BookieConfig
from bookie_server.entrylog import EntryLogs
from bookie_server.index import LedgerState
from bookie_server.location import length_of, log_of, offset_of, pack_location

log = logging.getLogger(__name__)

MiB = 1024 * 1024
COMPACTION_CHUNK_BYTES = 4 * MiB


class LiveBytes:
    """Live bytes per entry log and ledger: the only input of entry-log GC.

    Invariant kept by the storage: ``live(log)`` is the total length of the entry records in
    ``log`` that the index points to. A non-current log's live bytes only ever go down
    (adds go to the current log), so once zero the log can go.
    """

    def __init__(self) -> None:
        self._by_log: dict[int, dict[int, int]] = {}

    def add(self, log_id: int, ledger_id: int, nbytes: int) -> None:
        per_ledger = self._by_log.get(log_id)
        if per_ledger is None:
            per_ledger = self._by_log[log_id] = {}
        per_ledger[ledger_id] = per_ledger.get(ledger_id, 0) + nbytes

    def sub(self, log_id: int, ledger_id: int, nbytes: int) -> None:
        per_ledger = self._by_log.get(log_id)
        if per_ledger is None:
            return
        left = per_ledger.get(ledger_id, 0) - nbytes
        if left > 0:
            per_ledger[ledger_id] = left
        else:
            per_ledger.pop(ledger_id, None)

    def drop_ledger(self, ledger_id: int) -> None:
        """A deleted ledger's entries are dead in every log."""
        for per_ledger in self._by_log.values():
            per_ledger.pop(ledger_id, None)

    def forget_log(self, log_id: int) -> None:
        self._by_log.pop(log_id, None)

    def live(self, log_id: int) -> int:
        per_ledger = self._by_log.get(log_id)
        return sum(per_ledger.values()) if per_ledger else 0

    def log_ids(self) -> list[int]:
        """Logs holding at least one live byte."""
        return [log_id for log_id, per_ledger in self._by_log.items() if per_ledger]

    def ledgers(self, log_id: int) -> list[int]:
        return list(self._by_log.get(log_id, ()))


def should_rotate(size: int, live: int, threshold: float) -> bool:
    """Whether GC rotates the current log first (so that it can be compacted): it holds
    records (``size`` bytes) and less than ``threshold`` of them are ``live``."""
    return size > 0 and live < size * threshold


def plan_gc(
    sizes: Mapping[int, int], live: Mapping[int, int], current: int, threshold: float
) -> tuple[list[int], list[int]]:
    """Which logs GC acts on: ``(empty, sparse)``, each in log id order, from each log's
    record bytes (``sizes``) and live bytes (``live``, absent: 0). Empty logs hold no live
    entry and are deleted; sparse ones have a live fraction below ``threshold`` and are
    compacted (their live entries copied to the current log) first. The current log is
    never chosen."""
    empty: list[int] = []
    sparse: list[int] = []
    for log_id, size in sorted(sizes.items()):
        if log_id == current:
            continue
        alive = live.get(log_id, 0)
        if alive == 0:
            empty.append(log_id)
        elif size > 0 and alive < size * threshold:
            sparse.append(log_id)
    return empty, sparse


class GcStorage(Protocol):
    """The storage as GC sees it (:class:`bookie_server.storage.BookieStorage`)."""

    def is_running(self) -> bool:
        """Started, not closed, not failed: GC does nothing otherwise."""
        ...

    def applied_state(self, ledger_id: int) -> LedgerState | None:
        """The applied state (and index) of a ledger, None once deleted. Caller holds the
        state lock."""
        ...

    def entry_moved(self, state: LedgerState, entry_id: int) -> None:
        """An entry's location changed: the next checkpoint persists it. Caller holds the
        state lock."""
        ...

    def checkpoint(self) -> None:
        """Make the index durable as it is now (takes its own locks)."""
        ...


class EntryLogGC:
    """Entry-log GC of one storage (see the module docstring). Thread-safe."""

    def __init__(
        self,
        storage: GcStorage,
        config: BookieConfig,
        state_lock: threading.Lock,
        logs: EntryLogs,
        live: LiveBytes,
    ) -> None:
        self._storage = storage
        self.config = config
        self._state_lock = state_lock
        self._logs = logs
        self._live = live
        self._gc_lock = threading.Lock()

    def run(self) -> None:
        """One GC pass now: steps 1-4 of the module docstring."""
        with self._gc_lock:
            if not self._storage.is_running():
                return
            threshold = self.config.gc_compaction_threshold
            with self._state_lock:  # 1. rotate and plan
                current = self._logs.current_id
                sizes = self._logs.data_sizes()
                if should_rotate(sizes.get(current, 0), self._live.live(current), threshold):
                    self._logs.rotate()
                    current = self._logs.current_id
                    sizes = self._logs.data_sizes()
                live = {log_id: self._live.live(log_id) for log_id in sizes}
                empty, sparse = plan_gc(sizes, live, current, threshold)
            for log_id in sparse:  # 2. compact
                self._compact(log_id)
            if not empty and not sparse:
                return
            self._storage.checkpoint()  # 3. the persisted index leaves the planned logs
            removed = 0
            with self._state_lock:  # 4. delete what is still dead
                for log_id in empty + sparse:
                    if log_id != self._logs.current_id and self._live.live(log_id) == 0:
                        self._logs.delete(log_id)
                        self._live.forget_log(log_id)
                        removed += 1
            if removed:
                log.info("entry-log GC deleted %d logs (%d compacted)", removed, len(sparse))

    def _compact(self, log_id: int) -> None:
        """Copy the live entries of ``log_id`` to the current log and repoint the index."""
        with self._state_lock:
            candidates: list[tuple[int, int, int]] = []
            applied = self._storage.applied_state
            copies = [
                (ledger_id, list(state.index.items()))
                for ledger_id in self._live.ledgers(log_id)
                if (state := applied(ledger_id)) is not None
            ]
        for ledger_id, items in copies:
            candidates.extend(
                (loc, ledger_id, eid) for eid, loc in items if log_of(loc) == log_id
            )
        candidates.sort()
        i = 0
        while i < len(candidates):
            chunk: list[tuple[int, int, int]] = []
            size = 0
            while i < len(candidates) and (not chunk or size < COMPACTION_CHUNK_BYTES):
                chunk.append(candidates[i])
                size += length_of(candidates[i][0])
                i += 1
            first = offset_of(chunk[0][0])
            last = chunk[-1][0]
            span = offset_of(last) + length_of(last) - first
            data = memoryview(self._logs.read(log_id, first, span))
            with self._state_lock:
                moved: list[tuple[LedgerState, int, int]] = []
                buffers = []
                for loc, ledger_id, eid in chunk:
                    state = self._storage.applied_state(ledger_id)
                    if state is None or state.index.get(eid) != loc:
                        continue  # deleted or overwritten meanwhile
                    offset = offset_of(loc) - first
                    buffers.append(data[offset : offset + length_of(loc)])
                    moved.append((state, eid, loc))
                places = self._logs.append(buffers) if buffers else []
                for (state, eid, old), (new_log, new_offset) in zip(moved, places, strict=True):
                    length = length_of(old)
                    state.index[eid] = pack_location(new_log, new_offset, length)
                    self._storage.entry_moved(state, eid)
                    self._live.sub(log_id, state.ledger_id, length)
                    self._live.add(new_log, state.ledger_id, length)
