"""A writer's entries as the records a bookie stores, packed into an ``AddRequest``
(issue 28): framing a round at once (the ledger's hot path) makes the records that encoding
each entry alone makes, for every digest type, and a packed request parses back into them."""

from __future__ import annotations

import random

import numpy as np
import pytest

from bk_spark.io.entry import (
    EntryCodec,
    add_answer_error,
    add_request,
    add_request_head,
    frame_entry,
    record_of,
)
from bk_spark.proto import bookie_pb2 as pb
from bk_spark.protocol.digest import DigestManager
from bk_spark.protocol.records import pack_records, parse_records


@pytest.mark.parametrize("digest_type", ["crc32c", "mac", "none"])
@pytest.mark.parametrize("first", [0, 120, 16_370, 2**40])
@pytest.mark.parametrize("lac", [-1, 0, 16_383, 2**40])
@pytest.mark.parametrize("prefix", [b"", b"\x01" + bytes(range(8)), b"\x07" * 300])
def test_frame_run_equals_encoding_entry_by_entry(digest_type: str, first: int, lac: int,
                                                  prefix: bytes) -> None:
    """``prefix`` (a log's frame header for a whole round) goes before every payload; each
    record is the one of the ``Entry`` :meth:`EntryCodec.encode` makes, and verifies."""
    rng = random.Random(first ^ lac)
    codec = EntryCodec(987_654_321, DigestManager(digest_type, b"pw"))
    sizes = [0, 1, 127, 128, 1024, 16_383, 16_384, 70_000] + [rng.randint(0, 3000)
                                                               for _ in range(20)]
    payloads = [rng.randbytes(n) for n in sizes]
    wire, ends = codec.frame_run(first, lac, 77, payloads, prefix)
    length = 77
    for i, (record, payload) in enumerate(zip(wire, payloads, strict=True)):
        payload = prefix + payload
        length += len(payload)
        assert ends[i] == length
        expected = codec.encode(first + i, lac, length, payload)
        assert record == record_of(expected) == frame_entry(expected.SerializeToString())
    recs = parse_records(b"".join(wire), np.asarray([len(r) for r in wire]))
    assert recs.entry_ids.tolist() == list(range(first, first + len(payloads)))
    assert codec.verify_records(recs).all()


@pytest.mark.parametrize("lac,recovery", [(-1, False), (5, True)])
@pytest.mark.parametrize("n", [40, 16, 1])  # numpy's lengths, and a few packed in Python
def test_a_packed_add_request_parses_into_its_records(lac: int, recovery: bool, n: int
                                                      ) -> None:
    """``add_request`` writes protobuf's own ``AddRequest``: the head's fields, the records
    back to back in ``records`` and their u32 lengths in ``record_lengths``."""
    entries = [(9, e, e - 1, bytes([e]) * (e * 300), b"d" * 12) for e in range(n)]
    records = [pack_records([entry])[0] for entry in entries]
    raw = add_request(add_request_head(9, b"key", recovery=recovery, lac=lac), records)
    req = pb.AddRequest.FromString(raw)
    assert (req.ledger_id, req.master_key, req.recovery, req.lac) == (9, b"key", recovery, lac)
    assert not req.entries
    assert (req.records, req.record_lengths) == pack_records(entries)
    assert add_request(b"h", []) == b"h"


def test_an_ok_answer_without_the_packed_flag_is_a_failure() -> None:
    """A bookie that predates packed adds answers OK having stored nothing: the client
    must not count those entries as stored."""
    assert add_answer_error(pb.AddResponse(status=pb.OK, packed=True), "b1", True) is None
    assert add_answer_error(pb.AddResponse(status=pb.OK), "b1", False) is None
    err = add_answer_error(pb.AddResponse(status=pb.OK), "b1", True)
    assert err is not None and "predates packed adds" in str(err)
