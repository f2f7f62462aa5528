"""Offloaded ledgers become input partitions by row groups (datasource/planning.py pack):
every row group a read needs is read by exactly one partition, in log order; a large file
is several partitions, small files share one, bookie slices never share with Parquet."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from bk_spark.datasource import planning
from bk_spark.datasource.planning import Slice, pack
from bk_spark.io import offload_files as files


def ledger_file(tmp_path: Path, name: str, entries: int, monkeypatch) -> str:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(files, "ROW_GROUP_BYTES", 1)
    monkeypatch.setattr(files, "MIN_ROW_GROUP_ROWS", 100)
    n = entries * 50  # 50 rows per entry, 100 per row group
    t = pa.table({"v": pa.array(range(n), pa.int64()),
                  "entry_id": pa.array([i // 50 for i in range(n)], pa.int64()),
                  "timestamp": pa.array([i // 50 for i in range(n)], pa.int64())
                  .cast(files.TIMESTAMP_TYPE)})
    uri = (tmp_path / f"{name}.parquet").as_uri()
    files.write_ledger(uri, t.schema, t.to_batches())
    return uri


def test_row_groups_of_offloaded_ledgers_are_each_read_by_one_partition_in_order(
        tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    big = ledger_file(tmp_path, "big", 40, monkeypatch)  # 20 row groups, 2,000 rows
    small = ledger_file(tmp_path, "small", 2, monkeypatch)  # 1 row group
    monkeypatch.setattr(planning, "PARQUET_PARTITION_ROWS", 500)
    monkeypatch.setattr(planning, "PARQUET_PACK_ROWS", 500)
    slices = [Slice("l", 1, 0, 39, parquet=big), Slice("l", 2, 0, 1, parquet=small),
              Slice("l", 3, 0, 1, parquet=small), Slice("l", 4, 0, 9)]
    parts = pack(slices, 100, None)
    flat = [(s.ledger_id, s.row_groups) for p in parts for s in p.slices]
    assert flat == [(1, tuple(range(k, k + 5))) for k in range(0, 20, 5)] + \
        [(2, (0,)), (3, (0,)), (4, None)]
    assert [len(p.slices) for p in parts] == [1, 1, 1, 1, 2, 1]  # small files share one
    # more partitions asked for: smaller runs, still each group once
    parts = pack(slices[:1], 100, 10)
    assert [s.row_groups for p in parts for s in p.slices] == \
        [(k, k + 1) for k in range(0, 20, 2)]
    # an entry range keeps the row groups holding it (entries 5..12: rows 250..649)
    cut = pack([Slice("l", 1, 5, 12, parquet=big)], 100, None)
    assert [s.row_groups for p in cut for s in p.slices] == [(2, 3, 4, 5, 6)]
