"""``python -m bk_spark.faults``: run fault schedules and print their summary.

    python -m bk_spark.faults --schedules 200          # make faults (long schedules)
    python -m bk_spark.faults --seed 1234              # replay one schedule
    python -m bk_spark.faults --seed 7 --mode short    # replay a schedule of make test
    python -m bk_spark.faults --seed 7 --mode short --spark    # ... with the Spark sink
    python -m bk_spark.faults --network --schedules 24 # make faults-network: the test bed

Exit code 0 when every schedule kept every invariant, 1 otherwise.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from bk_spark.faults.cluster import Cluster, FaultCluster
from bk_spark.faults.plan import generate
from bk_spark.faults.runner import Runner, Summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bk_spark.faults", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, help="run only the schedule of this seed (replay)")
    p.add_argument("--schedules", type=int, default=200, help="how many schedules to run")
    p.add_argument("--first-seed", type=int, default=None,
                   help="seed of the first schedule (default: from the clock, printed)")
    p.add_argument("--mode", choices=("short", "long"), default="long",
                   help="schedule length: short (make test) or long (make faults)")
    p.add_argument("--bookies", type=int, default=5, help="bookie processes (>= 4)")
    p.add_argument("--spark-every", type=int, default=10,
                   help="long mode: every n-th schedule also runs the Spark sink (0: never)")
    p.add_argument("--spark", action="store_true",
                   help="with --seed: also run the Spark sink (replays a Spark schedule)")
    p.add_argument("--work-dir", type=Path, default=None,
                   help="where processes keep data and logs (default: a temporary directory, "
                        "removed unless a schedule failed)")
    p.add_argument("--quiet", action="store_true", help="print only failures and the summary")
    p.add_argument("--network", action="store_true",
                   help="network faults on the multi-host test bed (3 ZooKeepers, bookies on "
                        "their own hosts behind links): partitions, link delay and loss; "
                        "needs network namespaces (root), else says so and exits 0")
    args = p.parse_args(argv)
    if args.network:
        from bk_spark.faults.netcluster import network_faults_available

        ok, why = network_faults_available()
        if not ok:
            print(f"network fault schedules skipped: network namespaces unavailable ({why})")
            return 0
        if args.spark:
            p.error("--network schedules run no Spark sink")
    if args.bookies < 4:
        p.error("--bookies must be >= 4")
    if args.seed is not None:
        seeds = [args.seed]
    else:
        first = args.first_seed if args.first_seed is not None else int(time.time()) % 1_000_000
        seeds = list(range(first, first + args.schedules))
        print(f"fault schedules: seeds {seeds[0]}..{seeds[-1]} ({args.mode} mode"
              + (", network faults on the test bed)" if args.network else ")"), flush=True)
    from bk_spark.faults.spark_sink import spark_sink_available

    spark_ok = not args.network and spark_sink_available() and (args.spark or (
        args.mode == "long" and args.spark_every > 0))
    if args.spark and not spark_ok:
        p.error("--spark: the bookkeeper Spark data source cannot be imported")
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="bk-faults-"))
    work.mkdir(parents=True, exist_ok=True)
    # The harness's own clients log every ZooKeeper restart and dead bookie: to a file.
    logging.basicConfig(filename=work / "harness.log", level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.network:
        from bk_spark.faults.netcluster import NetFaultCluster

        cluster: Cluster = NetFaultCluster(work / "bed", n_bookies=args.bookies)
        # SIGTERM unwinds like Ctrl-C: the bed stops its processes and removes namespaces
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    else:
        cluster = FaultCluster(work / "cluster", n_bookies=args.bookies)
    summary = Summary(mode=args.mode + (", network" if args.network else ""))
    runner = Runner(cluster, work / "schedules",
                    log=lambda text: print(text, flush=True) if not args.quiet
                    or "FAILED" in text else None)
    cluster.start()
    try:
        for n, seed in enumerate(seeds):
            spark = spark_ok and (args.spark if args.seed is not None else
                                  n % args.spark_every == args.spark_every - 1)
            summary.add(runner.run(generate(seed, args.mode, args.bookies, spark=spark,
                                            network=args.network)))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
    finally:
        cluster.stop()
    print(summary.render(), flush=True)
    if summary.failed:
        print(f"data and logs kept in {work}", flush=True)
        return 1
    if args.work_dir is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
