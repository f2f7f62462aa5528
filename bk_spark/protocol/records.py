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


def _not_whole_lengths(nbytes: int) -> MalformedRecordsError:
    return MalformedRecordsError(f"record lengths of {nbytes} bytes: not whole lengths")


def _no_record(nbytes: int) -> MalformedRecordsError:
    return MalformedRecordsError(f"a packed answer of {nbytes} bytes lists no record")


def _lengths_disagree(nbytes: int, n: int, total: int, shortest: int) -> MalformedRecordsError:
    return MalformedRecordsError(
        f"a packed answer of {nbytes} bytes does not hold the {n} records its "
        f"lengths list ({total} bytes, shortest {shortest})")


def _record_disagrees(i: int, start: int, listed: int, in_header: int, digest: int
                      ) -> MalformedRecordsError:
    return MalformedRecordsError(
        f"record {i} of a packed answer (at byte {start}) disagrees with "
        f"its length ({listed} listed, {in_header} in its header, digest of {digest} bytes)")


def parse_records(data: bytes, lengths: bytes | np.ndarray) -> Records:
    """The columns of a packed answer: ``data`` the records back to back, ``lengths`` each
    record's length (``record_lengths`` bytes, or an array). Raises
    :class:`MalformedRecordsError` unless every record's header agrees with its length and
    its digest and payload lie inside it. :func:`parse_record_list` is the same in plain
    Python, for a few records."""
    if isinstance(lengths, bytes | bytearray | memoryview):
        if len(lengths) % LENGTHS_DTYPE.itemsize:
            raise _not_whole_lengths(len(lengths))
        lens = np.frombuffer(lengths, LENGTHS_DTYPE).astype(np.int64)
    else:
        lens = np.asarray(lengths).astype(np.int64)
    n = len(lens)
    if n == 0:
        if len(data):
            raise _no_record(len(data))
        return empty_records()
    ends = np.cumsum(lens)
    starts = ends - lens
    if int(ends[-1]) != len(data) or int(lens.min()) < HEADER_SIZE:
        raise _lengths_disagree(len(data), n, int(ends[-1]), int(lens.min()))
    raw = np.frombuffer(data, np.uint8)
    head = np.ascontiguousarray(gather(raw, starts, HEADER_SIZE)).view(HEADER_DTYPE)[:, 0]
    digest_starts = starts + HEADER_SIZE
    payload_starts = digest_starts + head["digest_length"].astype(np.int64)
    if not (np.array_equal(head["length"].astype(np.int64), lens) and
            bool(np.all(payload_starts <= ends))):
        bad = int(np.argmax((head["length"].astype(np.int64) != lens) |
                            (payload_starts > ends)))
        raise _record_disagrees(bad, int(starts[bad]), int(lens[bad]),
                                int(head["length"][bad]), int(head["digest_length"][bad]))
    return Records(data, starts, head["ledger_id"].astype(np.int64),
                   head["entry_id"].astype(np.int64), head["lac"].astype(np.int64),
                   digest_starts, payload_starts, ends)


@dataclass(frozen=True, eq=False, slots=True)
class RecordList:
    """:class:`Records` for a few records: the same columns as Python lists of ints (no
    numpy array to set up, which costs more than the work for one record)."""

    data: bytes
    starts: list[int]
    ledger_ids: list[int]
    entry_ids: list[int]
    lacs: list[int]
    digest_starts: list[int]
    payload_starts: list[int]
    payload_ends: list[int]

    def __len__(self) -> int:
        return len(self.entry_ids)


def parse_record_list(data: bytes, lengths: bytes) -> RecordList:
    """:func:`parse_records` in plain Python (``lengths`` as ``record_lengths`` bytes): the
    same checks in the same order, the same :class:`MalformedRecordsError` messages (the
    helpers above), for a packed add of a few records, where numpy's fixed cost dominates."""
    if len(lengths) % LENGTHS_DTYPE.itemsize:
        raise _not_whole_lengths(len(lengths))
    n = len(lengths) // LENGTHS_DTYPE.itemsize
    if n == 0:
        if len(data):
            raise _no_record(len(data))
        return RecordList(data, [], [], [], [], [], [], [])
    lens = struct.unpack(f"<{n}I", lengths)
    total = sum(lens)
    shortest = min(lens)
    if total != len(data) or shortest < HEADER_SIZE:
        raise _lengths_disagree(len(data), n, total, shortest)
    unpack = ENTRY_HEADER.unpack_from
    starts: list[int] = []
    ledger_ids: list[int] = []
    entry_ids: list[int] = []
    lacs: list[int] = []
    digest_starts: list[int] = []
    payload_starts: list[int] = []
    ends: list[int] = []
    pos = 0
    for i, length in enumerate(lens):
        in_header, lid, eid, lac, digest = unpack(data, pos)
        end = pos + length
        if in_header != length or pos + HEADER_SIZE + digest > end:
            raise _record_disagrees(i, pos, length, in_header, digest)
        starts.append(pos)
        ledger_ids.append(lid)
        entry_ids.append(eid)
        lacs.append(lac)
        digest_starts.append(pos + HEADER_SIZE)
        payload_starts.append(pos + HEADER_SIZE + digest)
        ends.append(end)
        pos = end
    return RecordList(data, starts, ledger_ids, entry_ids, lacs, digest_starts,
                      payload_starts, ends)


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
