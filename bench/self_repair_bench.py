"""Self-repair of a wiped bookie (issue 26): back in service, and copy rate vs re-replication.

``python -m bench.self_repair_bench [--ledgers N] [--entries M]`` (also part of ``make bench``):

1. ZooKeeper and 4 bookies (``--no-autorecovery``: nothing else copies), every ledger with
   a password the bookies know (``--recovery-password``). Step 4 runs first (on a cluster
   holding nothing else), then 2-3.
2. N ledgers (default 10,000; E=4, Qw=Qa=2, so every ledger names every bookie), one 1 KiB
   entry each; all but 1% closed (those stay open: in limbo on the wiped bookie).
3. One bookie is wiped (kill -9, data directory emptied) and started again in self-repair:
   the time from its start until it serves with every ledger marked (limbo marking done:
   its ``Info`` answers and counts them) -- goal <= 5 s. Then the time its repair takes
   (recovering the open ledgers, copying every ledger back).
4. Copy rate, same run: a ledger of M entries (1 KiB; E=3, Qw=2, Qa=2). Its first bookie
   is wiped: self-repair's copy rate (entries copied / time from serving to done; its
   start and marking are step 3's figure). Then another bookie
   of it is stopped for good and a Replication Worker's copy to the fourth bookie is timed
   (:class:`~bk_spark.autorecovery.replicator.LedgerReplicator`). Ratio repair /
   re-replication (goal >= 0.8x): both copy one bookie's share of the same ledger through
   the same copy path.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KiB = 1024
PASSWORD = b"bench"


def _info(bk, bookie_id: str):  # type: ignore[no-untyped-def]
    from bk_spark.errors import BKError

    while True:
        try:
            return bk.bookies.get(bookie_id).info()
        except BKError:
            time.sleep(0.01)


def _wait_done(bk, bookie_id: str, timeout: float) -> tuple[float, object]:  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    while True:
        info = _info(bk, bookie_id)
        if info.repair_state == "done":
            return time.perf_counter() - t0, info
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError(f"{bookie_id} still repairing after {timeout:.0f}s: {info}")
        time.sleep(0.05)


def _small_ledgers(bk, n: int) -> int:  # type: ignore[no-untyped-def]
    """``n`` ledgers of one entry naming every bookie; 1% left open. Returns how many open."""
    payload = b"s" * KiB

    def one(i: int) -> None:
        lh = bk.create_ledger(ensemble_size=4, write_quorum_size=2, ack_quorum_size=2,
                              password=PASSWORD)
        lh.add_entry(payload)
        if i % 100:
            lh.close()

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, range(n)))
    return len(range(0, n, 100))


def _wipe(b) -> float:  # type: ignore[no-untyped-def]
    """kill -9, empty, start in self-repair; returns the start time (perf_counter)."""
    b.kill()
    b.drop_data()
    t0 = time.perf_counter()
    b.launch()
    return t0


def self_repair_bench(n_ledgers: int = 10_000, n_entries: int = 50_000) -> dict[str, float]:
    """Run steps 1-4; returns the figures (also printed)."""
    from bk_spark.autorecovery.replicator import LedgerReplicator
    from bk_spark.core.client import BookKeeper
    from bk_spark.sandbox import BookieProcess, ZooKeeperServer, free_port, wait_for_registrations

    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bk-bench-repair-", dir=ROOT) as tmp:
        tmpd = Path(tmp)
        zk = ZooKeeperServer(tmpd / "zk", port=free_port())
        zk.start()
        uri = f"zk://{zk.connect_string}/ledgers"
        args = ["--no-autorecovery", "--recovery-password", PASSWORD.decode()]
        bookies = [BookieProcess(uri, tmpd / f"b{i}", port=free_port(), extra_args=args)
                   for i in range(4)]
        try:
            for b in bookies:
                b.start()
            wait_for_registrations(uri, 4)
            with BookKeeper(uri) as bk:
                # Step 4: copy rate, self-repair vs re-replication, one ledger of M entries.
                lh = bk.create_ledger(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2,
                                      password=PASSWORD)
                data = b"r" * KiB
                window: deque = deque()
                for _ in range(n_entries):
                    if len(window) >= 2000:
                        window.popleft().result(300)
                    window.append(lh.add_entry_async(data))
                for f in window:
                    f.result(300)
                lh.close()
                ens = bk.ledger_metadata(lh.id).ensembles[0][1]
                procs = {b.bookie_id: b for b in bookies}
                wiped = procs[ens[0]]
                _wipe(wiped)
                wiped.wait_ready(60)  # from here on it copies (its marking is figure 1)
                took, info = _wait_done(bk, wiped.bookie_id, 1800)
                repair_rate = info.repair_entries_copied / took
                out["repair_entries_per_s"] = repair_rate
                print(f"self-repair of a wiped bookie's {info.repair_entries_copied:,} "
                      f"entries (1 KiB): {repair_rate:,.0f} e/s ({took:.2f}s once it serves)")
                dead = ens[1]
                procs[dead].stop()
                rep = LedgerReplicator(bk, passwords=(PASSWORD,))
                t = time.perf_counter()
                result = rep.replicate(lh.id, {dead})
                dt = time.perf_counter() - t
                assert dead in result.replaced
                rerep_rate = result.entries / dt
                out["rerep_entries_per_s"] = rerep_rate
                out["repair_ratio"] = repair_rate / rerep_rate
                print(f"re-replication of a lost bookie's {result.entries:,} entries of the "
                      f"same ledger: {rerep_rate:,.0f} e/s -> self-repair at "
                      f"{out['repair_ratio']:.2f}x (goal >= 0.8x)")
                procs[dead].start()  # back (stale copies: no ledger names it now)
                wait_for_registrations(uri, 4)
                _info(bk, dead)  # this client's channel to it is connected again
                # Steps 2-3: N ledgers, one bookie wiped: back in service, marks done.
                t = time.perf_counter()
                n_open = _small_ledgers(bk, n_ledgers)
                print(f"{n_ledgers:,} ledgers written in {time.perf_counter() - t:.0f}s "
                      f"({n_open} left open)")
                victim = bookies[0]
                t0 = _wipe(victim)
                victim.wait_ready(60)  # it answers Info: it marked every ledger first
                back = time.perf_counter() - t0
                info = _info(bk, victim.bookie_id)
                assert info.repair_ledgers_total >= n_ledgers, info  # + step 4's ledger
                out["wiped_back_in_service_s"] = back
                print(f"wiped bookie with {n_ledgers:,} ledgers ({n_open} in limbo) back in "
                      f"service, marking done: {back:.2f}s after its start (goal <= 5 s)")
                took, info = _wait_done(bk, victim.bookie_id, 1800)
                out["small_ledgers_repair_s"] = took + back
                print(f"its self-repair (recovering {n_open} open ledgers, copying "
                      f"{info.repair_entries_copied:,} entries back): "
                      f"{took + back:.1f}s ({n_ledgers / (took + back):,.0f} ledgers/s)")

        finally:
            for b in bookies:
                b.stop()
            zk.stop()
    return out


if __name__ == "__main__":
    ledgers = int(sys.argv[sys.argv.index("--ledgers") + 1]) if "--ledgers" in sys.argv \
        else 10_000
    entries = int(sys.argv[sys.argv.index("--entries") + 1]) if "--entries" in sys.argv \
        else 50_000
    self_repair_bench(ledgers, entries)
