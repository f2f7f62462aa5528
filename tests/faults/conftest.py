"""Fixtures of the fault suite: one fault cluster (its own ZooKeeper, five bookies) shared
by every test of tests/faults that needs one; each such test heals it when done."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bk_spark.faults.cluster import FaultCluster
from bk_spark.faults.runner import Summary

#: Summaries of fault-schedule runs, printed with pytest's terminal summary.
SUMMARIES = pytest.StashKey[list[Summary]]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[SUMMARIES] = []


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:  # type: ignore[no-untyped-def]
    for summary in config.stash.get(SUMMARIES, []):
        if summary.schedules:
            terminalreporter.section("fault schedules")
            for line in summary.render().splitlines():
                terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def fault_summaries(request: pytest.FixtureRequest) -> list[Summary]:
    """Summaries added here are printed in pytest's terminal summary."""
    return request.config.stash[SUMMARIES]


@pytest.fixture(scope="session")
def fault_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultCluster]:
    """ZooKeeper plus five bookies of the fault suite, stopped by PID at the end."""
    cluster = FaultCluster(tmp_path_factory.mktemp("fault-cluster"), n_bookies=5)
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture
def healed(fault_cluster: FaultCluster) -> Iterator[FaultCluster]:
    """The fault cluster, healed again (every bookie up and writable) after the test."""
    yield fault_cluster
    fault_cluster.heal()
    fault_cluster.wait_writable()
