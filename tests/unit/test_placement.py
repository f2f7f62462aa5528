"""Ensemble placement."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from bk_spark.errors import NotEnoughBookiesError
from bk_spark.protocol.placement import choose_ensemble, replace_bookie

BOOKIES = [f"127.0.0.1:{3181 + i}" for i in range(6)]


def test_an_ensemble_has_ensemble_size_distinct_available_bookies():
    for seed in range(50):
        ensemble = choose_ensemble(BOOKIES + BOOKIES[:2], 4, rng=random.Random(seed))
        assert len(ensemble) == len(set(ensemble)) == 4
        assert set(ensemble) <= set(BOOKIES)


def test_random_ensembles_spread_ledgers_across_all_bookies():
    rng = random.Random(1)
    counts = Counter(b for _ in range(600) for b in choose_ensemble(BOOKIES, 3, rng=rng))
    assert set(counts) == set(BOOKIES)
    assert min(counts.values()) > 200  # 300 expected per bookie


def test_excluded_bookies_are_never_chosen():
    ensemble = choose_ensemble(BOOKIES, 5, exclude=[BOOKIES[0]], rng=random.Random(3))
    assert BOOKIES[0] not in ensemble


def test_too_few_bookies_says_how_many_are_needed_and_what_to_do():
    with pytest.raises(
        NotEnoughBookiesError,
        match="need 3 writable bookies, 2 registered: start more bookies or lower ensembleSize",
    ):
        choose_ensemble(BOOKIES[:2], 3)
    with pytest.raises(NotEnoughBookiesError, match="1 of them excluded"):
        choose_ensemble(BOOKIES[:3], 3, exclude=[BOOKIES[1]])


def test_a_replacement_is_never_already_in_the_ensemble():
    ensemble = BOOKIES[:3]
    for seed in range(30):
        new = replace_bookie(ensemble, 1, BOOKIES, exclude=[BOOKIES[4]], rng=random.Random(seed))
        assert new in (BOOKIES[3], BOOKIES[5])


def test_no_replacement_left_raises_not_enough_bookies():
    with pytest.raises(NotEnoughBookiesError, match="no writable bookie left to replace"):
        replace_bookie(BOOKIES[:3], 0, BOOKIES[:3])
    with pytest.raises(ValueError):
        replace_bookie(BOOKIES[:3], 3, BOOKIES)


# -- rack awareness (BookKeeper's RackawareEnsemblePlacementPolicy) -------------------------

from bk_spark.protocol.placement import Topology, write_quorum_racks  # noqa: E402

SIX = [f"10.0.0.{i}:3181" for i in range(6)]
THREE_RACKS = {b: f"/r/rack-{i // 2}" for i, b in enumerate(SIX)}  # 3 racks x 2 bookies


@pytest.mark.parametrize("E, Qw", [(3, 2), (3, 3), (4, 2), (5, 2), (5, 3), (6, 2), (6, 3)])
def test_every_write_quorum_spans_at_least_two_racks_when_three_exist(E, Qw):
    topo = Topology(tuple(SIX), THREE_RACKS)
    for seed in range(40):
        ensemble = topo.choose_ensemble(E, Qw, rng=random.Random(seed))
        assert len(set(ensemble)) == E
        assert min(write_quorum_racks(ensemble, Qw, THREE_RACKS)) >= 2, ensemble


def test_the_minimum_number_of_racks_per_write_quorum_is_configurable():
    topo = Topology(tuple(SIX), THREE_RACKS, min_racks_per_write_quorum=3)
    for seed in range(40):
        ensemble = topo.choose_ensemble(3, 3, rng=random.Random(seed))
        assert write_quorum_racks(ensemble, 3, THREE_RACKS) == [3, 3, 3]


def test_a_replacement_keeps_the_write_quorums_on_several_racks():
    topo = Topology(tuple(SIX), THREE_RACKS)
    ensemble = [SIX[0], SIX[2], SIX[4]]  # racks 0, 1, 2
    for seed in range(40):
        new = topo.replace_bookie(ensemble, 1, 2, exclude=[SIX[2]], rng=random.Random(seed))
        assert new == SIX[3]  # the other bookie of rack 1: the only rack new to both quorums
    with pytest.raises(NotEnoughBookiesError):
        Topology(tuple(SIX[:3]), THREE_RACKS).replace_bookie(SIX[:3], 0, 2)


def test_with_one_rack_placement_is_the_uniform_random_choice_it_always_was():
    one_rack = {b: "/default-region/default-rack" for b in BOOKIES}
    for seed in range(20):
        assert (Topology(tuple(BOOKIES), one_rack).choose_ensemble(4, 2, rng=random.Random(seed))
                == random.Random(seed).sample(BOOKIES, 4))
        assert (choose_ensemble(BOOKIES, 4, rng=random.Random(seed))
                == random.Random(seed).sample(BOOKIES, 4))


def test_with_too_few_racks_the_best_spread_is_still_an_ensemble():
    two_racks = {b: ("/r/a" if i == 0 else "/r/b") for i, b in enumerate(SIX)}
    ensemble = Topology(tuple(SIX), two_racks).choose_ensemble(5, 2, rng=random.Random(3))
    assert len(set(ensemble)) == 5
    assert SIX[0] in ensemble  # the lone bookie of rack a is used to spread quorums
