"""Packed adds against a real bookie process (issue 28): a writer's records go as they are,
come back byte for byte, survive kill -9 (journal replay of packed records), and a bookie
still takes the adds of a client that sends ``Entry`` messages."""

from __future__ import annotations

import threading
import time

import grpc

from bk_spark.errors import BKError
from bk_spark.io.bookie_client import BookieClient, ClientConfig
from bk_spark.io.entry import EntryCodec, add_request, add_request_head
from bk_spark.proto import bookie_pb2 as pb
from bk_spark.protocol.digest import DigestManager, master_key

PASSWORD = b"p"
KEY = master_key(PASSWORD)


class Acks:
    """A send_batch sink: the entry ids the bookie acknowledged."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked: set[int] = set()
        self.errors: list[BKError] = []

    def on_added(self, tokens, err) -> None:  # type: ignore[no-untyped-def]
        with self.lock:
            if err is None:
                self.acked.update(int(t) for t in tokens)
            else:
                self.errors.append(err)


def test_packed_adds_read_back_byte_identical_after_kill_9_and_restart(cluster_factory
                                                                       ) -> None:
    """A writer's rounds (records made by ``EntryCodec.frame_run``, password ledger) go to
    one bookie while it is killed with -9; after the restart (journal replay) every
    acknowledged entry reads back as the very record sent, by packed and plain reads, and
    its digest verifies."""
    b = cluster_factory(1).bookies[0]
    client = BookieClient(b.bookie_id, ClientConfig(add_timeout_s=5, read_timeout_s=5))
    codec = EntryCodec(11, DigestManager("crc32c", PASSWORD))
    acks = Acks()
    sent: dict[int, bytes] = {}
    stop = threading.Event()

    def writer() -> None:
        first, length = 0, 0
        while not stop.is_set() and first < 200_000:
            payloads = [b"%d|" % (first + k) * (1 + (first + k) % 90) for k in range(100)]
            wire, ends = codec.frame_run(first, first - 1, length, payloads)
            sent.update(zip(range(first, first + 100), wire, strict=True))
            client.send_batch(11, KEY, wire, list(range(first, first + 100)), acks)
            first, length = first + 100, ends[-1]
            time.sleep(0.002)

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    deadline = time.monotonic() + 30
    while len(acks.acked) < 3000 and time.monotonic() < deadline:
        time.sleep(0.01)
    b.kill()  # kill -9 while adds are in flight
    stop.set()
    t.join(10)
    client.close()
    with acks.lock:
        acked = sorted(acks.acked)
    assert len(acked) >= 3000
    b.start()
    fresh = BookieClient(b.bookie_id)
    try:
        got: dict[int, bytes] = {}
        for i in range(0, len(acked), 2000):
            answer = fresh.read_records_future(11, acked[i:i + 2000], KEY).result()
            r = answer.records
            assert codec.verify_records(r).all()
            got.update(zip(r.entry_ids.tolist(), (r.data[a:b] for a, b in zip(
                r.starts.tolist(), r.payload_ends.tolist(), strict=True)), strict=True))
        lost = [e for e in acked if got.get(e) != sent[e]]
        assert lost == [], f"{len(lost)} acknowledged entries lost or changed, e.g. {lost[:5]}"
        plain = fresh.read_entries(11, entry_ids=acked[-50:], master_key=KEY)
        assert [codec.verify(e) for e in plain.entries]  # the Entry form, for old readers
        assert [e.entry_id for e in plain.entries] == acked[-50:]
    finally:
        fresh.close()


def test_a_bookie_takes_packed_and_entry_adds_and_refuses_bad_packed_ones(cluster_factory
                                                                         ) -> None:
    """The bookie answers a packed add with ``packed`` set (the client's proof that its
    records were read), still stores an old client's ``Entry`` adds, and refuses a garbled
    or oversized packed add whole with its typed status."""
    b = cluster_factory(1, ["--max-entry-size", "4096"]).bookies[0]
    channel = grpc.insecure_channel(b.bookie_id)
    add = channel.unary_unary("/bkspark.v1.Bookie/AddEntries", request_serializer=None,
                              response_deserializer=pb.AddResponse.FromString)
    codec = EntryCodec(5, DigestManager("crc32c", PASSWORD))
    try:
        wire, _ = codec.frame_run(0, -1, 0, [b"a" * 100, b"b" * 4096])
        resp = add(add_request(add_request_head(5, KEY), wire), timeout=10)
        assert (resp.status, resp.packed) == (pb.OK, True)
        old = pb.AddRequest(ledger_id=5, master_key=KEY, entries=[
            codec.encode(2, 1, 4296, b"c" * 100)])
        resp = add(old.SerializeToString(), timeout=10)
        assert (resp.status, resp.packed) == (pb.OK, False)
        too_big, _ = codec.frame_run(3, 2, 4296, [b"d", b"e" * 4097])
        resp = add(add_request(add_request_head(5, KEY), too_big), timeout=10)
        assert resp.status == pb.TOO_LARGE and "entry 4 has 4097 bytes" in resp.message
        garbled = add_request(add_request_head(5, KEY), [wire[0][:-1] + b"!x"])
        assert add(garbled, timeout=10).status == pb.INVALID_REQUEST
        client = BookieClient(b.bookie_id)
        try:
            r = client.read_records_future(5, [0, 1, 2, 3, 4], KEY).result()
            assert r.records.entry_ids.tolist() == [0, 1, 2] and r.missing == [3, 4]
            assert codec.verify_records(r.records).all()
        finally:
            client.close()
    finally:
        channel.close()
