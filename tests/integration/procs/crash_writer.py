"""A ledger writer in its own process, for crash tests: prints each acknowledged entry id.

    python crash_writer.py URI E Qw Qa   -> first line "ledger <id>", then "ack <entry id>" lines
"""

import sys

from bk_spark.core import BookKeeper


def main() -> None:
    uri, E, Qw, Qa = sys.argv[1], *map(int, sys.argv[2:5])
    bk = BookKeeper(uri)
    lh = bk.create_ledger(ensemble_size=E, write_quorum_size=Qw, ack_quorum_size=Qa,
                          password=b"pw")
    print(f"ledger {lh.id}", flush=True)
    eid = 0
    window = []
    while True:
        window.append(lh.add_entry_async(f"entry-{eid}".encode() * 20))
        eid += 1
        if len(window) >= 200:
            for f in window:
                print(f"ack {f.result()}", flush=True)
            window = []


if __name__ == "__main__":
    main()
