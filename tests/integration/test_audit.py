"""The Auditor against real processes, ported from BookKeeper's replication tests: lost
bookies come from the ledger metadata (not from registrations seen arriving), a corrupt
copy is no replica (``AuditorPeriodicCheckTest.testEntryLogCorruption``), and a second
lost bookie does not wait out the lost-bookie delay (``testDelayedAuditOfLostBookies``).

Bookies run without AutoRecovery; one standalone ``bk autorecovery`` process (started as
the README shows, stopped by its PID) is the only Auditor, so a test can pause it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from bk_spark.core.client import BookKeeper
from bk_spark.io.registration import list_bookies
from bk_spark.io.underreplication import UnderReplicationManager
from bk_spark.protocol.recovery_plan import bookies_of
from bk_spark.sandbox import BookieProcess, stop_pid

NO_AR = ["--no-autorecovery", "--debug-expose-session"]
PASSWORD = b"p"


class AutoRecoveryProcess:
    """``bk autorecovery --metadata-service-uri URI ...`` in its own process."""

    def __init__(self, uri: str, log_path: Path, *args: str) -> None:
        self.log = open(log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bk_spark.cli", "autorecovery",
             "--metadata-service-uri", uri, *args],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def pause(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        self.resume()
        stop_pid(self.proc.pid)
        self.proc.wait()
        self.log.close()


@pytest.fixture
def autorecovery(tmp_path: Path) -> Iterator[Callable[..., AutoRecoveryProcess]]:
    started: list[AutoRecoveryProcess] = []

    def start(uri: str, *args: str) -> AutoRecoveryProcess:
        p = AutoRecoveryProcess(uri, tmp_path / f"autorecovery-{len(started)}.log", *args)
        started.append(p)
        return p

    yield start
    for p in started:
        p.stop()


def _wait(what: str, cond: Callable[[], bool], timeout: float) -> float:
    start = time.monotonic()
    while not cond():
        if time.monotonic() - start > timeout:
            pytest.fail(f"{what}: not after {timeout:.0f}s")
        time.sleep(0.1)
    return time.monotonic() - start


def _wait_auditing(urm: UnderReplicationManager) -> None:
    """Until an Auditor is elected and has written its status (its first tick is done)."""
    _wait("auditor elected", lambda: urm.auditor() is not None and bool(urm.status()), 60)


def _registered(bk: BookKeeper) -> set[str]:
    return {b.bookie_id for b in list_bookies(bk.msu, zk=bk.zk)}


def _die(b: BookieProcess, zk_hosts: str) -> None:
    """``kill -9``, then end its ZooKeeper session as the session timeout would (with a
    second client on the session the bookie exposed), so its registration goes now."""
    sid_hex, pwd_hex = (b.data_dir / "zk-session").read_text().split()
    b.kill()
    zk = KazooClient(hosts=zk_hosts, client_id=(int(sid_hex, 16), bytes.fromhex(pwd_hex)),
                     timeout=5.0)
    try:
        zk.start(timeout=10)
        zk.stop()
    finally:
        zk.close()


def _marked_for(bk: BookKeeper, urm: UnderReplicationManager, lid: int, bookies: set[str]
                ) -> bool:
    """The ledger is marked under-replicated for ``bookies``, or was already healed of
    them (a worker may heal it before we look)."""
    rec = urm.get(lid)
    left = bookies & bookies_of(bk.ledger_metadata(lid))
    return not left or (rec is not None and left <= rec.missing)


def _closed_ledger(bk: BookKeeper, n: int, **kw) -> tuple[int, list[bytes]]:
    lh = bk.create_ledger(password=PASSWORD, **kw)
    payloads = [f"entry-{i}".encode() * 20 for i in range(n)]
    for f in [lh.add_entry_async(p) for p in payloads]:
        f.result(30)
    lh.close()
    return lh.id, payloads


def test_a_bookie_that_joined_and_died_while_the_auditor_was_paused_is_found_lost(
        cluster_factory, zk_server, autorecovery):
    """A bookie joins, is placed in a ledger and dies while the Auditor is not looking
    (paused, for less than its ZooKeeper session, so it stays elected and never sees the
    bookie registered). The Auditor derives "lost" from the metadata: the ledger is
    marked, with no new election."""
    c = cluster_factory(3, extra_args=NO_AR)
    with BookKeeper(c.uri) as bk:
        urm = UnderReplicationManager(bk.zk, bk.msu.root)
        ar = autorecovery(c.uri, "--lost-bookie-recovery-delay", "0",
                          "--audit-interval", "3600")
        _wait_auditing(urm)
        auditor = urm.auditor()
        ar.pause()
        paused = time.monotonic()
        try:
            newcomer = c.add_bookie(extra_args=NO_AR)
            lid, _ = _closed_ledger(bk, 20, ensemble_size=4, write_quorum_size=2,
                                    ack_quorum_size=2)
            assert newcomer.bookie_id in bookies_of(bk.ledger_metadata(lid))
            _die(newcomer, zk_server.connect_string)
            assert newcomer.bookie_id not in _registered(bk)
        finally:
            ar.resume()
        pause_s = time.monotonic() - paused
        took = _wait("ledger marked for the bookie that died unseen",
                     lambda: _marked_for(bk, urm, lid, {newcomer.bookie_id}), 15)
        assert urm.auditor() == auditor  # the same Auditor, not a new election's scan
        print(f"paused {pause_s:.1f}s; marked {took:.1f}s after resuming")


def test_a_zero_filled_entry_log_is_found_by_the_periodic_check_and_healed(
        cluster_factory, autorecovery):
    """BookKeeper's AuditorPeriodicCheckTest.testEntryLogCorruption: a bookie's entry log
    of a closed ledger is zero-filled while the bookie runs; its index still lists every
    entry. The periodic check reads entries back, marks the ledger, and a worker moves the
    copy to another bookie (the worker knows the ledger's password: --recovery-password);
    every entry then reads back right."""
    c = cluster_factory(4, extra_args=NO_AR)
    with BookKeeper(c.uri) as bk:
        urm = UnderReplicationManager(bk.zk, bk.msu.root)
        lid, payloads = _closed_ledger(bk, 60, ensemble_size=3, write_quorum_size=2,
                                       ack_quorum_size=2)
        victim = next(b for b in c.bookies
                      if b.bookie_id == bk.ledger_metadata(lid).ensembles[0][1][0])
        autorecovery(c.uri, "--lost-bookie-recovery-delay", "0", "--audit-interval", "1",
                     "--recovery-password", PASSWORD.decode())
        _wait_auditing(urm)
        logs = sorted((victim.data_dir / "ledgers" / "logs").glob("*.log"))
        assert logs
        for path in logs:
            with open(path, "r+b") as f:
                size = f.seek(0, 2)
                f.seek(0)
                f.write(bytes(size))
                f.flush()
                os.fsync(f.fileno())
        assert victim.bookie_id in _registered(bk)  # alive, its index intact
        _wait("ledger marked for the corrupt copy",
              lambda: _marked_for(bk, urm, lid, {victim.bookie_id}), 20)
        _wait("corrupt copy replaced",
              lambda: victim.bookie_id not in bookies_of(bk.ledger_metadata(lid))
              and urm.get(lid) is None, 60)
        rh = bk.open_ledger(lid, password=PASSWORD, recovery=False)
        assert [e.payload for e in rh.read_entries(0, rh.last_add_confirmed)] == payloads


def test_two_bookies_lost_together_are_marked_at_once_despite_a_long_delay(
        cluster_factory, zk_server, autorecovery):
    """BookKeeper's testDelayedAuditOfLostBookies with multiple failures: the delay gives
    one bookie time to come back; when a second is lost, a ledger may be one copy from
    loss, so the Auditor marks at once."""
    c = cluster_factory(5, extra_args=NO_AR)
    with BookKeeper(c.uri) as bk:
        urm = UnderReplicationManager(bk.zk, bk.msu.root)
        lid, _ = _closed_ledger(bk, 20, ensemble_size=3, write_quorum_size=3,
                                ack_quorum_size=2)
        ensemble = bk.ledger_metadata(lid).ensembles[0][1]
        first, second = (next(b for b in c.bookies if b.bookie_id == x) for x in ensemble[:2])
        autorecovery(c.uri, "--lost-bookie-recovery-delay", "3600", "--audit-interval", "3600")
        _wait_auditing(urm)
        _die(first, zk_server.connect_string)
        time.sleep(2.5)  # ticks: one lost bookie waits out its delay
        assert urm.get(lid) is None
        _die(second, zk_server.connect_string)
        assert {first.bookie_id, second.bookie_id}.isdisjoint(_registered(bk))
        took = _wait("ledger marked for both lost bookies",
                     lambda: _marked_for(bk, urm, lid, {first.bookie_id, second.bookie_id}),
                     10)
        print(f"marked {took:.1f}s after the second loss (delay 3600s)")
