"""The writer's and recoverer's decisions after a lost CAS (bookkeeper-protocol.txt), as
tables over the metadata they find: no server."""

from __future__ import annotations

import pytest

from bk_spark.errors import BookieUnavailableError, LedgerFencedError, ReadOnlyError
from bk_spark.protocol.ledger_metadata import LedgerMetadata, LedgerState
from bk_spark.protocol.ledger_rules import (
    CLOSE_AS_WRITER,
    REPLACEABLE_ERRORS,
    Decision,
    close_as_writer,
    recoverer_replacement,
    writer_ensemble_change,
)

E4 = ("b0:1", "b1:1", "b2:1", "b3:1")


def _md(state: LedgerState = LedgerState.OPEN, last_entry: int = -1,
        ensemble: tuple[str, ...] = E4) -> LedgerMetadata:
    return LedgerMetadata(ledger_id=7, ensemble_size=4, write_quorum_size=3,
                          ack_quorum_size=2, ensembles=((0, ensemble),), state=state,
                          last_entry_id=last_entry)


# The seed: "If the CAS operation fails, the writer must re-read the metadata. If the ledger
# is still OPEN, the writer retries. If the ledger is IN_RECOVERY, the writer has failed. If
# the ledger is CLOSED with the same last entry id, the writer has succeeded. If the ledger
# is CLOSED with a different last entry id, the writer has failed."
@pytest.mark.parametrize("state, found_last, writer_last, decision", [
    (LedgerState.OPEN, -1, 12, Decision.CHANGE),
    (LedgerState.IN_RECOVERY, -1, 12, Decision.RECOVERING),
    (LedgerState.CLOSED, 12, 12, Decision.DONE),
    (LedgerState.CLOSED, 11, 12, Decision.CLOSED_ELSEWHERE),
    (LedgerState.CLOSED, 13, 12, Decision.CLOSED_ELSEWHERE),
    (LedgerState.CLOSED, -1, -1, Decision.DONE),
])
def test_closing_as_a_writer_retries_open_fails_recovering_and_succeeds_only_at_its_last_entry(
        state, found_last, writer_last, decision):
    assert close_as_writer(_md(state, found_last), writer_last) is decision


def test_the_close_as_writer_table_covers_every_state():
    assert {s for s, _ in CLOSE_AS_WRITER} == set(LedgerState)
    assert all((s, same) in CLOSE_AS_WRITER for s in LedgerState for same in (True, False))


@pytest.mark.parametrize("state, ensemble, decision", [
    (LedgerState.OPEN, E4, Decision.CHANGE),                           # still names it
    (LedgerState.OPEN, ("b0:1", "b5:1", "b2:1", "b3:1"), Decision.DONE),  # own CAS landed
    (LedgerState.IN_RECOVERY, E4, Decision.NOT_OPEN),  # a recoverer stops ensemble changes
    (LedgerState.CLOSED, E4, Decision.NOT_OPEN),
])
def test_a_writer_changes_the_ensemble_only_while_open_and_only_once(state, ensemble, decision):
    assert writer_ensemble_change(_md(state, ensemble=ensemble), 1, "b1:1") is decision


@pytest.mark.parametrize("state, ensemble, broken, decision", [
    (LedgerState.IN_RECOVERY, E4, {1: "b1:1"}, Decision.CHANGE),
    (LedgerState.IN_RECOVERY, E4, {1: "b1:1", 3: "b3:1"}, Decision.CHANGE),
    (LedgerState.IN_RECOVERY, ("b0:1", "b5:1", "b2:1", "b3:1"), {1: "b1:1"}, Decision.DONE),
    (LedgerState.IN_RECOVERY, ("b0:1", "b5:1", "b2:1", "b3:1"), {1: "b1:1", 3: "b3:1"},
     Decision.CHANGE),
    (LedgerState.CLOSED, E4, {1: "b1:1"}, Decision.DONE),  # another recoverer finished
])
def test_a_recoverer_replaces_bookies_for_its_write_back_only_until_the_ledger_is_closed(
        state, ensemble, broken, decision):
    assert recoverer_replacement(_md(state, ensemble=ensemble), broken) is decision


@pytest.mark.parametrize("error, replaceable", [
    (BookieUnavailableError("down"), True),
    (ReadOnlyError("full"), True),
    (LedgerFencedError("fenced"), False),
])
def test_only_a_bookie_that_is_down_or_readonly_is_replaced(error, replaceable):
    assert isinstance(error, REPLACEABLE_ERRORS) is replaceable
