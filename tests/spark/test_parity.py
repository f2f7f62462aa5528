"""What Kafka's connector users reach for: logs by pattern, starting and ending timestamps
per log, and the lag a query shows (progress, `bk log show`)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import defaultdict

import pytest
from pyspark.errors import PySparkException
from spark_helpers import read_log
from test_stream import fill

from bk_spark.log import open_log_writer


def number(row) -> int:  # type: ignore[no-untyped-def]
    """The running number a test wrote into the entry (``<log>:<n>``)."""
    return int(bytes(row.value).rsplit(b":", 1)[1])


def entries_by_log(rows) -> dict[str, list[int]]:  # type: ignore[no-untyped-def]
    out: dict[str, list[int]] = defaultdict(list)
    for r in rows:
        out[r.log].append(number(r))
    return {k: sorted(v) for k, v in out.items()}


def stamped_log(bk, name: str, groups: int = 3, per_group: int = 10) -> None:  # type: ignore[no-untyped-def]
    """``groups`` ledgers of ``per_group`` entries, each ledger appended at a later ms."""
    w = open_log_writer(bk, name)
    for g in range(groups):
        if g:
            time.sleep(0.02)
            w.roll()
        for f in [w.append_async(f"{name}:{g * per_group + i}".encode())
                  for i in range(per_group)]:
            f.result()
    w.close()


def read_pattern(spark, uri: str, pattern: str, **options: str):  # type: ignore[no-untyped-def]
    r = spark.read.format("bookkeeper").option("metadataServiceUri", uri) \
        .option("logPattern", pattern)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def test_batch_reads_logs_by_pattern_between_per_log_timestamps(spark, bk, uri, log_name):
    a, b, c = log_name("a"), log_name("b"), log_name("c")
    for name in (a, b, c):
        stamped_log(bk, name)
    pattern = a[:-2] + "-[ab]"  # a and b, not c
    every = read_pattern(spark, uri, pattern).collect()
    assert entries_by_log(every) == {a: list(range(30)), b: list(range(30))}
    ts = {(r.log, number(r)): int(r.timestamp.timestamp() * 1000) for r in every}

    # startingOffsetsByTimestamp per log; endingTimestamp for all; per-log ending wins.
    rows = read_pattern(spark, uri, pattern,
                        startingOffsetsByTimestamp=json.dumps({a: ts[a, 10], b: ts[b, 20]}),
                        endingTimestamp=str(ts[a, 20]),
                        endingOffsetsByTimestamp=json.dumps({b: ts[b, 29] + 10_000})
                        ).collect()
    assert entries_by_log(rows) == {a: list(range(10, 20)), b: list(range(20, 30))}
    rows = read_log(spark, uri, a, startingTimestamp=str(ts[a, 20])).collect()
    assert sorted(number(r) for r in rows) == list(range(20, 30))

    # A starting timestamp past the end: Kafka's strategy option decides.
    future = json.dumps({a: ts[a, 29] + 60_000})
    with pytest.raises(PySparkException, match="'startingOffsetsByTimestamp': log .* has no "
                                               "entry appended at or after"):
        read_pattern(spark, uri, pattern, startingOffsetsByTimestamp=future).collect()
    rows = read_pattern(spark, uri, pattern, startingOffsetsByTimestamp=future,
                        startingOffsetsByTimestampStrategy="latest").collect()
    assert entries_by_log(rows) == {b: list(range(30))}


def bk_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bk_spark.cli", *args], capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)


def wait_for(predicate, timeout: float = 120.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def _end_offsets(progress: list) -> dict:
    """The per-log end offsets of the last progress (empty: none yet)."""
    if not progress or not progress[-1]["sources"][0].get("endOffset"):
        return {}
    return json.loads(progress[-1]["sources"][0]["endOffset"])


def test_running_query_by_pattern_picks_up_new_logs_and_shows_its_lag(
        spark, bk, uri, log_name, tmp_path):
    a, b = log_name("a"), log_name("b")
    stamped_log(bk, a)
    first = read_log(spark, uri, a).collect()
    t10 = int([r for r in first if number(r) == 10][0].timestamp.timestamp() * 1000)
    got: list = []

    def collect(batch_df, _batch_id):  # type: ignore[no-untyped-def]
        got.extend(batch_df.collect())

    df = (spark.readStream.format("bookkeeper").option("metadataServiceUri", uri)
          .option("logPattern", a[:-2] + "-[ab]").option("maxEntriesPerTrigger", "8")
          .option("startingOffsetsByTimestamp", json.dumps({a: t10})).load())
    ckpt = tmp_path / "q_pattern"
    q = (df.writeStream.foreachBatch(collect).option("checkpointLocation", str(ckpt))
         .trigger(processingTime="200 milliseconds").start())
    try:
        wait_for(lambda: len(got) >= 20 or q.exception() is not None)
        fill(bk, b, 5)  # a new log matching the pattern, found by the running query
        wait_for(lambda: len(got) >= 25 or q.exception() is not None)
        # a batch's rows reach the sink before its progress reaches recentProgress
        wait_for(lambda: b in _end_offsets(q.recentProgress) or q.exception() is not None)
        assert q.exception() is None
        progress = q.recentProgress
    finally:
        q.stop()
    assert entries_by_log(got) == {a: list(range(10, 30)), b: list(range(5))}
    # The lag per log is in the progress' latestOffset: 20 entries to read, 8 per batch.
    lags = [json.loads(p["sources"][0]["latestOffset"])[a]["lag"]
            for p in progress if p["sources"][0]["latestOffset"]]
    assert {"entries": 12} .items() <= lags[0].items() and lags[0]["bytes"] > 0
    assert lags[-1] == {"entries": 0, "bytes": 0}
    # Per-log offsets, each naming its log's incarnation, in the progress and checkpoint.
    end = json.loads(progress[-1]["sources"][0]["endOffset"])
    assert set(end) == {a, b} and all(end[n]["log_id"] for n in end)

    # `bk log show --checkpoint`: where the stopped query is, and how far behind.
    fill(bk, a, 3)
    shown = bk_cli("log", "show", a, "-m", uri, "--checkpoint", str(ckpt), "--json")
    assert shown.returncode == 0, shown.stderr
    query = json.loads(shown.stdout)["query"]
    assert query["lag_entries"] == 3 and query["lag_bytes"] > 0
