"""The Auditor's decisions: which bookies are lost, when their ledgers are marked, and
which entries a periodic check reads back (pure: no I/O, no clock, no threads).

Theory of operation (BookKeeper's ``Auditor``):

* **Lost is derived from the metadata.** A bookie is *lost* when some ledger's ensembles
  name it and it is registered neither writable nor readonly: ``named - registered``
  (:func:`lost_bookies`). Nothing depends on having seen the bookie arrive: a bookie that
  joined, was placed in a ledger and died while the Auditor was not looking (between two
  polls, while it was paused, before it was elected) is lost all the same. The Auditor
  recomputes ``named`` from every ledger's metadata when it is elected, whenever the
  registrations changed since it last did (the registration znodes' child versions), and
  at each periodic check.
* **The delay** (``--lost-bookie-recovery-delay``) gives one bookie that is gone a chance
  to come back (a restart) before its ledgers are re-replicated. It is a decision over
  three facts about each lost bookie, the table :data:`LOST_BOOKIE_ACTIONS`: whether its
  ledgers were marked already, whether *more than one* bookie is lost now, and whether it
  has been lost for the delay. As in BookKeeper ("if more than one bookie is down, start
  the audit immediately"), a second loss does not wait: a ledger that lost two of its
  bookies must not wait out the delay one copy from loss. Every lost bookie counts,
  including one marked already whose ledgers still name it (they are not healed yet).
  :class:`LostBookies` applies the table tick after tick; a bookie that registers again
  is forgotten (its delay starts over if it goes away again).
* **What a periodic check reads back.** Counting a copy from the index alone counts a
  zero-filled or bit-rotted entry log as a replica. So the check asks each bookie to read
  back some of the entries it holds and verify their record framing and checksum; an
  entry that fails is not held. The cost is bounded per question (one fragment of one
  bookie): at most ``budget`` entries, :func:`verification_sample`'s choice: the first
  and the last held (BookKeeper's ``LedgerChecker`` reads those of each fragment) and the
  rest at random in between, so that successive checks cover different entries.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType


class LostBookieAction(Enum):
    """What the Auditor does about one lost bookie on this tick."""

    WAIT = "wait"    #: within the delay and the only one lost: give it time to come back
    MARK = "mark"    #: mark every ledger naming it under-replicated, now
    DONE = "done"    #: its ledgers were marked already: nothing more until it comes back


#: (marked already, more than one bookie lost, lost for the delay) -> action.
LOST_BOOKIE_ACTIONS: Mapping[tuple[bool, bool, bool], LostBookieAction] = MappingProxyType({
    (False, False, False): LostBookieAction.WAIT,
    (False, False, True): LostBookieAction.MARK,
    (False, True, False): LostBookieAction.MARK,   # a second loss never waits
    (False, True, True): LostBookieAction.MARK,
    (True, False, False): LostBookieAction.DONE,
    (True, False, True): LostBookieAction.DONE,
    (True, True, False): LostBookieAction.DONE,
    (True, True, True): LostBookieAction.DONE,
})


def lost_bookie_action(marked: bool, several_lost: bool, waited_out: bool
                       ) -> LostBookieAction:
    """Look up :data:`LOST_BOOKIE_ACTIONS`."""
    return LOST_BOOKIE_ACTIONS[(marked, several_lost, waited_out)]


def lost_bookies(named: Iterable[str], registered: Collection[str]) -> set[str]:
    """The bookies some ledger names that are not registered (writable or readonly)."""
    return set(named) - set(registered)


@dataclass
class LostBookies:
    """The lost bookies across ticks: since when each is lost, which were marked.

    ``update(lost, now)`` takes this tick's :func:`lost_bookies` and the time, and returns
    the bookies to mark now; the caller marks their ledgers, then calls ``marked(...)``.
    A delay of 0 marks at once (every bookie has waited it out).
    """

    delay_s: float
    since: dict[str, float] = field(default_factory=dict)
    done: set[str] = field(default_factory=set)

    def update(self, lost: Collection[str], now: float) -> set[str]:
        lost = set(lost)
        for b in set(self.since) - lost:  # registered again, or no ledger names it now
            del self.since[b]
        self.done &= lost
        for b in lost:
            self.since.setdefault(b, now)
        several = len(lost) > 1
        return {b for b in lost
                if lost_bookie_action(b in self.done, several,
                                      now - self.since[b] >= self.delay_s)
                is LostBookieAction.MARK}

    def marked(self, bookies: Iterable[str]) -> None:
        """The ledgers of ``bookies`` were marked."""
        self.done |= set(bookies) & set(self.since)

    @property
    def lost(self) -> set[str]:
        """Every bookie lost as of the last update."""
        return set(self.since)


def verification_sample(count: int, budget: int, rng: random.Random) -> list[int]:
    """Which of ``count`` held entries (positions ``0..count-1``, ascending ids) to read
    back and verify, at most ``budget`` of them: the first and the last, then positions
    drawn at random in between; ascending. ``budget`` 0 verifies nothing.

    ``verification_sample(10, 4, rng)`` is ``[0, i, j, 9]`` with ``0 < i < j < 9``.
    """
    if budget <= 0 or count <= 0:
        return []
    if budget >= count:
        return list(range(count))
    if budget == 1:
        return [0]
    inner = rng.sample(range(1, count - 1), budget - 2)
    return sorted([0, count - 1, *inner])
