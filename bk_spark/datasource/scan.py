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

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from bk_spark.core.client import BookKeeper
from bk_spark.core.reader import ReadHandle
from bk_spark.datasource import connections
from bk_spark.datasource.filters import Constraints
from bk_spark.datasource.planning import ScanPartition, Slice, timestamp_bounds_us
from bk_spark.errors import (
    BKTimeoutError,
    BookieUnavailableError,
    LogNotFoundError,
    LogTruncatedError,
    NoSuchEntryError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
)
from bk_spark.io.entry_batches import arrow_batches, constant_column, raw_batches
from bk_spark.log import open_log_view
from bk_spark.protocol import offload_rules
from bk_spark.security import ClientSecurity

log = logging.getLogger(__name__)

#: What a read with metadata older than an ensemble change fails with (entries moved to a
#: replacement bookie; the replaced one gone): the task reads the metadata again. Other
#: errors (a wrong password, a refused request) would only fail again, and are raised.
_STALE_ENSEMBLE = (NoSuchEntryError, BookieUnavailableError, NotEnoughBookiesError,
                   BKTimeoutError)


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
                # the planner found the slice readable: no LAC read again, and a stream's
                # planner gives the open ledger's metadata too (issue 28)
                rh = bk.open_ledger(s.ledger_id, spec.password, recovery=False,
                                    confirmed=s.last_entry, metadata=s.metadata)
                try:
                    for batch in _ledger_rows(spec, s, rh):
                        yield batch
                        done = _last_entry(batch, done)
                except _STALE_ENSEMBLE as exc:
                    if s.metadata is None or done == -2:
                        raise
                    # the planner's metadata may predate an ensemble change: read it and
                    # go on from the first entry not yielded
                    log.debug("ledger %d: read with the planner's metadata failed (%s); "
                              "reading it again", s.ledger_id, exc)
                    s = replace(s, first_entry=done + 1, metadata=None)
                    rh = bk.open_ledger(s.ledger_id, spec.password, recovery=False,
                                        confirmed=s.last_entry)
                    for batch in _ledger_rows(spec, s, rh):
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


def _ledger_rows(spec: ScanSpec, s: Slice, rh: ReadHandle) -> Iterator[pa.RecordBatch]:
    return _arrow_rows(spec, s, rh) if spec.entry_format == "arrow" else _raw_rows(spec, s, rh)


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
    schema (a widened nullability) put on it; no per-row Python. Counted as one read
    served from Parquet, of the entries it gave (:func:`parquet_read_served`, as the log
    reader counts its reads of a file)."""
    from bk_spark.io.offload_files import read_batches
    from bk_spark.io.parquet_reads import parquet_read_served

    assert s.parquet is not None
    c = spec.constraints
    ts_lo, ts_hi = timestamp_bounds_us(c)
    exact = c.entry_ids.only is not None or c.timestamps_us.only is not None
    names = [f.name for f in spec.schema if f.name != "log" or spec.entry_format == "arrow"
             and not spec.include_positions]
    read = names + [n for n in ("entry_id", "timestamp")
                    if (exact or n == "entry_id") and n not in names]
    served, last_id = 0, None  # entries given (an arrow entry's rows count once)
    try:
        for b in read_batches(s.parquet, s.first_entry, s.last_entry, ts_lo, ts_hi,
                              columns=read, row_groups=s.row_groups):
            ids = b.column("entry_id").to_numpy()
            if exact:
                ts_ms = b.column("timestamp").cast(pa.int64()).to_numpy() // 1000
                keep = c.entry_mask(ids, ts_ms)
                b, ids = b.filter(pa.array(keep)), ids[keep]
            if b.num_rows == 0:
                continue
            served += int((ids[1:] != ids[:-1]).sum()) + int(ids[0] != last_id)
            last_id = ids[-1]
            n = b.num_rows
            cols = []
            for f in spec.schema:
                if f.name == "log" and (spec.include_positions or spec.entry_format == "raw"):
                    cols.append(constant_column(s.log, n))
                    continue
                i = b.schema.get_field_index(f.name)
                col = b.column(i) if i >= 0 else pa.nulls(n, f.type)
                cols.append(col if col.type.equals(f.type) else col.cast(f.type))
            yield pa.RecordBatch.from_arrays(cols, schema=spec.schema)
    finally:  # every read of a file counted, as the log reader counts its reads
        parquet_read_served(served)


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


def _filter(spec: ScanSpec) -> Constraints | None:
    """The accepted filters a ledger's entries are checked against (None: every entry of
    the planned range matches)."""
    c = spec.constraints
    return None if c.entry_ids.only is None and c.timestamps_us.unbounded else c


def _raw_rows(spec: ScanSpec, s: Slice, rh: ReadHandle) -> Iterator[pa.RecordBatch]:
    yield from raw_batches(rh, s.log, s.ledger_id, s.first_entry, s.last_entry, spec.schema,
                           framed=s.framed, entry_filter=_filter(spec))


def _arrow_rows(spec: ScanSpec, s: Slice, rh: ReadHandle) -> Iterator[pa.RecordBatch]:
    assert spec.stored_schema is not None
    yield from arrow_batches(rh, s.log, s.ledger_id, s.first_entry, s.last_entry,
                             spec.schema, spec.stored_schema,
                             include_positions=spec.include_positions, framed=s.framed,
                             entry_filter=_filter(spec))
