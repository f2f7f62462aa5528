"""The short mode of the fault suite (inside ``make test``): 14 seeded schedules, one led by
each kind of fault, on one shared cluster (ZooKeeper + 5 bookies), each checked by the
independent checker.

Each schedule runs writer processes (ledgers, a rolling log, sometimes two dueling log
writers) while it kills, pauses, fills, corrupts and expires bookies, restarts ZooKeeper,
and kills, pauses and fences writers. After it:

* every entry acknowledged to any client is readable after recovery with its exact bytes,
  and a closed ledger's last entry is >= every acknowledged entry (``lost`` = 0);
* all readers see one and the same sequence of every ledger and log (``divergent`` = 0);
* no log holds an append twice (``duplicates`` = 0) or interleaves two writers;
* after fencing the old writer never gets a success;
* a fenced (or fenced and deleted) ledger never acknowledges its old writer's adds;
* a wrong password can neither open, fence nor add;
* after a bookie lost forever (seed 3) or wiped (seed 9; seed 13, Qw = Qa: wiped, then killed -9
  while it repairs), a wiped bookie's self-repair completes (``repair_incomplete`` = 0)
  and AutoRecovery in the bookies brings every ledger back to full replication within
  the bound (``not_healed`` = 0);
* one more schedule (marked ``long``: ``make test-long`` and ``make faults`` run it, and the
  long schedules run the sink every tenth seed) also runs the Spark sink (a streaming query
  copying the rolling log into another log): after its driver is killed with ``kill -9`` and
  restarted from its checkpoint, the output log holds exactly the input rows. In
  ``make test``, ``tests/spark/test_sink.py`` keeps the sink's kill -9 replay.

A failing schedule prints its seed and the command that replays it; the summary of the run
(faults injected by kind, acknowledged entries, lost, divergent reads, duplicates) is
printed at the end of the module.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bk_spark.faults.cluster import FaultCluster
from bk_spark.faults.plan import SHORT_MODE_SEEDS, generate
from bk_spark.faults.runner import Runner, Summary
from bk_spark.faults.spark_sink import spark_sink_available

#: The short-mode schedule that also runs the Spark sink.
SPARK_SEED = 7


@pytest.fixture(scope="module")
def run(fault_cluster: FaultCluster, tmp_path_factory: pytest.TempPathFactory,
        fault_summaries: list[Summary]) -> tuple[Runner, Summary]:
    """A runner on the shared cluster and the summary it adds to (printed in pytest's
    terminal summary at the end of the session)."""
    work = Path(tmp_path_factory.mktemp("fault-schedules"))
    summary = Summary(mode="short")
    fault_summaries.append(summary)
    return Runner(fault_cluster, work), summary


@pytest.mark.timeout(600)
@pytest.mark.parametrize("seed", SHORT_MODE_SEEDS)
def test_schedule_keeps_every_guarantee(run: tuple[Runner, Summary], seed: int) -> None:
    runner, summary = run
    result = runner.run(generate(seed, "short", n_bookies=len(runner.cluster.slots)))
    summary.add(result)
    assert result.ok, result.report()
    assert result.findings.acknowledged > 0, result.report()


@pytest.mark.long
@pytest.mark.timeout(1200)
def test_spark_sink_output_is_exactly_the_input_across_driver_kills(
        run: tuple[Runner, Summary]) -> None:
    assert spark_sink_available(), "the bookkeeper Spark data source cannot be imported"
    runner, summary = run
    schedule = generate(SPARK_SEED, "short", n_bookies=len(runner.cluster.slots), spark=True)
    result = runner.run(schedule)
    summary.add(result)
    assert result.ok, result.report()
    assert result.findings.counts["spark_runs"] == 1, result.report()
    assert result.findings.counts["spark_driver_kills"] >= 2, result.report()
