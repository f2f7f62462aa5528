"""The entry as a ledger writer sends it and a reader verifies it.

On the wire an entry carries ledger id, entry id, last-add-confirmed, payload and
a digest. bk-spark's ``digest`` field is a small trailer: the ledger's length in
bytes up to and including this entry (8 bytes, big-endian, as BookKeeper keeps
it in every entry so recovery can close a ledger with its length) followed by
the digest of the chosen type, which covers ids, LAC, length and payload.

A writer sends its entries *packed* (issue 28): each as the record a bookie stores
(:mod:`bk_spark.protocol.records`, the format a packed read answers with), made once per
entry however many bookies of its write set it goes to (:meth:`EntryCodec.frame_run`,
:func:`record_of`), and an ``AddRequest`` carries a run of them back to back in its
``records`` field with their lengths (:func:`add_request`): the bookie checks them all at
once and journals them as they came, with no Python object per entry on either side.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import accumulate, repeat
from operator import add

import crc32c
import numpy as np

from bk_spark.errors import (
    BKError,
    BookieUnavailableError,
    DigestMismatchError,
    error_for_code,
)
from bk_spark.proto import bookie_pb2 as pb
from bk_spark.protocol.digest import DigestManager
from bk_spark.protocol.records import ENTRY_HEADER, HEADER_SIZE, LENGTHS_DTYPE, Records, gather

_LEN = struct.Struct(">q")
# What the crc32c digest covers ahead of the payload: ledger id, entry id, lac, the length of
# the digested bytes (the 8-byte ledger length + payload), then that ledger length.
_CRC_HEAD = struct.Struct(">qqqqq")
# A crc32c entry's digest field: the ledger length and the CRC32C.
_CRC_DIGEST = struct.Struct(">qI")
#: AddRequest's ``records`` (field 6) and ``record_lengths`` (field 7), length-delimited.
_RECORDS_TAG = b"\x32"
_LENGTHS_TAG = b"\x3a"


@lru_cache(maxsize=8)
def _crc_head(prefix_size: int) -> struct.Struct:
    """The crc32c-digested bytes ahead of a payload, with a prefix of ``prefix_size`` bytes
    (:meth:`EntryCodec.frame_run`) after the ledger length."""
    return struct.Struct(f"{_CRC_HEAD.format}{prefix_size}s")


def _varint(n: int) -> bytes:
    """Protobuf's base-128 varint; negative numbers as 64-bit two's complement."""
    if 0 <= n < 0x80:
        return bytes((n,))
    n &= 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def entry_record(ledger_id: int, entry_id: int, lac: int, payload: bytes, digest: bytes
                 ) -> bytes:
    """One entry as the record a bookie stores (:mod:`bk_spark.protocol.records`)."""
    return b"".join((ENTRY_HEADER.pack(HEADER_SIZE + len(digest) + len(payload), ledger_id,
                                       entry_id, lac, len(digest)), digest, payload))


def record_of(entry: pb.Entry) -> bytes:
    """The record of an ``Entry`` message (a recovery's or a re-replication's copy of an
    entry read back, a tool's add), for :meth:`BookieClient.send_batch`."""
    return entry_record(entry.ledger_id, entry.entry_id, entry.lac, entry.payload,
                        entry.digest)


def frame_entry(entry: bytes) -> bytes:
    """The record of a serialized ``pb.Entry``, for :meth:`BookieClient.send_batch`
    (:func:`record_of` of it)."""
    return record_of(pb.Entry.FromString(entry))


def add_request_head(ledger_id: int, master_key: bytes, *, recovery: bool = False,
                     lac: int = -1) -> bytes:
    """The fields of an ``AddRequest`` but its entries: serialized once for every request
    a batch is cut into (:func:`add_request`)."""
    return pb.AddRequest(ledger_id=ledger_id, master_key=master_key, recovery=recovery,
                         lac=lac).SerializeToString()


def add_request(head: bytes, records: Sequence[bytes]) -> bytes:
    """A serialized ``AddRequest`` (``head``: :func:`add_request_head`) carrying
    ``records`` packed: back to back in its ``records`` field and their lengths in
    ``record_lengths``. One copy of each record, made by the join; the lengths in numpy."""
    if not records:
        return head
    n = len(records)
    if n <= 16:  # a round of a few entries (many ledgers): numpy's fixed cost dominates
        sizes = list(map(len, records))
        total = sum(sizes)
        lens = struct.pack(f"<{n}I", *sizes)
    else:
        lengths = np.fromiter(map(len, records), dtype=LENGTHS_DTYPE, count=n)
        total = int(lengths.sum(dtype=np.int64))
        lens = lengths.tobytes()
    return b"".join((head, _RECORDS_TAG, _varint(total), *records,
                     _LENGTHS_TAG, _varint(len(lens)), lens))


def add_answer_error(resp: pb.AddResponse, bookie_id: str, sent_records: bool
                     ) -> BKError | None:
    """What a bookie's answer to one :func:`add_request` means, the one reading of it for
    the unary ``AddEntries`` and the add stream alike: None when the bookie stored the
    request, else the typed error of its status. An OK to a request that carried records
    (``sent_records``) counts only with ``packed`` set: a bookie that predates packed adds
    ignores the ``records`` field and answers OK having stored nothing, so its answer is a
    failure and the writer moves to another bookie instead of counting entries that were
    never stored."""
    if resp.status != pb.OK:
        return error_for_code(resp.status, f"bookie {bookie_id}: {resp.message}")
    if resp.packed or not sent_records:
        return None
    return BookieUnavailableError(
        f"bookie {bookie_id} did not read the packed entries of an add (it predates packed "
        f"adds): upgrade it; the writer uses other bookies meanwhile")


def unit_answer_errors(resp: pb.AddStreamResponse, parts: int, bookie_id: str
                       ) -> list[BKError | None]:
    """What a bookie's answer to a unit (``LedgerAdds`` of ``parts`` ledgers) means, beside
    :func:`add_answer_error` for one request: per part, None when the bookie stored it,
    else the typed error of its status. An answer without one status per part fails every
    part (the writers move to other bookies rather than count adds it may not have
    stored)."""
    if len(resp.adds_status) != parts:
        return [BookieUnavailableError(
            f"bookie {bookie_id}: no answer for the adds of {parts} ledgers")] * parts
    messages = resp.adds_message
    return [None if st == pb.OK else error_for_code(st, f"bookie {bookie_id}: {messages[i]}")
            for i, st in enumerate(resp.adds_status)]

@dataclass(frozen=True)
class LedgerEntry:
    """One entry read back from a ledger."""

    ledger_id: int
    entry_id: int
    payload: bytes

    @property
    def length(self) -> int:
        return len(self.payload)


class EntryCodec:
    """Makes and verifies wire entries of one ledger."""

    def __init__(self, ledger_id: int, digest: DigestManager) -> None:
        self.ledger_id = ledger_id
        self.digest = digest

    def encode(self, entry_id: int, lac: int, length: int, payload: bytes) -> pb.Entry:
        head = _LEN.pack(length)
        d = self.digest.compute(self.ledger_id, entry_id, lac, head + payload)
        return pb.Entry(ledger_id=self.ledger_id, entry_id=entry_id, lac=lac,
                        payload=payload, digest=head + d)

    def frame_run(self, first_entry: int, lac: int, length: int, payloads: Sequence[bytes],
                  prefix: bytes = b"") -> tuple[list[bytes], list[int]]:
        """Encode consecutive entries ``first_entry, first_entry + 1, ...`` all carrying
        ``lac``, each as its record (:func:`entry_record`) for
        :meth:`BookieClient.send_batch`.

        Entry ``k`` holds ``prefix + payloads[k]`` (a log's frame header, the same for a
        whole round: joined here, so the payload is copied once). ``length`` is the ledger's
        length before the first of them. Returns the records and the ledger's length
        after each. Each is the record of the ``pb.Entry`` :meth:`encode` makes; the crc32c
        digest (the default) has its own loop, the writer's hot path: per entry two
        ``struct`` packs, two ``crc32c`` calls and one join.
        """
        k = len(prefix)
        sizes = map(len, payloads) if not k else map(add, map(len, payloads), repeat(k))
        ends = list(accumulate(sizes, initial=length))
        del ends[0]
        lid = self.ledger_id
        if self.digest.digest_type != "crc32c":
            return [record_of(self.encode(eid, lac, end, prefix + p))
                    for eid, p, end in zip(range(first_entry, first_entry + len(payloads)),
                                           payloads, ends, strict=True)], ends
        fixed = HEADER_SIZE + _CRC_DIGEST.size + k
        head = _crc_head(k).pack  # the digested bytes ahead of the payload
        rec_head, digest, crc = ENTRY_HEADER.pack, _CRC_DIGEST.pack, crc32c.crc32c
        join = b"".join
        out: list[bytes] = []
        append = out.append
        ids = range(first_entry, first_entry + len(payloads))
        if k:
            for eid, p, end in zip(ids, payloads, ends, strict=True):
                n = len(p) + k
                append(join((rec_head(fixed + len(p), lid, eid, lac, 12),
                             digest(end, crc(p, crc(head(lid, eid, lac, n + 8, end, prefix)))),
                             prefix, p)))
        else:
            head0 = _CRC_HEAD.pack
            for eid, p, end in zip(ids, payloads, ends, strict=True):
                n = len(p)
                append(join((rec_head(fixed + n, lid, eid, lac, 12),
                             digest(end, crc(p, crc(head0(lid, eid, lac, n + 8, end)))), p)))
        return out, ends

    def verify_records(self, r: Records) -> np.ndarray:
        """Which records of a packed answer are good entries of this ledger (a bool per
        record): the ledger id and the digest checked as :meth:`verify` checks one entry,
        for the whole answer at once. With crc32c (the default) the fixed part every digest
        covers (ids, lac, length, the ledger length) is built for all records in numpy, then
        each record costs two ``crc32c`` calls on slices of the answer (no copy, no object
        per entry); other digest types go entry by entry. False: that copy is corrupt or
        foreign, read another."""
        ok = (r.ledger_ids == self.ledger_id) & (r.digest_lengths >= _LEN.size)
        if self.digest.digest_type == "crc32c":
            ok &= r.digest_lengths == _LEN.size + 4
            idx = np.flatnonzero(ok)
            k = len(idx)
            if k == 0:
                return ok
            # In a copy of the answer, the 40 bytes before each payload (the end of the
            # record header, the ledger length and the stored CRC) become what the CRC
            # covers ahead of the payload (_CRC_HEAD: lid, eid, lac, n + 8, ledger length):
            # then one crc32c call per record, over a slice of the copy.
            raw = np.frombuffer(r.data, np.uint8)
            ds, ps, pe = r.digest_starts[idx], r.payload_starts[idx], r.payload_ends[idx]
            stored = np.ascontiguousarray(gather(raw, ds + _LEN.size, 4)).view(">u4")[:, 0]
            head = np.empty((k, 40), dtype=np.uint8)
            head[:, 0:8] = np.frombuffer(_LEN.pack(self.ledger_id), np.uint8)
            head[:, 8:16] = r.entry_ids[idx].astype(">i8").view(np.uint8).reshape(k, 8)
            head[:, 16:24] = r.lacs[idx].astype(">i8").view(np.uint8).reshape(k, 8)
            head[:, 24:32] = (pe - ps + _LEN.size).astype(">i8").view(np.uint8).reshape(k, 8)
            head[:, 32:40] = gather(raw, ds, _LEN.size)
            work = raw.copy()
            work[(ps - 40)[:, None] + np.arange(40)] = head
            view, crc = memoryview(work), crc32c.crc32c
            got = [crc(view[a:b]) for a, b in zip((ps - 40).tolist(), pe.tolist(), strict=True)]
            ok[idx] = np.asarray(got, dtype=np.uint32) == stored
            return ok
        data = r.data
        for i in np.flatnonzero(ok).tolist():
            ds, ps, pe = int(r.digest_starts[i]), int(r.payload_starts[i]), int(r.payload_ends[i])
            try:
                self.digest.verify(self.ledger_id, int(r.entry_ids[i]), int(r.lacs[i]),
                                   data[ds:ds + _LEN.size] + data[ps:pe],
                                   data[ds + _LEN.size:ps])
            except DigestMismatchError:
                ok[i] = False
        return ok

    def verify(self, e: pb.Entry) -> int:
        """Check ids and digest; returns the ledger length the entry carries."""
        if e.ledger_id != self.ledger_id or len(e.digest) < _LEN.size:
            raise DigestMismatchError(
                f"entry {e.ledger_id}/{e.entry_id} is not an entry of ledger {self.ledger_id}")
        head = e.digest[:_LEN.size]
        self.digest.verify(self.ledger_id, e.entry_id, e.lac, head + e.payload,
                           e.digest[_LEN.size:])
        return _LEN.unpack(head)[0]
