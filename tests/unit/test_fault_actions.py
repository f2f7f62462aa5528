"""The fault runner's table (faults/runner.py FAULT_ACTIONS): every kind of fault has its
(inject, undo) pair, and the undo a fault with a duration needs."""

from __future__ import annotations

from bk_spark.faults.plan import NETWORK_KINDS, FaultKind
from bk_spark.faults.runner import FAULT_ACTIONS


def test_every_kind_of_fault_has_an_inject_and_undo_row() -> None:
    assert set(FAULT_ACTIONS) == set(FaultKind)
    assert all(callable(inject) for inject, _undo in FAULT_ACTIONS.values())


def test_network_cuts_and_bookie_stops_are_undone_after_their_duration() -> None:
    undone = {FaultKind.BOOKIE_KILL, FaultKind.BOOKIE_PAUSE, FaultKind.ZK_RESTART,
              FaultKind.WRITER_KILL, FaultKind.WRITER_KILL_MID_ROLL,
              FaultKind.WRITER_PAUSE_FENCE, FaultKind.FENCE_DELETE, *NETWORK_KINDS}
    assert {k for k, (_i, undo) in FAULT_ACTIONS.items() if undo is not None} >= undone
