"""The add stream (issue 28 §2) on real bookie processes: adds of every ledger travel on one
long-lived stream per bookie, a broken stream fails over as a failed unary call does (the
writer's ensemble change), and a bookie that refuses streams, or refuses the peer, is
answered over unary ``AddEntries`` exactly as before."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from bk_spark.certs import issue_cert, make_ca
from bk_spark.core import BookKeeper, BookKeeperConfig
from bk_spark.errors import BKError, UnauthorizedError
from bk_spark.io.bookie_client import BookieClient, ClientConfig, TlsOptions
from bk_spark.proto import bookie_pb2 as pb
from bk_spark.security import ClientSecurity

PASSWORD = b"p"


def payload(i: int) -> bytes:
    return b"stream-%06d" % i


def stream_counts(bk: BookKeeper, bookie: str) -> tuple[int, int]:
    """(add streams open, add requests served over streams) of one bookie (``Info``)."""
    info = bk.bookies.get(bookie).info()
    return info.add_streams_open, info.stream_add_requests


def test_adds_of_many_ledgers_travel_on_one_stream_per_bookie(cluster, metadata_uri) -> None:
    with BookKeeper(metadata_uri) as bk:
        handles = [bk.create_ledger(3, 2, 2, password=PASSWORD) for _ in range(20)]
        futures = [(lh, i, lh.add_entry_async(payload(i))) for i in range(10)
                   for lh in handles]
        for _lh, _i, f in futures:
            f.result(30)
        for b in cluster.bookies:
            open_now, served = stream_counts(bk, b.bookie_id)
            assert open_now == 1  # this client's one stream, however many ledgers
            assert served > 0
        for lh in handles:
            lh.close()
            rh = bk.open_ledger(lh.id, PASSWORD)
            assert [e.payload for e in rh.read_entries(0, 9)] == [payload(i) for i in range(10)]


def test_a_bookie_killed_under_a_streaming_writer_is_replaced_and_every_acked_entry_reads_back(
        cluster_factory, metadata_uri) -> None:
    c = cluster_factory(4)
    with BookKeeper(metadata_uri) as bk:
        lh = bk.create_ledger(3, 2, 2, password=PASSWORD)  # left open: never closed
        futures = [lh.add_entry_async(payload(i)) for i in range(1500)]
        futures[300].result(30)
        victim = lh.metadata.ensembles[0][1][0]
        assert stream_counts(bk, victim)[1] > 0  # the victim was being written by stream
        next(b for b in c.bookies if b.bookie_id == victim).kill()  # kill -9
        futures += [lh.add_entry_async(payload(i)) for i in range(1500, 3000)]
        assert [f.result(60) for f in futures] == list(range(3000))
        assert victim not in lh.metadata.ensembles[-1][1]
        with BookKeeper(metadata_uri) as other:  # recovery open: fences the open writer
            rh = other.open_ledger(lh.id, PASSWORD)
            assert rh.last_add_confirmed >= 2999
            got = [(e.entry_id, e.payload) for e in rh.read_entries(0, 2999)]
        assert got == [(i, payload(i)) for i in range(3000)]
        lh.abandon("test: recovered by another client")


def test_an_add_unanswered_past_add_timeout_breaks_the_stream_and_the_writer_moves_on(
        cluster_factory, metadata_uri) -> None:
    c = cluster_factory(4)
    quick = BookKeeperConfig(client=ClientConfig(add_timeout_s=1.0))
    with BookKeeper(metadata_uri, quick) as bk:
        lh = bk.create_ledger(3, 3, 2, password=PASSWORD)
        for i in range(10):
            lh.add_entry(payload(i))
        stalled = next(b for b in c.bookies if b.bookie_id == lh.metadata.ensembles[0][1][0])
        stalled.pause()  # SIGSTOP: the stream stays open, nothing answers on it
        try:
            t0 = time.monotonic()
            futures = [lh.add_entry_async(payload(i)) for i in range(10, 60)]
            assert [f.result(30) for f in futures] == list(range(10, 60))  # Qa = 2 of 3
            lh.add_entry(payload(60))
            # the stalled bookie was replaced once its adds' deadline passed
            deadline = time.monotonic() + 15
            while stalled.bookie_id in lh.metadata.ensembles[-1][1]:
                assert time.monotonic() < deadline, "the stalled bookie was never replaced"
                time.sleep(0.1)
            assert time.monotonic() - t0 >= 1.0
        finally:
            stalled.resume()
        lh.close()
        rh = bk.open_ledger(lh.id, PASSWORD)
        assert [e.payload for e in rh.read_entries(0, 60)] == [payload(i) for i in range(61)]


def test_a_bookie_that_refuses_streams_is_written_over_unary_adds(cluster_factory,
                                                                   metadata_uri) -> None:
    c = cluster_factory(3, extra_args=["--max-add-streams", "0"])
    with BookKeeper(metadata_uri) as bk:
        lh = bk.create_ledger(3, 3, 2, password=PASSWORD)
        futures = [lh.add_entry_async(payload(i)) for i in range(300)]
        assert [f.result(30) for f in futures] == list(range(300))
        for b in c.bookies:
            assert stream_counts(bk, b.bookie_id) == (0, 0)
        lh.close()
        rh = bk.open_ledger(lh.id, PASSWORD)
        assert [e.payload for e in rh.read_entries(0, 299)] == [payload(i) for i in range(300)]


def test_a_stream_peer_whose_certificate_may_not_add_is_refused_as_a_unary_call_is(
        cluster_factory, metadata_uri, tmp_path: Path) -> None:
    ca = make_ca(tmp_path / "ca")
    certs = tmp_path / "certs"
    server = issue_cert(ca, certs, "bookie")
    app, intruder = (issue_cert(ca, certs, n) for n in ("app-1", "intruder"))
    c = cluster_factory(1, extra_args=[
        "--tls-cert", str(server.cert), "--tls-key", str(server.key), "--tls-ca", str(ca.cert),
        "--tls-client-auth", "require", "--allow-client", "app-1"])
    target = c.bookies[0].bookie_id

    def client(cert) -> BookieClient:  # type: ignore[no-untyped-def]
        return BookieClient(target, ClientConfig(tls=TlsOptions(ca.cert, cert.cert, cert.key)))

    def add(bc: BookieClient, ledger_id: int) -> BKError | None:
        got: list[BKError | None] = []
        done = threading.Event()
        bc.add_entry(ledger_id, b"k" * 20, pb.Entry(ledger_id=ledger_id, entry_id=0, lac=-1,
                                                   payload=b"x"),
                     lambda err: (got.append(err), done.set()))
        assert done.wait(20)
        return got[0]

    outsider, allowed = client(intruder), client(app)
    try:
        err = add(outsider, 1)
        assert isinstance(err, UnauthorizedError) and "allow-list" in str(err)
        info = allowed.info()
        assert (info.add_streams_open, info.stream_add_requests) == (0, 0)
        assert add(allowed, 2) is None  # an allowed peer's add goes on a stream
        info = allowed.info()
        assert (info.add_streams_open, info.stream_add_requests) == (1, 1)
    finally:
        outsider.close()
        allowed.close()
    with BookKeeper(metadata_uri, security=ClientSecurity(
            str(ca.cert), str(intruder.cert), str(intruder.key))) as bk:
        with pytest.raises(UnauthorizedError, match="allow-list"):
            bk.create_ledger(1, 1, 1, password=PASSWORD).add_entry(b"refused")
