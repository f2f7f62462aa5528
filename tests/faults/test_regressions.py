"""Regression tests of the bugs the fault suite found, each replayed deterministically.

Every test names the schedule that found the bug and the guarantee it broke.
"""

from __future__ import annotations

import signal
import time

import pytest

from bk_spark.autorecovery.auditor import bookies_lacking_entries
from bk_spark.core.client import BookKeeper, BookKeeperConfig
from bk_spark.errors import BKError
from bk_spark.faults.cluster import FaultCluster, signal_pid
from bk_spark.faults.payloads import ledger_payload
from bk_spark.io.bookie_client import ClientConfig
from bk_spark.protocol.schedule import write_set

PW = b"regression"


def client(cluster: FaultCluster) -> BookKeeper:
    return BookKeeper(cluster.uri, BookKeeperConfig(
        client=ClientConfig(add_timeout_s=2.0, read_timeout_s=2.0)))


def slot_of(cluster: FaultCluster, bookie_id: str) -> int:
    return next(s.index for s in cluster.slots if s.process.bookie_id == bookie_id)


def test_a_writer_that_loses_zookeeper_during_an_ensemble_change_fails_its_adds(
        healed: FaultCluster) -> None:
    """Seed 0 (short): a ZooKeeper session expiry while a bookie was being replaced killed
    the ensemble-change thread with a kazoo exception; the index stayed without a bookie,
    so with Qw = Qa the writer's adds never completed (nor failed), and with Qw > Qa they
    went on silently with one copy fewer. They must fail, promptly: through their futures,
    or at the call once the writer has already stopped (how many are taken before the
    failed change stops the writer depends on the machine's timing)."""
    bk = client(healed)
    try:
        lh = bk.create_ledger(3, 2, 2, password=PW)
        for e in range(5):
            lh.add_entry(ledger_payload(lh.id, e))
        bk.zk.stop()  # the client has lost ZooKeeper: every kazoo call now raises
        healed.kill(slot_of(healed, lh.metadata.last_ensemble[0]))
        futures = []
        for e in range(5, 10):
            try:
                futures.append(lh.add_entry_async(ledger_payload(lh.id, e)))
            except BKError as exc:  # the writer stopped: it says why
                assert "could not replace bookie" in str(exc)
        deadline = time.monotonic() + 30
        for f in futures:
            with pytest.raises(BKError):
                f.result(timeout=max(0.1, deadline - time.monotonic()))
    finally:
        bk.close()


def test_recovery_replaces_a_dead_bookie_its_write_back_needs(healed: FaultCluster) -> None:
    """Seed 118 (short): a writer died, then a bookie of its ledger's ensemble died for good
    (E=3, Qw=Qa=2). Recovery wrote the last entries back to their whole write quorum and
    failed on the dead bookie forever: acknowledged entries stayed unreadable through a
    recovery open. Recovery must replace the bookie (a new fragment, IN_RECOVERY) instead."""
    writer, reader = client(healed), client(healed)
    try:
        lh = writer.create_ledger(3, 2, 2, password=PW)
        n = 30
        for e in range(n):
            lh.add_entry(ledger_payload(lh.id, e))
        ensemble = lh.metadata.last_ensemble
        victim = ensemble[write_set(n - 1, 3, 2)[0]]  # holds the last entry
        writer.bookies.close()  # the writer is gone without closing its ledger
        healed.kill(slot_of(healed, victim), forever=True)
        rh = reader.open_ledger(lh.id, PW, recovery=True)
        assert rh.last_add_confirmed == n - 1
        assert [e.payload for e in rh.read_entries(0, n - 1)] == \
            [ledger_payload(lh.id, e) for e in range(n)]
        md = rh.metadata
        assert md.is_closed and victim not in md.last_ensemble
    finally:
        writer.close()
        reader.close()


def test_a_bookie_survives_zookeeper_dying_while_it_registers(healed: FaultCluster) -> None:
    """Seed 20020 (long): ZooKeeper was killed a moment after a bookie restarted; the
    ConnectionLoss hit the bookie's first registration (``ensure_path`` outside the retried
    path) and the bookie process exited. It must keep serving and register once ZooKeeper
    is back."""
    i = 1
    for _attempt in range(6):
        healed.kill(i)
        healed.restart(i)  # returns once the bookie listens: it is registering now
        healed.stop_zookeeper()
        time.sleep(1.0)
        healed.start_zookeeper()
        s = healed.slots[i]
        assert s.process.proc is not None and s.process.proc.poll() is None, \
            (s.data_dir / "bookie.log").read_text()[-3000:]
        healed.wait_writable(30)


def test_a_bookie_restarted_while_zookeeper_is_down_serves_once_zookeeper_is_back(
        healed: FaultCluster) -> None:
    """Seed 21 (long): a bookie's restart (after its journal tail was torn) fell inside a
    ZooKeeper restart. A bookie checks its cookie in ZooKeeper before it listens; the
    harness waited for it to listen (three 60 s attempts) before the timeline could bring
    ZooKeeper back, so ZooKeeper stayed down 185 s instead of 0.8 s and three writers'
    adds stalled. The restart must return at once, and the bookie serve once ZooKeeper is
    back."""
    i = 2
    healed.kill(i)
    healed.stop_zookeeper()
    started = time.monotonic()
    healed.restart(i)
    assert time.monotonic() - started < 10.0
    healed.start_zookeeper()  # returns once the bookie launched meanwhile serves
    s = healed.slots[i]
    assert s.state == "up" and s.process.proc is not None and s.process.proc.poll() is None
    healed.wait_writable(30)


def test_a_replacement_bookie_receives_every_entry_of_its_fragment(
        healed: FaultCluster) -> None:
    """Seed 28001 (long): a log writer's ledger (E=4, Qw=3, Qa=2) was created with a bookie
    that had just died; its ensemble change waited on ZooKeeper (restarting) while the two
    other bookies of each write set acknowledged every add. Only the adds still
    unacknowledged when the change's CAS landed were sent to the replacement, yet the new
    fragment, from the first unacknowledged entry, names it for all of them: it held none
    of the ledger's 78 entries, one copy short of Qw, and with no spare bookie left
    AutoRecovery could not heal it (not_healed). The replacement must receive every entry
    its write sets give it in the new fragment (BookKeeper holds the acknowledgements
    back while the ensemble changes, then resends them)."""
    bk = client(healed)
    checker = client(healed)
    zk_pid = healed.zk.proc.pid if healed.zk.proc is not None else None
    assert zk_pid is not None
    stopped = False
    try:
        lh = bk.create_ledger(3, 3, 2, password=PW)
        for e in range(5):
            lh.add_entry(ledger_payload(lh.id, e))
        victim = lh.metadata.last_ensemble[1]
        signal_pid(zk_pid, signal.SIGSTOP)  # the change's CAS waits for ZooKeeper
        stopped = True
        healed.kill(slot_of(healed, victim))
        futures = [lh.add_entry_async(ledger_payload(lh.id, e)) for e in range(5, 25)]
        time.sleep(1.0)  # the two other bookies confirm every add meanwhile
        signal_pid(zk_pid, signal.SIGCONT)
        stopped = False
        assert [f.result(timeout=30) for f in futures] == list(range(5, 25))
        lh.close()
        md = checker.ledger_metadata(lh.id)
        # the new fragment starts after the last entry acknowledged before the failure was
        # seen: 5, or later when the two other bookies acknowledged more first (an add
        # stream breaks a moment after the kill)
        firsts = [first for first, _ in md.ensembles]
        assert len(firsts) == 2 and firsts[0] == 0 and 5 <= firsts[1] <= 24, firsts
        replacement = md.last_ensemble[1]
        assert replacement != victim
        lacking: set[str] = {replacement}
        deadline = time.monotonic() + 10
        while lacking and time.monotonic() < deadline:  # resends may still be on their way
            lacking = bookies_lacking_entries(checker, md, {replacement})
            time.sleep(0.2)
        assert not lacking, f"{replacement} lacks entries of its fragment 5..24"
    finally:
        if stopped:
            signal_pid(zk_pid, signal.SIGCONT)
        bk.close()
        checker.close()
