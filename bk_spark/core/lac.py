"""Reading the last-add-confirmed (LAC): BookKeeper's ``ReadLastConfirmedOp`` and
``TryReadLastConfirmedOp``, in one place.

Theory of operation (bookkeeper-protocol.txt, "Writing to ledgers" and "Closing a ledger as
a reader"; fencing.txt on non-fencing opens): every entry
a writer sends carries its LAC, and an idle writer sends it alone (explicit LAC), so a bookie
knows a LAC no higher than the writer's. Any LAC a bookie reports was confirmed: entries up to
it are on Qa bookies and every reader may read them. Two reads differ in what "no news" means:

* **Coverage** (:data:`COVERAGE`, ``read_last_add_confirmed``, non-recovery opens): the answers
  must cover every write quorum of the last fragment ((Qw - Qa) + 1 bookies of each, as
  fencing). Then one answer comes from a bookie holding the last acknowledged entry, so the
  highest LAC is at least the one that entry carried: every reader sees the same confirmed
  prefix. A bookie being reconnected is waited for (``wait_for_ready``); without coverage the
  read raises :class:`BookieUnavailableError`.
* **Best effort** (:data:`BEST_EFFORT`, ``try_read_last_add_confirmed``, long-poll tailing):
  the highest LAC of whatever bookies answer, never lower than what the handle knew; possibly
  stale (a later entry may be confirmed on bookies that did not answer). An unreachable
  bookie fails at once instead of being waited for (unless no bookie answered at all), and
  the read never stops because coverage became impossible: with E3/Qw1/Qa1 and two bookies
  down, the live one's LAC is the answer. Only a read no bookie answered raises.

What counts as an answer is :mod:`bk_spark.protocol.answers`' table, the one every reader
uses: a response (its LAC), or a negative (``NoSuchLedgerError``: a bookie that never saw the
ledger, LAC -1). Anything else (an error, silence until the timeout, and ``UNKNOWN`` from a
bookie repairing a ledger it lost) is no answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bk_spark.core.context import ClientContext
from bk_spark.core.recovery import FragmentAnswers, ask_last_fragment
from bk_spark.errors import BKError, BookieUnavailableError
from bk_spark.protocol.answers import NEGATIVE_ANSWERS
from bk_spark.protocol.ledger_metadata import LedgerMetadata

#: Errors that count as an answer with no response (LAC -1) in a LAC read: the negatives.
ANSWERS: tuple[type[BKError], ...] = NEGATIVE_ANSWERS


@dataclass(frozen=True)
class LacRead:
    """How a LAC read asks, and when a round ends (see the module's docstring)."""

    best_effort: bool


COVERAGE = LacRead(best_effort=False)
BEST_EFFORT = LacRead(best_effort=True)


def read_lac(bk: ClientContext, m: LedgerMetadata, previous: int = -1, wait_ms: int = 0,
             how: LacRead = COVERAGE) -> tuple[int, FragmentAnswers]:
    """One LAC read on the last fragment of ``m``: the highest LAC the answers report (-1:
    none) and the answers, whose ``covered`` says whether they cover every write quorum
    (only then is the LAC at least the one the last acknowledged entry carried).

    ``wait_ms`` > 0 long-polls: each bookie answers as soon as its LAC passes ``previous``
    (or after ``wait_ms``), and the read ends at the first such answer. Needs no password:
    a LAC carries no entry data.

    With :data:`COVERAGE` one round waits for bookies being reconnected and ends at
    coverage, once coverage is impossible, or at the timeout. With :data:`BEST_EFFORT`:

    1. every bookie is asked without waiting for a connection (an unreachable bookie
       fails at once) and the round ends once each answered or failed (or at coverage, or
       at the first news of a long poll);
    2. only if no bookie answered and some were unreachable (a bookie back from a restart
       whose connection is still in reconnect backoff), they are asked again, this time
       waiting for the connection within the timeout, and the first answer ends it.
    """
    if not how.best_effort:
        got = _round(bk, m, previous, wait_ms, wait_for_ready=True, first_answer=False,
                     until_coverage_impossible=True)
        return highest_lac(got), got
    got = _round(bk, m, previous, wait_ms, wait_for_ready=False, first_answer=False,
                 until_coverage_impossible=False)
    if not got.responses and any(isinstance(e, BookieUnavailableError)
                                 for e in got.errors.values()):
        got = _round(bk, m, previous, wait_ms, wait_for_ready=True, first_answer=True,
                     until_coverage_impossible=False)
    return highest_lac(got), got


def _round(bk: ClientContext, m: LedgerMetadata, previous: int, wait_ms: int, *,
           wait_for_ready: bool, first_answer: bool, until_coverage_impossible: bool
           ) -> FragmentAnswers:
    """Ask every bookie of the last fragment once (:func:`ask_last_fragment`)."""
    get = bk.bookies.get
    stop_when: Callable[[Any], bool] | None = None
    if first_answer:
        stop_when = lambda r: True  # noqa: E731
    elif wait_ms > 0:
        stop_when = lambda r: r.lac > previous  # noqa: E731
    return ask_last_fragment(
        m, lambda b: get(b).read_lac_future(m.ledger_id, previous, wait_ms,
                                            wait_for_ready=wait_for_ready),
        timeout=bk.config.client.read_timeout_s + wait_ms / 1000.0 + 1,
        counts_as_answer=ANSWERS, stop_when=stop_when,
        stop_when_coverage_impossible=until_coverage_impossible)


def highest_lac(got: FragmentAnswers) -> int:
    """The highest LAC among the answers (-1: none reported one)."""
    return max((r.lac for r in got.responses.values() if r is not None), default=-1)
