"""Guarantees that BookKeeper's own test scenarios check (TestFencing, BookKeeperTest,
TestTryReadLastConfirmed), against real bookies and ZooKeeper: a fenced or deleted ledger
never acknowledges its old writer, a bookie that stalls while a client connects is waited
for within the operation's timeout, and the last-add-confirmed is read from a quorum
coverage or not at all.

All tests share one three-bookie cluster (``module_cluster``); each uses its own ledgers
and leaves every bookie running.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from bk_spark.core import BookKeeper
from bk_spark.core.client import BookKeeperConfig
from bk_spark.core.ledger import LedgerHandle
from bk_spark.errors import BKError, BookieUnavailableError
from bk_spark.io.bookie_client import ClientConfig
from bk_spark.io.entry import EntryCodec
from bk_spark.io.metadata_store import Versioned
from bk_spark.protocol.digest import DigestManager, master_key
from bk_spark.sandbox import BookieProcess, start_bookies, wait_for_registrations

PW = b"pw"


def payload(i: int) -> bytes:
    return f"entry-{i}".encode() * 10


def client(uri: str, timeout: float = 10.0, explicit_lac: float = 0.05) -> BookKeeper:
    return BookKeeper(uri, BookKeeperConfig(
        explicit_lac_interval_s=explicit_lac,
        client=ClientConfig(add_timeout_s=timeout, read_timeout_s=timeout)))


def processes(cluster, bookie_ids) -> list[BookieProcess]:
    by_id = {b.bookie_id: b for b in cluster.bookies}
    return [by_id[b] for b in bookie_ids]


class paused:
    """Bookies SIGSTOPped for ``seconds`` (resumed by a timer), resumed on exit anyway."""

    def __init__(self, bookies: list[BookieProcess], seconds: float) -> None:
        self.bookies = bookies
        self.timer = threading.Timer(seconds, self.resume)

    def resume(self) -> None:
        for b in self.bookies:
            b.resume()

    def __enter__(self) -> paused:
        for b in self.bookies:
            b.pause()
        self.timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.timer.cancel()
        self.resume()


@pytest.fixture
def bk(module_cluster) -> Iterator[BookKeeper]:
    c = client(module_cluster.uri)
    yield c
    c.close()


# -- 1. a fenced and deleted ledger never acknowledges its old writer -----------------------


def test_fenced_then_deleted_ledger_never_acknowledges_the_old_writer_even_after_restarts(
        module_cluster, bk) -> None:
    lh = bk.create_ledger(3, 2, 2, password=PW)
    for i in range(5):
        assert lh.add_entry(payload(i)) == i
    md = lh.metadata
    with client(module_cluster.uri) as other:
        other.open_ledger(lh.id, password=PW)  # recovery open: fences the writer
        other.delete_ledger(lh.id, PW)
    with pytest.raises(BKError):
        lh.add_entry(payload(5))  # the old writer's next add: refused, never acknowledged

    # Every bookie crashes (kill -9: the tombstones are only in the journal) and comes back.
    for b in module_cluster.bookies:
        b.kill()
        b.start()
    wait_for_registrations(module_cluster.uri, 3)
    codec = EntryCodec(lh.id, DigestManager(md.digest_type, PW))
    with client(module_cluster.uri) as fresh:  # a writer that slept through it all
        stale = LedgerHandle(fresh, Versioned(md, 0), PW, codec, master_key(PW),
                             next_entry=5)
        with pytest.raises(BKError, match="deleted"):
            stale.add_entry(payload(5))


# -- 2. a bookie that stalls while a client connects is waited for ---------------------------


def test_adds_wait_for_bookies_that_stall_while_the_writer_connects(module_cluster) -> None:
    with client(module_cluster.uri) as bk:  # new channels: every add needs a handshake
        lh = bk.create_ledger(3, 3, 3, password=PW)
        with paused(processes(module_cluster, lh.metadata.last_ensemble)[1:], 0.5):
            futures = [lh.add_entry_async(payload(i)) for i in range(20)]
            assert [f.result(15) for f in futures] == list(range(20))
        lh.close()
        assert len(bk.ledger_metadata(lh.id).ensembles) == 1  # no needless ensemble change


def test_reads_wait_for_bookies_that_stall_while_the_reader_connects(module_cluster,
                                                                    bk) -> None:
    lh = bk.create_ledger(3, 2, 2, password=PW)
    for i in range(30):
        lh.add_entry(payload(i))
    lh.close()
    with client(module_cluster.uri) as reader:  # a fresh executor's first read
        rh = reader.open_ledger(lh.id, password=PW, recovery=False)
        with paused(module_cluster.bookies, 0.5):
            got = [e.payload for e in rh.read_entries(0, 29)]
    assert got == [payload(i) for i in range(30)]


def test_a_read_no_bookie_can_serve_fails_with_the_transport_reason(module_cluster,
                                                                    bk) -> None:
    lh = bk.create_ledger(3, 3, 2, password=PW)
    lh.add_entry(payload(0))
    lh.close()
    with client(module_cluster.uri, timeout=1.0) as reader:
        rh = reader.open_ledger(lh.id, password=PW, recovery=False)
        victims = module_cluster.bookies
        for b in victims:
            b.kill()
        try:
            t0 = time.monotonic()
            with pytest.raises(BookieUnavailableError) as info:
                rh.read_entries(0, 0)
            assert time.monotonic() - t0 < 5  # within the read timeout, give or take
        finally:
            for b in victims:
                b.start()
            wait_for_registrations(module_cluster.uri, 3)
    message = str(info.value)
    assert "UNAVAILABLE" in message and "connect" in message.lower()  # gRPC's own reason


# -- 3. and 4. the last-add-confirmed comes from a quorum coverage, or not at all -------------


def test_non_recovery_open_reads_the_lac_of_the_last_acknowledged_entry(module_cluster
                                                                        ) -> None:
    # No explicit LAC: the bookies know only the LAC each entry carried.
    with client(module_cluster.uri, explicit_lac=0) as bk:
        lh = bk.create_ledger(3, 2, 2, password=PW)
        for i in range(5):
            lh.add_entry(payload(i))  # entry 4 carries LAC 3, on bookies 1 and 2 only
        ensemble = lh.metadata.last_ensemble
        with client(module_cluster.uri) as reader:
            # Bookie 0 (LAC 2) answers first; the write quorum {1, 2} must answer too.
            with paused(processes(module_cluster, ensemble)[1:], 0.5):
                rh = reader.open_ledger(lh.id, password=PW, recovery=False)
            assert rh.last_add_confirmed == 3
            assert [e.payload for e in rh.read_entries(0, 3)] == [payload(i) for i in range(4)]


def test_reading_the_lac_with_no_bookie_answering_raises_instead_of_returning_the_old_one(
        module_cluster, bk) -> None:
    lh = bk.create_ledger(3, 2, 2, password=PW)
    for i in range(3):
        lh.add_entry(payload(i))
    with client(module_cluster.uri, timeout=1.0) as reader:
        rh = reader.open_ledger(lh.id, password=PW, recovery=False)
        assert rh.last_add_confirmed >= 1
        with paused(module_cluster.bookies, 5.0):
            with pytest.raises(BookieUnavailableError, match="last-add-confirmed"):
                rh.read_last_add_confirmed()
        assert rh.read_last_add_confirmed() >= 1  # and works again once they answer
    lh.close()


# -- 5. closing the client leaves no acknowledged entry unreadable (issue 25, 2) ------------


def test_closing_the_client_closes_a_ledger_left_open_so_its_last_entry_is_readable(
        module_cluster) -> None:
    # No explicit LAC: a bookie learns LAC n only from entry n + 1, so the last entry is
    # readable only once the ledger is closed (or its final LAC sent).
    with client(module_cluster.uri, explicit_lac=0) as bk:
        lh = bk.create_ledger(3, 2, 2, password=PW)
        futures = [lh.add_entry_async(payload(i)) for i in range(200)]
        assert [f.result(timeout=30) for f in futures] == list(range(200))
    with client(module_cluster.uri) as reader:
        rh = reader.open_ledger(lh.id, password=PW, recovery=False)
        assert rh.is_closed and rh.last_add_confirmed == 199
        assert rh.read_entries(199, 199)[0].payload == payload(199)


def test_closing_the_client_sends_the_final_lac_of_a_ledger_it_cannot_close(
        module_cluster) -> None:
    bk = client(module_cluster.uri, explicit_lac=0)
    lh = bk.create_ledger(3, 2, 2, password=PW)
    for i in range(20):
        lh.add_entry(payload(i))
    bk.zk.stop()  # ZooKeeper lost: the ledger cannot be CASed to CLOSED
    bk.close()
    with client(module_cluster.uri) as reader:
        rh = reader.open_ledger(lh.id, password=PW, recovery=False)
        assert not rh.is_closed and rh.last_add_confirmed == 19


def test_closing_the_client_leaves_an_abandoned_ledger_open_for_recovery(module_cluster
                                                                         ) -> None:
    with client(module_cluster.uri, explicit_lac=0) as bk:
        lh = bk.create_ledger(3, 2, 2, password=PW)
        for i in range(5):
            lh.add_entry(payload(i))
        lh.abandon("test: the writer crashed")
    with client(module_cluster.uri) as reader:
        assert not reader.ledger_metadata(lh.id).is_closed
        assert reader.open_ledger(lh.id, password=PW).last_add_confirmed == 4  # recovered


def test_closing_the_client_closes_a_log_writer_left_open_so_every_append_is_readable(
        module_cluster) -> None:
    from bk_spark.log import open_log_reader, open_log_writer

    with BookKeeper(module_cluster.uri) as bk:  # as a new user: default options
        w = open_log_writer(bk, "in", password=PW)
        futures = [w.append_async(b"v%d" % i) for i in range(3000)]
        for f in futures:
            f.result(timeout=60)
        # the block is left without w.close()
    with BookKeeper(module_cluster.uri) as reader:
        got = [r.payload for r in open_log_reader(reader, "in", password=PW).read_available()]
    assert len(got) == 3000 and got[-1] == b"v2999"
    assert w.is_closed  # closed with its client, as Pulsar's client closes its producers


# -- 6. the LAC while most bookies are down: best effort (issue 25, 3) -----------------------
# Ports of BookKeeper's TestTryReadLastConfirmed and TestReadLastConfirmedLongPoll.


class killed:
    """Bookies killed with -9, started again (and registered) on exit."""

    def __init__(self, cluster, bookie_ids) -> None:
        self.cluster = cluster
        self.bookies = processes(cluster, bookie_ids)

    def __enter__(self) -> killed:
        for b in self.bookies:
            b.kill()
        return self

    def __exit__(self, *exc: object) -> None:
        start_bookies(self.bookies)
        wait_for_registrations(self.cluster.uri, len(self.cluster.bookies))


def test_try_read_lac_gives_what_the_live_bookie_knows_with_two_of_three_down_e3_qw1_qa1(
        module_cluster) -> None:
    with client(module_cluster.uri, explicit_lac=0) as bk, \
            client(module_cluster.uri, timeout=5.0) as reader, \
            client(module_cluster.uri, timeout=1.0) as strict_reader:
        lh = bk.create_ledger(3, 1, 1, password=PW)
        rh = reader.open_ledger(lh.id, password=PW, recovery=False)
        strict = strict_reader.open_ledger(lh.id, password=PW, recovery=False)
        assert rh.last_add_confirmed == -1
        for i in range(3):
            lh.add_entry(payload(i))  # entry i only on bookie i, carrying LAC i - 1
        ensemble = lh.metadata.last_ensemble
        for i in range(3):
            # bookie i alone is up (just back from the previous round's kill for i > 0)
            with killed(module_cluster, [ensemble[(i + 1) % 3], ensemble[(i + 2) % 3]]):
                assert rh.try_read_last_add_confirmed() == i - 1
                assert rh.last_add_confirmed == i - 1
                with pytest.raises(BookieUnavailableError, match="try_read_last_add"):
                    strict.read_last_add_confirmed()  # coverage stays required there
        assert rh.try_read_last_add_confirmed() == 1  # all back: what the bookies know
        # what the strict handle learnt from the answers of its failed coverage reads (how
        # much depends on which bookies answered within its 1 s: a loaded machine's timing)
        learnt = strict.last_add_confirmed
        with paused(module_cluster.bookies, 3.0):
            with pytest.raises(BookieUnavailableError, match="no bookie"):
                strict.try_read_last_add_confirmed()  # no answer at all: no LAC to give
        assert strict.last_add_confirmed == learnt  # never lowered by a read with no answer
        lh.close()


def test_wait_for_entry_long_polls_the_live_bookie_with_two_of_three_down_e3_qw1_qa1(
        module_cluster) -> None:
    with client(module_cluster.uri) as bk, client(module_cluster.uri, timeout=2.0) as reader:
        lh = bk.create_ledger(3, 1, 1, password=PW)
        for i in range(3):
            lh.add_entry(payload(i))
        rh = reader.open_ledger(lh.id, password=PW, recovery=False)
        ensemble = lh.metadata.last_ensemble
        with killed(module_cluster, ensemble[1:]):
            started = time.monotonic()  # no news: the wait ends at its timeout, no error
            assert rh.wait_for_entry(3, timeout=0.5) is False
            assert time.monotonic() - started < 2
            waited: list[object] = []
            t = threading.Thread(target=lambda: waited.append(_outcome(
                lambda: rh.wait_for_entry(3, timeout=20.0))))
            t.start()
            time.sleep(0.3)  # the reader is long-polling bookie 0
            started = time.monotonic()
            assert lh.add_entry(payload(3)) == 3  # on bookie 0 alone (Qw = 1)
            t.join(25)
            assert waited == [True] and time.monotonic() - started < 5
            assert rh.read_entries(3, 3)[0].payload == payload(3)
        lh.close()


def _outcome(call):  # type: ignore[no-untyped-def]
    try:
        return call()
    except BKError as exc:
        return exc


def test_try_read_lac_and_long_poll_with_one_of_three_down_e3_qw2_qa2(module_cluster
                                                                      ) -> None:
    with client(module_cluster.uri, explicit_lac=0) as bk, \
            client(module_cluster.uri, timeout=1.0) as reader:
        lh = bk.create_ledger(3, 2, 2, password=PW)
        for i in range(10):
            lh.add_entry(payload(i))  # entry 9 (LAC 8) on bookies 0 and 1
        rh = reader.open_ledger(lh.id, password=PW, recovery=False)
        rh_lac = rh.last_add_confirmed
        ensemble = lh.metadata.last_ensemble
        with killed(module_cluster, ensemble[:1]):
            assert rh.try_read_last_add_confirmed() == 8 == rh_lac
            assert rh.read_last_add_confirmed() == 8  # one down: coverage still possible
            started = time.monotonic()
            assert rh.wait_for_entry(9, timeout=1.0) is False  # no news: waits, no error
            assert time.monotonic() - started < 3
        lh.abandon("test: the writer is gone")


def test_a_log_tail_reads_on_from_the_live_bookie_when_coverage_is_impossible(
        module_cluster) -> None:
    from bk_spark.log import open_log_reader, open_log_writer

    with BookKeeper(module_cluster.uri) as bk:
        # E3/Qw3/Qa2: every bookie holds every entry; coverage needs 2 answers of 3
        w = open_log_writer(bk, "tail-down", ensemble_size=3, write_quorum_size=3,
                            ack_quorum_size=2, password=PW)
        for i in range(20):
            w.append(b"r%d" % i)
        time.sleep(0.3)  # the writer's explicit LAC reaches the bookies
        ensemble = bk.ledger_metadata(w.ledger_id).last_ensemble
        with client(module_cluster.uri, timeout=1.0) as reader, \
                killed(module_cluster, ensemble[1:]):
            r = open_log_reader(reader, "tail-down", "earliest", password=PW)
            got = [rec.payload for rec in r.tail(timeout=0.5)]
            assert got == [b"r%d" % i for i in range(20)]
            with pytest.raises(BookieUnavailableError):
                list(open_log_reader(reader, "tail-down", "earliest",
                                     password=PW).read_available())  # coverage: refused
        w.close()
