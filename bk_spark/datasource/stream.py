"""Streaming reads: offsets are log positions, micro-batches are ledger slices.

Each micro-batch reads ``[start, end)`` of every log (:mod:`bk_spark.datasource.offsets`):
closed ledgers whole and the open ledger's tail up to its last-add-confirmed, without
fencing. ``latestOffset(start, limit)`` decides ``end``:

* the readable end of each log (:func:`~bk_spark.datasource.planning.log_end`), capped
  under ``trigger(availableNow=True)`` by the end recorded when the trigger started
  (:meth:`prepareForTriggerAvailableNow`);
* unless Spark passes :class:`ReadAllAvailable`, the options' limits: at most
  ``maxEntriesPerTrigger`` entries and about ``maxBytesPerTrigger`` bytes (shared by the
  logs in proportion to what each has), and no batch before ``minEntriesPerTrigger``
  entries are there or ``maxTriggerDelay`` passed since the last batch (ignored under
  ``availableNow``, which must terminate).

When nothing is readable past the query's position, ``latestOffset`` waits for news (at
most :data:`LATEST_OFFSET_WAIT_S`) before answering, watching instead of polling
(:func:`wait_for_more`): the open ledger's last-add-confirmed long-polled on the bookies, or
a ZooKeeper watch of the log's metadata. Spark asks again right after an empty answer, so
with no trigger interval a micro-batch starts as soon as an entry is readable.

Per micro-batch the driver reads nothing from ZooKeeper while the logs do not change
(issue 28): a log's metadata is read again only once the watch its last read armed fired
(:meth:`BookKeeperStreamReader._view`; the view read last is current until then), and the
open ledgers' read handles are kept (:class:`OpenLedgers`), so the readable end is one
last-add-confirmed request to the ledger's bookies, and none right after a long poll that
just returned the new one.

``reportLatestOffset()`` returns the readable ends, each with the query's lag behind it
(entries and estimated bytes), so query progress shows the lag. The logs read are those
named, or those matching ``logPattern`` (listed again at every ``latestOffset``, so new
ones join a running query from their earliest position). Data that is gone before it was
read (the start is before the log's first ledger, the offset names another incarnation of
the log, the ledger at the start is another one, the log is gone, a planned ledger
vanished) fails the query when ``failOnDataLoss`` is true, else is logged and skipped
(:func:`~bk_spark.datasource.planning.data_lost`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, wait
from dataclasses import replace

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from bk_spark.core.client import BookKeeper
from bk_spark.core.reader import ReadHandle
from bk_spark.datasource import connections
from bk_spark.datasource.formats import check_still_readable
from bk_spark.datasource.offsets import LogOffset, Offsets, from_json, to_json
from bk_spark.datasource.options import ReadOptions
from bk_spark.datasource.planning import (
    ARROW_PARTITION_ENTRIES,
    RAW_PARTITION_ENTRIES,
    EntrySizes,
    LogView,
    Slice,
    after,
    data_lost,
    lag_behind,
    logs_read,
    pack,
    start_offset,
    walk,
)
from bk_spark.datasource.scan import ScanSpec, read_partition
from bk_spark.errors import InvalidConfigError, LogNotFoundError
from bk_spark.log import watch_log
from bk_spark.protocol.log_format import LedgerInfo, LogMetadata

log = logging.getLogger(__name__)

class BookKeeperStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of log entries. Driver-side state (the availableNow target, the time
    of the last batch, entry sizes, the watches of idle logs) lives in this object;
    ``read()`` uses none of it."""

    def __init__(self, options: ReadOptions, spec: ScanSpec,
                 stored: StructType | None = None) -> None:
        self.options = options
        self.spec = spec
        #: The arrow schema the query reads (:class:`~.source.ReadFormat`'s ``stored``).
        self.stored = stored
        self._target: Offsets | None = None
        self._latest: Offsets | None = None
        self._lag: dict[str, tuple[int, int]] = {}
        self._reported: set[str] = set()
        self._last_batch_at = time.monotonic()
        self._sizes = EntrySizes()
        self._idle_ends: Offsets = {}
        # The logs' metadata as read last, each with the watch that read armed, and the
        # views of them (see _view); the open ledgers' read handles.
        self._watches: Watches = {}
        self._views: dict[str, LogView] = {}
        self._views_client: BookKeeper | None = None
        self._open = OpenLedgers()

    # ------------------------------------------------------------------ offsets
    def _bk(self) -> BookKeeper:
        return connections.client(self.options.uri, self.options.security)

    def _logs(self, bk: BookKeeper) -> tuple[str, ...]:
        return logs_read(self.options, bk)

    def initialOffset(self) -> dict:
        o = self.options
        bk = self._bk()
        out: Offsets = {}
        for name in self._logs(bk):
            try:
                view = LogView(bk, name)
            except LogNotFoundError:
                if o.log_pattern is not None:
                    continue  # deleted since it was listed
                raise InvalidConfigError(f"bookkeeper data source option 'log': log "
                                         f"{name!r} does not exist") from None
            out[name] = view.stamped(start_offset(view, self.options))
        return to_json(out)

    def getDefaultReadLimit(self) -> ReadLimit:
        o = self.options
        if o.max_entries_per_trigger is not None:
            return ReadMaxRows(o.max_entries_per_trigger)
        if o.max_bytes_per_trigger is not None:
            return ReadMaxBytes(o.max_bytes_per_trigger)
        if o.min_entries_per_trigger is not None:
            return ReadMinRows(o.min_entries_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        bk = self._bk()
        target: Offsets = {}
        for name in self._logs(bk):
            view = self._view(bk, name)
            if view is not None:
                target[name] = self._open.end(view, self.options.password)
        self._target = target

    def reportLatestOffset(self) -> dict | None:
        """The readable end of every log, each with the query's lag behind it: what
        Spark shows as the source's ``latestOffset`` in the query progress."""
        if self._latest is None:
            return None
        out = to_json(self._latest)
        for name, (entries, nbytes) in self._lag.items():
            if name in out:
                out[name]["lag"] = {"entries": entries, "bytes": nbytes}
        return out

    def _report_lag(self, views: dict[str, LogView], ends: Offsets, latest: Offsets
                    ) -> None:
        """Record and log how far each log's readable end is past this batch's end:
        entries, and bytes estimated from the ledgers' lengths (as ``maxBytesPerTrigger``
        does). PySpark's Python stream reader has no custom-metrics hook, so the lag goes
        into ``reportLatestOffset`` (the progress' ``latestOffset``) and the log."""
        lag = {name: lag_behind(view, ends[name], latest[name], self.options.password,
                                self._sizes) for name, view in views.items()}
        self._lag = lag
        if any(e for e, _b in lag.values()):
            log.info("lag behind the readable end: %s", ", ".join(
                f"{n}: {e} entries, ~{b} bytes" for n, (e, b) in sorted(lag.items())))

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """The end of the next micro-batch (see the module docstring). When no log has
        anything past ``start``, wait (at most :data:`LATEST_OFFSET_WAIT_S`) until one
        does, watching rather than polling (:func:`wait_for_more`), and answer again:
        with no trigger interval a micro-batch starts as soon as an entry is readable."""
        end, views, idle = self._latest_offset(start, limit)
        if idle and self._target is None and views:
            if wait_for_more(self._bk(), views, self._idle_ends, self.options.password,
                             LATEST_OFFSET_WAIT_S, self._watches, self._open):
                # the long poll that ended the wait brought the new LAC: no request again
                end, _views, _idle = self._latest_offset(start, limit, ask_lac=False)
        return end

    def _latest_offset(self, start: dict, limit: ReadLimit, ask_lac: bool = True
                       ) -> tuple[dict, dict[str, LogView], bool]:
        """``(end, the logs' views, nothing readable past start in any log)``;
        ``ask_lac`` False: the open ledgers' LACs as last learned (:meth:`OpenLedgers.end`).
        """
        o = self.options
        bk = self._bk()
        starts = from_json(start)
        views: dict[str, LogView] = {}
        begin: Offsets = {}
        ends: Offsets = {}
        names = dict.fromkeys(self._logs(bk))
        if o.log_pattern is not None:  # logs read before: a deleted one is data loss
            names.update(dict.fromkeys(starts))
        for name in names:
            view = self._view(bk, name)
            if view is None:
                continue
            check_still_readable(view.md.properties, view.md.end_index > 0, name,
                                 self.spec.entry_format, self.stored)
            views[name] = view
            s = self._checked_start(view, starts.get(name))
            e = self._open.end(view, o.password, ask_lac=ask_lac)
            if self._target is not None:
                # availableNow: stop where the logs ended when the trigger started (a log
                # found since then is read to its end as of now).
                e = min(e, self._target.get(name, e))
            begin[name], ends[name] = s, view.stamped(max(s, e))
        self._latest = dict(ends)
        idle = all(not ends[n] > begin[n] for n in ends)
        self._idle_ends = dict(ends)
        if not isinstance(limit, ReadAllAvailable):
            limited = self._limited(views, begin, ends)
            if limited is None:
                self._report_lag(views, begin, self._latest)
                return start, views, idle
            ends = {n: views[n].stamped(e) for n, e in limited.items()}
        self._report_lag(views, ends, self._latest)
        if len(ends) == len(starts) and all(_same(ends[n], starts.get(n)) for n in ends):
            return start, views, idle
        if any(ends[n] > begin[n] for n in ends):
            self._last_batch_at = time.monotonic()
        return to_json({**starts, **ends}), views, idle

    # ------------------------------------------------------------------ limits
    def _limited(self, views: dict[str, LogView], begin: Offsets, ends: Offsets
                 ) -> Offsets | None:
        """``ends`` cut to the options' limits; None: wait (minEntriesPerTrigger)."""
        o = self.options
        ranges = {n: list(walk(views[n], begin[n], ends[n], o.password)) for n in ends}
        counts = {n: sum(s.entries for _i, s in r) for n, r in ranges.items()}
        total = sum(counts.values())
        if o.min_entries_per_trigger is not None and self._target is None and \
                total < o.min_entries_per_trigger and \
                time.monotonic() - self._last_batch_at < o.max_trigger_delay_s:
            return None
        entries: dict[str, int | None] = dict.fromkeys(ends)
        if o.max_entries_per_trigger is not None and total > o.max_entries_per_trigger:
            entries = dict(_shares(counts, o.max_entries_per_trigger))
        nbytes: dict[str, float | None] = dict.fromkeys(ends)
        if o.max_bytes_per_trigger is not None:
            sizes = {n: sum(s.entries * self._entry_size(views[n], i) for i, s in r)
                     for n, r in ranges.items()}
            if sum(sizes.values()) > o.max_bytes_per_trigger:
                total_size = sum(sizes.values())
                nbytes = {n: o.max_bytes_per_trigger * w / total_size
                          for n, w in sizes.items()}
        out = {n: self._cut(views[n], ranges[n], ends[n], entries[n], nbytes[n])
               for n in ends}
        if total and all(out[n] == begin[n] for n in out):
            # A byte budget smaller than one entry still reads one entry per batch.
            n = next(n for n in ends if counts[n])
            out[n] = self._cut(views[n], ranges[n], ends[n], 1, None)
        return out

    def _cut(self, view: LogView, ranges: list[tuple[LedgerInfo, Slice]], end: LogOffset,
             entries: int | None, nbytes: float | None) -> LogOffset:
        """The offset after at most ``entries`` entries / about ``nbytes`` bytes of
        ``ranges`` (None: no limit), never past ``end``."""
        for info, s in ranges:
            take = s.entries if entries is None else min(s.entries, entries)
            if nbytes is not None:
                size = self._entry_size(view, info)
                take = min(take, int(nbytes // size))
                nbytes -= take * size
            if entries is not None:
                entries -= take
            if take < s.entries:
                return LogOffset(info.index, s.first_entry + take, info.ledger_id)
            if info.index == end.index:
                return end
            if entries == 0 or (nbytes is not None and nbytes <= 0):
                return after(view, info, s.last_entry, closed=True)  # before end: closed
        return end

    def _entry_size(self, view: LogView, info: LedgerInfo) -> float:
        return self._sizes.size(view, info)

    # ------------------------------------------------------------------ data loss
    def _view(self, bk: BookKeeper, name: str) -> LogView | None:
        """The log's view for planning (None: the log is gone, data loss), read again only
        once its metadata changed: each read arms a ZooKeeper watch (kept in
        :data:`Watches`, shared with :func:`wait_for_more`) and until it fires the
        metadata read last is the current one (ZooKeeper tells a client of a change before
        the client can read the changed data; a lost session fires every watch). Before,
        each micro-batch read it twice (``latestOffset``, ``partitions``), twice more
        after a wait."""
        if self._views_client is not bk:  # another client (the last one was closed)
            self._watches.clear()
            self._views.clear()
            self._views_client = bk
        armed = self._watches.get(name)
        if armed is None or armed[1].is_set():  # none yet, or it fired: read and arm one
            changed = threading.Event()
            try:
                md = watch_log(bk, name, changed.set)
            except LogNotFoundError:
                self._watches.pop(name, None)
                self._views.pop(name, None)
                self._lost(f"log {name!r} was deleted")
                return None
            armed = self._watches[name] = (md, changed)
        view = self._views.get(name)
        if view is None or view.md is not armed[0]:
            view = self._views[name] = LogView(bk, name, armed[0])
        return view

    def _lost(self, what: str, instead: str = "skip the lost data and go on") -> None:
        if what in self._reported:  # planning the same batch again: said once
            return
        data_lost(what, self.options.fail_on_data_loss, instead)
        self._reported.add(what)

    def _checked_start(self, view: LogView, s: LogOffset | None) -> LogOffset:
        """``s``, or where reading can go on if data after ``s`` is gone.

        In order: a log not read before (found by ``logPattern``, or added to ``log``)
        starts at its earliest position, as Kafka starts new partitions; an offset of
        another incarnation of the log (deleted and created again) is data loss, going on
        from the new log's start; an offset before the log's first ledger is data loss
        (truncated), going on from the earliest position; an offset whose ledger is not
        the one at its index (an offset without a log id, from an older checkpoint) too.
        """
        md = view.md
        if s is None:
            start = view.earliest()
            log.info("log %r: new to the query, read from %s", view.name, start.describe())
            return view.stamped(start)
        if s.log_id and s.log_id != view.incarnation:
            self._lost(f"log {view.name!r} was deleted and created again since the query "
                       f"read up to {s.describe()} of the old log (log id {s.log_id}; the "
                       f"new one is {view.incarnation})",
                       "read the new log from its start")
            return view.stamped(view.earliest())
        at = view.at(s.index)
        if s.index < md.first_index:
            first = view.earliest()
            gone = md.first_index - s.index
            self._lost(f"log {view.name!r}: {gone} ledger(s) from {s.describe()} on were "
                       f"truncated before they were read (the log now starts at "
                       f"{first.describe()})", f"go on from {first.describe()}")
            return view.stamped(first)
        if s.index > md.end_index or (s.ledger >= 0 and (at is None or
                                                          at.ledger_id != s.ledger)):
            held = f"ledger {at.ledger_id}" if at is not None else "no ledger"
            self._lost(f"log {view.name!r}: the query's position, {s.describe()}, is no "
                       f"longer in the log (#{s.index} holds {held}): was the log deleted "
                       f"and created again?", "read the log from its start")
            return view.stamped(view.earliest())
        if s.ledger < 0 and at is not None:
            return view.stamped(LogOffset(s.index, s.entry, at.ledger_id))
        return view.stamped(s)

    # ------------------------------------------------------------------ planning, reading
    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        o = self.options
        bk = self._bk()
        starts, ends = from_json(start), from_json(end)
        slices = []
        for name, e in ends.items():
            view = self._view(bk, name)
            if view is None:
                continue
            if e.log_id and e.log_id != view.incarnation:
                # Planned against an incarnation deleted since: what it held is lost; going
                # on, the next batch starts at this end and reads the new log from its start.
                self._lost(f"log {name!r} was deleted and created again after a batch up "
                           f"to {e.describe()} was planned (log id {e.log_id}; the new one "
                           f"is {view.incarnation})", "read the new log from the next batch")
                continue
            s = self._checked_start(view, starts.get(name))
            if e < s:
                continue
            slices.extend(self._open.with_metadata(view, sl)
                          for _info, sl in walk(view, s, e, o.password))
        target = ARROW_PARTITION_ENTRIES if self.spec.entry_format == "arrow" \
            else RAW_PARTITION_ENTRIES
        return list(pack(slices, target, o.min_partitions))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.spec, partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: the position is Spark's checkpoint; truncating is the log
        owner's decision."""


#: Longest ``latestOffset`` waits for a log to grow when nothing is readable past the
#: query's position (Spark asks again 10 ms after an empty answer): news ends the wait at
#: once, so this only bounds how long a stop or ``processAllAvailable`` may wait for it.
LATEST_OFFSET_WAIT_S = 0.25


#: The ZooKeeper watch armed on each log's metadata by :func:`wait_for_more`: the
#: metadata read when it was armed, and the event its firing sets.
Watches = dict[str, tuple[LogMetadata, threading.Event]]


class OpenLedgers:
    """Read handles of the logs' open ledgers, kept by the driver across micro-batches.

    The readable end of a log (:func:`~bk_spark.datasource.planning.log_end`) is in its
    first ledger not closed: that ledger's last-add-confirmed, asked of its bookies with
    quorum coverage (:meth:`ReadHandle.read_last_add_confirmed`). ``log_end`` opens the
    ledger for each ask, which reads its metadata from ZooKeeper too; a kept handle reads
    it again only while a later ledger is listed (the writer rolled: this one may be
    closed now, and its end is not recorded yet). A handle is dropped once its ledger is
    no longer the open one of its log.
    """

    def __init__(self) -> None:
        self.client: BookKeeper | None = None  # the handles' client
        self._handles: dict[str, dict[int, ReadHandle]] = {}  # log -> ledger id -> handle

    def handle(self, view: LogView, info: LedgerInfo, password: bytes) -> ReadHandle:
        """The kept handle of ``info`` (opened without recovery, reading its LAC, when
        none is kept)."""
        if self.client is not view.bk:
            self._handles.clear()
            self.client = view.bk
        kept = self._handles.setdefault(view.name, {})
        rh = kept.get(info.ledger_id)
        if rh is None:
            rh = kept[info.ledger_id] = view.bk.open_ledger(info.ledger_id, password,
                                                            recovery=False)
        return rh

    def with_metadata(self, view: LogView, sl: Slice) -> Slice:
        """``sl`` carrying its ledger's metadata when its handle is kept (an open ledger
        of the log: the read task then reads no ZooKeeper node, issue 28). The carried
        metadata can be older than the slice: the handle's LAC polls learn LACs from the
        bookies without reading the metadata again, so an ensemble change (or a fragment
        re-replicated) inside the slice is not in it. The read task is what keeps the
        rows right: a read failing as a stale ensemble does (``scan._STALE_ENSEMBLE``)
        reads the metadata again and goes on from the first entry not yielded."""
        rh = self._handles.get(view.name, {}).get(sl.ledger_id) \
            if self.client is view.bk else None
        if rh is None or sl.parquet is not None:
            return sl
        return replace(sl, metadata=rh.versioned_metadata)

    def end(self, view: LogView, password: bytes, ask_lac: bool = True) -> LogOffset:
        """``log_end`` of ``view`` through the kept handles; ``ask_lac`` False: a kept
        handle's LAC as last learned (e.g. by the long poll that just returned it), which
        is confirmed, only possibly older than the bookies' now."""
        md = view.md
        end = LogOffset(md.end_index, 0, -1)
        undescribed = [r.index for r in md.tail if r.index >= md.first_index
                       and not r.is_described]
        kept = self._handles.get(view.name, {}) if self.client is view.bk else {}
        open_ids: set[int] = set()
        for index in range(undescribed[0] if undescribed else md.end_index, md.end_index):
            info = view.at(index)
            assert info is not None
            if info.is_described:
                continue
            fresh = info.ledger_id not in kept
            rh = self.handle(view, info, password)  # (opening it reads its LAC)
            if not fresh:
                if index < md.end_index - 1 and not rh.is_closed:
                    rh.refresh_metadata()  # a later ledger is listed: closed now?
                if ask_lac:
                    rh.read_last_add_confirmed()
            if not rh.is_closed:
                open_ids.add(info.ledger_id)
                end = LogOffset(index, rh.last_add_confirmed + 1, info.ledger_id)
                break
        kept = self._handles.get(view.name, {})
        for lid in [lid for lid in kept if lid not in open_ids]:
            del kept[lid]
        return end


def wait_for_more(bk: BookKeeper, views: dict[str, LogView], ends: Offsets,
                  password: bytes, timeout: float, watches: Watches | None = None,
                  handles: OpenLedgers | None = None) -> bool:
    """Wait until some log may have more to read past ``ends``, at most ``timeout``
    seconds; True if one does (or may: its ledger closed or its metadata changed).

    Nothing polls: a log whose end is in its open ledger long-polls that ledger's
    last-add-confirmed on the bookies (:meth:`ReadHandle.wait_for_entry`, the
    bookie's LAC wait), a log whose end is past its last ledger waits on a
    ZooKeeper watch of its metadata (a new ledger, a close). Several logs wait
    together and the first news ends the wait.

    ``watches`` (kept by the caller from one wait to the next): a watch that has not
    fired yet is waited on again instead of arming another. A ZooKeeper client keeps
    every watcher armed on a path until the path changes, so arming one per wait made an
    idle query (several waits a second on a log nobody writes) hold ever more of them,
    without bound, all run at once at the log's next change. ``handles``: the open
    ledgers' kept read handles (:class:`OpenLedgers`; None: open each one here)."""
    if watches is None:
        watches = {}
    waits: list[Callable[[], bool]] = []
    for name, view in views.items():
        end = ends.get(name)
        if end is None:
            continue
        info = view.at(end.index)
        if info is not None and not info.is_described:
            # best effort: a wait needs no coverage (any LAC a bookie reports is confirmed)
            rh = handles.handle(view, info, password) if handles is not None else \
                bk.open_ledger(info.ledger_id, password, recovery=False, best_effort_lac=True)
            if rh.is_closed or rh.last_add_confirmed >= end.entry:
                return True  # it grew or closed since it was planned
            waits.append(lambda rh=rh, e=end.entry: rh.wait_for_entry(e, timeout))
        else:
            armed = watches.get(name)
            if armed is None or armed[1].is_set():  # none yet, or it fired: arm one
                changed = threading.Event()
                armed = watches[name] = (watch_log(bk, name, changed.set), changed)
            md, changed = armed
            if md != view.md:
                return True  # changed since the view was read (or its news is on the way)
            waits.append(lambda c=changed: c.wait(timeout))
    if not waits:
        return False
    if len(waits) == 1:
        return bool(waits[0]())
    # Several waits at once on the client's wait pool (no pool of their own: a query that
    # waits several times a second started and left threads each time); each wait ends
    # by its own timeout, a queued one that never started is cancelled.
    futures = [bk.threads.submit_wait(w) for w in waits]
    try:
        pending = set(futures)
        deadline = time.monotonic() + timeout
        while pending:
            done, pending = wait(pending, max(0.0, deadline - time.monotonic()),
                                 return_when=FIRST_COMPLETED)
            if not done:
                return False
            if any(not f.cancelled() and not f.exception() and f.result() for f in done):
                return True
        return False
    finally:
        for f in futures:
            f.cancel()


def _same(a: LogOffset, b: LogOffset | None) -> bool:
    """The same position in the same incarnation of a log."""
    return b is not None and a == b and a.log_id == b.log_id


def _shares(counts: dict[str, int], budget: int) -> dict[str, int]:
    """``budget`` entries split in proportion to ``counts`` (largest remainders first)."""
    total = sum(counts.values())
    exact = {n: budget * c / total for n, c in counts.items()}
    out = {n: min(counts[n], int(x)) for n, x in exact.items()}
    left = budget - sum(out.values())
    for n in sorted(exact, key=lambda n: exact[n] - int(exact[n]), reverse=True):
        if left <= 0:
            break
        if out[n] < counts[n]:
            out[n] += 1
            left -= 1
    return out
