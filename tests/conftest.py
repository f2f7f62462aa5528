"""Shared fixtures: a real ZooKeeper (pyspark's jars) and real bookie processes.

Every process a test starts is stopped by its PID at teardown.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bk_spark.sandbox import (
    BookieProcess,
    ZooKeeperServer,
    free_port,
    start_bookies,
    stop_bookies,
    wait_for_registrations,
)

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


@pytest.fixture(autouse=True)
def _bk_environment_restored() -> Iterator[None]:
    """Each test sees the environment the session started with: ``bk``'s global options
    (``--zk-auth-file``, ``--tls-*``) set ``BK_*`` variables in the process that runs it,
    and a test calling ``bk`` in-process must not hand its credentials to the next test."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("BK_")}
    yield
    for k in [k for k in os.environ if k.startswith("BK_") and k not in saved]:
        del os.environ[k]
    os.environ.update(saved)


def small_journals(extra_args: list[str] | None) -> list[str]:
    """Test bookies preallocate 8 MiB journal files, not 64 MiB: a session starts about a
    hundred bookies, and preallocated journals once filled 15 GB of the disk per run."""
    args = list(extra_args or [])
    if "--journal-file-size-mb" not in args:
        args += ["--journal-file-size-mb", "8"]
    return args


@pytest.fixture(scope="session")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """One real ZooKeeper server for the whole test session."""
    zk = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"), port=free_port())
    zk.start()
    yield zk
    zk.stop()


@pytest.fixture
def metadata_uri(zk_server: ZooKeeperServer) -> str:
    """A metadata service URI with a root of its own, so tests never see each other."""
    return f"zk://{zk_server.connect_string}/t-{uuid.uuid4().hex[:12]}"


class Cluster:
    """Bookie processes registered under one metadata service URI."""

    def __init__(self, uri: str, base: Path) -> None:
        self.uri = uri
        self.base = base
        self.bookies: list[BookieProcess] = []

    def add_bookie(self, extra_args: list[str] | None = None, wait: bool = True
                   ) -> BookieProcess:
        return self.add_bookies(1, extra_args, wait)[0]

    def add_bookies(self, n: int, extra_args: list[str] | None = None, wait: bool = True
                    ) -> list[BookieProcess]:
        """Start ``n`` more bookies side by side (``wait``: until all are registered)."""
        new = [BookieProcess(self.uri, self.base / f"bookie-{len(self.bookies) + i}",
                             port=free_port(), extra_args=small_journals(extra_args))
               for i in range(n)]
        self.bookies += new
        start_bookies(new)
        if wait:
            wait_for_registrations(self.uri, len([x for x in self.bookies if x.proc]))
        return new

    def restart(self, b: BookieProcess) -> None:
        b.stop()
        b.start()

    def stop(self) -> None:
        for b in self.bookies:
            b.resume()
        stop_bookies(self.bookies)
        for b in self.bookies:
            b.drop_data()  # the disk a session needs stays small; bookie logs stay


@pytest.fixture
def cluster_factory(metadata_uri: str, tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    """``cluster_factory(n, extra_args=[...])`` starts ``n`` real bookies."""
    made: list[Cluster] = []

    def make(n: int = 3, extra_args: list[str] | None = None) -> Cluster:
        c = Cluster(metadata_uri, tmp_path / f"cluster-{len(made)}")
        made.append(c)
        c.add_bookies(n, extra_args, wait=False)
        wait_for_registrations(metadata_uri, n)
        return c

    yield make
    for c in made:
        c.stop()


@pytest.fixture
def cluster(cluster_factory: Callable[..., Cluster]) -> Cluster:
    """Three real bookies (the default test cluster)."""
    return cluster_factory(3)


@pytest.fixture(scope="module")
def module_cluster(zk_server: ZooKeeperServer,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three real bookies shared by the tests of one module (under a root of their own).
    A test that pauses, kills or restarts a bookie brings it back before it ends."""
    uri = f"zk://{zk_server.connect_string}/t-{uuid.uuid4().hex[:12]}"
    c = Cluster(uri, tmp_path_factory.mktemp("module-cluster"))
    c.add_bookies(3, wait=False)
    wait_for_registrations(uri, 3)
    yield c
    c.stop()


def restart_wiped_bookie(bookie: BookieProcess) -> None:
    """The one way tests bring a bookie back after a lost disk: ``kill -9``, its data
    directory emptied (journal, index, entry logs), started again at the same address.

    Its directories lost their stamps while ZooKeeper keeps its cookie, so the start-up
    decision is REPAIR (self-repair, the default); run a test with
    ``BK_TEST_UNSAFE_SERVE_LOST_DATA=1`` to see the old behaviour (the wiped bookie serves as
    if nothing happened)."""
    bookie.kill()
    bookie.drop_data()
    bookie.start()


@pytest.fixture
def restart_wiped() -> Callable[[BookieProcess], None]:
    """:func:`restart_wiped_bookie`, for tests."""
    return restart_wiped_bookie
