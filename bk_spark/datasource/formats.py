"""The two entry formats of a log as Spark sees it, and how a log records its format.

``raw``
    One log entry per row: the entry payload is the row's ``value``; a null ``value`` is
    a null entry and reads back null (an empty one reads back empty). Logs written by the
    ``bk`` shell or the Python API (no format property) are raw. Rows read back::

        log string, ledger_id long, entry_id long, value binary, timestamp timestamp

``arrow``
    Rows packed into entries as Arrow IPC streams (one record batch per entry, about
    :data:`ARROW_ENTRY_BYTES` of rows each, LZ4-compressed buffers). The DataFrame's Spark schema is
    kept in the log's metadata properties, so reading returns the same typed columns,
    optionally followed by the position columns ``log, ledger_id, entry_id, timestamp``
    (every row of an entry shares its position and append timestamp).

Both are framed by the log (:func:`bk_spark.protocol.log_format.encode_entry`: a version byte
and the append timestamp before the payload). The log properties written by the sink::

    "bk-spark.format": "raw" | "arrow"
    "bk-spark.schema": "<Spark StructType JSON>"          (arrow only)
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    DataType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from bk_spark.errors import InvalidConfigError, LogFormatError
from bk_spark.io.entry_batches import conform, unpack_arrow  # noqa: F401 (their home)

FORMAT_PROPERTY = "bk-spark.format"
SCHEMA_PROPERTY = "bk-spark.schema"

#: Target size of the rows of one arrow entry, before compression (the client's largest
#: entry is 5 MiB; :func:`pack_arrow` splits a payload over its ``max_bytes``). Each entry
#: costs the writer and every bookie of its write set one RPC, journal group and sync:
#: in a Spark write, 4 MiB entries (~2 MB compressed) took the bookies ~40% less CPU than
#: 1 MiB ones for the same rows (bench/profiles.md).
ARROW_ENTRY_BYTES = 4 << 20
#: Buffer compression of arrow entries.
ARROW_COMPRESSION = "lz4"

POSITION_FIELDS = (
    StructField("log", StringType()),
    StructField("ledger_id", LongType()),
    StructField("entry_id", LongType()),
    StructField("timestamp", TimestampType()),
)
POSITION_COLUMNS = tuple(f.name for f in POSITION_FIELDS)

#: What a raw log reads as.
RAW_SCHEMA = StructType([POSITION_FIELDS[0], POSITION_FIELDS[1], POSITION_FIELDS[2],
                         StructField("value", BinaryType()), POSITION_FIELDS[3]])


def arrow_schema(schema: StructType) -> pa.Schema:
    """The exact Arrow schema Spark expects from ``read()`` for ``schema``."""
    return to_arrow_schema(schema, timezone="UTC")


# ------------------------------------------------------------------------- log properties


def log_format(properties: Mapping[str, Any], has_ledgers: bool) -> str | None:
    """The recorded format of a log (None: nothing recorded and no ledgers yet)."""
    fmt = properties.get(FORMAT_PROPERTY)
    if fmt is None:
        return "raw" if has_ledgers else None
    if fmt not in ("raw", "arrow"):
        raise LogFormatError(f"log entry format {fmt!r} is not supported by this bk-spark "
                             f"(it reads raw and arrow): upgrade bk-spark")
    return str(fmt)


def stored_schema(properties: Mapping[str, Any], log: str) -> StructType:
    raw = properties.get(SCHEMA_PROPERTY)
    if not raw:
        raise LogFormatError(f"log {log!r} is in arrow format but records no schema "
                             f"({SCHEMA_PROPERTY!r} property)")
    parsed = StructType.fromJson(json.loads(raw))
    assert isinstance(parsed, StructType)
    return parsed


def schema_property(schema: StructType) -> str:
    return schema.json()


def read_schema(fmt: str, stored: StructType | None, include_positions: bool) -> StructType:
    """The DataFrame schema of a read."""
    if fmt == "raw":
        return RAW_SCHEMA
    assert stored is not None
    if not include_positions:
        return stored
    clash = [f.name for f in stored.fields if f.name.lower() in POSITION_COLUMNS]
    if clash:
        raise InvalidConfigError(
            f"bookkeeper data source option 'includePositions': the log's columns already "
            f"include {', '.join(clash)}; read without includePositions")
    return StructType(list(stored.fields) + list(POSITION_FIELDS))


def _without_nullability(t: DataType) -> Any:
    d = t.jsonValue()

    def strip(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items()
                    if k not in ("nullable", "containsNull", "valueContainsNull", "metadata")}
        if isinstance(x, list):
            return [strip(v) for v in x]
        return x

    return strip(d)


def check_still_readable(properties: Mapping[str, Any], has_ledgers: bool, log: str,
                         entry_format: str, stored: StructType | None) -> None:
    """Fail (:class:`LogFormatError`) when log ``log`` (its ``properties``) no longer holds
    what a running streaming query reads as ``entry_format`` (and, for arrow, rows of
    ``stored``, nullability aside): a query's schema is fixed when it starts, so a log that
    was empty then (read as raw) and was written in arrow since, a log found by
    ``logPattern`` in another format or schema, or a log overwritten in another format,
    would otherwise be read wrongly (arrow entries as raw values) or fail deep in the
    read. A log with no format yet (no ledgers) has nothing to read and passes."""
    fmt = log_format(properties, has_ledgers)
    if fmt is None:
        return
    if fmt == entry_format and (fmt == "raw" or stored is None or _without_nullability(
            stored_schema(properties, log)) == _without_nullability(stored)):
        return
    now = "raw entries" if fmt == "raw" else \
        f"arrow rows of {stored_schema(properties, log).simpleString()}"
    was = "raw entries" if entry_format == "raw" else \
        f"arrow rows of {stored.simpleString() if stored is not None else '?'}"
    raise LogFormatError(
        f"log {log!r} now holds {now}, but this streaming query reads {was} (what its logs "
        f"held when it started; a log empty then reads as raw): restart the query to read "
        f"the log as it is now, or read logs of different formats in separate queries")


def merge_schemas(stored: StructType, new: StructType, log: str) -> StructType:
    """The schema to record when ``new`` rows are appended to a log holding ``stored``.

    Types and names must be equal; nullability may only widen (a field nullable in either
    is nullable in the result).
    """
    if _without_nullability(stored) != _without_nullability(new):
        raise InvalidConfigError(
            f"log {log!r} holds rows of schema {stored.simpleString()}, the DataFrame has "
            f"{new.simpleString()}: write to another log (or use mode('overwrite'))")
    merged = json.loads(stored.json())
    other = json.loads(new.json())

    def widen(a: Any, b: Any) -> Any:
        if isinstance(a, dict) and isinstance(b, dict):
            out = {}
            for k, v in a.items():
                if k in ("nullable", "containsNull", "valueContainsNull"):
                    out[k] = bool(v or b.get(k))
                else:
                    out[k] = widen(v, b.get(k))
            return out
        if isinstance(a, list) and isinstance(b, list):
            return [widen(x, y) for x, y in zip(a, b, strict=True)]
        return a

    result = StructType.fromJson(widen(merged, other))
    assert isinstance(result, StructType)
    return result


# ------------------------------------------------------------------------- raw entries


def raw_values(batch: pa.RecordBatch) -> list[bytes | None]:
    """The payloads of a raw write: the ``value`` column (binary or string); a null
    ``value`` is a None payload, framed as a null entry (log_format.py), read back null."""
    names = batch.schema.names
    if "value" not in names:
        raise InvalidConfigError(
            f"bookkeeper data source option 'entryFormat': raw entries need a 'value' "
            f"column (binary or string), the DataFrame has {', '.join(names)}; select one "
            f"or write entryFormat=arrow")
    col = batch.column(names.index("value"))
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        col = col.cast(pa.binary())
    elif not (pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type)):
        raise InvalidConfigError(
            f"bookkeeper data source option 'entryFormat': raw entries need a binary or "
            f"string 'value' column, got {col.type}")
    return col.to_pylist()


def check_raw_schema(schema: StructType) -> None:
    """Fail early (on the driver) if a raw write has no usable ``value`` column."""
    fields = {f.name: f for f in schema.fields}
    f = fields.get("value")
    if f is None or not isinstance(f.dataType, BinaryType | StringType):
        raise InvalidConfigError(
            f"bookkeeper data source option 'entryFormat': raw entries need a 'value' "
            f"column of type binary or string, the DataFrame has {schema.simpleString()}")


# ------------------------------------------------------------------------- arrow entries


def pack_arrow(batches: Iterable[pa.RecordBatch], target_bytes: int = ARROW_ENTRY_BYTES,
               max_bytes: int | None = None) -> Iterator[bytes]:
    """Rows of ``batches`` as Arrow IPC stream payloads of about ``target_bytes`` of rows
    each, in order.

    Rows are gathered by the average row size of their batch, so uneven rows can make a
    payload larger than planned: one over ``max_bytes`` (the largest entry the ledger
    takes, less the log's frame) is encoded again as two halves, down to single rows (a
    single row over it is left to the ledger to refuse).
    """
    options = pa.ipc.IpcWriteOptions(compression=ARROW_COMPRESSION)
    pending: list[pa.RecordBatch] = []
    pending_bytes = 0

    def encode(table: pa.Table) -> list[bytes]:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema, options=options) as w:
            for b in table.combine_chunks().to_batches():
                w.write_batch(b)
        payload = sink.getvalue().to_pybytes()
        if max_bytes is None or len(payload) <= max_bytes or table.num_rows <= 1:
            return [payload]
        half = table.num_rows // 2
        return encode(table.slice(0, half)) + encode(table.slice(half))

    def flush() -> list[bytes]:
        table = pa.Table.from_batches(pending)
        pending.clear()
        return encode(table)

    for batch in batches:
        if batch.num_rows == 0:
            continue
        per_row = max(1, batch.nbytes // batch.num_rows)
        offset = 0
        while offset < batch.num_rows:
            room = max(1, (target_bytes - pending_bytes) // per_row)
            piece = batch.slice(offset, room)
            pending.append(piece)
            pending_bytes += piece.num_rows * per_row
            offset += piece.num_rows
            if pending_bytes >= target_bytes:
                yield from flush()
                pending_bytes = 0
    if pending:
        yield from flush()
