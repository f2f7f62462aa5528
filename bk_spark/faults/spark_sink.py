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

The side query (:class:`SideLog`): the same driver runs a second query with
``failOnDataLoss=false`` over a log the harness appends to, truncates and deletes and
creates again while the query runs (faults ``spark-log-truncate``, ``spark-log-recreate``).
Its invariant: **no silent skip**. Every acknowledged entry still in the log at the end is
in the side output; an entry destroyed before the query read it may be missing only if the
driver logged the data loss (``failOnDataLoss=false`` warns). ``silent_skips`` counts the
others and must be 0.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from bk_spark.core.client import BookKeeper
from bk_spark.errors import BKError, LogExistsError, LogNotFoundError
from bk_spark.faults.checker import Findings, read_log
from bk_spark.faults.plan import Schedule
from bk_spark.log import (
    LogWriter,
    committed_txn,
    create_log,
    delete_log,
    log_ledgers,
    log_metadata,
    open_log_reader,
    open_log_writer,
    truncate_log,
)
from bk_spark.protocol.log_format import Position

CATCH_UP_TIMEOUT = 600.0
FIRST_BATCH_TIMEOUT = 180.0
MAX_ENTRIES_PER_TRIGGER = 500
#: What the driver prints when failOnDataLoss=false skips lost data (planning.data_lost).
DATA_LOSS_WARNING = b"data loss; going on"

log = logging.getLogger(__name__)


class SideLog:
    """The log the side query reads: appended to by a thread of the harness (a new ledger
    every ``ROLL_EVERY`` entries), truncated and recreated on the schedule's word. Keeps
    every acknowledged payload with its ledger and which of them were destroyed."""

    ROLL_EVERY = 20

    def __init__(self, uri: str, name: str) -> None:
        self.uri = uri
        self.name = name
        self.acked: dict[bytes, int] = {}  # payload -> ledger id
        self.destroyed: set[bytes] = set()
        self.incarnation = 0
        self.truncations = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._writer: LogWriter | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._append_loop, daemon=True,
                                        name="spark-side-appender")
        self._thread.start()

    def _append_loop(self) -> None:
        bk = BookKeeper(self.uri)
        n = 0
        try:
            while not self._stop.is_set():
                with self._lock:
                    try:
                        if self._writer is None:
                            self._writer = open_log_writer(bk, self.name)
                        if n and n % self.ROLL_EVERY == 0:
                            self._writer.roll()
                        payload = f"side-{self.incarnation}-{n}".encode()
                        pos = self._writer.append(payload, timeout=10)
                        self.acked[payload] = pos.ledger_id
                    except BKError as exc:  # bookies or ZooKeeper failing: a new writer
                        log.info("side log writer: %r; opening a new one", exc)
                        self._close_writer()
                n += 1
                self._stop.wait(0.02)
        finally:
            with self._lock:
                self._close_writer()
            bk.close()

    def _close_writer(self) -> None:
        w, self._writer = self._writer, None
        if w is not None:
            try:
                w.close()
            except BKError:
                pass

    def truncate(self, bk: BookKeeper) -> str:
        """Drop every ledger before the writer's current one (the query is usually behind)."""
        with self._lock:
            if self._writer is None:
                return "no writer yet: nothing truncated"
            dropped = set(truncate_log(bk, self.name, Position(self._writer.ledger_id, 0)))
            self.destroyed |= {p for p, lid in self.acked.items() if lid in dropped}
            self.truncations += 1
            return f"side log truncated: {len(dropped)} ledgers dropped"

    def recreate(self, bk: BookKeeper) -> str:
        """Delete the log and create it again (the appender goes on in the new one)."""
        with self._lock:
            self._close_writer()
            delete_log(bk, self.name)
            self.destroyed |= set(self.acked)
            self.incarnation += 1
            create_log(bk, self.name)
            return f"side log deleted and created again (incarnation {self.incarnation})"

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)

    def surviving(self) -> set[bytes]:
        return set(self.acked) - self.destroyed



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
        self.side = SideLog(uri, f"s{schedule.seed}-spark-side")
        self.side_dst = f"s{schedule.seed}-spark-side-out"
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
                self.dst, str(self.checkpoint), "--max-entries", str(MAX_ENTRIES_PER_TRIGGER),
                "--side", self.side.name, self.side_dst,
                str(self.log_dir / "spark-side-checkpoint")]
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
        for name in (self.src, self.side.name):
            try:
                create_log(bk, name)
            except LogExistsError:
                pass
        self.side.start()
        with self._lock:
            self.driver = self._spawn()
        out = self.log_dir / f"spark-driver-{self.starts}.log"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if b"started" in out.read_bytes() or self.driver.poll() is not None:
                break
            time.sleep(0.3)
        # The side query holds a position in the side log before any fault (a log deleted
        # before a query ever planned a batch of it holds nothing the query lost).
        while self.output_rows(bk, self.side_dst) == 0 and time.monotonic() < deadline \
                and self.driver.poll() is None:
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
        self.side.stop()
        with self._lock:
            self._kill()

    # ---------------------------------------------------------------- the invariant
    def output_rows(self, bk: BookKeeper, log: str | None = None) -> int:
        """Rows a sink committed so far (the closed ledgers it added to its output log)."""
        try:
            return sum(info.last_entry_id + 1 for info in log_ledgers(bk, log or self.dst)
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
        self.side.stop()
        survivors = self.side.surviving()
        deadline = time.monotonic() + CATCH_UP_TIMEOUT
        while (self.output_rows(bk) < len(src) or
               not survivors <= set(self._side_output(bk))) and time.monotonic() < deadline:
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
        self._check_side(bk, f)
        return f

    def _side_output(self, bk: BookKeeper) -> Counter:
        try:
            with open_log_reader(bk, self.side_dst, "earliest") as r:
                return Counter(rec.payload for rec in r.read_available())
        except LogNotFoundError:
            return Counter()

    def _check_side(self, bk: BookKeeper, f: Findings) -> None:
        """No silent skip: surviving entries all read; destroyed unread ones only with a
        data-loss warning in the driver's output."""
        side = self.side
        out = self._side_output(bk)
        survivors = side.surviving()
        unread_survivors = sorted(survivors - set(out))
        lost_unread = sorted(side.destroyed - set(out))
        warnings = sum(p.read_bytes().count(DATA_LOSS_WARNING)
                       for p in self.log_dir.glob("spark-driver-*.log"))
        silent = list(unread_survivors)
        if lost_unread and not warnings:
            silent += lost_unread
        f.add("silent_skips", [f"side query: {p!r} never read" + (
            " (still in the log)" if p in survivors else " (destroyed, no data-loss warning)")
            for p in silent])
        dups = {p: n for p, n in out.items() if n > 1}
        f.add("duplicates", [f"side query: {p!r} x{n} in {self.side_dst}"
                             for p, n in dups.items()], count=sum(n - 1 for n in dups.values()))
        f.counts["spark_side_lost_with_warning"] += len(lost_unread) if warnings else 0
        f.counts["spark_data_loss_warnings"] += warnings
        f.notes.append(
            f"spark side query (failOnDataLoss=false): {len(side.acked)} entries acknowledged "
            f"in {side.incarnation + 1} incarnations, {side.truncations} truncations, "
            f"{len(side.destroyed)} destroyed ({len(lost_unread)} before being read), "
            f"{sum(out.values())} read, {warnings} data-loss warnings, silent skips: "
            f"{len(silent)}")
