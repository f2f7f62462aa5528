"""An offload file is visible under its name only once whole (io/offload_files.py).

``spark.read.parquet`` of a log's offload path lists the directory while the offloader may be
writing: a half-written file under its final name failed the read ("is not a Parquet file
(length is too low: 4)", seen in `make bench`).
"""

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bk_spark.errors import OffloadTargetError
from bk_spark.io import offload_files as files

SCHEMA = pa.schema([("entry_id", pa.int64()), ("value", pa.binary())])


def batch(first: int, n: int) -> pa.RecordBatch:
    return pa.record_batch([pa.array(range(first, first + n), pa.int64()),
                            pa.array([b"v%d" % i for i in range(first, first + n)])],
                           schema=SCHEMA)


def visible(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if not p.name.startswith((".", "_")))


def test_a_file_being_written_is_hidden_until_whole(tmp_path: Path) -> None:
    target = tmp_path / "log" / "ledger-1.parquet"
    seen_mid_write: list[list[str]] = []

    def batches():
        yield batch(0, 10)
        seen_mid_write.append(visible(target.parent))
        yield batch(10, 10)

    files.write_ledger(target.as_uri(), SCHEMA, batches())
    assert seen_mid_write == [[]]
    assert visible(target.parent) == ["ledger-1.parquet"]
    assert sorted(p.name for p in target.parent.iterdir()) == ["ledger-1.parquet"]
    assert pq.read_table(target).column("entry_id").to_pylist() == list(range(20))


def test_delete_removes_the_half_written_copy_an_attempt_left(tmp_path: Path) -> None:
    target = tmp_path / "log" / "ledger-2.parquet"
    target.parent.mkdir(parents=True)
    half = Path(files.in_progress(str(target)))
    half.write_bytes(b"PAR1")  # what an offloader killed mid-file leaves
    assert files.delete(target.as_uri()) is True
    assert list(target.parent.iterdir()) == []
    assert files.delete(target.as_uri()) is False


# --------------------------------------------------------------------- issue 29: fast path
TS = files.TIMESTAMP_TYPE


def arrow_ledger(entries: int, rows_per_entry: int) -> pa.Table:
    """An arrow ledger's rows: typed columns (with nulls and a nested one) + positions."""
    n = entries * rows_per_entry
    ids = [i // rows_per_entry for i in range(n)]
    return pa.table({
        "n": pa.array([None if i % 7 == 3 else i for i in range(n)], pa.int64()),
        "s": pa.array([None if i % 5 == 1 else ("" if i % 5 == 2 else f"s{i}")
                       for i in range(n)]),
        "tags": pa.array([None if i % 6 == 0 else [f"t{i}"] * (i % 3) for i in range(n)]),
        "log": pa.array(["l"] * n), "ledger_id": pa.array([9] * n, pa.int64()),
        "entry_id": pa.array(ids, pa.int64()),
        "timestamp": pa.array([1_000_000 * (10 + e) for e in ids], pa.int64()).cast(TS),
    })


def small_row_groups(monkeypatch, rows: int) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(files, "ROW_GROUP_BYTES", 1, raising=False)
    monkeypatch.setattr(files, "MIN_ROW_GROUP_ROWS", rows, raising=False)
    monkeypatch.setattr(files, "ROW_GROUP_ROWS", rows)


def test_the_values_checksum_is_the_same_however_the_rows_are_chunked_and_read_back(
        tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    small_row_groups(monkeypatch, 40)
    table = arrow_ledger(4, 75)
    whole = files.table_crc(table)
    assert files.table_crc(pa.concat_tables([table.slice(0, 13), table.slice(13)])) == whole
    uri = (tmp_path / "l" / "f.parquet").as_uri()
    wrote = files.write_ledger(uri, table.schema, table.to_batches(max_chunksize=33))
    assert (wrote.rows, wrote.entries, wrote.crc) == (300, 4, whole)
    assert files.verify(uri, 4, whole).rows == 300
    # any changed value, a null that becomes empty, a position-free column: another checksum
    s = table.column("s").to_pylist()
    s[1] = ""
    assert files.table_crc(table.set_column(1, "s", pa.array(s))) != whole
    n = table.column("n").to_pylist()
    n[299] += 1
    assert files.table_crc(table.set_column(0, "n", pa.array(n))) != whole
    with pytest.raises(OffloadTargetError, match="not counted"):
        files.verify(uri, 4, whole ^ 1)
    with pytest.raises(OffloadTargetError, match="not counted"):
        files.verify(uri, 5, whole)


def test_an_entry_cut_by_row_groups_reads_back_once_and_whole(
        tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    small_row_groups(monkeypatch, 40)
    table = arrow_ledger(3, 75)  # entries of 75 rows, row groups of 40
    uri = (tmp_path / "l" / "f.parquet").as_uri()
    files.write_ledger(uri, table.schema, table.to_batches(max_chunksize=40))
    assert pq.ParquetFile(tmp_path / "l" / "f.parquet").metadata.num_row_groups > 3
    got = list(files.entry_records(uri))
    assert [(e, ts) for e, ts, _p in got] == [(0, 10_000), (1, 11_000), (2, 12_000)]
    for e, _ts, payload in got:
        rows = pa.ipc.open_stream(pa.py_buffer(payload)).read_all()
        assert rows.column("n").to_pylist() == \
            table.column("n").to_pylist()[75 * e:75 * (e + 1)]
    assert [e for e, _ts, _p in files.entry_records(uri, first_entry=1)] == [1, 2]


def test_read_batches_keeps_exactly_the_rows_of_the_entry_and_time_ranges(
        tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    small_row_groups(monkeypatch, 40)
    table = arrow_ledger(8, 25)
    uri = (tmp_path / "l" / "f.parquet").as_uri()
    files.write_ledger(uri, table.schema, table.to_batches())
    groups = files.row_group_stats(uri)
    assert len(groups) == 5 and groups[0].first_entry == 0 and groups[0].last_entry == 1

    def got(**kw) -> list:  # type: ignore[no-untyped-def]
        return [x for b in files.read_batches(uri, **kw) for x in b.column("n").to_pylist()]

    def want(lo: int, hi: int) -> list:
        return [x for x, e in zip(table.column("n").to_pylist(),
                                  table.column("entry_id").to_pylist(), strict=True)
                if lo <= e <= hi]

    assert got() == want(0, 7)
    assert got(first_entry=3, last_entry=5) == want(3, 5)
    assert got(ts_lo_us=12_000_000, ts_hi_us=13_500_000) == want(2, 3)
    # a planned run of row groups: its rows only (group 2: rows 80..119, entries 3 and 4)
    assert got(first_entry=3, row_groups=[2]) == table.column("n").to_pylist()[80:120]
    assert got(first_entry=4, row_groups=[2]) == table.column("n").to_pylist()[100:120]
    assert files.first_entry_at(uri, 14_000) == 4
    assert files.first_entry_at(uri, 99_000) is None
