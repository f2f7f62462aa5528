"""AutoRecovery against real processes: 5 bookies each running an Auditor contender and a
Replication Worker (the default), with the lost-bookie delay 0 and a 2 s full check.

The tests share one cluster and run in order: the first kills bookies for good.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from bk_spark.autorecovery.plan import bookies_of
from bk_spark.autorecovery.underreplication import UnderReplicationManager
from bk_spark.core.client import BookKeeper
from bk_spark.sandbox import BookieProcess, free_port, wait_for_registrations

HEAL_TIMEOUT_S = 60.0
AR_ARGS = ["--journal-file-size-mb", "8", "--lost-bookie-recovery-delay", "0",
           "--audit-interval", "2", "--open-ledger-grace", "2"]


class ARCluster:
    def __init__(self, uri: str, bookies: list[BookieProcess]) -> None:
        self.uri = uri
        self.bookies = bookies

    def by_id(self, bookie_id: str) -> BookieProcess:
        return next(b for b in self.bookies if b.bookie_id == bookie_id)

    def live(self) -> list[BookieProcess]:
        return [b for b in self.bookies if b.proc is not None]


@pytest.fixture(scope="module")
def ar_cluster(zk_server, tmp_path_factory) -> Iterator[ARCluster]:
    uri = f"zk://{zk_server.connect_string}/ar-{uuid.uuid4().hex[:10]}"
    base = tmp_path_factory.mktemp("autorecovery")
    bookies = [BookieProcess(uri, base / f"bookie-{i}", port=free_port(), extra_args=AR_ARGS)
               for i in range(5)]
    try:
        for b in bookies:
            b.start()
        wait_for_registrations(uri, 5)
        yield ARCluster(uri, bookies)
    finally:
        for b in bookies:
            b.stop()
            b.drop_data()


@pytest.fixture(scope="module")
def bk(ar_cluster: ARCluster) -> Iterator[BookKeeper]:
    with BookKeeper(ar_cluster.uri) as client:
        yield client


def _naming(bk: BookKeeper, bookie: str) -> list[int]:
    return [lid for lid in bk.list_ledgers() if bookie in bookies_of(bk.ledger_metadata(lid))]


def _wait_healed(bk: BookKeeper, bookies: set[str], timeout: float = HEAL_TIMEOUT_S) -> float:
    """Wait until no ledger names any of ``bookies`` and nothing is under-replicated."""
    urm = UnderReplicationManager(bk.zk, bk.msu.root)
    start = time.monotonic()
    while True:
        left = {b: _naming(bk, b) for b in bookies}
        if not any(left.values()) and urm.count() == 0:
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            pytest.fail(f"not healed after {timeout}s: ledgers still naming {left}; "
                        f"under-replicated {[r for r in urm.list()]}")
        time.sleep(0.5)


def _read_all(bk: BookKeeper, expected: dict[int, list[bytes]]) -> None:
    for lid, payloads in expected.items():
        rh = bk.open_ledger(lid)
        got = [e.payload for e in rh.read_entries(0, rh.last_add_confirmed)]
        assert got == payloads, f"ledger {lid}"


def test_a_bookie_lost_for_good_is_replaced_everywhere_and_a_second_loss_loses_nothing(
        ar_cluster: ARCluster, bk: BookKeeper):
    expected: dict[int, list[bytes]] = {}
    for n in range(6):  # closed ledgers on 3 of the 5 bookies
        lh = bk.create_ledger(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2)
        payloads = [f"L{n}-{i}".encode() * 20 for i in range(300)]
        for f in [lh.add_entry_async(p) for p in payloads]:
            f.result(30)
        lh.close()
        expected[lh.id] = payloads
    # an OPEN ledger whose writer went quiet: recovered after the grace period, then healed
    open_lh = bk.create_ledger(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2)
    open_payloads = [f"open-{i}".encode() for i in range(100)]
    for f in [open_lh.add_entry_async(p) for p in open_payloads]:
        f.result(30)
    expected[open_lh.id] = open_payloads
    # a log of several ledgers
    writer = bk.open_log_writer("healing-log", roll_max_entries=50)
    records = [f"rec-{i}".encode() for i in range(180)]
    for p in records:
        writer.append(p)
    writer.close()

    # the victim: the elected Auditor's bookie if it holds data, so its successor finishes
    urm = UnderReplicationManager(bk.zk, bk.msu.root)
    auditor = urm.auditor()
    everyone = [b.bookie_id for b in ar_cluster.bookies]
    holders = {b: len(_naming(bk, b)) for b in everyone}
    victim = auditor if auditor in holders and holders[auditor] else max(holders,
                                                                         key=holders.get)
    ar_cluster.by_id(victim).kill()
    took = _wait_healed(bk, {victim})
    assert urm.auditor() not in (None, victim)
    print(f"healed {holders[victim]} ledgers in {took:.1f}s")
    _read_all(bk, expected)

    # a second loss in the same ensembles: every acknowledged entry is still there
    second = max((b for b in everyone if b != victim), key=lambda b: len(_naming(bk, b)))
    ar_cluster.by_id(second).kill()
    _read_all(bk, expected)
    reader = bk.open_log_reader("healing-log", "earliest")
    assert [r.payload for r in reader.read_available()] == records
    reader.close()
    _wait_healed(bk, {victim, second})
