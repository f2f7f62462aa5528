"""Entry-log GC's decisions, from tables: which logs it deletes, which it compacts first,
and when it rotates the current log (no bookie, no files)."""

from __future__ import annotations

import pytest

from bookie_server.gc import LiveBytes, plan_gc, should_rotate

THRESHOLD = 0.5  # the default gc_compaction_threshold

# sizes (record bytes per log), live bytes per log, current log -> (empty, sparse)
PLANS = [
    # nothing dead anywhere: nothing to do
    ({1: 1000, 2: 1000, 3: 10}, {1: 1000, 2: 1000, 3: 10}, 3, [], []),
    # a log with no live byte is deleted; one below half live is compacted first
    ({1: 1000, 2: 1000, 3: 10}, {2: 400, 3: 10}, 3, [1], [2]),
    # exactly at the threshold is not sparse; just below is
    ({1: 1000, 2: 1000, 3: 0}, {1: 500, 2: 499}, 3, [], [2]),
    # the current log is never chosen, however dead
    ({1: 1000, 2: 1000}, {1: 900}, 2, [], []),
    ({1: 1000, 2: 1000}, {}, 2, [1], []),
    # a log holding only its header (no records, nothing live) goes too
    ({1: 0, 2: 100}, {2: 100}, 2, [1], []),
    # several of each, returned in log id order whatever the input order
    ({7: 100, 3: 100, 5: 100, 4: 100, 9: 5}, {5: 10, 4: 60, 3: 40}, 9, [7], [3, 5]),
]


@pytest.mark.parametrize("sizes, live, current, empty, sparse", PLANS)
def test_gc_deletes_dead_logs_and_compacts_those_under_the_live_threshold(
    sizes, live, current, empty, sparse
):
    assert plan_gc(sizes, live, current, THRESHOLD) == (empty, sparse)


# current log's record bytes, its live bytes -> rotate first?
ROTATIONS = [
    (0, 0, False),  # a fresh current log: nothing to gain
    (1000, 1000, False),  # all live
    (1000, 500, False),  # at the threshold
    (1000, 499, True),  # mostly dead: rotate, so the next step compacts it
    (1000, 0, True),  # all dead: rotate, so it can be deleted
]


@pytest.mark.parametrize("size, live, rotate", ROTATIONS)
def test_gc_rotates_the_current_log_only_when_most_of_it_is_dead(size, live, rotate):
    assert should_rotate(size, live, THRESHOLD) is rotate


def test_live_bytes_count_what_the_index_points_to_per_log_and_ledger():
    live = LiveBytes()
    live.add(1, 10, 300)  # ledger 10: 300 bytes in log 1
    live.add(1, 11, 200)
    live.add(2, 10, 100)
    live.sub(1, 10, 100)  # an entry of ledger 10 overwritten (its old copy died)
    assert (live.live(1), live.live(2)) == (400, 100)
    live.drop_ledger(10)  # ledger 10 deleted: dead in every log
    assert (live.live(1), live.live(2)) == (200, 0)
    assert live.log_ids() == [1] and live.ledgers(1) == [11]
    live.sub(1, 11, 500)  # never below zero
    assert live.live(1) == 0
    live.forget_log(1)
    assert live.log_ids() == [] and live.ledgers(1) == []
