"""Where an entry record lives: the one packing of an entry's *location*.

Every module of the bookie that stores, reads or moves an entry's location (the journal's
ADD batches, the index in memory and on disk, the storage's reads, GC's compaction) goes
through the names defined here; no other module knows the bit layout.

A location is one int::

    location = (log id << 72) | (offset << 32) | record length

(log ids below 2**24, offsets below 2**40, record lengths below 2**32), so an entry costs
one int and a read needs no lookup besides the index. Split in two columns it is::

    high   = location >> 32      log id and offset, u64       (HIGH_TYPECODE, HIGH_DTYPE)
    length = location & 2**32-1  record length, u32, never 0  (LENGTH_TYPECODE, LENGTH_DTYPE)

which is how :class:`bookie_server.index.EntryIndex` keeps them (``array`` typecodes,
native order) and how a checkpoint batch stores them (little endian, ``HIGH_LE`` and
``LENGTH_LE``). A journaled ADD batch hands out *spans*, ``(offset of the record relative
to the batch's first record << 32) | record length``: an entry's location is the location
of the batch's start (:func:`location_base`) plus its span.

Hot loops may bind these functions locally or use the shifts and masks below by name;
nothing else spells ``<< 32``, ``>> 72`` or the masks out.
"""

from __future__ import annotations

import numpy as np

LOG_SHIFT = 72  # location >> LOG_SHIFT: the log id
OFFSET_SHIFT = 32  # (location >> OFFSET_SHIFT) & OFFSET_MASK: the offset in the log
OFFSET_BITS = 40
OFFSET_MASK = (1 << OFFSET_BITS) - 1
LENGTH_MASK = (1 << 32) - 1  # location & LENGTH_MASK: the record length

HIGH_TYPECODE = "Q"  # array typecode of the high column (location >> 32)
LENGTH_TYPECODE = "I"  # array typecode of the record lengths
HIGH_DTYPE = np.uint64  # numpy views of those arrays
LENGTH_DTYPE = np.uint32
HIGH_LE = "<u8"  # the columns as a checkpoint batch stores them
LENGTH_LE = "<u4"


def pack_location(log_id: int, offset: int, length: int) -> int:
    """One int for where an entry record lives (see the module docstring)."""
    return (((log_id << OFFSET_BITS) | offset) << OFFSET_SHIFT) | length


def location_base(log_id: int, offset: int) -> int:
    """Location of a batch's start; add an entry's :func:`pack_span` to get its location."""
    return ((log_id << OFFSET_BITS) | offset) << OFFSET_SHIFT


def unpack_location(location: int) -> tuple[int, int, int]:
    """``(log id, offset, record length)`` of a location."""
    return (
        location >> LOG_SHIFT,
        (location >> OFFSET_SHIFT) & OFFSET_MASK,
        location & LENGTH_MASK,
    )


def log_of(location: int) -> int:
    """The entry log a location points into."""
    return location >> LOG_SHIFT


def offset_of(location: int) -> int:
    """The byte offset of the record in its log."""
    return (location >> OFFSET_SHIFT) & OFFSET_MASK


def length_of(location: int) -> int:
    """The record's length (header, digest and payload); never 0 for a real entry."""
    return location & LENGTH_MASK


def pack_span(relative_offset: int, length: int) -> int:
    """An entry's place inside a journaled ADD batch (its location minus the batch's)."""
    return (relative_offset << OFFSET_SHIFT) | length


def pack_spans(relative_offsets: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """:func:`pack_span` of arrays (a packed add's batch): uint64."""
    return ((np.asarray(relative_offsets).astype(HIGH_DTYPE) << HIGH_DTYPE(OFFSET_SHIFT))
            | np.asarray(lengths).astype(HIGH_DTYPE))


def high_of(location_or_span: int) -> int:
    """The high column of a location (log id and offset), or a span's relative offset."""
    return location_or_span >> OFFSET_SHIFT


def join_location(high: int, length: int) -> int:
    """The location of a high column value and a record length."""
    return (high << OFFSET_SHIFT) | length


def split_highs(highs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(log ids, offsets)`` (int64 arrays) of an array of high column values (a read's
    locations, looked up in numpy)."""
    h = np.asarray(highs, dtype=np.uint64)
    return ((h >> np.uint64(OFFSET_BITS)).astype(np.int64),
            (h & np.uint64(OFFSET_MASK)).astype(np.int64))
