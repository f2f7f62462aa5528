"""A log writer in its own process, for ownership and crash tests.

    python log_writer.py URI LOG TAG [--seconds S] [--count N] [--reopen]
                         [--roll-every N] [--roll-age S] [--stall-after-roll-cas]

Prints one line per event, flushed at once:

    open <session> <ledger id>                 this process became the log's writer
    ack <ledger id> <entry id> <ledger index> <payload>   an append was acknowledged
    roll-cas <new ledger id>                   (--stall-after-roll-cas) a roll's CAS
                                               succeeded; the roll then stalls before
                                               closing the previous ledger, appends go on
    lost <session>                             the writer lost the log to another writer
    done

Payloads are ``TAG:session:seq``. ``--reopen``: after losing the log, take it back
(a new session) and go on, until ``--seconds`` or ``--count`` acknowledgements.
"""

from __future__ import annotations

import argparse
import random
import threading
import time
from collections import deque

from bk_spark.core import BookKeeper
from bk_spark.errors import LogOwnershipLostError
from bk_spark.log import open_log_writer
from bk_spark.log.testing import after_roll_cas


def stall_after_roll_cas(new_id: int) -> None:
    """The writer's after_roll_cas hook: report the roll's CAS, then stall the roll for good
    (the previous ledger is never closed; appends go on into it)."""
    print(f"roll-cas {new_id}", flush=True)
    threading.Event().wait()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("uri")
    p.add_argument("log")
    p.add_argument("tag")
    p.add_argument("--seconds", type=float, default=3600.0)
    p.add_argument("--count", type=int, default=10**9)
    p.add_argument("--reopen", action="store_true")
    p.add_argument("--roll-every", type=int, default=None)
    p.add_argument("--roll-age", type=float, default=None)
    p.add_argument("--stall-after-roll-cas", action="store_true")
    p.add_argument("--window", type=int, default=20)
    args = p.parse_args()
    deadline = time.monotonic() + args.seconds
    bk = BookKeeper(args.uri)
    acked = seq = session = 0
    while acked < args.count and time.monotonic() < deadline:
        session += 1
        w = open_log_writer(bk, args.log, password=b"pw", roll_max_entries=args.roll_every,
                            roll_max_age_s=args.roll_age)
        after_roll_cas(w, stall_after_roll_cas if args.stall_after_roll_cas else None)
        print(f"open {session} {w.ledger_id}", flush=True)
        window: deque = deque()
        try:
            while acked < args.count and time.monotonic() < deadline:
                payload = f"{args.tag}:{session}:{seq}"
                seq += 1
                window.append((payload, w.append_async(payload.encode())))
                while window and (len(window) >= args.window or window[0][1].done()):
                    text, fut = window.popleft()
                    pos = fut.result()
                    acked += 1
                    print(f"ack {pos.ledger_id} {pos.entry_id} {pos.ledger_index} {text}",
                          flush=True)
            while window:
                text, fut = window.popleft()
                pos = fut.result()
                print(f"ack {pos.ledger_id} {pos.entry_id} {pos.ledger_index} {text}",
                      flush=True)
            w.close()
        except LogOwnershipLostError:
            print(f"lost {session}", flush=True)
            w.close()
            if not args.reopen:
                break
            time.sleep(random.uniform(0.1, 0.4))  # let the other writer make progress
    print("done", flush=True)
    bk.close()


if __name__ == "__main__":
    main()
