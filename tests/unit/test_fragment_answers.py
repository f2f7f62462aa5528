"""ask_last_fragment: the answers of a ledger's last fragment, gathered up to a quorum
coverage ((Qw - Qa) + 1 bookies of every write quorum), with test-double bookie calls."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import pytest

from bk_spark.core.recovery import ask_last_fragment
from bk_spark.errors import NoSuchLedgerError, UnauthorizedError, UnknownError
from bk_spark.io.bookie_client import check_response
from bk_spark.proto import bookie_pb2 as pb
from bk_spark.protocol.answers import NEGATIVE_ANSWERS
from bk_spark.protocol.ledger_metadata import LedgerMetadata

BOOKIES = ("b0:1", "b1:1", "b2:1")


class FakeFuture:
    """What ask_last_fragment uses of a BookieCall: result (the answer, or its typed
    error), callbacks, cancel."""

    def __init__(self) -> None:
        self._value: object = None
        self._error: BaseException | None = None
        self._done = False
        self._callbacks: list[Callable[[FakeFuture], None]] = []
        self.cancelled = False

    def answer(self, value: object = None, error: BaseException | None = None) -> None:
        self._value, self._error, self._done = value, error, True
        for cb in self._callbacks:
            cb(self)

    def result(self) -> object:
        if self._error is not None:
            raise self._error
        check_response(self._value, "fake")
        return self._value

    def add_done_callback(self, cb: Callable[[FakeFuture], None]) -> None:
        if self._done:
            cb(self)
        else:
            self._callbacks.append(cb)

    def cancel(self) -> bool:
        self.cancelled = not self._done
        return self.cancelled


def lac(value: int) -> SimpleNamespace:
    return SimpleNamespace(status=pb.OK, lac=value, message="")


def refused(code: int) -> SimpleNamespace:
    return SimpleNamespace(status=code, lac=-1, message="refused")


def ask(answers: dict[str, Callable[[FakeFuture], None]]) -> tuple[Callable, dict]:
    futures: dict[str, FakeFuture] = {}

    def send(bookie: str) -> FakeFuture:
        fut = futures[bookie] = FakeFuture()
        if bookie in answers:
            answers[bookie](fut)
        return fut

    return send, futures


MD = LedgerMetadata(ledger_id=5, ensemble_size=3, write_quorum_size=2, ack_quorum_size=2,
                    ensembles=((0, BOOKIES),))


def test_one_bookie_does_not_cover_every_write_quorum_and_the_silent_rest_is_reported():
    # E=3, Qw=2, Qa=2: write quorums {0,1} {1,2} {2,0}; bookie 0 alone leaves {1,2} open
    send, futures = ask({"b0:1": lambda f: f.answer(lac(2))})
    got = ask_last_fragment(MD, send, timeout=0.2)
    assert not got.covered and got.responses.keys() == {0}
    assert futures["b1:1"].cancelled and futures["b2:1"].cancelled
    assert "b1:1: no answer in time" in got.describe_errors(BOOKIES)


def test_answers_covering_every_write_quorum_end_the_wait_without_the_last_bookie():
    send, futures = ask({"b0:1": lambda f: f.answer(lac(2)),
                         "b2:1": lambda f: f.answer(lac(3))})
    got = ask_last_fragment(MD, send, timeout=5)
    assert got.covered and max(r.lac for r in got.responses.values()) == 3
    assert futures["b1:1"].cancelled


def test_no_such_ledger_counts_as_an_answer_only_when_the_caller_says_so():
    answers = {"b0:1": lambda f: f.answer(lac(2)),
               "b1:1": lambda f: f.answer(refused(pb.NO_SUCH_LEDGER))}
    got = ask_last_fragment(MD, ask(answers)[0], timeout=0.2,
                            counts_as_answer=(NoSuchLedgerError,))
    assert got.covered and got.responses[1] is None
    got = ask_last_fragment(MD, ask(answers)[0], timeout=0.2)
    assert not got.covered and isinstance(got.errors[1], NoSuchLedgerError)


def test_qa_failures_in_one_write_quorum_end_the_wait_at_once():
    answers = {"b1:1": lambda f: f.answer(refused(pb.INTERNAL)),
               "b2:1": lambda f: f.answer(refused(pb.INTERNAL))}
    got = ask_last_fragment(MD, ask(answers)[0], timeout=30)  # would hang without the rule
    assert not got.covered and got.errors.keys() == {1, 2}


def test_a_wrong_password_is_raised_at_once():
    answers = {"b0:1": lambda f: f.answer(refused(pb.UNAUTHORIZED))}
    with pytest.raises(UnauthorizedError):
        ask_last_fragment(MD, ask(answers)[0], timeout=30)


def test_a_long_poll_ends_at_the_first_answer_that_moved():
    send, _ = ask({"b1:1": lambda f: f.answer(lac(9))})
    got = ask_last_fragment(MD, send, timeout=30, stop_when=lambda r: r.lac > 4)
    assert not got.covered and got.responses[1].lac == 9


def test_fences_still_open_at_coverage_go_on_to_fence_the_last_bookie():
    send, futures = ask({"b0:1": lambda f: f.answer(lac(2)),
                         "b2:1": lambda f: f.answer(lac(3))})
    got = ask_last_fragment(MD, send, timeout=5, cancel_rest=False)
    assert got.covered and not futures["b1:1"].cancelled


def test_unknown_from_a_bookie_in_limbo_is_no_answer_where_no_such_ledger_is_one():
    """A LAC read (or fence) counts NoSuchLedger as LAC -1, but UNKNOWN -- a bookie that
    lost its data and repairs the ledger (BP-46) -- covers nothing: with only it and one
    other bookie answering, the answers do not cover and the LAC is not believed."""
    answers = {"b0:1": lambda f: f.answer(lac(2)),
               "b1:1": lambda f: f.answer(refused(pb.UNKNOWN))}
    got = ask_last_fragment(MD, ask(answers)[0], timeout=0.2,
                            counts_as_answer=NEGATIVE_ANSWERS)
    assert not got.covered and isinstance(got.errors[1], UnknownError)
    answers["b1:1"] = lambda f: f.answer(refused(pb.NO_SUCH_LEDGER))
    got = ask_last_fragment(MD, ask(answers)[0], timeout=0.2,
                            counts_as_answer=NEGATIVE_ANSWERS)
    assert got.covered and got.responses[1] is None
