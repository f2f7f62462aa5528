"""Batch writes and the streaming sink: one new ledger per task, one CAS per commit.

Exactly once, for ``df.write`` and for every micro-batch of a streaming query:

1. Each task writes its rows into a NEW ledger (not in the log's list yet; registered in
   :mod:`bk_spark.log.pending`), closes it and returns its id, last entry and
   timestamps in its :class:`LedgerWritten` commit message. A task with no rows creates
   no ledger.
2. The driver's ``commit`` adds all the batch's ledgers to the log, in partition order,
   together with the batch id, in ONE compare-and-swap:
   :func:`bk_spark.log.commit_ledgers`. Before its CAS it takes the log over with the
   seed's protocol (fence the last two ledgers of the list), so no earlier owner of the
   log (a :class:`~bk_spark.log.LogWriter`, a previous instance of the query) can
   append after it.
3. A batch id the sink already committed (a query restarted from its checkpoint replays
   its last batch with the same id, or a zombie instance commits late) commits nothing:
   its ledgers are deleted. Abort deletes the batch's ledgers.

The sink's identity (the key of its batch ids in the log's properties) is its
``checkpointLocation`` (or the ``sinkId`` option). A batch write commits without a batch
id. ``mode("overwrite")`` (and a streaming query in complete mode) replaces the log's
ledgers in the same CAS, atomically; the replaced ledgers are deleted after it.

A task's ledger is not bounded by a log writer's rolling limits (issue 31, decided so):
those limits are settings of a :class:`~bk_spark.log.LogWriter`, not of the log, so the sink
has none to apply; and what they protect is not at stake here. The ledger is closed before
it joins the log (no reader or recovery ever reads an open tail of it), batch reads cut
ledgers into entry ranges (:mod:`bk_spark.datasource.planning`), and its size is the
task's partition, which the user sets (``repartition``; a micro-batch's size with
``maxEntriesPerTrigger``/``maxBytesPerTrigger`` upstream). Truncation and retention drop
whole ledgers, so they go a task's ledger at a time.

The log's format is decided from the log (:mod:`bk_spark.datasource.options`, option
``entryFormat``) and recorded in the commit's CAS, with the DataFrame's schema for arrow.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from bk_spark.core.client import BookKeeper
from bk_spark.datasource import connections
from bk_spark.datasource.formats import (
    FORMAT_PROPERTY,
    SCHEMA_PROPERTY,
    check_raw_schema,
    log_format,
    merge_schemas,
    pack_arrow,
    raw_values,
    schema_property,
    stored_schema,
)
from bk_spark.datasource.options import WriteOptions
from bk_spark.errors import InvalidConfigError, LogNotFoundError, LogOwnershipLostError
from bk_spark.log import (
    ClosedLedger,
    commit_ledgers,
    log_metadata,
    pending,
    unlisted_ledgers,
    write_closed_ledger,
)
from bk_spark.protocol.log_format import FRAME_HEADER_SIZE, LogMetadata

log = logging.getLogger(__name__)

#: Ledger custom metadata naming the write attempt that created a ledger.
LEDGER_ATTEMPT_KEY = "bk-spark.attempt"
#: Adds in flight per task before it waits for acknowledgements.
MAX_IN_FLIGHT_ENTRIES = 4096
MAX_IN_FLIGHT_BYTES = connections.ADDS_IN_FLIGHT_MAX_BYTES  # the client's bound too


@dataclass
class LedgerWritten(WriterCommitMessage):
    """What one task wrote: its closed ledger (None: no rows) and what is in it."""

    ledger_id: int | None
    last_entry_id: int = -1
    first_ts_ms: int = 0
    last_ts_ms: int = 0
    rows: int = 0
    entry_format: str = "arrow"


def sink_key(sink_id: str) -> str:
    """The key of a sink's batch ids in the log properties (bounded size)."""
    return "sink-" + hashlib.sha256(sink_id.encode()).hexdigest()[:20]


def _metadata(bk: BookKeeper, name: str) -> LogMetadata | None:
    try:
        return log_metadata(bk, name)
    except LogNotFoundError:
        return None


def decide_format(o: WriteOptions, md: LogMetadata | None) -> str:
    """The entry format of a write to a log with metadata ``md`` (None: no log yet)."""
    recorded = log_format(md.properties, md.end_index > 0) if md is not None else None
    if o.entry_format is None:
        return recorded or "arrow"
    if recorded is not None and recorded != o.entry_format:
        raise InvalidConfigError(
            f"bookkeeper data source option 'entryFormat': log {o.log!r} holds {recorded} "
            f"entries, not {o.entry_format}; write entryFormat={recorded} (or another log)")
    return o.entry_format


def check_schema(o: WriteOptions, fmt: str, schema: StructType, md: LogMetadata | None,
                 overwrite: bool) -> None:
    """Fail before writing if the DataFrame cannot go into the log."""
    if fmt == "raw":
        check_raw_schema(schema)
    elif md is not None and not overwrite and md.properties.get(SCHEMA_PROPERTY):
        merge_schemas(stored_schema(md.properties, o.log), schema, o.log)


def format_properties(o: WriteOptions, fmt: str, schema: StructType, overwrite: bool
                      ) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The properties change of a commit: record the format (and the schema, widened),
    refusing a log that changed format meanwhile."""
    def update(props: dict[str, Any]) -> dict[str, Any]:
        out = dict(props)
        recorded = props.get(FORMAT_PROPERTY)
        if recorded is not None and recorded != fmt and not overwrite:
            raise InvalidConfigError(
                f"bookkeeper data source option 'entryFormat': log {o.log!r} now holds "
                f"{recorded} entries, not {fmt}")
        out[FORMAT_PROPERTY] = fmt
        if fmt == "arrow":
            old = props.get(SCHEMA_PROPERTY)
            new = schema if overwrite or not old else \
                merge_schemas(stored_schema(props, o.log), schema, o.log)
            out[SCHEMA_PROPERTY] = schema_property(new)
        else:
            out.pop(SCHEMA_PROPERTY, None)
        return out

    return update


# ------------------------------------------------------------------------- tasks


def write_task(o: WriteOptions, attempt: str, txn_key: str | None,
               batches: Iterator[pa.RecordBatch]) -> LedgerWritten:
    """One task: rows -> entries of one new ledger, closed; returns its commit message."""
    bk = connections.client(o.uri, o.security)
    md = _metadata(bk, o.log)
    fmt = decide_format(o, md)
    ts_floor = md.max_known_ts_ms if md is not None else 0
    if fmt == "arrow":
        payloads: Iterator[bytes | None] = pack_arrow(
            batches, max_bytes=bk.config.max_entry_size - FRAME_HEADER_SIZE)
    else:
        payloads = (v for b in batches for v in raw_values(b))
    created: list[int] = []

    def register(ledger_id: int) -> None:
        created.append(ledger_id)
        pending.register(bk, o.log, ledger_id, attempt, txn_key)

    q = o.with_log_quorums(md.properties if md is not None else {})
    e, qw, qa = q.ensemble_size, q.write_quorum_size, q.ack_quorum_size
    try:
        written = write_closed_ledger(
            bk, o.log, payloads, ensemble_size=e, write_quorum_size=qw, ack_quorum_size=qa,
            password=o.password, ts_floor=ts_floor,
            custom_metadata={LEDGER_ATTEMPT_KEY: attempt}, on_created=register,
            max_in_flight_entries=MAX_IN_FLIGHT_ENTRIES,
            max_in_flight_bytes=MAX_IN_FLIGHT_BYTES)
    except BaseException:
        if created:
            pending.discard(bk, o.log, created, o.password)
        raise
    if written is None:
        return LedgerWritten(None, entry_format=fmt)
    c = written.ledger
    return LedgerWritten(c.ledger_id, c.last_entry_id, c.first_ts_ms, c.last_ts_ms,
                         written.entries, fmt)


# ------------------------------------------------------------------------- driver


def commit_batch(o: WriteOptions, attempt: str, schema: StructType, overwrite: bool,
                 messages: list[WriterCommitMessage | None], txn_key: str | None,
                 batch_id: int | None) -> bool:
    """Add the ledgers of ``messages`` to the log in one CAS (see the module docstring);
    False if ``batch_id`` was already committed (its ledgers are deleted)."""
    bk = connections.client(o.uri, o.security)
    written = [m for m in messages if isinstance(m, LedgerWritten) and m.ledger_id is not None]
    ids = [m.ledger_id for m in written if m.ledger_id is not None]
    claimed = pending.claim(bk, o.log, ids)
    if len(claimed) != len(ids):
        pending.discard(bk, o.log, ids, o.password)
        raise LogOwnershipLostError(
            f"log {o.log!r}: ledgers {sorted(set(ids) - set(claimed))} of this batch were "
            f"deleted by another instance of the same sink: this query instance is a "
            f"zombie, its batch {batch_id} is not committed")
    formats = {m.entry_format for m in messages if isinstance(m, LedgerWritten)}
    try:
        if len(formats) > 1:
            raise InvalidConfigError(f"log {o.log!r} changed entry format during the write")
        md = _metadata(bk, o.log)
        fmt = formats.pop() if formats else decide_format(o, None if overwrite else md)
        ledgers = [ClosedLedger(m.ledger_id, m.last_entry_id, m.first_ts_ms, m.last_ts_ms)
                   for m in written if m.ledger_id is not None]
        result = commit_ledgers(
            bk, o.log, ledgers, txn_key=txn_key, txn_id=batch_id,
            properties=format_properties(o, fmt, schema, overwrite), replace=overwrite,
            password=o.password)
    except BaseException:
        _discard_unlisted(bk, o.log, ids, o.password)
        raise
    if not result.committed:
        log.info("log %r: batch %s of this sink was already committed; deleting its %d "
                 "duplicate ledger(s)", o.log, batch_id, len(ids))
        pending.discard(bk, o.log, ids, o.password)
    pending.sweep(bk, o.log, attempt=attempt, txn_key=txn_key, password=o.password)
    return result.committed


def _discard_unlisted(bk: BookKeeper, name: str, ids: list[int], password: bytes) -> None:
    """After a failed commit: delete the ledgers the log does not list after all
    (:func:`~bk_spark.log.unlisted_ledgers`; unknown: keep them)."""
    pending.discard(bk, name, unlisted_ledgers(bk, name, ids) or [], password)


def abort_batch(o: WriteOptions, attempt: str, messages: list[WriterCommitMessage | None]
                ) -> None:
    bk = connections.client(o.uri, o.security)
    ids = [m.ledger_id for m in messages
           if isinstance(m, LedgerWritten) and m.ledger_id is not None]
    pending.discard(bk, o.log, ids, o.password)
    pending.sweep(bk, o.log, attempt=attempt, txn_key=None, password=o.password)


def _new_attempt() -> str:
    return uuid.uuid4().hex[:16]


class BookKeeperBatchWriter(DataSourceArrowWriter):
    """``df.write.format("bookkeeper").mode("append"|"overwrite")``."""

    def __init__(self, options: WriteOptions, schema: StructType, overwrite: bool) -> None:
        self.options = options
        self.schema = schema
        self.overwrite = overwrite
        self.attempt = _new_attempt()
        # Fail on the driver, before any task, if the rows cannot go into the log.
        md = _metadata(connections.client(options.uri, options.security), options.log)
        self.options = options = options.with_log_quorums(md.properties if md else {})
        fmt = decide_format(options, None if overwrite else md)
        check_schema(options, fmt, schema, md, overwrite)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> LedgerWritten:
        return write_task(self.options, self.attempt, None, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        commit_batch(self.options, self.attempt, self.schema, self.overwrite, messages,
                     None, None)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        abort_batch(self.options, self.attempt, messages)


class BookKeeperStreamWriter(DataSourceStreamArrowWriter):
    """The streaming sink: ``writeStream.format("bookkeeper")``, exactly once per batch.

    Spark creates one per micro-batch, so ``__init__`` does no I/O.
    """

    def __init__(self, options: WriteOptions, schema: StructType, overwrite: bool) -> None:
        self.options = options
        self.schema = schema
        self.overwrite = overwrite
        self.attempt = _new_attempt()
        assert options.sink_id is not None
        self.txn_key = sink_key(options.sink_id)
        if options.entry_format == "raw":
            check_raw_schema(schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> LedgerWritten:
        return write_task(self.options, self.attempt, self.txn_key, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        commit_batch(self.options, self.attempt, self.schema, self.overwrite, messages,
                     self.txn_key, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        abort_batch(self.options, self.attempt, messages)
