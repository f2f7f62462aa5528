"""Ensemble placement."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from bk_spark.core.placement import choose_ensemble, replace_bookie
from bk_spark.errors import NotEnoughBookiesError

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
