"""The entry as a ledger writer sends it and a reader verifies it.

On the wire an entry carries ledger id, entry id, last-add-confirmed, payload and
a digest. bk-spark's ``digest`` field is a small trailer: the ledger's length in
bytes up to and including this entry (8 bytes, big-endian, as BookKeeper keeps
it in every entry so recovery can close a ledger with its length) followed by
the digest of the chosen type, which covers ids, LAC, length and payload.
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

from bk_spark.errors import DigestMismatchError
from bk_spark.io.bookie_client import _varint, frame_entry
from bk_spark.proto import bookie_pb2 as pb
from bk_spark.protocol.digest import DigestManager
from bk_spark.protocol.records import Records, gather

_LEN = struct.Struct(">q")
# What the crc32c digest covers ahead of the payload: ledger id, entry id, lac, the length of
# the digested bytes (the 8-byte ledger length + payload), then that ledger length.
_CRC_HEAD = struct.Struct(">qqqqq")
# The digest field: tag 5, 12 bytes (ledger length, CRC32C).
_CRC_TRAILER = struct.Struct(">BBqI")
_SMALL_VARINTS = [_varint(n) for n in range(1 << 14)]


@lru_cache(maxsize=8)
def _crc_head(prefix_size: int) -> struct.Struct:
    """The crc32c-digested bytes ahead of a payload, with a prefix of ``prefix_size`` bytes
    (:meth:`EntryCodec.frame_run`) after the ledger length."""
    return struct.Struct(f"{_CRC_HEAD.format}{prefix_size}s")


def varints(first: int, count: int) -> list[bytes]:
    """The protobuf varints of ``first, first + 1, ..., first + count - 1`` (ids >= 0), made
    with a few numpy operations per run of equal length instead of a Python loop each."""
    out: list[bytes] = []
    start, stop = first, first + count
    while start < stop:
        width = max(1, (start.bit_length() + 6) // 7)  # bytes of start's varint
        end = min(stop, 1 << (7 * width))  # ids below end have the same width
        ids = np.arange(start, end, dtype=np.uint64)
        digits = np.empty((end - start, width), dtype=np.uint8)
        for k in range(width):
            digits[:, k] = (ids >> np.uint64(7 * k)) & np.uint64(0x7F)
        digits[:, :-1] |= 0x80  # every byte but the last has the continuation bit
        flat = digits.tobytes()
        out += [flat[i:i + width] for i in range(0, len(flat), width)]
        start = end
    return out


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
        ``lac``, each framed for :meth:`BookieClient.send_batch` (:func:`frame_entry`).

        Entry ``k`` holds ``prefix + payloads[k]`` (a log's frame header, the same for a
        whole round: joined here, so the payload is copied once). ``length`` is the ledger's
        length before the first of them. Returns the framed entries and the ledger's length
        after each. Each parses as the ``pb.Entry`` :meth:`encode` makes (and is byte for
        byte :func:`frame_entry` of it, except that zero ids and empty payloads are written
        out where protobuf leaves them out); the crc32c digest (the default) has its own
        loop, the writer's hot path.
        """
        k = len(prefix)
        sizes = map(len, payloads) if not k else map(add, map(len, payloads), repeat(k))
        ends = list(accumulate(sizes, initial=length))
        del ends[0]
        if self.digest.digest_type != "crc32c":
            return [frame_entry(self.encode(eid, lac, end, prefix + p).SerializeToString())
                    for eid, p, end in zip(range(first_entry, first_entry + len(payloads)),
                                           payloads, ends, strict=True)], ends
        lid = self.ledger_id
        ledger_field = b"\x08" + _varint(lid) + b"\x10"  # ledger_id, then entry_id's tag
        lac_field = b"\x18" + _varint(lac) + b"\x22"  # lac, then payload's tag
        fixed = len(ledger_field) + len(lac_field) + _CRC_TRAILER.size + k
        # the digested bytes ahead of the payload: the ids, lac, sizes, then the prefix
        head = _crc_head(k).pack
        small, varint, trailer, crc = _SMALL_VARINTS, _varint, _CRC_TRAILER.pack, crc32c.crc32c
        join = b"".join
        out: list[bytes] = []
        append = out.append
        ids = range(first_entry, first_entry + len(payloads))
        for eid, eid_v, p, end in zip(ids, varints(first_entry, len(payloads)), payloads, ends,
                                      strict=True):
            n = len(p) + k
            n_v = small[n] if n < 16384 else varint(n)
            size = fixed + len(eid_v) + len(n_v) + len(p)
            append(join((b"\x22", small[size] if size < 16384 else varint(size), ledger_field,
                         eid_v, lac_field, n_v, prefix, p,
                         trailer(0x2A, 12, end,
                                 crc(p, crc(head(lid, eid, lac, n + 8, end, prefix)))))))
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
