"""Request validation: every check of a bookie request's ids, sizes and keys, in one place.

Each storage operation (:class:`~bookie_server.storage.BookieStorage`'s ``add_entries``,
``add_records`` (a packed add: :func:`check_records`, the same rules over numpy columns, or in
plain Python for a few records),
``fence``, ``delete_ledger``, ``read_entries``, ``held_ranges``, ``ledger_state``,
``wait_for_lac``) checks
its arguments with these functions once, at its start, before anything is written: the
*accept* step of :mod:`bookie_server.storage`. The gRPC service
(:mod:`bookie_server.server`) checks only what the storage never sees, the wire's own
fields: that every entry of an ``AddRequest`` names the request's ledger
(:func:`check_same_ledger`) and that a read's ``last_entry`` is not before its
``first_entry`` (:func:`check_read_range`).

A bad value raises :class:`~bk_spark.errors.InvalidRequestError` (an entry over the
bookie's ``max_entry_size``: :class:`~bk_spark.errors.TooLargeError`), which the service
returns as the request's status; nothing of the request is stored.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from bk_spark.errors import InvalidRequestError, MalformedRecordsError, TooLargeError
from bk_spark.protocol.records import (
    LENGTHS_DTYPE,
    RecordList,
    Records,
    parse_record_list,
    parse_records,
)

MAX_ID = (1 << 63) - 1  # ledger and entry ids are non-negative int64
MAX_MASTER_KEY_SIZE = 1024
MAX_DIGEST_SIZE = 1024

Entry = tuple[int, int, bytes, bytes]  # entry id, lac, payload, digest


def check_id(name: str, value: int) -> None:
    """A ledger or entry id: an int in ``0..2**63-1``."""
    if not isinstance(value, int) or not 0 <= value <= MAX_ID:
        raise InvalidRequestError(f"{name} must be a non-negative integer, got {value!r}")


def check_lac(lac: int) -> None:
    """An explicit last-add-confirmed: ``-1`` (none) or an entry id."""
    if not isinstance(lac, int) or not -1 <= lac <= MAX_ID:
        raise InvalidRequestError(f"lac must be >= -1, got {lac!r}")


def check_key(master_key: bytes) -> bytes:
    """A ledger's master key: bytes, at most :data:`MAX_MASTER_KEY_SIZE` long (returned as
    ``bytes``)."""
    if not isinstance(master_key, bytes | bytearray | memoryview):
        raise InvalidRequestError("master key must be bytes")
    if len(master_key) > MAX_MASTER_KEY_SIZE:
        raise InvalidRequestError(f"master key longer than {MAX_MASTER_KEY_SIZE} bytes")
    return bytes(master_key)


def check_entries(entries: Iterable[Entry], max_size: int) -> tuple[Sequence[Entry], int]:
    """Entries ``(entry_id, lac, payload, digest)`` of one add: ids >= 0, lacs >= -1,
    payloads of at most ``max_size`` bytes (TooLargeError names the entry), digests of at
    most :data:`MAX_DIGEST_SIZE`. Returns them as a sequence and their payload bytes."""
    if not isinstance(entries, list | tuple):
        entries = list(entries)
    nbytes = 0
    try:
        for entry_id, entry_lac, payload, digest in entries:
            if entry_id < 0:
                raise _negative_entry(entry_id)
            if entry_lac < -1:
                raise _lac_below(entry_lac)
            size = len(payload)
            if size > max_size:
                raise _too_large(entry_id, size, max_size)
            if len(digest) > MAX_DIGEST_SIZE:
                raise _long_digest()
            nbytes += size
    except (TypeError, ValueError) as exc:
        raise InvalidRequestError(f"malformed entry: {exc}") from exc
    return entries, nbytes


#: A packed add of at most this many records is checked in plain Python
#: (:func:`~bk_spark.protocol.records.parse_record_list`), a larger one in numpy: numpy's
#: fixed cost (~20 us) is most of a lone add's check. Chosen by timeit (the report of the
#: ``smallreq`` change): check and encode in plain Python beat numpy up to ~48 records here.
SMALL_RECORDS = 32


def _other_ledger(ledger_id: int) -> InvalidRequestError:
    return InvalidRequestError(f"an entry of another ledger in a request for ledger {ledger_id}")


def _negative_entry(entry_id: int) -> InvalidRequestError:
    return InvalidRequestError(f"entry id must be >= 0, got {entry_id}")


def _lac_below(lac: int) -> InvalidRequestError:
    return InvalidRequestError(f"entry lac must be >= -1, got {lac}")


def _too_large(entry_id: int, size: int, max_size: int) -> TooLargeError:
    return TooLargeError(f"entry {entry_id} has {size} bytes, more than this bookie's "
                         f"max entry size {max_size}: split it")


def _long_digest() -> InvalidRequestError:
    return InvalidRequestError(f"digest longer than {MAX_DIGEST_SIZE} bytes")


def check_records(ledger_id: int, data: bytes, lengths: bytes, max_size: int, *,
                  small: int = SMALL_RECORDS) -> tuple[Records | RecordList, int]:
    """The records of a packed add (``AddRequest.records`` and ``record_lengths``, the
    format of :mod:`bk_spark.protocol.records`), checked as :func:`check_entries` and
    :func:`check_same_ledger` check ``Entry`` messages, but all at once: records that fill
    ``data`` exactly and agree with their lengths, every one of ledger ``ledger_id``, ids >=
    0 (the error names the smallest), lacs >= -1 (the smallest), payloads of at most
    ``max_size`` bytes (TooLargeError names the first entry over it), digests of at most
    :data:`MAX_DIGEST_SIZE`. Returns the records' columns and their payload bytes.

    Up to ``small`` records (:data:`SMALL_RECORDS`) are checked in plain Python and
    returned as a :class:`~bk_spark.protocol.records.RecordList`; more in numpy (no Python
    object per entry) as :class:`~bk_spark.protocol.records.Records`. Both paths apply the
    same rules in the same order and raise the same errors (the helpers above)."""
    try:
        if (isinstance(lengths, bytes | bytearray | memoryview)
                and len(lengths) <= small * LENGTHS_DTYPE.itemsize):
            return _check_record_list(ledger_id, parse_record_list(data, lengths), max_size)
        recs = parse_records(data, lengths)
    except MalformedRecordsError as exc:
        raise InvalidRequestError(f"malformed records: {exc}") from None
    if not len(recs):
        return recs, 0
    if bool(np.any(recs.ledger_ids != ledger_id)):
        raise _other_ledger(ledger_id)
    if int(recs.entry_ids.min()) < 0:
        raise _negative_entry(int(recs.entry_ids.min()))
    if int(recs.lacs.min()) < -1:
        raise _lac_below(int(recs.lacs.min()))
    sizes = recs.payload_lengths
    over = sizes > max_size
    if bool(over.any()):
        i = int(np.argmax(over))
        raise _too_large(int(recs.entry_ids[i]), int(sizes[i]), max_size)
    if int(recs.digest_lengths.max()) > MAX_DIGEST_SIZE:
        raise _long_digest()
    return recs, int(sizes.sum())


def refused_records(recs: Records, ledger_ids: np.ndarray, max_size: int) -> np.ndarray:
    """The mask of the records :func:`check_records` refuses, for records of many ledgers at
    once (a unit: ``ledger_ids`` is the ledger each record must name): another ledger's
    record, an id < 0, a lac < -1, a payload over ``max_size``, a digest over
    :data:`MAX_DIGEST_SIZE`. The same rules as :func:`check_records`, which says which one
    a part breaks."""
    return ((recs.ledger_ids != ledger_ids) | (recs.entry_ids < 0) | (recs.lacs < -1)
            | (recs.payload_lengths > max_size) | (recs.digest_lengths > MAX_DIGEST_SIZE))


def _check_record_list(ledger_id: int, recs: RecordList, max_size: int
                       ) -> tuple[RecordList, int]:
    """:func:`check_records`' rules over a :class:`RecordList`, in the numpy path's order."""
    if not len(recs):
        return recs, 0
    if any(lid != ledger_id for lid in recs.ledger_ids):
        raise _other_ledger(ledger_id)
    if min(recs.entry_ids) < 0:
        raise _negative_entry(min(recs.entry_ids))
    if min(recs.lacs) < -1:
        raise _lac_below(min(recs.lacs))
    nbytes = 0
    longest_digest = 0
    for eid, d, p, e in zip(recs.entry_ids, recs.digest_starts, recs.payload_starts,
                            recs.payload_ends, strict=True):
        if e - p > max_size:
            raise _too_large(eid, e - p, max_size)
        nbytes += e - p
        longest_digest = max(longest_digest, p - d)
    if longest_digest > MAX_DIGEST_SIZE:
        raise _long_digest()
    return recs, nbytes


def check_entry_ids(ids: Sequence[int]) -> None:
    """Entry ids to read, ascending: the first must be >= 0 (so must all)."""
    # not len(ids): a range of 2**63 ids (0..INT64_MAX) has no C-sized length
    if ids and ids[0] < 0:
        raise InvalidRequestError(f"entry ids must be >= 0, got {ids[0]}")


def check_entry_range(first: int, last: int) -> None:
    """An inclusive range of entry ids to look at: ``0 <= first <= last``."""
    if first < 0 or last < first:
        raise InvalidRequestError(f"entry range {first}..{last} is empty or negative")


def check_same_ledger(ledger_id: int, entry_ledger_ids: Iterable[int]) -> None:
    """Every entry of an ``AddRequest`` carries the request's ledger id (wire only)."""
    if any(lid != ledger_id for lid in entry_ledger_ids):
        raise _other_ledger(ledger_id)


def check_read_range(first_entry: int, last_entry: int) -> None:
    """A ``ReadRequest``'s ``first_entry..last_entry`` is not backwards (wire only)."""
    if last_entry < first_entry:
        raise InvalidRequestError(f"last_entry {last_entry} < first_entry {first_entry}")
