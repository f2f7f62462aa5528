"""Fault schedules: reproducible from their seed and inside BookKeeper's fault model."""

from __future__ import annotations

import math

import pytest

from bk_spark.faults.plan import (
    DAMAGING_KINDS,
    GENERAL_KINDS,
    HEALING_KINDS,
    LONG_ONLY_KINDS,
    NETWORK_KINDS,
    NETWORK_SCHEDULE_KINDS,
    SHORT_MODE_SEEDS,
    UNAVAILABLE_KINDS,
    WIPING_KINDS,
    FaultKind,
    generate,
)

SEEDS = range(0, 300)


def test_the_same_seed_always_yields_the_same_schedule() -> None:
    for seed in (0, 1, 1234, 987_654):
        assert generate(seed, "long") == generate(seed, "long")
        assert generate(seed, "short") == generate(seed, "short")
    assert generate(1, "long") != generate(2, "long")


def test_the_short_mode_seeds_inject_every_kind_of_fault() -> None:
    kinds = {f.kind for seed in SHORT_MODE_SEEDS for f in generate(seed, "short").faults}
    assert kinds == set(GENERAL_KINDS) | (HEALING_KINDS - LONG_ONLY_KINDS)


def test_the_long_schedules_wipe_bookies_of_qw_equal_qa_writers_too() -> None:
    """Self-repair (issue 26) makes a wipe safe for every quorum: the long schedules wipe
    bookies under writers with Qw = Qa as well, and draw every wiping kind."""
    seen_equal, kinds = False, set()
    for seed in SEEDS:
        s = generate(seed, "long")
        wiped = {f.kind for f in s.faults if f.kind in WIPING_KINDS}
        kinds |= wiped
        if wiped and any(w.write_quorum == w.ack_quorum
                         for w in (*s.ledger_writers, *s.log_writers)):
            seen_equal = True
    assert seen_equal and kinds == WIPING_KINDS


@pytest.mark.parametrize("mode", ["short", "long"])
def test_only_the_damaged_bookie_loses_or_corrupts_copies(mode: str) -> None:
    for seed in SEEDS:
        s = generate(seed, mode)  # type: ignore[arg-type]
        for f in s.faults:
            if f.kind in DAMAGING_KINDS:
                assert f.target == f"bookie-{s.damaged_bookie}", s.describe()


@pytest.mark.parametrize("mode", ["short", "long"])
def test_at_most_two_bookies_are_unavailable_and_each_victim_has_one_fault_at_a_time(
        mode: str) -> None:
    for seed in SEEDS:
        s = generate(seed, mode)  # type: ignore[arg-type]
        spans = [(f.at, f.at + max(f.duration, 0.05), f) for f in s.faults]
        for a0, a1, fa in spans:
            down = [f for b0, b1, f in spans
                    if f.kind in UNAVAILABLE_KINDS and b0 <= a0 < b1]
            assert len(down) <= 2, s.describe()
            for b0, b1, fb in spans:
                if fb is not fa and fb.target == fa.target:
                    assert a1 <= b0 or b1 <= a0, s.describe()


def test_every_quorum_keeps_an_intact_copy_when_one_bookie_is_damaged() -> None:
    for seed in SEEDS:
        s = generate(seed, "long")
        for w in (*s.ledger_writers, *s.log_writers):
            assert w.ack_quorum >= 2 and w.ensemble >= w.write_quorum >= w.ack_quorum


def test_faults_that_last_forever_are_the_ones_healed_after_the_check() -> None:
    for seed in SEEDS:
        for f in generate(seed, "short").faults:
            assert math.isinf(f.duration) == (f.kind in (FaultKind.BOOKIE_KILL_FOREVER,
                                                         FaultKind.BOOKIE_DISK_FULL,
                                                         FaultKind.BOOKIE_LOST))


@pytest.mark.parametrize("mode", ["short", "long"])
def test_every_spark_schedule_has_the_log_writer_the_sink_reads(mode: str) -> None:
    """The Spark sink reads the log of writer G0 (seed 1049 once had only dueling writers
    and crashed the whole make-faults run)."""
    for seed in [*SEEDS, 1049]:
        s = generate(seed, mode, spark=True)  # type: ignore[arg-type]
        assert any(g.name == "G0" for g in s.log_writers), s.describe()


def test_network_schedules_inject_every_network_fault_in_any_six_consecutive_seeds() -> None:
    for first in (0, 7, 1000):
        seeds = range(first, first + len(NETWORK_KINDS))
        scheds = [generate(seed, "long", network=True) for seed in seeds]
        assert {f.kind for s in scheds for f in s.faults} >= set(NETWORK_KINDS)
        for s in scheds:
            assert s.network and not s.spark
            assert {f.kind for f in s.faults} <= set(NETWORK_SCHEDULE_KINDS)


def test_default_schedules_never_draw_a_network_fault() -> None:
    for seed in SEEDS:
        for mode in ("short", "long"):
            assert not {f.kind for f in generate(seed, mode).faults} & set(NETWORK_KINDS)
