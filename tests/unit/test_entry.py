"""Framing a writer's round of entries at once (the ledger's hot path) makes the entries that
encoding and framing each alone makes, for every digest type."""

from __future__ import annotations

import random

import pytest

from bk_spark.io.bookie_client import frame_entry
from bk_spark.io.entry import EntryCodec
from bk_spark.proto import bookie_pb2 as pb
from bk_spark.protocol.digest import DigestManager


@pytest.mark.parametrize("digest_type", ["crc32c", "mac", "none"])
@pytest.mark.parametrize("first", [0, 120, 16_370, 2**40])
@pytest.mark.parametrize("lac", [-1, 0, 16_383, 2**40])
@pytest.mark.parametrize("prefix", [b"", b"\x01" + bytes(range(8)), b"\x07" * 300])
def test_frame_run_equals_encoding_entry_by_entry(digest_type: str, first: int, lac: int,
                                                  prefix: bytes) -> None:
    """``prefix`` (a log's frame header for a whole round) goes before every payload."""
    rng = random.Random(first ^ lac)
    codec = EntryCodec(987_654_321, DigestManager(digest_type, b"pw"))
    sizes = [0, 1, 127, 128, 1024, 16_383, 16_384, 70_000] + [rng.randint(0, 3000)
                                                               for _ in range(20)]
    payloads = [rng.randbytes(n) for n in sizes]
    wire, ends = codec.frame_run(first, lac, 77, payloads, prefix)
    length = 77
    for i, (framed, payload) in enumerate(zip(wire, payloads, strict=True)):
        payload = prefix + payload
        length += len(payload)
        assert ends[i] == length
        expected = codec.encode(first + i, lac, length, payload)
        (entry,) = pb.AddRequest.FromString(framed).entries  # one whole AddRequest.entries
        assert entry == expected
        assert codec.verify(entry) == length
        if first + i and lac and payload:  # protobuf leaves out zeros; frame_run writes them
            assert framed == frame_entry(expected.SerializeToString())


@pytest.mark.parametrize("first,count", [(0, 300), (120, 20_000), (2**21 - 5, 10), (2**40, 5),
                                         (2**63 - 3, 3), (7, 0)])
def test_varints_of_consecutive_ids_are_protobufs(first: int, count: int) -> None:
    from bk_spark.io.bookie_client import _varint
    from bk_spark.io.entry import varints

    assert varints(first, count) == [_varint(i) for i in range(first, first + count)]
