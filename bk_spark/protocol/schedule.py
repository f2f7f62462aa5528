"""The round-robin distribution schedule and the quorum arithmetic built on it.

Theory of operation (the seed, "The BookKeeper protocol"):

* **Write quorums.** "Each entry in the log is written to Qw nodes. This is considered the
  write quorum for that entry. The write quorum is the subsequence of the ensemble, Qw in
  length, and starting at the bookie at index (entryid % E)." There are only E distinct
  write quorums in an ensemble (one if Qw = E). :func:`write_set` is BookKeeper's
  ``RoundRobinDistributionSchedule``; everything here works on *bookie indexes* into the
  ensemble, never on bookie ids, so an ensemble change (a new fragment keeps E) does not
  change any write set, only which bookie sits at an index.

* **Quorum coverage.** "Once we receive a response from at least (Qw - Qa) + 1 bookies from
  each write quorum in the ensemble, the ledger is fenced": then no write quorum has Qa
  bookies left that could still accept an add from the old writer. The same coverage
  decides when the recoverer has read enough last-add-confirmed values. This is
  :class:`QuorumCoverageSet` (BookKeeper's ``RRQuorumCoverageSet``).

* **Recovery read-forward.** "It starts reading forward, one entry at a time, until it gets
  an NoSuchEntry response from at least one bookie in each quorum for a particular entry id.
  The last entry in the ledger is, therefore, the preceding entry": stop at the first entry
  absent from a quorum. For one entry, "absent" means at least (Qw - Qa) + 1 bookies of its
  write set say NoSuchEntry, so at most Qa - 1 could hold it and it can never have been
  acknowledged. :class:`RecoveryReadTally` makes that decision for one entry.

Everything in this module is pure: no I/O, no clocks, no threads.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from bk_spark.compat import StrEnum
from bk_spark.protocol.ledger_metadata import validate_quorums


def _check_schedule(ensemble_size: int, write_quorum_size: int) -> None:
    if not 1 <= write_quorum_size <= ensemble_size:
        raise ValueError(
            f"need ensemble_size ({ensemble_size}) >= write_quorum_size ({write_quorum_size}) >= 1"
        )


def write_set(entry_id: int, ensemble_size: int, write_quorum_size: int) -> list[int]:
    """The bookie indexes entry ``entry_id`` is written to (its write quorum), in order.

    "The write quorum is the subsequence of the ensemble, Qw in length, and starting at the
    bookie at index (entryid % E)". The seed's table for E=4, Qw=3::

        0 -> [0, 1, 2]   1 -> [1, 2, 3]   2 -> [2, 3, 0]   3 -> [3, 0, 1]   4 -> [0, 1, 2]
    """
    if entry_id < 0:
        raise ValueError(f"entry id must be >= 0, got {entry_id}")
    _check_schedule(ensemble_size, write_quorum_size)
    start = entry_id % ensemble_size
    return [(start + i) % ensemble_size for i in range(write_quorum_size)]


def write_set_members(entry_ids: np.ndarray, copies: np.ndarray, ensemble_size: int
                      ) -> np.ndarray:
    """The bookie index of copy ``copies[i]`` of entry ``entry_ids[i]`` (its position in
    :func:`write_set`), for many entries at once: ``(entry id + copy) % E``."""
    return (np.asarray(entry_ids, dtype=np.int64) + copies) % ensemble_size


def in_write_set(
    entry_id: int, bookie_index: int, ensemble_size: int, write_quorum_size: int
) -> bool:
    """Whether the bookie at ``bookie_index`` is in the write quorum of ``entry_id``."""
    return (bookie_index - entry_id) % ensemble_size < write_quorum_size


def write_quorums(ensemble_size: int, write_quorum_size: int) -> list[list[int]]:
    """The E distinct write quorums of an ensemble (the write sets of entries 0..E-1)."""
    _check_schedule(ensemble_size, write_quorum_size)
    if write_quorum_size == ensemble_size:
        return [list(range(ensemble_size))]
    return [write_set(i, ensemble_size, write_quorum_size) for i in range(ensemble_size)]


class QuorumCoverageSet:
    """Which bookies of an ensemble answered, and whether that covers every write quorum.

    Guarantee (fencing step 2, and reading the last-add-confirmed during recovery): the set
    is :meth:`covered` once at least (Qw - Qa) + 1 bookies of *every* write quorum answered.
    Then, in every write quorum, fewer than Qa bookies did not answer, so an entry the old
    writer got acknowledged (Qa bookies of its write quorum) was seen by at least one bookie
    that answered, and a fenced ensemble leaves no write quorum with Qa unfenced bookies.

    Only successful answers count (for fencing: any answer from the bookie, including
    NoSuchLedger/NoSuchEntry; for reading LAC the same). Call :meth:`error` for a bookie that
    failed: its answer is unknown, and :meth:`cannot_cover` says when so many bookies of one
    write quorum failed (Qa or more) that coverage is impossible and the operation must fail
    instead of waiting.
    """

    def __init__(self, ensemble_size: int, write_quorum_size: int, ack_quorum_size: int) -> None:
        validate_quorums(ensemble_size, write_quorum_size, ack_quorum_size)
        self.ensemble_size = ensemble_size
        self.write_quorum_size = write_quorum_size
        self.ack_quorum_size = ack_quorum_size
        self._quorums = write_quorums(ensemble_size, write_quorum_size)
        self._needed = write_quorum_size - ack_quorum_size + 1
        self._responded: set[int] = set()
        self._failed: set[int] = set()

    def _check_index(self, bookie_index: int) -> None:
        if not 0 <= bookie_index < self.ensemble_size:
            raise ValueError(
                f"bookie index {bookie_index} outside an ensemble of {self.ensemble_size}"
            )

    def add(self, bookie_index: int) -> None:
        """Record a (successful) answer from the bookie at ``bookie_index``."""
        self._check_index(bookie_index)
        self._failed.discard(bookie_index)
        self._responded.add(bookie_index)

    def error(self, bookie_index: int) -> None:
        """Record that the bookie at ``bookie_index`` failed: it does not count as covered."""
        self._check_index(bookie_index)
        if bookie_index not in self._responded:
            self._failed.add(bookie_index)

    @property
    def responded(self) -> frozenset[int]:
        """The bookie indexes that answered successfully."""
        return frozenset(self._responded)

    def covered(self) -> bool:
        """True once at least (Qw - Qa) + 1 bookies of every write quorum answered."""
        return all(
            sum(1 for i in quorum if i in self._responded) >= self._needed
            for quorum in self._quorums
        )

    def cannot_cover(self) -> bool:
        """True when some write quorum has Qa failed bookies: coverage can never be reached."""
        return any(
            sum(1 for i in quorum if i in self._failed) >= self.ack_quorum_size
            for quorum in self._quorums
        )


class RecoveryDecision(StrEnum):
    """What recovery's read-forward learned about one entry."""

    FOUND = "FOUND"  # some bookie returned it: write it back to its whole write quorum
    ABSENT = "ABSENT"  # it cannot have been acknowledged: the previous entry is the last one
    PENDING = "PENDING"  # wait for more answers
    UNKNOWN = "UNKNOWN"  # everyone answered, neither found nor provably absent: fail/retry


class RecoveryReadTally:
    """The answers of one entry's write set during recovery's read-forward (step 3).

    The seed: "stop at the first entry absent from a quorum". The entry is

    * ``FOUND`` as soon as any bookie returns it (the caller verified its digest);
    * ``ABSENT`` once at least (Qw - Qa) + 1 distinct bookies of its write set answered
      NoSuchEntry (or NoSuchLedger): at most Qa - 1 bookies can hold it, so it can never have
      been acknowledged to the writer's client and the ledger ends before it;
    * ``UNKNOWN`` once all Qw bookies answered with neither outcome (too many errors):
      recovery cannot decide and must fail or retry, never guess;
    * ``PENDING`` otherwise.

    The decisions are also reachable as ``RecoveryReadTally.FOUND`` etc.
    FOUND and ABSENT are both safe to act on (an entry that is present on fewer than Qa
    bookies was never acknowledged, so it may be kept or dropped); the caller acts on the
    first decision that is not PENDING. Bookies are identified by their index in the
    ensemble; a later answer from the same bookie replaces its earlier one.
    """

    FOUND: ClassVar[RecoveryDecision] = RecoveryDecision.FOUND
    ABSENT: ClassVar[RecoveryDecision] = RecoveryDecision.ABSENT
    PENDING: ClassVar[RecoveryDecision] = RecoveryDecision.PENDING
    UNKNOWN: ClassVar[RecoveryDecision] = RecoveryDecision.UNKNOWN

    def __init__(self, write_quorum_size: int, ack_quorum_size: int) -> None:
        if not 1 <= ack_quorum_size <= write_quorum_size:
            raise ValueError(
                f"need write_quorum_size ({write_quorum_size}) >= ack_quorum_size "
                f"({ack_quorum_size}) >= 1"
            )
        self.write_quorum_size = write_quorum_size
        self.ack_quorum_size = ack_quorum_size
        self._absent_needed = write_quorum_size - ack_quorum_size + 1
        self._found = False
        self._answers: dict[int, bool] = {}  # bookie index -> True if NoSuchEntry

    def _record(self, bookie_index: int, missing: bool) -> None:
        if bookie_index not in self._answers and len(self._answers) >= self.write_quorum_size:
            raise ValueError(
                f"more than Qw={self.write_quorum_size} bookies answered for one entry"
            )
        self._answers[bookie_index] = missing

    def found(self) -> None:
        """A bookie of the write set returned the entry (with a valid digest)."""
        self._found = True

    def missing(self, bookie_index: int) -> None:
        """The bookie at ``bookie_index`` answered NoSuchEntry / NoSuchLedger."""
        self._record(bookie_index, True)

    def error(self, bookie_index: int) -> None:
        """The bookie at ``bookie_index`` failed (timeout, unreachable, bad digest...)."""
        self._record(bookie_index, False)

    def decision(self) -> RecoveryDecision:
        """FOUND, ABSENT, UNKNOWN or PENDING, as in the class docstring."""
        if self._found:
            return RecoveryDecision.FOUND
        if sum(self._answers.values()) >= self._absent_needed:
            return RecoveryDecision.ABSENT
        if len(self._answers) >= self.write_quorum_size:
            return RecoveryDecision.UNKNOWN
        return RecoveryDecision.PENDING
