"""Self-repair of a bookie that lost its data (BP-46), the pure parts and the storage:
which ledgers get which mark, what an answer of a bookie in limbo counts for, and the
marks' durability (a restart mid-repair resumes; a cleared ledger stays fenced)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bk_spark.errors import (
    BKError,
    LedgerFencedError,
    NoSuchEntryError,
    NoSuchLedgerError,
    UnknownError,
    error_for_code,
)
from bk_spark.proto import bookie_pb2 as pb
from bk_spark.protocol.answers import ANSWERS, NEGATIVE_ANSWERS, Answer, answer_kind
from bk_spark.protocol.ledger_metadata import LedgerMetadata, LedgerState
from bk_spark.protocol.recovery_plan import (
    REPAIR_MARKS,
    RETIRED_MARK_REFUSES_PLAIN_ADDS,
    RepairMark,
    repair_duties,
    repair_mark,
    retired_mark_refuses_plain_adds,
)
from bookie_server.config import BookieConfig
from bookie_server.limbo import RECORD, RepairMarks
from bookie_server.storage import BookieStorage

ME = "me:1"


def _md(state: LedgerState, ensembles: tuple, last: int = -1) -> LedgerMetadata:
    md = LedgerMetadata(ledger_id=7, ensemble_size=3, write_quorum_size=2, ack_quorum_size=2,
                        ensembles=ensembles)
    if state == LedgerState.CLOSED:
        return md.closed(last, 0)
    return md.with_state(state) if state != LedgerState.OPEN else md


# -- which mark ----------------------------------------------------------------------------

def test_the_mark_table_covers_every_case():
    assert set(REPAIR_MARKS) == {(c, n) for c in (False, True) for n in (False, True)}


@pytest.mark.parametrize(("state", "ensembles", "want"), [
    (LedgerState.OPEN, ((0, ("a:1", ME, "c:1")),), RepairMark.LIMBO),
    (LedgerState.IN_RECOVERY, ((0, ("a:1", ME, "c:1")),), RepairMark.LIMBO),
    (LedgerState.CLOSED, ((0, ("a:1", ME, "c:1")),), RepairMark.FENCED),
    (LedgerState.OPEN, ((0, (ME, "b:1", "c:1")), (5, ("d:1", "b:1", "c:1"))),
     RepairMark.COPY),
    (LedgerState.CLOSED, ((0, (ME, "b:1", "c:1")), (5, ("d:1", "b:1", "c:1"))),
     RepairMark.COPY),
    (LedgerState.OPEN, ((0, ("a:1", "b:1", "c:1")),), None),
])
def test_a_ledger_not_closed_whose_last_ensemble_names_the_bookie_is_in_limbo(
        state, ensembles, want):
    assert repair_mark(_md(state, ensembles, last=9), ME) == want


def test_repair_copies_what_the_closed_fragments_give_the_bookie():
    md = _md(LedgerState.CLOSED, ((0, (ME, "b:1", "c:1")), (5, ("d:1", "b:1", ME))), last=9)
    duties = repair_duties(md, ME)
    assert [(d.index, d.first, d.last) for d in duties] == [(0, 0, 4), (2, 5, 9)]


# -- what an answer counts for -------------------------------------------------------------

def test_only_no_such_ledger_or_entry_is_a_negative_and_unknown_is_no_answer():
    assert set(NEGATIVE_ANSWERS) == {NoSuchLedgerError, NoSuchEntryError}
    assert answer_kind(None) == Answer.HOLDS
    assert answer_kind(error_for_code(pb.UNKNOWN, "limbo")) == Answer.NO_ANSWER
    assert isinstance(error_for_code(pb.UNKNOWN, "limbo"), UnknownError)
    assert answer_kind(error_for_code(pb.NO_SUCH_LEDGER, "x")) == Answer.LACKS
    assert answer_kind(BKError("unreachable")) == Answer.NO_ANSWER


def test_every_wire_status_has_a_kind():
    for name, code in pb.StatusCode.items():
        if name in ("OK", "INTERNAL"):
            continue
        assert type(error_for_code(code, name)) in ANSWERS, name


# -- durability ----------------------------------------------------------------------------

def test_marks_survive_a_restart_and_a_torn_record_is_dropped(tmp_path: Path):
    m = RepairMarks(tmp_path)
    m.load()
    m.begin({1: RepairMark.LIMBO, 2: RepairMark.FENCED, 3: RepairMark.COPY})
    m.clear(2, entries=10, nbytes=100)
    m.close()
    with open(tmp_path / "repair-marks.log", "ab") as f:
        f.write(RECORD.pack(b"X", 1, 0, 0)[:7])  # a crash mid-append
    m = RepairMarks(tmp_path)
    m.load()
    assert m.pending() == {1: RepairMark.LIMBO, 3: RepairMark.COPY}
    p = m.progress()
    assert (p.state, p.total, p.left, p.limbo, p.entries_copied, p.bytes_copied) == \
        ("repairing", 3, 2, 1, 10, 100)
    m.clear(1)
    m.clear(3)
    m.finish()
    m.close()
    m = RepairMarks(tmp_path)
    m.load()
    assert not m.in_progress() and m.progress().state == "done"


def _storage(path: Path) -> BookieStorage:
    s = BookieStorage(BookieConfig(data_dir=path, checkpoint_interval_s=0, gc_interval_s=0,
                                   disk_check_interval_s=0))
    s.start()
    return s


def test_a_ledger_in_limbo_refuses_plain_adds_and_stays_fenced_once_repaired(tmp_path: Path):
    key = b"k" * 20
    s = _storage(tmp_path)
    s.begin_repair({7: RepairMark.LIMBO, 8: RepairMark.COPY})
    assert s.in_limbo(7) and not s.in_limbo(8)
    with pytest.raises(LedgerFencedError):
        s.add_entries(7, key, [(0, -1, b"late", b"")])
    s.add_entries(8, key, [(0, -1, b"ok", b"")])  # copy only: not fenced
    s.add_entries(7, key, [(0, -1, b"copied", b"")], recovery=True)  # the repair's copy
    s.close()
    s = _storage(tmp_path)  # a restart mid-repair keeps the marks
    assert s.in_limbo(7) and s.repair_in_progress()
    s.clear_repair_mark(7, key, 1, 6)
    s.clear_repair_mark(8, key)
    s.finish_repair()
    s.close()
    s = _storage(tmp_path)
    assert not s.in_limbo(7) and not s.repair_in_progress()
    with pytest.raises(LedgerFencedError):  # the fence was journaled with the key
        s.add_entries(7, key, [(1, 0, b"late", b"")])
    s.add_entries(8, key, [(1, 0, b"ok", b"")])
    assert s.repair_progress().bytes_copied == 6
    s.close()


# -- a mark retired (AutoRecovery replaced the bookie after a hand-over) --------------------

def test_the_retired_mark_table_covers_every_mark_and_state():
    assert set(RETIRED_MARK_REFUSES_PLAIN_ADDS) == {(m, st) for m in RepairMark
                                                    for st in LedgerState}


@pytest.mark.parametrize(("mark", "state", "refuses"), [
    (RepairMark.FENCED, LedgerState.CLOSED, True),       # recovered: the fence it forgot
    (RepairMark.LIMBO, LedgerState.CLOSED, True),        # recovered since it was marked
    (RepairMark.LIMBO, LedgerState.IN_RECOVERY, True),   # a recovery began
    (RepairMark.LIMBO, LedgerState.OPEN, False),         # never fenced: its writer may pick it
    (RepairMark.COPY, LedgerState.CLOSED, False),        # never on the last ensemble
])
def test_a_retired_mark_keeps_plain_adds_refused_only_where_a_recovery_may_have_fenced_it(
        mark, state, refuses):
    assert retired_mark_refuses_plain_adds(mark, state) is refuses


def test_a_retired_mark_is_no_longer_left_to_repair_and_its_refusal_survives_a_restart(
        tmp_path: Path):
    key = b"k" * 20
    s = _storage(tmp_path)
    s.begin_repair({7: RepairMark.FENCED, 8: RepairMark.LIMBO})
    s.retire_repair_mark(7, True)
    s.retire_repair_mark(8, False)
    assert s.repair_marks() == {} and s.repair_progress().left == 0
    s.finish_repair()
    s.close()
    s = _storage(tmp_path)
    with pytest.raises(LedgerFencedError):  # an old writer's add: refused for good
        s.add_entries(7, key, [(5, 4, b"late", b"")])
    s.add_entries(7, key, [(0, -1, b"copy", b"")], recovery=True)  # a re-replication target
    s.add_entries(8, key, [(0, -1, b"ok", b"")])  # served as any other ledger
    assert not s.in_limbo(7) and s.repair_mark(7) is None
    s.close()
