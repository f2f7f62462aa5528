"""An offload file is visible under its name only once whole (io/offload_files.py).

``spark.read.parquet`` of a log's offload path lists the directory while the offloader may be
writing: a half-written file under its final name failed the read ("is not a Parquet file
(length is too low: 4)", seen in `make bench`).
"""

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

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
