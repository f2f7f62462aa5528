"""Re-replication throughput vs a ledger's own add rate, measured in the same run.

``python -m bench.rereplication [--entries N]`` (also part of ``make bench``):

1. ZooKeeper and 5 bookies (``--no-autorecovery``: nothing copies behind our back).
2. Reference: one ledger (E=3, Qw=2, Qa=2) gets N adds of 1 KiB, 2000 in flight; its
   add rate (entries/s, MB/s) is the reference.
3. One bookie of its ensemble is stopped for good; a Replication Worker's copy of that
   ledger (:class:`bk_spark.autorecovery.replicator.LedgerReplicator`: batched verified
   reads from the survivors, batched adds to the replacement, one CAS) is timed: entries
   and MB/s copied, and the ratio to the add rate (goal >= 0.5x).
4. Death to zero under-replicated ledgers: a second ledger of N entries, a standalone
   ``bk autorecovery --lost-bookie-recovery-delay 0`` process, another bookie stopped
   (SIGTERM: it unregisters at once, so the figure is the healing pipeline, not the
   ZooKeeper session timeout a kill -9 adds), and the time until nothing is marked and no
   ledger names it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KiB = 1024


def _fill(bk, n: int, size: int) -> tuple[int, float]:
    """A closed ledger of ``n`` entries; returns (ledger id, add rate in entries/s)."""
    lh = bk.create_ledger(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2)
    data = b"r" * size
    window: deque = deque()
    t0 = time.perf_counter()
    for _ in range(n):
        if len(window) >= 2000:
            window.popleft().result(300)
        window.append(lh.add_entry_async(data))
    for f in window:
        f.result(300)
    rate = n / (time.perf_counter() - t0)
    lh.close()
    return lh.id, rate


def rereplication_bench(n_entries: int = 50_000, size: int = KiB) -> dict[str, float]:
    """Run steps 1-4; returns the figures (also printed)."""
    from bk_spark.autorecovery.replicator import LedgerReplicator
    from bk_spark.autorecovery.underreplication import UnderReplicationManager
    from bk_spark.core.client import BookKeeper
    from bk_spark.sandbox import BookieProcess, ZooKeeperServer, free_port, wait_for_registrations

    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bk-bench-rerep-", dir=ROOT) as tmp:
        tmpd = Path(tmp)
        zk = ZooKeeperServer(tmpd / "zk", port=free_port())
        zk.start()
        uri = f"zk://{zk.connect_string}/ledgers"
        bookies = [BookieProcess(uri, tmpd / f"b{i}", port=free_port(),
                                 extra_args=["--no-autorecovery"]) for i in range(5)]
        ar: subprocess.Popen | None = None
        try:
            for b in bookies:
                b.start()
            wait_for_registrations(uri, 5)
            with BookKeeper(uri) as bk:
                lid, add_rate = _fill(bk, n_entries, size)
                out["add_entries_per_s"] = add_rate
                dead = bk.ledger_metadata(lid).ensembles[0][1][0]
                next(b for b in bookies if b.bookie_id == dead).stop()
                rep = LedgerReplicator(bk)
                t0 = time.perf_counter()
                result = rep.replicate(lid, {dead})
                dt = time.perf_counter() - t0
                assert dead in result.replaced, "the lost bookie is still named"
                out["rerep_entries"] = result.entries
                out["rerep_entries_per_s"] = result.entries / dt
                out["rerep_mb_per_s"] = result.bytes / dt / 1e6
                out["ratio"] = out["rerep_entries_per_s"] / add_rate
                print(f"ledger add 1 KiB (E3 Qw2 Qa2, 2000 in flight): {add_rate:,.0f} e/s "
                      f"{add_rate * size / 1e6:.1f} MB/s")
                print(f"re-replication of a lost bookie's {result.entries:,} entries: "
                      f"{out['rerep_entries_per_s']:,.0f} e/s {out['rerep_mb_per_s']:.1f} MB/s "
                      f"in {dt:.2f}s = {out['ratio']:.2f}x the add rate")

                # Step 4: a standalone AutoRecovery process heals a second loss by itself.
                lid2, _ = _fill(bk, n_entries, size)
                env = {**os.environ, "BK_METADATA_SERVICE_URI": uri}
                with open(tmpd / "autorecovery.log", "wb") as log:
                    ar = subprocess.Popen(
                        [sys.executable, "-m", "bk_spark.cli", "autorecovery",
                         "--lost-bookie-recovery-delay", "0"], env=env,
                        stdout=log, stderr=subprocess.STDOUT)
                urm = UnderReplicationManager(bk.zk, bk.msu.root)
                while not urm.workers():
                    time.sleep(0.1)
                second = next(b for b in bk.ledger_metadata(lid2).ensembles[0][1]
                              if b != dead)
                next(b for b in bookies if b.bookie_id == second).stop()
                t0 = time.perf_counter()
                while True:
                    named = {x for _f, ens in bk.ledger_metadata(lid2).ensembles for x in ens}
                    if second not in named and urm.count() == 0:
                        break
                    if time.perf_counter() - t0 > 120:
                        raise TimeoutError("not healed within 120 s: "
                                           + (tmpd / "autorecovery.log").read_text()[-2000:])
                    time.sleep(0.05)
                out["death_to_zero_s"] = time.perf_counter() - t0
                print(f"bookie stopped -> zero under-replicated ledgers ({n_entries:,} "
                      f"entries of {size} B on it, standalone worker, delay 0): "
                      f"{out['death_to_zero_s']:.2f}s")
        finally:
            if ar is not None:
                ar.terminate()
                ar.wait(30)
            for b in bookies:
                b.stop()
            zk.stop()
    return out


if __name__ == "__main__":
    n = int(sys.argv[sys.argv.index("--entries") + 1]) if "--entries" in sys.argv else 50_000
    rereplication_bench(n)
