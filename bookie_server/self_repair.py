"""Self-repair of a bookie that lost its data (BP-46's data integrity check, on by default).

A bookie whose data directory was wiped or replaced restarts at the same address having
forgotten its fences and its entries. It must never answer as if it held data it lost
(BookKeeper's two counterexamples: an old writer reaching its ack quorum again through the
forgotten fence; a recovery closing below an acknowledged entry on its "no such entry").
When the start-up decision is REPAIR, the bookie calls :func:`enter_repair` *before it
registers* (so before any client picks it), and:

1. **Mark** (synchronous): read every ledger's metadata from ZooKeeper and persist, for
   each ledger some ensemble of which names this bookie, its mark
   (:data:`bk_spark.protocol.recovery_plan.REPAIR_MARKS`): LIMBO (fenced, and UNKNOWN
   answered for what it does not hold), FENCED or COPY (:mod:`bookie_server.limbo`). The
   marks are fdatasync'd before :func:`enter_repair` returns.
2. **Repair** (a background thread), ledger by ledger:
   a. re-read its metadata (a ledger deleted meanwhile: clear its mark, done; one no
      fragment of which names this bookie any more, replaced by AutoRecovery: retire its
      mark, keeping its plain adds refused where it stood for a fence this bookie may
      have given and forgotten: ``RETIRED_MARK_REFUSES_PLAIN_ADDS`` in
      :mod:`bk_spark.protocol.recovery_plan`);
   b. a ledger in LIMBO that is not closed is recovered (fenced and closed by a recovery
      open, as ``DataIntegrityCheckImpl.recoverLedgerIfInLimbo``): this bookie answers
      UNKNOWN to that recovery, so it decides from the other bookies only;
   c. copy back the entries its closed fragments give this bookie and it does not hold,
      through AutoRecovery's copy path (read from the other replicas, digest verified,
      recovery adds to this bookie: :class:`RepairPeers`);
   d. fence it durably with its master key and clear its mark (persisted: a restart
      resumes with the marks left); a record naming this bookie missing from the ledger
      (its own hand-over of step e before a restart with the password, an Auditor's mark
      while it was down) no longer does: AutoRecovery has nothing left to do for it here.
   e. a ledger whose password this bookie cannot find (none of ``--recovery-password``
      matches; the key it stored with it is gone with its disk) is handed to AutoRecovery:
      marked under-replicated with this bookie missing, so a replication worker on a bookie
      holding its key (``replicator.ledger_secret``) replaces this bookie in its fragments;
      its mark is retired at step a once no fragment names this bookie any more. Until then
      ``bk bookie repair-status`` shows the hand-over and, once a worker failed at it, why
      (the reason the worker recorded, e.g. no bookie outside the ensemble to replace this
      one: :func:`handed_over`) and the ways out.
   A ledger whose step fails (its other bookies down, handed over and not yet replaced)
   keeps its mark and is tried again after ``retry_s``; the error shows in ``bk bookie
   repair-status``.
3. **Complete**: once no mark is left, the caller's ``on_complete`` runs (the stamping of
   the bookie's directories: only then is the disk trusted again), then the completion is
   persisted.

The copy and the recovery need a client of the cluster (a layer above this package):
whoever starts the bookie passes a :class:`RepairPeers` (``bk bookie`` passes
:class:`bk_spark.autorecovery.self_repair_peers.ReplicaPeers`).

Threads and locks: one repair thread; it takes no lock of its own (the storage's and the
marks' are taken inside their calls).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Protocol

from bk_spark.errors import BKError, InvalidConfigError, NoSuchLedgerError, UnauthorizedError
from bk_spark.io.metadata_store import ledger_path, list_ledger_ids
from bk_spark.io.zk import connect_zk
from bk_spark.metadata_uri import parse_metadata_service_uri
from bk_spark.protocol.digest import master_key
from bk_spark.protocol.ledger_metadata import LedgerMetadata, LedgerState
from bk_spark.protocol.recovery_plan import (
    RepairMark,
    bookies_of,
    entries_on_index,
    repair_duties,
    repair_mark,
    retired_mark_refuses_plain_adds,
)
from bk_spark.security import ZkSecurity
from bookie_server.config import BookieConfig
from bookie_server.storage import BookieStorage

log = logging.getLogger(__name__)

#: Metadata reads in flight while marking (kazoo async gets).
MARK_WINDOW = 2000


class RepairPeers(Protocol):
    """The cluster as self-repair needs it (a client of the other bookies)."""

    def metadata(self, ledger_id: int) -> LedgerMetadata:
        """The ledger's current metadata (NoSuchLedgerError once deleted)."""

    def password(self, md: LedgerMetadata) -> bytes:
        """The ledger's password (UnauthorizedError when no candidate matches)."""

    def recover(self, md: LedgerMetadata, password: bytes) -> LedgerMetadata:
        """Fence and close the ledger (a recovery open); its CLOSED metadata."""

    def hand_over(self, md: LedgerMetadata) -> str:
        """Mark ``md`` under-replicated with this bookie missing (step e): AutoRecovery
        replaces this bookie in its fragments with the key the other bookies hold. Returns
        why AutoRecovery's last attempt at the ledger failed ("" when none failed)."""

    def healed(self, md: LedgerMetadata) -> None:
        """This bookie holds ``md`` again (step d): it is no longer missing from the ledger's
        under-replication record, if one names it (a hand-over before a restart with the
        password, or an Auditor's mark while it was down)."""

    def copy(self, md: LedgerMetadata, password: bytes, entry_ids: Sequence[int],
             store: Callable[..., None] | None = None) -> tuple[int, int]:
        """Copy ``entry_ids`` from the other replicas (digest verified) to this bookie;
        ``(entries, payload bytes)`` copied. ``store``: write each batch straight into this
        bookie's storage (``BookieStorage.add_entries_then`` as recovery adds) instead of
        sending it to this bookie's own service."""

    def close(self) -> None: ...


def mark_ledgers(uri: str, bookie_id: str, security: ZkSecurity | None = None
                 ) -> dict[int, RepairMark]:
    """Step 1's reading: the mark of every ledger whose ensembles name ``bookie_id``, from
    the metadata in ZooKeeper (gets sent :data:`MARK_WINDOW` at a time)."""
    from kazoo.exceptions import NoNodeError

    msu = parse_metadata_service_uri(uri)
    zk = connect_zk(msu, security=security)
    try:
        ids = list(list_ledger_ids(zk, f"{msu.root.rstrip('/')}/ledgers"))
        marks: dict[int, RepairMark] = {}
        for i in range(0, len(ids), MARK_WINDOW):
            chunk = ids[i:i + MARK_WINDOW]
            asks = [(lid, zk.get_async(ledger_path(msu.root.rstrip("/"), lid)))
                    for lid in chunk]
            for lid, ask in asks:
                try:
                    data, _stat = ask.get(timeout=30)
                except NoNodeError:
                    continue  # deleted meanwhile
                mark = repair_mark(LedgerMetadata.from_bytes(data), bookie_id)
                if mark is not None:
                    marks[lid] = mark
        return marks
    finally:
        zk.stop()
        zk.close()


class SelfRepair:
    """Step 2 and 3 in a background thread (see the module docstring)."""

    def __init__(self, storage: BookieStorage, bookie_id: str, peers: RepairPeers | None,
                 on_complete: Callable[[], None], *, retry_s: float = 2.0) -> None:
        self.storage = storage
        self.bookie_id = bookie_id
        self.peers = peers
        self.on_complete = on_complete
        self.retry_s = retry_s
        self.error = ""  # the last ledger error, for repair-status
        self._logged: dict[int, str] = {}  # ledger id -> the failure last logged as a warning
        self.done = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="self-repair", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 1.0) -> None:
        """Stop the thread (waiting at most ``timeout``: a recovery it runs may wait for
        bookies that are stopping too; whatever it did not finish keeps its mark)."""
        self._stop.set()
        self._thread.join(timeout=timeout)
        if self.peers is not None:
            self.peers.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            pending = self.storage.repair_marks()
            failed = False
            for lid, mark in sorted(pending.items()):
                if self._stop.is_set():
                    return
                try:
                    self.repair_ledger(lid, mark)
                except Exception as exc:  # noqa: BLE001 - keep the mark, retry later
                    failed = True
                    self.error = f"ledger {lid}: {exc}"
                    level = logging.DEBUG if self._logged.get(lid) == str(exc) else \
                        logging.WARNING
                    self._logged[lid] = str(exc)
                    log.log(level, "self-repair of ledger %d failed (retried every %.0fs; "
                            "logged again when the reason changes): %s", lid, self.retry_s,
                            exc)
            if not failed and not self.storage.repair_marks():
                try:
                    self.on_complete()
                    self.storage.finish_repair()
                except Exception as exc:  # noqa: BLE001
                    self.error = f"completion: {exc}"
                    log.exception("self-repair: completion failed")
                    self._stop.wait(self.retry_s)
                    continue
                self.error = ""
                log.info("self-repair of bookie %s complete", self.bookie_id)
                self.done.set()
                return
            self._stop.wait(self.retry_s)

    def _store(self, ledger_id: int, key: bytes, entries: list[tuple[int, int, bytes, bytes]],
               done: Callable[[BKError | None], None]) -> None:
        """A copied batch into this bookie's storage: the recovery adds its own service
        would accept (the same checks: master key, a fenced or repairing ledger takes
        recovery adds), durable before ``done``."""
        self.storage.add_entries_then(ledger_id, key, entries, done, recovery=True)

    def repair_ledger(self, ledger_id: int, mark: RepairMark) -> None:
        """Step 2 a-d for one ledger."""
        if self.peers is None:
            raise InvalidConfigError("this bookie runs without a cluster client (python -m "
                                     "bookie_server): run it with `bk bookie` to repair its data")
        peers = self.peers
        try:  # a.
            md = peers.metadata(ledger_id)
        except NoSuchLedgerError:
            self.storage.clear_repair_mark(ledger_id, None)
            return
        if self.bookie_id not in bookies_of(md):  # AutoRecovery replaced it everywhere
            self.storage.retire_repair_mark(
                ledger_id, retired_mark_refuses_plain_adds(mark, md.state))
            return
        try:
            password = peers.password(md)
        except UnauthorizedError:  # e.
            raise UnauthorizedError(handed_over(peers.hand_over(md))) from None
        if mark == RepairMark.LIMBO and md.state != LedgerState.CLOSED:  # b.
            log.info("self-repair: recovering ledger %d (in limbo)", ledger_id)
            md = peers.recover(md, password)
        ids: list[int] = []  # c.
        for duty in repair_duties(md, self.bookie_id):
            try:
                held = self.storage.held_ranges(ledger_id, duty.first, duty.last)
            except NoSuchLedgerError:
                held = []
            have = {e for a, b in held for e in range(a, b + 1)}
            ids += [e for e in entries_on_index(duty.first, duty.last, duty.index,
                                                md.ensemble_size, md.write_quorum_size)
                    if e not in have]
        n, nbytes = peers.copy(md, password, sorted(set(ids)), self._store) if ids else (0, 0)
        self.storage.clear_repair_mark(ledger_id, master_key(password), n, nbytes)  # d.
        peers.healed(md)
        log.info("self-repair: ledger %d repaired (%d entries, %d bytes copied)",
                 ledger_id, n, nbytes)


def handed_over(autorecovery_failure: str) -> str:
    """What ``bk bookie repair-status`` shows for a ledger handed to AutoRecovery (step e),
    with why AutoRecovery cannot heal it yet (the reason its worker recorded, e.g. no
    bookie outside the ensemble to replace this one) and the ways out."""
    msg = ("no --recovery-password matches and its key was lost with the disk: handed to "
           "AutoRecovery, whose workers copy it from the bookies holding its key to a "
           "replacement of this bookie; its mark clears once no fragment names this bookie")
    if not autorecovery_failure:
        return msg
    return (f"{msg}. AutoRecovery cannot yet: {autorecovery_failure}. Either fix that, or "
            f"restart this bookie with --recovery-password set to the ledger's password: "
            f"its repair resumes and copies the ledger back here itself")


def enter_repair(storage: BookieStorage, config: BookieConfig, peers: RepairPeers | None,
                 on_complete: Callable[[], None]) -> SelfRepair:
    """Enter self-repair: mark (durably, before returning) every ledger naming this bookie,
    unless a repair is already in progress (a restart mid-repair: resume with the marks
    left), then start the background repair. Call it after ``storage.start()`` and before
    the bookie registers. ``on_complete`` runs once every ledger is repaired."""
    if not storage.repair_in_progress():
        if not config.metadata_service_uri:
            raise InvalidConfigError(
                "self-repair needs the metadata service (--metadata-service-uri)")
        marks = mark_ledgers(config.metadata_service_uri, config.bookie_id,
                             config.zk_security)
        storage.begin_repair(marks)
        log.warning("bookie %s lost its data: %d ledgers to repair, %d in limbo",
                    config.bookie_id, len(marks),
                    sum(1 for m in marks.values() if m == RepairMark.LIMBO))
    else:
        log.warning("bookie %s resumes its self-repair: %d ledgers left", config.bookie_id,
                    len(storage.repair_marks()))
    repair = SelfRepair(storage, config.bookie_id, peers, on_complete)
    repair.start()
    return repair
