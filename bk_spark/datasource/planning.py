"""Planning reads: which entries of which ledgers, split into input partitions.

Runs on the driver (in Spark's planning worker). Everything it returns is plain picklable
data: a :class:`Slice` is a contiguous entry range of one ledger, a :class:`ScanPartition`
a few slices read by one task.

The readable part of a log is a *consistent prefix*, as a :class:`~bk_spark.log.LogReader`
sees it: closed ledgers whole, then the first ledger that is still open up to its
last-add-confirmed (LAC), read through a non-fencing open so a live writer is never
disturbed, and nothing after it (during a roll the writer may still be adding to that
ledger while the next one exists). Planning fixes the end of every slice, so a task reads
exactly what was planned, whatever the writer does meanwhile.

Partitions: ledgers are cut into ranges of at most ``target`` entries
(:data:`RAW_PARTITION_ENTRIES` / :data:`ARROW_PARTITION_ENTRIES`, or fewer so that there are
at least ``minPartitions``) and consecutive ranges are packed up to ``target`` entries, so
thousands of small ledgers (one per Spark task per micro-batch) do not become thousands of
tasks.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, replace

from pyspark.sql.datasource import InputPartition

from bk_spark.core.client import BookKeeper
from bk_spark.datasource.filters import Constraints
from bk_spark.datasource.offsets import LogOffset
from bk_spark.datasource.options import GivenPosition, ReadOptions
from bk_spark.errors import InvalidConfigError, LogTruncatedError, NoSuchLedgerError
from bk_spark.io.metadata_store import Versioned
from bk_spark.log import (
    LEDGER_LOG_KEY,
    ledger_end,
    list_logs,
    log_incarnation,
    open_log_reader,
    open_log_view,
)
from bk_spark.protocol import log_rules, offload_rules
from bk_spark.protocol import row_groups as row_group_rules
from bk_spark.protocol.ledger_metadata import LedgerMetadata
from bk_spark.protocol.log_format import LedgerInfo, LogMetadata
from bk_spark.protocol.log_rules import LedgerNow, Outside

log = logging.getLogger(__name__)

#: Entries per input partition by default: raw entries are small, arrow ones ~1 MiB.
RAW_PARTITION_ENTRIES = 100_000
ARROW_PARTITION_ENTRIES = 64
#: Rows per input partition of an offloaded ledger (runs of whole row groups, at least
#: one): a large file is read by several tasks.
PARQUET_PARTITION_ROWS = 1 << 20
#: Rows below which the files of consecutive offloaded ledgers share a partition (many
#: small ledgers are not many tasks; two of a million rows are two).
PARQUET_PACK_ROWS = 1 << 18


@dataclass(frozen=True)
class Slice:
    """Entries ``first_entry..last_entry`` (inclusive) of one ledger. ``log``: the log it
    belongs to (None: a ledger read by id that belongs to none); ``framed``: its entries
    carry the log frame (timestamp)."""

    log: str | None
    ledger_id: int
    first_entry: int
    last_entry: int
    framed: bool = True
    #: The ledger's offloaded Parquet file when readers read it from there (its offload
    #: complete: :data:`~bk_spark.protocol.offload_rules.READ_FROM`); None: the bookies.
    parquet: str | None = None
    #: The file's row groups this slice reads (planned from the footer: :func:`pack`);
    #: None: every row group the entry range and the filters keep.
    row_groups: tuple[int, ...] | None = None
    #: The ledger's metadata as the planner read it (a stream's open ledger, issue 28):
    #: the task reads no ZooKeeper node for it; None: the task reads it.
    metadata: Versioned[LedgerMetadata] | None = None

    @property
    def entries(self) -> int:
        return self.last_entry - self.first_entry + 1


@dataclass(frozen=True)
class ScanPartition(InputPartition):
    """The slices one Spark task reads, in order."""

    slices: tuple[Slice, ...]


class LogView:
    """One read of a log's metadata for planning (the log layer's
    :class:`~bk_spark.log.LogView`, plus the log's incarnation and offsets)."""

    def __init__(self, bk: BookKeeper, name: str, md: LogMetadata | None = None) -> None:
        """``md``: the log's metadata read already (None: read it now)."""
        self.bk = bk
        self.name = name
        self._view = open_log_view(bk, name, md)
        self.md: LogMetadata = self._view.md
        self.incarnation = log_incarnation(self.md)

    def at(self, index: int) -> LedgerInfo | None:
        """The live ledger at absolute ``index`` (None: truncated or not added yet)."""
        return self._view.at(index)

    def index_of(self, ledger_id: int) -> int | None:
        """The index of live ledger ``ledger_id`` (None: not in the log)."""
        return self._view.index_of_ledger(ledger_id)

    def offloaded_file(self, ledger_id: int) -> str | None:
        """The Parquet file a reader reads ledger ``ledger_id`` from (None: the bookies)."""
        state = offload_rules.states_of(self.md.properties).get(ledger_id)
        if offload_rules.read_from(state) is not offload_rules.Source.PARQUET:
            return None
        assert state is not None
        return offload_rules.offload_file(self.name, self.md.log_id, ledger_id, state)

    def earliest(self) -> LogOffset:
        first = self.at(self.md.first_index)
        return LogOffset(self.md.first_index, 0, first.ledger_id if first else -1)

    def stamped(self, off: LogOffset) -> LogOffset:
        """``off`` marked as a position in this incarnation of the log."""
        return replace(off, log_id=self.incarnation)


def logs_read(o: ReadOptions, bk: BookKeeper) -> tuple[str, ...]:
    """The logs a read takes: those named in ``log``, or every log (not being deleted)
    whose whole name matches ``logPattern``, as listed now."""
    if o.log_pattern is None:
        return o.logs
    return tuple(n for n in list_logs(bk) if o.matches(n))


def data_lost(what: str, fail_on_data_loss: bool, instead: str) -> None:
    """The one rule for data gone before it was read (truncated ledgers, a log deleted or
    created again): with ``failOnDataLoss`` true raise :class:`LogTruncatedError` saying
    what was lost; false: log it and go on doing ``instead`` (the message says which)."""
    if fail_on_data_loss:
        raise LogTruncatedError(
            f"{what}: data loss (entries not read yet are gone); failing the read "
            f"(failOnDataLoss=true). Set option failOnDataLoss=false to {instead} instead.")
    log.warning("%s: data loss; going on: %s (failOnDataLoss=false)", what, instead)


def after(view: LogView, info: LedgerInfo, last_entry: int, closed: bool) -> LogOffset:
    """The offset after entry ``last_entry`` of ``info``: past the end of a closed ledger
    it is the start of the next ledger, so truncating a ledger read to its end is no loss."""
    if not closed:
        return LogOffset(info.index, last_entry + 1, info.ledger_id)
    nxt = view.at(info.index + 1)
    return LogOffset(info.index + 1, 0, nxt.ledger_id if nxt is not None else -1)


def log_end(view: LogView, password: bytes) -> LogOffset:
    """The end of the readable prefix of a log (exclusive)."""
    md = view.md
    end = LogOffset(md.end_index, 0, -1)
    if md.ledger_count == 0:
        return end
    # Spilled ledgers are all described (closed); so are tail ledgers before the first
    # undescribed one: the prefix ends at the first ledger still open.
    undescribed = [r for r in md.tail if r.index >= md.first_index and not r.is_described]
    if not undescribed:
        return end
    for index in range(undescribed[0].index, md.end_index):
        info = view.at(index)
        assert info is not None
        last, closed = ledger_end(view.bk, info, password)
        if not closed:
            return LogOffset(index, last + 1, info.ledger_id)
    return end


def position_offset(view: LogView, ledger_id: int, entry_id: int) -> LogOffset | None:
    """The offset of a user-given position (None: its ledger is not in the log)."""
    index = view.index_of(ledger_id)
    return None if index is None else LogOffset(index, entry_id, ledger_id)


def given_offset(view: LogView, pos: GivenPosition, option: str, fail_on_data_loss: bool
                 ) -> LogOffset:
    """The offset of a position given in ``option`` (``startingOffsets`` /
    ``endingOffsets``).

    A ledger that is no longer in the log was *truncated* when the position's ``index`` is
    before the log's first ledger: data loss (:func:`data_lost`; going on, the log's
    earliest position). Otherwise it was *never part of this log* (another log, an earlier
    log of the same name, a typo): always an error. Without an index (a position copied
    from a log line or a dashboard) the log's range of removed ledger ids and the ledger's
    own metadata tell the two apart (:func:`~bk_spark.protocol.log_rules.outside_position`);
    only a log truncated before it kept that range cannot tell, and the error says so.
    """
    off = position_offset(view, pos.ledger, pos.entry)
    md = view.md
    prefix = f"bookkeeper data source option '{option}'"
    if off is not None:
        if pos.index < 0 or pos.index == off.index:
            return off
        raise InvalidConfigError(
            f"{prefix}: ledger {pos.ledger} is #{off.index} in log {view.name!r}, not "
            f"#{pos.index}: the position was not taken from this log")
    if 0 <= pos.index < md.first_index:
        first = view.earliest()
        data_lost(f"{prefix}: log {view.name!r} was truncated past entry {pos.entry} of "
                  f"ledger {pos.ledger} (#{pos.index}): it now starts at "
                  f"{first.describe()}", fail_on_data_loss,
                  f"start at the log's earliest position, {first.describe()}")
        return first
    if pos.index >= 0:
        held = view.at(pos.index)
        where = (f"its #{pos.index} is ledger {held.ledger_id}" if held is not None else
                 f"it has no ledger #{pos.index} (ledgers #{md.first_index}.."
                 f"#{md.end_index - 1})")
        raise InvalidConfigError(
            f"{prefix}: ledger {pos.ledger} was never part of log {view.name!r} ({where}): "
            f"the position is from another log, or from a deleted log of the same name")
    outside = log_rules.outside_position(md, pos.ledger, ledger_now(view, pos.ledger))
    if outside is Outside.TRUNCATED:
        first = view.earliest()
        data_lost(f"{prefix}: log {view.name!r} was truncated past entry {pos.entry} of "
                  f"ledger {pos.ledger}: it now starts at {first.describe()}",
                  fail_on_data_loss,
                  f"start at the log's earliest position, {first.describe()}")
        return first
    if outside is Outside.FOREIGN:
        raise InvalidConfigError(
            f"{prefix}: ledger {pos.ledger} was never part of log {view.name!r}: the "
            f"position is from another log, or from a deleted log of the same name")
    raise InvalidConfigError(
        f"{prefix}: ledger {pos.ledger} is not in log {view.name!r}: it was never part of "
        f"it, or it was truncated before this log recorded what truncation removed. Give "
        f"the position's \"index\" (as a streaming checkpoint or `bk log show` has it) to "
        f"tell, so that a truncated one is skipped with failOnDataLoss=false")


def ledger_now(view: LogView, ledger_id: int) -> LedgerNow:
    """What ledger ``ledger_id``'s own metadata says now: gone, or created for this log
    (:data:`LEDGER_LOG_KEY`) or for another (or none)."""
    try:
        md = view.bk.ledger_metadata(ledger_id)
    except NoSuchLedgerError:
        return LedgerNow.GONE
    return (LedgerNow.THIS_LOG if dict(md.custom_metadata).get(LEDGER_LOG_KEY) == view.name
            else LedgerNow.ELSEWHERE)


def within_ledger(view: LogView, off: LogOffset, password: bytes) -> LogOffset:
    """``off``, or the offset after its ledger's end when ``off`` lies past the last entry
    of a closed ledger (an ``endingOffsets`` position the ledger never reached): the entries
    before ``off`` are then the whole ledger, and a slice never asks for entries it lacks."""
    info = view.at(off.index)
    if info is None or off.entry == 0:
        return off
    last, closed = ledger_end(view.bk, info, password)
    return after(view, info, last, closed) if closed and off.entry > last + 1 else off


def timestamp_offset(view: LogView, timestamp_ms: int, password: bytes) -> LogOffset | None:
    """The offset of the first entry of the log appended at or after ``timestamp_ms``
    (None: every readable entry is older, the timestamp is past the end)."""
    with open_log_reader(view.bk, view.name, timestamp_ms=timestamp_ms,
                         password=password) as r:
        p = r.position
    off = LogOffset(p.ledger_index, p.entry_id, p.ledger_id)
    info = view.at(off.index)
    if info is not None and info.is_described and info.last_entry_id is not None and \
            off.entry > info.last_entry_id:
        off = after(view, info, info.last_entry_id, closed=True)
    return None if off >= log_end(view, password) else off


def start_offset(view: LogView, o: ReadOptions) -> LogOffset:
    """Where a read of a log starts, batch and stream alike: the first entry appended at or
    after its starting timestamp (``startingOffsetsByTimestamp``, ``startingTimestamp``;
    past the end, ``startingOffsetsByTimestampStrategy``: ``error`` fails, ``latest``
    starts at the readable end), else its ``startingOffsets`` position, ``latest`` (streams
    only) or the earliest position."""
    ts = o.start_timestamp(view.name)
    if ts is not None:
        off = timestamp_offset(view, ts, o.password)
        if off is not None:
            return off
        end = log_end(view, o.password)
        if o.timestamp_strategy == "error":
            option = "startingOffsetsByTimestamp" if view.name in o.starting_timestamps \
                else "startingTimestamp"
            raise InvalidConfigError(
                f"bookkeeper data source option '{option}': log {view.name!r} has no "
                f"entry appended at or after {ts} (ms since the epoch); its readable "
                f"end is {end.describe()}. Set option "
                f"startingOffsetsByTimestampStrategy=latest to start at the end")
        return end
    bound = o.start_bound(view.name)
    if isinstance(bound, GivenPosition):
        return given_offset(view, bound, "startingOffsets", o.fail_on_data_loss)
    if bound == "latest":
        return log_end(view, o.password)
    return view.earliest()


def walk(view: LogView, start: LogOffset, end: LogOffset, password: bytes,
         constraints: Constraints | None = None) -> Iterator[tuple[LedgerInfo, Slice]]:
    """The entries of ``[start, end)`` ledger by ledger (``end`` within the readable
    prefix), skipping ledgers and entries ``constraints`` exclude."""
    c = constraints or Constraints()
    if not c.allows_log(view.name) or c.matches_nothing:
        return
    md = view.md
    e_lo, e_hi = c.entry_ids.bounds()
    for index in range(max(start.index, md.first_index), min(end.index, md.end_index - 1) + 1):
        info = view.at(index)
        assert info is not None
        if info.ledger_id not in c.ledger_ids or \
                not c.ledger_may_match(info.first_ts_ms, info.last_ts_ms):
            continue
        first = start.entry if index == start.index else 0
        if index == end.index:
            last = end.entry - 1
        else:  # before the end: closed
            last = ledger_end(view.bk, info, password)[0]
        first, last = max(first, e_lo), min(last, e_hi)
        if first <= last:
            yield info, Slice(view.name, info.ledger_id, first, last,
                              parquet=view.offloaded_file(info.ledger_id))


#: Entry size assumed until a closed ledger of the log tells (bytes).
DEFAULT_ENTRY_BYTES = 1024


class EntrySizes:
    """Bytes per entry of a log's ledgers (``maxBytesPerTrigger``, lag in bytes): a closed
    ledger's length over its entries, else the log's last known size (an estimate: bookies
    do not report the length of an open ledger), else :data:`DEFAULT_ENTRY_BYTES`."""

    def __init__(self) -> None:
        self._ledger: dict[int, float] = {}
        self._log: dict[str, float] = {}

    def size(self, view: LogView, info: LedgerInfo) -> float:
        if info.ledger_id in self._ledger:
            return self._ledger[info.ledger_id]
        if info.is_described and info.last_entry_id is not None and info.last_entry_id >= 0:
            state = offload_rules.states_of(view.md.properties).get(info.ledger_id)
            if state is not None and state.dropped:  # only its Parquet copy is left
                size = max(1.0, state.bytes / (info.last_entry_id + 1))
            else:
                md = view.bk.ledger_metadata(info.ledger_id)
                size = max(1.0, md.length / (info.last_entry_id + 1))
            self._ledger[info.ledger_id] = self._log[view.name] = size
            return size
        return self._log.get(view.name, float(DEFAULT_ENTRY_BYTES))


def lag_behind(view: LogView, position: LogOffset, end: LogOffset, password: bytes,
               sizes: EntrySizes) -> tuple[int, int]:
    """``(entries, bytes)`` from ``position`` to ``end`` (the readable end): how far a
    reader at ``position`` is behind. Bytes are estimated (:class:`EntrySizes`)."""
    entries = nbytes = 0.0
    if end > position:
        for info, sl in walk(view, max(position, view.earliest()), end, password):
            entries += sl.entries
            nbytes += sl.entries * sizes.size(view, info)
    return int(entries), int(nbytes)


def ledger_slices(bk: BookKeeper, ledger_ids: tuple[int, ...], password: bytes,
                  constraints: Constraints) -> list[Slice]:
    """Slices of ledgers read by id: closed ones whole, open ones up to their LAC."""
    out = []
    e_lo, e_hi = constraints.entry_ids.bounds()
    for lid in ledger_ids:
        if lid not in constraints.ledger_ids:
            continue
        rh = bk.open_ledger(lid, password, recovery=False)
        log_name = dict(rh.metadata.custom_metadata).get(LEDGER_LOG_KEY)
        if not constraints.allows_log(log_name):
            continue
        first, last = max(0, e_lo), min(rh.last_add_confirmed, e_hi)
        if first <= last:
            out.append(Slice(log_name, lid, first, last, framed=log_name is not None))
    return out


def parquet_pieces(s: Slice, constraints: Constraints | None, target_rows: int
                   ) -> list[tuple[Slice, int]]:
    """An offloaded ledger's slice as runs of its file's row groups (with their rows):
    the groups the entry range and the timestamp filter keep, by the footer's statistics
    (:func:`~bk_spark.protocol.row_groups.kept`), cut into runs of about ``target_rows``
    (:func:`~bk_spark.protocol.row_groups.runs`). Every run keeps the slice's entry range:
    rows of an entry that spans two row groups are read once, by the run holding each.
    A footer that cannot be read leaves the slice whole (the task meets the error)."""
    from bk_spark.errors import OffloadTargetError
    from bk_spark.io import offload_files

    assert s.parquet is not None
    ts_lo, ts_hi = timestamp_bounds_us(constraints)
    try:
        groups = offload_files.row_group_stats(s.parquet)
    except (FileNotFoundError, OffloadTargetError):
        return [(s, s.entries)]
    keep = row_group_rules.kept(groups, s.first_entry, s.last_entry, ts_lo, ts_hi)
    rows = {g.index: g.rows for g in keep}
    return [(replace(s, row_groups=run), sum(rows[i] for i in run))
            for run in row_group_rules.runs(keep, target_rows)]


def timestamp_bounds_us(constraints: Constraints | None) -> tuple[int | None, int | None]:
    """The range of timestamps (microseconds, None: open) a read's filters allow."""
    if constraints is None or constraints.timestamps_us.unbounded:
        return None, None
    lo, hi = constraints.timestamps_us.bounds()
    return (None if lo == -(1 << 63) else lo), (None if hi == (1 << 63) - 1 else hi)


def pack(slices: list[Slice], target: int, min_partitions: int | None,
         constraints: Constraints | None = None) -> list[ScanPartition]:
    """Cut slices into ranges of at most ``target`` entries (fewer if ``min_partitions``
    asks for more partitions) and pack consecutive ranges into partitions.

    Slices of offloaded ledgers are cut instead into runs of their file's row groups of
    about :data:`PARQUET_PARTITION_ROWS` rows (:func:`parquet_pieces`; fewer if
    ``min_partitions`` asks for more); consecutive runs share a partition up to
    :data:`PARQUET_PACK_ROWS` rows, never with slices read from the bookies; partitions
    keep the slices' order."""
    total = sum(s.entries for s in slices if s.parquet is None)
    if min_partitions:
        target = min(target, max(1, total // min_partitions))

    def cut_files(rows_target: int) -> dict[int, list[tuple[Slice, int]]]:
        return {i: parquet_pieces(s, constraints, rows_target)
                for i, s in enumerate(slices) if s.parquet is not None}

    rows_target = PARQUET_PARTITION_ROWS
    files = cut_files(rows_target)
    if min_partitions and files:
        rows = sum(n for pieces in files.values() for _s, n in pieces)
        if rows // min_partitions < rows_target:
            rows_target = max(1, rows // min_partitions)
            files = cut_files(rows_target)
    ordered: list[tuple[Slice, int]] = []
    for i, s in enumerate(slices):
        if s.parquet is not None:
            ordered.extend(files[i])
            continue
        for lo in range(s.first_entry, s.last_entry + 1, target):
            piece = replace(s, first_entry=lo, last_entry=min(lo + target - 1, s.last_entry))
            ordered.append((piece, piece.entries))
    out: list[ScanPartition] = []
    current: list[Slice] = []
    size = 0
    for p, amount in ordered:
        limit = min(rows_target, PARQUET_PACK_ROWS) if p.parquet is not None else target
        if current and ((current[-1].parquet is None) != (p.parquet is None) or
                        size + amount > limit):
            out.append(ScanPartition(tuple(current)))
            current, size = [], 0
        current.append(p)
        size += amount
    if current:
        out.append(ScanPartition(tuple(current)))
    return out
