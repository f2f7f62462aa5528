"""The streaming sink: exactly once across kill -9 and restart, zombies refused."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.types import StringType, StructField, StructType
from spark_helpers import PROCS, ROOT

from bk_spark.datasource.options import WriteOptions
from bk_spark.datasource.writer import BookKeeperStreamWriter, sink_key
from bk_spark.errors import LogNotFoundError, LogOwnershipLostError
from bk_spark.log import (
    LEDGER_LOG_KEY,
    committed_txn,
    log_ledgers,
    log_metadata,
    open_log_reader,
    open_log_writer,
    pending,
)


def payloads(bk, name: str) -> list[bytes]:  # type: ignore[no-untyped-def]
    with open_log_reader(bk, name, "earliest") as r:
        return [rec.payload for rec in r.read_available()]


def last_batch(bk, name: str, key: str) -> int:  # type: ignore[no-untyped-def]
    try:
        return committed_txn(log_metadata(bk, name), key) or -1
    except LogNotFoundError:
        return -1


def orphans(bk, name: str) -> list[int]:  # type: ignore[no-untyped-def]
    """Ledgers created for log ``name`` that are not in it."""
    listed = {i.ledger_id for i in log_ledgers(bk, name)}
    mine = [lid for lid in bk.list_ledgers()
            if dict(bk.ledger_metadata(lid).custom_metadata).get(LEDGER_LOG_KEY) == name]
    return [lid for lid in mine if lid not in listed]


def stream_copy(uri: str, src: str, dst: str, ckpt: Path, log: Path,
                *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, str(PROCS / "stream_copy.py"), uri, src, dst, str(ckpt), *args],
        stdout=open(log, "ab"), stderr=subprocess.STDOUT, env=env,
        start_new_session=True)  # its own process group: the JVM and workers die with it


def test_sink_is_exactly_once_across_kill_9_and_restart_from_checkpoint(
        bk, uri, log_name, tmp_path):
    src, dst = log_name("src"), log_name("dst")
    values = [f"v{i:05d}".encode() for i in range(700)]  # 7 batches of 100
    w = open_log_writer(bk, src, roll_max_entries=150)
    for f in [w.append_async(v) for v in values]:
        f.result()
    w.close()
    ckpt = tmp_path / "checkpoint"
    key = sink_key(str(ckpt))
    out = tmp_path / "stream.log"

    first = stream_copy(uri, src, dst, ckpt, out, "--max-entries", "100")
    try:
        deadline = time.monotonic() + 240
        while last_batch(bk, dst, key) < 3:
            assert first.poll() is None, out.read_text()[-3000:]
            assert time.monotonic() < deadline, "the first run committed no 4 batches"
            time.sleep(0.1)
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # kill -9, the JVM and workers with it
        first.wait()
    committed = last_batch(bk, dst, key)
    assert 3 <= committed <= 6
    # The worst moment to die: the sink committed batch N, Spark's commit log did not
    # record it. Put the checkpoint in that state; the restart replays batch N.
    for stale in (ckpt / "commits" / str(committed), ckpt / "commits" / f".{committed}.crc"):
        stale.unlink(missing_ok=True)
    assert (ckpt / "offsets" / str(committed)).exists()
    assert len(payloads(bk, dst)) == 100 * (committed + 1)

    second = stream_copy(uri, src, dst, ckpt, out, "--max-entries", "100", "--available-now")
    try:
        assert second.wait(timeout=300) == 0, out.read_text()[-3000:]
    finally:
        if second.poll() is None:
            os.killpg(second.pid, signal.SIGKILL)
    assert payloads(bk, dst) == values  # no duplicate, no gap, in order
    assert last_batch(bk, dst, key) == 6
    assert pending.registered(bk, dst) == []  # the killed run's ledgers were swept
    assert orphans(bk, dst) == []


SCHEMA = StructType([StructField("value", StringType())])


def batch(*values: str) -> object:
    return iter([pa.RecordBatch.from_pydict({"value": list(values)})])


def test_zombie_sink_commits_are_refused(bk, uri, log_name):
    name = log_name()
    o = WriteOptions.parse({"metadataServiceUri": uri, "log": name, "entryFormat": "raw",
                            "checkpointLocation": "/checkpoints/q1"}, streaming=True)
    current = BookKeeperStreamWriter(o, SCHEMA, False)
    zombie = BookKeeperStreamWriter(o, SCHEMA, False)  # an earlier instance of the query

    current.commit([current.write(batch("a"))], 0)
    early = zombie.write(batch("z1"))  # written before the current instance's next commit
    current.commit([current.write(batch("b"))], 1)
    with pytest.raises(LogOwnershipLostError, match="zombie"):
        zombie.commit([early], 1)  # its ledger was swept: it can never be committed
    late = zombie.write(batch("z2"))
    zombie.commit([late], 1)  # same batch id, already committed: nothing is added
    zombie.commit([zombie.write(batch("z3"))], 0)
    assert payloads(bk, name) == [b"a", b"b"]
    assert pending.registered(bk, name) == [] and orphans(bk, name) == []


def test_replayed_batch_commits_nothing_and_deletes_its_ledgers(bk, uri, log_name):
    name = log_name()
    o = WriteOptions.parse({"metadataServiceUri": uri, "log": name,
                            "sinkId": "query-7"}, streaming=True)
    w = BookKeeperStreamWriter(o, SCHEMA, False)
    w.commit([w.write(batch("x", "y")), w.write(batch("z"))], 5)
    replay = BookKeeperStreamWriter(o, SCHEMA, False)
    replay.commit([replay.write(batch("x", "y")), replay.write(batch("z"))], 5)
    assert len(log_ledgers(bk, name)) == 2
    assert orphans(bk, name) == []


def test_complete_mode_replaces_the_log_each_batch_exactly_once(bk, uri, log_name):
    name = log_name()
    o = WriteOptions.parse({"metadataServiceUri": uri, "log": name, "entryFormat": "raw",
                            "sinkId": "totals"}, streaming=True)
    first = BookKeeperStreamWriter(o, SCHEMA, True)  # overwrite: outputMode("complete")
    first.commit([first.write(batch("total=1"))], 0)
    second = BookKeeperStreamWriter(o, SCHEMA, True)
    second.commit([second.write(batch("total=3"))], 1)
    assert payloads(bk, name) == [b"total=3"]
    replay = BookKeeperStreamWriter(o, SCHEMA, True)
    replay.commit([replay.write(batch("total=3"))], 1)
    assert payloads(bk, name) == [b"total=3"] and len(log_ledgers(bk, name)) == 1
    assert orphans(bk, name) == []
