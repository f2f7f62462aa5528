"""The Parquet file of one offloaded ledger, on a pyarrow filesystem URI.

Rows of a raw log: ``log, ledger_id, entry_id, value, timestamp`` (the ``bookkeeper``
source's raw schema, so a union with it needs no select); rows of an arrow log: the log's
own typed columns then ``log, ledger_id, entry_id, timestamp``. Files are zstd-compressed,
written in row groups of :data:`ROW_GROUP_ROWS` rows with statistics on every column, so a
position or timestamp filter skips row groups. The checksum recorded with a complete
offload (:func:`values_crc`) covers the values in order, nulls included.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from bk_spark.errors import InvalidConfigError, OffloadTargetError

#: Rows per Parquet row group (about 64 MiB of 1 KiB values at most).
ROW_GROUP_ROWS = 64 * 1024
COMPRESSION = "zstd"

#: The Arrow types of the position columns (Spark's ``timestamp`` is microseconds, UTC).
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
RAW_SCHEMA = pa.schema([
    pa.field("log", pa.string()), pa.field("ledger_id", pa.int64()),
    pa.field("entry_id", pa.int64()), pa.field("value", pa.binary()),
    pa.field("timestamp", TIMESTAMP_TYPE),
])
POSITION_FIELDS = [f for f in RAW_SCHEMA if f.name != "value"]


def filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """``(filesystem, path)`` of a pyarrow filesystem URI (``file:///d``, ``s3://b/p``;
    S3 endpoint, region and credentials from the URI's query, the environment or the AWS
    files, as pyarrow reads them)."""
    try:
        return pafs.FileSystem.from_uri(uri)
    except (pa.ArrowInvalid, ValueError) as exc:
        raise InvalidConfigError(
            f"offload target {shown_uri(uri)!r}: not a pyarrow filesystem URI ({exc}); give "
            f"file:///dir or s3://bucket/prefix") from None


def shown_uri(uri: str) -> str:
    """``uri`` without its query (it may carry credentials): what is printed and logged."""
    parts = urlsplit(uri)
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))


def values_crc(values: Iterable[bytes | None], crc: int = 0) -> int:
    """crc32 over the values in order, each as its length (-1: null) then its bytes."""
    for v in values:
        if v is None:
            crc = zlib.crc32(b"\xff\xff\xff\xff", crc)
        else:
            crc = zlib.crc32(v, zlib.crc32(len(v).to_bytes(4, "big"), crc))
    return crc


def table_crc(table: pa.Table) -> int:
    """The checksum of a table's values: the ``value`` column of a raw ledger; every
    non-position column of an arrow one, serialized as Arrow IPC one column at a time."""
    if "value" in table.schema.names and table.schema.field("value").type == pa.binary():
        crc = 0
        for chunk in table.column("value").chunks:
            crc = values_crc(chunk.to_pylist(), crc)
        return crc
    crc = 0
    positions = {f.name for f in POSITION_FIELDS}
    for name in table.schema.names:
        if name in positions:
            continue
        col = table.column(name)
        crc = zlib.crc32(repr(col.to_pylist()).encode(), crc)
    return crc


@dataclass(frozen=True)
class Written:
    """What a verified file holds (recorded in the complete offload state)."""

    rows: int
    entries: int
    bytes: int
    crc: int


def in_progress(path: str) -> str:
    """Where :func:`write_ledger` writes before the file is whole: a hidden sibling
    (``.<name>.inprogress``), which Spark, Hadoop and pyarrow datasets skip, so
    ``spark.read.parquet`` of the offload path never meets a half-written file."""
    head, _, name = path.rpartition("/")
    return f"{head}/.{name}.inprogress"


def write_ledger(uri: str, schema: pa.Schema, batches: Iterable[pa.RecordBatch]) -> None:
    """Write one ledger's rows to ``uri`` (step 2 of the protocol): to a hidden sibling
    first, moved to ``uri`` once the writer closed it."""
    fs, path = filesystem(uri)
    tmp = in_progress(path)
    try:
        fs.create_dir(path.rpartition("/")[0], recursive=True)
        with pq.ParquetWriter(tmp, schema, filesystem=fs, compression=COMPRESSION,
                              write_statistics=True) as w:
            for b in batches:
                if b.num_rows:
                    w.write_batch(b, row_group_size=ROW_GROUP_ROWS)
        fs.move(tmp, path)
    except OSError as exc:
        raise OffloadTargetError(f"cannot write {shown_uri(uri)}: {exc}") from exc


def verify(uri: str, entries: int, crc: int) -> Written:
    """Step 3: read the file back; its distinct entries must be ``entries`` and its values'
    checksum ``crc`` (raises :class:`OffloadTargetError`: the attempt does not count)."""
    table = read_table(uri)
    got_entries = len(set(table.column("entry_id").to_pylist())) if table.num_rows else 0
    got_crc = table_crc(table)
    if got_entries != entries or got_crc != crc:
        raise OffloadTargetError(
            f"{shown_uri(uri)}: read back {got_entries} entries with checksum {got_crc}, "
            f"wrote {entries} with {crc}: the copy is not counted")
    fs, path = filesystem(uri)
    size = fs.get_file_info(path).size or 0
    return Written(table.num_rows, entries, size, crc)


def read_table(uri: str, first_entry: int = 0, columns: list[str] | None = None) -> pa.Table:
    """The rows of one offloaded ledger from entry ``first_entry`` on (the row-group
    statistics on ``entry_id`` skip the groups before it)."""
    fs, path = filesystem(uri)
    try:
        filters = [("entry_id", ">=", first_entry)] if first_entry > 0 else None
        return pq.read_table(path, filesystem=fs, filters=filters, columns=columns)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise OffloadTargetError(f"cannot read {shown_uri(uri)}: {exc}") from exc


def iter_batches(uri: str, first_entry: int = 0) -> Iterator[pa.RecordBatch]:
    """:func:`read_table` as record batches, one row group at a time."""
    fs, path = filesystem(uri)
    try:
        f = pq.ParquetFile(path, filesystem=fs)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise OffloadTargetError(f"cannot read {shown_uri(uri)}: {exc}") from exc
    for g in range(f.num_row_groups):
        stats = f.metadata.row_group(g).column(
            f.schema_arrow.get_field_index("entry_id")).statistics
        if stats is not None and stats.has_min_max and stats.max < first_entry:
            continue
        t = f.read_row_group(g)
        if first_entry > 0:
            import pyarrow.compute as pc
            t = t.filter(pc.greater_equal(t.column("entry_id"), first_entry))
        yield from t.to_batches()


def delete(uri: str) -> bool:
    """Remove a file (a stale attempt's, or a truncated ledger's) and any half-written copy
    of it (an attempt that died mid-file); False if neither was there."""
    fs, path = filesystem(uri)
    found = False
    for p in (in_progress(path), path):
        try:
            fs.delete_file(p)
            found = True
        except FileNotFoundError:
            pass
        except OSError as exc:
            if "not exist" in str(exc) or "NoSuchKey" in str(exc):
                continue
            raise OffloadTargetError(f"cannot delete {shown_uri(uri)}: {exc}") from exc
    return found


def entry_records(uri: str, first_entry: int = 0
                  ) -> Iterator[tuple[int, int, bytes | None]]:
    """``(entry_id, timestamp_ms, payload)`` of each entry of an offloaded ledger from
    ``first_entry`` on, in order, as the log reader returns them: a raw ledger's value as
    it is; an arrow ledger's rows of one entry as one Arrow IPC stream (the same rows; the
    bytes may differ from the original entry's)."""
    import numpy as np

    for batch in iter_batches(uri, first_entry):
        ids = batch.column(batch.schema.get_field_index("entry_id")).to_numpy()
        stamps = batch.column(batch.schema.get_field_index("timestamp")).cast(
            pa.int64()).to_numpy() // 1000
        if batch.schema.names == RAW_SCHEMA.names:
            values = batch.column(batch.schema.get_field_index("value")).to_pylist()
            yield from zip(ids.tolist(), stamps.tolist(), values, strict=True)
            continue
        positions = {f.name for f in POSITION_FIELDS}
        typed = batch.select([n for n in batch.schema.names if n not in positions])
        cuts = np.flatnonzero(np.diff(ids)) + 1
        starts = [0, *cuts.tolist()]
        ends = [*cuts.tolist(), len(ids)]
        for a, b in zip(starts, ends, strict=True):
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, typed.schema,
                                   options=pa.ipc.IpcWriteOptions(compression="lz4")) as w:
                w.write_batch(typed.slice(a, b - a))
            yield int(ids[a]), int(stamps[a]), sink.getvalue().to_pybytes()


def first_entry_at(uri: str, timestamp_ms: int) -> int | None:
    """The first entry of an offloaded ledger appended at or after ``timestamp_ms`` (None:
    all are older); timestamps never decrease in log order."""
    t = read_table(uri, columns=["entry_id", "timestamp"])
    import pyarrow.compute as pc

    ts = pa.scalar(timestamp_ms * 1000, TIMESTAMP_TYPE)
    hit = t.filter(pc.greater_equal(t.column("timestamp"), ts))
    if hit.num_rows == 0:
        return None
    return int(pc.min(hit.column("entry_id")).as_py())
