"""A client's registration cache and the ZooKeeper budget of a log roll (issue 28, §6):
real ZooKeeper and bookie processes, bookies killed with -9, a writer with a password."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest
from kazoo.client import KazooClient

from bk_spark.core import BookKeeper
from bk_spark.io.registration import RegistrationCache, list_bookies
from bk_spark.io.zk import SESSION_TIMEOUT_S, connect_zk, zk_operations
from bk_spark.log import open_log_reader, open_log_writer
from bk_spark.log.testing import after_roll_cas
from bk_spark.metadata_uri import parse_metadata_service_uri

PW = b"p"


@pytest.fixture
def bk(cluster, metadata_uri: str) -> Iterator[BookKeeper]:
    client = BookKeeper(metadata_uri)
    yield client
    client.close()


def wait_until(check: Callable[[], bool], timeout: float, step: float = 0.005) -> float:
    """Poll ``check`` (in memory) until true; returns when it became true (monotonic)."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(step)
    return time.monotonic()


def test_a_log_roll_takes_at_most_four_zookeeper_operations(bk: BookKeeper) -> None:
    """Per roll, counted at the kazoo client: the spare ledger (metadata and pending record
    in one transaction that also reserves the next id; placement from the registration
    cache), the roll's CAS, closing the previous ledger and recording its end."""
    at_cas: list[int] = []

    def count(_new_id: int) -> None:
        at_cas.append(zk_operations(bk.zk).total())

    w = after_roll_cas(open_log_writer(bk, "rolls", password=PW, roll_max_entries=20), count)
    values = [f"v{i}".encode() for i in range(20 * 7)]
    for v in values:  # acknowledged one by one: the roller prepares each spare half-way
        w.append(v)
    w.close()
    per_roll = [b - a for a, b in zip(at_cas, at_cas[1:], strict=False)]
    print(f"ZooKeeper operations per roll: {per_roll}")
    assert len(per_roll) >= 5
    assert max(per_roll) <= 4, per_roll
    got = [r.payload for r in open_log_reader(bk, "rolls", password=PW).read_available()]
    assert got == values


def test_a_writers_first_roll_on_a_new_log_takes_the_operations_of_any_other_roll(
        bk: BookKeeper) -> None:
    """Issue 28: the first spare of a writer is as cheap as the later ones. Its id was
    reserved by the transaction that created the writer's first ledger, and its pending
    record's directory (missing on a log no writer rolled yet, as the sweep at open saw)
    is created in the spare's own transaction. Before, the first spare reserved an id,
    failed its transaction on the missing directory, made the directory (ensure_path)
    and tried again: 40-90 ms on a busy machine, past the time the first ledger took to
    fill, so appends queued behind the first roll. Counted from the writer's open to its
    first roll's CAS: the spare's transaction and the CAS."""
    at_cas: list[int] = []
    w = open_log_writer(bk, "first-roll", password=PW, roll_max_entries=20)
    opened = zk_operations(bk.zk).total()
    after_roll_cas(w, lambda _new_id: at_cas.append(zk_operations(bk.zk).total()))
    values = [f"v{i}".encode() for i in range(45)]
    got = [w.append(v) for v in values]  # one by one: the spare is prepared half-way
    w.close()
    assert at_cas, "no roll"
    assert at_cas[0] - opened <= 2, at_cas[0] - opened
    assert got == sorted(got) and [p.ledger_id for p in got[19:21]] != [got[0].ledger_id] * 2
    read = open_log_reader(bk, "first-roll", password=PW).read_available()
    assert [(r.position, r.payload) for r in read] == list(zip(got, values, strict=True))


def test_the_cache_follows_a_bookie_killed_and_one_started_by_watches_alone(
        cluster, metadata_uri: str) -> None:
    """No polling: the cache's ZooKeeper client sends nothing while no bookie comes or
    goes; a bookie started is seen as soon as its registration is (a reference watch on
    another session), one killed with -9 within the session timeout (plus ZooKeeper's tick
    and a loaded machine's slack: a correctness bound, not a speed figure)."""
    msu = parse_metadata_service_uri(metadata_uri)
    zk, ref = connect_zk(msu), connect_zk(msu)
    cache = RegistrationCache(zk, msu)
    try:
        cache.start()
        ids = {b.bookie_id for b in cluster.bookies}
        assert {b.bookie_id for b in cache.bookies()} == ids and not cache.stale
        idle = zk_operations(zk)
        time.sleep(1.0)
        assert zk_operations(zk) == idle  # no poll

        registered = threading.Event()
        ref.get_children(msu.available_path, watch=lambda _e: registered.set())
        new = cluster.add_bookie(wait=False)
        assert registered.wait(60)
        t_event = time.monotonic()
        t_seen = wait_until(lambda: new.bookie_id in {b.bookie_id for b in cache.bookies()},
                            timeout=10)
        joined = t_seen - t_event

        victim = cluster.bookies[0]
        t_kill = time.monotonic()
        victim.kill()
        t_gone = wait_until(
            lambda: victim.bookie_id not in {b.bookie_id for b in cache.bookies()},
            timeout=SESSION_TIMEOUT_S + 30)
        died = t_gone - t_kill
        print(f"cache saw the join {joined * 1000:.0f} ms after the reference watch, the "
              f"kill -9 after {died:.2f} s (session timeout {SESSION_TIMEOUT_S:.0f} s); "
              f"{cache.refreshes} re-reads")
        assert joined < 1.0
        assert died < SESSION_TIMEOUT_S + 2.0
        assert {b.bookie_id for b in cache.bookies()} == ids - {victim.bookie_id} | {
            new.bookie_id} == {b.bookie_id for b in list_bookies(msu, zk=ref)}
        assert not cache.stale
    finally:
        cache.stop()
        for client in (zk, ref):
            client.stop()
            client.close()


def test_the_cache_reads_again_and_watches_again_after_its_session_expires(
        cluster, metadata_uri: str) -> None:
    """A lost session takes its watches: the cache is stale (it reads ZooKeeper when
    asked) until it read everything on the new session, then follows changes from
    memory again."""
    msu = parse_metadata_service_uri(metadata_uri)
    zk = connect_zk(msu)
    cache = RegistrationCache(zk, msu)
    try:
        cache.start()
        session_id, password = zk.client_id
        other = KazooClient(hosts=msu.hosts, client_id=(session_id, password), timeout=5.0)
        other.start(timeout=10)
        other.stop()  # closing the shared session expires it for the cache's client
        other.close()
        wait_until(lambda: zk.connected and (zk.client_id or (session_id,))[0] != session_id,
                   timeout=30)
        wait_until(lambda: not cache.stale, timeout=10)
        leaving = cluster.bookies[1]
        leaving.stop()  # a clean stop: its registration goes at once
        wait_until(lambda: leaving.bookie_id not in {b.bookie_id for b in cache.bookies()},
                   timeout=10)
        assert not cache.stale  # seen by a watch armed on the new session
        ops = zk_operations(zk)
        assert {b.bookie_id for b in cache.bookies()} == {
            b.bookie_id for b in cluster.bookies if b is not leaving}
        assert zk_operations(zk) == ops  # answered from memory
    finally:
        cache.stop()
        zk.stop()
        zk.close()
