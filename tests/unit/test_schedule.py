"""The distribution schedule, quorum coverage and recovery read-forward, from the seed's tables."""

from __future__ import annotations

from itertools import combinations

import pytest

from bk_spark.errors import InvalidConfigError
from bk_spark.protocol.schedule import (
    QuorumCoverageSet,
    RecoveryDecision,
    RecoveryReadTally,
    in_write_set,
    write_quorums,
    write_set,
)

# The seed's table: E=4, Qw=3, ensemble B1..B4 -> indexes 0..3.
SEED_WRITE_QUORUMS = {
    0: ["B1", "B2", "B3"],
    1: ["B2", "B3", "B4"],
    2: ["B3", "B4", "B1"],
    3: ["B4", "B1", "B2"],
    4: ["B1", "B2", "B3"],
    5: ["B2", "B3", "B4"],
}


@pytest.mark.parametrize("entry_id,bookies", SEED_WRITE_QUORUMS.items())
def test_write_quorum_starts_at_entry_id_mod_ensemble_size(entry_id, bookies):
    ensemble = ["B1", "B2", "B3", "B4"]
    assert [ensemble[i] for i in write_set(entry_id, 4, 3)] == bookies


def test_there_are_only_ensemble_size_distinct_write_quorums():
    assert len({tuple(write_set(e, 4, 3)) for e in range(100)}) == 4
    assert write_quorums(4, 3) == [[0, 1, 2], [1, 2, 3], [2, 3, 0], [3, 0, 1]]


def test_write_quorum_equal_to_ensemble_means_no_striping():
    assert {tuple(write_set(e, 3, 3)) for e in range(10)} == {(0, 1, 2), (1, 2, 0), (2, 0, 1)}
    assert write_quorums(3, 3) == [[0, 1, 2]]


def test_in_write_set_agrees_with_write_set():
    for e_size, qw in ((1, 1), (3, 2), (4, 3), (5, 5), (7, 3)):
        for entry_id in range(2 * e_size):
            members = set(write_set(entry_id, e_size, qw))
            for i in range(e_size):
                assert in_write_set(entry_id, i, e_size, qw) == (i in members)


def test_write_set_rejects_a_write_quorum_larger_than_the_ensemble():
    with pytest.raises(ValueError):
        write_set(0, 2, 3)
    with pytest.raises(ValueError):
        write_set(-1, 3, 2)


# -- quorum coverage ((Qw - Qa) + 1 bookies of every write quorum) ---------------------------


def covering_subsets(e_size, qw, qa):
    out = set()
    for n in range(e_size + 1):
        for subset in combinations(range(e_size), n):
            cover = QuorumCoverageSet(e_size, qw, qa)
            for i in subset:
                cover.add(i)
            if cover.covered():
                out.add(subset)
    return out


def test_coverage_e3_qw2_qa2_needs_one_bookie_of_each_write_quorum():
    # Write quorums {0,1} {1,2} {2,0}: one answer from each means any two bookies.
    minimal = {s for s in covering_subsets(3, 2, 2) if len(s) <= 2}
    assert minimal == {(0, 1), (0, 2), (1, 2)}


def test_coverage_e4_qw3_qa2_needs_two_bookies_of_each_write_quorum():
    covering = covering_subsets(4, 3, 2)
    assert (0, 2) not in covering and (1, 3) not in covering  # {1,2,3} sees only one
    assert all(len(s) >= 3 for s in covering)
    assert {s for s in covering if len(s) == 3} == set(combinations(range(4), 3))


def test_coverage_with_qa_equal_qw_needs_a_single_bookie_per_write_quorum():
    # E=4, Qw=Qa=2: quorums {0,1} {1,2} {2,3} {3,0}: {0,2} and {1,3} hit all of them.
    covering = covering_subsets(4, 2, 2)
    assert (0, 2) in covering and (1, 3) in covering and (0, 1) not in covering


def test_coverage_with_qa_one_needs_every_bookie_of_every_write_quorum():
    assert covering_subsets(3, 3, 1) == {(0, 1, 2)}


def test_coverage_ignores_failed_bookies_and_reports_when_it_can_never_be_reached():
    cover = QuorumCoverageSet(3, 2, 2)
    cover.error(0)
    cover.add(1)
    assert not cover.covered() and not cover.cannot_cover()
    cover.error(2)  # write quorum {2, 0}: both failed, Qa=2 of them
    assert cover.cannot_cover()


def test_coverage_rejects_invalid_quorums_and_indexes():
    with pytest.raises(InvalidConfigError):
        QuorumCoverageSet(2, 3, 2)
    with pytest.raises(ValueError):
        QuorumCoverageSet(3, 2, 2).add(3)


# -- recovery read-forward ----------------------------------------------------------------


def test_entry_is_absent_once_qw_minus_qa_plus_one_bookies_lack_it():
    tally = RecoveryReadTally(3, 2)  # absent needs (3 - 2) + 1 = 2 NoSuchEntry answers
    tally.missing(0)
    assert tally.decision() == RecoveryDecision.PENDING
    tally.missing(0)  # the same bookie twice counts once
    assert tally.decision() == RecoveryDecision.PENDING
    tally.missing(1)
    assert tally.decision() == RecoveryDecision.ABSENT


def test_entry_found_on_any_bookie_is_recovered():
    tally = RecoveryReadTally(3, 2)
    tally.missing(0)
    tally.found()
    assert tally.decision() == RecoveryDecision.FOUND


def test_recovery_cannot_decide_when_errors_hide_the_entry():
    tally = RecoveryReadTally(3, 2)
    tally.missing(0)
    tally.error(1)
    assert tally.decision() == RecoveryDecision.PENDING
    tally.error(2)
    assert tally.decision() == RecoveryDecision.UNKNOWN


def test_decisions_are_reachable_on_the_tally_class():
    assert RecoveryReadTally.FOUND is RecoveryDecision.FOUND
    assert RecoveryReadTally.ABSENT is RecoveryDecision.ABSENT
    assert RecoveryReadTally.PENDING is RecoveryDecision.PENDING
    assert RecoveryReadTally.UNKNOWN is RecoveryDecision.UNKNOWN


def test_with_qa_equal_qw_one_missing_bookie_proves_absence():
    tally = RecoveryReadTally(2, 2)
    tally.missing(1)
    assert tally.decision() == RecoveryDecision.ABSENT


def test_fencing_example_entry_12_half_written_is_recovered_and_13_ends_the_ledger():
    """The seed's figure: E=3, Qw=2 (Qa=2); entries 0-11 acknowledged, 12 on one bookie."""
    e_size, qw, qa = 3, 2, 2
    stored = {i: set(range(12)) for i in range(3)}
    for i in write_set(12, e_size, qw):
        stored[i].add(12)
        break  # entry 12 reached only the first bookie of its write quorum
    lac_seen = {0: 10, 1: 11, 2: 11}  # the last-add-confirmed each bookie saw

    # Step 2: fence and read the LAC until every write quorum is covered.
    cover = QuorumCoverageSet(e_size, qw, qa)
    lacs = []
    for i in (1, 2):
        cover.add(i)
        lacs.append(lac_seen[i])
    assert cover.covered()

    # Step 3: read forward from the highest LAC + 1 until an entry is absent.
    entry_id = max(lacs) + 1
    assert entry_id == 12
    while True:
        tally = RecoveryReadTally(qw, qa)
        for i in write_set(entry_id, e_size, qw):
            if entry_id in stored[i]:
                tally.found()
            else:
                tally.missing(i)
        decision = tally.decision()
        if decision != RecoveryDecision.FOUND:
            break
        for i in write_set(entry_id, e_size, qw):  # write it back to its whole write quorum
            stored[i].add(entry_id)
        entry_id += 1
    assert decision == RecoveryDecision.ABSENT
    assert entry_id - 1 == 12  # the ledger closes with entry 12 as its last entry
