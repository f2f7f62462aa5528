"""Per-hop timestamps of a lone add inside one bookie's storage (issue 28, §1).

    python -m bench.bookie_hops [--n 500]

One add of one 1 KiB entry at a time, in process (``BookieStorage`` on real files, the
same code a bookie runs), with timestamps taken by wrappers around the storage's own
steps: accept (``add_entries`` called) -> queued (``Journal.submit`` returned) -> writer
awake (``Journal._take_group`` returned) -> written (``write_all_at`` of the journal
returned) -> synced (the journal's ``fdatasync`` returned) -> applied (``_apply_group``
returned; its start shows the hand-off to an apply thread, if any) -> released
(``_Waiter.done``) -> answered (``add_entries`` returned in the caller). Prints the
median and p90 of each hop in microseconds. The gRPC part (the poll thread, the pool
hand-off, decoding and the answer) is what ``bench.bookie_path``'s lone add adds to the
sum.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

from bench.__main__ import ROOT, KiB, pct

STEPS = ["accept", "queued", "writer awake", "written", "synced", "apply start", "applied",
         "released", "answered"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=500)
    args = ap.parse_args()
    import bookie_server.journal as journal_mod
    import bookie_server.storage as storage_mod
    from bookie_server.config import BookieConfig

    marks: dict[str, float] = {}
    now = time.perf_counter

    def wrap(owner, name: str, before: str | None, after: str | None) -> None:
        real = getattr(owner, name)

        def wrapper(*a, **kw):  # type: ignore[no-untyped-def]
            if before:
                marks.setdefault(before, now())
            out = real(*a, **kw)
            if after:
                marks.setdefault(after, now())
            return out

        setattr(owner, name, wrapper)

    wrap(journal_mod.Journal, "submit", None, "queued")
    wrap(journal_mod.Journal, "_take_group", None, "writer awake")
    wrap(journal_mod, "write_all_at", None, "written")
    wrap(storage_mod.BookieStorage, "_apply_group", "apply start", "applied")
    wrap(storage_mod._Waiter, "done", "released", None)
    real_sync = os.fdatasync

    def fdatasync(fd: int) -> None:
        real_sync(fd)
        if threading.current_thread().name == "journal-writer":
            marks.setdefault("synced", now())

    journal_mod.os.fdatasync = fdatasync  # type: ignore[attr-defined]
    try:
        with tempfile.TemporaryDirectory(prefix="bk-hops-", dir=ROOT) as tmp:
            storage = storage_mod.BookieStorage(BookieConfig(
                data_dir=Path(tmp), checkpoint_interval_s=0, gc_interval_s=0,
                disk_check_interval_s=0))
            storage.start()
            payload = b"p" * KiB
            hops: dict[str, list[float]] = {s: [] for s in STEPS[1:]}
            total: list[float] = []
            for i in range(args.n + 50):
                marks.clear()
                marks["accept"] = now()
                storage.add_entries(1, b"k", [(i, i - 1, payload, b"\0" * 12)])
                marks["answered"] = now()
                if i < 50:
                    continue
                prev = marks["accept"]
                for step in STEPS[1:]:
                    t = marks.get(step, prev)
                    hops[step].append((t - prev) * 1e6)
                    prev = t
                total.append((marks["answered"] - marks["accept"]) * 1e6)
            storage.close()
    finally:
        journal_mod.os.fdatasync = real_sync  # type: ignore[attr-defined]
    print(f"{'hop (to this step from the previous)':<40} {'p50 us':>8} {'p90 us':>8}")
    for step in STEPS[1:]:
        print(f"{step:<40} {statistics.median(hops[step]):>8.1f} {pct(hops[step], 0.9):>8.1f}")
    print(f"{'whole add_entries':<40} {statistics.median(total):>8.1f} {pct(total, 0.9):>8.1f}")


if __name__ == "__main__":
    main()
