"""Re-replication throughput vs a ledger's own add rate, measured in the same run.

``python -m bench.rereplication [--entries N] [--gb G]`` (also part of ``make bench``):

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
5. The same for 1 GB of data on the stopped bookie (``--gb``): two fresh bookies join;
   ledgers of 16 KiB entries (E=Qw=3, Qa=2) go on the three left from step 4 (the fresh
   two carry a decommissioning marker meanwhile, so placement skips them; it is cleared
   before the loss, so they take the copies), then one of the three is stopped: the time
   until zero under-replicated ledgers, with the standalone worker of step 4, delay 0.
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


def _wait_zero(bk, urm, bookie: str, ledgers: list[int], log_path: Path,
               timeout: float) -> float:
    """Seconds until none of ``ledgers`` names ``bookie`` and nothing is marked."""
    t0 = time.perf_counter()
    while True:
        named = {x for lid in ledgers for _f, ens in bk.ledger_metadata(lid).ensembles
                 for x in ens}
        if bookie not in named and urm.count() == 0:
            return time.perf_counter() - t0
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError(f"not healed within {timeout:.0f} s: "
                               + log_path.read_text()[-2000:])
        time.sleep(0.05)


def _fill_gb(bk, victim: str, spares: list[str], gb: float, size: int = 16 * KiB
             ) -> list[int]:
    """Ledgers (E=Qw=3) holding ``gb`` GB on ``victim``: the ``spares`` are marked
    decommissioning while they are written, so placement puts them on ``victim`` and the
    two other bookies; the marks are cleared at the end (the spares then take the copies)."""
    from bk_spark.io.registration import clear_decommissioning, mark_decommissioning

    for b in spares:
        mark_decommissioning(bk.zk, bk.msu, b)
    ledgers, total = [], 0
    per_ledger = 4096  # 64 MiB of 16 KiB entries
    data = b"g" * size
    try:
        while total < gb * 1e9:
            lh = bk.create_ledger(ensemble_size=3, write_quorum_size=3, ack_quorum_size=2)
            assert victim in bk.ledger_metadata(lh.id).ensembles[0][1]
            window: deque = deque()
            for _ in range(per_ledger):
                if len(window) >= 256:
                    window.popleft().result(300)
                window.append(lh.add_entry_async(data))
            for f in window:
                f.result(300)
            lh.close()
            ledgers.append(lh.id)
            total += per_ledger * size
    finally:
        for b in spares:
            clear_decommissioning(bk.zk, bk.msu, b)
    return ledgers


def rereplication_bench(n_entries: int = 50_000, size: int = KiB, gb: float = 1.0
                        ) -> dict[str, float]:
    """Run steps 1-5; returns the figures (also printed)."""
    from bk_spark.autorecovery.replicator import LedgerReplicator
    from bk_spark.core.client import BookKeeper
    from bk_spark.io.underreplication import UnderReplicationManager
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
                healed_in = _wait_zero(bk, urm, second, [lid2], tmpd / "autorecovery.log", 120)
                out["death_to_zero_s"] = healed_in
                print(f"bookie stopped -> zero under-replicated ledgers ({n_entries:,} "
                      f"entries of {size} B on it, standalone worker, delay 0): "
                      f"{out['death_to_zero_s']:.2f}s")

                # Step 5: 1 GB on the bookie that dies.
                if gb > 0:
                    # two fresh bookies (new ports: no client holds a stale channel to them)
                    fresh = [BookieProcess(uri, tmpd / f"b{i}", port=free_port(),
                                           extra_args=["--no-autorecovery"]) for i in (5, 6)]
                    bookies += fresh
                    for b in fresh:
                        b.start()
                    wait_for_registrations(uri, 5)
                    alive = [b for b in bookies if b.proc is not None and b not in fresh]
                    victim = alive[0]
                    t_fill = time.perf_counter()
                    ledgers = _fill_gb(bk, victim.bookie_id,
                                       [b.bookie_id for b in fresh], gb)
                    fill_s = time.perf_counter() - t_fill
                    held = len(ledgers) * 4096 * 16 * KiB
                    victim.stop()
                    took = _wait_zero(bk, urm, victim.bookie_id, ledgers,
                                      tmpd / "autorecovery.log", 1800)
                    out["gb_on_bookie"] = held / 1e9
                    out["gb_death_to_zero_s"] = took
                    out["gb_mb_per_s"] = held / took / 1e6
                    print(f"bookie with {held / 1e9:.2f} GB ({len(ledgers)} ledgers of 16 KiB "
                          f"entries, written in {fill_s:.0f}s) stopped -> zero "
                          f"under-replicated ledgers (standalone worker, delay 0): "
                          f"{took:.1f}s ({out['gb_mb_per_s']:.0f} MB/s)")
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
    gigabytes = float(sys.argv[sys.argv.index("--gb") + 1]) if "--gb" in sys.argv else 1.0
    rereplication_bench(n, gb=gigabytes)
