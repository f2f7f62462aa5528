"""What a bookie's answer says about what was asked of it: one table for every reader.

Recovery's read-forward (:class:`~bk_spark.protocol.schedule.RecoveryReadTally`), LAC reads
and fences over a quorum coverage (``ask_last_fragment``), the reader's fail-over
(:mod:`~bk_spark.protocol.read_plan`) and the Auditor's held-entries check each count a
bookie's answer as one of three kinds:

* ``HOLDS``: it returned what was asked;
* ``LACKS``: a negative, "I do not have it" (NoSuchLedger, NoSuchEntry): it counts toward
  an entry's absence (recovery closes before an entry absent from (Qw - Qa) + 1 bookies)
  and a LAC read counts it as LAC -1;
* ``NO_ANSWER``: nothing can be concluded (the bookie unreachable, timed out, refused the
  request, a corrupt copy) -- and ``UNKNOWN``, the answer of a bookie that lost its data and
  is repairing the ledger (in limbo, BP-46): it may have acknowledged what it no longer
  holds, so its "I do not have it" would be a lie. Never a negative.

Only ``LACKS`` may let a reader conclude that something does not exist; a kind missing
from :data:`ANSWERS` (a status added later) is ``NO_ANSWER``, the safe side.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType

from bk_spark.errors import (
    BKError,
    InvalidRequestError,
    LedgerFencedError,
    NoSuchEntryError,
    NoSuchLedgerError,
    ReadOnlyError,
    TooLargeError,
    UnauthorizedError,
    UnknownError,
)


class Answer(StrEnum):
    HOLDS = "HOLDS"
    LACKS = "LACKS"
    NO_ANSWER = "NO_ANSWER"


#: A bookie's error answer (its wire status, as the client raises it) -> its kind.
ANSWERS: Mapping[type[BKError], Answer] = MappingProxyType({
    NoSuchLedgerError: Answer.LACKS,
    NoSuchEntryError: Answer.LACKS,
    UnknownError: Answer.NO_ANSWER,
    LedgerFencedError: Answer.NO_ANSWER,
    UnauthorizedError: Answer.NO_ANSWER,
    TooLargeError: Answer.NO_ANSWER,
    ReadOnlyError: Answer.NO_ANSWER,
    InvalidRequestError: Answer.NO_ANSWER,
})

#: The error answers that are negatives (``except NEGATIVE_ANSWERS:``).
NEGATIVE_ANSWERS: tuple[type[BKError], ...] = tuple(
    t for t, kind in ANSWERS.items() if kind == Answer.LACKS)


def answer_kind(error: BaseException | None) -> Answer:
    """The kind of a bookie's answer: ``None`` (a response) holds; an error by
    :data:`ANSWERS` (subclasses included); anything else is no answer."""
    if error is None:
        return Answer.HOLDS
    for t, kind in ANSWERS.items():
        if isinstance(error, t):
            return kind
    return Answer.NO_ANSWER
