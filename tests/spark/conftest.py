"""Spark tests: ONE local SparkSession and ONE real bookie cluster for the whole session.

The session never registers the data source: every test that reads ``format("bookkeeper")``
also checks that Spark discovers it (the top-level module ``pyspark_bookkeeper``, found on
the workers' ``PYTHONPATH``). Tests isolate themselves by log name. The bookies export
metrics, so tests can count the entries they serve.
"""

from __future__ import annotations

import os
import re
import sys
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bk_spark.core import BookKeeper
from bk_spark.datasource import connections
from bk_spark.io.registration import list_bookies
from bk_spark.sandbox import BookieProcess, ZooKeeperServer, free_port, wait_for_registrations

ROOT = Path(__file__).resolve().parents[2]

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
# Spark's Python workers look for pyspark_* modules on their path (discovery).
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)


class SparkCluster:
    """Three bookie processes (with metrics endpoints) under one metadata root."""

    def __init__(self, uri: str, base: Path) -> None:
        self.uri = uri
        self.bookies = [BookieProcess(uri, base / f"bookie-{i}", port=free_port(),
                                      metrics_port=0, extra_args=["--journal-file-size-mb", "8"])
                        for i in range(3)]

    def start(self) -> None:
        for b in self.bookies:
            b.start()
        wait_for_registrations(self.uri, len(self.bookies))

    def stop(self) -> None:
        for b in self.bookies:
            b.stop()
            b.drop_data()

    def entries_read(self) -> int:
        """Entries all bookies have served so far (their ``bookie_read_entries``)."""
        total = 0.0
        for b in list_bookies(self.uri):
            port = b.info.get("metrics_port")
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10
                                          ).read().decode()
            m = re.search(r"^bookie_read_entries_total ([0-9.e+]+)$", text, re.M)
            total += float(m.group(1)) if m else 0.0
        return int(total)


@pytest.fixture(scope="session")
def spark_cluster(zk_server: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[SparkCluster]:
    uri = f"zk://{zk_server.connect_string}/spark-{uuid.uuid4().hex[:8]}"
    c = SparkCluster(uri, tmp_path_factory.mktemp("spark-bookies"))
    c.start()
    yield c
    c.stop()


@pytest.fixture(scope="session")
def uri(spark_cluster: SparkCluster) -> Iterator[str]:
    yield spark_cluster.uri
    connections.close_all()  # clients the tests' own process borrowed, before ZooKeeper stops


@pytest.fixture(scope="session")
def bk(uri: str) -> Iterator[BookKeeper]:
    client = BookKeeper(uri)
    yield client
    client.close()


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    import time

    from pyspark.errors import PySparkRuntimeError
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master("local[2]").appName("bk-spark-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.python.filterPushdown.enabled", "true")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("warehouse")))
               # test_security.py reads it: no secret may reach the event log
               .config("spark.eventLog.enabled", "true")
               .config("spark.eventLog.compress", "false")
               .config("spark.eventLog.dir", str(tmp_path_factory.mktemp("event-log"))))
    for attempt in range(3):  # the JVM gateway occasionally dies at launch on a busy machine
        try:
            session = builder.getOrCreate()
            break
        except PySparkRuntimeError:
            if attempt == 2:
                raise
            time.sleep(2.0)
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def log_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """``log_name("src")``: a log name unique to this test."""
    base = re.sub(r"[^A-Za-z0-9]", "-", request.node.name)[:60]
    tag = uuid.uuid4().hex[:6]
    return lambda suffix="": f"{base}-{tag}" + (f"-{suffix}" if suffix else "")
