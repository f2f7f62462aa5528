"""Reading one input partition into Arrow record batches (runs in Spark's Python workers).

:func:`read_partition` is the whole of ``read()`` for batch and streaming reads: it keeps
no state between calls. It borrows the process's cached client
(:mod:`bk_spark.datasource.connections`), opens every ledger without fencing, reads the
planned entry ranges in batched fetches and yields ``pyarrow.RecordBatch`` es matching the
Spark schema exactly (Spark checks the first batch).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from bk_spark.core.client import BookKeeper
from bk_spark.core.reader import FetchedEntries, ReadHandle
from bk_spark.datasource import connections
from bk_spark.datasource.filters import Constraints
from bk_spark.datasource.formats import conform, unpack_arrow
from bk_spark.datasource.planning import ScanPartition, Slice, timestamp_bounds_us
from bk_spark.errors import (
    LogFormatError,
    LogNotFoundError,
    LogTruncatedError,
    NoSuchEntryError,
    NoSuchLedgerError,
)
from bk_spark.log import open_log_view
from bk_spark.protocol import offload_rules
from bk_spark.protocol.log_format import bisect_timestamp, decode_frames, entry_timestamp
from bk_spark.security import ClientSecurity

log = logging.getLogger(__name__)

_TS = pa.timestamp("us", tz="UTC")


@dataclass(frozen=True)
class ScanSpec:
    """Everything a task needs besides its partition (plain, picklable data)."""

    uri: str
    password: bytes = field(repr=False)
    security: ClientSecurity
    entry_format: str  # "raw" | "arrow"
    schema: pa.Schema  # what Spark expects, exactly
    stored_schema: pa.Schema | None  # arrow: the stored columns
    include_positions: bool
    constraints: Constraints
    fail_on_data_loss: bool = True


def read_partition(spec: ScanSpec, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """The rows of ``partition`` (an empty partition, ``InputPartition(None)``, has none)."""
    if not isinstance(partition, ScanPartition):
        return
    bk = connections.client(spec.uri, spec.security)
    for s in partition.slices:
        done = s.first_entry - 1  # the last entry yielded
        try:
            if s.parquet is not None:
                yield from _parquet_rows(spec, s)
                continue
            try:
                # the planner found the slice readable: no LAC read again (issue 28)
                rh = bk.open_ledger(s.ledger_id, spec.password, recovery=False,
                                    confirmed=s.last_entry)
                for batch in (_arrow_rows(spec, s, rh) if spec.entry_format == "arrow"
                              else _raw_rows(spec, s, rh)):
                    yield batch
                    done = _last_entry(batch, done)
            except (NoSuchLedgerError, NoSuchEntryError):
                # Offloaded and dropped from the bookies after the plan: the rest from
                # Parquet (the log still lists it); else a truncation, below.
                uri = _offloaded_now(bk, s)
                if uri is None or done == -2:
                    raise
                yield from _parquet_rows(spec, replace(s, first_entry=done + 1, parquet=uri))
        except FileNotFoundError:  # the Parquet file went with a truncation
            _lost(spec, s)
        except (NoSuchLedgerError, NoSuchEntryError) as exc:
            if isinstance(exc, NoSuchEntryError) and not _vanished(bk, s):
                raise  # entries missing from a ledger still in its log: not a truncation
            _lost(spec, s)


def _lost(spec: ScanSpec, s: Slice) -> None:
    """A slice whose ledger (or Parquet file) was truncated before it was read: data loss
    (``failOnDataLoss``), else skipped with a warning."""
    what = (f"ledger {s.ledger_id}" + (f" of log {s.log!r}" if s.log else "") +
            f" (entries {s.first_entry}..{s.last_entry})")
    if spec.fail_on_data_loss:
        raise LogTruncatedError(
            f"{what} was deleted (truncated) before it could be read: data loss. "
            f"Set option failOnDataLoss=false to skip lost data.") from None
    log.warning("%s was deleted before it could be read; skipping it "
                "(failOnDataLoss=false)", what)


def ledger_batches(rh: ReadHandle, s: Slice, entry_format: str, schema: pa.Schema,
                   stored: pa.Schema | None) -> Iterator[pa.RecordBatch]:
    """Entries ``s.first_entry..s.last_entry`` of an open ledger as record batches of
    ``schema`` with the position columns (the source's read of a raw or arrow log: packed
    fetches decoded in bulk, an arrow entry's rows as they are); the offloader copies a
    ledger to Parquet with it, so the file holds exactly the rows the source reads."""
    spec = ScanSpec(uri="", password=b"", security=ClientSecurity(),
                    entry_format=entry_format, schema=schema, stored_schema=stored,
                    include_positions=True, constraints=Constraints())
    yield from (_arrow_rows(spec, s, rh) if entry_format == "arrow" else _raw_rows(spec, s, rh))


def _last_entry(batch: pa.RecordBatch, done: int) -> int:
    """The last entry id of a batch with position columns (-2 when it has none: an arrow
    read without positions, whose ledger then cannot move to Parquet midway)."""
    i = batch.schema.get_field_index("entry_id")
    if i < 0:
        return -2  # rows were given and where they end is unknown
    if batch.num_rows == 0:
        return done
    return int(batch.column(i)[-1].as_py())


def _offloaded_now(bk: BookKeeper, s: Slice) -> str | None:
    """The Parquet file of ``s``'s ledger if its log lists it and reads it from Parquet
    now (the bookie copy dropped after the plan was made)."""
    if s.log is None:
        return None
    try:
        view = open_log_view(bk, s.log)
    except LogNotFoundError:
        return None
    if view.index_of_ledger(s.ledger_id) is None:
        return None
    state = offload_rules.states_of(view.md.properties).get(s.ledger_id)
    if offload_rules.read_from(state) is not offload_rules.Source.PARQUET:
        return None
    assert state is not None
    return offload_rules.offload_file(s.log, view.md.log_id, s.ledger_id, state)


def _parquet_rows(spec: ScanSpec, s: Slice) -> Iterator[pa.RecordBatch]:
    """The rows of ``s`` from its ledger's offloaded Parquet file, as the file's Arrow
    record batches (:func:`bk_spark.io.offload_files.read_batches`): its planned row
    groups only, the slice's entry range and the timestamp range pushed into the scan
    (statistics skip row groups, only the groups at the edges are trimmed), the columns
    of the read's schema only; ``IN`` lists of entry ids or timestamps applied as on the
    bookie path. Each batch goes out as it is, with ``log`` added and the log's current
    schema (a widened nullability) put on it; no per-row Python."""
    from bk_spark.io.offload_files import read_batches

    assert s.parquet is not None
    c = spec.constraints
    ts_lo, ts_hi = timestamp_bounds_us(c)
    exact = c.entry_ids.only is not None or c.timestamps_us.only is not None
    names = [f.name for f in spec.schema if f.name != "log" or spec.entry_format == "arrow"
             and not spec.include_positions]
    read = names + [n for n in ("entry_id", "timestamp") if exact and n not in names]
    for b in read_batches(s.parquet, s.first_entry, s.last_entry, ts_lo, ts_hi,
                          columns=read, row_groups=s.row_groups):
        if exact:
            ids = b.column("entry_id").to_numpy()
            ts_ms = b.column("timestamp").cast(pa.int64()).to_numpy() // 1000
            b = b.filter(pa.array(c.entry_mask(ids, ts_ms)))
            if b.num_rows == 0:
                continue
        n = b.num_rows
        cols = []
        for f in spec.schema:
            if f.name == "log" and (spec.include_positions or spec.entry_format == "raw"):
                cols.append(_constant(s.log, n))
                continue
            i = b.schema.get_field_index(f.name)
            col = b.column(i) if i >= 0 else pa.nulls(n, f.type)
            cols.append(col if col.type.equals(f.type) else col.cast(f.type))
        yield pa.RecordBatch.from_arrays(cols, schema=spec.schema)


def _vanished(bk: BookKeeper, s: Slice) -> bool:
    """Whether the ledger of ``s`` is gone: deleted, or no longer in its log (truncated or
    the log deleted; its ledgers are deleted after the change of the log, bookies first and
    metadata last, so a read in between finds no entries where the ledger still exists)."""
    try:
        bk.ledger_metadata(s.ledger_id)
    except NoSuchLedgerError:
        return True
    if s.log is None:
        return False
    try:
        view = open_log_view(bk, s.log)
    except LogNotFoundError:
        return True
    return view.md.deleting or view.index_of_ledger(s.ledger_id) is None


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


def _columns(got: FetchedEntries, framed: bool) -> EntryColumns:
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


def _entries(spec: ScanSpec, s: Slice, rh: ReadHandle) -> Iterator[EntryColumns]:
    """The slice's entries the constraints allow, fetch by fetch (fetches overlap the
    caller's work: :meth:`ReadHandle.iter_batches`), decoded in bulk."""
    c = spec.constraints
    first, last = s.first_entry, s.last_entry
    ts_lo, ts_hi = c.timestamp_bounds_ms if s.framed else (None, None)
    if ts_lo is not None and first <= last:
        def ts_of(entry_id: int) -> int:
            return entry_timestamp(rh.read_entries(entry_id, entry_id)[0].payload)

        # Timestamps never decrease inside a ledger: seek the first entry at ts_lo.
        if ts_of(first) < ts_lo:
            first = bisect_timestamp(first, last, ts_of, ts_lo)
    if first > last:
        return
    check = not (c.entry_ids.only is None and c.timestamps_us.unbounded)
    for got in rh.iter_batches(first, last):
        col = _columns(got, s.framed)
        stop = False
        if ts_hi is not None and col.timestamps_ms is not None:
            past = col.timestamps_ms > ts_hi
            if bool(past.any()):  # timestamps never decrease: nothing after matches
                col, stop = _keep(col, np.arange(int(np.argmax(past)))), True
        if check:
            col = _keep(col, c.entry_mask(col.entry_ids, col.timestamps_ms))
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


def _constant(value: str | None, n: int) -> pa.Array:
    """A ``string`` column holding ``value`` ``n`` times (all null for None)."""
    if value is None:
        return pa.nulls(n, pa.string())
    b = value.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(b)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets),
                                                  pa.py_buffer(b * n)])


def _timestamps(ts_ms: np.ndarray | None, n: int) -> pa.Array:
    if ts_ms is None:
        return pa.nulls(n, _TS)
    return pa.Array.from_buffers(_TS, n, [None, pa.py_buffer(ts_ms * 1000)])


def _raw_rows(spec: ScanSpec, s: Slice, rh: ReadHandle) -> Iterator[pa.RecordBatch]:
    """One record batch per fetch (at most ``FETCH_MAX_ENTRIES`` rows), built from the
    columns of :func:`_entries`: the values are cut out of each answer in bulk
    (:func:`binary_column`) and put in entry order by Arrow's ``take``."""
    for col in _entries(spec, s, rh):
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
            _constant(s.log, n),
            pa.array(np.full(n, s.ledger_id, dtype=np.int64)),
            pa.array(col.entry_ids),
            values,
            _timestamps(col.timestamps_ms, n),
        ]
        yield pa.RecordBatch.from_arrays(arrays, schema=spec.schema)


def _arrow_rows(spec: ScanSpec, s: Slice, rh: ReadHandle) -> Iterator[pa.RecordBatch]:
    stored = spec.stored_schema
    assert stored is not None
    for col in _entries(spec, s, rh):
        views = [memoryview(b) for b in col.buffers]
        for i in range(len(col)):
            entry_id = int(col.entry_ids[i])
            if col.nulls[i]:
                raise LogFormatError(
                    f"entry {s.ledger_id}:{entry_id} of log {s.log!r} is a null value, which "
                    f"an arrow log cannot hold (a null appended by the Python API's "
                    f"LogWriter?): read that log with the Python API's LogReader")
            ts = None if col.timestamps_ms is None else int(col.timestamps_ms[i])
            payload = views[int(col.buffer_of[i])][int(col.value_starts[i]):
                                                  int(col.value_ends[i])]
            for b in unpack_arrow(payload):
                if b.num_rows == 0:
                    continue
                b = conform(b, stored)
                if spec.include_positions:
                    n = b.num_rows
                    b = pa.RecordBatch.from_arrays(
                        list(b.columns) + [
                            _constant(s.log, n),
                            pa.array(np.full(n, s.ledger_id, dtype=np.int64)),
                            pa.array(np.full(n, entry_id, dtype=np.int64)),
                            pa.nulls(n, _TS) if ts is None else
                            pa.array(np.full(n, ts * 1000, dtype=np.int64), _TS),
                        ], schema=spec.schema)
                yield b
