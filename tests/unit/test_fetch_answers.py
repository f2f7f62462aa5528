"""How a read takes a bookie's packed answer apart (``fetch_entries``): the answers come
from a scripted bookie, the rest is the real read path (digests, fail-over)."""

from __future__ import annotations

import threading
import types

import bk_spark.proto.bookie_pb2 as pb
from bk_spark.core.reader import fetch_entries
from bk_spark.io.bookie_client import ReadAnswer
from bk_spark.io.entry import EntryCodec
from bk_spark.protocol.digest import DigestManager
from bk_spark.protocol.ledger_metadata import LedgerMetadata
from bk_spark.protocol.records import pack_records

LEDGER = 77
CODEC = EntryCodec(LEDGER, DigestManager("crc32c"))


class _Done:
    def __init__(self, value: ReadAnswer) -> None:
        self.value = value

    def result(self) -> ReadAnswer:
        return self.value


def _one_bookie_answering(extra_ids: list[int]):  # type: ignore[no-untyped-def]
    """A client whose one bookie holds entries 0..9 and answers each read with the asked
    entries plus the records of ``extra_ids`` (not asked: a misbehaving bookie)."""
    stored = {e: CODEC.encode(e, e - 1, 0, b"payload-%d" % e) for e in range(10)}

    def scatter_reads(ledger_id, key, asks, bookie, timeout=None, packed=False):  # type: ignore[no-untyped-def]
        calls = []
        for k, ids in asks.items():
            chunk = list(ids.tolist())
            ents = sorted({*chunk, *extra_ids})
            recs, lens = pack_records((LEDGER, e, stored[e].lac, stored[e].payload,
                                       stored[e].digest) for e in ents)
            resp = pb.ReadResponse(status=pb.OK, records=recs, record_lengths=lens)
            calls.append((k, chunk, _Done(ReadAnswer.of(resp, bookie(k)))))
        return calls

    client = types.SimpleNamespace(read_timeout_s=2.0)
    return types.SimpleNamespace(config=types.SimpleNamespace(client=client),
                                 bookies=types.SimpleNamespace(scatter_reads=scatter_reads))


def test_a_record_not_asked_for_does_not_hide_the_asked_one_beside_it():
    """An unasked record that sorts into the same slot as an asked one (entry 4 before 5
    when 5 and 6 are asked) is ignored; the asked one is taken (it used to be dropped as a
    second record of its slot, then asked again forever)."""
    md = LedgerMetadata(ledger_id=LEDGER, ensemble_size=1, write_quorum_size=1,
                        ack_quorum_size=1, ensembles=((0, ("b0:1",)),))
    got: list = []
    t = threading.Thread(target=lambda: got.append(
        fetch_entries(_one_bookie_answering([4]), md, CODEC, [5, 6], b"k")), daemon=True)
    t.start()
    t.join(20)
    assert got, "the read did not finish"
    assert got[0].entry_ids.tolist() == [5, 6]
    assert [bytes(p) for p in got[0].payloads()] == [b"payload-5", b"payload-6"]


def test_a_closed_client_pool_opens_no_new_channel():
    """A read still running on another thread when its client closes (a prefetch of
    ``iter_batches`` the caller stopped consuming) gets an error, not a fresh channel that
    nothing would close."""
    import pytest

    from bk_spark.errors import BookieUnavailableError
    from bk_spark.io.bookie_client import BookieClientPool

    pool = BookieClientPool()
    first = pool.get("127.0.0.1:1")
    assert pool.get("127.0.0.1:1") is first
    pool.close()
    with pytest.raises(BookieUnavailableError, match="the client is closed"):
        pool.get("127.0.0.1:1")
