"""The Auditor (BookKeeper's ``Auditor``): one per cluster, elected with ZooKeeper's
election recipe (kazoo's ``Election`` on the client's own session).

Every process running AutoRecovery contends in ``<root>/underreplication/auditor``; the
winner audits until its session is lost or it stops, then the next contender takes over.
While elected, each tick:

1. Lost bookies (:mod:`bk_spark.protocol.audit_rules`): a bookie is lost when a ledger's
   ensembles name it and it is not registered (writable or readonly), whether or not this
   Auditor ever saw it registered. The named bookies are recomputed from every ledger's
   metadata when the Auditor is elected, whenever the registrations changed since it last
   did (their znodes' child versions, :func:`~bk_spark.io.registration.registrations_version`:
   a bookie that joined and died between two ticks, or while the Auditor was paused, still
   changed them; both come from the client's registration cache,
   :class:`~bk_spark.io.registration.RegistrationCache`, so a tick reads no registration
   znode), when workers healed ledgers (fewer under-replicated) and at each
   periodic check. Whether a lost bookie's ledgers are marked
   now is :data:`~bk_spark.protocol.audit_rules.LOST_BOOKIE_ACTIONS`: after
   ``lost_bookie_recovery_delay_s`` (0: at once) for a single loss, at once when more than
   one bookie is lost; every ledger with a fragment naming it is then marked
   under-replicated for it (once; again if it comes back and goes away again).
2. The periodic check, every ``audit_interval_s``: for every ledger and every bookie of
   its closed fragments (:func:`~bk_spark.protocol.recovery_plan.fragment_duties`), a
   registered bookie is asked which entries of the fragment it holds (``HeldEntries``:
   ranges of ids, from its index, one call per fragment), reading back and verifying up
   to ``verify_entries`` of them (record framing, ids and checksum:
   :func:`~bk_spark.protocol.audit_rules.verification_sample` picks which; an entry that
   fails is not held). One that knows nothing of the ledger or lacks any entry its write
   sets give it (a wiped bookie, a truncated one, one that lost an entry log in the middle
   of a fragment, one whose entry log was zero-filled or rotted:
   :func:`~bk_spark.protocol.recovery_plan.first_missing`) gets the ledger marked for it.
   Lost bookies already marked are marked again in ledgers that name them now, and so is a
   bookie whose move would bring a closed fragment's write quorums onto more racks
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
from bk_spark.io.election import run_elected
from bk_spark.io.underreplication import UnderReplicationManager
from bk_spark.io.zk import ZooKeeperError, session_interrupted
from bk_spark.protocol.audit_rules import LostBookies, lost_bookies
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
                 audit_interval_s: float = 3600.0, tick_s: float = 1.0,
                 verify_entries: int = 8) -> None:
        """``verify_entries``: how many held entries per fragment and bookie the periodic
        check reads back and verifies (0: count them from the index alone)."""
        self.bk = bk
        self.urm = urm
        self.auditor_id = auditor_id
        self.metrics = metrics
        self.delay_s = lost_bookie_recovery_delay_s
        self.audit_interval_s = audit_interval_s
        self.tick_s = tick_s
        self.verify_entries = verify_entries
        self._lost_session = threading.Event()

    # ------------------------------------------------------------------ election
    def run(self, stop: threading.Event) -> None:
        """Contend, audit while elected, contend again after a session loss; until stop."""
        self.bk.zk.add_listener(self._on_state)
        run_elected(self.bk.zk, self.urm.election_path, self.auditor_id, self._lead, stop,
                    "auditor", before_each=self._lost_session.clear)

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
    def named_bookies(self) -> set[str]:
        """Every bookie some ledger's ensembles name (one read of every ledger's metadata,
        as BookKeeper's Auditor builds its bookie-to-ledgers index)."""
        named: set[str] = set()
        for lid in self.bk.list_ledgers():
            try:
                named |= bookies_of(self.bk.ledger_metadata(lid))
            except NoSuchLedgerError:
                continue
        return named

    def _audit(self, stop: threading.Event) -> None:
        lost = LostBookies(self.delay_s)
        named: set[str] = set()
        seen: tuple[int, int] | None = None  # registrations' version when named was read
        next_check = time.monotonic() + self.audit_interval_s
        status = {"auditor": self.auditor_id, "elected_ms": _now_ms()}
        written: dict = {}
        while not stop.is_set() and not self._lost_session.is_set():
            try:
                view = self.bk.registration_view()  # from memory (watches)
                version = view.version
                registered = {b.bookie_id for b in view.bookies}
                now = time.monotonic()
                periodic = now >= next_check
                if version != seen or periodic:  # step 1: lost from the metadata
                    named = self.named_bookies()
                    seen = version
                to_mark = lost.update(lost_bookies(named, registered), now)
                if to_mark:
                    n = self.mark_ledgers_of(to_mark)
                    lost.marked(to_mark)
                    log.info("auditor: bookies %s lost (of %s lost); %d ledgers marked "
                             "under-replicated", sorted(to_mark), sorted(lost.lost), n)
                    status["last_bookie_check_ms"] = _now_ms()
                if periodic:  # step 2
                    n = self.check_all_ledgers(registered, lost.done)
                    status["last_check_ms"] = _now_ms()
                    status["last_check_marked"] = n
                    next_check = time.monotonic() + self.audit_interval_s
                count = self.urm.count()
                if count < written.get("under_replicated", 0):
                    seen = None  # ledgers were healed: which bookies they name changed
                self.metrics.under_replicated.set(count)
                current = {**status, "under_replicated": count,
                           "lost_bookies": sorted(lost.lost)}
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
        """Step 2: mark ledgers whose entries are not where their metadata says (or are
        there corrupt), and ledgers naming a bookie of ``gone`` (lost, already decided)."""
        n = 0
        topology = self.bk.topology()
        for lid in self.bk.list_ledgers():
            try:
                md = self.bk.ledger_metadata(lid)
            except NoSuchLedgerError:
                continue
            bad = (bookies_of(md) & gone) | placement_misfits(md, topology)
            bad |= bookies_lacking_entries(self.bk, md, registered - bad,
                                           verify=self.verify_entries)
            if bad:
                log.info("auditor: ledger %d misses entries on %s", lid, sorted(bad))
                self.urm.mark(lid, bad)
                self.metrics.ledgers_marked.inc()
                n += 1
        return n


def bookies_lacking_entries(bk: BookKeeper, md: LedgerMetadata, ask: Collection[str], *,
                            verify: int = 0) -> set[str]:
    """The bookies of ``ask`` that lack an entry their closed fragments of ``md`` give them
    (asked with ``HeldEntries``, one call per fragment; a bookie that knows nothing of the
    ledger lacks all). Each bookie reads back and verifies up to ``verify`` of the entries
    it holds in the fragment; one that fails is not held (a corrupt copy is no replica).
    A bookie that cannot be reached now is left out: the lost-bookie rule decides."""
    out: set[str] = set()
    for duty in fragment_duties(md):
        if duty.bookie not in ask or duty.bookie in out:
            continue
        try:
            held = bk.bookies.get(duty.bookie).held_entries(md.ledger_id, duty.first,
                                                            duty.last, verify=verify)
        except NoSuchLedgerError:
            held = []
        except BKError:
            continue
        missing = first_missing(duty, md.ensemble_size, md.write_quorum_size, held)
        if missing is not None:
            log.info("ledger %d: bookie %s lacks entry %d of its fragment %d..%d (not "
                     "there, or there corrupt)",
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
