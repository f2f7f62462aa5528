"""When a log writer rolls (issue 31): which ledger each append goes to and what the roller
does, as tables, and a simulation of a writer with appends in flight: no server."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bk_spark.protocol.roll_policy import (
    LIST_AHEAD_S,
    PLACEMENT,
    ROLLER_STEP,
    SPARE_AT,
    SWITCH_AFTER_S,
    LedgerAssignment,
    Placement,
    RollerStep,
    RollLimits,
    list_ahead_due,
    list_ahead_margin,
    place,
    roller_step,
)

P = Placement
E10 = RollLimits(max_entries=10)
B1000 = RollLimits(max_bytes=1000)
BOTH = RollLimits(max_entries=10, max_bytes=1000)


def test_the_placement_table_covers_every_case() -> None:
    assert set(PLACEMENT) == set(itertools.product((False, True), repeat=3))


def test_the_roller_table_covers_every_case() -> None:
    assert set(ROLLER_STEP) == set(itertools.product((False, True), repeat=2))


@pytest.mark.parametrize("limits, entries, nbytes, size, behind, where", [
    # by entries: the 10th entry is the last one of the ledger
    (E10, 0, 0, 100, False, P.CURRENT),
    (E10, 9, 900, 100, False, P.CURRENT),
    (E10, 10, 1000, 100, False, P.ROLL_BEFORE),
    (E10, 10, 1000, 0, False, P.ROLL_BEFORE),
    # by bytes: an entry that would take the ledger past the limit waits; exactly at it fits
    (B1000, 9, 900, 100, False, P.CURRENT),
    (B1000, 9, 900, 101, False, P.ROLL_BEFORE),
    (B1000, 10, 1000, 0, False, P.CURRENT),   # an empty value adds no bytes
    (B1000, 10, 1000, 1, False, P.ROLL_BEFORE),
    # an entry larger than roll_max_bytes: a ledger of its own (this one if empty)
    (B1000, 0, 0, 5000, False, P.OWN_LEDGER),
    (B1000, 3, 30, 5000, False, P.ROLL_BEFORE),
    (BOTH, 0, 0, 1001, False, P.OWN_LEDGER),
    # either limit
    (BOTH, 9, 100, 10, False, P.CURRENT),
    (BOTH, 10, 100, 10, False, P.ROLL_BEFORE),
    (BOTH, 2, 995, 10, False, P.ROLL_BEFORE),
    # behind appends that wait: wait too, even a small one that would fit
    (BOTH, 2, 995, 1, True, P.ROLL_BEFORE),
    (E10, 0, 0, 1, True, P.ROLL_BEFORE),
    # no limits: everything goes to the current ledger
    (RollLimits(), 10**9, 10**15, 10**6, False, P.CURRENT),
    # age never holds an append back
    (RollLimits(max_age_s=1.0), 5, 50, 10, False, P.CURRENT),
])
def test_an_append_goes_to_the_current_ledger_only_if_it_keeps_it_within_every_limit(
        limits: RollLimits, entries: int, nbytes: int, size: int, behind: bool,
        where: Placement) -> None:
    assert place(limits, entries, nbytes, size, behind) is where


AGE = RollLimits(max_age_s=10.0)


@pytest.mark.parametrize("limits, entries, nbytes, age, waiting, spare, step", [
    (E10, 0, 0, 0.0, 0, False, RollerStep.WAIT),
    (E10, 4, 0, 0.0, 0, False, RollerStep.WAIT),
    (E10, 5, 0, 0.0, 0, False, RollerStep.PREPARE_SPARE),   # half-way: the spare
    (E10, 5, 0, 0.0, 0, True, RollerStep.WAIT),
    (E10, 10, 0, 0.0, 0, True, RollerStep.ROLL),            # full: roll before any append
    (E10, 10, 0, 0.0, 0, False, RollerStep.ROLL),           # (creating the ledger itself)
    (E10, 3, 0, 0.0, 1, True, RollerStep.ROLL),             # an append waits
    (B1000, 1, 499, 0.0, 0, False, RollerStep.WAIT),
    (B1000, 1, 500, 0.0, 0, False, RollerStep.PREPARE_SPARE),
    (B1000, 1, 1000, 0.0, 0, True, RollerStep.ROLL),
    (B1000, 1, 5000, 0.0, 0, True, RollerStep.ROLL),        # a ledger of its own, full
    (AGE, 0, 0, 100.0, 0, False, RollerStep.WAIT),          # an empty ledger never ages
    (AGE, 1, 10, 4.9, 0, False, RollerStep.WAIT),
    (AGE, 1, 10, 5.0, 0, False, RollerStep.PREPARE_SPARE),
    (AGE, 1, 10, 9.9, 0, True, RollerStep.WAIT),
    (AGE, 1, 10, 10.0, 0, True, RollerStep.ROLL),
    (RollLimits(), 10**9, 10**15, 10**6, 0, False, RollerStep.WAIT),
])
def test_the_roller_rolls_a_full_or_old_ledger_and_prepares_the_next_half_way(
        limits: RollLimits, entries: int, nbytes: int, age: float, waiting: int, spare: bool,
        step: RollerStep) -> None:
    assert SPARE_AT == 0.5
    assert roller_step(limits, entries, nbytes, age, waiting, spare) is step


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_appends_beyond_the_limit_wait_and_the_switch_feeds_them_in_order() -> None:
    a: LedgerAssignment[int] = LedgerAssignment(RollLimits(max_entries=3), Clock())
    where = [a.append(10, i) for i in range(8)]
    assert where == [P.CURRENT] * 3 + [P.ROLL_BEFORE] * 5
    assert a.switch() == [3, 4, 5]       # as many as fit the next ledger
    assert a.entries == 3 and [i for _, i in a.waiting] == [6, 7]
    assert a.step(1.0, has_spare=False) is RollerStep.ROLL  # at once: appends still wait
    assert a.switch() == [6, 7]
    assert a.append(10, 8) is P.CURRENT   # nothing waits any more: room for one
    assert a.append(10, 9) is P.ROLL_BEFORE
    assert a.switch() == [9] and not a.waiting


def test_the_roller_is_woken_once_per_threshold() -> None:
    a: LedgerAssignment[int] = LedgerAssignment(RollLimits(max_entries=10), Clock())
    a.arm(has_spare=False)
    woken = []
    for i in range(12):
        a.append(1, i)
        if a.wake:
            woken.append(i)
            a.disarm()
    # the 5th entry (half-way), then the first to wait for the next ledger (nobody re-armed)
    assert woken == [4, 10]
    a.arm(has_spare=True)
    assert not a.wake and a.step(0.0, True) is RollerStep.ROLL  # full, and two wait
    assert a.switch() == [10, 11] and not a.waiting
    a.arm(has_spare=True)
    for i in range(12, 20):
        a.append(1, i)
    assert a.wake   # the 10th entry of the ledger: full
    a.disarm()
    assert a.append(1, 20) is P.ROLL_BEFORE and a.wake   # the first to wait
    a.disarm()
    assert a.append(1, 21) is P.ROLL_BEFORE and not a.wake


def test_age_counts_from_the_first_entry_of_the_ledger() -> None:
    clock = Clock(100.0)
    a: LedgerAssignment[int] = LedgerAssignment(RollLimits(max_age_s=2.0), clock)
    assert a.next_age_check(100.0, False) is None   # no entry: no age
    a.append(1, 0)
    assert a.next_age_check(100.5, False) == pytest.approx(0.5)   # the spare at 1 s
    # with the spare: listed ahead LIST_AHEAD_S before the roll's 2 s; listed: the roll
    assert a.next_age_check(100.5, True) == pytest.approx(1.5 - LIST_AHEAD_S)
    assert a.next_age_check(100.5, False, listed=True) == pytest.approx(1.5)
    assert a.step(102.0, True) is RollerStep.ROLL
    clock.now = 103.0
    assert a.append(1, 1) is P.CURRENT   # age holds no append back
    assert a.switch() == [] and a.next_age_check(104.0, False) is None


def simulate(limits: RollLimits, sizes: list[int], roll_after: list[int]
             ) -> list[list[tuple[int, int]]]:
    """A writer whose rolls take ``roll_after[k]`` more appends to switch (the appends in
    flight meanwhile): the ledgers, each a list of (append index, size)."""
    a: LedgerAssignment[tuple[int, int]] = LedgerAssignment(limits, Clock())
    ledgers: list[list[tuple[int, int]]] = [[]]
    rolls = iter(roll_after)
    countdown: int | None = None

    def switch() -> None:
        ledgers.append(a.switch())

    for i, size in enumerate(sizes):
        if a.append(size, (i, size)) is not P.ROLL_BEFORE:
            ledgers[-1].append((i, size))
        if countdown is None and a.step(0.0, True) is RollerStep.ROLL:
            countdown = next(rolls, 0)  # the roller starts a roll
        if countdown is not None:
            if countdown == 0:
                switch()
                countdown = None
            else:
                countdown -= 1
    while a.waiting:  # close: roll until every waiting append has a ledger
        switch()
    return ledgers


@settings(max_examples=300, deadline=None)
@given(max_entries=st.one_of(st.none(), st.integers(1, 20)),
       max_bytes=st.one_of(st.none(), st.integers(1, 500)),
       sizes=st.lists(st.integers(0, 700), max_size=300),
       roll_after=st.lists(st.integers(0, 400), max_size=40))
def test_no_ledger_exceeds_a_limit_and_the_log_keeps_append_order_whatever_is_in_flight(
        max_entries: int | None, max_bytes: int | None, sizes: list[int],
        roll_after: list[int]) -> None:
    limits = RollLimits(max_entries, max_bytes)
    ledgers = simulate(limits, sizes, roll_after)
    assert [i for ledger in ledgers for i, _ in ledger] == list(range(len(sizes)))
    for ledger in ledgers:
        if max_entries is not None:
            assert len(ledger) <= max_entries
        if max_bytes is not None and sum(s for _, s in ledger) > max_bytes:
            assert len(ledger) == 1  # only an entry larger than the limit, alone
    assert all(ledgers[:-1])  # only the last ledger may be empty (rolled when full)


@settings(max_examples=300, deadline=None)
@given(max_entries=st.one_of(st.none(), st.integers(1, 5)),
       max_bytes=st.one_of(st.none(), st.integers(0, 50)),
       sizes=st.lists(st.integers(0, 60), max_size=40),
       switch_at=st.sets(st.integers(0, 40)))
def test_an_assignment_places_every_append_as_the_table_says(
        max_entries: int | None, max_bytes: int | None, sizes: list[int],
        switch_at: set[int]) -> None:
    """LedgerAssignment.append (with its inline common case) agrees with :func:`place`."""
    limits = RollLimits(max_entries, max_bytes)
    a: LedgerAssignment[int] = LedgerAssignment(limits, Clock())
    for i, size in enumerate(sizes):
        if i in switch_at:
            a.switch()
        expected = place(limits, a.entries, a.nbytes, size, bool(a.waiting))
        assert a.append(size, i) is expected


def test_a_ledger_filling_fast_lists_the_next_one_ahead_and_rolls_when_full() -> None:
    """Issue 28: with the spare ready, the roll's CAS runs once the ledger would be full
    within LIST_AHEAD_S at its rate; the roll itself (the switch) still waits until it is
    full, so ledgers fill to the limit as before."""
    clock = Clock(0.0)
    a: LedgerAssignment[int] = LedgerAssignment(RollLimits(max_entries=10_000), clock)
    for i in range(5_000):  # 5,000 entries in 0.1 s: 50,000/s, 1,500 per LIST_AHEAD_S
        clock.now = i * 2e-5
        a.append(1, i)
    now = clock.now
    assert a.step(now, has_spare=False) is RollerStep.PREPARE_SPARE
    assert a.step(now, has_spare=True) is RollerStep.WAIT  # 5,000 left: 0.1 s away
    a.arm(has_spare=True, now=now)
    i = 5_000
    while not a.wake:
        clock.now = i * 2e-5
        a.append(1, i)
        i += 1
    assert 10_000 - 1_600 < a.entries < 10_000 - 1_400   # woken ~30 ms before full
    a.disarm()
    assert a.step(clock.now, has_spare=True) is RollerStep.LIST_NEXT
    a.arm(has_spare=False, listed=True, now=clock.now)
    assert a.step(clock.now, has_spare=False, listed=True) is RollerStep.WAIT
    while not a.wake:
        clock.now = i * 2e-5
        a.append(1, i)
        i += 1
    assert a.entries == 10_000   # full: the roll (the switch) is due, not earlier
    assert a.step(clock.now, has_spare=False, listed=True) is RollerStep.ROLL
    assert a.append(1, 10_000) is P.ROLL_BEFORE


def test_a_slow_ledger_is_not_listed_ahead() -> None:
    """Fewer than one entry per LIST_AHEAD_S: its roll is the CAS and the switch, when
    full; listing ahead needs a spare."""
    assert list_ahead_margin(100, 100, 10.0, LIST_AHEAD_S) == (0, pytest.approx(0.3))
    limits = RollLimits(max_entries=101)
    assert not list_ahead_due(limits, 100, 100, 10.0)
    assert list_ahead_due(RollLimits(max_entries=101), 100, 100, 1.0)  # 3 per 30 ms
    assert list_ahead_due(RollLimits(max_bytes=1_000), 10, 990, 1.0)   # 29.7 bytes
    assert list_ahead_due(RollLimits(max_age_s=1.0), 1, 1, 1.0 - LIST_AHEAD_S)
    assert not list_ahead_due(RollLimits(max_age_s=1.0), 1, 1, 0.9)
    clock = Clock(0.0)
    a: LedgerAssignment[int] = LedgerAssignment(RollLimits(max_entries=10), clock)
    for i in range(9):
        a.append(1, i)
    clock.now = 1.0
    assert a.step(1.0, has_spare=False) is RollerStep.PREPARE_SPARE
    assert a.step(1.0, has_spare=True) is RollerStep.WAIT


def test_a_burst_is_not_listed_ahead_and_a_listed_ledger_is_switched_to_after_a_while(
        ) -> None:
    """A burst's rate says little about the rest: more than LIST_AHEAD_SHARE of the limit
    left, no listing ahead; a listed ledger whose predecessor stopped filling is switched
    to SWITCH_AFTER_S later (the ledger ends below its limit, as a limit allows)."""
    assert not list_ahead_due(RollLimits(max_entries=100), 60, 60, 0.005)  # 40 left
    assert list_ahead_due(RollLimits(max_entries=100), 85, 85, 0.005)      # 15 left
    clock = Clock(0.0)
    a: LedgerAssignment[int] = LedgerAssignment(RollLimits(max_entries=100), clock)
    for i in range(85):
        a.append(1, i)
    a.listed_at = 0.01
    assert a.step(0.5, has_spare=False, listed=True) is RollerStep.WAIT
    assert a.next_age_check(0.5, False, listed=True) == pytest.approx(SWITCH_AFTER_S - 0.49)
    assert a.step(0.01 + SWITCH_AFTER_S, has_spare=False, listed=True) is RollerStep.ROLL
    assert a.switch() == [] and a.listed_at is None


def test_listing_ahead_by_bytes_alone_wakes_the_roller_before_the_byte_limit() -> None:
    clock = Clock(0.0)
    a: LedgerAssignment[int] = LedgerAssignment(RollLimits(max_bytes=100_000), clock)
    for i in range(500):  # 100 bytes every 0.1 ms: 30,000 bytes per LIST_AHEAD_S
        clock.now = i * 1e-4
        a.append(100, i)
    a.arm(has_spare=True, now=clock.now)
    i = 500
    while not a.wake:
        clock.now = i * 1e-4
        a.append(100, i)
        i += 1
    assert a.nbytes == 80_000  # capped: LIST_AHEAD_SHARE of the limit before it
    assert a.step(clock.now, has_spare=True) is RollerStep.LIST_NEXT


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 300), max_size=60), st.integers(1, 20),
       st.integers(100, 2_000))
def test_take_is_append_for_every_append_that_fits_while_nothing_waits(
        sizes: list[int], max_entries: int, max_bytes: int) -> None:
    """The writer's hot path (take, else append) places and counts as append alone."""
    limits = RollLimits(max_entries=max_entries, max_bytes=max_bytes)
    fast: LedgerAssignment[int] = LedgerAssignment(limits, Clock())
    slow: LedgerAssignment[int] = LedgerAssignment(limits, Clock())
    fast.arm(has_spare=True)
    slow.arm(has_spare=True)
    for i, size in enumerate(sizes):
        took = fast.take(size)
        where = P.CURRENT if took else fast.append(size, i)
        expected = slow.append(size, i)
        assert (where is P.ROLL_BEFORE) == (expected is P.ROLL_BEFORE)
        assert (fast.entries, fast.nbytes, list(fast.waiting), fast.wake) == (
            slow.entries, slow.nbytes, list(slow.waiting), slow.wake)
        if took:
            assert expected is P.CURRENT


def test_closing_the_ledger_an_append_switched_from_comes_before_any_other_step() -> None:
    """Issue 28: an append switches to a ledger listed ahead itself; the roller closes the
    previous ledger (step 4) before anything else, full, aged or spare-due as the new one
    may be, so no later ledger is listed while an earlier one is still open."""
    a: LedgerAssignment[int] = LedgerAssignment(E10, lambda: 0.0)
    for _ in range(10):
        a.append(1, 0)
    a.append(1, 1)  # waits: the next ledger is due
    for has_spare, listed in itertools.product((False, True), repeat=2):
        assert a.step(100.0, has_spare, listed) is not RollerStep.CLOSE_PREVIOUS
        assert a.step(100.0, has_spare, listed, unclosed=True) is RollerStep.CLOSE_PREVIOUS
    a.switch()
    assert a.step(0.0, False, False, unclosed=True) is RollerStep.CLOSE_PREVIOUS
    assert a.step(0.0, False, False) is RollerStep.WAIT
