"""The decisions of a log's new owner, writer and committer (ledgers-to-logs.txt), as
tables over the ledger list they read: no server."""

from __future__ import annotations

import dataclasses

import pytest

from bk_spark.errors import InvalidConfigError
from bk_spark.protocol.log_format import LedgerInfo, LogMetadata
from bk_spark.protocol.log_rules import (
    OUTSIDE,
    ROLL,
    TXN_PROPERTY,
    LedgerNow,
    LogDecision,
    Outside,
    Removed,
    commit_check,
    ledgers_to_fence,
    log_quorums,
    outside_position,
    owns,
    quorum_properties,
    removed_range,
    roll,
)


def _log(*rows: tuple[int, int | None], first_index: int = 0, deleting: bool = False,
         txn: dict[str, int] | None = None) -> LogMetadata:
    """A log whose tail lists ``(ledger id, last entry or None: not described)``."""
    tail = tuple(
        LedgerInfo(lid, i, 1000 + i) if last is None else
        LedgerInfo(lid, i, 1000 + i).described(last, 2000 + i if last >= 0 else None)
        for i, (lid, last) in enumerate(rows))
    props = {TXN_PROPERTY: txn} if txn else {}
    return LogMetadata(ctime_ms=1, first_index=first_index, tail=tail, properties=props,
                       deleting=deleting)


# "Fence the last two ledgers in the list. Two ledgers are fenced because the writer may be
# writing to the second-to-last ledger while adding the last ledger to the list."
@pytest.mark.parametrize("rows, first_index, fenced", [
    ([], 0, []),
    ([(10, None)], 0, [10]),
    ([(10, 5), (11, None)], 0, [10, 11]),                 # writer may still be on 10
    ([(10, 5), (11, 7), (12, None)], 0, [11, 12]),        # 10 is described: left alone
    ([(10, None), (11, 7), (12, None)], 0, [10, 11, 12]),  # 10's end never recorded
])
def test_a_new_owner_fences_the_last_two_live_ledgers_and_reads_undescribed_older_ends(
        rows, first_index, fenced):
    md = _log(*rows, first_index=first_index)
    assert [r.ledger_id for r in ledgers_to_fence(md)] == fenced


def test_a_new_owner_leaves_alone_the_ledgers_only_parquet_holds():
    """A ledger whose bookie copy was dropped after its offload is closed and described (only
    such ledgers are offloaded): a new owner has nothing to fence there, and no bookie to ask
    (a log whose last two ledgers were dropped took no writer: 'other writers keep taking
    the log')."""
    from bk_spark.protocol import offload_rules as off

    md = _log((10, 5), (11, 7), (12, 3))
    done = off.OffloadState("a", "file:///t", done_ms=1, rows=8, entries=8)
    props = off.with_state({}, 11, dataclasses.replace(done, dropped=True))
    props = off.with_state(props, 12, dataclasses.replace(done, dropped=True))
    assert [r.ledger_id for r in ledgers_to_fence(dataclasses.replace(md, properties=props))
            ] == []
    props = off.with_state({}, 11, dataclasses.replace(done, dropped=True))
    props = off.with_state(props, 12, done)  # complete, bookie copy kept: fenced as ever
    assert [r.ledger_id for r in ledgers_to_fence(dataclasses.replace(md, properties=props))
            ] == [12]


def test_a_writer_owns_the_log_while_the_last_ledger_is_its_own():
    md = _log((10, 5), (11, None))
    assert owns(md, 11) and not owns(md, 10) and not owns(_log(), 11)


@pytest.mark.parametrize("rows, deleting, decision", [
    ([(10, None)], False, LogDecision.CHANGE),           # still the owner: add 11
    ([(10, None), (11, None)], False, LogDecision.DONE),  # own CAS landed, answer lost
    ([(10, None), (20, None)], False, LogDecision.LOST),  # another writer took over
    ([(10, None)], True, LogDecision.DELETED),
])
def test_a_rolling_writer_adds_its_ledger_only_while_it_owns_the_log(rows, deleting, decision):
    assert roll(_log(*rows, deleting=deleting), current=10, new=11) is decision


def test_the_roll_table_covers_every_case():
    assert len(ROLL) == 8


@pytest.mark.parametrize("rows, txn, ids, txn_id, deleting, decision", [
    ([(1, 3)], None, [5, 6], 0, False, LogDecision.CHANGE),
    ([(1, 3), (5, 2), (6, 4)], None, [5, 6], 0, False, LogDecision.DONE),  # own CAS landed
    ([(1, 3)], {"q": 4}, [5, 6], 4, False, LogDecision.COMMITTED),   # replayed batch
    ([(1, 3)], {"q": 7}, [5, 6], 4, False, LogDecision.COMMITTED),   # zombie of an old one
    ([(1, 3)], {"q": 3}, [5, 6], 4, False, LogDecision.CHANGE),      # the next batch
    ([(1, 3)], {"other": 9}, [5, 6], 4, False, LogDecision.CHANGE),  # another sink's key
    ([(1, 3)], None, [], 4, False, LogDecision.CHANGE),              # an empty batch commits
    ([(1, 3), (5, 2), (6, 4)], None, [5, 6], 0, True, LogDecision.DELETED),
])
def test_a_commit_adds_nothing_when_its_ledgers_or_its_transaction_are_already_there(
        rows, txn, ids, txn_id, deleting, decision):
    md = _log(*rows, txn=txn, deleting=deleting)
    assert commit_check(md, ids, "q", txn_id) is decision


def test_a_commit_without_a_transaction_key_is_never_taken_for_a_replay():
    md = dataclasses.replace(_log((1, 3)), properties={TXN_PROPERTY: {"q": 99}})
    assert commit_check(md, [5], None, None) is LogDecision.CHANGE


@pytest.mark.parametrize("recorded, given, quorums", [
    ({}, (None, None, None), (3, 2, 2)),                      # nothing recorded: defaults
    ({"bk-spark.ensemble_size": 5, "bk-spark.write_quorum_size": 3,
      "bk-spark.ack_quorum_size": 3}, (None, None, None), (5, 3, 3)),  # the log's
    ({"bk-spark.ensemble_size": 5, "bk-spark.write_quorum_size": 3,
      "bk-spark.ack_quorum_size": 3}, (None, None, 2), (5, 3, 2)),     # given wins
    ({"bk-spark.ensemble_size": "4"}, (None, None, None), (4, 2, 2)),  # string properties
])
def test_a_writer_takes_the_quorums_given_else_the_logs_else_the_defaults(recorded, given,
                                                                           quorums):
    assert log_quorums(recorded, given) == quorums


def test_quorums_that_break_e_ge_qw_ge_qa_are_refused_whoever_chose_them():
    with pytest.raises(InvalidConfigError):
        log_quorums({"bk-spark.ensemble_size": 2}, (None, 3, None))
    assert quorum_properties((3, 2, 2)) == {"bk-spark.ensemble_size": 3,
                                            "bk-spark.write_quorum_size": 2,
                                            "bk-spark.ack_quorum_size": 2}


# A startingOffsets position {"ledger": L, "entry": E} with no index, in a ledger the list does
# not hold (issue 25, 4): truncated (data loss) or never part of the log (an option error).
def test_the_outside_position_table_covers_every_case() -> None:
    assert set(OUTSIDE) == {(n, r) for n in LedgerNow for r in Removed}


def _truncated_log(removed: tuple[int, int] | None, first_index: int = 2) -> LogMetadata:
    md = _log((10, 5), (14, 5), (20, None), first_index=0)
    md = md.truncated(first_index)
    return dataclasses.replace(md, removed_ledgers=removed)


@pytest.mark.parametrize("ledger, now, expected", [
    (10, LedgerNow.GONE, Outside.TRUNCATED),       # removed and deleted
    (14, LedgerNow.THIS_LOG, Outside.TRUNCATED),   # removed, its deletion still to come
    (12, LedgerNow.GONE, Outside.TRUNCATED),       # another log's, deleted, in range: loss
    (12, LedgerNow.ELSEWHERE, Outside.FOREIGN),    # another log's, alive
    (9, LedgerNow.GONE, Outside.FOREIGN),          # below every removed id
    (99, LedgerNow.GONE, Outside.FOREIGN),         # above: a typo, or not created yet
    (99, LedgerNow.THIS_LOG, Outside.FOREIGN),     # a spare never listed
])
def test_a_position_in_a_removed_ledger_is_data_loss_and_any_other_an_option_error(
        ledger: int, now: LedgerNow, expected: Outside) -> None:
    assert outside_position(_truncated_log((10, 14)), ledger, now) is expected


def test_a_position_outside_a_never_truncated_log_was_never_part_of_it() -> None:
    md = _log((10, 5), (14, None))
    assert removed_range(md, 3) is Removed.NONE
    for now in LedgerNow:
        assert outside_position(md, 3, now) is Outside.FOREIGN


def test_a_log_truncated_before_it_kept_the_range_cannot_tell_a_deleted_ledger() -> None:
    md = _truncated_log(None)
    assert removed_range(md, 10) is Removed.UNRECORDED
    assert outside_position(md, 10, LedgerNow.GONE) is Outside.UNKNOWN
    assert outside_position(md, 10, LedgerNow.ELSEWHERE) is Outside.FOREIGN
