"""The add stream (issue 28 §2) on real bookie processes: adds of every ledger travel on one
long-lived stream per bookie, a broken stream fails over as a failed unary call does (the
writer's ensemble change), and a bookie that refuses streams, or refuses the peer, is
answered over unary ``AddEntries`` exactly as before."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from bk_spark.certs import issue_cert, make_ca
from bk_spark.core import BookKeeper, BookKeeperConfig
from bk_spark.errors import BKError, BookieUnavailableError, UnauthorizedError
from bk_spark.io.add_stream import encode_message
from bk_spark.io.bookie_client import BookieClient, ClientConfig, TlsOptions
from bk_spark.io.entry import EntryCodec, add_request, add_request_head
from bk_spark.proto import bookie_pb2 as pb
from bk_spark.protocol.digest import DigestManager, master_key
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


def test_one_stream_message_carries_packed_and_entry_adds_each_answered_as_unary(
        cluster_factory) -> None:
    """Packed adds (the client's) and ``Entry`` adds (an older client's) of two ledgers in ONE
    stream message: each answer is the unary one, ``packed`` set exactly for the packed
    request (the client's proof its records were read), a wrong key refused with its typed
    status; every stored entry reads back."""
    b = cluster_factory(1).bookies[0]
    codec = EntryCodec(7, DigestManager("crc32c", PASSWORD))
    old = EntryCodec(8, DigestManager("crc32c", PASSWORD))
    key = master_key(PASSWORD)
    wire, _ = codec.frame_run(0, -1, 0, [b"packed-0", b"packed-1"])
    requests = [
        add_request(add_request_head(7, key), wire),
        pb.AddRequest(ledger_id=8, master_key=key,
                      entries=[old.encode(0, -1, 5, b"entry")]).SerializeToString(),
        add_request(add_request_head(7, b"w" * 20), wire),  # not the ledger's key
    ]
    channel = grpc.insecure_channel(b.bookie_id)
    stream = channel.stream_stream("/bkspark.v1.Bookie/AddStream", request_serializer=None,
                                   response_deserializer=pb.AddStreamResponse.FromString)
    unary = channel.unary_unary("/bkspark.v1.Bookie/AddEntries", request_serializer=None,
                                response_deserializer=pb.AddResponse.FromString)
    try:
        answers = list(stream(iter([encode_message(41, requests)]), timeout=20))
        assert [a.request_id for a in answers] == [41]
        got = [(r.status, r.packed) for r in answers[0].responses]
        assert got == [(pb.OK, True), (pb.OK, False), (pb.UNAUTHORIZED, False)]
        again = [unary(r, timeout=20) for r in requests]  # re-adding overwrites: same answers
        assert [(r.status, r.packed) for r in again] == got
    finally:
        channel.close()
    client = BookieClient(b.bookie_id)
    try:
        r = client.read_records_future(7, [0, 1], key).result()
        assert r.records.entry_ids.tolist() == [0, 1] and codec.verify_records(r.records).all()
        assert [e.payload for e in client.read_entries(8, entry_ids=[0], master_key=key).entries
                ] == [b"entry"]
    finally:
        client.close()


def test_one_unit_of_many_password_ledgers_fails_only_its_fenced_and_wrong_key_parts(
        cluster_factory) -> None:
    """ONE stream message whose unit (``AddStreamRequest.adds``) carries the records of five
    password ledgers and an explicit LAC: the part of a ledger fenced before, the part
    presented with a wrong master key and the part whose record names another ledger are
    refused with their own typed status; every other part is stored (after the fdatasync,
    one answer), readable, and the LAC part advances its ledger's LAC."""
    b = cluster_factory(1).bookies[0]
    key = master_key(PASSWORD)
    codecs = {lid: EntryCodec(lid, DigestManager("crc32c", PASSWORD)) for lid in range(21, 26)}
    wires = {lid: codecs[lid].frame_run(0, -1, 0, [b"u-%d-0" % lid, b"u-%d-1" % lid])[0]
             for lid in codecs}
    client = BookieClient(b.bookie_id, ClientConfig(add_stream=False))
    try:
        client.fence(22, key)  # ledger 22: fenced (a recovery began)
        first = _Waited()
        client.send_batch(23, key, wires[23][:1], [0], first)  # ledger 23 has its key
        assert first.done.wait(20) and first.err is None
        parts = [(21, key, wires[21], -1), (22, key, wires[22], -1),
                 (23, b"w" * 20, wires[23], -1), (24, key, wires[21], -1),  # 21's records
                 (25, key, wires[25], -1), (21, key, [], 1)]
        unit = pb.LedgerAdds(
            records=b"".join(r for p in parts for r in p[2]),
            record_lengths=b"".join(len(r).to_bytes(4, "little") for p in parts for r in p[2]),
            ledger_ids=[p[0] for p in parts], counts=[len(p[2]) for p in parts],
            master_keys=[p[1] for p in parts], lacs=[p[3] for p in parts])
        channel = grpc.insecure_channel(b.bookie_id)
        stream = channel.stream_stream("/bkspark.v1.Bookie/AddStream", request_serializer=None,
                                       response_deserializer=pb.AddStreamResponse.FromString)
        try:
            [answer] = list(stream(iter([encode_message(7, [unit.SerializeToString()], True)]),
                                   timeout=20))
        finally:
            channel.close()
        assert answer.request_id == 7 and answer.reads_adds
        assert list(answer.adds_status) == [pb.OK, pb.LEDGER_FENCED, pb.UNAUTHORIZED,
                                            pb.INVALID_REQUEST, pb.OK, pb.OK]
        assert "fenced" in answer.adds_message[1] and answer.adds_message[0] == ""
        for lid in (21, 25):
            r = client.read_records_future(lid, [0, 1], key).result()
            assert r.records.entry_ids.tolist() == [0, 1]
            assert codecs[lid].verify_records(r.records).all()
        assert client.read_lac(21).lac == 1  # the explicit LAC part
        assert client.read_lac(22).last_entry == -1  # the fenced ledger took nothing
        assert client.read_lac(23).last_entry == 0  # only what its writer added before
        info = client.info()
        assert info.stream_add_units == 1 and info.stream_unit_parts == 6
    finally:
        client.close()


class _Waited:
    """A sink that keeps its answer."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.err: BKError | None = None

    def on_added(self, tokens, err) -> None:  # type: ignore[no-untyped-def]
        self.err = err
        self.done.set()


class _BookieBeforePackedAdds:
    """A bookie that predates packed adds, as one would answer: it reads an ``AddRequest``
    without knowing ``records`` and answers OK having stored nothing, unary and on its add
    stream (which it has)."""

    def __init__(self) -> None:
        self.stream_messages = 0
        self.server = grpc.server(ThreadPoolExecutor(max_workers=4))
        self.server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
            "bkspark.v1.Bookie", {
                "AddEntries": grpc.unary_unary_rpc_method_handler(
                    lambda raw, _ctx: pb.AddResponse(status=pb.OK).SerializeToString()),
                "AddStream": grpc.stream_stream_rpc_method_handler(self._stream),
            })])
        self.address = f"127.0.0.1:{self.server.add_insecure_port('127.0.0.1:0')}"
        self.server.start()

    def _stream(self, messages, _ctx):  # type: ignore[no-untyped-def]
        for raw in messages:
            msg = pb.AddStreamRequest.FromString(raw)
            self.stream_messages += 1
            yield pb.AddStreamResponse(request_id=msg.request_id, responses=[
                pb.AddResponse(status=pb.OK) for _ in msg.requests]).SerializeToString()


@pytest.mark.parametrize("add_stream", [True, False], ids=["stream", "unary"])
def test_an_ok_without_packed_to_a_packed_add_fails_on_the_stream_as_on_unary_calls(
        add_stream: bool) -> None:
    """A bookie that predates packed adds answers OK to records it never read: the add
    fails (BookieUnavailableError naming the upgrade), never counts as stored, whether it
    went on the add stream or unary."""
    old = _BookieBeforePackedAdds()
    client = BookieClient(old.address, ClientConfig(add_stream=add_stream, add_timeout_s=10))
    codec = EntryCodec(3, DigestManager("crc32c", PASSWORD))
    try:
        wire, _ = codec.frame_run(0, -1, 0, [b"a", b"b"])
        got: list[tuple[list[int], BKError | None]] = []
        done = threading.Event()

        class Sink:
            def on_added(self, tokens, err) -> None:  # type: ignore[no-untyped-def]
                got.append((list(tokens), err))
                done.set()

        client.send_batch(3, master_key(PASSWORD), wire, [0, 1], Sink())
        assert done.wait(20)
        [(tokens, err)] = got
        assert tokens == [0, 1]
        assert isinstance(err, BookieUnavailableError) and "predates packed adds" in str(err)
        assert (old.stream_messages > 0) == add_stream  # the stream answer was the one read
    finally:
        client.close()
        old.server.stop(None)


def test_ledgers_sharing_stream_messages_ack_in_their_own_order_and_tell_their_lac_after_kill_9(
        cluster_factory, metadata_uri) -> None:
    """A thousand writers' rounds to one bookie travel as one unit of many ledgers
    (``AddStreamRequest.adds``), their answers are counted in one pass, their lingers and
    explicit LACs are gathered per interval (issue 28). With 200 open password ledgers
    written round robin and a bookie killed -9 mid-way (mid-stream: units outstanding):
    every ledger's adds complete in its own entry order, none fails, the killed bookie
    leaves each ensemble it was in, and once the writers fall idle every ledger's LAC, as
    a non-fencing reader reads it from the bookies, is its last acknowledged entry."""
    c = cluster_factory(4)
    n_ledgers, per = 200, 16
    with BookKeeper(metadata_uri) as bk:
        handles = [bk.create_ledger(3, 2, 2, password=PASSWORD) for _ in range(n_ledgers)]
        seen: dict[int, list[tuple[int, object]]] = {lh.id: [] for lh in handles}
        lock = threading.Lock()
        done = threading.Semaphore(0)

        def completer(lid: int):  # type: ignore[no-untyped-def]
            def acked(eid: int, err: object) -> None:
                with lock:
                    seen[lid].append((eid, err))
                done.release()
            return acked

        callbacks = {lh.id: completer(lh.id) for lh in handles}
        for i in range(per // 2):
            for lh in handles:
                lh.add_entry_callback(payload(i), callbacks[lh.id])
        for _ in range(n_ledgers * 2):  # some answered: the streams are carrying them
            assert done.acquire(timeout=30)
        victim = handles[0].metadata.ensembles[0][1][0]
        had_victim = [lh for lh in handles if victim in lh.metadata.ensembles[-1][1]]
        info = bk.bookies.get(victim).info()
        assert info.stream_add_units > 0 and info.stream_unit_parts > info.stream_add_units
        next(b for b in c.bookies if b.bookie_id == victim).kill()  # kill -9
        for i in range(per // 2, per):
            for lh in handles:
                lh.add_entry_callback(payload(i), callbacks[lh.id])
        for _ in range(n_ledgers * per - n_ledgers * 2):
            assert done.acquire(timeout=60)
        for lh in handles:
            assert seen[lh.id] == [(e, None) for e in range(per)], lh.id
            assert lh.last_add_confirmed == per - 1
        assert had_victim and all(victim not in lh.metadata.ensembles[-1][1]
                                  for lh in had_victim)
        # idle writers: their explicit LACs reach the bookies within the interval
        with BookKeeper(metadata_uri) as other:
            readers = {lh.id: other.open_ledger(lh.id, PASSWORD, recovery=False)
                       for lh in handles}
            deadline = time.monotonic() + 10
            behind = list(readers)
            while behind:
                assert time.monotonic() < deadline, f"LAC still behind on {behind[:5]}"
                behind = [lid for lid in behind
                          if readers[lid].read_last_add_confirmed() != per - 1]
                time.sleep(0.05 if behind else 0)
            for lh in handles[::37]:
                got = [e.payload for e in readers[lh.id].read_entries(0, per - 1)]
                assert got == [payload(i) for i in range(per)]
        for lh in handles:  # left open, as a crashed writer leaves them
            lh.abandon("test: left open")


def test_a_lone_adds_answer_wakes_its_caller_and_not_the_streams_sender(
        cluster, metadata_uri) -> None:
    """A lone add crosses one thread wake-up fewer: its answer, read by the stream's reader,
    wakes the caller only; the stream's sender (gRPC's consumer thread, the only thread
    waiting on the stream's condition) wakes once per message it sends, not also per
    answer."""
    with BookKeeper(metadata_uri) as bk:
        lh = bk.create_ledger(3, 2, 2, password=PASSWORD)  # left open
        for i in range(20):
            lh.add_entry(payload(i))
        streams = [bk.bookies.get(b)._stream for b in lh.metadata.ensembles[-1][1]]
        assert all(s is not None and not s.ended for s in streams)

        def counts() -> tuple[int, int]:
            return (sum(s.sender_wakes for s in streams),
                    sum(s.messages_sent for s in streams))

        before = counts()
        for i in range(20, 220):
            lh.add_entry(payload(i))
        after = counts()
        per_message = (after[0] - before[0]) / (after[1] - before[1])
        assert per_message < 1.5, per_message  # before: ~2 (the answer woke it too)
        rh = bk.open_ledger(lh.id, PASSWORD, recovery=False)
        assert [e.payload for e in rh.read_entries(0, 218)] == [payload(i) for i in range(219)]


def test_a_stream_idle_for_idle_close_s_ends_after_its_last_answer(cluster, metadata_uri) -> None:
    """The sender, no longer woken by answers, still ends an idle stream on time (it looks
    at the idle clock itself): its threads and the bookie's stream slot are freed."""
    from bk_spark.protocol.add_stream import IDLE_CLOSE_S

    with BookKeeper(metadata_uri) as bk:
        lh = bk.create_ledger(3, 2, 2, password=PASSWORD)
        lh.add_entry(payload(0))
        bookie = lh.metadata.ensembles[-1][1][1]  # in the write sets of entries 0 and 1
        stream = bk.bookies.get(bookie)._stream
        assert stream is not None and not stream.ended
        t0 = time.monotonic()
        while not stream.ended and time.monotonic() - t0 < IDLE_CLOSE_S + 5:
            time.sleep(0.05)
        # ended after the writer's explicit LAC (50 ms after the add) went idle
        assert IDLE_CLOSE_S - 0.1 <= time.monotonic() - t0 <= IDLE_CLOSE_S + 1.5
        deadline = time.monotonic() + 5
        while stream_counts(bk, bookie)[0] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stream_counts(bk, bookie)[0] == 0
        lh.add_entry(payload(1))  # a new stream
        assert bk.bookies.get(bookie)._stream is not stream
        lh.close()
