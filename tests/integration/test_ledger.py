"""The ledger protocol against real bookies and real ZooKeeper (bookkeeper-protocol.txt)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import traceback
from bisect import bisect_right
from itertools import accumulate
from pathlib import Path

import pytest

from bk_spark.core import BookKeeper
from bk_spark.errors import (
    BookieUnavailableError,
    DigestMismatchError,
    InvalidConfigError,
    LedgerClosedError,
    LedgerFencedError,
    LedgerStateError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
    ReadPastLacError,
    TooLargeError,
    UnauthorizedError,
)
from bk_spark.io.bookie_client import BookieClient
from bk_spark.io.entry import EntryCodec
from bk_spark.protocol.digest import DigestManager, master_key
from bk_spark.protocol.ledger_metadata import LedgerState
from bk_spark.protocol.schedule import write_set
from bookie_server.cookie import UNSAFE_SERVE_LOST_DATA_ENV

PROCS = Path(__file__).parent / "procs"


@pytest.fixture
def bk(cluster, metadata_uri):
    client = BookKeeper(metadata_uri)
    yield client
    client.close()


def payload(i: int) -> bytes:
    return f"entry-{i}".encode() * 20


def held_entries(bookie: str, ledger_id: int, ids: list[int], password: bytes = b""
                 ) -> list[int]:
    c = BookieClient(bookie)
    try:
        return [e.entry_id for e in c.read_entries(ledger_id, entry_ids=ids,
                                                   master_key=master_key(password)).entries]
    except NoSuchLedgerError:
        return []
    finally:
        c.close()


def test_entries_land_on_the_seeds_write_quorums_e4_qw3(cluster_factory, metadata_uri) -> None:
    cluster_factory(4)
    with BookKeeper(metadata_uri) as bk:
        lh = bk.create_ledger(ensemble_size=4, write_quorum_size=3, ack_quorum_size=2)
        for i in range(6):
            assert lh.add_entry(payload(i)) == i
        lh.close()
        ensemble = lh.metadata.ensembles[0][1]
        # The seed's table: entry -> write quorum (as ensemble indexes B1..B4 = 0..3).
        seed = {0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 0], 3: [3, 0, 1], 4: [0, 1, 2],
                5: [1, 2, 3]}
        for eid, quorum in seed.items():
            assert write_set(eid, 4, 3) == quorum
        for idx, bookie in enumerate(ensemble):
            expect = [e for e in range(6) if idx in seed[e]]
            assert held_entries(bookie, lh.id, list(range(6))) == expect


def test_entry_is_readable_after_ack_quorum_minus_one_bookie_failures(cluster, bk) -> None:
    lh = bk.create_ledger(ensemble_size=3, write_quorum_size=3, ack_quorum_size=2)
    ids = [f.result() for f in [lh.add_entry_async(payload(i)) for i in range(500)]]
    assert ids == list(range(500))
    lh.close()
    victim = lh.metadata.ensembles[0][1][0]
    next(b for b in cluster.bookies if b.bookie_id == victim).kill()  # Qa - 1 = 1 failure
    rh = bk.open_ledger(lh.id)
    assert [e.payload for e in rh.read_entries(0, 499)] == [payload(i) for i in range(500)]


def test_ensemble_change_when_a_bookie_dies_mid_stream_keeps_every_acked_entry(
        cluster_factory, metadata_uri) -> None:
    c = cluster_factory(4)
    with BookKeeper(metadata_uri) as bk:
        lh = bk.create_ledger(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2)
        futures = [lh.add_entry_async(payload(i)) for i in range(2000)]
        futures[500].result(30)
        victim = lh.metadata.ensembles[0][1][1]
        next(b for b in c.bookies if b.bookie_id == victim).kill()
        futures += [lh.add_entry_async(payload(i)) for i in range(2000, 4000)]
        assert [f.result(60) for f in futures] == list(range(4000))
        lh.close()
        md = bk.ledger_metadata(lh.id)
        assert len(md.ensembles) >= 2
        assert victim not in md.ensembles[-1][1]
        assert md.state == LedgerState.CLOSED and md.last_entry_id == 3999
        rh = bk.open_ledger(lh.id)
        got = [(e.entry_id, e.payload) for e in rh.read_entries(0, 3999)]
        assert got == [(i, payload(i)) for i in range(4000)]


def test_writer_crash_recovery_closes_at_or_after_last_acked_entry(cluster, metadata_uri
                                                                    ) -> None:
    proc = subprocess.Popen([sys.executable, str(PROCS / "crash_writer.py"), metadata_uri,
                             "3", "2", "2"], stdout=subprocess.PIPE, text=True)
    try:
        ledger_id = int(proc.stdout.readline().split()[1])
        last_acked = -1
        while last_acked < 2000:
            line = proc.stdout.readline()
            assert line, "writer died"
            last_acked = int(line.split()[1])
    finally:
        proc.kill()  # kill -9 mid-stream
        proc.wait()
    for line in proc.stdout:  # acks printed before death count too
        last_acked = max(last_acked, int(line.split()[1]))
    with BookKeeper(metadata_uri) as a, BookKeeper(metadata_uri) as b:
        ra = a.open_ledger(ledger_id, password=b"pw")
        assert ra.metadata.state == LedgerState.CLOSED
        assert ra.last_add_confirmed >= last_acked
        rb = b.open_ledger(ledger_id, password=b"pw", recovery=False)
        n = ra.last_add_confirmed
        seq_a = [e.payload for e in ra.read_entries(0, n)]
        seq_b = [e.payload for e in rb.read_entries(0, n)]
        assert seq_a == seq_b == [f"entry-{i}".encode() * 20 for i in range(n + 1)]


def test_concurrent_recoverers_converge_on_the_same_last_entry(cluster, metadata_uri) -> None:
    with BookKeeper(metadata_uri) as w:
        lh = w.create_ledger(3, 2, 2)
        for f in [lh.add_entry_async(payload(i)) for i in range(300)]:
            f.result()
        results: list = []

        def recover() -> None:
            with BookKeeper(metadata_uri) as r:
                results.append(r.open_ledger(lh.id).metadata)

        threads = [threading.Thread(target=recover) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert len(results) == 3
        assert {m.last_entry_id for m in results} == {299}
        assert {m.state for m in results} == {LedgerState.CLOSED}
        with pytest.raises(LedgerFencedError):
            lh.add_entry(b"after fencing")


def test_fencing_example_entry_12_partially_written(cluster, bk) -> None:
    """fencing.txt: E=3, Qw=2, 0-11 acknowledged, 12 on one bookie only -> recovered at 12."""
    lh = bk.create_ledger(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2,
                          password=b"pw")
    for i in range(12):
        lh.add_entry(payload(i))
    ensemble = lh.metadata.ensembles[0][1]
    codec = EntryCodec(lh.id, DigestManager("crc32c", b"pw"))
    e12 = codec.encode(12, 11, lh.length + len(payload(12)), payload(12))
    first, second = (ensemble[i] for i in write_set(12, 3, 2))
    c = BookieClient(first)
    done = threading.Event()
    c.add_entry(lh.id, master_key(b"pw"), e12, lambda err: done.set())
    assert done.wait(10)
    c.close()
    assert held_entries(second, lh.id, [12], b"pw") == []

    rh = bk.open_ledger(lh.id, password=b"pw")  # recovery open
    assert rh.metadata.state == LedgerState.CLOSED
    assert rh.last_add_confirmed == 12
    assert held_entries(second, lh.id, [12], b"pw") == [12]  # written back to its write quorum
    assert [e.payload for e in rh.read_entries(0, 12)] == [payload(i) for i in range(13)]
    with pytest.raises(LedgerFencedError):
        lh.add_entry(b"old writer")  # entry 12 of the old writer: the bookies are fenced


def test_recovery_of_ledger_with_nothing_past_the_lac_closes_at_last_acked(cluster, bk
                                                                            ) -> None:
    lh = bk.create_ledger(3, 2, 2)
    for i in range(12):
        lh.add_entry(payload(i))
    rh = bk.open_ledger(lh.id)
    assert rh.last_add_confirmed == 11
    assert rh.metadata.length == sum(len(payload(i)) for i in range(12))


def test_recovery_never_closes_a_ledger_below_the_lac_a_fenced_bookie_reported(cluster, bk
                                                                               ) -> None:
    """Entry 11 was acknowledged (a bookie holds LAC 11). Its copies: one on a bookie that
    is down, one on a bookie that lost its disk and came back empty, so no copy answers and
    that bookie says "no such entry". Recovery must not close the ledger below the LAC (it
    used to close it empty, dropping entries 0-11 though all of them still have a copy): it
    fails, and once the down bookie is back it closes the ledger at 11 with every entry."""
    from bk_spark.errors import RecoveryError

    lh = bk.create_ledger(3, 2, 2)
    for i in range(12):
        lh.add_entry(payload(i))
    ensemble = lh.metadata.ensembles[0][1]
    procs = {b.bookie_id: b for b in cluster.bookies}
    holders = [ensemble[i] for i in write_set(11, 3, 2)]
    other = next(b for b in ensemble if b not in holders)
    c = BookieClient(other)  # the writer's explicit LAC (it is idle) reaches the third one
    try:
        deadline = time.monotonic() + 10
        while c.read_lac(lh.id).lac < 11:
            assert time.monotonic() < deadline, "explicit LAC never reached the bookie"
            time.sleep(0.05)
    finally:
        c.close()
    lh.abandon("test: the writer is gone")
    down, wiped = procs[holders[0]], procs[holders[1]]
    down.kill()
    wiped.kill()
    wiped.drop_data()
    # its cookie would make it refuse or repair itself (tests/integration/test_cookies.py):
    # the test-only switch makes it serve as if nothing happened, what recovery must survive
    wiped.env[UNSAFE_SERVE_LOST_DATA_ENV] = "1"
    wiped.start()
    with pytest.raises(RecoveryError):
        bk.open_ledger(lh.id)
    assert bk.ledger_metadata(lh.id).state != LedgerState.CLOSED
    down.start()
    deadline = time.monotonic() + 30
    while True:  # as the error says: retry once the bookie is back (and reconnected)
        try:
            rh = bk.open_ledger(lh.id)
            break
        except RecoveryError:
            assert time.monotonic() < deadline, "recovery kept failing with the bookie back"
            time.sleep(0.5)
    assert rh.metadata.state == LedgerState.CLOSED and rh.last_add_confirmed == 11
    assert rh.metadata.length == sum(len(payload(i)) for i in range(12))
    assert [e.payload for e in rh.read_entries(0, 11)] == [payload(i) for i in range(12)]


def test_recovery_after_an_ensemble_change_does_not_need_the_replaced_bookie(
        cluster_factory, metadata_uri) -> None:
    """E=3, Qw=Qa=2. Bookie X dies; the writer replaces it from entry 12 (its LAC + 1) and
    gets 12 acknowledged, then crashes before any bookie learns LAC 12, so recovery reads
    forward from 11: an entry of the fragment before, whose write quorum holds dead X.
    Entry 11 was acknowledged before that fragment ended; writing it back to X cannot
    succeed and need not: recovery used to fail until X came back (never, for a bookie
    lost for good), now it closes the ledger at 12 with every entry."""
    from bk_spark.core.context import BookKeeperConfig

    c = cluster_factory(4)
    procs = {b.bookie_id: b for b in c.bookies}
    with BookKeeper(metadata_uri, BookKeeperConfig(explicit_lac_interval_s=0)) as w:
        lh = w.create_ledger(3, 2, 2)
        for i in range(12):
            lh.add_entry(payload(i))
        ensemble = lh.metadata.ensembles[0][1]
        x = ensemble[0]  # in the write quorums of 11 ({2, 0}) and of 12 ({0, 1})
        assert 0 in write_set(11, 3, 2) and 0 in write_set(12, 3, 2)
        procs[x].kill()
        lh.add_entry(payload(12), 60)  # fails on X: ensemble change from 12, then acked
        md = w.ledger_metadata(lh.id)
        assert [first for first, _ in md.ensembles] == [0, 12] and x not in md.ensembles[1][1]
        lh.abandon("test: the writer crashed")
    with BookKeeper(metadata_uri) as r:
        rh = r.open_ledger(lh.id)
        assert rh.metadata.state == LedgerState.CLOSED and rh.last_add_confirmed == 12
        assert [e.payload for e in rh.read_entries(0, 12)] == [payload(i) for i in range(13)]


def test_recovery_of_empty_ledger_closes_it_empty(cluster, bk) -> None:
    lh = bk.create_ledger(3, 2, 2)
    rh = bk.open_ledger(lh.id)
    assert rh.metadata.state == LedgerState.CLOSED and rh.last_add_confirmed == -1


def test_close_as_writer_after_recovery_follows_the_seed(cluster, bk, metadata_uri) -> None:
    lh = bk.create_ledger(3, 2, 2)
    for i in range(5):
        lh.add_entry(payload(i))
    with BookKeeper(metadata_uri) as other:
        other.open_ledger(lh.id)  # recovered and CLOSED at entry 4 = what we acknowledged
    lh.close()  # CLOSED with the same last entry: success
    assert bk.ledger_metadata(lh.id).last_entry_id == 4

    lh2 = bk.create_ledger(3, 2, 2)
    lh2.add_entry(payload(0))
    bk.metadata_store.update(lh2.id, lambda m: True,
                             lambda m: m.with_state(LedgerState.IN_RECOVERY))
    with pytest.raises(LedgerStateError):
        lh2.close()  # IN_RECOVERY: error


def test_wrong_password_is_rejected(cluster, bk) -> None:
    lh = bk.create_ledger(3, 2, 2, password=b"right")
    lh.add_entry(b"x")
    with pytest.raises(UnauthorizedError):
        bk.open_ledger(lh.id, password=b"wrong")
    with pytest.raises(UnauthorizedError):
        bk.open_ledger(lh.id, password=b"wrong", recovery=False)


@pytest.mark.parametrize("e,qw,qa", [(2, 3, 2), (3, 2, 3), (3, 3, 0), (0, 0, 0)])
def test_quorum_sizes_must_satisfy_e_ge_qw_ge_qa_ge_1(cluster, bk, e, qw, qa) -> None:
    with pytest.raises(InvalidConfigError):
        bk.create_ledger(ensemble_size=e, write_quorum_size=qw, ack_quorum_size=qa)


def test_too_few_bookies_is_a_clear_error(cluster, bk) -> None:
    with pytest.raises(NotEnoughBookiesError, match="4"):
        bk.create_ledger(ensemble_size=4, write_quorum_size=2, ack_quorum_size=2)


def test_adds_after_a_ledger_failed_each_raise_their_own_copy_of_its_error(cluster, bk
                                                                       ) -> None:
    """A ledger stopped by a failure (a bookie of a 3/3/3 ensemble dies, none can replace
    it) refuses every later add with a copy of its error: the one exception object raised
    again from every thread would grow its traceback with each raise."""
    lh = bk.create_ledger(ensemble_size=3, write_quorum_size=3, ack_quorum_size=3,
                          password=b"pw")
    lh.add_entry(b"a")
    victim = lh.metadata.ensembles[0][1][0]
    next(b for b in cluster.bookies if b.bookie_id == victim).kill()
    with pytest.raises(NotEnoughBookiesError):
        lh.add_entry(b"b")
    raised = []
    for _ in range(4):
        with pytest.raises(NotEnoughBookiesError) as info:
            lh.add_entry_async(b"c")
        raised.append(info.value)
    assert len({id(e) for e in raised}) == len(raised)
    assert len({len(traceback.extract_tb(e.__traceback__)) for e in raised}) == 1


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_adds_of_a_ledger_whose_client_was_closed_fail_with_a_clear_error(cluster,
                                                                         metadata_uri) -> None:
    """Closing the BookKeeper client under a writer fails its adds (the client is closed)
    instead of killing the ledger's sender thread with a traceback and leaving them hanging.
    A handle left open is closed with the client; one that failed (here: abandoned, so the
    client leaves it as it is) fails its later adds with the closed client's error."""
    client = BookKeeper(metadata_uri)
    lh = client.create_ledger(3, 2, 2, password=b"pw")
    lh.add_entry(b"before")
    client.close()
    assert lh.is_closed
    with pytest.raises(LedgerClosedError, match="closed"):
        lh.add_entry_async(b"after the close")
    client = BookKeeper(metadata_uri)
    lh = client.create_ledger(3, 2, 2, password=b"pw")
    lh.add_entry(b"before")
    # the client's pool closed under a live sender (a close racing with adds)
    client.bookies.close()
    late = lh.add_entry_async(b"after the close")
    with pytest.raises(BookieUnavailableError, match="closed"):
        late.result(timeout=30)
    with pytest.raises(BookieUnavailableError, match="closed"):
        lh.add_entry_async(b"later still")
    client.close()


def test_non_fencing_open_reads_to_lac_and_does_not_disturb_the_writer(cluster, bk,
                                                                      metadata_uri) -> None:
    lh = bk.create_ledger(3, 2, 2)
    for i in range(100):
        lh.add_entry(payload(i))
    with BookKeeper(metadata_uri) as reader:
        ro = reader.open_ledger(lh.id, recovery=False)
        assert 98 <= ro.last_add_confirmed <= 99
        assert [e.payload for e in ro.read_entries(0, ro.last_add_confirmed)] == \
            [payload(i) for i in range(ro.last_add_confirmed + 1)]
        with pytest.raises(ReadPastLacError):
            ro.read_entries(0, 150)
        lh.add_entry(payload(100))  # the writer is not fenced
        assert ro.wait_for_entry(100, timeout=10)
        assert ro.read_entries(100, 100)[0].payload == payload(100)

        def late() -> None:
            time.sleep(0.5)
            lh.add_entry(payload(101))

        t = threading.Thread(target=late)
        t.start()
        t0 = time.monotonic()
        assert ro.wait_for_entry(101, timeout=10)  # long-poll wakes on the new entry
        assert time.monotonic() - t0 < 5
        t.join()
        lh.close()
        assert ro.read_last_add_confirmed() >= 101
        assert not ro.wait_for_entry(102, timeout=1.0)


def test_corrupt_copy_is_skipped_and_no_good_copy_raises(cluster, bk) -> None:
    lh = bk.create_ledger(3, 2, 2, password=b"pw")
    for i in range(10):
        lh.add_entry(payload(i))
    lh.close()
    ensemble = lh.metadata.ensembles[0][1]
    codec = EntryCodec(lh.id, DigestManager("crc32c", b"pw"))
    bad = codec.encode(4, 3, 0, payload(4))
    bad.payload = b"corrupted" + bad.payload[9:]
    ws = [ensemble[i] for i in write_set(4, 3, 2)]
    c = BookieClient(ws[0])  # the preferred replica gets a corrupt copy
    done = threading.Event()
    c.add_entry(lh.id, master_key(b"pw"), bad, lambda err: done.set(), recovery=True)
    assert done.wait(10)
    c.close()
    rh = bk.open_ledger(lh.id, password=b"pw", recovery=False)
    assert rh.read_entries(4, 4)[0].payload == payload(4)
    c = BookieClient(ws[1])
    done.clear()
    c.add_entry(lh.id, master_key(b"pw"), bad, lambda err: done.set(), recovery=True)
    assert done.wait(10)
    c.close()
    with pytest.raises(DigestMismatchError):
        rh.read_entries(4, 4)


def test_delete_ledger_removes_metadata_and_bookie_data(cluster, bk) -> None:
    lh = bk.create_ledger(3, 2, 2)
    for i in range(10):
        lh.add_entry(payload(i))
    lh.close()
    ensemble = lh.metadata.ensembles[0][1]
    assert lh.id in list(bk.list_ledgers())
    bk.delete_ledger(lh.id)
    assert lh.id not in list(bk.list_ledgers())
    with pytest.raises(NoSuchLedgerError):
        bk.ledger_metadata(lh.id)
    for b in ensemble:
        assert held_entries(b, lh.id, list(range(10))) == []


def test_adds_complete_in_entry_order_for_futures_and_callbacks(cluster, bk) -> None:
    lh = bk.create_ledger(3, 2, 2)
    futs: list = []
    violations: list[int] = []
    order: list[int] = []

    def check(f) -> None:
        eid = f.result()
        if not all(g.done() for g in futs[:eid // 2]):  # futures hold the even ids
            violations.append(eid)

    for i in range(3000):
        f = lh.add_entry_async(payload(i))
        futs.append(f)
        f.add_done_callback(check)
        lh.add_entry_callback(payload(i), lambda eid, err: order.append(eid))
    for f in futs:
        f.result(60)
    lh.close()
    assert violations == []
    assert order == list(range(1, 6000, 2))


@pytest.mark.parametrize("round_max,linger", [(7, 0.0), (7, 0.05), (1000, 0.001)])
def test_rounds_of_any_size_keep_every_entry_in_order(cluster, metadata_uri, round_max,
                                                      linger) -> None:
    """A burst of adds cut into many rounds (a round cap of 7 entries, several rounds in
    flight per bookie) or held back by the linger: every entry is acknowledged once, in
    order, and reads back with its payload; the ledger closes at the right length."""
    from bk_spark.core import BookKeeperConfig

    config = BookKeeperConfig(add_round_max_entries=round_max, add_linger_s=linger)
    with BookKeeper(metadata_uri, config) as bk:
        lh = bk.create_ledger(3, 2, 2)
        first = lh.add_entry(payload(0))  # alone on an idle ledger: shipped at once
        futs = [lh.add_entry_async(payload(i)) for i in range(1, 500)]
        assert [first] + [f.result(60) for f in futs] == list(range(500))
        lh.close()
        rh = bk.open_ledger(lh.id, recovery=False)
        got = [(e.entry_id, e.payload) for e in rh.read_entries(0, 499)]
        assert got == [(i, payload(i)) for i in range(500)]
        assert lh.length == rh.metadata.length == sum(len(payload(i)) for i in range(500))


def test_round_and_linger_options_are_checked() -> None:
    from bk_spark.core import BookKeeperConfig
    from bk_spark.errors import InvalidConfigError

    with pytest.raises(InvalidConfigError, match="add_round_max_entries"):
        BookKeeperConfig(add_round_max_entries=0)
    with pytest.raises(InvalidConfigError, match="add_linger_s"):
        BookKeeperConfig(add_linger_s=-1)


def test_a_ledger_read_in_batches_fetches_the_next_batch_while_the_caller_holds_one(
        bk, monkeypatch) -> None:
    """iter_batches: every entry once, in order, verified; the first batch small (the caller
    starts sooner), and each next batch already asked of the bookies when the caller gets
    the current one (fetching overlaps decoding). The fetches themselves are the real ones,
    only counted."""
    import bk_spark.core.reader as reader

    lh = bk.create_ledger(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2)
    futures = [lh.add_entry_async(payload(i)) for i in range(5000)]
    for f in futures:
        f.result(30)
    lh.close()
    started: list[tuple[int, int]] = []
    real = reader.fetch_entries

    def counted(bk_, md, codec, entry_ids, key):  # type: ignore[no-untyped-def]
        started.append((entry_ids[0], entry_ids[-1]))
        return real(bk_, md, codec, entry_ids, key)

    monkeypatch.setattr(reader, "fetch_entries", counted)
    rh = bk.open_ledger(lh.id, recovery=False)
    seen: list[int] = []
    sizes = []
    for k, got in enumerate(rh.iter_batches(0, 4999, max_entries=1000)):
        if seen[-1:] != [4999] and got.entry_ids[-1] < 4999:
            deadline = time.monotonic() + 5
            while len(started) < k + 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert len(started) >= k + 2, "the next batch was not asked for in advance"
        sizes.append(len(got))
        seen += got.entry_ids.tolist()
        assert [bytes(p) for p in got.payloads()] == [payload(e) for e in got.entry_ids]
    assert seen == list(range(5000))
    assert sizes[0] == 250 and max(sizes) == 1000
    assert [e.payload for e in rh.read_entries(4990, 4999)] == [payload(i)
                                                                for i in range(4990, 5000)]


def test_the_few_entries_of_an_open_ledger_are_read_in_one_fetch_on_the_callers_thread(
        bk, monkeypatch) -> None:
    """A streaming micro-batch reads a few entries of an open ledger, whose entry size is
    not known yet: one fetch, on the reading thread (issue 28). Before, a quarter of the
    small first batch (one entry per bookie) was fetched on a pool thread and the rest in a
    second fetch: two round trips to the bookies and two thread hand-offs per task."""
    import threading

    import bk_spark.core.reader as reader

    lh = bk.create_ledger(3, 2, 2, password=b"p")  # left open: its writer goes on
    for i in range(10):
        lh.add_entry(payload(i))
    started: list[tuple[int, int, str]] = []
    real = reader.fetch_entries

    def counted(bk_, md, codec, entry_ids, key):  # type: ignore[no-untyped-def]
        started.append((entry_ids[0], entry_ids[-1], threading.current_thread().name))
        return real(bk_, md, codec, entry_ids, key)

    monkeypatch.setattr(reader, "fetch_entries", counted)
    rh = bk.open_ledger(lh.id, b"p", recovery=False)
    assert rh.last_add_confirmed == 8  # the last entry's LAC travels with the next add
    got = list(rh.iter_batches(2, 8))
    assert [e for g in got for e in g.entry_ids.tolist()] == list(range(2, 9))
    assert [bytes(p) for g in got for p in g.payloads()] == [payload(i) for i in range(2, 9)]
    assert started == [(2, 8, threading.current_thread().name)]
    lh.close()


def test_a_round_framer_prefixes_every_entry_and_stopped_adds_are_refused(cluster, bk
                                                                         ) -> None:
    """frame_rounds_with: each round shipped gets the framer's prefix (called in entry
    order, a round at a time; the ledger's length counts it); stop_adds: later adds are
    refused while the ones taken are acknowledged and closed in."""
    lh = bk.create_ledger(3, 2, 2)
    rounds: list[int] = []

    def framer(payloads: list[bytes]) -> tuple[bytes, list[bytes]]:
        rounds.append(len(payloads))
        return b"R%04d:" % len(rounds), payloads

    lh.frame_rounds_with(framer, 6)
    with pytest.raises(TooLargeError, match="less 6 bytes of framing"):
        lh.add_entry(b"x" * (bk.config.max_entry_size - 5))
    futs = [lh.add_entry_async(payload(i)) for i in range(400)]
    assert lh.stop_adds() == 400 and lh.added == 400
    with pytest.raises(LedgerClosedError, match="takes no more adds"):
        lh.add_entry_async(payload(400))
    assert [f.result(60) for f in futs] == list(range(400))
    lh.close()
    got = [e.payload for e in bk.open_ledger(lh.id, recovery=False).read_entries(0, 399)]
    assert sum(rounds) == 400
    firsts = [0, *accumulate(rounds)][:-1]  # the first entry id of each round
    expected = [b"R%04d:" % (bisect_right(firsts, i)) + payload(i) for i in range(400)]
    assert got == expected
    assert lh.length == sum(map(len, expected))
