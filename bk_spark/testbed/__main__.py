"""``python -m bk_spark.testbed`` (``make cluster-demo``): bk-spark beyond one machine.

Brings the test bed up (3 ZooKeepers, 5 bookies, a Spark master and 2 workers, each on its
own host), then, as a new user would: lists the bookies, runs ``bk simpletest``, runs the
examples unchanged with ``spark-submit --master spark://...`` while a ZooKeeper leader and a
bookie are killed, restarts them, injects network partitions (namespaces only), reads the log
back through a Spark Connect server, and tears everything down, checking nothing is left.
Exit code 0 only if every step held.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import signal
import sys
import time

from bk_spark.testbed import TestBed, TestBedConfig, leftover_namespaces
from bk_spark.testbed.bed import bk_command
from bk_spark.testbed.network import remove_leftovers
from bk_spark.testbed.scenario import (
    connect_batch_read,
    examples_through_standalone_master,
    log_ensembles,
    network_faults,
    simpletest,
    streaming_through_leader_kill_and_rolling_restart,
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bk_spark.testbed", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--loopback", action="store_true",
                   help="use loopback addresses even where namespaces are available")
    p.add_argument("--rows", type=int, default=2000, help="events per produced batch")
    p.add_argument("--no-connect", action="store_true", help="skip the Spark Connect read")
    p.add_argument("--streaming-only", action="store_true",
                   help="only the streaming scenario (a live query through a ZooKeeper "
                        "leader kill and a rolling restart of every bookie; make faults)")
    p.add_argument("--keep", action="store_true",
                   help="keep the bed's logs and data directory after a successful run")
    p.add_argument("--clean", action="store_true",
                   help="only remove test-bed namespaces (and their processes) that a killed "
                        "run left behind")
    args = p.parse_args(argv)
    if args.clean:
        print(f"removed: {remove_leftovers() or 'nothing'}")
        return 0
    # SIGTERM (a CI timeout, `timeout`, kill) unwinds like Ctrl-C: the bed tears itself down.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    def step(title: str) -> None:
        print(f"\n== {title}", flush=True)

    t0 = time.monotonic()
    bed = TestBed(TestBedConfig(use_namespaces=False if args.loopback else None, links=True))
    prefix = ""
    with bed:
        assert bed.network is not None
        prefix = bed.network.prefix
        step(f"test bed up in {time.monotonic() - t0:.0f}s (logs and data: {bed.base})")
        print(bed.describe())
        if args.streaming_only:
            _streaming(bed, step)
            step("tear down")
            bed.stop()
            return _teardown_report(bed, prefix, args, t0)
        step("bk bookies (from the client host)")
        print(bed.run([bk_command(), "bookies", "-m", bed.metadata_service_uri]).stdout.rstrip())
        step("bk simpletest")
        print(simpletest(bed))
        step("the examples through the standalone master; after batch 0 of produce_events "
             "the ZooKeeper leader and a bookie are killed (-9)")
        run = examples_through_standalone_master(bed, rows=args.rows)
        for name, out in run.outputs.items():
            print(f"--- spark-submit --master {bed.spark_master_url} examples/{name}")
            print(out)
        print(f"--- killed ZooKeeper leader {run.killed_leader} (new leader {run.new_leader})"
              f" and bookie {run.killed_bookie}; executors ran on "
              + ", ".join(f"{w}: {' '.join(a)}" for w, a in run.executor_apps.items()))
        print("--- the ensembles of log 'events' (bk log show, bk ledger show):")
        print("\n".join(log_ensembles(bed, "events")))
        step(f"restart {run.killed_leader} and {run.killed_bookie}")
        bed.restart(run.killed_leader)
        bed.restart(run.killed_bookie)
        bed.wait_bookies(bed.config.bookies)
        print(f"ensemble whole again (leader {bed.wait_zk_leader()}), "
              f"{bed.config.bookies} bookies registered")
        step("network faults")
        summary = network_faults(bed)
        print("\n".join(summary))
        if not args.no_connect:
            step("batch read through Spark Connect (SparkSession.builder.remote)")
            print(connect_batch_read(bed, "events", expect_rows=args.rows * 3))
        _streaming(bed, step)
        step("tear down")
    return _teardown_report(bed, prefix, args, t0)


def _streaming(bed: TestBed, step) -> None:
    step("a live streaming query (spark-submit --master spark://...) through a ZooKeeper "
         "leader killed and a rolling restart of every bookie")
    s = streaming_through_leader_kill_and_rolling_restart(bed)
    c = s.counts
    print(f"killed ZooKeeper leader {s.killed_leader} (new leader {s.new_leader}), restarted "
          f"one by one: {' '.join(s.restarted)}; driver runs: {s.driver_runs}")
    print(f"exactly once: input {c['input']} rows, output {c['output']} rows, missing "
          f"{c['missing']}, duplicates {c['duplicates']} ({s.seconds:.0f}s)")


def _teardown_report(bed: TestBed, prefix: str, args: argparse.Namespace, t0: float) -> int:
    left = [ns for ns in leftover_namespaces() if ns.startswith(prefix)]
    alive = [p.name for p in bed.procs.values() if p.alive()]
    print(f"stopped {len(bed.procs)} processes by PID; namespaces left: {left or 'none'}; "
          f"processes left: {alive or 'none'}")
    if left or alive:
        return 1
    if not args.keep:  # ~100 MB of journals, logs and Spark work directories
        shutil.rmtree(bed.base, ignore_errors=True)
    print(f"cluster demo OK in {time.monotonic() - t0:.0f}s"
          + (f" (logs and data kept in {bed.base})" if args.keep else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
