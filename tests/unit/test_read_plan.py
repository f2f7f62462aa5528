"""The read plan (protocol/read_plan.py): which bookie a read asks next for each entry and
what each answer changes, driven with no bookies. The seed's example: E=4, Qw=3; entry e's
write set starts at bookie e % 4."""

from __future__ import annotations

import numpy as np
import pytest

from bk_spark.errors import (
    BookieUnavailableError,
    DigestMismatchError,
    LedgerFencedError,
    NoSuchEntryError,
    NoSuchLedgerError,
    UnknownError,
)
from bk_spark.protocol.read_plan import Failure, ReadPlan, failure_of, no_good_copy

ENSEMBLE = ("b0", "b1", "b2", "b3")


def plan(entries, ensembles=((0, ENSEMBLE),), qw: int = 3) -> ReadPlan:  # type: ignore[no-untyped-def]
    return ReadPlan(5, ensembles, qw, entries)


def asks(p: ReadPlan, time_left: bool = True) -> dict[tuple[str, int], list[int]]:
    return {k: v.tolist() for k, v in p.next_asks(time_left).items()}


def fail(p: ReadPlan, entries: list[int], failure: Failure, why: str = "x") -> None:
    p.failed(p.positions(entries).tolist(), failure, why)


def records(p: ReadPlan, asked: list[int], got: list[int], good: list[bool]) -> list[bool]:
    return p.on_records(p.positions(asked), np.asarray(got, dtype=np.int64),
                        np.asarray(good), "corrupt").tolist()


def test_the_first_round_asks_each_entry_of_the_first_bookie_of_its_write_set() -> None:
    assert asks(plan(range(6))) == {("b0", -1): [0, 4], ("b1", -1): [1, 5], ("b2", -1): [2],
                                    ("b3", -1): [3]}


def test_entries_after_an_ensemble_change_are_asked_of_the_new_ensemble() -> None:
    ensembles = ((0, ENSEMBLE), (4, ("b0", "b9", "b2", "b3")))
    assert asks(plan([1, 5], ensembles)) == {("b1", -1): [1], ("b9", -1): [5]}


@pytest.mark.parametrize("failure", list(Failure))
def test_a_failed_copy_moves_the_entry_to_the_next_bookie_of_its_write_set(
        failure: Failure) -> None:
    p = plan([0, 1])
    fail(p, [0], failure)
    assert asks(p) == {("b1", -1): [0, 1]}  # entry 0's copy 1, entry 1's copy 0


@pytest.mark.parametrize(("answer", "unreachable", "failure"), [
    (NoSuchLedgerError("gone"), False, Failure.LACKS),
    (NoSuchEntryError("gone"), False, Failure.LACKS),
    (UnknownError("in limbo: it cannot tell"), False, Failure.NO_ANSWER),  # never a negative
    (LedgerFencedError("fenced"), False, Failure.NO_ANSWER),
    (BookieUnavailableError("down"), True, Failure.UNREACHABLE),
    (TimeoutError(), False, Failure.NO_ANSWER),
])
def test_what_an_error_answer_counts_as(answer: BaseException, unreachable: bool,
                                        failure: Failure) -> None:
    assert failure_of(answer, unreachable) is failure


@pytest.mark.parametrize(("failures", "error"), [
    ([Failure.CORRUPT] * 3, DigestMismatchError),
    ([Failure.LACKS] * 3, NoSuchEntryError),
    ([Failure.LACKS, Failure.LACKS, Failure.NO_ANSWER], BookieUnavailableError),
    ([Failure.LACKS, Failure.NO_ANSWER, Failure.LACKS], BookieUnavailableError),  # limbo
    ([Failure.CORRUPT, Failure.LACKS, Failure.LACKS], BookieUnavailableError),
    ([Failure.UNREACHABLE] * 3, BookieUnavailableError),
])
def test_an_entry_with_no_good_copy_fails_by_the_kinds_of_its_failures(
        failures: list[Failure], error: type) -> None:
    p = plan([2])
    for f in failures:
        fail(p, [2], f, f"why {f}")
    with pytest.raises(error, match="entry 2 of ledger 5") as info:
        p.next_asks(time_left=False)
    assert all(f"why {f}" in str(info.value) for f in failures)
    assert type(no_good_copy(5, 2, failures, [])) is error


def test_a_bookie_in_limbo_never_makes_an_entry_missing() -> None:
    """Two copies say "no such entry", the third bookie lost its data (UNKNOWN): the entry
    may exist (the limbo bookie may have acknowledged it), so the read does not conclude
    it is absent."""
    p = plan([0])
    fail(p, [0], failure_of(NoSuchEntryError("no"), False))
    fail(p, [0], failure_of(UnknownError("limbo"), False))
    fail(p, [0], failure_of(NoSuchEntryError("no"), False))
    with pytest.raises(BookieUnavailableError):
        p.next_asks(time_left=True)


def test_unreachable_copies_are_asked_again_patiently_while_time_is_left() -> None:
    p = plan([0])
    fail(p, [0], Failure.UNREACHABLE)  # b0
    fail(p, [0], Failure.LACKS)  # b1
    fail(p, [0], Failure.UNREACHABLE)  # b2
    # the second pass: b0 then b2, each with a share of the time left (2, then 1)
    assert asks(p) == {("b0", 2): [0]}
    fail(p, [0], Failure.UNREACHABLE)
    assert asks(p) == {("b2", 1): [0]}
    fail(p, [0], Failure.UNREACHABLE)
    with pytest.raises(BookieUnavailableError):
        p.next_asks(time_left=True)  # the patient pass is made once


def test_no_patient_pass_without_time_left() -> None:
    p = plan([0])
    for _ in range(3):
        fail(p, [0], Failure.UNREACHABLE)
    with pytest.raises(BookieUnavailableError):
        p.next_asks(time_left=False)


def test_a_good_record_reads_the_entry_and_a_bad_one_moves_to_the_next_copy() -> None:
    p = plan([0, 4])
    assert asks(p) == {("b0", -1): [0, 4]}
    assert records(p, [0, 4], [0, 4], [True, False]) == [True, False]
    assert asks(p) == {("b1", -1): [4]}
    assert p.failures[1] == [Failure.CORRUPT] and not p.finished()
    assert records(p, [4], [4], [True]) == [True] and p.finished()


def test_records_not_asked_for_or_repeated_are_ignored() -> None:
    p = plan([5, 6])
    p.next_asks(True)
    # 4 was not asked; 5 comes twice (the first counts); 6 is good
    assert records(p, [5, 6], [4, 5, 5, 6], [True, True, True, True]) == [
        False, True, False, True]
    assert p.finished()


def test_entries_listed_missing_lack_and_entries_cut_off_are_asked_again_of_the_same_copy(
        ) -> None:
    p = plan([0, 4, 8])
    assert asks(p) == {("b0", -1): [0, 4, 8]}
    assert records(p, [0, 4, 8], [0], [True]) == [True]
    p.on_missing(p.positions([0, 4, 8]), [4], "b0: no such entry")
    # 4 lacked on b0: its next copy; 8 was neither returned nor listed: b0 again
    assert asks(p) == {("b0", -1): [8], ("b1", -1): [4]}
    assert p.failures[1] == [Failure.LACKS] and p.failures[2] == []
