"""AutoRecovery's pure decisions: affected fragments, entries per bookie, worker actions."""

from __future__ import annotations

import pytest

from bk_spark.protocol.ledger_metadata import LedgerMetadata, LedgerState
from bk_spark.protocol.placement import Topology
from bk_spark.protocol.recovery_plan import (
    FRAGMENT_ACTIONS,
    FragmentAction,
    FragmentDuty,
    UnderReplicated,
    affected_fragments,
    entries_on_index,
    first_missing,
    fragment_action,
    fragment_duties,
    fragment_spans,
    healed_bookies,
    replacement_exclusions,
    unplaceable,
)

A, B, C, D, E_, F = (f"b{i}:1" for i in range(6))


def _md(state=LedgerState.CLOSED, last=9, E=3, Qw=2, fragments=((0, (A, B, C)), (5, (A, D, C)))):
    return LedgerMetadata(ledger_id=7, ensemble_size=E, write_quorum_size=Qw, ack_quorum_size=2,
                          ensembles=fragments, state=state, last_entry_id=last)


@pytest.mark.parametrize("state, last, spans", [
    (LedgerState.CLOSED, 9, [(0, 4, False), (5, 9, True)]),
    (LedgerState.CLOSED, 4, [(0, 4, False), (5, 4, True)]),     # last fragment empty
    (LedgerState.OPEN, -1, [(0, 4, False), (5, None, True)]),   # open-ended while OPEN
    (LedgerState.IN_RECOVERY, -1, [(0, 4, False), (5, None, True)]),
])
def test_a_fragment_ends_where_the_next_starts_and_the_last_at_the_closed_ledgers_end(
        state, last, spans):
    got = [(s.first, s.last, s.is_last) for s in fragment_spans(_md(state, last))]
    assert got == spans


@pytest.mark.parametrize("first, last, index, E, Qw, expected", [
    (0, 7, 0, 4, 3, [0, 2, 3, 4, 6, 7]),   # the seed's E=4, Qw=3 table
    (0, 7, 1, 4, 3, [0, 1, 3, 4, 5, 7]),
    (0, 5, 2, 3, 2, [1, 2, 4, 5]),
    (5, 9, 0, 3, 3, [5, 6, 7, 8, 9]),      # Qw = E: every bookie holds every entry
    (5, 4, 0, 3, 2, []),                   # empty fragment
])
def test_a_bookie_holds_exactly_the_entries_whose_write_set_names_its_index(
        first, last, index, E, Qw, expected):
    assert entries_on_index(first, last, index, E, Qw) == expected


def test_every_fragment_naming_a_missing_bookie_is_affected_at_its_index():
    got = [(a.span.first, a.index, a.bookie) for a in affected_fragments(_md(), {A, D})]
    assert got == [(0, 0, A), (5, 0, A), (5, 1, D)]
    assert affected_fragments(_md(), {E_}) == []


def test_the_entries_each_bookie_must_hold_cover_closed_fragments_only():
    # fragment 0..4 on (A, B, C), 5..9 on (A, D, C); E=3 Qw=2: e -> {e%3, e%3+1}
    assert fragment_duties(_md()) == [
        FragmentDuty(A, 0, 0, 4), FragmentDuty(B, 1, 0, 4), FragmentDuty(C, 2, 0, 4),
        FragmentDuty(A, 0, 5, 9), FragmentDuty(D, 1, 5, 9), FragmentDuty(C, 2, 5, 9)]
    # while OPEN the last fragment is open-ended: only 0..4 counts
    assert [d.first for d in fragment_duties(_md(LedgerState.OPEN, -1))] == [0, 0, 0]
    # a ledger closed empty expects nothing of anyone
    assert fragment_duties(_md(last=-1, fragments=((0, (A, B, C)),))) == []


def test_a_gap_in_the_middle_of_a_fragment_is_found_not_only_a_short_end():
    # E=3, Qw=2, fragment 0..9, index 0 holds 0, 2, 3, 5, 6, 8, 9
    duty = FragmentDuty(A, 0, 0, 9)
    assert first_missing(duty, 3, 2, [(0, 9)]) is None
    assert first_missing(duty, 3, 2, [(0, 0), (2, 3), (5, 6), (8, 9)]) is None
    assert first_missing(duty, 3, 2, [(0, 3), (6, 9)]) == 5     # the highest entry is there
    assert first_missing(duty, 3, 2, [(0, 8)]) == 9
    assert first_missing(duty, 3, 2, []) == 0
    assert first_missing(FragmentDuty(B, 1, 0, 9), 3, 2, [(0, 0), (2, 9)]) == 1


def test_only_a_still_open_ledgers_last_fragment_waits_for_its_writer():
    assert set(FRAGMENT_ACTIONS) == {(s, last, idle) for s in LedgerState
                                     for last in (False, True) for idle in (False, True)}
    for (state, is_last, idle), action in FRAGMENT_ACTIONS.items():
        if state == LedgerState.CLOSED or not is_last:
            assert action == FragmentAction.COPY
        else:
            assert action == (FragmentAction.RECOVER_FIRST if idle else FragmentAction.DEFER)
    assert fragment_action(LedgerState.OPEN, True, True) == FragmentAction.RECOVER_FIRST


def test_replacing_a_bookie_changes_only_that_fragment_and_index():
    md = _md()
    new = md.with_fragment_bookie_replaced(5, 1, D, E_)
    assert new.ensembles == ((0, (A, B, C)), (5, (A, E_, C)))
    assert new.state == md.state and new.last_entry_id == md.last_entry_id
    with pytest.raises(ValueError):
        md.with_fragment_bookie_replaced(5, 1, B, E_)   # B is not at index 1 of fragment 5
    with pytest.raises(ValueError):
        md.with_fragment_bookie_replaced(3, 0, A, E_)   # no fragment starts at 3
    with pytest.raises(Exception, match="same bookie twice"):
        md.with_fragment_bookie_replaced(5, 1, D, A)


def test_an_under_replication_record_merges_and_removes_missing_bookies():
    r = UnderReplicated(7, frozenset({A}), 5).with_missing([B, A])
    assert r.missing == {A, B}
    assert UnderReplicated.from_bytes(7, r.to_bytes()) == r
    assert r.without([A, C]).missing == {B}
    assert UnderReplicated.from_bytes(7, b"garbage").missing == frozenset()


def test_a_closed_fragment_on_one_rack_names_a_bookie_to_move_and_a_good_one_none():
    from bk_spark.protocol.placement import Topology
    from bk_spark.protocol.recovery_plan import placement_misfits

    racks = {A: "/r/0", B: "/r/0", C: "/r/0", D: "/r/1", E_: "/r/1", F: "/r/2"}
    topo = Topology((A, B, C, D, E_, F), racks)
    bad = _md(fragments=((0, (A, B, C)), (5, (A, D, F))))   # fragment 0 all on rack 0
    assert len(placement_misfits(bad, topo)) == 1
    assert placement_misfits(bad, topo) <= {A, B, C}
    good = _md(fragments=((0, (A, D, F)),))
    assert placement_misfits(good, topo) == set()
    # the writer's open-ended fragment is left alone
    assert placement_misfits(_md(LedgerState.OPEN, -1, fragments=((0, (A, B, C)),)), topo) == set()
    # one rack: nothing ever breaks the policy (as today)
    one = Topology((A, B, C, D), {})
    assert placement_misfits(bad, one) == set()


def test_re_replication_uses_the_candidate_password_whose_digest_the_metadata_keeps():
    from dataclasses import replace

    from bk_spark.autorecovery.replicator import ledger_password
    from bk_spark.errors import UnauthorizedError
    from bk_spark.protocol.digest import password_digest

    md = replace(_md(), password_digest=password_digest(b"s3cret"))
    assert ledger_password(md, [b"", b"s3cret"]) == b"s3cret"
    assert ledger_password(replace(md, password_digest=password_digest(b"")), [b""]) == b""
    with pytest.raises(UnauthorizedError, match="--recovery-password"):
        ledger_password(md, [b"", b"other"])


def test_a_copy_is_unplaceable_only_when_no_writable_bookie_is_outside_its_fragment():
    """Fault seed 28001: E=4 of the 4 writable bookies left (E died for good); the fragment
    lacks copies on B. No bookie outside the ensemble: re-replication cannot move them.
    One more writable bookie, and it can."""
    md = _md(E=4, Qw=3, fragments=((0, (A, B, C, D)),))
    assert unplaceable(md, {B}, Topology((A, B, C, D))) == {B}
    assert unplaceable(md, {B}, Topology((A, B, C, D, E_))) == set()
    # a writable bookie short of other copies is still a place for these
    assert unplaceable(md, {B, C}, Topology((A, B, C, D, E_))) == set()
    assert unplaceable(md, {B, E_}, Topology((A, B, C, D, E_))) == set()
    assert unplaceable(md, {B, C}, Topology((A, B, C, D))) == {B, C}
    # a readonly (not writable) bookie is no candidate either
    assert unplaceable(md, {B}, Topology((A, C, D))) == {B}
    # a bookie the ledger no longer names is nothing to place
    assert unplaceable(md, {E_}, Topology((A, B, C, D))) == set()


def test_a_replacement_excludes_only_the_bookie_it_replaces_besides_the_ensemble():
    """BookKeeper's replicateLedgerFragment: only the fragment's own bookies to re-replicate
    are excluded (placement never picks one of the ensemble); a live bookie short of
    another fragment's copies may take this fragment's."""
    md = _md(fragments=((0, (A, C, D)), (5, (B, C, D))))
    first, second = affected_fragments(md, {A, B})
    assert replacement_exclusions(first) == {A}
    assert replacement_exclusions(second) == {B}
    topology = Topology((A, B, C, D))
    assert topology.replace_bookie(first.span.ensemble, first.index, 2,
                                   exclude=replacement_exclusions(first)) == B
    assert topology.replace_bookie(second.span.ensemble, second.index, 2,
                                   exclude=replacement_exclusions(second)) == A


def test_where_re_replication_put_a_bookie_it_is_full_and_one_named_only_there_is_healed():
    md = _md(fragments=((0, (B, C, D)), (5, (A, C, D))))
    assert [(af.span.first, af.bookie) for af in affected_fragments(md, {A, B})] == \
        [(0, B), (5, A)]
    assert [(af.span.first, af.bookie)
            for af in affected_fragments(md, {A, B}, placed={(0, B)})] == [(5, A)]
    assert healed_bookies(md, {A, B}, placed={(0, B)}) == {B}
    assert healed_bookies(md, {A, B}, placed={(0, B), (5, A)}) == {A, B}
    assert healed_bookies(md, {A, B, E_}) == {E_}  # named nowhere: nothing short
    assert healed_bookies(md, {C}, placed={(0, C)}) == set()  # still short in fragment 5


def test_two_live_bookies_short_of_copies_each_the_others_only_candidate_both_heal():
    """Long fault seed 35, ledger 583: E = 3 on 4 live bookies; fragment 0 = [A, C, D] is
    short on A, fragment 5 = [B, C, D] on B. Excluding every missing bookie, neither had a
    candidate (unplaceable said so); with BookKeeper's exclusions each takes the other's
    place and the ledger heals with no bookie added."""
    md = _md(fragments=((0, (A, C, D)), (5, (B, C, D))))
    topology = Topology((A, B, C, D))
    missing = {A, B}
    assert unplaceable(md, missing, topology) == set()
    placed: set[tuple[int, str]] = set()
    for _ in range(10):  # the replicator's rounds, decisions only
        todo = affected_fragments(md, missing - healed_bookies(md, missing, placed), placed)
        if not todo:
            break
        for af in todo:
            current = dict(md.ensembles)[af.span.first]
            if current[af.index] != af.bookie:
                continue
            target = topology.replace_bookie(current, af.index, md.write_quorum_size,
                                             exclude=replacement_exclusions(af))
            md = md.with_fragment_bookie_replaced(af.span.first, af.index, af.bookie, target)
            placed.add((af.span.first, target))
    assert healed_bookies(md, missing, placed) == {A, B}
    assert md.ensembles == ((0, (B, C, D)), (5, (A, C, D)))
