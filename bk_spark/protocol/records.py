"""Entry records: how a bookie stores an entry, and how it sends many in one packed read.

One record, little endian: the bytes of an entry in a bookie's entry log, inside its
journal's ADD records, and in a packed ``ReadResponse.records``::

    u32 record length (header + digest + payload) | i64 ledger id | i64 entry id
    | i64 lac | u16 digest length | digest | payload

A packed read (``ReadRequest.packed``) answers with the records of the entries found back
to back, ascending entry id, plus ``record_lengths``: each record's length as a u32 little
endian. A reader then finds every record's fields with a few numpy operations over the
whole answer (:func:`parse_records`), with no Python object per entry, and the bookie sends
the bytes it read from its entry log as they are. The record's own length field must
agree with ``record_lengths``, and every field must lie inside the record: an answer that
breaks either is rejected whole (:class:`MalformedRecordsError`), like a corrupt copy.
The digest is opaque here; :mod:`bk_spark.io.entry` verifies it.

The module is pure: bytes and numpy arrays in, columns out.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from bk_spark.errors import MalformedRecordsError

#: The record header: record length, ledger id, entry id, lac, digest length.
ENTRY_HEADER = struct.Struct("<IqqqH")
HEADER_SIZE = ENTRY_HEADER.size
#: The same header as a numpy record (packed: 30 bytes, unaligned fields).
HEADER_DTYPE = np.dtype([("length", "<u4"), ("ledger_id", "<i8"), ("entry_id", "<i8"),
                         ("lac", "<i8"), ("digest_length", "<u2")])
assert HEADER_DTYPE.itemsize == HEADER_SIZE
#: ``record_lengths``: one u32 little endian per record.
LENGTHS_DTYPE = np.dtype("<u4")


@dataclass(frozen=True, eq=False)
class Records:
    """The records of one packed answer, as columns (numpy arrays, one element per record,
    in answer order). ``data`` holds them; a record's digest is
    ``data[digest_starts[i]:payload_starts[i]]`` and its payload
    ``data[payload_starts[i]:payload_ends[i]]``."""

    data: bytes
    starts: np.ndarray  # int64: where each record begins
    ledger_ids: np.ndarray  # int64
    entry_ids: np.ndarray  # int64
    lacs: np.ndarray  # int64
    digest_starts: np.ndarray  # int64
    payload_starts: np.ndarray  # int64
    payload_ends: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.entry_ids)

    @property
    def digest_lengths(self) -> np.ndarray:
        return self.payload_starts - self.digest_starts

    @property
    def payload_lengths(self) -> np.ndarray:
        return self.payload_ends - self.payload_starts

    def take(self, index: np.ndarray) -> Records:
        """The records at ``index`` (positions or a boolean mask), same ``data``."""
        return Records(self.data, self.starts[index], self.ledger_ids[index],
                       self.entry_ids[index], self.lacs[index], self.digest_starts[index],
                       self.payload_starts[index], self.payload_ends[index])


EMPTY = np.zeros(0, dtype=np.int64)


def empty_records() -> Records:
    return Records(b"", EMPTY, EMPTY, EMPTY, EMPTY, EMPTY, EMPTY, EMPTY)


def gather(data: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    """``width`` bytes at each of ``starts`` of the uint8 array ``data``: shape (n, width)."""
    return data[starts[:, None] + np.arange(width, dtype=np.int64)]


def parse_records(data: bytes, lengths: bytes | np.ndarray) -> Records:
    """The columns of a packed answer: ``data`` the records back to back, ``lengths`` each
    record's length (``record_lengths`` bytes, or an array). Raises
    :class:`MalformedRecordsError` unless every record's header agrees with its length and
    its digest and payload lie inside it."""
    if isinstance(lengths, bytes | bytearray | memoryview):
        if len(lengths) % LENGTHS_DTYPE.itemsize:
            raise MalformedRecordsError(f"record lengths of {len(lengths)} bytes: not whole "
                                        f"lengths")
        lens = np.frombuffer(lengths, LENGTHS_DTYPE).astype(np.int64)
    else:
        lens = np.asarray(lengths).astype(np.int64)
    n = len(lens)
    if n == 0:
        if len(data):
            raise MalformedRecordsError(f"a packed answer of {len(data)} bytes lists no record")
        return empty_records()
    ends = np.cumsum(lens)
    starts = ends - lens
    if int(ends[-1]) != len(data) or int(lens.min()) < HEADER_SIZE:
        raise MalformedRecordsError(
            f"a packed answer of {len(data)} bytes does not hold the {n} records its "
            f"lengths list ({int(ends[-1])} bytes, shortest {int(lens.min())})")
    raw = np.frombuffer(data, np.uint8)
    head = np.ascontiguousarray(gather(raw, starts, HEADER_SIZE)).view(HEADER_DTYPE)[:, 0]
    digest_starts = starts + HEADER_SIZE
    payload_starts = digest_starts + head["digest_length"].astype(np.int64)
    if not (np.array_equal(head["length"].astype(np.int64), lens) and
            bool(np.all(payload_starts <= ends))):
        bad = int(np.argmax((head["length"].astype(np.int64) != lens) |
                            (payload_starts > ends)))
        raise MalformedRecordsError(
            f"record {bad} of a packed answer (at byte {int(starts[bad])}) disagrees with "
            f"its length ({int(lens[bad])} listed, {int(head['length'][bad])} in its "
            f"header, digest of {int(head['digest_length'][bad])} bytes)")
    return Records(data, starts, head["ledger_id"].astype(np.int64),
                   head["entry_id"].astype(np.int64), head["lac"].astype(np.int64),
                   digest_starts, payload_starts, ends)


def pack_records(entries: Iterable[tuple[int, int, int, bytes, bytes]]) -> tuple[bytes, bytes]:
    """``(records, record_lengths)`` of ``(ledger_id, entry_id, lac, payload, digest)``
    tuples: a packed answer built one entry at a time (an answer of ``Entry`` messages
    from a bookie that predates packed reads, tests)."""
    parts: list[bytes] = []
    lengths: list[int] = []
    pack = ENTRY_HEADER.pack
    for lid, eid, lac, payload, digest in entries:
        n = HEADER_SIZE + len(digest) + len(payload)
        parts += (pack(n, lid, eid, lac, len(digest)), digest, payload)
        lengths.append(n)
    return b"".join(parts), np.asarray(lengths, LENGTHS_DTYPE).tobytes()
