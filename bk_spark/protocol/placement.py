"""Ensemble placement: which bookies store a new ledger, which one replaces a failed one.

The seed: "When a ledger is created, E bookies are chosen for the entries of that ledger"
and "If a node fails to acknowledge a write, the writer will create a new ensemble by
replacing the failed node in the current ensemble." An ensemble never holds the same
bookie twice, so no entry ever has two copies on one bookie.

Rack awareness (BookKeeper's ``RackawareEnsemblePlacementPolicy``): each bookie registers
a rack (``/region/rack``). Entry ``e`` is stored on the write quorum of ensemble positions
``e % E .. e % E + Qw - 1`` (:func:`bk_spark.protocol.schedule.write_set`), so a rack failure
loses an entry only if its whole write quorum sits in that rack. The policy fills the
positions one at a time, each with a bookie whose rack is new to the write quorums that
contain the position (ties broken at random, which also spreads the load), and accepts an
ensemble whose every write quorum spans at least ``min(minNumRacksPerWriteQuorum, Qw,
racks available)`` racks; after a few tries it settles for the best one found, as
BookKeeper does unless told to enforce the minimum. A replacement (ensemble change,
recovery write-back, re-replication) is chosen the same way for its position. With one
rack the choice is the uniform random one it always was.

Pure: the caller passes the registered writable bookies and their racks
(:class:`Topology`) and, for tests, a seeded ``rng``.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from bk_spark.errors import NotEnoughBookiesError

#: The rack of a bookie that registered none.
DEFAULT_RACK = "/default-region/default-rack"
#: BookKeeper's ``minNumRacksPerWriteQuorum`` default.
DEFAULT_MIN_RACKS_PER_WRITE_QUORUM = 2
_ATTEMPTS = 8


def _candidates(available: Sequence[str], exclude: Collection[str]) -> list[str]:
    excluded = set(exclude)
    return [b for b in dict.fromkeys(available) if b not in excluded]


def _quorums_containing(position: int, ensemble_size: int, write_quorum_size: int
                        ) -> list[list[int]]:
    """The write quorums (lists of positions) that contain ``position``."""
    E, Qw = ensemble_size, write_quorum_size
    starts = sorted({(position - k) % E for k in range(Qw)})
    return [[(s + i) % E for i in range(Qw)] for s in starts]


def write_quorum_racks(ensemble: Sequence[str], write_quorum_size: int,
                       racks: Mapping[str, str]) -> list[int]:
    """How many distinct racks each of the E write quorums of ``ensemble`` spans."""
    E = len(ensemble)
    Qw = min(write_quorum_size, E)
    return [len({racks.get(ensemble[(s + i) % E], DEFAULT_RACK) for i in range(Qw)})
            for s in range(E)]


@dataclass(frozen=True)
class Topology:
    """The writable bookies with their racks: what every placement decision starts from."""

    available: tuple[str, ...]
    racks: Mapping[str, str] = field(default_factory=dict)
    min_racks_per_write_quorum: int = DEFAULT_MIN_RACKS_PER_WRITE_QUORUM

    def rack(self, bookie: str) -> str:
        return self.racks.get(bookie, DEFAULT_RACK)

    def _target(self, candidates: Sequence[str], write_quorum_size: int) -> int:
        return min(self.min_racks_per_write_quorum, write_quorum_size,
                   len({self.rack(b) for b in candidates}))

    def choose_ensemble(self, ensemble_size: int, write_quorum_size: int | None = None, *,
                        exclude: Collection[str] = (), rng: random.Random | None = None
                        ) -> list[str]:
        """``ensemble_size`` distinct bookies; every write quorum on as many racks as the
        policy asks (see the module docstring). :class:`NotEnoughBookiesError` when fewer
        than ``ensemble_size`` bookies remain after ``exclude``."""
        if ensemble_size < 1:
            raise ValueError(f"ensemble_size must be >= 1, got {ensemble_size}")
        rng = rng or random.Random()
        registered = len(dict.fromkeys(self.available))
        candidates = _candidates(self.available, exclude)
        if len(candidates) < ensemble_size:
            excluded = registered - len(candidates)
            note = f" ({excluded} of them excluded as failed)" if excluded else ""
            raise NotEnoughBookiesError(
                f"need {ensemble_size} writable bookies, {registered} registered{note}: start "
                f"more bookies or lower ensembleSize")
        Qw = min(write_quorum_size or ensemble_size, ensemble_size)
        target = self._target(candidates, Qw)
        if target <= 1:
            return rng.sample(candidates, ensemble_size)
        best: list[str] = []
        best_score = -1
        for _ in range(_ATTEMPTS):
            ensemble = self._fill(candidates, ensemble_size, Qw, rng)
            counts = write_quorum_racks(ensemble, Qw, self.racks)
            score = sum(min(c, target) for c in counts)
            if score > best_score:
                best, best_score = ensemble, score
            if min(counts) >= target:
                break
        return best

    def _fill(self, candidates: list[str], E: int, Qw: int, rng: random.Random) -> list[str]:
        ensemble: list[str | None] = [None] * E
        left = list(candidates)
        rng.shuffle(left)
        for pos in range(E):
            quorums = _quorums_containing(pos, E, Qw)
            pick = max(left, key=lambda b: self._new_racks(b, pos, ensemble, quorums))
            ensemble[pos] = pick
            left.remove(pick)
        return [b for b in ensemble if b is not None]

    def _new_racks(self, bookie: str, pos: int, ensemble: Sequence[str | None],
                   quorums: list[list[int]]) -> int:
        """In how many of the write quorums containing ``pos`` the bookie's rack is new."""
        rack = self.rack(bookie)
        return sum(1 for q in quorums
                   if all(ensemble[p] is None or p == pos or self.rack(ensemble[p]) != rack
                          for p in q))

    def replace_bookie(self, ensemble: Sequence[str], index: int,
                       write_quorum_size: int | None = None, *,
                       exclude: Collection[str] = (), rng: random.Random | None = None) -> str:
        """A writable bookie to take the place of ``ensemble[index]``: never one of
        ``ensemble`` nor of ``exclude``; preferring one whose rack is new to the write
        quorums containing ``index``. :class:`NotEnoughBookiesError` when none is left."""
        if not 0 <= index < len(ensemble):
            raise ValueError(f"bookie index {index} outside an ensemble of {len(ensemble)}")
        rng = rng or random.Random()
        candidates = _candidates(self.available, {*exclude, *ensemble})
        if not candidates:
            raise NotEnoughBookiesError(
                f"no writable bookie left to replace {ensemble[index]} in ensemble "
                f"{list(ensemble)} ({len(dict.fromkeys(self.available))} registered): start "
                f"more bookies")
        Qw = min(write_quorum_size or len(ensemble), len(ensemble))
        if len({self.rack(b) for b in (*candidates, *ensemble)}) <= 1:
            return rng.choice(candidates)
        quorums = _quorums_containing(index, len(ensemble), Qw)
        rng.shuffle(candidates)
        return max(candidates, key=lambda b: self._new_racks(b, index, ensemble, quorums))


def choose_ensemble(
    available: Sequence[str],
    ensemble_size: int,
    *,
    write_quorum_size: int | None = None,
    racks: Mapping[str, str] | None = None,
    min_racks_per_write_quorum: int = DEFAULT_MIN_RACKS_PER_WRITE_QUORUM,
    exclude: Collection[str] = (),
    rng: random.Random | None = None,
) -> list[str]:
    """``ensemble_size`` distinct bookies picked from ``available``
    (:meth:`Topology.choose_ensemble`); uniformly at random when all share one rack.

    ``exclude`` names bookies not to use (e.g. ones that just failed). Raises
    :class:`NotEnoughBookiesError` when fewer than ``ensemble_size`` remain.
    """
    topology = Topology(tuple(available), racks or {}, min_racks_per_write_quorum)
    return topology.choose_ensemble(ensemble_size, write_quorum_size, exclude=exclude, rng=rng)


def replace_bookie(
    ensemble: Sequence[str],
    index: int,
    available: Sequence[str],
    *,
    write_quorum_size: int | None = None,
    racks: Mapping[str, str] | None = None,
    min_racks_per_write_quorum: int = DEFAULT_MIN_RACKS_PER_WRITE_QUORUM,
    exclude: Collection[str] = (),
    rng: random.Random | None = None,
) -> str:
    """A writable bookie to take the place of ``ensemble[index]``
    (:meth:`Topology.replace_bookie`).

    Never a bookie already in ``ensemble`` (including the one being replaced) nor one in
    ``exclude``. Raises :class:`NotEnoughBookiesError` when no bookie is left.
    """
    topology = Topology(tuple(available), racks or {}, min_racks_per_write_quorum)
    return topology.replace_bookie(ensemble, index, write_quorum_size, exclude=exclude,
                                   rng=rng)
