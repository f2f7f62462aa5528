"""A bookie that lost its disk never rejoins as if nothing happened (issue 26, BP-46).

Real ZooKeeper and bookie processes; ledgers with a password; bookies killed with -9 and
brought back empty through ``restart_wiped`` (tests/conftest.py). Run with
``BK_TEST_UNSAFE_SERVE_LOST_DATA=1`` (self-repair off, the wiped bookie serves as if
nothing happened) the two counterexamples fail: that is the data loss they guard against.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest

from bk_spark.core.client import BookKeeper
from bk_spark.core.context import BookKeeperConfig
from bk_spark.errors import BKError, LedgerFencedError
from bk_spark.io.bookie_client import ClientConfig
from bk_spark.io.underreplication import UnderReplicationManager
from bk_spark.protocol.digest import master_key
from bk_spark.protocol.ledger_metadata import LedgerState
from bk_spark.protocol.recovery_plan import UnderReplicated, entries_on_index
from bk_spark.sandbox import BookieProcess

PASSWORD = b"p"
ARGS = ["--recovery-password", "p"]
FAST = BookKeeperConfig(client=ClientConfig(read_timeout_s=2.0, add_timeout_s=5.0))


def _proc(c: Any, bookie_id: str) -> BookieProcess:
    return next(b for b in c.bookies if b.bookie_id == bookie_id)


def _connected(bk: BookKeeper, bookie_id: str, timeout: float = 10.0) -> None:
    """Wait until this client's channel to a restarted bookie is connected again."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            bk.bookies.get(bookie_id).info()
            return
        except BKError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _wait_repaired(bk: BookKeeper, bookie_id: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = bk.bookies.get(bookie_id).info()
        if info.repair_state == "done":
            return
        time.sleep(0.1)
    raise AssertionError(f"{bookie_id} still repairing: {info}")


def _held(bk: BookKeeper, bookie_id: str, ledger_id: int, last: int) -> list[tuple[int, int]]:
    return list(bk.bookies.get(bookie_id).held_entries(ledger_id, 0, last))


def test_a_wiped_fencing_bookie_does_not_let_the_old_writer_reach_its_ack_quorum(
        cluster_factory: Callable[..., Any],
        restart_wiped: Callable[[BookieProcess], None]) -> None:
    """BP-46's first counterexample. E = Qw = Qa = 2: a recoverer moved the ledger to
    IN_RECOVERY and fenced b0 (one bookie of each write quorum: enough), then died before
    closing it. b0 loses its disk and comes back. Served as if nothing happened, it takes
    the old writer's next add and so does the unfenced b1: acknowledged on a fenced ledger.
    In repair, b0 keeps the ledger fenced (in limbo): the writer is told it was fenced."""
    c = cluster_factory(2, extra_args=ARGS)
    with BookKeeper(c.uri, FAST) as bk:
        lh = bk.create_ledger(ensemble_size=2, write_quorum_size=2, ack_quorum_size=2,
                              password=PASSWORD)
        for i in range(5):
            lh.add_entry(b"entry-%d" % i)
        b0, _b1 = lh.metadata.last_ensemble
        with BookKeeper(c.uri, FAST) as recoverer:  # steps 1 and 2, then it dies
            recoverer.metadata_store.update(
                lh.id, lambda m: m.state == LedgerState.OPEN,
                lambda m: m.with_state(LedgerState.IN_RECOVERY))
            recoverer.bookies.get(b0).fence(lh.id, master_key(PASSWORD))
        restart_wiped(_proc(c, b0))
        _connected(bk, b0)  # the writer's channel to b0 is connected again
        with pytest.raises(LedgerFencedError):
            lh.add_entry(b"after the fence")


def test_recovery_racing_a_wiped_bookie_never_closes_below_an_acknowledged_entry(
        cluster_factory: Callable[..., Any],
        restart_wiped: Callable[[BookieProcess], None]) -> None:
    """BP-46's second counterexample. E = Qw = 3, Qa = 2: entry 5 is acknowledged by b0
    and b1 only (b2 was paused, then killed and restarted without it). b0 loses its disk
    and b1 is paused. A recovery fences b0 and b2 (a coverage of the write quorum) and
    reads forward: served as if nothing happened, b0 says it has no entry 5 and so does
    b2, and the ledger is closed at 4 -- entry 5, acknowledged, is lost. In repair, b0
    answers UNKNOWN: the recovery cannot decide without b1 and waits for it; once b1 is
    back the ledger closes with entry 5, and b0's repair copies everything back."""
    c = cluster_factory(3, extra_args=ARGS)
    with BookKeeper(c.uri, FAST) as writer_bk, BookKeeper(c.uri, FAST) as bk:
        lh = writer_bk.create_ledger(ensemble_size=3, write_quorum_size=3,
                                     ack_quorum_size=2, password=PASSWORD)
        for i in range(5):
            lh.add_entry(b"entry-%d" % i)
        b0, b1, b2 = (_proc(c, b) for b in lh.metadata.last_ensemble)
        b2.pause()
        assert lh.add_entry(b"entry-5") == 5  # acknowledged by b0 and b1
        b2.kill()  # never stored entry 5 (the request died with the process)
        b2.start()
        restart_wiped(b0)
        b1.pause()
        try:
            bk.open_ledger(lh.id, PASSWORD)  # races the repair: must not close below 5
        except BKError:
            pass
        finally:
            b1.resume()
        deadline = time.monotonic() + 60
        while True:
            try:
                rh = bk.open_ledger(lh.id, PASSWORD)
                break
            except BKError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        assert rh.last_add_confirmed == 5
        assert [e.payload for e in rh.read_entries(0, 5)] == [b"entry-%d" % i
                                                            for i in range(6)]
        _wait_repaired(bk, b0.bookie_id)
        assert _held(bk, b0.bookie_id, lh.id, 5) == [(0, 5)]


def test_a_repair_killed_midway_resumes_and_completes(
        cluster_factory: Callable[..., Any],
        restart_wiped: Callable[[BookieProcess], None]) -> None:
    """A repair interrupted by kill -9 resumes from its persisted marks (it does not mark
    again) and copies back every entry the wiped bookie held."""
    c = cluster_factory(3, extra_args=ARGS)
    with BookKeeper(c.uri, FAST) as bk:
        ledgers = []
        for _ in range(12):
            lh = bk.create_ledger(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2,
                                  password=PASSWORD)
            futs = [lh.add_entry_async(b"x" * 512) for _ in range(400)]
            for f in futs:
                f.result()
            lh.close()
            ledgers.append(lh.metadata)
        victim = _proc(c, ledgers[0].last_ensemble[0])
        restart_wiped(victim)
        client = bk.bookies.get(victim.bookie_id)
        _connected(bk, victim.bookie_id)
        info = client.info()
        total = info.repair_ledgers_total
        assert total == len(ledgers) and info.repair_state == "repairing"
        deadline = time.monotonic() + 30
        while info.repair_ledgers_left == total:  # kill it once it is under way
            assert time.monotonic() < deadline, f"the repair does not progress: {info}"
            time.sleep(0.02)
            info = client.info()
        left = info.repair_ledgers_left
        assert 0 < left < total, "the repair finished before it could be interrupted"
        victim.kill()
        victim.start()
        _connected(bk, victim.bookie_id)
        info = client.info()
        assert info.repair_ledgers_total == total and info.repair_ledgers_left <= left
        _wait_repaired(bk, victim.bookie_id)
        r = subprocess.run([sys.executable, "-m", "bk_spark.cli", "bookie", "repair-status",
                            victim.bookie_id, "-m", c.uri, "--json"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        status = json.loads(r.stdout)
        assert status["state"] == "done" and status["ledgers_left"] == 0
        assert status["ledgers_total"] == total and status["entries_copied"] > 0
        # the copies went straight into its storage, not round its own add stream (one
        # process: the loop back through gRPC cost a third of the copy rate)
        assert client.info().stream_add_requests == 0
        for md in ledgers:
            idx = md.last_ensemble.index(victim.bookie_id)
            want = entries_on_index(0, md.last_entry_id, idx, 3, 2)
            held = _held(bk, victim.bookie_id, md.ledger_id, md.last_entry_id)
            have = [e for a, b in held for e in range(a, b + 1)]
            assert have == want, md.ledger_id


def test_a_wiped_bookie_without_the_password_hands_its_ledgers_to_autorecovery(
        cluster_factory: Callable[..., Any],
        restart_wiped: Callable[[BookieProcess], None]) -> None:
    """As a user runs it: no ``--recovery-password`` anywhere, ledgers with a password. The
    wiped bookie lost the keys it stored with its ledgers, so it cannot copy them back
    itself: it hands each to AutoRecovery (marked under-replicated with itself missing),
    whose workers copy from the bookies holding the key to a replacement. Its repair then
    completes, and every entry is on every bookie its write set names."""
    c = cluster_factory(4, extra_args=["--lost-bookie-recovery-delay", "0"])
    with BookKeeper(c.uri, FAST) as bk:
        ledgers = []
        for _ in range(4):
            lh = bk.create_ledger(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2,
                                  password=PASSWORD)
            for f in [lh.add_entry_async(b"y" * 256) for _ in range(50)]:
                f.result()
            lh.close()
            ledgers.append(lh.metadata)
        victim = _proc(c, ledgers[0].last_ensemble[0])
        restart_wiped(victim)
        _connected(bk, victim.bookie_id)
        _wait_repaired(bk, victim.bookie_id, timeout=90)
        for old in ledgers:
            md = bk.metadata_store.read(old.ledger_id).value
            for first, ensemble in md.ensembles:
                nxt = [f for f, _ in md.ensembles if f > first]
                last = (nxt[0] - 1) if nxt else md.last_entry_id
                for idx, b in enumerate(ensemble):
                    want = entries_on_index(first, last, idx, 3, 2)
                    held = _held(bk, b, md.ledger_id, md.last_entry_id)
                    have = {e for a, z in held for e in range(a, z + 1)}
                    assert set(want) <= have, (md.ledger_id, b)
            rh = bk.open_ledger(md.ledger_id, PASSWORD)
            assert [e.payload for e in rh.read_entries(0, md.last_entry_id)] == [b"y" * 256] * 50


def test_a_ledger_no_bookie_holds_handed_over_by_a_wiped_bookie_heals_without_its_key(
        cluster_factory: Callable[..., Any],
        restart_wiped: Callable[[BookieProcess], None]) -> None:
    """Issue 26's known defect (fault seeds 9 and 13 with no ``--recovery-password``). A
    ledger created just before the wipe and closed by its writer with no entry (a log
    rolled onto it, then closed) was never sent to any bookie: none holds its key, and no
    password is configured. The wiped bookie cannot repair it (no key) and hands it over;
    AutoRecovery's workers asked for the key before anything else, found none, and
    failed forever: the ledger stayed marked with the wiped bookie missing, and that
    bookie's repair never completed. Nothing is to be copied, so the replacement is one
    metadata change needing no key: the mark clears and the repair completes."""
    c = cluster_factory(4, extra_args=["--lost-bookie-recovery-delay", "0"])
    with BookKeeper(c.uri, FAST) as bk:
        written = bk.create_ledger(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2,
                                   password=PASSWORD)
        for f in [written.add_entry_async(b"z" * 64) for _ in range(20)]:
            f.result()
        written.close()
        empty = bk.create_ledger(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2,
                                 password=PASSWORD)
        empty.close()  # closed by its writer: a CAS only, no bookie ever saw it
        victim = _proc(c, empty.metadata.last_ensemble[0])
        restart_wiped(victim)
        _connected(bk, victim.bookie_id)
        _wait_repaired(bk, victim.bookie_id, timeout=20)
        urm = UnderReplicationManager(bk.zk, bk.msu.root)
        deadline = time.monotonic() + 10
        while list(urm.list()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert list(urm.list()) == []
        md = bk.metadata_store.read(empty.id).value
        assert victim.bookie_id not in {b for _f, ens in md.ensembles for b in ens}
        assert md.state == LedgerState.CLOSED and md.last_entry_id == -1
        rh = bk.open_ledger(written.id, PASSWORD)
        assert [e.payload for e in rh.read_entries(0, 19)] == [b"z" * 64] * 20


def test_a_hand_over_with_no_replacement_says_why_in_repair_status_and_a_password_ends_it(
        cluster_factory: Callable[..., Any],
        restart_wiped: Callable[[BookieProcess], None]) -> None:
    """A cluster of exactly E bookies and no ``--recovery-password``: the wiped bookie hands
    its ledger to AutoRecovery, which has no bookie outside the ensemble to copy it to. The
    bookie keeps its mark (it never serves the ledger as if it held it) and ``bk bookie
    repair-status`` says why it does not finish: AutoRecovery's reason and the ways out.
    Restarted with the password as it advises, the bookie copies the ledger back itself
    and the ledger is no longer marked under-replicated."""
    c = cluster_factory(3, extra_args=["--lost-bookie-recovery-delay", "0"])
    with BookKeeper(c.uri, FAST) as bk:
        lh = bk.create_ledger(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2,
                              password=PASSWORD)
        for f in [lh.add_entry_async(b"w" * 100) for _ in range(30)]:
            f.result()
        lh.close()
        victim = _proc(c, lh.metadata.last_ensemble[0])
        restart_wiped(victim)
        _connected(bk, victim.bookie_id)

        def status() -> dict:
            r = subprocess.run([sys.executable, "-m", "bk_spark.cli", "bookie",
                                "repair-status", victim.bookie_id, "-m", c.uri, "--json"],
                               capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, r.stderr
            return json.loads(r.stdout)

        deadline = time.monotonic() + 20
        st = status()
        while "AutoRecovery cannot yet" not in st["error"]:
            assert time.monotonic() < deadline, st
            time.sleep(0.5)
            st = status()
        assert st["state"] == "repairing" and st["ledgers_left"] == 1
        assert "NotEnoughBookiesError" in st["error"] and "start more bookies" in st["error"]
        assert "restart this bookie with --recovery-password" in st["error"]
        victim.kill()
        victim.extra_args = [*victim.extra_args, "--recovery-password", "p"]
        victim.start()
        _connected(bk, victim.bookie_id)
        _wait_repaired(bk, victim.bookie_id, timeout=30)
        assert UnderReplicationManager(bk.zk, bk.msu.root).get(lh.id) is None
        idx = lh.metadata.last_ensemble.index(victim.bookie_id)
        want = entries_on_index(0, 29, idx, 3, 2)
        have = [e for a, b in _held(bk, victim.bookie_id, lh.id, 29) for e in range(a, b + 1)]
        assert have == want


def test_a_fence_forgotten_by_a_wiped_bookie_replaced_by_autorecovery_stays_refused(
        cluster_factory: Callable[..., Any],
        restart_wiped: Callable[[BookieProcess], None]) -> None:
    """BP-46's first counterexample through the hand-over. E = Qw = Qa = 2 on b0, b1; a
    recovery fenced b0 only (one bookie of the write quorum: enough) and closed the ledger
    at entry 4; the old writer is paused. b0 loses its disk and, with no password, hands
    the ledger to AutoRecovery, which copies it to b2 and names b2 instead of b0. b0 no
    longer holds the ledger, but its fence is what keeps the old writer from b0 + b1 (b1
    was never fenced): b0 must keep refusing the writer's adds, or entry 5 is acknowledged
    on a ledger closed at 4."""
    c = cluster_factory(3, extra_args=["--lost-bookie-recovery-delay", "0"])
    with BookKeeper(c.uri, FAST) as bk:
        lh = bk.create_ledger(ensemble_size=2, write_quorum_size=2, ack_quorum_size=2,
                              password=PASSWORD)
        for i in range(5):
            lh.add_entry(b"entry-%d" % i)
        b0, _b1 = lh.metadata.last_ensemble
        with BookKeeper(c.uri, FAST) as recoverer:  # fence b0 only, then close at 4
            recoverer.metadata_store.update(
                lh.id, lambda m: m.state == LedgerState.OPEN,
                lambda m: m.with_state(LedgerState.IN_RECOVERY))
            recoverer.bookies.get(b0).fence(lh.id, master_key(PASSWORD))
            recoverer.metadata_store.update(
                lh.id, lambda m: m.state == LedgerState.IN_RECOVERY,
                lambda m: m.closed(4, 5 * len(b"entry-0")))
        restart_wiped(_proc(c, b0))
        _connected(bk, b0)
        _wait_repaired(bk, b0, timeout=30)
        md = bk.metadata_store.read(lh.id).value
        assert b0 not in md.last_ensemble  # replaced by AutoRecovery
        with pytest.raises(LedgerFencedError):
            lh.add_entry(b"after the fence")
        rh = bk.open_ledger(lh.id, PASSWORD)
        assert rh.last_add_confirmed == 4


def test_a_wiped_bookie_and_a_bookie_lacking_entries_in_one_ensemble_of_e_plus_one_both_heal(
        cluster_factory: Callable[..., Any],
        restart_wiped: Callable[[BookieProcess], None]) -> None:
    """The race behind issue 26's known defect (fault seeds 9 and 13; long seed 27 shows it
    on demand). E = 4 on 5 bookies: one ledger's record names two bookies of its ensemble,
    one the Auditor found lacking entries (marked here as it marks) and the wiped one that
    handed the ledger over (AutoRecovery paused meanwhile, as an operator may). The only
    bookie outside the ensemble replaces the first; the second's only candidate is then
    the first, which no fragment names any more. It was excluded as "missing", the failed
    attempt kept the record as it was, and every later attempt failed the same way: the
    wiped bookie stayed marked, its repair never completed."""
    c = cluster_factory(5, extra_args=["--lost-bookie-recovery-delay", "0"])
    with BookKeeper(c.uri, FAST) as bk:
        lh = bk.create_ledger(ensemble_size=4, write_quorum_size=3, ack_quorum_size=2,
                              password=PASSWORD)
        for f in [lh.add_entry_async(b"q" * 64) for _ in range(30)]:
            f.result()
        lh.close()
        _a, _b, lacking, wiped = lh.metadata.last_ensemble
        urm = UnderReplicationManager(bk.zk, bk.msu.root)
        urm.set_enabled(False)
        urm.mark(lh.id, [lacking])
        restart_wiped(_proc(c, wiped))
        deadline = time.monotonic() + 20
        while wiped not in (urm.get(lh.id) or UnderReplicated(lh.id, frozenset())).missing:
            assert time.monotonic() < deadline, "the wiped bookie did not hand the ledger over"
            time.sleep(0.1)
        urm.set_enabled(True)
        _connected(bk, wiped)
        _wait_repaired(bk, wiped, timeout=20)
        deadline = time.monotonic() + 10
        while urm.get(lh.id) is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert urm.get(lh.id) is None
        md = bk.metadata_store.read(lh.id).value
        assert wiped not in md.last_ensemble and len(md.ensembles) == 1
        for idx, b in enumerate(md.last_ensemble):  # every copy where the metadata says
            have = {e for x, y in _held(bk, b, lh.id, 29) for e in range(x, y + 1)}
            assert set(entries_on_index(0, 29, idx, 4, 3)) <= have, b
        rh = bk.open_ledger(lh.id, PASSWORD)
        assert [e.payload for e in rh.read_entries(0, 29)] == [b"q" * 64] * 30
