"""Packed reads: a bookie's answer of stored records is parsed at once, checked against its
lengths, and verified record by record exactly as one entry at a time would be."""

from __future__ import annotations

import random
import struct

import numpy as np
import pytest

from bk_spark.io.bookie_client import ReadAnswer
from bk_spark.io.entry import EntryCodec
from bk_spark.proto import bookie_pb2 as pb
from bk_spark.protocol.digest import DigestManager
from bk_spark.protocol.records import (
    HEADER_SIZE,
    MalformedRecordsError,
    pack_records,
    parse_records,
)

LEDGER = 4242


def written(codec: EntryCodec, n: int, seed: int = 1) -> list[pb.Entry]:
    rng = random.Random(seed)
    out, length = [], 0
    for e in range(n):
        p = rng.randbytes(rng.choice([0, 1, 9, 100, 3000]))
        length += len(p)
        out.append(codec.encode(e, e - 1, length, p))
    return out


def packed(entries: list[pb.Entry]) -> tuple[bytes, bytes]:
    return pack_records((e.ledger_id, e.entry_id, e.lac, e.payload, e.digest)
                        for e in entries)


def test_records_parse_back_to_their_entries():
    codec = EntryCodec(LEDGER, DigestManager("crc32c"))
    ents = written(codec, 50)
    r = parse_records(*packed(ents))
    assert len(r) == 50
    assert r.entry_ids.tolist() == list(range(50))
    assert r.lacs.tolist() == [e - 1 for e in range(50)]
    assert r.ledger_ids.tolist() == [LEDGER] * 50
    for i, e in enumerate(ents):
        assert r.data[r.payload_starts[i]:r.payload_ends[i]] == e.payload
        assert r.data[r.digest_starts[i]:r.payload_starts[i]] == e.digest
    assert len(parse_records(b"", b"")) == 0


@pytest.mark.parametrize("damage", ["short data", "long data", "header length", "digest past end",
                                    "shorter than a header", "lengths of nothing",
                                    "lengths not whole"])
def test_an_answer_whose_records_disagree_with_their_lengths_is_malformed(damage):
    codec = EntryCodec(LEDGER, DigestManager("crc32c"))
    data, lengths = packed(written(codec, 5))
    lens = np.frombuffer(lengths, "<u4").copy()
    if damage == "short data":
        data = data[:-1]
    elif damage == "long data":
        data += b"\0"
    elif damage == "header length":
        data = struct.pack("<I", lens[0] + 1) + data[4:]
    elif damage == "digest past end":
        first = bytearray(data)
        first[HEADER_SIZE - 2:HEADER_SIZE] = struct.pack("<H", 60_000)
        data = bytes(first)
    elif damage == "shorter than a header":
        lens[0] -= lens[0] - 10
        lens[1] += int(np.frombuffer(lengths, "<u4")[0]) - 10
    elif damage == "lengths of nothing":
        lens = lens[:0]
    with pytest.raises(MalformedRecordsError):
        parse_records(data, lens.tobytes() + (b"\0" if damage == "lengths not whole" else b""))


@pytest.mark.parametrize("digest_type", ["crc32c", "mac", "none"])
def test_verifying_an_answer_at_once_agrees_with_verifying_each_entry(digest_type):
    codec = EntryCodec(LEDGER, DigestManager(digest_type, b"pw"))
    other = EntryCodec(LEDGER + 1, DigestManager(digest_type, b"pw"))
    ents = written(codec, 40, seed=7)
    rng = random.Random(3)
    bad = set()
    for i in rng.sample(range(40), 12):  # corrupt a byte of the payload, digest or ids
        e = ents[i]
        what = rng.choice(["payload", "digest", "entry_id", "lac", "foreign"])
        if what == "payload" and e.payload:
            p = bytearray(e.payload)
            p[rng.randrange(len(p))] ^= 0x10
            e = pb.Entry(ledger_id=LEDGER, entry_id=e.entry_id, lac=e.lac, payload=bytes(p),
                         digest=e.digest)
        elif what == "digest":
            d = bytearray(e.digest)
            d[rng.randrange(len(d))] ^= 0x01
            e = pb.Entry(ledger_id=LEDGER, entry_id=e.entry_id, lac=e.lac, payload=e.payload,
                         digest=bytes(d))
        elif what == "entry_id":
            e = pb.Entry(ledger_id=LEDGER, entry_id=e.entry_id + 1000, lac=e.lac,
                         payload=e.payload, digest=e.digest)
        elif what == "lac":
            e = pb.Entry(ledger_id=LEDGER, entry_id=e.entry_id, lac=e.lac + 1,
                         payload=e.payload, digest=e.digest)
        else:  # another ledger's entry
            e = other.encode(e.entry_id, e.lac, 5, e.payload)
        ents[i] = e
        try:
            codec.verify(e)
        except Exception:  # noqa: BLE001 - whatever the one-entry check says
            bad.add(i)
    ok = codec.verify_records(parse_records(*packed(ents)))
    assert {i for i in range(40) if not ok[i]} == bad
    if digest_type != "none":
        assert bad  # the damage was seen at all


def test_an_answer_of_entry_messages_from_an_older_bookie_reads_as_records():
    codec = EntryCodec(LEDGER, DigestManager("crc32c"))
    ents = written(codec, 8)
    old = pb.ReadResponse(status=pb.OK, entries=ents, missing=[9, 10], lac=7)
    new_data, new_lengths = packed(ents)
    new = pb.ReadResponse(status=pb.OK, records=new_data, record_lengths=new_lengths,
                          missing=[9, 10], lac=7)
    a, b = ReadAnswer.of(old, "b1"), ReadAnswer.of(new, "b1")
    assert a.records.data == b.records.data
    assert a.records.entry_ids.tolist() == b.records.entry_ids.tolist() == list(range(8))
    assert a.missing == b.missing == [9, 10] and a.lac == b.lac == 7
    assert codec.verify_records(a.records).all()
