"""Client-host helpers of the streaming scenario (run on the bed's client host).

    python -m bk_spark.testbed.streaming produce URI LOG STOPFILE [--rate N]
    python -m bk_spark.testbed.streaming compare URI IN OUT

``produce`` appends ``rec-<n>`` records (password: the fault suite's, which
:mod:`bk_spark.faults.spark_driver` reads with) to log LOG at about ``--rate`` per second until the
file STOPFILE exists, through ZooKeeper and bookie failures: a failed append makes it open a
new writer (fencing the old one) and go on. Whatever the input log holds afterwards is the
input (an unacknowledged append may or may not be in it). It prints ``acknowledged N``.

``compare`` reads logs IN and OUT from the earliest and prints one JSON line: the counts and
the input rows missing from OUT and the rows OUT holds too often (multisets: exactly once).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections import Counter
from pathlib import Path


def produce(uri: str, name: str, stop: Path, rate: float) -> int:
    from bk_spark.core.client import BookKeeper
    from bk_spark.errors import BKError
    from bk_spark.faults.writers import PASSWORD
    from bk_spark.log import open_log_writer

    bk = BookKeeper(uri)
    writer = None
    n = acked = 0
    t0 = time.monotonic()
    try:
        while not stop.exists():
            try:
                if writer is None:
                    writer = open_log_writer(bk, name, roll_max_entries=200,
                                             password=PASSWORD)
                writer.append(f"rec-{n}".encode(), timeout=30)
                acked += 1
            except BKError as exc:  # a bookie or ZooKeeper failing: a new writer goes on
                print(f"append {n}: {exc}; opening a new writer", flush=True)
                if writer is not None:
                    try:
                        writer.close()
                    except Exception:  # noqa: BLE001 - it failed already
                        pass
                writer = None
                time.sleep(0.5)
            n += 1
            time.sleep(max(0.0, t0 + n / rate - time.monotonic()))
        if writer is not None:
            writer.close()
    finally:
        bk.close()
    print(f"acknowledged {acked} of {n}", flush=True)
    return acked


def compare(uri: str, src: str, dst: str) -> dict:
    from bk_spark.core.client import BookKeeper
    from bk_spark.errors import LogNotFoundError
    from bk_spark.faults.writers import PASSWORD
    from bk_spark.log import open_log_reader

    bk = BookKeeper(uri)
    try:
        def rows(name: str, password: bytes = b"") -> Counter:
            try:
                with open_log_reader(bk, name, "earliest", password=password) as r:
                    return Counter(rec.payload for rec in r.read_available())
            except LogNotFoundError:
                return Counter()

        want, got = rows(src, PASSWORD), rows(dst)
    finally:
        bk.close()
    missing, extra = want - got, got - want
    return {"input": sum(want.values()), "output": sum(got.values()),
            "missing": sum(missing.values()), "duplicates": sum(extra.values()),
            "examples": [p.decode(errors="replace") for p in list(missing + extra)[:5]]}


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.ERROR)
    p = argparse.ArgumentParser(prog="python -m bk_spark.testbed.streaming", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    pp = sub.add_parser("produce")
    pp.add_argument("uri")
    pp.add_argument("log")
    pp.add_argument("stop", type=Path)
    pp.add_argument("--rate", type=float, default=50.0)
    pc = sub.add_parser("compare")
    pc.add_argument("uri")
    pc.add_argument("src")
    pc.add_argument("dst")
    args = p.parse_args(argv)
    if args.cmd == "produce":
        produce(args.uri, args.log, args.stop, args.rate)
    else:
        print(json.dumps(compare(args.uri, args.src, args.dst)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
