"""The Auditor (BookKeeper's ``Auditor``): one per cluster, elected with ZooKeeper's
election recipe (kazoo's ``Election`` on the client's own session).

Every process running AutoRecovery contends in ``<root>/underreplication/auditor``; the
winner audits until its session is lost or it stops, then the next contender takes over.
While elected, each tick:

1. Lost bookies: every bookie ever seen registered, or named by a ledger's metadata at
   election, that is not registered now is *missing since* the tick it was first seen
   gone. Once missing for ``lost_bookie_recovery_delay_s`` (0: at once), every ledger with
   a fragment naming it is marked under-replicated for it (once; again if it comes back
   and goes away again).
2. The periodic check, every ``audit_interval_s``: for every ledger and every bookie of
   its closed fragments (:func:`~bk_spark.protocol.recovery_plan.fragment_duties`), a
   registered bookie is asked which entries of the fragment it holds (``HeldEntries``:
   ranges of ids, from its index, one call per fragment); one that knows nothing of the
   ledger or lacks any entry its write sets give it (a wiped bookie, a truncated one, or
   one that lost an entry log in the middle of a fragment:
   :func:`~bk_spark.protocol.recovery_plan.first_missing`) gets the ledger marked for it.
   Bookies missing for longer than the delay are marked too (a bookie that died while no
   Auditor ran), and so is a bookie whose move would bring a closed fragment's write
   quorums onto more racks
   (:func:`~bk_spark.protocol.recovery_plan.placement_misfits`).
3. The status (auditor, last checks, under-replicated count) is written for operators.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Collection, Iterable

from bk_spark.autorecovery.metrics import AutoRecoveryMetrics
from bk_spark.core.client import BookKeeper
from bk_spark.errors import BKError, NoSuchLedgerError
from bk_spark.io.registration import list_bookies
from bk_spark.io.underreplication import UnderReplicationManager
from bk_spark.io.zk import ZooKeeperError, session_interrupted
from bk_spark.protocol.ledger_metadata import LedgerMetadata
from bk_spark.protocol.recovery_plan import (
    bookies_of,
    first_missing,
    fragment_duties,
    placement_misfits,
)

log = logging.getLogger(__name__)


class Auditor:
    """Contends for the Auditor role and audits while elected."""

    def __init__(self, bk: BookKeeper, urm: UnderReplicationManager, auditor_id: str,
                 metrics: AutoRecoveryMetrics, *, lost_bookie_recovery_delay_s: float = 60.0,
                 audit_interval_s: float = 3600.0, tick_s: float = 1.0) -> None:
        self.bk = bk
        self.urm = urm
        self.auditor_id = auditor_id
        self.metrics = metrics
        self.delay_s = lost_bookie_recovery_delay_s
        self.audit_interval_s = audit_interval_s
        self.tick_s = tick_s
        self._lost_session = threading.Event()

    # ------------------------------------------------------------------ election
    def run(self, stop: threading.Event) -> None:
        """Contend, audit while elected, contend again after a session loss; until stop."""
        self.bk.zk.add_listener(self._on_state)
        while not stop.is_set():
            election = self.bk.zk.Election(self.urm.election_path, self.auditor_id)
            canceller = threading.Thread(target=lambda e=election: (stop.wait(), e.cancel()),
                                         daemon=True, name="auditor-cancel")
            canceller.start()
            try:
                self._lost_session.clear()
                election.run(self._lead, stop)
            except (ZooKeeperError, BKError) as exc:
                log.warning("auditor election: %s", exc)
                stop.wait(1.0)
            except Exception:  # kazoo raises its own errors on a closed client
                if stop.is_set():
                    return
                log.exception("auditor election failed")
                stop.wait(1.0)

    def _on_state(self, state: str) -> None:
        if session_interrupted(state):
            self._lost_session.set()

    def _lead(self, stop: threading.Event) -> None:
        log.info("auditor %s elected", self.auditor_id)
        self.metrics.auditor_elected.set(1)
        try:
            self._audit(stop)
        finally:
            self.metrics.auditor_elected.set(0)
            log.info("auditor %s steps down", self.auditor_id)

    # ------------------------------------------------------------------ auditing
    def _registered(self) -> set[str]:
        return {b.bookie_id for b in list_bookies(self.bk.msu, zk=self.bk.zk)}

    def _audit(self, stop: threading.Event) -> None:
        known: set[str] = set()
        for lid in self.bk.list_ledgers():
            try:
                known |= bookies_of(self.bk.ledger_metadata(lid))
            except NoSuchLedgerError:
                continue
        missing_since: dict[str, float] = {}
        handled: set[str] = set()
        next_check = time.monotonic() + self.audit_interval_s
        status = {"auditor": self.auditor_id, "elected_ms": _now_ms()}
        written: dict = {}
        while not stop.is_set() and not self._lost_session.is_set():
            try:
                registered = self._registered()
                known |= registered
                now = time.monotonic()
                for b in known - registered:
                    missing_since.setdefault(b, now)
                for b in registered:
                    missing_since.pop(b, None)
                    handled.discard(b)
                lost = {b for b, t in missing_since.items()
                        if now - t >= self.delay_s and b not in handled}
                if lost:
                    n = self.mark_ledgers_of(lost)
                    log.info("auditor: bookies %s lost; %d ledgers marked under-replicated",
                             sorted(lost), n)
                    handled |= lost
                    status["last_bookie_check_ms"] = _now_ms()
                if now >= next_check:
                    gone = {b for b, t in missing_since.items() if now - t >= self.delay_s}
                    n = self.check_all_ledgers(registered, gone)
                    status["last_check_ms"] = _now_ms()
                    status["last_check_marked"] = n
                    next_check = time.monotonic() + self.audit_interval_s
                count = self.urm.count()
                self.metrics.under_replicated.set(count)
                current = {**status, "under_replicated": count,
                           "lost_bookies": sorted(missing_since)}
                if current != written:  # one write per change, not per tick
                    self.urm.write_status(current)
                    written = current
            except (ZooKeeperError, BKError) as exc:
                log.warning("auditor: %s", exc)
            stop.wait(self.tick_s)

    def mark_ledgers_of(self, lost: Iterable[str]) -> int:
        """Mark every ledger with a fragment naming a bookie of ``lost``; returns how many."""
        marked = mark_ledgers_of(self.bk, self.urm, lost)
        self.metrics.ledgers_marked.inc(len(marked))
        return len(marked)

    def check_all_ledgers(self, registered: set[str], gone: set[str]) -> int:
        """Step 2: mark ledgers whose entries are not where their metadata says."""
        n = 0
        topology = self.bk.topology()
        for lid in self.bk.list_ledgers():
            try:
                md = self.bk.ledger_metadata(lid)
            except NoSuchLedgerError:
                continue
            bad = (bookies_of(md) & gone) | placement_misfits(md, topology)
            bad |= bookies_lacking_entries(self.bk, md, registered - bad)
            if bad:
                log.info("auditor: ledger %d misses entries on %s", lid, sorted(bad))
                self.urm.mark(lid, bad)
                self.metrics.ledgers_marked.inc()
                n += 1
        return n


def bookies_lacking_entries(bk: BookKeeper, md: LedgerMetadata, ask: Collection[str]
                            ) -> set[str]:
    """The bookies of ``ask`` that lack an entry their closed fragments of ``md`` give them
    (asked with ``HeldEntries``, one call per fragment; a bookie that knows nothing of the
    ledger lacks all). A bookie that cannot be reached now is left out: the lost-bookie
    rule decides about it."""
    out: set[str] = set()
    for duty in fragment_duties(md):
        if duty.bookie not in ask or duty.bookie in out:
            continue
        try:
            held = bk.bookies.get(duty.bookie).held_entries(md.ledger_id, duty.first,
                                                            duty.last)
        except NoSuchLedgerError:
            held = []
        except BKError:
            continue
        missing = first_missing(duty, md.ensemble_size, md.write_quorum_size, held)
        if missing is not None:
            log.info("ledger %d: bookie %s lacks entry %d of its fragment %d..%d",
                     md.ledger_id, duty.bookie, missing, duty.first, duty.last)
            out.add(duty.bookie)
    return out


def mark_ledgers_of(bk: BookKeeper, urm: UnderReplicationManager, bookies: Iterable[str]
                    ) -> list[int]:
    """Mark every ledger with a fragment naming a bookie of ``bookies`` under-replicated for
    them (idempotent); returns the ledger ids marked."""
    lost = set(bookies)
    marked = []
    for lid in bk.list_ledgers():
        try:
            md = bk.ledger_metadata(lid)
        except NoSuchLedgerError:
            continue
        hit = bookies_of(md) & lost
        if hit:
            urm.mark(lid, hit)
            marked.append(lid)
    return marked


def ledgers_naming(bk: BookKeeper, bookie: str) -> list[int]:
    """The ledgers with a fragment naming ``bookie``."""
    out = []
    for lid in bk.list_ledgers():
        try:
            if bookie in bookies_of(bk.ledger_metadata(lid)):
                out.append(lid)
        except NoSuchLedgerError:
            continue
    return out


def _now_ms() -> int:
    return int(time.time() * 1000)
