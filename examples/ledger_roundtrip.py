"""Write, close, reopen and read back a ledger on any bk-spark cluster.

    python examples/ledger_roundtrip.py --metadata-service-uri zk://127.0.0.1:2181/ledgers
"""

from __future__ import annotations

import argparse
import time

from bk_spark import BookKeeper


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--metadata-service-uri", default=None)
    p.add_argument("--entries", type=int, default=10_000)
    p.add_argument("--size", type=int, default=1024)
    args = p.parse_args()

    with BookKeeper(args.metadata_service_uri) as bk:
        lh = bk.create_ledger(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2,
                              password=b"demo")
        t0 = time.perf_counter()
        futures = [lh.add_entry_async(f"entry-{i:08d}".encode().ljust(args.size, b".")
                                      ) for i in range(args.entries)]
        ids = [f.result() for f in futures]
        dt = time.perf_counter() - t0
        lh.close()
        md = bk.ledger_metadata(lh.id)
        print(f"ledger {lh.id}: wrote {len(ids)} entries of {args.size} B in {dt:.2f}s "
              f"({len(ids) / dt:,.0f} entries/s); state {md.state.value}, last entry "
              f"{md.last_entry_id}, ensemble {list(md.ensembles[0][1])}")
        rh = bk.open_ledger(lh.id, password=b"demo")
        t0 = time.perf_counter()
        n = 0
        for e in rh.iter_entries(0, rh.last_add_confirmed):
            assert e.payload.startswith(f"entry-{e.entry_id:08d}".encode())
            n += 1
        dt = time.perf_counter() - t0
        print(f"read back {n} entries in order in {dt:.2f}s ({n / dt:,.0f} entries/s): OK")
        bk.delete_ledger(lh.id, password=b"demo")


if __name__ == "__main__":
    main()
