"""Request validation: every check of a bookie request's ids, sizes and keys, in one place.

Each storage operation (:class:`~bookie_server.storage.BookieStorage`'s ``add_entries``,
``add_records`` (a packed add: :func:`check_records`, the same rules over numpy columns),
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
from bk_spark.protocol.records import Records, parse_records

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
                raise InvalidRequestError(f"entry id must be >= 0, got {entry_id}")
            if entry_lac < -1:
                raise InvalidRequestError(f"entry lac must be >= -1, got {entry_lac}")
            size = len(payload)
            if size > max_size:
                raise TooLargeError(
                    f"entry {entry_id} has {size} bytes, more than this bookie's "
                    f"max entry size {max_size}: split it"
                )
            if len(digest) > MAX_DIGEST_SIZE:
                raise InvalidRequestError(f"digest longer than {MAX_DIGEST_SIZE} bytes")
            nbytes += size
    except (TypeError, ValueError) as exc:
        raise InvalidRequestError(f"malformed entry: {exc}") from exc
    return entries, nbytes


def check_records(ledger_id: int, data: bytes, lengths: bytes, max_size: int
                  ) -> tuple[Records, int]:
    """The records of a packed add (``AddRequest.records`` and ``record_lengths``, the
    format of :mod:`bk_spark.protocol.records`), checked as :func:`check_entries` and
    :func:`check_same_ledger` check ``Entry`` messages, but all at once (numpy over the
    headers, no Python object per entry): records that fill ``data`` exactly and agree with
    their lengths, every one of ledger ``ledger_id``, ids >= 0, lacs >= -1, payloads of at
    most ``max_size`` bytes (TooLargeError names the first entry over it), digests of at most
    :data:`MAX_DIGEST_SIZE`. Returns the records' columns and their payload bytes."""
    try:
        recs = parse_records(data, lengths)
    except MalformedRecordsError as exc:
        raise InvalidRequestError(f"malformed records: {exc}") from None
    if not len(recs):
        return recs, 0
    if bool(np.any(recs.ledger_ids != ledger_id)):
        raise InvalidRequestError(f"an entry of another ledger in a request for "
                                  f"ledger {ledger_id}")
    if int(recs.entry_ids.min()) < 0:
        raise InvalidRequestError(f"entry id must be >= 0, got {int(recs.entry_ids.min())}")
    if int(recs.lacs.min()) < -1:
        raise InvalidRequestError(f"entry lac must be >= -1, got {int(recs.lacs.min())}")
    sizes = recs.payload_lengths
    over = sizes > max_size
    if bool(over.any()):
        i = int(np.argmax(over))
        raise TooLargeError(
            f"entry {int(recs.entry_ids[i])} has {int(sizes[i])} bytes, more than this "
            f"bookie's max entry size {max_size}: split it")
    if int(recs.digest_lengths.max()) > MAX_DIGEST_SIZE:
        raise InvalidRequestError(f"digest longer than {MAX_DIGEST_SIZE} bytes")
    return recs, int(sizes.sum())


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
        raise InvalidRequestError(f"an entry of another ledger in a request for "
                                  f"ledger {ledger_id}")


def check_read_range(first_entry: int, last_entry: int) -> None:
    """A ``ReadRequest``'s ``first_entry..last_entry`` is not backwards (wire only)."""
    if last_entry < first_entry:
        raise InvalidRequestError(f"last_entry {last_entry} < first_entry {first_entry}")
