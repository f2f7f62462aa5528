"""The Spark sink under faults: exactly once across driver kills and restarts.

The invariant (:meth:`SparkSinkWorkload.check`): after the streaming driver was killed with
``kill -9`` and restarted from its checkpoint (any number of times, while bookies and
ZooKeeper fail around it), once it caught up with the input and was killed once more, the
output log holds exactly the input rows: every payload of the input log once, nothing else
(compared as multisets: partitions of one micro-batch may land in any order).

The input is the schedule's rolling log (``G0``), written by a writer process the schedule
also kills and fences: whatever that log holds after its recovery is the input. The driver
is :mod:`bk_spark.faults.spark_driver`; it runs in its own session so that killing its
process group by the driver's PID takes the JVM and the Python workers with it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from bk_spark.core.client import BookKeeper
from bk_spark.core.log import (
    committed_txn,
    create_log,
    log_ledgers,
    log_metadata,
    open_log_reader,
)
from bk_spark.errors import LogExistsError, LogNotFoundError
from bk_spark.faults.checker import Findings, read_log
from bk_spark.faults.plan import Schedule

CATCH_UP_TIMEOUT = 600.0
FIRST_BATCH_TIMEOUT = 180.0
MAX_ENTRIES_PER_TRIGGER = 500


def spark_sink_available() -> bool:
    """True when the ``bookkeeper`` Spark data source and PySpark can be imported."""
    try:
        import pyspark  # noqa: F401

        from bk_spark.datasource import BookKeeperDataSource  # noqa: F401
    except ImportError:
        return False
    return True


class SparkSinkWorkload:
    """A streaming query copying the schedule's input log into an output log."""

    def __init__(self, uri: str, schedule: Schedule, log_dir: Path) -> None:
        self.uri = uri
        self.src = next(g.log for g in schedule.log_writers if g.name == "G0")
        self.dst = f"s{schedule.seed}-spark-out"
        self.checkpoint = log_dir / "spark-checkpoint"
        self.log_dir = log_dir
        self.driver: subprocess.Popen | None = None
        self.kills = 0
        self.starts = 0
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- the driver
    def _spawn(self) -> subprocess.Popen:
        from bk_spark.datasource.writer import sink_key

        self.sink_key = sink_key(str(self.checkpoint))
        root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (root, os.environ.get("PYTHONPATH")) if p)}
        args = [sys.executable, "-m", "bk_spark.faults.spark_driver", self.uri, self.src,
                self.dst, str(self.checkpoint), "--max-entries", str(MAX_ENTRIES_PER_TRIGGER)]
        self.starts += 1
        out = open(self.log_dir / f"spark-driver-{self.starts}.log", "wb")
        try:
            return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env,
                                    start_new_session=True)
        finally:
            out.close()

    def start(self, bk: BookKeeper, timeout: float = FIRST_BATCH_TIMEOUT) -> None:
        """Create the input log and start the query; return once it runs (so that the
        schedule's faults meet a running query, not a starting JVM)."""
        try:
            create_log(bk, self.src)
        except LogExistsError:
            pass
        with self._lock:
            self.driver = self._spawn()
        out = self.log_dir / f"spark-driver-{self.starts}.log"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if b"started" in out.read_bytes() or self.driver.poll() is not None:
                return
            time.sleep(0.3)

    def _kill(self) -> None:
        d, self.driver = self.driver, None
        if d is not None and d.poll() is None:
            try:
                os.killpg(d.pid, signal.SIGKILL)  # its own session: only what it started
            except ProcessLookupError:
                pass
        if d is not None:
            d.wait()

    def committed_batches(self, bk: BookKeeper) -> int:
        try:
            last = committed_txn(log_metadata(bk, self.dst), self.sink_key)
        except LogNotFoundError:
            return 0
        return 0 if last is None else last + 1

    def kill_driver(self, bk: BookKeeper, after_commit_s: float = 0.0,
                    timeout: float = FIRST_BATCH_TIMEOUT) -> str:
        """``kill -9`` the driver ``after_commit_s`` seconds after it committed a new batch
        (or after ``timeout``): right after a commit, or in the middle of the next batch."""
        before = self.committed_batches(bk)
        deadline = time.monotonic() + timeout
        while self.committed_batches(bk) <= before and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(after_commit_s)
        with self._lock:
            self._kill()
            self.kills += 1
        return f"driver killed after {self.committed_batches(bk)} committed batches"

    def restart_driver(self) -> str:
        with self._lock:
            if self.driver is None or self.driver.poll() is not None:
                self.driver = self._spawn()
        return "driver restarted from its checkpoint"

    def stop(self) -> None:
        with self._lock:
            self._kill()

    # ---------------------------------------------------------------- the invariant
    def output_rows(self, bk: BookKeeper) -> int:
        """Rows the sink committed so far (the closed ledgers it added to the output)."""
        try:
            return sum(info.last_entry_id + 1 for info in log_ledgers(bk, self.dst)
                       if info.is_described)
        except LogNotFoundError:
            return 0

    def check(self, bk: BookKeeper) -> Findings:
        """Let the driver (restarted from its checkpoint whenever it is not running) catch
        up with the input log, ``kill -9`` it once more, then compare output and input as
        multisets. Call after the input log was recovered (its last ledger closed)."""
        f = Findings()
        src = read_log(bk, self.src)
        if isinstance(src, Exception):
            f.add("spark_mismatch", [f"input log unreadable: {src!r}"])
            return f
        want = Counter(payload for _lid, _eid, payload in src)
        deadline = time.monotonic() + CATCH_UP_TIMEOUT
        while self.output_rows(bk) < len(src) and time.monotonic() < deadline:
            with self._lock:
                if self.driver is None or self.driver.poll() is not None:
                    self.driver = self._spawn()
            time.sleep(0.5)
        with self._lock:
            self._kill()
            self.kills += 1
        f.counts["spark_runs"] += 1
        f.counts["spark_driver_kills"] += self.kills
        try:
            with open_log_reader(bk, self.dst, "earliest") as r:
                out = Counter(rec.payload for rec in r.read_available())
        except LogNotFoundError:
            out = Counter()
        missing, extra = want - out, out - want
        f.add("lost", [f"spark sink: input row {p[:40]!r} x{n} missing from {self.dst}"
                       for p, n in missing.items()], count=sum(missing.values()))
        f.add("duplicates", [f"spark sink: {p[:40]!r} x{n} too many in {self.dst}"
                             for p, n in extra.items()], count=sum(extra.values()))
        if missing or extra:
            f.add("spark_mismatch", [f"output != input after {self.kills} driver kills and "
                                     f"{self.starts} runs (driver logs in {self.log_dir})"])
        f.notes.append(f"spark sink: {sum(want.values())} input rows, {sum(out.values())} "
                       f"output rows, {self.kills} driver kills, {self.starts} runs")
        return f
