"""Helpers shared by the Spark tests (reading a log, a writer in another process)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROCS = Path(__file__).parent / "procs"


def read_log(spark, uri: str, log: str, **options: str):  # type: ignore[no-untyped-def]
    r = spark.read.format("bookkeeper").option("metadataServiceUri", uri).option("log", log)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def offload_now(bk, name: str, target: Path, lag_ms: int, password: str) -> None:  # type: ignore[no-untyped-def]
    """Give log ``name`` an offload policy of 0 to ``target`` and run an offloader's pass
    twice (the second passes a deletion lag of 0: only the Parquet copy is left)."""
    from bk_spark.log import update_log_properties
    from bk_spark.offload.metrics import OffloadMetrics
    from bk_spark.offload.offloader import Offloader, OffloaderConfig
    from bk_spark.protocol import offload_rules as rules

    update_log_properties(bk, name, {rules.POLICY_PROPERTY: rules.OffloadPolicy(
        after="0", target=target.as_uri(), deletion_lag_ms=lag_ms).to_json()})
    off = Offloader(bk, "t", OffloaderConfig(passwords=(b"", password.encode())),
                    OffloadMetrics())
    off.tick()
    off.tick()


class WriterProc:
    """tests/integration/procs/log_writer.py in its own process (killed by PID)."""

    def __init__(self, uri: str, name: str, tag: str, *args: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        script = ROOT / "tests" / "integration" / "procs" / "log_writer.py"
        self.proc = subprocess.Popen([sys.executable, str(script), uri, name, tag, *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, env=env)
        self.lines: list[str] = []
        self._cv = threading.Condition()
        threading.Thread(target=self._collect, daemon=True).start()

    def _collect(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cv:
                self.lines.append(line.strip())
                self._cv.notify_all()

    def acks(self) -> list[str]:
        with self._cv:
            return [line for line in self.lines if line.startswith("ack ")]

    def wait_for(self, predicate: Callable[[list[str]], bool], timeout: float = 60.0) -> None:
        with self._cv:
            if not self._cv.wait_for(lambda: predicate(self.lines), timeout):
                raise AssertionError(f"writer process timed out; last lines {self.lines[-5:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
