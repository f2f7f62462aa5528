"""Beyond one machine: the multi-host test bed (a ZooKeeper ensemble, 5 bookies on 5 hosts,
Spark standalone with 2 workers), each host a network namespace or a loopback address.

One bed serves the module; the scenario is :mod:`bk_spark.testbed.scenario`'s, the same
``make cluster-demo`` runs.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bk_spark.sandbox import pid_alive
from bk_spark.testbed import TestBed, TestBedConfig, leftover_namespaces
from bk_spark.testbed.scenario import (
    examples_through_standalone_master,
    network_faults,
    writer_cut_from_most_bookies,
)


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestBed]:
    with TestBed(TestBedConfig(base_dir=tmp_path_factory.mktemp("bed"))) as b:
        yield b


def test_bookies_register_the_address_other_hosts_reach_them_at(bed: TestBed):
    registered = {b["bookie"] for b in bed.bookies()}
    hosts = {f"{bed.host(f'bk{i}').address}:3181" for i in range(1, 6)}
    assert registered == hosts
    assert bed.zk_leader() is not None


def test_example_runs_on_the_standalone_workers_through_a_zk_leader_and_a_bookie_killed(
        bed: TestBed):
    run = examples_through_standalone_master(bed, rows=1000, batches=3, all_examples=False)
    # The scenario checked the count, the workers' executors and the absence of kazoo noise;
    # here what it did, so a silent no-op cannot pass.
    assert run.killed_leader.startswith("zk") and run.new_leader != run.killed_leader
    assert not bed.procs[run.killed_bookie].alive()
    assert all(run.executor_apps.values()), run.executor_apps
    assert "log 'events': " in run.outputs["produce_events.py"]
    assert "3000 events" in run.outputs["produce_events.py"]


def test_partitions_between_hosts_leave_the_cluster_writable_and_its_entries_readable(
        bed: TestBed):
    for name, proc in list(bed.procs.items()):  # what the previous test killed
        if name[:2] in ("zk", "bk") and not proc.alive():
            bed.restart(name)
    bed.wait_bookies(5)
    summary = network_faults(bed)
    assert bed.network is not None
    if not bed.network.faults:  # loopback hosts: one network, nothing to cut
        assert summary[0].startswith("network faults skipped")
        return
    # Each partition is followed by a simpletest that wrote, read back and verified its
    # entries; the bookie cut from ZooKeeper left the list and came back.
    assert summary[0].startswith("partition writer | ") and "simpletest OK" in summary[0]
    assert "unregistered after" in summary[1] and "registered again" in summary[1]
    assert "elected in" in summary[2] and "simpletest OK" in summary[2]


def test_a_writer_cut_from_most_bookies_fails_with_not_enough_bookies_within_bounded_time(
        bed: TestBed):
    # 2 of 5 bookies reachable, ensemble 3: every ensemble holds a cut bookie. Each cut
    # bookie may cost one add timeout (10 s) before it is excluded; then the adds fail.
    bed.wait_bookies(5)
    run = writer_cut_from_most_bookies(bed, n_cut=3, timeout=150)
    assert run.returncode == 1, run.output
    assert "error:" in run.output and "no other writable bookie" in run.output, run.output
    assert run.seconds < 75, (run.seconds, run.output)
    bed.wait_bookies(5)


def test_a_failing_test_still_stops_every_process_and_removes_the_namespaces(tmp_path):
    bed = TestBed(TestBedConfig(zookeepers=1, bookies=1, spark=False, base_dir=tmp_path))
    with pytest.raises(RuntimeError, match="the test failed"), bed:
        pids = [p.pid for p in bed.procs.values()]
        assert all(pid_alive(p) for p in pids)
        raise RuntimeError("the test failed")
    assert not any(pid_alive(p) for p in pids)
    assert bed.network is not None and not bed.network.hosts
    assert not [ns for ns in leftover_namespaces() if ns.startswith(bed.network.prefix)]
