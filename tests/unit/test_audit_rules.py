"""The Auditor's decisions (BookKeeper's ``Auditor``): lost bookies come from the metadata,
the lost-bookie delay applies to one loss only, and a check reads back a bounded sample."""

from __future__ import annotations

import itertools
import random

import pytest

from bk_spark.protocol.audit_rules import (
    LOST_BOOKIE_ACTIONS,
    LostBookieAction,
    LostBookies,
    lost_bookie_action,
    lost_bookies,
    verification_sample,
)


def test_the_table_covers_every_state():
    assert set(LOST_BOOKIE_ACTIONS) == set(itertools.product((False, True), repeat=3))


@pytest.mark.parametrize("marked, several, waited, action", [
    (False, False, False, LostBookieAction.WAIT),
    (False, False, True, LostBookieAction.MARK),
    (False, True, False, LostBookieAction.MARK),
    (True, True, False, LostBookieAction.DONE),
    (True, False, True, LostBookieAction.DONE),
])
def test_one_lost_bookie_waits_out_the_delay_a_second_one_does_not(marked, several, waited,
                                                                   action):
    assert lost_bookie_action(marked, several, waited) is action


def test_a_bookie_named_by_a_ledger_and_not_registered_is_lost_whether_or_not_it_was_seen():
    # "d" joined, was placed in a ledger and died between two polls: no one saw it arrive
    assert lost_bookies({"a", "b", "c", "d"}, {"a", "b", "c", "e"}) == {"d"}
    assert lost_bookies({"a"}, {"a"}) == set()


def test_a_single_loss_waits_for_the_delay_then_is_marked_once():
    t = LostBookies(delay_s=60)
    assert t.update({"a"}, now=0) == set()
    assert t.update({"a"}, now=59.9) == set()
    assert t.update({"a"}, now=60) == {"a"}
    t.marked({"a"})
    assert t.update({"a"}, now=61) == set()
    assert t.lost == {"a"}


def test_a_second_loss_marks_both_at_once():
    t = LostBookies(delay_s=3600)
    assert t.update({"a"}, now=0) == set()
    assert t.update({"a", "b"}, now=5) == {"a", "b"}


def test_two_losses_at_once_are_marked_at_once():
    t = LostBookies(delay_s=3600)
    assert t.update({"a", "b"}, now=0) == {"a", "b"}


def test_a_loss_while_another_still_waits_for_healing_is_marked_at_once():
    t = LostBookies(delay_s=60)
    t.update({"a"}, now=0)
    assert t.update({"a"}, now=60) == {"a"}
    t.marked({"a"})
    # its ledgers still name "a" (not healed yet): "b" is a second loss
    assert t.update({"a", "b"}, now=100) == {"b"}


def test_a_bookie_that_comes_back_is_forgotten_and_waits_again_next_time():
    t = LostBookies(delay_s=10)
    t.update({"a"}, now=0)
    assert t.update(set(), now=5) == set() and t.lost == set()
    assert t.update({"a"}, now=12) == set()  # the delay starts over
    assert t.update({"a"}, now=22) == {"a"}
    t.marked({"a"})
    t.update(set(), now=23)
    assert t.update({"a"}, now=24) == set()  # marked again only after a new delay


def test_a_delay_of_zero_marks_at_once():
    assert LostBookies(delay_s=0).update({"a"}, now=0) == {"a"}


def test_the_sample_is_bounded_and_holds_the_first_and_last_entries():
    rng = random.Random(7)
    assert verification_sample(0, 8, rng) == []
    assert verification_sample(100, 0, rng) == []
    assert verification_sample(5, 8, rng) == [0, 1, 2, 3, 4]
    assert verification_sample(100, 1, rng) == [0]
    for _ in range(50):
        s = verification_sample(100, 8, rng)
        assert len(s) == 8 and s[0] == 0 and s[-1] == 99 and s == sorted(set(s))


def test_successive_samples_cover_different_entries():
    rng = random.Random(1)
    seen = set()
    for _ in range(40):
        seen |= set(verification_sample(100, 8, rng))
    assert len(seen) > 80
