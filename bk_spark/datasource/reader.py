"""Batch reads: plan ledger slices on the driver, read them as Arrow in the tasks.

Two reader classes, because of how Spark treats ``pushFilters``:

* :class:`BookKeeperPushdownReader` answers filters on ``log``, ``ledger_id``,
  ``entry_id`` and ``timestamp`` (:mod:`bk_spark.datasource.filters`); Spark asks it only
  when ``spark.sql.python.filterPushdown.enabled`` is true, from its filter-pushdown
  planning worker.
* :class:`BookKeeperBatchReader` has no ``pushFilters``: with the conf false, Spark fails
  every read of a reader that overrides it (``DATA_SOURCE_PUSHDOWN_DISABLED``), so
  :func:`reader_for_planner` returns this one unless the caller is the pushdown worker.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from dataclasses import replace

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition

from bk_spark.datasource import connections
from bk_spark.datasource.filters import Constraints, push
from bk_spark.datasource.formats import POSITION_COLUMNS
from bk_spark.datasource.offsets import LogOffset
from bk_spark.datasource.options import GivenPosition, ReadOptions
from bk_spark.datasource.planning import (
    ARROW_PARTITION_ENTRIES,
    RAW_PARTITION_ENTRIES,
    LogView,
    ScanPartition,
    Slice,
    given_offset,
    ledger_slices,
    log_end,
    logs_read,
    pack,
    start_offset,
    timestamp_offset,
    walk,
    within_ledger,
)
from bk_spark.datasource.scan import ScanSpec, read_partition
from bk_spark.errors import LogNotFoundError

#: The module of Spark's planning worker that calls ``pushFilters``.
PUSHDOWN_WORKER = "pyspark.sql.worker.data_source_pushdown_filters"


class BookKeeperBatchReader(DataSourceReader):
    """Reads logs (or ledgers by id) as of planning time; no filter pushdown."""

    def __init__(self, options: ReadOptions, spec: ScanSpec) -> None:
        self.options = options
        self.spec = spec

    def partitions(self) -> list[InputPartition]:
        """Slices of every log (or ledger) read, packed into partitions. Runs after
        ``pushFilters`` but after the reader was pickled for the tasks: keeps no state."""
        o = self.options
        bk = connections.client(o.uri, o.security)
        c = self.spec.constraints
        if o.ledger_ids:
            slices = ledger_slices(bk, o.ledger_ids, o.password, c)
        else:
            slices = []
            for name in logs_read(o, bk):
                try:
                    view = LogView(bk, name)
                except LogNotFoundError:
                    if o.log_pattern is None:
                        raise
                    continue  # matched, then deleted before planning
                slices.extend(self._log_slices(view, c))
        target = ARROW_PARTITION_ENTRIES if self.spec.entry_format == "arrow" \
            else RAW_PARTITION_ENTRIES
        return list(pack(slices, target, o.min_partitions, c))

    def _log_slices(self, view: LogView, c: Constraints) -> list[Slice]:
        o = self.options
        end = log_end(view, o.password)
        start = start_offset(view, o)
        user_end = _end(view, o)
        if user_end is not None:
            end = min(end, user_end)
        if end <= start:
            return []
        return [s for _info, s in walk(view, start, end, o.password, c)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.spec, partition)


class BookKeeperPushdownReader(BookKeeperBatchReader):
    """:class:`BookKeeperBatchReader` that answers filters on the position columns."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        # Only position columns are answered (an arrow log's own columns may share names).
        columns = POSITION_COLUMNS if self.spec.include_positions else ()
        constraints, rejected = push(filters, self.spec.constraints, columns,
                                     logs_never_null=not self.options.ledger_ids)
        self.spec = replace(self.spec, constraints=constraints)
        return rejected


def _end(view: LogView, o: ReadOptions) -> LogOffset | None:
    """Where a batch read of a log ends (exclusive; None: the readable end): the first
    entry appended at or after ``endingOffsetsByTimestamp`` / ``endingTimestamp`` (past
    the end: the readable end, as Kafka), or a position (``endingOffsets``; past the end of
    a closed ledger: that ledger's end, as past the log's readable end: its readable end)."""
    ts = o.end_timestamp(view.name)
    if ts is not None:
        return timestamp_offset(view, ts, o.password)
    bound = o.end_bound(view.name)
    if isinstance(bound, GivenPosition):
        return within_ledger(view, given_offset(view, bound, "endingOffsets",
                                                o.fail_on_data_loss), o.password)
    return None


def reader_for_planner(options: ReadOptions, spec: ScanSpec) -> BookKeeperBatchReader:
    """The reader for the Spark planning worker calling ``DataSource.reader()``.

    Spark calls ``reader()`` from its filter-pushdown worker only when
    ``spark.sql.python.filterPushdown.enabled`` is true; any other caller (the plain
    planning worker, used when it is false) gets the reader without ``pushFilters``. The
    conf itself is not visible in Python workers, so the calling module tells.
    """
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__") == PUSHDOWN_WORKER:
            return BookKeeperPushdownReader(options, spec)
        frame = frame.f_back  # type: ignore[assignment]
    return BookKeeperBatchReader(options, spec)


__all__ = ["BookKeeperBatchReader", "BookKeeperPushdownReader", "ScanPartition",
           "reader_for_planner"]
