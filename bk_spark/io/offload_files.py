"""The Parquet file of one offloaded ledger, on a pyarrow filesystem URI.

Rows of a raw log: ``log, ledger_id, entry_id, value, timestamp`` (the ``bookkeeper``
source's raw schema, so a union with it needs no select); rows of an arrow log: the log's
own typed columns then ``log, ledger_id, entry_id, timestamp``. Files are zstd-compressed,
written in row groups of about :data:`ROW_GROUP_BYTES` with statistics on every column, so
a position or timestamp filter skips row groups. The checksum recorded with a complete
offload (:class:`ValuesChecksum`) covers the values in order, nulls included.

Every read of an offloaded ledger's rows goes through :func:`read_batches` (count reads
served from Parquet there).
"""

from __future__ import annotations

import datetime as dt
import zlib
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from bk_spark.errors import InvalidConfigError, OffloadTargetError
from bk_spark.protocol import row_groups as rg_rules
from bk_spark.protocol.row_groups import RowGroupStats

#: Uncompressed bytes of rows a Parquet row group aims at (:func:`row_group_rows`): large
#: enough that a read is a few large column chunks, small enough that a position or
#: timestamp filter skips most of a big ledger and a big ledger is read by several tasks.
ROW_GROUP_BYTES = 32 << 20
#: Most and fewest rows per row group.
ROW_GROUP_ROWS = 1 << 20
MIN_ROW_GROUP_ROWS = 1024
#: Rows per record batch of a read (:func:`read_batches`).
READ_BATCH_ROWS = 128 * 1024
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
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


def _add(crcs: dict[str, int], key: str, data: Any) -> None:
    crcs[key] = zlib.crc32(data, crcs.get(key, 0))


def _binary_like(t: pa.DataType) -> bool:
    return (pa.types.is_binary(t) or pa.types.is_string(t) or pa.types.is_large_binary(t)
            or pa.types.is_large_string(t))


def _feed(crcs: dict[str, int], key: str, arr: pa.Array) -> None:
    """Add one chunk of a column to the per-part checksums of ``key``: its validity, then
    (by type) its lengths and its value bytes, null slots counted as empty/zero, so the
    result does not depend on how the column is chunked, sliced or buffered."""
    n = len(arr)
    if n == 0:
        return
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    t = arr.type
    if pa.types.is_null(t):
        _add(crcs, key + "#n", n.to_bytes(8, "big"))
        return
    valid = arr.is_valid().to_numpy(zero_copy_only=False)
    _add(crcs, key + "#v", valid)
    nulls = arr.null_count > 0
    if _binary_like(t):
        if nulls:
            arr = arr.fill_null(pa.scalar(b"" if pa.types.is_binary(t) or
                                          pa.types.is_large_binary(t) else "", t))
        bufs = arr.buffers()
        large = pa.types.is_large_binary(t) or pa.types.is_large_string(t)
        offsets = np.frombuffer(bufs[1], np.int64 if large else np.int32)[
            arr.offset:arr.offset + n + 1]
        _add(crcs, key + "#l", np.diff(offsets).astype(np.int64))
        if bufs[2] is not None and offsets[-1] > offsets[0]:
            _add(crcs, key + "#d", np.frombuffer(bufs[2], np.uint8)[offsets[0]:offsets[-1]])
    elif pa.types.is_boolean(t):
        _add(crcs, key + "#d", arr.fill_null(False).to_numpy(zero_copy_only=False))
    elif pa.types.is_struct(t):
        for i, child in enumerate(arr.flatten()):
            _feed(crcs, f"{key}.{t.field(i).name}", child)
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        if pa.types.is_map(t):
            offsets = pa.array(arr.offsets.to_numpy(zero_copy_only=False))
            arr = pa.ListArray.from_arrays(offsets, arr.values, mask=arr.is_null())
        lengths = pc.list_value_length(arr).fill_null(0).to_numpy(zero_copy_only=False)
        _add(crcs, key + "#l", lengths.astype(np.int64))
        _feed(crcs, key + "[]", arr.flatten())
    else:
        try:
            width = t.bit_width // 8 if t.bit_width % 8 == 0 else 0
        except ValueError:
            width = 0
        if width:
            data = np.frombuffer(arr.buffers()[1], np.uint8)[
                arr.offset * width:(arr.offset + n) * width]
            if nulls:
                data = data.reshape(n, width).copy()
                data[~valid] = 0
            _add(crcs, key + "#d", data)
        else:  # a type none of the above covers: its Python values
            _add(crcs, key + "#r", repr(arr.to_pylist()).encode())


class ValuesChecksum:
    """The checksum of a ledger's values recorded with a complete offload and verified in
    step 3 of the protocol: crc32 over every column but the positions (a raw ledger's
    ``value``, an arrow ledger's typed columns), in row order, nulls included.

    Computed by Arrow and numpy over whole columns (validity, lengths and value bytes of
    each column, nested ones by their children), never row by row; fed batch by batch
    (:meth:`update`), the same rows give the same checksum however they are chunked, so
    the rows as read from the bookies and as read back from the file can be compared.
    """

    def __init__(self) -> None:
        self._crcs: dict[str, int] = {}

    def update(self, data: pa.RecordBatch | pa.Table) -> None:
        positions = {f.name for f in POSITION_FIELDS}
        for name in data.schema.names:
            if name in positions:
                continue
            col = data.column(name)
            for chunk in (col.chunks if isinstance(col, pa.ChunkedArray) else [col]):
                _feed(self._crcs, name, chunk)

    @property
    def value(self) -> int:
        crc = 0
        for key in sorted(self._crcs):
            crc = zlib.crc32(self._crcs[key].to_bytes(4, "big"),
                             zlib.crc32(key.encode(), crc))
        return crc


def table_crc(table: pa.Table | pa.RecordBatch) -> int:
    """:class:`ValuesChecksum` of one table."""
    c = ValuesChecksum()
    c.update(table)
    return c.value


@dataclass(frozen=True)
class Written:
    """What a verified file holds (recorded in the complete offload state)."""

    rows: int
    entries: int
    bytes: int
    crc: int


@dataclass(frozen=True)
class Wrote:
    """What :func:`write_ledger` wrote: rows, distinct entries, :class:`ValuesChecksum`."""

    rows: int
    entries: int
    crc: int


def in_progress(path: str) -> str:
    """Where :func:`write_ledger` writes before the file is whole: a hidden sibling
    (``.<name>.inprogress``), which Spark, Hadoop and pyarrow datasets skip, so
    ``spark.read.parquet`` of the offload path never meets a half-written file."""
    head, _, name = path.rpartition("/")
    return f"{head}/.{name}.inprogress"


def row_group_rows(schema: pa.Schema, sample: pa.RecordBatch | None) -> int:
    """Rows per row group: about :data:`ROW_GROUP_BYTES` of uncompressed rows (from the
    first batch's row size), between :data:`MIN_ROW_GROUP_ROWS` and :data:`ROW_GROUP_ROWS`.
    """
    if sample is None or sample.num_rows == 0:
        return ROW_GROUP_ROWS
    per_row = max(1, sample.nbytes // sample.num_rows)
    return max(MIN_ROW_GROUP_ROWS, min(ROW_GROUP_ROWS, ROW_GROUP_BYTES // per_row))


def dictionary_columns(sample: pa.RecordBatch) -> list[str]:
    """The columns to dictionary-encode, judged on the first batch: the position columns
    (one log, one ledger, few entries and timestamps) and any column whose values repeat
    (at most half of the first 16,384 distinct). Encoding a column of unique values (ids, amounts,
    names) as a dictionary first and falling back to plain took a third of the write."""
    positions = {f.name for f in POSITION_FIELDS}
    sample = sample.slice(0, 16384)
    out = []
    for name in sample.schema.names:
        col = sample.column(name)
        if name in positions:
            out.append(name)
            continue
        try:
            distinct = pc.count_distinct(col).as_py()
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
            out.append(name)  # nested: Parquet's default
            continue
        if distinct * 2 <= sample.num_rows:
            out.append(name)
    return out


def write_ledger(uri: str, schema: pa.Schema, batches: Iterable[pa.RecordBatch]) -> Wrote:
    """Write one ledger's rows to ``uri`` (step 2 of the protocol): to a hidden sibling
    first, moved to ``uri`` once the writer closed it. The batches go to the Parquet
    writer as they come, gathered into whole row groups (:func:`row_group_rows`), and are
    checksummed (:class:`ValuesChecksum`) on the way for step 3.

    Threads: Parquet encoding and compression of a row group (no GIL held) run on one
    helper thread while this one fetches, decodes and checksums the next rows; at most
    one row group is in the helper's hands, and the helper is done before this returns
    or raises."""
    fs, path = filesystem(uri)
    tmp = in_progress(path)
    check = ValuesChecksum()
    rows = entries = held = 0
    last_entry: int | None = None
    pending: list[pa.RecordBatch] = []
    group = ROW_GROUP_ROWS
    w: pq.ParquetWriter | None = None
    helper = ThreadPoolExecutor(1, thread_name_prefix="offload-write")
    writing: Future[None] | None = None

    def write(table: pa.Table) -> None:
        nonlocal writing
        if writing is not None:
            writing.result()
        assert w is not None
        writing = helper.submit(w.write_table, table, row_group_size=group)

    try:
        fs.create_dir(path.rpartition("/")[0], recursive=True)
        for b in batches:
            if not b.num_rows:
                continue
            if w is None:  # the first rows tell the row-group size and the dictionaries
                group = row_group_rows(schema, b)
                w = pq.ParquetWriter(tmp, schema, filesystem=fs, compression=COMPRESSION,
                                     write_statistics=True,
                                     use_dictionary=dictionary_columns(b))
            check.update(b)
            rows += b.num_rows
            i = b.schema.get_field_index("entry_id")
            if i >= 0:  # entry ids never decrease along a ledger's rows
                ids = b.column(i).to_numpy()
                entries += int(np.count_nonzero(np.diff(ids))) + 1 - int(ids[0] == last_entry)
                last_entry = int(ids[-1])
            pending.append(b)
            held += b.num_rows
            if held >= group:  # whole row groups out, the rest kept for the next
                table = pa.Table.from_batches(pending, schema=schema)
                whole = held - held % group
                write(table.slice(0, whole))
                pending = table.slice(whole).to_batches() if whole < held else []
                held -= whole
        if w is None:  # no rows: a file of the schema with none
            w = pq.ParquetWriter(tmp, schema, filesystem=fs, compression=COMPRESSION)
        if pending:
            write(pa.Table.from_batches(pending, schema=schema))
        if writing is not None:
            writing.result()
        w.close()
        fs.move(tmp, path)
    except OSError as exc:
        raise OffloadTargetError(f"cannot write {shown_uri(uri)}: {exc}") from exc
    finally:
        helper.shutdown(wait=True)
        if w is not None and w.is_open:
            w.close()
    return Wrote(rows, entries, check.value)


def _open(uri: str) -> tuple[pq.ParquetFile, pafs.FileSystem, str]:
    fs, path = filesystem(uri)
    try:
        return pq.ParquetFile(path, filesystem=fs), fs, path
    except FileNotFoundError:
        raise
    except OSError as exc:
        if "not exist" in str(exc) or "NoSuchKey" in str(exc):
            raise FileNotFoundError(shown_uri(uri)) from None
        raise OffloadTargetError(f"cannot read {shown_uri(uri)}: {exc}") from exc


def verify(uri: str, entries: int, crc: int) -> Written:
    """Step 3: check the file as it is on the target: its rows (from the file's metadata)
    must hold ``entries`` distinct entries (read from its ``entry_id`` column) and the
    checksum of its values (:class:`ValuesChecksum`, computed in Arrow over the values
    read back row group by row group) must be ``crc``; raises :class:`OffloadTargetError`
    (the attempt does not count)."""
    f, fs, path = _open(uri)
    rows = f.metadata.num_rows
    positions = {fld.name for fld in POSITION_FIELDS}
    values = [n for n in f.schema_arrow.names if n not in positions]
    got_entries = 0
    check = ValuesChecksum()
    try:
        if rows:
            ids = f.read(columns=["entry_id"]).column("entry_id")
            got_entries = pc.count_distinct(ids).as_py()
            for b in f.iter_batches(batch_size=ROW_GROUP_ROWS, columns=values):
                check.update(b)
    except OSError as exc:
        raise OffloadTargetError(f"cannot read {shown_uri(uri)}: {exc}") from exc
    if got_entries != entries or check.value != crc:
        raise OffloadTargetError(
            f"{shown_uri(uri)}: read back {got_entries} entries with checksum {check.value}, "
            f"wrote {entries} with {crc}: the copy is not counted")
    size = fs.get_file_info(path).size or 0
    return Written(rows, entries, size, crc)


def _stat(stats: Any, to_int: Any) -> tuple[int | None, int | None]:
    if stats is None or not stats.has_min_max:
        return None, None
    return to_int(stats.min), to_int(stats.max)


def _micros(v: Any) -> int:
    if isinstance(v, dt.datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=dt.UTC)
        d = v - _EPOCH
        return (d.days * 86_400 + d.seconds) * 1_000_000 + d.microseconds
    return int(v)


def row_group_stats(uri: str) -> list[RowGroupStats]:
    """The row groups of a ledger's file, from its footer only (planning reads this)."""
    return row_group_stats_of(_open(uri)[0])


def read_batches(uri: str, first_entry: int = 0, last_entry: int | None = None,
                 ts_lo_us: int | None = None, ts_hi_us: int | None = None,
                 columns: Sequence[str] | None = None,
                 row_groups: Sequence[int] | None = None) -> Iterator[pa.RecordBatch]:
    """The one read of an offloaded ledger's rows (the log reader, the ``bookkeeper``
    source and the timestamp seek all read through it): rows of entries
    ``first_entry..last_entry`` (None: to the end) appended between ``ts_lo_us`` and
    ``ts_hi_us`` (microseconds, None: unbounded), in file order, as the file's Arrow
    record batches, ``columns`` only (None: all).

    Row groups are chosen by their statistics (:func:`~bk_spark.protocol.row_groups.kept`;
    ``row_groups``: only among these, a planned partition's), and only the rows of groups
    not wholly inside the ranges are trimmed, in Arrow. Raises FileNotFoundError when the
    file is gone (a truncation), :class:`OffloadTargetError` when the target fails."""
    f, _fs, _path = _open(uri)
    groups = row_group_stats_of(f)
    if row_groups is not None:
        wanted = set(row_groups)
        groups = [g for g in groups if g.index in wanted]
    groups = rg_rules.kept(groups, first_entry, last_entry, ts_lo_us, ts_hi_us)
    if not groups:
        return
    want = list(columns) if columns is not None else f.schema_arrow.names
    trim = not all(rg_rules.wholly_inside(g, first_entry, last_entry, ts_lo_us, ts_hi_us)
                   for g in groups)
    read = list(want)
    if trim:
        read += [c for c in ("entry_id", "timestamp") if c not in read]
    try:
        for b in f.iter_batches(batch_size=READ_BATCH_ROWS, row_groups=[g.index for g in groups],
                                columns=read, use_threads=False):
            if trim:
                m = pc.greater_equal(b.column("entry_id"), first_entry)
                if last_entry is not None:
                    m = pc.and_(m, pc.less_equal(b.column("entry_id"), last_entry))
                if ts_lo_us is not None:
                    m = pc.and_(m, pc.greater_equal(b.column("timestamp").cast(pa.int64()),
                                                    ts_lo_us))
                if ts_hi_us is not None:
                    m = pc.and_(m, pc.less_equal(b.column("timestamp").cast(pa.int64()),
                                                 ts_hi_us))
                b = b.filter(m)
                if len(read) != len(want):
                    b = b.select(want)
            if b.num_rows:
                yield b
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise OffloadTargetError(f"cannot read {shown_uri(uri)}: {exc}") from exc


def row_group_stats_of(f: pq.ParquetFile) -> list[RowGroupStats]:
    """The row groups of an open file and their ``entry_id`` / ``timestamp`` ranges."""
    md = f.metadata
    leaf = {md.schema.column(c).path: c for c in range(md.num_columns)}
    ce, ct = leaf.get("entry_id"), leaf.get("timestamp")
    out = []
    for g in range(md.num_row_groups):
        rg = md.row_group(g)
        e = _stat(rg.column(ce).statistics, int) if ce is not None else (None, None)
        t = _stat(rg.column(ct).statistics, _micros) if ct is not None else (None, None)
        out.append(RowGroupStats(g, rg.num_rows, rg.total_byte_size, e[0], e[1], t[0], t[1]))
    return out


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
    bytes may differ from the original entry's). An entry whose rows span two record
    batches is yielded once, whole."""
    positions = {f.name for f in POSITION_FIELDS}
    carry: list[pa.RecordBatch] = []  # rows of the entry the previous batch ended in
    carry_id = carry_ts = -1

    def ipc(parts: list[pa.RecordBatch]) -> bytes:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, parts[0].schema,
                               options=pa.ipc.IpcWriteOptions(compression="lz4")) as w:
            for p in parts:
                w.write_batch(p)
        return sink.getvalue().to_pybytes()

    for batch in read_batches(uri, first_entry):
        ids = batch.column(batch.schema.get_field_index("entry_id")).to_numpy()
        stamps = batch.column(batch.schema.get_field_index("timestamp")).cast(
            pa.int64()).to_numpy() // 1000
        if batch.schema.names == RAW_SCHEMA.names:
            values = batch.column(batch.schema.get_field_index("value")).to_pylist()
            yield from zip(ids.tolist(), stamps.tolist(), values, strict=True)
            continue
        typed = batch.select([n for n in batch.schema.names if n not in positions])
        cuts = np.flatnonzero(np.diff(ids)) + 1
        starts = [0, *cuts.tolist()]
        ends = [*cuts.tolist(), len(ids)]
        for a, b in zip(starts, ends, strict=True):
            if carry and int(ids[a]) != carry_id:
                yield carry_id, carry_ts, ipc(carry)
                carry = []
            carry.append(typed.slice(a, b - a))
            carry_id, carry_ts = int(ids[a]), int(stamps[a])
    if carry:
        yield carry_id, carry_ts, ipc(carry)


def first_entry_at(uri: str, timestamp_ms: int) -> int | None:
    """The first entry of an offloaded ledger appended at or after ``timestamp_ms`` (None:
    all are older); timestamps never decrease in log order."""
    for b in read_batches(uri, ts_lo_us=timestamp_ms * 1000,
                          columns=["entry_id", "timestamp"]):
        return int(b.column("entry_id")[0].as_py())
    return None
