"""The checker catches every kind of violation it claims to, and only those (pure cases).

A checker that never fails proves nothing: each test hands it a transcript and reads that
break one invariant, and a correct history that breaks none.
"""

from __future__ import annotations

from bk_spark.faults.checker import (
    FencedLedger,
    LedgerRead,
    check_fenced_ledger,
    check_ledger,
    check_log,
    interleavings,
)
from bk_spark.faults.payloads import ledger_payload, log_payload, parse_log_payload
from bk_spark.faults.transcript import parse

LID = 7


def ledger_told(*lines: str):  # type: ignore[no-untyped-def]
    return parse("ledger", "L0-1", [f"ledger {LID} 3 2 2", *lines])


def ledger_read(n: int, lid: int = LID) -> LedgerRead:
    return LedgerRead(lid, n - 1, tuple(ledger_payload(lid, e) for e in range(n)))


def test_payloads_are_derived_from_their_id_and_verified_byte_for_byte() -> None:
    p = log_payload("G0-1", 2, 17)
    assert parse_log_payload(p).seq == 17  # type: ignore[union-attr]
    assert parse_log_payload(p[:-1] + bytes([p[-1] ^ 1])) is None
    assert parse_log_payload(p + b"x") is None
    assert ledger_payload(1, 2) != ledger_payload(2, 1)


def test_a_correct_ledger_history_has_no_findings() -> None:
    told = ledger_told("ack 7 0", "ack 7 1", "ack 7 2", "closed 7 3")
    f = check_ledger(told, LID, ledger_read(4), ledger_read(4), [ledger_payload(LID, 0)])
    assert f.ok and f.acknowledged == 3, f.messages


def test_an_acknowledged_entry_past_the_closed_end_is_lost() -> None:
    told = ledger_told("ack 7 0", "ack 7 1", "ack 7 2")
    f = check_ledger(told, LID, ledger_read(2), ledger_read(2), [])
    assert f.counts["lost"] == 1


def test_an_acknowledged_entry_with_other_bytes_is_lost_and_garbage_is_corrupt() -> None:
    told = ledger_told("ack 7 0")
    good = ledger_read(3)
    bad = LedgerRead(LID, 2, (b"garbage", good.payloads[1], b"more garbage"))
    f = check_ledger(told, LID, bad, bad, [])
    assert f.counts["lost"] == 1 and f.counts["corrupt"] == 1


def test_readers_that_disagree_or_a_wrong_close_are_divergent() -> None:
    told = ledger_told("ack 7 0", "closed 7 0")
    f = check_ledger(told, LID, ledger_read(2), ledger_read(1), [b"not what was read"])
    assert f.counts["divergent"] == 3  # close point, client B, observer


def test_an_unreadable_ledger_loses_every_acknowledged_entry() -> None:
    told = ledger_told("ack 7 0", "ack 7 1")
    f = check_ledger(told, LID, RuntimeError("no quorum"), RuntimeError("no quorum"), [])
    assert f.counts["lost"] == 2


def test_a_success_after_the_fence_is_a_violation() -> None:
    told = ledger_told("ack 7 0", "fenced 7", "ok-after-fence 7 5")
    f = check_ledger(told, LID, ledger_read(1), ledger_read(1), [])
    assert f.counts["fence_violations"] == 1


def test_an_add_acknowledged_to_a_fenced_and_deleted_ledger_is_a_violation() -> None:
    # recovered at entry 1, deleted; the old writer, resumed, was told entry 2 was stored
    told = ledger_told("ack 7 0", "ack 7 1", "ack 7 2")
    f = check_fenced_ledger(told, FencedLedger(LID, 1, deleted=True))
    assert f.counts["fenced_or_deleted_acks"] == 1 and f.acknowledged == 3
    assert not f.counts["lost"]  # deleted on purpose: its entries are not lost
    refused = ledger_told("ack 7 0", "ack 7 1", "fail 7 BKError")
    assert check_fenced_ledger(refused, FencedLedger(LID, 1, deleted=True)).ok


def test_an_add_acknowledged_past_the_recovered_end_of_a_fenced_ledger_is_a_violation(
        ) -> None:
    told = ledger_told("ack 7 0", "fenced 7", "ok-after-fence 7 3")
    f = check_fenced_ledger(told, FencedLedger(LID, 0))
    assert f.counts["fenced_or_deleted_acks"] == 1
    assert check_fenced_ledger(ledger_told("ack 7 0", "fenced 7"), FencedLedger(LID, 0)).ok


def test_lines_cut_by_kill_9_are_ignored() -> None:
    told = ledger_told("ack 7 0", "ack 7", "ac")
    assert told.ledgers[LID].acked == [0]


def rec(lid: int, eid: int, tag: str, session: int, seq: int) -> tuple[int, int, bytes]:
    return lid, eid, log_payload(tag, session, seq)


def log_told(tag: str, *lines: str):  # type: ignore[no-untyped-def]
    return parse("log", tag, list(lines), "events")


def test_a_correct_log_history_has_no_findings() -> None:
    a = [rec(1, 0, "A", 1, 0), rec(1, 1, "A", 1, 1), rec(2, 0, "B", 1, 0)]
    wa = log_told("A", "open 1 1", "ack 1 0 1 0 0", "ack 1 1 1 1 0", "lost 1 1")
    wb = log_told("B", "open 1 2", "ack 1 0 2 0 1")
    f = check_log("events", [wa, wb], a, list(a), [a[:2]])
    assert f.ok and f.acknowledged == 3, f.messages


def test_an_acknowledged_append_missing_or_moved_is_lost() -> None:
    a = [rec(1, 0, "A", 1, 0)]
    wa = log_told("A", "ack 1 0 1 0 0", "ack 1 1 1 1 0", "ack 1 2 1 2 0")
    f = check_log("events", [wa], a + [rec(1, 1, "A", 1, 2)], a + [rec(1, 1, "A", 1, 2)], [])
    assert f.counts["lost"] == 2  # seq 1: another append at its position; seq 2: missing


def test_the_same_append_twice_is_a_duplicate() -> None:
    a = [rec(1, 0, "A", 1, 0), rec(1, 1, "A", 1, 0)]
    f = check_log("events", [], a, a, [])
    assert f.counts["duplicates"] == 1


def test_writers_interleaving_in_a_log_are_caught() -> None:
    back_again = [rec(1, 0, "A", 1, 0), rec(2, 0, "B", 1, 0), rec(3, 0, "A", 1, 1)]
    assert len(interleavings("x", back_again)) == 1
    shared_ledger = [rec(1, 0, "A", 1, 0), rec(1, 1, "B", 1, 0)]
    assert len(interleavings("x", shared_ledger)) == 1
    out_of_order = [rec(1, 0, "A", 1, 1), rec(1, 1, "A", 1, 0)]
    assert len(interleavings("x", out_of_order)) == 1
    new_session = [rec(1, 0, "A", 1, 0), rec(2, 0, "B", 1, 0), rec(3, 0, "A", 2, 1)]
    assert interleavings("x", new_session) == []


def test_an_observer_that_saw_something_else_is_divergent() -> None:
    a = [rec(1, 0, "A", 1, 0), rec(1, 1, "A", 1, 1)]
    f = check_log("events", [], a, a, [[rec(1, 0, "A", 1, 0)], [rec(1, 0, "A", 1, 1)]])
    assert f.counts["divergent"] == 1


def test_a_log_entry_that_is_not_a_derived_payload_is_corrupt() -> None:
    a = [rec(1, 0, "A", 1, 0), (1, 1, b"A:1:1:tampered")]
    f = check_log("events", [], a, a, [])
    assert f.counts["corrupt"] == 1


def test_a_success_after_losing_the_log_is_a_violation() -> None:
    wa = log_told("A", "open 1 1", "lost 1 1", "ok-after-lost 1 1 9")
    f = check_log("events", [wa], [], [], [])
    assert f.counts["fence_violations"] == 1
