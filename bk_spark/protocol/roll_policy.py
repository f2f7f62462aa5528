"""When a log writer rolls: which ledger each append goes to, and what the roller does next.

Theory of operation (ledgers-to-logs.txt, "Rolling ledgers"; issue 31). A writer with
rolling limits (``roll_max_entries``, ``roll_max_bytes`` of payload, ``roll_max_age_s``)
assigns every append to a ledger *when it is appended*, not when it is acknowledged, so no
number of appends in flight can overshoot a limit:

* **Placement** (:data:`PLACEMENT`, :func:`place`): an append that fits the current ledger
  (one more entry within ``roll_max_entries``, its payload within what is left of
  ``roll_max_bytes``) goes to it. One that does not fit waits for the next ledger
  (``ROLL_BEFORE``), and so does every append after it (``behind``: appends never overtake
  one another, so acknowledgements, which follow the log's order, stay in append order
  across ledgers). An entry larger than ``roll_max_bytes`` alone gets a ledger of its own
  (``OWN_LEDGER``): the current one if it is empty, else the next one; the ledger is full
  after it.
* **The roller's next step** (:data:`ROLLER_STEP`, :func:`roller_step`): roll as soon as
  the current ledger is full or appends wait for the next one (the roll then feeds them to
  it, as many as fit, in order); roll for age once the first entry of the current ledger is
  ``roll_max_age_s`` old. Age never holds an append back: appends go on into the current
  ledger until the roll switches, so a ledger holds entries at most one roll's latency
  younger than its limit. Once a ledger reaches :data:`SPARE_AT` of a limit the roller
  prepares the next ledger ahead (the *spare*), so that a roll is one metadata transaction
  and the appends queued behind it wait only for that.
* **Listing ahead** (:func:`list_ahead_due`, issue 28): with a spare ready, the roller does
  that transaction too before the current ledger is full: once, at the rate the ledger
  filled so far, it would be full within :data:`LIST_AHEAD_S`, the next ledger is listed
  (the roll's CAS) while appends still go into the current one, and the roll that is due
  once it is full is only the switch, with no metadata operation on the appends' path (a
  roll waited for on a full ledger stalled every append for one ZooKeeper transaction). The
  ledgers fill to their limits as before: the switch still happens when one is due. A
  ledger filling slowly (less than one entry per :data:`LIST_AHEAD_S`) is never listed
  ahead: its roll is the CAS and the switch, as before; nor one with more than
  :data:`LIST_AHEAD_SHARE` of a limit left (a burst's rate says little about the rest). A
  listed ledger the writer has not switched to :data:`SWITCH_AFTER_S` later (the appends
  stopped) is switched to then, the current ledger ending below its limit: the log keeps
  no listed ledger waiting behind an open one for long (readers at the end of the open
  one look for its close while a later one is listed).
* **The switch by the append** (issue 28): the append that finds the current ledger full
  while the next one is listed makes the switch itself (a few lock-held steps, no
  metadata operation) rather than waiting for the roller thread to be woken and scheduled:
  on a busy client that took long enough for most of the appends in flight to queue behind
  the full ledger while the bookies' pipeline drained. Step 4 (closing the previous ledger)
  stays the roller's, and comes before any other step (``CLOSE_PREVIOUS``): the previous
  ledger is closed before a later one is listed, so a new owner, which fences the last two
  ledgers, always fences every ledger still open.

:class:`LedgerAssignment` keeps the counts of the current ledger and the appends waiting
for the next; it is plain data, not thread-safe (the writer holds its own lock around it),
and the same code runs in the writer and in the unit tests' simulations.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import Generic, TypeVar

#: The share of a rolling limit (entries, bytes or age) at which the roller prepares the
#: next ledger.
SPARE_AT = 0.5

#: The roller lists the next ledger this long (seconds) before the current one is expected
#: to be full (a few ZooKeeper transactions' time on a loaded machine).
LIST_AHEAD_S = 0.03
#: ... and only within this share of a limit from it.
LIST_AHEAD_SHARE = 0.2
#: A ledger listed ahead is switched to at most this long (seconds) after it was listed.
SWITCH_AFTER_S = 1.0

T = TypeVar("T")


class Placement(Enum):
    """Where one append goes."""

    CURRENT = "current"          #: into the current ledger
    ROLL_BEFORE = "roll-before"  #: waits for the next ledger (the current one is full for it)
    OWN_LEDGER = "own-ledger"    #: alone into the current (empty) ledger: it exceeds the bytes


class RollerStep(Enum):
    """What the roller does now."""

    WAIT = "wait"                    #: nothing due
    PREPARE_SPARE = "prepare-spare"  #: create the next ledger ahead (step 1 of the next roll)
    LIST_NEXT = "list-next"          #: list the spare ahead (steps 2-3 of the next roll)
    ROLL = "roll"                    #: roll now (only the switch, if listed ahead)
    CLOSE_PREVIOUS = "close-previous"  #: step 4 of a roll whose switch an append made


@dataclass(frozen=True)
class RollLimits:
    """A writer's rolling limits (None: no such limit)."""

    max_entries: int | None = None
    max_bytes: int | None = None
    max_age_s: float | None = None

    @property
    def entries(self) -> float:
        return math.inf if self.max_entries is None else self.max_entries

    @property
    def bytes(self) -> float:
        return math.inf if self.max_bytes is None else self.max_bytes

    @property
    def age_s(self) -> float:
        return math.inf if self.max_age_s is None else self.max_age_s

    @property
    def any(self) -> bool:
        return (self.max_entries, self.max_bytes, self.max_age_s) != (None, None, None)


#: (appends already wait for the next ledger?, the entry fits the current ledger?, the
#: current ledger is empty?) -> where the entry goes. An empty ledger always takes its first
#: entry (a limit is at least one entry), so one that does not fit there is larger than
#: ``roll_max_bytes``: it gets the ledger to itself.
PLACEMENT: Mapping[tuple[bool, bool, bool], Placement] = MappingProxyType({
    (False, True, False): Placement.CURRENT,
    (False, True, True): Placement.CURRENT,
    (False, False, False): Placement.ROLL_BEFORE,
    (False, False, True): Placement.OWN_LEDGER,
    # behind appends that wait: wait too (no append overtakes another)
    (True, True, False): Placement.ROLL_BEFORE,
    (True, False, False): Placement.ROLL_BEFORE,
    (True, True, True): Placement.ROLL_BEFORE,
    (True, False, True): Placement.ROLL_BEFORE,
})


def fits(limits: RollLimits, entries: int, nbytes: int, size: int) -> bool:
    """One more entry of ``size`` payload bytes keeps a ledger of ``entries`` entries and
    ``nbytes`` bytes within the entry and byte limits."""
    return entries + 1 <= limits.entries and nbytes + size <= limits.bytes


def place(limits: RollLimits, entries: int, nbytes: int, size: int, behind: bool = False
          ) -> Placement:
    """Where an append of ``size`` payload bytes goes, the current ledger holding
    ``entries`` entries of ``nbytes`` bytes; ``behind``: appends already wait for the next
    ledger."""
    return PLACEMENT[behind, fits(limits, entries, nbytes, size), entries == 0]


def reached(limits: RollLimits, entries: int, nbytes: int, age_s: float, share: float
            ) -> bool:
    """A ledger reached ``share`` of a limit: its entries, its bytes, or (with entries) the
    age of its first entry."""
    return (entries >= limits.entries * share or nbytes >= limits.bytes * share
            or (entries > 0 and age_s >= limits.age_s * share))


#: (roll due: full, appends waiting or aged?, spare due: half-way and none prepared?) ->
#: the roller's step. A roll takes the spare when there is one and creates the ledger
#: itself when not, so a due roll never waits for a spare.
ROLLER_STEP: Mapping[tuple[bool, bool], RollerStep] = MappingProxyType({
    (True, True): RollerStep.ROLL,
    (True, False): RollerStep.ROLL,
    (False, True): RollerStep.PREPARE_SPARE,
    (False, False): RollerStep.WAIT,
})


def roller_step(limits: RollLimits, entries: int, nbytes: int, age_s: float, waiting: int,
                has_spare: bool) -> RollerStep:
    """What the roller does for a current ledger of ``entries`` entries, ``nbytes`` bytes,
    whose first entry is ``age_s`` old, with ``waiting`` appends queued for the next
    ledger."""
    due = (waiting > 0 or entries >= limits.entries or nbytes >= limits.bytes
           or (entries > 0 and age_s >= limits.age_s))
    spare_due = not has_spare and reached(limits, entries, nbytes, age_s, SPARE_AT)
    return ROLLER_STEP[due, spare_due]


def list_ahead_margin(entries: int, nbytes: int, age_s: float, lead_s: float
                      ) -> tuple[int, float]:
    """``(entries, bytes)`` a ledger of ``entries`` entries and ``nbytes`` bytes whose first
    entry is ``age_s`` old is expected to take in the next ``lead_s`` seconds, at the rate
    it filled so far (whole entries: 0 for a ledger filling slower than one per
    ``lead_s``)."""
    if entries <= 0 or age_s <= 0:
        return 0, 0.0
    return int(entries * lead_s / age_s), nbytes * lead_s / age_s


def _capped(limits: RollLimits, entries: int, nbytes: float) -> tuple[float, float]:
    """A margin of whole entries and bytes (0 below one) within LIST_AHEAD_SHARE of the
    limits."""
    return (min(entries, limits.entries * LIST_AHEAD_SHARE) if entries >= 1 else 0,
            min(nbytes, limits.bytes * LIST_AHEAD_SHARE) if nbytes >= 1 else 0)


def list_ahead_due(limits: RollLimits, entries: int, nbytes: int, age_s: float,
                   lead_s: float = LIST_AHEAD_S) -> bool:
    """The roller lists the next ledger now (the spare is ready): at the rate the current
    ledger filled, it reaches a limit within ``lead_s`` (see the module docstring)."""
    e, b = _capped(limits, *list_ahead_margin(entries, nbytes, age_s, lead_s))
    return ((e >= 1 and entries + e >= limits.entries)
            or (b >= 1 and nbytes + b >= limits.bytes)
            or (entries > 0 and age_s + lead_s >= limits.age_s))


class LedgerAssignment(Generic[T]):
    """Assigns appends to the current ledger or to the queue of the next one
    (:func:`place`), and counts what the current ledger got; ``T``: what the caller keeps
    for each waiting append (its payload and future). Not thread-safe: the caller holds a
    lock around every call.

    The roller is woken once per threshold: :attr:`wake` turns true on the append that
    reaches the entries or bytes of the roller's next step (the spare's share, or the
    limit once the spare exists) or that is the first to wait for the next ledger (the
    roller looks at :meth:`step` after each step and before it waits); :meth:`arm` sets the
    thresholds again after the roller looked.
    """

    __slots__ = ("limits", "entries", "nbytes", "first_at", "waiting", "wake", "listed_at",
                 "_wake_entries", "_wake_bytes", "_max_entries", "_max_bytes", "_clock")

    def __init__(self, limits: RollLimits, clock: Callable[[], float]) -> None:
        """``clock``: read when a ledger gets its first append (its age starts then)."""
        self.limits = limits
        self._max_entries, self._max_bytes = limits.entries, limits.bytes
        self._clock = clock
        self.entries = 0      # appends the current ledger took
        self.nbytes = 0       # their payload bytes
        self.first_at: float | None = None  # when its first append came (a monotonic clock)
        self.waiting: deque[tuple[int, T]] = deque()  # (size, item): for the next ledger
        #: When the next ledger was listed ahead (None: not listed; :meth:`switch` clears it)
        self.listed_at: float | None = None
        self.wake = False
        self._wake_entries = math.inf
        self._wake_bytes = math.inf

    def append(self, size: int, item: T) -> Placement:
        """Assign one append of ``size`` payload bytes: CURRENT and OWN_LEDGER go to the
        current ledger (counted), ROLL_BEFORE waits with ``item``."""
        if (not self.waiting and self.entries < self._max_entries
                and self.nbytes + size <= self._max_bytes):
            # :data:`PLACEMENT`'s rows (False, True, _), inline: every append of a ledger
            # that is not full takes this path (a test checks it agrees with the table)
            self._count(size)
            return Placement.CURRENT
        where = place(self.limits, self.entries, self.nbytes, size, bool(self.waiting))
        if where is Placement.ROLL_BEFORE:
            self.waiting.append((size, item))
            if len(self.waiting) == 1:  # the first to wait (the roller rolls while any do)
                self.wake = True
        else:
            self._count(size)
        return where

    def take(self, size: int) -> bool:
        """:meth:`append` of an append that fits the current ledger while nothing waits
        (:data:`PLACEMENT`'s CURRENT rows, counted), with no item to keep: True. False: not
        so, nothing changed (call :meth:`append`). The writer's hot path (issue 28)."""
        entries, nbytes = self.entries + 1, self.nbytes + size
        if self.waiting or entries > self._max_entries or nbytes > self._max_bytes:
            return False
        if entries == 1:
            self.first_at = self._clock()
        self.entries, self.nbytes = entries, nbytes
        if entries >= self._wake_entries or nbytes >= self._wake_bytes:
            self.wake = True
        return True

    def _count(self, size: int) -> None:
        if self.entries == 0:
            self.first_at = self._clock()
        self.entries += 1
        self.nbytes += size
        if self.entries >= self._wake_entries or self.nbytes >= self._wake_bytes:
            self.wake = True

    def switch(self) -> list[T]:
        """The writer moved on to the next ledger (empty): the waiting appends that go to it,
        oldest first, as many as fit; the rest wait for the ledger after it."""
        self.entries, self.nbytes, self.first_at, self.listed_at = 0, 0, None, None
        taken: list[T] = []
        waiting = self.waiting
        while waiting:
            size, item = waiting[0]
            if place(self.limits, self.entries, self.nbytes, size) is Placement.ROLL_BEFORE:
                break
            waiting.popleft()
            self._count(size)
            taken.append(item)
        return taken

    def age(self, now: float) -> float:
        """How old the current ledger's first entry is (0: none)."""
        return 0.0 if self.first_at is None else now - self.first_at

    def step(self, now: float, has_spare: bool, listed: bool = False,
             unclosed: bool = False) -> RollerStep:
        """The roller's next step (:func:`roller_step`); ``listed``: the next ledger is
        listed already (a due roll is then only the switch), ``has_spare``: a spare not
        listed yet, which is listed ahead once :func:`list_ahead_due`; ``unclosed``: an
        append switched ledgers and the previous one is still to close (first of all)."""
        if unclosed:
            return RollerStep.CLOSE_PREVIOUS
        age = self.age(now)
        step = roller_step(self.limits, self.entries, self.nbytes, age, len(self.waiting),
                           has_spare or listed)
        if step is RollerStep.WAIT and has_spare and not listed and list_ahead_due(
                self.limits, self.entries, self.nbytes, age):
            return RollerStep.LIST_NEXT
        if step is RollerStep.WAIT and listed and self.listed_at is not None and (
                now - self.listed_at >= SWITCH_AFTER_S):
            return RollerStep.ROLL  # listed, and the appends stopped: switch anyway
        return step

    def arm(self, has_spare: bool, listed: bool = False, now: float | None = None) -> None:
        """Wake the roller again when an append reaches its next threshold: the spare's
        share of the entry and byte limits without a spare, the limits with one listed,
        and with a spare not listed yet the limits less what the ledger is expected to
        take in :data:`LIST_AHEAD_S` at its rate as of ``now`` (:func:`list_ahead_due`)."""
        share = 1.0 if has_spare or listed else SPARE_AT
        entries, nbytes = self.limits.entries * share, self.limits.bytes * share
        if has_spare and not listed and now is not None:
            e, b = _capped(self.limits, *list_ahead_margin(
                self.entries, self.nbytes, self.age(now), LIST_AHEAD_S))
            entries, nbytes = entries - math.floor(e), nbytes - b
        self._wake_entries = math.ceil(entries) \
            if self.limits.max_entries is not None else math.inf
        self._wake_bytes = nbytes
        self.wake = False  # the roller looks at :meth:`step` right after arming

    def disarm(self) -> None:
        """The roller was woken: no more wake-ups until it :meth:`arm`\\ s again."""
        self._wake_entries = self._wake_bytes = math.inf
        self.wake = False

    def next_age_check(self, now: float, has_spare: bool, listed: bool = False
                       ) -> float | None:
        """Seconds until the age of the current ledger's first entry makes a step due (the
        spare's share, the listing ahead, or the limit) or a listed ledger is switched to
        anyway (:data:`SWITCH_AFTER_S`), or None: neither."""
        switch = None if not listed or self.listed_at is None else max(
            0.0, self.listed_at + SWITCH_AFTER_S - now)
        if self.limits.max_age_s is None or self.first_at is None:
            return switch
        due = self.limits.max_age_s * (1.0 if has_spare or listed else SPARE_AT)
        if has_spare and not listed:
            due -= LIST_AHEAD_S
        age = max(0.0, self.first_at + due - now)
        return age if switch is None else min(age, switch)
