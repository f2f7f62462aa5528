"""A ledger's entries decoded into Arrow record batches (the source's read of raw and
arrow logs, and the offloader's copy of a ledger to Parquet: one decoder, so a Parquet file
holds exactly the rows the source reads).

Entries come from a read handle's batched fetches (:meth:`ReadHandle.iter_batches`, typed
here as :class:`EntryFetcher` so this adapter needs nothing above it) as columns over the
bookies' answers; their log frames are decoded in bulk
(:func:`~bk_spark.protocol.log_format.decode_frames`), raw values are cut out of each
answer with one numpy mask (:func:`binary_column`), and an arrow entry's record batches
are given as they are (:func:`unpack_arrow`, :func:`conform`): no per-row Python.
A filter (:class:`EntryFilter`, the data source's accepted filters) bounds the timestamps
read and masks entries; None reads every entry of the range.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pyarrow as pa

from bk_spark.errors import LogFormatError
from bk_spark.protocol.log_format import bisect_timestamp, decode_frames, entry_timestamp
from bk_spark.protocol.records import Records

_TS = pa.timestamp("us", tz="UTC")


class FetchedColumns(Protocol):
    """One batched fetch (:class:`bk_spark.core.reader.FetchedEntries`): entry
    ``entry_ids[i]`` is record ``row_of[i]`` of answer ``pieces[piece_of[i]]``."""

    pieces: list[Records]
    piece_of: np.ndarray
    row_of: np.ndarray
    entry_ids: np.ndarray

    def __len__(self) -> int: ...


class _Payload(Protocol):
    payload: bytes


class EntryFetcher(Protocol):
    """What the decoder reads with (:class:`bk_spark.core.reader.ReadHandle`)."""

    def iter_batches(self, first: int, last: int) -> Iterable[FetchedColumns]: ...

    def read_entries(self, first: int, last: int) -> Sequence[_Payload]: ...


class EntryFilter(Protocol):
    """Which entries a read keeps (:class:`bk_spark.datasource.filters.Constraints`)."""

    @property
    def timestamp_bounds_ms(self) -> tuple[int | None, int | None]: ...

    def entry_mask(self, entry_ids: np.ndarray, ts_ms: np.ndarray | None) -> np.ndarray: ...


@dataclass(frozen=True, eq=False)
class EntryColumns:
    """The entries of one fetch that a read keeps, in entry order, as columns: their ids,
    timestamps (None: unframed ledger) and null flags, and where each value lies: in
    ``buffers[buffer_of[i]]``, from ``value_starts[i]`` to ``value_ends[i]`` (the bookies'
    answers, not copied)."""

    entry_ids: np.ndarray
    timestamps_ms: np.ndarray | None
    nulls: np.ndarray
    buffers: list[bytes]
    buffer_of: np.ndarray
    value_starts: np.ndarray
    value_ends: np.ndarray

    def __len__(self) -> int:
        return len(self.entry_ids)


def entry_columns(got: FetchedColumns, framed: bool) -> EntryColumns:
    """A fetch's entries as :class:`EntryColumns`, their frames decoded answer by answer
    (:func:`~bk_spark.protocol.log_format.decode_frames`: no object per entry)."""
    pieces, k, i = got.pieces, got.piece_of, got.row_of
    if not framed:
        starts = [p.payload_starts for p in pieces]
        ts = None
        nulls = np.zeros(len(got), dtype=np.bool_)
    else:
        frames = [decode_frames(p.data, p.payload_starts, p.payload_ends) for p in pieces]
        starts = [f.value_starts for f in frames]
        ts = _pick([f.timestamps_ms for f in frames], k, i)
        nulls = _pick([f.nulls for f in frames], k, i)
    return EntryColumns(got.entry_ids, ts, nulls, [p.data for p in pieces], k,
                        _pick(starts, k, i), _pick([p.payload_ends for p in pieces], k, i))


def _pick(columns: list[np.ndarray], piece_of: np.ndarray, row_of: np.ndarray
          ) -> np.ndarray:
    """``columns[piece_of[j]][row_of[j]]`` for every j, in numpy."""
    if len(columns) == 1:
        return columns[0][row_of]
    base = np.cumsum([0] + [len(c) for c in columns[:-1]], dtype=np.int64)
    return np.concatenate(columns)[base[piece_of] + row_of]


def _keep(col: EntryColumns, mask: np.ndarray) -> EntryColumns:
    return EntryColumns(col.entry_ids[mask],
                        None if col.timestamps_ms is None else col.timestamps_ms[mask],
                        col.nulls[mask], col.buffers, col.buffer_of[mask],
                        col.value_starts[mask], col.value_ends[mask])


def _entries(rh: EntryFetcher, first: int, last: int, framed: bool,
             entry_filter: EntryFilter | None) -> Iterator[EntryColumns]:
    """Entries ``first..last`` the filter keeps, fetch by fetch (fetches overlap the
    caller's work: :meth:`ReadHandle.iter_batches`), decoded in bulk."""
    ts_lo, ts_hi = (entry_filter.timestamp_bounds_ms if framed and entry_filter is not None
                    else (None, None))
    if ts_lo is not None and first <= last:
        def ts_of(entry_id: int) -> int:
            return entry_timestamp(rh.read_entries(entry_id, entry_id)[0].payload)

        # Timestamps never decrease inside a ledger: seek the first entry at ts_lo.
        if ts_of(first) < ts_lo:
            first = bisect_timestamp(first, last, ts_of, ts_lo)
    if first > last:
        return
    for got in rh.iter_batches(first, last):
        col = entry_columns(got, framed)
        stop = False
        if ts_hi is not None and col.timestamps_ms is not None:
            past = col.timestamps_ms > ts_hi
            if bool(past.any()):  # timestamps never decrease: nothing after matches
                col, stop = _keep(col, np.arange(int(np.argmax(past)))), True
        if entry_filter is not None:
            col = _keep(col, entry_filter.entry_mask(col.entry_ids, col.timestamps_ms))
        if len(col):
            yield col
        if stop:
            return


def binary_column(data: bytes, starts: np.ndarray, ends: np.ndarray, nulls: np.ndarray
                  ) -> pa.Array:
    """A ``binary`` array of ``data[starts[i]:ends[i]]`` (null where ``nulls``), for
    ranges in ascending, disjoint order: the values cut out of ``data`` with one numpy
    mask (gap, value, gap, value, ..., gap) and handed to Arrow without another copy."""
    n = len(starts)
    if n == 0:
        return pa.array([], pa.binary())
    lengths = ends - starts
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    runs = np.empty(2 * n + 1, dtype=np.int64)
    runs[0] = starts[0]
    runs[1:-1:2] = lengths
    runs[2:-1:2] = starts[1:] - ends[:-1]
    runs[-1] = len(data) - ends[-1]
    parity = np.zeros(2 * n + 1, dtype=np.bool_)
    parity[1::2] = True
    keep = np.repeat(parity, runs)
    values = np.frombuffer(data, np.uint8)[keep]
    null_count = int(nulls.sum())
    validity = pa.py_buffer(np.packbits(~nulls, bitorder="little")) if null_count else None
    return pa.Array.from_buffers(pa.binary(), n, [validity, pa.py_buffer(offsets),
                                                  pa.py_buffer(values)], null_count)


def constant_column(value: str | None, n: int) -> pa.Array:
    """A ``string`` column holding ``value`` ``n`` times (all null for None)."""
    if value is None:
        return pa.nulls(n, pa.string())
    b = value.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(b)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets),
                                                  pa.py_buffer(b * n)])


def timestamp_column(ts_ms: np.ndarray | None, n: int) -> pa.Array:
    if ts_ms is None:
        return pa.nulls(n, _TS)
    return pa.Array.from_buffers(_TS, n, [None, pa.py_buffer(ts_ms * 1000)])


def raw_batches(rh: EntryFetcher, log: str | None, ledger_id: int, first: int, last: int,
                schema: pa.Schema, *, framed: bool = True,
                entry_filter: EntryFilter | None = None) -> Iterator[pa.RecordBatch]:
    """Entries ``first..last`` of a raw log's ledger as record batches of ``schema`` (the
    raw columns: log, ledger_id, entry_id, value, timestamp), one per fetch (at most
    ``FETCH_MAX_ENTRIES`` rows): the values are cut out of each answer in bulk
    (:func:`binary_column`) and put in entry order by Arrow's ``take``."""
    for col in _entries(rh, first, last, framed, entry_filter):
        n = len(col)
        parts, where = [], np.empty(n, dtype=np.int64)
        base = 0
        for k, data in enumerate(col.buffers):
            mine = np.flatnonzero(col.buffer_of == k)
            if not len(mine):
                continue
            ranked = mine[np.argsort(col.value_starts[mine], kind="stable")]
            parts.append(binary_column(data, col.value_starts[ranked], col.value_ends[ranked],
                                       col.nulls[ranked]))
            where[ranked] = base + np.arange(len(ranked), dtype=np.int64)
            base += len(ranked)
        values = parts[0] if len(parts) == 1 else pa.concat_arrays(parts)
        if bool(np.any(where != np.arange(n))):
            values = values.take(pa.array(where))
        arrays = [  # RAW_SCHEMA: log, ledger_id, entry_id, value, timestamp
            constant_column(log, n),
            pa.array(np.full(n, ledger_id, dtype=np.int64)),
            pa.array(col.entry_ids),
            values,
            timestamp_column(col.timestamps_ms, n),
        ]
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)


def arrow_batches(rh: EntryFetcher, log: str | None, ledger_id: int, first: int, last: int,
                  schema: pa.Schema, stored: pa.Schema, *, include_positions: bool,
                  framed: bool = True, entry_filter: EntryFilter | None = None
                  ) -> Iterator[pa.RecordBatch]:
    """Entries ``first..last`` of an arrow log's ledger: each entry's record batches as
    they are, given ``stored``'s exact types (:func:`conform`), with the position columns
    of ``schema`` added when ``include_positions``."""
    for col in _entries(rh, first, last, framed, entry_filter):
        views = [memoryview(b) for b in col.buffers]
        for i in range(len(col)):
            entry_id = int(col.entry_ids[i])
            if col.nulls[i]:
                raise LogFormatError(
                    f"entry {ledger_id}:{entry_id} of log {log!r} is a null value, which "
                    f"an arrow log cannot hold (a null appended by the Python API's "
                    f"LogWriter?): read that log with the Python API's LogReader")
            ts = None if col.timestamps_ms is None else int(col.timestamps_ms[i])
            payload = views[int(col.buffer_of[i])][int(col.value_starts[i]):
                                                  int(col.value_ends[i])]
            for b in unpack_arrow(payload):
                if b.num_rows == 0:
                    continue
                b = conform(b, stored)
                if include_positions:
                    n = b.num_rows
                    b = pa.RecordBatch.from_arrays(
                        list(b.columns) + [
                            constant_column(log, n),
                            pa.array(np.full(n, ledger_id, dtype=np.int64)),
                            pa.array(np.full(n, entry_id, dtype=np.int64)),
                            pa.nulls(n, _TS) if ts is None else
                            pa.array(np.full(n, ts * 1000, dtype=np.int64), _TS),
                        ], schema=schema)
                yield b


def ledger_batches(rh: EntryFetcher, log: str | None, ledger_id: int, first: int, last: int,
                   entry_format: str, schema: pa.Schema, stored: pa.Schema | None
                   ) -> Iterator[pa.RecordBatch]:
    """Entries ``first..last`` of a ledger as record batches of ``schema`` with the position
    columns, every entry kept (what the offloader copies to Parquet)."""
    if entry_format == "arrow":
        assert stored is not None
        yield from arrow_batches(rh, log, ledger_id, first, last, schema, stored,
                                 include_positions=True)
    else:
        yield from raw_batches(rh, log, ledger_id, first, last, schema)


def unpack_arrow(payload: bytes) -> list[pa.RecordBatch]:
    """The record batches of one arrow entry."""
    try:
        return list(pa.ipc.open_stream(pa.py_buffer(payload)))
    except pa.ArrowInvalid as exc:
        raise LogFormatError(f"an arrow log entry could not be decoded ({exc}): the log's "
                             f"format property says arrow but the entry is not") from None


def conform(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """``batch`` with exactly ``target``'s types and nullability (e.g. tz ``Etc/UTC`` ->
    ``UTC``, non-null fields -> nullable), as Spark checks the first batch it reads."""
    if batch.schema.equals(target):
        return batch
    try:
        return batch.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError):
        arrays = [col.cast(f.type) if not col.type.equals(f.type) else col
                  for col, f in zip(batch.columns, target, strict=True)]
        return pa.RecordBatch.from_arrays(arrays, schema=target)
