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
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from bk_spark.core.reader import ReadHandle
from bk_spark.datasource import connections
from bk_spark.datasource.filters import Constraints
from bk_spark.datasource.formats import conform, unpack_arrow
from bk_spark.datasource.planning import ScanPartition, Slice
from bk_spark.errors import LogFormatError, LogTruncatedError, NoSuchLedgerError
from bk_spark.protocol.log_format import bisect_timestamp, decode_entry, entry_timestamp
from bk_spark.security import ClientSecurity

log = logging.getLogger(__name__)

#: Rows per record batch of a raw read.
RAW_BATCH_ROWS = 8192

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
        try:
            rh = bk.open_ledger(s.ledger_id, spec.password, recovery=False)
            if spec.entry_format == "arrow":
                yield from _arrow_rows(spec, s, rh)
            else:
                yield from _raw_rows(spec, s, rh)
        except NoSuchLedgerError:
            what = (f"ledger {s.ledger_id}" + (f" of log {s.log!r}" if s.log else "") +
                    f" (entries {s.first_entry}..{s.last_entry})")
            if spec.fail_on_data_loss:
                raise LogTruncatedError(
                    f"{what} was deleted (truncated) before it could be read: data loss. "
                    f"Set option failOnDataLoss=false to skip lost data.") from None
            log.warning("%s was deleted before it could be read; skipping it "
                        "(failOnDataLoss=false)", what)


def _entries(spec: ScanSpec, s: Slice, rh: ReadHandle) -> Iterator[tuple[int, int | None,
                                                                          bytes | None]]:
    """``(entry_id, timestamp_ms, payload)`` of the slice's entries the constraints allow
    (``payload`` None: a null value)."""
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
    for e in rh.iter_entries(first, last):
        if s.framed:
            ts, payload = decode_entry(e.payload)
        else:
            ts, payload = None, e.payload
        if ts_hi is not None and ts is not None and ts > ts_hi:
            return
        if check and not c.allows_entry(e.entry_id, ts):
            continue
        yield e.entry_id, ts, payload


def _raw_rows(spec: ScanSpec, s: Slice, rh: ReadHandle) -> Iterator[pa.RecordBatch]:
    ids: list[int] = []
    stamps: list[int | None] = []
    values: list[bytes | None] = []

    def batch() -> pa.RecordBatch:
        n = len(ids)
        arrays = [  # RAW_SCHEMA: log, ledger_id, entry_id, value, timestamp
            pa.array([s.log] * n, pa.string()),
            pa.array([s.ledger_id] * n, pa.int64()),
            pa.array(ids, pa.int64()),
            pa.array(values, pa.binary()),
            pa.array([None if t is None else t * 1000 for t in stamps], _TS),
        ]
        ids.clear()
        stamps.clear()
        values.clear()
        return pa.RecordBatch.from_arrays(arrays, schema=spec.schema)

    for entry_id, ts, payload in _entries(spec, s, rh):
        ids.append(entry_id)
        stamps.append(ts)
        values.append(payload)
        if len(ids) >= RAW_BATCH_ROWS:
            yield batch()
    if ids:
        yield batch()


def _arrow_rows(spec: ScanSpec, s: Slice, rh: ReadHandle) -> Iterator[pa.RecordBatch]:
    stored = spec.stored_schema
    assert stored is not None
    for entry_id, ts, payload in _entries(spec, s, rh):
        if payload is None:
            raise LogFormatError(
                f"entry {s.ledger_id}:{entry_id} of log {s.log!r} is a null value, which "
                f"an arrow log cannot hold (a null appended by the Python API's "
                f"LogWriter?): read that log with the Python API's LogReader")
        for b in unpack_arrow(payload):
            if b.num_rows == 0:
                continue
            b = conform(b, stored)
            if spec.include_positions:
                n = b.num_rows
                b = pa.RecordBatch.from_arrays(
                    list(b.columns) + [
                        pa.array([s.log] * n, pa.string()),
                        pa.array([s.ledger_id] * n, pa.int64()),
                        pa.array([entry_id] * n, pa.int64()),
                        pa.array([None if ts is None else ts * 1000] * n, _TS),
                    ], schema=spec.schema)
            yield b
