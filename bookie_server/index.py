"""The (ledger, entry) -> location index and the per-ledger state, and their durable home.

In memory every ledger the bookie knows has a :class:`LedgerState`: its master key,
fenced flag, last-add-confirmed (``lac``), highest stored entry and ``index``, a dict from
entry id to a *location*, one int packing where the entry record lives (log id, offset,
record length: :mod:`bookie_server.location`, the one home of that packing), so reads
never scan the journal.

On disk (``data_dir/ledgers/index-<generation>.idx``) the index is an append-only file of
*checkpoint batches*. Each batch carries what changed since the previous checkpoint
(ledgers deleted, ledger states and the locations of entries added or moved) and the
journal position up to which it accounts for every change, under one CRC32C::

    batch: 4s magic "BKIX" | u32 crc32c(body) | u64 body length | body
    body:  u8 flags (1 = full snapshot) | u64 journal seq | u64 journal offset
           | u32 n deleted | i64 ledger id * n | [i64 tombstone floor, if flags & 2]
           | u32 n ledgers | per ledger: i64 id | u8 flags (1 = fenced) | i64 lac
             | i64 last entry | u16 key length | u32 n entries | key
             | i64 entry ids * n | u64 high * n | u32 record lengths * n

(``high`` and record length: the two columns of a location, :mod:`bookie_server.location`.)

The deleted ids are also the bookie's *tombstones* (:mod:`bookie_server.tombstones`): an
incremental batch lists the ledgers deleted since the previous one, a full snapshot lists
every tombstone still kept, and a batch with flag 2 carries the tombstone floor, so a
restarted bookie still refuses adds to every ledger it deleted.

Guarantees kept here:

* A checkpoint batch is durable (fdatasync'd) when :meth:`IndexStore.append` returns, so
  checkpoint cost is proportional to what changed, not to the whole index.
* A torn or corrupt batch (crash mid-checkpoint) fails its CRC and is dropped with
  everything after it: the previous checkpoint stays in force, and the journal files it
  needs are still there because they are released only after a batch is durable.
* When the appended batches outgrow the last full snapshot, :meth:`IndexStore.rewrite`
  writes a full snapshot to a new generation (write temp, fsync, rename, fsync directory)
  and drops the old file; the rewrite cost is amortised over the appends that caused it.
"""

from __future__ import annotations

import heapq
import os
import struct
import sys
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import crc32c
import numpy as np

from bookie_server.entrylog import fsync_directory
from bookie_server.location import (
    HIGH_DTYPE,
    HIGH_LE,
    HIGH_TYPECODE,
    LENGTH_DTYPE,
    LENGTH_LE,
    LENGTH_MASK,
    LENGTH_TYPECODE,
    OFFSET_SHIFT,
    high_of,
    join_location,
    length_of,
)
from bookie_server.tombstones import DeletedLedgers
from bookie_server.writeback import PacedWriter

BATCH_HEADER = struct.Struct("<4sIQ")  # magic, crc32c of body, body length
BATCH_MAGIC = b"BKIX"
BATCH_START = struct.Struct("<BQQI")  # flags, journal seq, journal offset, n deleted
LEDGER_RECORD = struct.Struct("<qBqqHI")  # id, flags, lac, last entry, key length, n entries
COUNT = struct.Struct("<I")
FLAG_FULL = 1
FLAG_TOMBSTONE_FLOOR = 2
TOMBSTONE_FLOOR = struct.Struct("<q")
FLAG_FENCED = 1
INDEX_PREFIX = "index-"
INDEX_SUFFIX = ".idx"


#: A write beyond the dense part of an :class:`EntryIndex` by more than this many ids goes
#: to its sparse dict instead of growing the arrays over the gap.
DENSE_MAX_GAP = 1 << 16
#: Batches of at most this many entries are indexed one by one (a lone add's), larger ones
#: in numpy (:meth:`EntryIndex.put_batch`).
SMALL_BATCH = 8
#: A checkpoint handles the locations of at most this many entries at a time: looked up
#: under the storage's state lock, encoded, written (~0.1-0.3 ms of CPU each), so the
#: journal writer, which needs that lock and the GIL to apply its group, never waits for
#: more than one piece (bench/profiles.md, "Checkpoints invisible to adds").
CHECKPOINT_SLICE = 16_384
#: A checkpoint batch is written in pieces of about this many bytes.
WRITE_PIECE = 256 * 1024


class EntryIndex:
    """One ledger's ``entry id -> location`` map in 12 bytes per entry.

    A ledger's entry ids are dense (0, 1, 2, ... as its writer hands them out), so the
    locations live in two arrays indexed by ``entry id - first``: a location's two columns
    (:mod:`bookie_server.location`), its high part (log id and offset, 64 bits) and the
    record length (32 bits; 0 marks a hole, since a record is never empty). Ids before
    ``first`` or more than :data:`DENSE_MAX_GAP` past the dense end
    (a recovery write-back far ahead, a hand-made request) go to a small dict. A Python
    dict would cost about 100 bytes per entry (two int objects and a slot): with this
    layout 10 GB of 1 KiB entries index in ~120 MB, not ~1 GB.

    The mapping API is the subset the storage uses (``get``, ``[]``, ``in``, ``len``,
    ``update`` from pairs, ``keys``/``values``/``items`` in the same order: dense ids
    ascending, then the sparse ones).
    """

    __slots__ = ("_first", "_high", "_length", "_count", "_sparse")

    def __init__(self) -> None:
        self._first = -1
        self._high = array(HIGH_TYPECODE)
        self._length = array(LENGTH_TYPECODE)
        self._count = 0
        self._sparse: dict[int, int] = {}

    def __len__(self) -> int:
        return self._count + len(self._sparse)

    def get(self, entry_id: int, default: int | None = None) -> int | None:
        k = entry_id - self._first
        if self._first >= 0 and 0 <= k < len(self._length):
            length = self._length[k]
            return (self._high[k] << OFFSET_SHIFT) | length if length else default
        return self._sparse.get(entry_id, default)

    def __getitem__(self, entry_id: int) -> int:
        loc = self.get(entry_id)
        if loc is None:
            raise KeyError(entry_id)
        return loc

    def __contains__(self, entry_id: object) -> bool:
        return isinstance(entry_id, int) and self.get(entry_id) is not None

    def __setitem__(self, entry_id: int, location: int) -> None:
        length = location & LENGTH_MASK
        if length == 0:
            raise ValueError("a location's record length is never 0")
        if self._first < 0 and not self._sparse:
            self._first = entry_id
        k = entry_id - self._first
        n = len(self._length)
        if self._first < 0 or k < 0 or k > n + DENSE_MAX_GAP:
            self._sparse[entry_id] = location
            return
        if k >= n:
            self._grow(k + 1 - n)
        if not self._length[k]:
            self._count += 1
        self._high[k] = location >> OFFSET_SHIFT
        self._length[k] = length
        if entry_id in self._sparse:  # moved into the dense part: one copy only
            del self._sparse[entry_id]

    def _grow(self, n: int) -> None:
        """Extend the dense part by ``n`` slots; ids kept in the sparse part that the dense
        part now reaches move into it, so that every id lives in exactly one place (a slot
        of length 0 means "not here", and :meth:`get` does not look further)."""
        start = len(self._length)
        self._high.frombytes(bytes(8 * n))
        self._length.frombytes(bytes(4 * n))
        if self._sparse:
            first = self._first
            inside = [e for e in self._sparse if first + start <= e < first + start + n]
            for entry_id in inside:
                location = self._sparse.pop(entry_id)
                k = entry_id - first
                self._high[k] = location >> OFFSET_SHIFT
                self._length[k] = location & LENGTH_MASK
            self._count += len(inside)

    def update(self, pairs: Iterable[tuple[int, int]]) -> None:
        """Set many; ids within the dense part's reach (a batch of new adds) take at most
        one growth of the arrays and no per-entry method call."""
        pairs = list(pairs)
        if not pairs:
            return
        if self._first < 0 and not self._sparse:
            self._first = min(p[0] for p in pairs)
        first = self._first
        n = len(self._length)
        if (first < 0 or min(p[0] for p in pairs) < first
                or max(p[0] for p in pairs) - first > n + DENSE_MAX_GAP):
            for entry_id, location in pairs:
                self[entry_id] = location
            return
        top = max(p[0] for p in pairs) - first + 1
        if top > n:
            self._grow(top - n)
        sparse = self._sparse
        high, lengths = self._high, self._length
        added = 0
        for entry_id, location in pairs:
            k = entry_id - first
            length = location & LENGTH_MASK
            if not length:
                raise ValueError("a location's record length is never 0")
            if not lengths[k]:
                added += 1
            high[k] = location >> OFFSET_SHIFT
            lengths[k] = length
            if sparse and entry_id in sparse:
                del sparse[entry_id]
        self._count += added

    def put_batch(self, entry_ids: Sequence[int] | np.ndarray, base_high: int,
                  spans: Sequence[int] | np.ndarray) -> None:
        """Set the locations of one journaled batch: entry ``entry_ids[i]`` at
        ``join_location(base_high + high_of(spans[i]), length_of(spans[i]))`` (the batch's
        location plus the entry's span, :class:`bookie_server.journal.AddBatch`; lists, or
        numpy arrays for a packed add's). Distinct ids within the dense part's reach (every
        batch a writer sends: ascending to one bookie of its ensemble, or a few ascending
        runs, one per write set it is in) are set in numpy, ~20x faster than one by one;
        anything else (an id twice, ids before the dense part or far past it), and a batch
        of at most :data:`SMALL_BATCH` entries, goes one by one."""
        n = len(entry_ids)
        if n == 0:
            return
        if n <= SMALL_BATCH:  # numpy's fixed cost (~8 us) is more than a few entries' own
            self._put_each(entry_ids, base_high, spans)
            return
        ids = np.asarray(entry_ids, dtype=np.int64)
        ascending = bool(np.all(ids[1:] > ids[:-1]))
        if not ascending:  # a ledger's share for one bookie: a few ascending runs, E apart
            ordered = np.sort(ids)
            if not bool(np.all(ordered[1:] > ordered[:-1])):  # an entry twice
                self._put_each(entry_ids, base_high, spans)
                return
        else:
            ordered = ids
        lo, hi = int(ordered[0]), int(ordered[-1])
        if self._first < 0 and not self._sparse:
            self._first = lo
        first, size = self._first, len(self._length)
        if first < 0 or lo < first or hi - first > size + DENSE_MAX_GAP:
            self._put_each(entry_ids, base_high, spans)
            return
        top = hi - first + 1
        if top > size:
            self._grow(top - size)
        sp = np.asarray(spans, dtype=HIGH_DTYPE)
        lengths = (sp & HIGH_DTYPE(LENGTH_MASK)).astype(LENGTH_DTYPE)
        if not bool(np.all(lengths)):
            raise ValueError("a location's record length is never 0")
        slots = ids - first
        length_view = np.frombuffer(self._length, dtype=LENGTH_DTYPE)
        high_view = np.frombuffer(self._high, dtype=HIGH_DTYPE)
        self._count += int(np.count_nonzero(length_view[slots] == 0))
        high_view[slots] = HIGH_DTYPE(base_high) + (sp >> HIGH_DTYPE(OFFSET_SHIFT))
        length_view[slots] = lengths
        del length_view, high_view  # release the buffers: the arrays may grow again
        if self._sparse:
            for entry_id in ids.tolist():
                self._sparse.pop(entry_id, None)

    def _put_each(self, entry_ids: Sequence[int] | np.ndarray, base_high: int,
                  spans: Sequence[int] | np.ndarray) -> None:
        """:meth:`put_batch` one entry at a time (Python ints: a location needs more than
        64 bits)."""
        if isinstance(entry_ids, np.ndarray):
            entry_ids = entry_ids.tolist()
        if isinstance(spans, np.ndarray):
            spans = spans.tolist()
        for entry_id, span in zip(entry_ids, spans, strict=True):
            self[entry_id] = join_location(base_high + high_of(span), length_of(span))

    def items(self) -> list[tuple[int, int]]:
        first, high, lengths = self._first, self._high, self._length
        out = [((first + k), (high[k] << OFFSET_SHIFT) | ln)
               for k, ln in enumerate(lengths) if ln]
        out.extend(self._sparse.items())
        return out

    def ids_between(self, first: int, last: int) -> list[int]:
        """The ids present in ``first..last``, ascending; the cost follows the stored ids
        in that range, not the width of the range (a request for 0..2**63 is cheap)."""
        dense: list[int] = []
        if self._first >= 0:
            lengths, base = self._length, self._first
            lo, hi = max(first - base, 0), min(last - base, len(lengths) - 1)
            dense = [base + k for k in range(lo, hi + 1) if lengths[k]]
        sparse = sorted(e for e in self._sparse if first <= e <= last)
        return list(heapq.merge(dense, sparse)) if sparse else dense

    def keys(self) -> list[int]:
        first = self._first
        return [first + k for k, ln in enumerate(self._length) if ln] + list(self._sparse)

    def values(self) -> list[int]:
        high = self._high
        return [(high[k] << OFFSET_SHIFT) | ln for k, ln in enumerate(self._length) if ln] + \
            list(self._sparse.values())

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.keys())

    def __eq__(self, other: object) -> bool:
        """Equal to another index or a dict with the same ids and locations."""
        if isinstance(other, EntryIndex):
            other = dict(other.items())
        return isinstance(other, dict) and dict(self.items()) == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"EntryIndex({dict(self.items())!r})"

    def copy(self) -> EntryIndex:
        """An independent copy (the arrays copied whole, no per-entry work)."""
        other = EntryIndex()
        other._first, other._count = self._first, self._count
        other._high = array(HIGH_TYPECODE, self._high)
        other._length = array(LENGTH_TYPECODE, self._length)
        other._sparse = dict(self._sparse)
        return other

    def columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(entry ids int64, high column, record lengths)`` of every entry (the columns of
        :mod:`bookie_server.location`), in the order of :meth:`items`, built without a
        Python object per entry (a full checkpoint of millions of entries)."""
        lengths = np.frombuffer(self._length, dtype=LENGTH_DTYPE)
        slots = np.flatnonzero(lengths)
        ids = slots + self._first
        highs = np.frombuffer(self._high, dtype=HIGH_DTYPE)[slots]
        lens = lengths[slots]
        if self._sparse:
            extra = list(self._sparse.items())
            ids = np.concatenate([ids, np.array([e for e, _ in extra], dtype=np.int64)])
            highs = np.concatenate([highs, np.array([high_of(loc) for _, loc in extra],
                                                    dtype=HIGH_DTYPE)])
            lens = np.concatenate([lens, np.array([length_of(loc) for _, loc in extra],
                                                  dtype=LENGTH_DTYPE)])
        return ids.astype(np.int64, copy=False), highs, lens

    def get_many(self, entry_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The high column and record length of each of ``entry_ids`` (int64), as arrays
        (length 0: not here): a read's lookups in numpy, not one :meth:`get` per id."""
        n = len(entry_ids)
        highs = np.zeros(n, dtype=HIGH_DTYPE)
        lens = np.zeros(n, dtype=LENGTH_DTYPE)
        size = len(self._length)
        if self._first >= 0 and size:
            slots = entry_ids - self._first
            inside = (slots >= 0) & (slots < size)
            at = slots[inside]
            length_view = np.frombuffer(self._length, dtype=LENGTH_DTYPE)
            high_view = np.frombuffer(self._high, dtype=HIGH_DTYPE)
            lens[inside] = length_view[at]
            highs[inside] = high_view[at]
            del length_view, high_view  # release the buffers: the arrays may grow again
        if self._sparse:
            get = self._sparse.get
            for i in np.flatnonzero(lens == 0).tolist():
                loc = get(int(entry_ids[i]))
                if loc is not None:
                    highs[i] = high_of(loc)
                    lens[i] = length_of(loc)
        return highs, lens

    def lookup(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(entry ids, high column, record lengths)`` of those of ``ids`` (int64) that
        are present, in their order (:meth:`get_many` without the absent ones): a checkpoint
        takes the locations of ~100k changed entries under the storage's state lock, so no
        Python object per entry."""
        ids = np.asarray(ids, dtype=np.int64)
        n, start = len(ids), int(ids[0]) - self._first if len(ids) else 0
        if (n and self._first >= 0 and not self._sparse and start >= 0
                and int(ids[-1]) - int(ids[0]) == n - 1 and start + n <= len(self._length)):
            # one run of ids inside the dense part (a writer's dirty range): two slice copies,
            # not get_many's gathers (a checkpoint of ~300k ids held the state lock, and the
            # journal writer waiting on it, 10-30 ms: bench/profiles.md, "what stalls")
            lens = np.frombuffer(self._length, dtype=LENGTH_DTYPE)[start:start + n].copy()
            highs = np.frombuffer(self._high, dtype=HIGH_DTYPE)[start:start + n].copy()
        else:
            highs, lens = self.get_many(ids)
        keep = lens != 0
        if bool(keep.all()):
            return ids, highs, lens
        return ids[keep], highs[keep], lens[keep]

    def extent(self) -> tuple[int, dict[int, int]]:
        """``(slots in the dense part, a copy of the sparse part)``: what a full checkpoint
        takes under the state lock before it reads the dense part in slices
        (:meth:`dense_columns`). The dense part only grows at its end, and an id moves from
        the sparse part into it only at a slot past the dense part's end, so every entry
        present now is either in a slot below that count or in the copy."""
        return len(self._length), dict(self._sparse)

    def dense_columns(self, lo: int, hi: int, last: int
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`columns` of the dense slots ``lo..hi-1`` whose ids are at most ``last``
        (one slice of a full checkpoint, taken under the state lock)."""
        if self._first < 0:
            empty = np.empty(0, dtype=np.int64)
            return empty, empty.astype(HIGH_DTYPE), empty.astype(LENGTH_DTYPE)
        hi = max(lo, min(hi, len(self._length), last - self._first + 1))
        lengths = np.frombuffer(self._length, dtype=LENGTH_DTYPE)[lo:hi]
        slots = np.flatnonzero(lengths)
        highs = np.frombuffer(self._high, dtype=HIGH_DTYPE)[lo:hi][slots]  # copies
        out = (slots + (self._first + lo), highs, lengths[slots])
        del lengths  # release the buffer: the arrays may grow again
        return out

    def nbytes(self) -> int:
        """Bytes held by the arrays (the dict's share not counted)."""
        return self._high.itemsize * len(self._high) + self._length.itemsize * len(self._length)


class LedgerState:
    """What a bookie knows about one ledger.

    Fields set when a request is accepted (under the storage's submit lock): ``master_key``
    (set by the first add, fence or explicit LAC; later requests must match) and ``fenced``
    (after it, plain adds are refused). Fields set when a journaled change is applied:
    ``lac`` (max of every lac received), ``last_entry`` (highest entry id stored),
    ``index``, ``fence_synced`` (a fence record is durable), ``deleted`` and ``dirty``
    (the entry ids whose location changed since the last checkpoint, as ``[first, last]``
    ranges: :meth:`mark_dirty`; a range may cover ids that are not stored, which a
    checkpoint skips).
    """

    __slots__ = (
        "ledger_id",
        "master_key",
        "fenced",
        "fence_synced",
        "lac",
        "last_entry",
        "index",
        "dirty",
        "deleted",
    )

    def __init__(self, ledger_id: int, master_key: bytes, *, fenced: bool = False) -> None:
        self.ledger_id = ledger_id
        self.master_key = master_key
        self.fenced = fenced
        self.fence_synced = False
        self.lac = -1
        self.last_entry = -1
        self.index = EntryIndex()
        self.dirty: list[list[int]] = []
        self.deleted = False

    def mark_dirty(self, first: int, last: int) -> None:
        """Entries ``first..last`` changed location: the next checkpoint records them. A
        writer's batches come in order, so a range usually extends the previous one: the
        list stays a few ranges long whatever the number of entries."""
        dirty = self.dirty
        if dirty:
            prev = dirty[-1]
            if prev[0] <= first <= prev[1] + 1:
                if last > prev[1]:
                    prev[1] = last
                return
        dirty.append([first, last])

    def take_dirty(self) -> np.ndarray:
        """The dirty entry ids (ascending, each once) as int64, and clear them."""
        return dirty_ids(self.take_dirty_ranges())

    def take_dirty_ranges(self) -> list[list[int]]:
        """The dirty ranges as marked, and clear them (O(1): what a checkpoint does under
        the state lock; :func:`dirty_ids` makes the ids outside it)."""
        ranges, self.dirty = self.dirty, []
        return ranges

    def __repr__(self) -> str:
        return (
            f"LedgerState({self.ledger_id}, lac={self.lac}, last_entry={self.last_entry}, "
            f"fenced={self.fenced}, entries={len(self.index)})"
        )


def dirty_ids(ranges: list[list[int]], upto: int | None = None) -> np.ndarray:
    """The entry ids of dirty ranges (:meth:`LedgerState.mark_dirty`), ascending, each
    once, as int64; with ``upto``, only those at most ``upto``."""
    if not ranges:
        return np.empty(0, dtype=np.int64)
    ranges = sorted(ranges)
    merged = [ranges[0][:]]
    for first, last in ranges[1:]:
        top = merged[-1]
        if first <= top[1] + 1:
            top[1] = max(top[1], last)
        else:
            merged.append([first, last])
    if upto is not None:
        merged = [[a, min(b, upto)] for a, b in merged if a <= upto]
        if not merged:
            return np.empty(0, dtype=np.int64)
    return np.concatenate([np.arange(a, b + 1, dtype=np.int64) for a, b in merged])


@dataclass(slots=True)
class LedgerSnapshot:
    """A ledger's state and some of its locations, as one checkpoint batch records them."""

    ledger_id: int
    master_key: bytes
    fenced: bool
    lac: int
    last_entry: int
    entry_ids: list[int] = field(default_factory=list)
    locations: list[int] = field(default_factory=list)
    #: Every entry at once (a full snapshot): a copy of the ledger's index, 12 bytes per
    #: entry, encoded when written; when set, ``entry_ids`` and ``locations`` are not used.
    index: EntryIndex | None = None
    #: Some entries as columns (``EntryIndex.lookup``: ids, high, lengths), the
    #: incremental checkpoint's form; when set, ``entry_ids`` and ``locations`` are not used.
    columns: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    #: The same as pieces, one per slice a checkpoint read under the state lock
    #: (:data:`CHECKPOINT_SLICE` entries at most each, ascending within a piece); when
    #: set, ``entry_ids`` and ``locations`` are not used.
    pieces: list[tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None

    @property
    def count(self) -> int:
        if self.index is not None:
            return len(self.index)
        if self.columns is not None:
            return len(self.columns[0])
        if self.pieces is not None:
            return sum(len(piece[0]) for piece in self.pieces)
        return len(self.entry_ids)

    def column_pieces(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]] | None:
        """Its locations as column triples (None: it has them as lists)."""
        if self.index is not None:
            return [self.index.columns()]
        if self.columns is not None:
            return [self.columns]
        return self.pieces

    @classmethod
    def whole(cls, state: LedgerState) -> LedgerSnapshot:
        """The ledger's state and every location it holds (for a full snapshot): the
        arrays are copied (a memcpy, under the caller's lock), encoded later."""
        return cls(state.ledger_id, state.master_key, state.fenced, state.lac,
                   state.last_entry, index=state.index.copy())

    @classmethod
    def changed(cls, state: LedgerState) -> LedgerSnapshot:
        """The ledger's state and the locations of its dirty entries, which it takes
        (:meth:`LedgerState.take_dirty`): vectorized, for the caller's lock."""
        return cls(state.ledger_id, state.master_key, state.fenced, state.lac,
                   state.last_entry, columns=state.index.lookup(state.take_dirty()))

    @classmethod
    def of(cls, state: LedgerState, entry_ids: list[int], locations: list[int]) -> LedgerSnapshot:
        return cls(
            state.ledger_id,
            state.master_key,
            state.fenced,
            state.lac,
            state.last_entry,
            entry_ids,
            locations,
        )


def _little_endian(values: array) -> bytes:
    if sys.byteorder != "little":
        values.byteswap()
    return values.tobytes()


def _read_array(typecode: str, data: memoryview, offset: int, count: int) -> array:
    values = array(typecode)
    values.frombytes(data[offset : offset + count * values.itemsize])
    if sys.byteorder != "little":
        values.byteswap()
    return values


def batch_body_parts(
    position: tuple[int, int],
    deleted: Iterable[int],
    ledgers: Iterable[LedgerSnapshot],
    *,
    full: bool = False,
    tombstone_floor: int = -1,
) -> Iterator[bytes]:
    """The body of one checkpoint batch, piece by piece (a full snapshot of millions of
    entries is written as it is encoded, one ledger at a time, never held whole)."""
    deleted = list(deleted)
    ledgers = list(ledgers)
    flags = (FLAG_FULL if full else 0) | (FLAG_TOMBSTONE_FLOOR if tombstone_floor >= 0 else 0)
    yield BATCH_START.pack(flags, position[0], position[1], len(deleted))
    yield _little_endian(array("q", deleted))
    if tombstone_floor >= 0:
        yield TOMBSTONE_FLOOR.pack(tombstone_floor)
    yield COUNT.pack(len(ledgers))
    for snap in ledgers:
        yield LEDGER_RECORD.pack(
            snap.ledger_id,
            FLAG_FENCED if snap.fenced else 0,
            snap.lac,
            snap.last_entry,
            len(snap.master_key),
            snap.count,
        )
        yield snap.master_key
        pieces = snap.column_pieces()
        if pieces is not None:
            # column by column, each in slices: no part costs more than a slice's copy
            for column, dtype in ((0, "<i8"), (1, HIGH_LE), (2, LENGTH_LE)):
                for piece in pieces:
                    values = piece[column]
                    for a in range(0, len(values), CHECKPOINT_SLICE):
                        yield values[a:a + CHECKPOINT_SLICE].astype(dtype, copy=False).tobytes()
        elif snap.locations:
            locs = snap.locations
            yield _little_endian(array("q", snap.entry_ids))
            yield _little_endian(array(HIGH_TYPECODE, [high_of(loc) for loc in locs]))
            yield _little_endian(array(LENGTH_TYPECODE, [length_of(loc) for loc in locs]))


def write_batch_at(fd: int, offset: int, parts: Iterable[bytes],
                   between: Callable[[], None] | None = None) -> int:
    """Write one checkpoint batch whose body is ``parts`` at ``offset`` of ``fd``, body
    first and its header (CRC and length) last, holding one part at a time; returns the
    batch's size. Not synced, but written back as it goes (one chunk at a time: a full
    snapshot never queues tens of MB in front of the journal's syncs). ``between`` runs
    after each part (the checkpoint lets the journal writer in there). A crash before
    the header is written leaves no batch; one before the body reached the disk leaves a
    header whose CRC fails: either way the load stops before it."""
    crc = 0
    out = PacedWriter(fd, offset + BATCH_HEADER.size)  # a full snapshot: tens of MB
    pending: list[bytes] = []  # small parts (a ledger's header) go out together
    held = 0
    for part in parts:
        crc = crc32c.crc32c(part, value=crc)
        pending.append(part)
        held += len(part)
        if held >= WRITE_PIECE or len(pending) >= 512:
            out.write(pending)
            pending, held = [], 0
        if between is not None:
            between()
    if pending:
        out.write(pending)
    out.finish()
    pos = out.offset
    body_len = pos - offset - BATCH_HEADER.size
    os.pwrite(fd, BATCH_HEADER.pack(BATCH_MAGIC, crc, body_len), offset)
    return pos - offset


def apply_batch(body: memoryview, ledgers: dict[int, LedgerState],
                deleted: DeletedLedgers | None = None) -> tuple[int, int]:
    """Apply one checkpoint batch body to ``ledgers`` (and its tombstones to ``deleted``);
    returns its journal position."""
    flags, seq, offset, n_deleted = BATCH_START.unpack_from(body, 0)
    pos = BATCH_START.size
    if flags & FLAG_FULL:
        ledgers.clear()
        if deleted is not None:
            deleted.clear()
    for ledger_id in _read_array("q", body, pos, n_deleted):
        ledgers.pop(ledger_id, None)
        if deleted is not None:
            deleted.add(ledger_id)
    pos += 8 * n_deleted
    if flags & FLAG_TOMBSTONE_FLOOR:
        (floor,) = TOMBSTONE_FLOOR.unpack_from(body, pos)
        pos += TOMBSTONE_FLOOR.size
        if deleted is not None:
            deleted.raise_floor(floor)
    (n_ledgers,) = COUNT.unpack_from(body, pos)
    pos += COUNT.size
    for _ in range(n_ledgers):
        ledger_id, lflags, lac, last_entry, key_len, n = LEDGER_RECORD.unpack_from(body, pos)
        pos += LEDGER_RECORD.size
        key = bytes(body[pos : pos + key_len])
        pos += key_len
        state = ledgers.get(ledger_id)
        if state is None:
            state = ledgers[ledger_id] = LedgerState(ledger_id, key)
        state.master_key = key
        state.fenced = state.fence_synced = bool(lflags & FLAG_FENCED)
        state.lac = lac
        state.last_entry = last_entry
        if n:
            entry_ids = _read_array("q", body, pos, n)
            pos += 8 * n
            highs = _read_array(HIGH_TYPECODE, body, pos, n)
            pos += 8 * n
            lengths = _read_array(LENGTH_TYPECODE, body, pos, n)
            pos += 4 * n
            state.index.update(
                zip(
                    entry_ids,
                    [(h << OFFSET_SHIFT) | ln for h, ln in zip(highs, lengths, strict=True)],
                    strict=True,
                )
            )  # a ledger at a time: transient Python ints for one ledger's entries
    if pos != len(body):
        raise ValueError(f"checkpoint batch has {len(body) - pos} stray bytes")
    return seq, offset


class IndexStore:
    """The durable home of the index and the ledger states (see the module docstring).

    Not thread-safe: the storage calls it from one checkpoint at a time.
    """

    def __init__(self, directory: Path, *, min_rewrite_bytes: int = 8 << 20) -> None:
        self._dir = Path(directory)
        self._min_rewrite = min_rewrite_bytes
        self._generation = 0
        self._fd: int | None = None
        self._size = 0  # bytes in the current file
        self._full_size = 0  # bytes of the last full snapshot

    def _path(self, generation: int) -> Path:
        return self._dir / f"{INDEX_PREFIX}{generation:08x}{INDEX_SUFFIX}"

    def load(self, deleted: DeletedLedgers | None = None
             ) -> tuple[dict[int, LedgerState], tuple[int, int] | None]:
        """Read the newest generation: every ledger state and the journal position of the
        last durable checkpoint (None when there was none), and the tombstones into
        ``deleted`` when given. A torn tail is cut off."""
        self._dir.mkdir(parents=True, exist_ok=True)
        generations: list[int] = []
        for entry in os.scandir(self._dir):
            name = entry.name
            if not name.startswith(INDEX_PREFIX):
                continue
            if name.endswith(".tmp"):
                os.unlink(entry.path)
            elif name.endswith(INDEX_SUFFIX):
                try:
                    generations.append(int(name[len(INDEX_PREFIX) : -len(INDEX_SUFFIX)], 16))
                except ValueError:
                    continue
        ledgers: dict[int, LedgerState] = {}
        position: tuple[int, int] | None = None
        if not generations:
            return ledgers, position
        generations.sort()
        for old in generations[:-1]:
            os.unlink(self._path(old))
        self._generation = generations[-1]
        path = self._path(self._generation)
        data = memoryview(path.read_bytes())
        pos = 0
        first = True
        while pos + BATCH_HEADER.size <= len(data):
            magic, crc, length = BATCH_HEADER.unpack_from(data, pos)
            end = pos + BATCH_HEADER.size + length
            if magic != BATCH_MAGIC or end > len(data):
                break
            body = data[pos + BATCH_HEADER.size : end]
            if crc32c.crc32c(body) != crc:
                break
            position = apply_batch(body, ledgers, deleted)
            if first:
                self._full_size = end
                first = False
            pos = end
        self._fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        if pos != len(data):
            os.ftruncate(self._fd, pos)
            os.fsync(self._fd)
        self._size = pos
        return ledgers, position

    @property
    def wants_rewrite(self) -> bool:
        """True when the batches appended since the last full snapshot outweigh it."""
        appended = self._size - self._full_size
        return self._fd is None or appended > max(self._min_rewrite, self._full_size)

    def append(
        self,
        position: tuple[int, int],
        deleted: Iterable[int],
        ledgers: Iterable[LedgerSnapshot],
        tombstone_floor: int = -1,
        between: Callable[[], None] | None = None,
    ) -> None:
        """Durably append one incremental checkpoint batch, encoded and written a slice at
        a time (``between`` runs after each: :func:`write_batch_at`)."""
        if self._fd is None:
            self.rewrite(position, ())
        assert self._fd is not None
        parts = batch_body_parts(position, deleted, ledgers, tombstone_floor=tombstone_floor)
        size = write_batch_at(self._fd, self._size, parts, between)
        os.fdatasync(self._fd)
        self._size += size

    def rewrite(self, position: tuple[int, int], ledgers: Iterable[LedgerSnapshot],
                tombstones: Iterable[int] = (), tombstone_floor: int = -1,
                between: Callable[[], None] | None = None) -> None:
        """Durably replace the file with one full snapshot of every ledger and tombstone
        (written a slice at a time, ``between`` after each)."""
        parts = batch_body_parts(position, tombstones, ledgers, full=True,
                                 tombstone_floor=tombstone_floor)
        generation = self._generation + 1
        path = self._path(generation)
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            size = write_batch_at(fd, 0, parts, between)
            os.fsync(fd)
            os.rename(tmp, path)
            fsync_directory(self._dir)
        except BaseException:
            os.close(fd)
            raise
        old_fd, old_generation = self._fd, self._generation
        self._fd, self._generation = fd, generation
        self._size = self._full_size = size
        if old_fd is not None:
            os.close(old_fd)
            os.unlink(self._path(old_generation))

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
