"""Which row groups of an offloaded ledger's file a read keeps, and how they become input
partitions (bk_spark/protocol/row_groups.py): entries and timestamps never decrease along
the file, so a group's statistics say whether it can hold a wanted row."""

from __future__ import annotations

import pytest

from bk_spark.protocol.row_groups import RowGroupStats, kept, runs, wholly_inside

# entries 0-9 at 10 rows each, 25 rows per group: entries 2, 4 and 7 span two groups;
# entry e was appended at time 100 + e (us)
GROUPS = [RowGroupStats(0, 25, 0, 0, 2, 100, 102), RowGroupStats(1, 25, 0, 2, 4, 102, 104),
          RowGroupStats(2, 25, 0, 5, 7, 105, 107), RowGroupStats(3, 25, 0, 7, 9, 107, 109)]


@pytest.mark.parametrize(("first", "last", "ts_lo", "ts_hi", "expected"), [
    (0, None, None, None, [0, 1, 2, 3]),  # everything
    (2, 2, None, None, [0, 1]),  # an entry cut in two: both of its groups
    (3, 6, None, None, [1, 2]),
    (8, 100, None, None, [3]),
    (10, None, None, None, []),  # past the end
    (0, None, 104, 105, [1, 2]),  # a time range across a group boundary
    (0, None, 110, None, []),  # later than every row
    (0, None, None, 99, []),  # earlier than every row
    (5, 9, 100, 106, [2]),  # both ranges: the groups meeting both
])
def test_a_read_keeps_exactly_the_row_groups_whose_statistics_meet_its_ranges(
        first: int, last: int | None, ts_lo: int | None, ts_hi: int | None,
        expected: list[int]) -> None:
    assert [g.index for g in kept(GROUPS, first, last, ts_lo, ts_hi)] == expected


def test_a_group_without_statistics_or_rows_is_kept_or_dropped_safely() -> None:
    blind = RowGroupStats(0, 10)  # no statistics: it may hold anything
    empty = RowGroupStats(1, 0, 0, 5, 5, 1, 1)
    assert kept([blind, empty], 3, 4, 1, 2) == [blind]
    assert not wholly_inside(blind, 0, None)


def test_only_groups_at_the_edges_of_a_range_need_trimming() -> None:
    assert wholly_inside(GROUPS[1], 2, 4)
    assert not wholly_inside(GROUPS[1], 3, 4)  # holds rows of entry 2
    assert wholly_inside(GROUPS[0], 0, None, None, None)
    assert not wholly_inside(GROUPS[0], 0, None, 101, None)


def test_row_groups_are_cut_into_consecutive_runs_of_about_the_target_rows() -> None:
    assert runs(GROUPS, 50) == [(0, 1), (2, 3)]
    assert runs(GROUPS, 60) == [(0, 1), (2, 3)]
    assert runs(GROUPS, 75) == [(0, 1, 2), (3,)]
    assert runs(GROUPS, 10) == [(0,), (1,), (2,), (3,)]  # a group is never split
    assert runs([], 10) == []
