"""Which bookie a read asks next for each entry, and what each answer changes (pure).

The seed (bookkeeper-protocol.txt): a reader asks a bookie of the entry's write set and, on
an error, a timeout, a missing entry or a bad digest, fails over to the next bookie of it.
:func:`bk_spark.core.reader.fetch_entries` is the I/O loop around this plan: it sends
:meth:`ReadPlan.next_asks` (one packed request per bookie), verifies the digests of what
comes back and tells the plan each answer; no sockets, clocks or threads here.

Theory of operation
-------------------
Each entry has a cursor over its write set: copy ``a`` is the bookie at write-set position
``a`` (``(entry + a) % E`` of the entry's fragment's ensemble), copy 0 first. Every round
asks every entry not yet read of the copy at its cursor. What the answer changes, per
entry asked:

=====================  ===========================================  ================
answer for the entry   failure of the copy                          cursor
=====================  ===========================================  ================
a record, good digest  read                                         done
a record, bad digest   ``CORRUPT``                                  next copy
listed missing         ``LACKS``                                    next copy
an error answer        ``LACKS`` / ``NO_ANSWER`` by                 next copy
                       :data:`~bk_spark.protocol.answers.ANSWERS`
                       (``UNKNOWN``, a bookie in limbo: no answer);
                       ``UNREACHABLE`` when the bookie could not
                       be reached
neither (cut by the    nothing                                      same copy again
bookie's size limit)
=====================  ===========================================  ================

An entry out of copies whose failures include unreachable copies gets a second, patient
pass over those copies while the read's time lasts (each waiting for its connection with an
equal share of the time left): a live bookie restarting is never given up on before the
read's own timeout. Otherwise it has no good copy, and the error says why by the kinds its
copies failed with (:data:`NO_GOOD_COPY`): every copy corrupt, every copy lacking it (only
real negatives: a bookie in limbo or unreachable never makes an entry "not exist"), or else
no bookie could serve it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

import numpy as np

from bk_spark.compat import StrEnum
from bk_spark.errors import (
    BKError,
    BookieUnavailableError,
    DigestMismatchError,
    NoSuchEntryError,
)
from bk_spark.protocol.answers import Answer, answer_kind
from bk_spark.protocol.schedule import write_set_members


class Failure(StrEnum):
    """Why one copy of an entry could not be read."""

    LACKS = "LACKS"  # a negative: no such ledger / entry on that bookie
    NO_ANSWER = "NO_ANSWER"  # an error that concludes nothing (limbo, refused, fenced, ...)
    UNREACHABLE = "UNREACHABLE"  # no answer because the bookie could not be reached
    CORRUPT = "CORRUPT"  # a copy whose digest does not match


#: The failure an error answer is (besides UNREACHABLE, told by the error's type).
FAILURE_OF_ANSWER = {Answer.LACKS: Failure.LACKS, Answer.NO_ANSWER: Failure.NO_ANSWER}

#: An entry with no good copy: the error, by the failures of its copies (the first row whose
#: set holds them all; the last row holds every failure).
NO_GOOD_COPY: tuple[tuple[frozenset[Failure], type[BKError], str], ...] = (
    (frozenset({Failure.CORRUPT}), DigestMismatchError,
     "entry {entry} of ledger {ledger}: every copy is corrupt"),
    (frozenset({Failure.LACKS}), NoSuchEntryError,
     "entry {entry} of ledger {ledger} is on no bookie of its write set"),
    (frozenset(Failure), BookieUnavailableError,
     "entry {entry} of ledger {ledger}: no bookie of its write set could serve it"),
)


def failure_of(error: BaseException, unreachable: bool) -> Failure:
    """The failure an error answer of a bookie is (``unreachable``: the client could not
    reach it, e.g. :class:`~bk_spark.errors.BookieUnavailableError`)."""
    if unreachable:
        return Failure.UNREACHABLE
    return FAILURE_OF_ANSWER.get(answer_kind(error), Failure.NO_ANSWER)


def no_good_copy(ledger_id: int, entry_id: int, failures: Sequence[Failure],
                 reasons: Sequence[str]) -> BKError:
    """The error for an entry none of whose copies could be read (:data:`NO_GOOD_COPY`)."""
    kinds = set(failures)
    error, words = next((e, w) for allowed, e, w in NO_GOOD_COPY if kinds <= allowed)
    return error(f"{words.format(entry=entry_id, ledger=ledger_id)} ({'; '.join(reasons)})")


#: An ask: (bookie, shares). ``shares`` -1: a first-pass ask (the client's read timeout);
#: n > 0: a patient ask, waiting for the connection with 1/n of the time left.
Ask = tuple[str, int]


class ReadPlan:
    """The state of one read of ``entry_ids`` of a ledger (see the module docstring).

    Positions are indexes into :attr:`ids` (the entry ids, ascending, unique). The state is
    kept as columns, so a read of thousands of entries costs no Python object per entry
    until something fails.
    """

    def __init__(self, ledger_id: int, ensembles: Sequence[tuple[int, Sequence[str]]],
                 write_quorum_size: int, entry_ids: Iterable[int] | range) -> None:
        self.ledger_id = ledger_id
        self.ensembles = ensembles
        self.E = len(ensembles[0][1])
        if isinstance(entry_ids, range) and entry_ids.step == 1:
            self.ids = np.arange(entry_ids.start, entry_ids.stop, dtype=np.int64)
        else:
            self.ids = np.unique(np.asarray(list(entry_ids), dtype=np.int64))
        n = len(self.ids)
        firsts = np.asarray([first for first, _ens in ensembles], dtype=np.int64)
        self.fragment = np.searchsorted(firsts, self.ids, "right") - 1  # each entry's
        self.attempt = np.zeros(n, dtype=np.int64)  # the copy to ask next (write-set position)
        self.limit = np.full(n, write_quorum_size, dtype=np.int64)  # copies before giving up
        self.done = np.zeros(n, dtype=np.bool_)
        # by position, filled on failures only: the copies still to ask in the patient pass;
        # the unreachable copies of the first pass; each failure's kind and reason
        self.patient: dict[int, list[int]] = {}
        self.unreachable: dict[int, list[int]] = defaultdict(list)
        self.failures: dict[int, list[Failure]] = defaultdict(list)
        self.reasons: dict[int, list[str]] = defaultdict(list)

    def finished(self) -> bool:
        return bool(self.done.all())

    def next_asks(self, time_left: bool) -> dict[Ask, np.ndarray]:
        """The entry ids to ask of each bookie this round (ascending). An entry out of copies
        starts its patient pass over its unreachable copies if ``time_left``, else raises its
        :func:`no_good_copy` error."""
        ids, E = self.ids, self.E
        todo = np.flatnonzero(~self.done)
        for i in todo[self.attempt[todo] >= self.limit[todo]].tolist():  # out of copies
            if i not in self.patient and self.unreachable.get(i) and time_left:
                self.patient[i] = self.unreachable.pop(i)
                self.limit[i], self.attempt[i] = len(self.patient[i]), 0
            else:
                raise no_good_copy(self.ledger_id, int(ids[i]), self.failures[i],
                                   self.reasons[i])
        groups: dict[Ask, list[np.ndarray]] = defaultdict(list)
        plain = todo if not self.patient else todo[~np.isin(todo, list(self.patient))]
        if len(plain):
            bookie_index = write_set_members(ids[plain], self.attempt[plain], E)
            key = self.fragment[plain] * E + bookie_index
            for k in np.unique(key).tolist():
                bookie = self.ensembles[k // E][1][k % E]
                groups[(bookie, -1)].append(ids[plain[key == k]])
        for i in self.patient:  # second pass: one entry per ask, a share of the time left
            if self.done[i]:
                continue
            copies, a, e = self.patient[i], int(self.attempt[i]), int(ids[i])
            bookie = self.ensembles[int(self.fragment[i])][1][(e + copies[a]) % E]
            groups[(bookie, len(copies) - a)].append(ids[i:i + 1])
        return {k: np.sort(np.concatenate(v)) for k, v in groups.items()}

    def positions(self, chunk: Sequence[int] | np.ndarray) -> np.ndarray:
        """The positions of the entry ids ``chunk`` (a request's entries)."""
        return np.searchsorted(self.ids, np.asarray(chunk, dtype=np.int64))

    def failed(self, asked: Iterable[int], failure: Failure, why: str) -> None:
        """The copies asked at ``asked`` (positions) failed: next copy for each."""
        for i in asked:
            if failure is Failure.UNREACHABLE and i not in self.patient:
                self.unreachable[i].append(int(self.attempt[i]))
            self.failures[i].append(failure)
            self.reasons[i].append(why)
            self.attempt[i] += 1

    def on_records(self, asked: np.ndarray, entry_ids: np.ndarray, verified: np.ndarray,
                   corrupt_reason: str) -> np.ndarray:
        """A bookie's records for the entries at ``asked``, ``verified`` their digest checks:
        the first record of each entry asked and still to read counts (others are ignored);
        a good one reads the entry, a bad one fails that copy (``corrupt_reason``). Returns
        the mask of the records to keep."""
        ids, n = self.ids, len(self.ids)
        pos = np.minimum(np.searchsorted(ids, entry_ids), max(n - 1, 0))
        asked_for = np.flatnonzero((ids[pos] == entry_ids) & np.isin(pos, asked)
                                   & ~self.done[pos])
        _, first = np.unique(pos[asked_for], return_index=True)  # one record per entry
        wanted = np.zeros(len(entry_ids), dtype=np.bool_)
        wanted[asked_for[first]] = True
        good = wanted & verified
        self.failed(pos[wanted & ~good].tolist(), Failure.CORRUPT, corrupt_reason)
        self.done[pos[good]] = True
        return good

    def on_missing(self, asked: np.ndarray, missing: Sequence[int], why: str) -> None:
        """The bookie listed ``missing`` as not held: a negative for those asked and still
        to read. Entries neither returned nor listed (cut by the bookie's size limit) keep
        their cursor and are asked again."""
        if not len(missing):
            return
        ids, n = self.ids, len(self.ids)
        m = np.asarray(missing, dtype=np.int64)
        mpos = np.minimum(np.searchsorted(ids, m), max(n - 1, 0))
        hit = (ids[mpos] == m) & np.isin(mpos, asked) & ~self.done[mpos]
        self.failed(mpos[hit].tolist(), Failure.LACKS, why)

