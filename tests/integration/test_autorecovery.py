"""AutoRecovery against real processes: 5 bookies each running an Auditor contender and a
Replication Worker (the default), with the lost-bookie delay 0 and a 2 s full check.

The tests share one cluster and run in order: the first kills bookies for good.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from bk_spark.autorecovery.auditor import Auditor
from bk_spark.autorecovery.metrics import AutoRecoveryMetrics
from bk_spark.autorecovery.replicator import LedgerReplicator
from bk_spark.core.client import BookKeeper
from bk_spark.io.registration import list_bookies
from bk_spark.io.underreplication import UnderReplicationManager
from bk_spark.io.zk import connect_zk
from bk_spark.log import open_log_reader, open_log_writer
from bk_spark.metadata_uri import parse_metadata_service_uri
from bk_spark.protocol.digest import password_digest
from bk_spark.protocol.recovery_plan import bookies_of, entries_on_index
from bk_spark.sandbox import (
    BookieProcess,
    free_port,
    start_bookies,
    stop_bookies,
    wait_for_registrations,
)
from bookie_server.cookie import UNSAFE_SERVE_LOST_DATA_ENV

HEAL_TIMEOUT_S = 60.0
AR_ARGS = ["--journal-file-size-mb", "8", "--entry-log-size-mb", "1",
           "--lost-bookie-recovery-delay", "0",
           "--audit-interval", "2", "--open-ledger-grace", "2", "--metrics-port", "0"]


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
        start_bookies(bookies)
        wait_for_registrations(uri, 5)
        yield ARCluster(uri, bookies)
    finally:
        stop_bookies(bookies)
        for b in bookies:
            b.drop_data()


@pytest.fixture(scope="module")
def bk(ar_cluster: ARCluster) -> Iterator[BookKeeper]:
    with BookKeeper(ar_cluster.uri) as client:
        yield client


def _naming(bk: BookKeeper, bookie: str) -> list[int]:
    return [lid for lid in bk.list_ledgers() if bookie in bookies_of(bk.ledger_metadata(lid))]


def _wait_healed(bk: BookKeeper, bookies: set[str], timeout: float = HEAL_TIMEOUT_S,
                 ledgers: list[int] | None = None) -> float:
    """Wait until no ledger (of ``ledgers``, default all) names any of ``bookies`` and
    nothing is under-replicated."""
    urm = UnderReplicationManager(bk.zk, bk.msu.root)
    start = time.monotonic()
    while True:
        left = {b: [lid for lid in _naming(bk, b) if ledgers is None or lid in ledgers]
                for b in bookies}
        if not any(left.values()) and urm.count() == 0:
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            pytest.fail(f"not healed after {timeout}s: ledgers still naming {left}; "
                        f"under-replicated {[r for r in urm.list()]}")
        time.sleep(0.5)


def _metric(bk: BookKeeper, name: str) -> list[float]:
    """``name``'s value on every registered bookie's /metrics."""
    import urllib.request

    out = []
    for b in list_bookies(bk.msu, zk=bk.zk):
        port = b.info.get("metrics_port")
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        for line in text.decode().splitlines():
            if line.startswith(name + " "):
                out.append(float(line.split()[1]))
    return out


#: Half the ledgers these tests write are password-protected (as users' are): no worker is
#: given the password (AutoRecovery heals them with no per-ledger configuration).
PASSWORD = b"p"


def _password_of(bk: BookKeeper, lid: int) -> bytes:
    protected = bk.ledger_metadata(lid).password_digest == password_digest(PASSWORD)
    return PASSWORD if protected else b""


def _read_all(bk: BookKeeper, expected: dict[int, list[bytes]]) -> None:
    for lid, payloads in expected.items():
        rh = bk.open_ledger(lid, _password_of(bk, lid))
        got = [e.payload for e in rh.read_entries(0, rh.last_add_confirmed)]
        assert got == payloads, f"ledger {lid}"


def _bk_cli(uri: str, *args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    env = {**os.environ, "BK_METADATA_SERVICE_URI": uri}
    return subprocess.run([sys.executable, "-m", "bk_spark.cli", *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


def _closed_ledgers(bk: BookKeeper, count: int, entries: int, tag: str
                    ) -> dict[int, list[bytes]]:
    out = {}
    for n in range(count):  # the odd ones with a password
        lh = bk.create_ledger(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2,
                              password=PASSWORD if n % 2 else b"")
        payloads = [f"{tag}{n}-{i}".encode() * 10 for i in range(entries)]
        for f in [lh.add_entry_async(p) for p in payloads]:
            f.result(30)
        lh.close()
        out[lh.id] = payloads
    return out


def _all_entries_where_metadata_says(bk: BookKeeper) -> None:
    """The periodic check itself finds nothing to mark: every bookie of every fragment
    holds the entries its fragments say (no missing, no half-written copy counted)."""
    probe = Auditor(bk, UnderReplicationManager(bk.zk, bk.msu.root), "probe",
                    AutoRecoveryMetrics())
    registered = {b.bookie_id for b in list_bookies(bk.msu, zk=bk.zk)}
    assert probe.check_all_ledgers(registered, set()) == 0


def test_concurrent_marks_merge_and_a_clear_never_drops_a_newer_mark(metadata_uri):
    msu = parse_metadata_service_uri(metadata_uri)
    clients = [connect_zk(msu) for _ in range(3)]
    try:
        urms = [UnderReplicationManager(zk, msu.root) for zk in clients]

        def mark(urm: UnderReplicationManager, k: int) -> None:
            for i in range(20):
                urm.mark(42, {f"b{k}-{i % 4}:1"})

        threads = [threading.Thread(target=mark, args=(u, k)) for k, u in enumerate(urms)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert urms[0].get(42).missing == {f"b{k}-{i}:1" for k in range(3) for i in range(4)}
        assert [r.ledger_id for r in urms[1].list()] == [42] and urms[2].count() == 1
        # a worker clears what it replaced while an auditor marks another bookie
        urms[0].mark_replicated(42, {f"b{k}-{i}:1" for k in range(3) for i in range(4)})
        assert urms[0].get(42) is None and urms[0].count() == 0
        urms[0].mark(42, {"x:1"})
        urms[1].mark(42, {"y:1"})
        urms[0].mark_replicated(42, {"x:1"})
        assert urms[2].get(42).missing == {"y:1"}
        # the lock is one worker's, and goes with its session
        assert urms[0].try_lock(42, "w0") and urms[0].try_lock(42, "w0")
        assert not urms[1].try_lock(42, "w1")
        assert urms[2].lock_holder(42) == "w0"
        clients[0].stop()
        assert urms[1].try_lock(42, "w1")
        urms[1].set_enabled(False)
        assert not urms[2].is_enabled()
        urms[1].set_enabled(True)
        assert urms[2].is_enabled()
    finally:
        for zk in clients:
            zk.stop()
            zk.close()


def test_a_wiped_bookie_is_found_by_the_periodic_check_and_its_ledgers_re_replicated(
        ar_cluster: ARCluster, bk: BookKeeper):
    expected = _closed_ledgers(bk, 4, 200, "W")
    holders = {b.bookie_id: len(_naming(bk, b.bookie_id)) for b in ar_cluster.bookies}
    wiped = ar_cluster.by_id(max(holders, key=holders.get))
    # kill -9 and restart at once: its registration never lapses, so only the periodic
    # check can notice the empty disk
    wiped.kill()
    wiped.drop_data()
    # its cookie would make it refuse or repair itself (tests/integration/test_cookies.py):
    # the test-only switch makes it serve empty as if nothing happened, for the check to find
    wiped.env[UNSAFE_SERVE_LOST_DATA_ENV] = "1"
    wiped.start()
    _wait_healed(bk, {wiped.bookie_id})
    _read_all(bk, expected)
    _all_entries_where_metadata_says(bk)


def test_a_bookie_that_lost_entries_in_the_middle_of_a_fragment_is_found_and_refilled(
        ar_cluster: ARCluster, bk: BookKeeper):
    """The periodic check asks which entries each bookie holds (HeldEntries), so a bookie
    whose highest entry is still there but that lost an entry log in the middle of a
    closed fragment gets the ledger marked and its copies moved to a full replica."""
    urm = UnderReplicationManager(bk.zk, bk.msu.root)
    lh = bk.create_ledger(ensemble_size=3, write_quorum_size=3, ack_quorum_size=3)
    victim = ar_cluster.by_id(bk.ledger_metadata(lh.id).ensembles[0][1][0])
    logs = victim.data_dir / "ledgers" / "logs"
    before = {p.name for p in logs.glob("*.log")}
    payloads = [bytes([i % 251]) * 32 * 1024 for i in range(120)]  # ~3.8 MB: 1 MiB logs
    # One add at a time, each acknowledged by every bookie (Qa = Qw): the victim stores
    # them in entry order, so its entry logs hold ascending ranges and the first new log
    # is not the one with the last entry. (Concurrent requests to one bookie may be
    # applied in any order; a request's entries never straddle two entry logs.)
    for p in payloads:
        lh.add_entry(p, 30)
    lh.close()
    new_logs = sorted(p.name for p in logs.glob("*.log") if p.name not in before)
    assert len(new_logs) >= 2, new_logs
    # the bookie loses one whole entry log from the middle of the ledger (while it is
    # down: workers paused so that only the periodic check can find the loss)
    urm.set_enabled(False)
    try:
        victim.stop()
        (logs / new_logs[0]).unlink()
        victim.start()
        wait_for_registrations(ar_cluster.uri, 5)
        urm.mark_replicated(lh.id, {victim.bookie_id})  # undo the lost-bookie rule's mark
        # its highest entry is still there (once the restarted bookie has replayed its
        # journal): only asking which entries it holds shows the gap
        deadline = time.monotonic() + 30
        while True:
            held = bk.bookies.get(victim.bookie_id).held_entries(lh.id, 0,
                                                                 len(payloads) - 1)
            if held and held[-1][1] == len(payloads) - 1 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert held[-1][1] == len(payloads) - 1
        assert sum(b - a + 1 for a, b in held) < len(payloads)
    finally:
        urm.set_enabled(True)
    _wait_healed(bk, {victim.bookie_id}, ledgers=[lh.id])
    _read_all(bk, {lh.id: payloads})
    _all_entries_where_metadata_says(bk)


def test_a_worker_that_dies_mid_copy_loses_its_lock_and_its_half_copy_never_counts(
        ar_cluster: ARCluster, bk: BookKeeper):
    expected = _closed_ledgers(bk, 1, 400, "C")
    (lid,) = expected
    md = bk.ledger_metadata(lid)
    ensemble = md.ensembles[0][1]
    leaving = ensemble[0]
    target = next(b.bookie_id for b in ar_cluster.bookies if b.bookie_id not in ensemble)
    # a "worker" with its own ZooKeeper session takes the lock, marks the ledger and copies
    # half of the entries to a replacement, then dies (its session ends) before the CAS
    with BookKeeper(ar_cluster.uri) as doomed:
        urm = UnderReplicationManager(doomed.zk, doomed.msu.root)
        assert urm.try_lock(lid, "doomed-worker")
        urm.mark(lid, {leaving})
        rep = LedgerReplicator(doomed)
        ids = entries_on_index(0, md.last_entry_id, 0, 3, 2)
        from bk_spark.io.entry import EntryCodec
        from bk_spark.protocol.digest import DigestManager, master_key
        codec = EntryCodec(lid, DigestManager(md.digest_type, b""))
        rep._copy(md, codec, master_key(b""), ids[: len(ids) // 2], target)
        assert bk.ledger_metadata(lid) == md  # the half copy is nowhere in the metadata
    _wait_healed(bk, {leaving}, ledgers=[lid])
    after = bk.ledger_metadata(lid)
    assert leaving not in bookies_of(after)
    assert len(set(after.ensembles[0][1])) == 3
    _read_all(bk, expected)
    _all_entries_where_metadata_says(bk)


def test_decommission_empties_a_live_bookie_and_the_operator_commands_report_it(
        ar_cluster: ARCluster, bk: BookKeeper):
    expected = _closed_ledgers(bk, 3, 100, "D")
    holders = {b.bookie_id: len(_naming(bk, b.bookie_id)) for b in ar_cluster.bookies}
    leaving = max(holders, key=holders.get)
    status = _bk_cli(ar_cluster.uri, "autorecovery", "status", "--json")
    assert status.returncode == 0, status.stderr
    st = json.loads(status.stdout)
    assert st["enabled"] and st["auditor"] in holders and len(st["workers"]) == 5
    env = {**os.environ, "BK_METADATA_SERVICE_URI": ar_cluster.uri}
    proc = subprocess.Popen([sys.executable, "-m", "bk_spark.cli", "bookie", "decommission",
                             leaving, "--timeout", "60"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not any(b.bookie_id == leaving and b.decommissioning
                      for b in bk.registered_bookies()):  # as this client's placement sees
            assert time.monotonic() < deadline and proc.poll() is None, "no marker"
            time.sleep(0.1)
        # while it runs, placement never picks it (it stays writable for its own ledgers)
        during = []
        while proc.poll() is None and len(during) < 20:
            lh = bk.create_ledger(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2)
            lh.add_entry(b"x")
            lh.close()
            during.append(lh.id)
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    r = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    assert r.returncode == 0, r.stdout + r.stderr
    assert during and all(leaving not in bookies_of(bk.ledger_metadata(lid)) for lid in during)
    # after it, until it is stopped: still not picked (4 of 5 bookies may hold E=4)
    assert leaving not in bk.writable_bookies()
    for _ in range(5):
        assert leaving not in bk.topology().choose_ensemble(4, 2)
    for lid in during:  # the later tests count on healable ensembles only
        bk.delete_ledger(lid)
    assert "decommissioned" in r.stdout
    assert _naming(bk, leaving) == []
    assert ar_cluster.by_id(leaving).proc is not None  # it stayed up all along
    _read_all(bk, expected)
    listed = _bk_cli(ar_cluster.uri, "ledger", "underreplicated", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout) == []
    # stopped and started again, the bookie is a full member: the marker lapsed
    b = ar_cluster.by_id(leaving)
    b.stop()
    b.start()
    wait_for_registrations(ar_cluster.uri, 5)
    deadline = time.monotonic() + 10  # this client's registration cache follows by a watch
    while leaving not in bk.writable_bookies() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert leaving in bk.writable_bookies()


def test_a_bookie_lost_for_good_is_replaced_everywhere_and_a_second_loss_loses_nothing(
        ar_cluster: ARCluster, bk: BookKeeper):
    expected: dict[int, list[bytes]] = {}
    for n in range(6):  # closed ledgers on 3 of the 5 bookies, half password-protected
        lh = bk.create_ledger(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2,
                              password=PASSWORD if n % 2 else b"")
        payloads = [f"L{n}-{i}".encode() * 20 for i in range(300)]
        for f in [lh.add_entry_async(p) for p in payloads]:
            f.result(30)
        lh.close()
        expected[lh.id] = payloads
    # an OPEN ledger whose writer went quiet: recovered after the grace period, then healed
    open_lh = bk.create_ledger(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2,
                               password=PASSWORD)
    open_payloads = [f"open-{i}".encode() for i in range(100)]
    for f in [open_lh.add_entry_async(p) for p in open_payloads]:
        f.result(30)
    expected[open_lh.id] = open_payloads
    # a log of several ledgers
    writer = open_log_writer(bk, "healing-log", roll_max_entries=50, password=PASSWORD)
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
    # a log writer keeps appending while the bookie dies and its data is re-replicated
    live = open_log_writer(bk, "live-log", roll_max_entries=100, password=PASSWORD)
    appended: list[bytes] = []
    stop = threading.Event()

    def keep_appending() -> None:
        i = 0
        while not stop.is_set():
            p = f"live-{i}".encode()
            live.append(p, timeout=30)
            appended.append(p)
            i += 1
            time.sleep(0.005)

    appender = threading.Thread(target=keep_appending)
    appender.start()
    time.sleep(0.5)
    ar_cluster.by_id(victim).kill()
    took = _wait_healed(bk, {victim})
    stop.set()
    appender.join(30)
    live.close()
    assert len(appended) > 100
    reader = open_log_reader(bk, "live-log", "earliest", password=PASSWORD)
    assert [r.payload for r in reader.read_available()] == appended
    reader.close()
    assert urm.auditor() not in (None, victim)
    print(f"healed {holders[victim]} ledgers in {took:.1f}s")
    _read_all(bk, expected)
    assert sorted(_metric(bk, "autorecovery_auditor_elected")) == [0, 0, 0, 1]
    assert sum(_metric(bk, "autorecovery_entries_replicated_total")) > 0

    # a second loss in the same ensembles: every acknowledged entry is still there
    second = max((b for b in everyone if b != victim), key=lambda b: len(_naming(bk, b)))
    ar_cluster.by_id(second).kill()
    _read_all(bk, expected)
    reader = open_log_reader(bk, "healing-log", "earliest", password=PASSWORD)
    assert [r.payload for r in reader.read_available()] == records
    reader.close()
    _wait_healed(bk, {victim, second})


def test_three_racks_put_every_write_quorum_on_two_racks_including_after_bk_recover(
        cluster_factory):
    from bk_spark.protocol.placement import write_quorum_racks

    c = cluster_factory(0)
    for i in range(6):
        c.add_bookie(extra_args=["--rack", f"/region/rack-{i // 2}", "--no-autorecovery"],
                     wait=False)
    wait_for_registrations(c.uri, 6)
    with BookKeeper(c.uri) as client:
        racks = client.topology().racks
        assert sorted(set(racks.values())) == [f"/region/rack-{i}" for i in range(3)]
        expected = _closed_ledgers(client, 6, 50, "R")
        for lid in expected:
            for _first, ensemble in client.ledger_metadata(lid).ensembles:
                assert min(write_quorum_racks(ensemble, 2, racks)) >= 2, ensemble
        dead = c.bookies[0]
        dead_id = dead.bookie_id
        dead.kill()
        # no worker runs (--no-autorecovery) and no TLS: the command itself copies the
        # password-protected ledgers, with the password given as the README says
        r = _bk_cli(c.uri, "recover", dead_id, "--recovery-password", PASSWORD.decode())
        assert r.returncode == 0, r.stdout + r.stderr
        assert _naming(client, dead_id) == []
        for lid in expected:
            for _first, ensemble in client.ledger_metadata(lid).ensembles:
                assert min(write_quorum_racks(ensemble, 2, racks)) >= 2, ensemble
        _read_all(client, expected)


def _holds_nothing_of(bookie: str, ledger_id: int, last: int) -> bool:
    from bk_spark.errors import NoSuchLedgerError
    from bk_spark.io.bookie_client import BookieClient

    c = BookieClient(bookie)
    try:
        return c.held_entries(ledger_id, 0, last) == []
    except NoSuchLedgerError:
        return True
    finally:
        c.close()


def test_a_ledger_deleted_while_its_copy_is_made_leaves_nothing_on_the_replacement(
        cluster_factory):
    """The ledger is deleted after the worker copied a fragment to the replacement and
    before its CAS: the CAS finds no ledger, and the copy must not stay on the replacement
    (no deleter knew about it, so it used to stay there for ever)."""
    c = cluster_factory(0)
    c.add_bookies(4, extra_args=["--no-autorecovery"])
    with BookKeeper(c.uri) as client:
        (lid,) = _closed_ledgers(client, 1, 60, "X")
        ensemble = client.ledger_metadata(lid).ensembles[0][1]
        target = next(b.bookie_id for b in c.bookies if b.bookie_id not in ensemble)

        def delete_before_the_cas(n: int, nbytes: int) -> None:
            assert not _holds_nothing_of(target, lid, 59)  # the copy is there
            client.delete_ledger(lid)

        rep = LedgerReplicator(client, on_copied=delete_before_the_cas)
        result = rep.replicate(lid, {ensemble[0]})
        assert result.replaced == {ensemble[0]}  # nothing left to re-replicate
        assert not client.metadata_store.exists(lid)
        assert _holds_nothing_of(target, lid, 59)


def test_deleting_a_ledger_while_a_replacement_lands_deletes_the_replacements_copy(
        cluster_factory):
    """A re-replication's CAS lands between the deleter's metadata read and its metadata
    delete: the deleter must delete the copy on the bookie named meanwhile too (it deleted
    the metadata unconditionally, orphaning that copy)."""
    c = cluster_factory(0)
    c.add_bookies(4, extra_args=["--no-autorecovery"])
    with BookKeeper(c.uri) as client, BookKeeper(c.uri) as worker:
        (lid,) = _closed_ledgers(client, 1, 60, "Y")
        ensemble = client.ledger_metadata(lid).ensembles[0][1]
        target = next(b.bookie_id for b in c.bookies if b.bookie_id not in ensemble)
        store = client.metadata_store
        real_read = store.read
        landed = []

        def replacement_lands_after_the_read(ledger_id: int):
            md = real_read(ledger_id)
            if not landed:  # the worker's copy and CAS finish while the deleter works
                landed.append(LedgerReplicator(worker).replicate(lid, {ensemble[0]}))
                assert target in bookies_of(worker.ledger_metadata(lid))
            return md

        store.read = replacement_lands_after_the_read
        client.delete_ledger(lid)
        assert landed and landed[0].replaced == {ensemble[0]}
        assert not client.metadata_store.exists(lid)
        assert _holds_nothing_of(target, lid, 59)


def test_two_live_bookies_short_of_copies_each_the_others_only_candidate_both_heal(
        cluster_factory):
    """Long fault seed 35's ledger 583: E = 3 on exactly 4 live bookies, a password ledger
    whose first fragment [p, q, r] is short on p and whose second [s, q, r] (s replaced p,
    killed with -9, in the writer's ensemble change) is short on s: the record names both,
    as the Auditor marks bookies it finds short. Each is the other's only candidate (a
    writable bookie outside the fragment's ensemble); excluding every missing bookie as a
    target, the ledger never healed. As BookKeeper's replicateLedgerFragment, only the bookie
    replaced is excluded: s takes p's place in the first fragment, p takes s's in the
    second, and the workers clear the record."""
    c = cluster_factory(4, extra_args=["--lost-bookie-recovery-delay", "0",
                                       "--audit-interval", "2", "--open-ledger-grace", "2"])
    with BookKeeper(c.uri) as client:
        urm = UnderReplicationManager(client.zk, client.msu.root)
        urm.set_enabled(False)  # paused while the shape is built (as an operator may)
        lh = client.create_ledger(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2,
                                  password=PASSWORD)
        payloads = [b"seed35-%d" % i * 8 for i in range(20)]
        for p in payloads[:10]:
            lh.add_entry(p)
        p_id, _q, _r = lh.metadata.last_ensemble
        (s_id,) = {b.bookie_id for b in c.bookies} - set(lh.metadata.last_ensemble)
        killed = next(b for b in c.bookies if b.bookie_id == p_id)
        killed.kill()  # kill -9: the writer replaces p by s, the only bookie left
        for p in payloads[10:]:
            lh.add_entry(p)
        assert [e[1][0] for e in lh.metadata.ensembles] == [p_id, s_id]
        lh.close()
        killed.start()
        wait_for_registrations(c.uri, 4)
        urm.mark(lh.id, [p_id, s_id])
        urm.set_enabled(True)
        deadline = time.monotonic() + 30
        while urm.get(lh.id) is not None:
            assert time.monotonic() < deadline, f"not healed: {urm.get(lh.id)}"
            time.sleep(0.2)
    # Checked through a new client: the writer's channel to p, refused while p was down,
    # may still be in gRPC's reconnect backoff (failing at once) when the heal is done.
    with BookKeeper(c.uri) as checker:
        md = checker.ledger_metadata(lh.id)
        (f1, e1), (f2, e2) = md.ensembles
        assert e1[0] == s_id and e2[0] == p_id  # each took the other's place
        for first, last, ensemble in ((f1, f2 - 1, e1), (f2, 19, e2)):
            for idx, b in enumerate(ensemble):  # every copy where the metadata says
                held = checker.bookies.get(b).held_entries(lh.id, first, last)
                have = {e for x, y in held for e in range(x, y + 1)}
                assert set(entries_on_index(first, last, idx, 3, 2)) <= have, (first, b)
        rh = checker.open_ledger(lh.id, PASSWORD)
        assert [e.payload for e in rh.read_entries(0, 19)] == payloads
