"""The Replication Worker (BookKeeper's ``ReplicationWorker``).

Its loop:

1. While AutoRecovery is disabled (``<root>/underreplication/disable``), wait.
2. List the under-replicated ledgers; for each one not waiting for a retry, try to take
   its ephemeral lock (another worker holds it: skip).
3. Re-replicate it (:class:`~bk_spark.autorecovery.replicator.LedgerReplicator`), then
   remove the bookies it no longer names from its record (CAS); a ledger whose open last
   fragment waits for its writer is looked at again within a second. One whose attempt
   failed is retried after an exponential back-off, capped
   (:mod:`bk_spark.protocol.replication_retry`, which also says when the failure is worth a
   warning), and the failure's reason is written to its record (``bk ledger
   underreplicated`` shows it; ``autorecovery_unhealable_ledgers`` counts such records);
   the next attempt that makes progress clears it. A change of the failed ledger's metadata
   ends its wait: it is retried at the next pass (what it waited for may have come with
   the change: a ledger no bookie held the key of, recovered by a client with its password,
   is held fenced, with its key, by the bookies it fenced). The change is seen through a
   watch armed when the attempt failed (a change between the attempt's read and the watch
   waits for the back-off, as before).
4. Release the lock. A worker that dies loses its locks with its ZooKeeper session.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable

from bk_spark.autorecovery.metrics import AutoRecoveryMetrics
from bk_spark.autorecovery.replicator import LedgerReplicator
from bk_spark.errors import BKError
from bk_spark.io.underreplication import UnderReplicationManager
from bk_spark.io.zk import ZooKeeperError
from bk_spark.protocol.replication_retry import (
    RETRY_BASE_S,
    RETRY_CAP_S,
    retry_delay,
    warn_of_failure,
)

log = logging.getLogger(__name__)


class ReplicationWorker:
    """Takes under-replicated ledgers one at a time and re-replicates them."""

    def __init__(self, urm: UnderReplicationManager, replicator: LedgerReplicator,
                 worker_id: str, metrics: AutoRecoveryMetrics, *, poll_s: float = 1.0,
                 retry_s: float = RETRY_BASE_S, max_retry_s: float = RETRY_CAP_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.urm = urm
        self._clock = clock
        self.replicator = replicator
        self.worker_id = worker_id
        self.metrics = metrics
        self.poll_s = poll_s
        self.retry_s = retry_s
        self.max_retry_s = max_retry_s
        self._retry_at: dict[int, float] = {}
        # ledger id -> (consecutive failed attempts, the last one's reason)
        self._failures: dict[int, tuple[int, str]] = {}
        # failed ledgers whose metadata changed since (added on kazoo's event thread)
        self._changed: set[int] = set()
        # failed ledger -> stops the watch of its metadata
        self._watches: dict[int, Callable[[], None]] = {}

    def run(self, stop: threading.Event) -> None:
        """Step 1-4 until ``stop`` is set."""
        started = int(time.time() * 1000)
        while not stop.is_set():
            try:
                self.urm.register_worker(self.worker_id, {"started_ms": started})
                worked = self.urm.is_enabled() and self.run_once(stop)
            except (BKError, ZooKeeperError) as exc:
                log.warning("replication worker %s: %s", self.worker_id, exc)
                worked = False
            if not worked:
                stop.wait(self.poll_s)

    def run_once(self, stop: threading.Event | None = None) -> bool:
        """One pass over the under-replicated ledgers; True if it replicated any."""
        records = list(self.urm.list())
        self.metrics.unhealable.set(sum(1 for r in records if r.reason))
        listed = {r.ledger_id for r in records}
        for lid in [lid for lid in self._failures if lid not in listed]:  # healed elsewhere
            self._forget_failures(lid)
        random.shuffle(records)  # several workers start on different ledgers
        # ledgers this worker's bookie holds first: it has their key (the others it can copy
        # only with a password or, under mutual TLS, a key read from a surviving bookie)
        records.sort(key=lambda r: not self.replicator.holds_copy(r.ledger_id))
        now = self._clock()
        worked = False
        for rec in records:
            if stop is not None and stop.is_set():
                break
            waiting = (self._retry_at.get(rec.ledger_id, 0.0) > now
                       and rec.ledger_id not in self._changed)
            if waiting or not self.urm.is_enabled():
                continue
            if not self.urm.try_lock(rec.ledger_id, self.worker_id):
                continue
            try:
                worked |= self._replicate(rec.ledger_id)
            finally:
                self.urm.unlock(rec.ledger_id)
        return worked

    def _replicate(self, ledger_id: int) -> bool:
        rec = self.urm.get(ledger_id)  # re-read under the lock
        if rec is None or not rec.missing:
            return False
        self._changed.discard(ledger_id)
        started = self._clock()
        try:
            result = self.replicator.replicate(ledger_id, set(rec.missing))
        except (BKError, ZooKeeperError) as exc:
            self._keep_progress(ledger_id, set(rec.missing))
            self._failed(ledger_id, rec.reason, f"{type(exc).__name__}: {exc}")
            return False
        progressed = bool(result.replaced) or result.entries > 0
        if result.replaced:
            self.urm.mark_replicated(ledger_id, result.replaced)
        if progressed or not result.deferred:
            self._forget_failures(ledger_id)
            if rec.reason and set(rec.missing) - result.replaced:  # (healed: record gone)
                self.urm.set_reason(ledger_id, "")
        if result.deferred or set(rec.missing) - result.replaced:
            self._retry_at[ledger_id] = self._clock() + min(self.retry_s, 1.0)
        else:
            self._retry_at.pop(ledger_id, None)
            self.metrics.ledger_seconds.observe(self._clock() - started)
        return progressed

    def _keep_progress(self, ledger_id: int, missing: set[str]) -> None:
        """After a failed attempt: remove from the record the missing bookies it replaced
        everywhere before it failed (else they stay excluded from placement, and a later
        fragment whose only candidate is one of them never heals)."""
        try:
            done = self.replicator.no_longer_named(ledger_id, missing)
            if done:
                self.urm.mark_replicated(ledger_id, done)
        except (BKError, ZooKeeperError) as exc:
            log.debug("ledger %d: cannot record what the failed attempt did (%s)",
                      ledger_id, exc)

    def _forget_failures(self, ledger_id: int) -> None:
        """The ledger healed or made progress: no back-off, no watch left for it."""
        self._failures.pop(ledger_id, None)
        self._retry_at.pop(ledger_id, None)
        self._changed.discard(ledger_id)
        stop = self._watches.pop(ledger_id, None)
        if stop is not None:
            stop()

    def _watch(self, ledger_id: int) -> None:
        """Retry ``ledger_id`` at the next pass once its metadata changes (step 3)."""
        if ledger_id in self._watches:
            return
        calls = [0]

        def on_change(_md: object) -> None:  # the first call gives the metadata as it is
            calls[0] += 1
            if calls[0] > 1:
                self._changed.add(ledger_id)

        try:
            self._watches[ledger_id] = self.replicator.watch_metadata(ledger_id, on_change)
        except (BKError, ZooKeeperError) as exc:  # the back-off alone decides
            log.debug("ledger %d: cannot watch its metadata (%s)", ledger_id, exc)

    def _failed(self, ledger_id: int, recorded: str, reason: str) -> None:
        """Back off (exponentially, capped), warn only when it says something new, and
        record the reason on the ledger's record for operators."""
        count, last = self._failures.get(ledger_id, (0, ""))
        count += 1
        self._failures[ledger_id] = (count, reason)
        delay = retry_delay(count, self.retry_s, self.max_retry_s)
        self._retry_at[ledger_id] = self._clock() + delay
        self._watch(ledger_id)
        self.metrics.failures.inc()
        level = (logging.WARNING
                 if warn_of_failure(count, reason != last, self.retry_s, self.max_retry_s)
                 else logging.DEBUG)
        log.log(level, "ledger %d: re-replication failed (%s); attempt %d, next in %.0fs%s",
                ledger_id, reason, count, delay,
                " (the most it waits: further failures are logged at debug level)"
                if delay >= self.max_retry_s and level == logging.WARNING else "")
        if recorded != reason:
            try:
                self.urm.set_reason(ledger_id, reason)
            except (BKError, ZooKeeperError) as exc:
                log.debug("ledger %d: cannot record the reason (%s)", ledger_id, exc)
