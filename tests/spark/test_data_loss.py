"""Data loss is never silent: a log deleted and created again, positions in truncated
ledgers, and the messages that tell the user what happened (real ledgers only)."""

from __future__ import annotations

import shutil

import pytest
from pyspark.errors import PySparkException
from spark_helpers import read_log
from test_stream import fill, run_available_now, stream

from bk_spark.log import delete_log, log_ledgers, truncate_log
from bk_spark.protocol.log_format import Position


def test_log_deleted_and_created_again_between_runs_is_never_skipped_silently(
        spark, bk, uri, log_name, tmp_path):
    name = log_name()
    fill(bk, name, 2)
    rows, _ = run_available_now(stream(spark, uri, name), tmp_path, "q_strict")
    assert len(rows) == 2
    shutil.copytree(tmp_path / "q_strict", tmp_path / "q_lenient")
    delete_log(bk, name)
    fill(bk, name, 1)  # the new log's first entry, at the same index the old one ended

    with pytest.raises(PySparkException) as failed:  # failOnDataLoss=true (the default)
        run_available_now(stream(spark, uri, name), tmp_path, "q_strict")
    message = str(failed.value)
    assert f"log {name!r} was deleted and created again" in message
    assert "failing the read (failOnDataLoss=true)" in message
    assert "ledger -1" not in message

    rows, _ = run_available_now(stream(spark, uri, name, failOnDataLoss="false"), tmp_path,
                                "q_lenient")
    assert [bytes(r.value) for r in rows] == [f"{name}:0".encode()]  # the new log, all of it


def test_position_in_a_truncated_ledger_is_skipped_only_without_fail_on_data_loss(
        spark, bk, uri, log_name, tmp_path):
    name, other = log_name("a"), log_name("b")
    fill(bk, name, 30, roll_every=10)
    fill(bk, other, 1)
    ledgers = log_ledgers(bk, name)
    gone, first = ledgers[0], ledgers[2]
    truncate_log(bk, name, before=Position(first.ledger_id, 0, first.index))
    start = f'{{"{name}": {{"ledger": {gone.ledger_id}, "entry": 4, "index": {gone.index}}}}}'

    # Batch: skipped to the new earliest position with false...
    rows = read_log(spark, uri, name, startingOffsets=start, failOnDataLoss="false").collect()
    assert sorted(r.entry_id for r in rows) == list(range(10))
    assert {r.ledger_id for r in rows} == {first.ledger_id}
    # ...a failure naming what was lost with true.
    with pytest.raises(PySparkException) as failed:
        read_log(spark, uri, name, startingOffsets=start).collect()
    assert f"truncated past entry 4 of ledger {gone.ledger_id}" in str(failed.value)
    assert f"now starts at entry 0 of ledger {first.ledger_id}" in str(failed.value)
    # A ledger never part of the log is an error whatever failOnDataLoss says.
    stranger = log_ledgers(bk, other)[0]
    for index in (first.index, -1):
        pos = {"ledger": stranger.ledger_id, "entry": 0}
        if index >= 0:
            pos["index"] = index
        with pytest.raises(PySparkException, match=f"ledger {stranger.ledger_id} .*never "
                                                   f"part of"):
            read_log(spark, uri, name, failOnDataLoss="false",
                     startingOffsets=f'{{"{name}": {str(pos).replace(chr(39), chr(34))}}}'
                     ).collect()

    # Stream: the same position starts a query at the new earliest position.
    rows, _ = run_available_now(stream(spark, uri, name, startingOffsets=start,
                                       failOnDataLoss="false"), tmp_path, "q_trunc")
    assert sorted(r.entry_id for r in rows) == list(range(10))

    # Without its index (a position copied from a log line or a dashboard), the log's
    # record of what truncation removed tells the truncated ledger apart (issue 25, 4).
    bare = f'{{"{name}": {{"ledger": {gone.ledger_id}, "entry": 4}}}}'
    rows = read_log(spark, uri, name, startingOffsets=bare, failOnDataLoss="false").collect()
    assert sorted(r.entry_id for r in rows) == list(range(10))
    assert {r.ledger_id for r in rows} == {first.ledger_id}
    with pytest.raises(PySparkException) as failed:
        read_log(spark, uri, name, startingOffsets=bare).collect()
    message = str(failed.value)
    assert f"truncated past entry 4 of ledger {gone.ledger_id}" in message
    assert "failOnDataLoss=true" in message and '"index"' not in message
    rows, _ = run_available_now(stream(spark, uri, name, startingOffsets=bare,
                                       failOnDataLoss="false"), tmp_path, "q_trunc_bare")
    assert sorted(r.entry_id for r in rows) == list(range(10))
