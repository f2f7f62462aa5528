"""Ensemble placement: which bookies store a new ledger, which one replaces a failed one.

The seed: "When a ledger is created, E bookies are chosen for the entries of that ledger"
and "If a node fails to acknowledge a write, the writer will create a new ensemble by
replacing the failed node in the current ensemble." A uniform random choice spreads ledgers
(and so load) across the writable bookies; an ensemble never holds the same bookie twice.
Pure: the caller passes the registered writable bookies and, for tests, a seeded ``rng``.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence

from bk_spark.errors import NotEnoughBookiesError


def _candidates(available: Sequence[str], exclude: Collection[str]) -> list[str]:
    excluded = set(exclude)
    return [b for b in dict.fromkeys(available) if b not in excluded]


def choose_ensemble(
    available: Sequence[str],
    ensemble_size: int,
    *,
    exclude: Collection[str] = (),
    rng: random.Random | None = None,
) -> list[str]:
    """``ensemble_size`` distinct bookies picked at random from ``available``.

    ``exclude`` names bookies not to use (e.g. ones that just failed). Raises
    :class:`NotEnoughBookiesError` when fewer than ``ensemble_size`` remain.
    """
    if ensemble_size < 1:
        raise ValueError(f"ensemble_size must be >= 1, got {ensemble_size}")
    registered = len(dict.fromkeys(available))
    candidates = _candidates(available, exclude)
    if len(candidates) < ensemble_size:
        excluded = registered - len(candidates)
        note = f" ({excluded} of them excluded as failed)" if excluded else ""
        raise NotEnoughBookiesError(
            f"need {ensemble_size} writable bookies, {registered} registered{note}: start "
            f"more bookies or lower ensembleSize"
        )
    return (rng or random.Random()).sample(candidates, ensemble_size)


def replace_bookie(
    ensemble: Sequence[str],
    index: int,
    available: Sequence[str],
    *,
    exclude: Collection[str] = (),
    rng: random.Random | None = None,
) -> str:
    """A random writable bookie to take the place of ``ensemble[index]``.

    Never a bookie already in ``ensemble`` (including the one being replaced) nor one in
    ``exclude``. Raises :class:`NotEnoughBookiesError` when no bookie is left.
    """
    if not 0 <= index < len(ensemble):
        raise ValueError(f"bookie index {index} outside an ensemble of {len(ensemble)}")
    candidates = _candidates(available, {*exclude, *ensemble})
    if not candidates:
        raise NotEnoughBookiesError(
            f"no writable bookie left to replace {ensemble[index]} in ensemble "
            f"{list(ensemble)} ({len(dict.fromkeys(available))} registered): start more "
            f"bookies"
        )
    return (rng or random.Random()).choice(candidates)
