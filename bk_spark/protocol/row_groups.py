"""Which row groups of an offloaded ledger's Parquet file a read needs, and how a file is
cut into input partitions (pure, no I/O).

Theory of operation
-------------------
An offloaded ledger's file (:mod:`bk_spark.io.offload_files`) holds its rows in log order,
in row groups with statistics on ``entry_id`` and ``timestamp`` (the entry's append time,
microseconds). Both never decrease along the file, so each row group covers a contiguous
range of entries and of times, and a read of entries ``first..last`` between two times
needs only the row groups whose ranges meet those (:func:`kept`). Rows of one entry may
span two row groups: a read keeps both and trims rows by position, never by row group.
A kept group wholly inside the ranges (:func:`wholly_inside`) needs no trimming at all.

The row groups a read keeps are cut into consecutive runs of about ``target_rows`` rows
(:func:`runs`), one run per Spark input partition: a large file becomes several tasks, a
small one a single task, and rows come out in the file's order, run after run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class RowGroupStats:
    """One row group of a ledger's file: its index, rows, uncompressed bytes and the
    ranges of its ``entry_id`` and ``timestamp`` (microseconds) statistics (None: the file
    records none, so it may hold anything)."""

    index: int
    rows: int
    bytes: int = 0
    first_entry: int | None = None
    last_entry: int | None = None
    first_ts_us: int | None = None
    last_ts_us: int | None = None


def _meets(lo: int | None, hi: int | None, want_lo: int | None, want_hi: int | None
           ) -> bool:
    """Whether ``[lo, hi]`` (None: unknown) may meet ``[want_lo, want_hi]`` (None: open)."""
    if want_lo is not None and hi is not None and hi < want_lo:
        return False
    return not (want_hi is not None and lo is not None and lo > want_hi)


def _within(lo: int | None, hi: int | None, want_lo: int | None, want_hi: int | None
            ) -> bool:
    """Whether ``[lo, hi]`` lies inside ``[want_lo, want_hi]`` for certain."""
    if want_lo is not None and (lo is None or lo < want_lo):
        return False
    return not (want_hi is not None and (hi is None or hi > want_hi))


def kept(groups: Sequence[RowGroupStats], first_entry: int, last_entry: int | None,
         ts_lo_us: int | None = None, ts_hi_us: int | None = None) -> list[RowGroupStats]:
    """The row groups that may hold rows of entries ``first_entry..last_entry`` (None: to
    the end) appended between ``ts_lo_us`` and ``ts_hi_us`` (None: unbounded), in order;
    empty groups are never kept."""
    return [g for g in groups if g.rows > 0
            and _meets(g.first_entry, g.last_entry, first_entry, last_entry)
            and _meets(g.first_ts_us, g.last_ts_us, ts_lo_us, ts_hi_us)]


def wholly_inside(group: RowGroupStats, first_entry: int, last_entry: int | None,
                  ts_lo_us: int | None = None, ts_hi_us: int | None = None) -> bool:
    """Whether every row of ``group`` is certainly inside the ranges (read it untrimmed)."""
    return (_within(group.first_entry, group.last_entry, first_entry, last_entry)
            and _within(group.first_ts_us, group.last_ts_us, ts_lo_us, ts_hi_us))


def runs(groups: Sequence[RowGroupStats], target_rows: int) -> list[tuple[int, ...]]:
    """``groups`` (in order) cut into consecutive runs of row-group indexes, each of at
    least one group and, beyond its first group, at most ``target_rows`` rows."""
    out: list[tuple[int, ...]] = []
    current: list[int] = []
    rows = 0
    for g in groups:
        if current and rows + g.rows > target_rows:
            out.append(tuple(current))
            current, rows = [], 0
        current.append(g.index)
        rows += g.rows
    if current:
        out.append(tuple(current))
    return out
