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

``reportLatestOffset()`` returns the readable ends, so query progress shows the lag. Data
that was truncated or deleted before it was read (the start is before the log's first
ledger, the ledger at the start is another one, the log is gone, a planned ledger vanished)
fails the query when ``failOnDataLoss`` is true, else is logged and skipped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

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

from bk_spark.core.client import BookKeeper
from bk_spark.core.log import open_log_reader
from bk_spark.core.log_format import LedgerInfo
from bk_spark.datasource import connections
from bk_spark.datasource.offsets import LogOffset, Offsets, from_json, to_json
from bk_spark.datasource.options import ReadOptions
from bk_spark.datasource.planning import (
    ARROW_PARTITION_ENTRIES,
    RAW_PARTITION_ENTRIES,
    LogView,
    Slice,
    after,
    log_end,
    pack,
    position_offset,
    walk,
)
from bk_spark.datasource.scan import ScanSpec, read_partition
from bk_spark.errors import InvalidConfigError, LogNotFoundError, LogTruncatedError

log = logging.getLogger(__name__)

#: Entry size assumed for ``maxBytesPerTrigger`` until a closed ledger of the log tells.
DEFAULT_ENTRY_BYTES = 1024


class BookKeeperStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of log entries. Driver-side state (the availableNow target, the time
    of the last batch, entry sizes) lives in this object; ``read()`` uses none of it."""

    def __init__(self, options: ReadOptions, spec: ScanSpec) -> None:
        self.options = options
        self.spec = spec
        self._target: Offsets | None = None
        self._latest: Offsets | None = None
        self._last_batch_at = time.monotonic()
        self._entry_bytes: dict[int, float] = {}
        self._log_entry_bytes: dict[str, float] = {}

    # ------------------------------------------------------------------ offsets
    def _bk(self) -> BookKeeper:
        return connections.client(self.options.uri, self.options.security)

    def initialOffset(self) -> dict:
        o = self.options
        bk = self._bk()
        out: Offsets = {}
        for name in o.logs:
            view = self._view(bk, name)
            if view is None:
                raise InvalidConfigError(f"bookkeeper data source option 'log': log "
                                         f"{name!r} does not exist")
            out[name] = self._start_of(bk, view)
        return to_json(out)

    def _start_of(self, bk: BookKeeper, view: LogView) -> LogOffset:
        o = self.options
        if o.starting_timestamp_ms is not None:
            with open_log_reader(bk, view.name, timestamp_ms=o.starting_timestamp_ms,
                                 password=o.password) as r:
                p = r.position
            return LogOffset(p.ledger_index, p.entry_id, p.ledger_id)
        bound = o.starting.get(view.name, "latest")
        if bound == "earliest":
            return view.earliest()
        if bound == "latest":
            return log_end(view, o.password)
        assert isinstance(bound, tuple)
        off = position_offset(view, bound[0], bound[1])
        if off is None:
            raise InvalidConfigError(
                f"bookkeeper data source option 'startingOffsets': ledger {bound[0]} is not "
                f"in log {view.name!r} (truncated, or never part of it)")
        return off

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
        for name in self.options.logs:
            view = self._view(bk, name)
            if view is not None:
                target[name] = log_end(view, self.options.password)
        self._target = target

    def reportLatestOffset(self) -> dict | None:
        return to_json(self._latest) if self._latest is not None else None

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        o = self.options
        bk = self._bk()
        starts = from_json(start)
        views: dict[str, LogView] = {}
        begin: Offsets = {}
        ends: Offsets = {}
        for name in o.logs:
            view = self._view(bk, name)
            if view is None:
                continue
            views[name] = view
            s = self._checked_start(view, starts.get(name))
            e = log_end(view, o.password)
            if self._target is not None and name in self._target:
                e = min(e, self._target[name])
            begin[name], ends[name] = s, max(s, e)
        self._latest = dict(ends)
        if not isinstance(limit, ReadAllAvailable):
            ends = self._limited(views, begin, ends)
            if ends is None:
                return start
        if all(ends[n] == starts.get(n) for n in ends) and len(ends) == len(starts):
            return start
        if any(ends[n] > begin[n] for n in ends):
            self._last_batch_at = time.monotonic()
        return to_json({**starts, **ends})

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
        """Bytes per entry of a ledger: its length over its entries once described, else
        the log's last known size (an estimate: bookies do not report open lengths)."""
        if info.ledger_id in self._entry_bytes:
            return self._entry_bytes[info.ledger_id]
        if info.is_described and info.last_entry_id is not None and info.last_entry_id >= 0:
            md = view.bk.ledger_metadata(info.ledger_id)
            size = max(1.0, md.length / (info.last_entry_id + 1))
            self._entry_bytes[info.ledger_id] = self._log_entry_bytes[view.name] = size
            return size
        return self._log_entry_bytes.get(view.name, float(DEFAULT_ENTRY_BYTES))

    # ------------------------------------------------------------------ data loss
    def _view(self, bk: BookKeeper, name: str) -> LogView | None:
        try:
            return LogView(bk, name)
        except LogNotFoundError:
            self._lost(f"log {name!r} was deleted")
            return None

    def _lost(self, what: str) -> None:
        if self.options.fail_on_data_loss:
            raise LogTruncatedError(
                f"{what}: data loss (entries not read yet are gone). Set option "
                f"failOnDataLoss=false to skip lost data and go on.")
        log.warning("%s; skipping the lost data (failOnDataLoss=false)", what)

    def _checked_start(self, view: LogView, s: LogOffset | None) -> LogOffset:
        """``s``, or where reading can go on if data after ``s`` is gone."""
        md = view.md
        if s is None:  # a log added to the option after the query started
            return self._start_of(view.bk, view)
        at = view.at(s.index)
        if s.index < md.first_index:
            self._lost(f"log {view.name!r}: ledgers from #{s.index} (ledger {s.ledger}) to "
                       f"#{md.first_index - 1} were truncated before they were read")
            return view.earliest()
        if s.index > md.end_index or (s.ledger >= 0 and (at is None or
                                                          at.ledger_id != s.ledger)):
            self._lost(f"log {view.name!r}: ledger {s.ledger} at #{s.index} is no longer in "
                       f"the log (was the log deleted and created again?)")
            return view.earliest()
        if s.ledger < 0 and at is not None:
            return LogOffset(s.index, s.entry, at.ledger_id)
        return s

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
            s = self._checked_start(view, starts.get(name))
            if e < s:
                continue
            slices.extend(sl for _info, sl in walk(view, s, e, o.password))
        target = ARROW_PARTITION_ENTRIES if self.spec.entry_format == "arrow" \
            else RAW_PARTITION_ENTRIES
        return list(pack(slices, target, o.min_partitions))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.spec, partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: the position is Spark's checkpoint; truncating is the log
        owner's decision."""


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
