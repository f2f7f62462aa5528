"""Ledgers written for a log but not committed to it yet (by Spark tasks, one each).

A task registers its new ledger right after creating it::

    <root>/bk-spark/pending/<log>/<ledger id>   {"attempt": "<writer id>", "txn": "<key>"|null}

Whoever deletes a ledger's znode owns the ledger's fate, and ZooKeeper lets only one
delete succeed:

* the driver's commit *claims* its batch's ledgers (deletes their znodes) before its CAS;
  if one is gone, another instance of the sink swept it and this one is a zombie: the
  commit fails and adds nothing;
* after committing, a *sweep* claims and deletes every other ledger of the same write
  attempt (failed or speculative task attempts) and, for a streaming sink, of the same
  sink (attempts of a query instance that was killed, or of a zombie);
* abort and a failed task delete their own ledgers.

So nothing a write leaves behind outlives the next commit of that sink, and a swept
ledger can never be committed.

A log writer's *spare* (the next ledger of a roll, created ahead: ``log/writer.py``) is
registered the same way with the attempt :data:`SPARE_ATTEMPT`: the roll claims it in the
CAS that lists it (one transaction: :func:`record_path`), the writer discards it when it
closes or stops, and the next writer
of the log (:func:`sweep_spares`, when it opens the log) or ``delete_log`` sweeps the spare
of a writer that died. (A process killed between creating its ledger and
registering it leaves that ledger behind; its custom metadata ``bk-spark.log`` and
``bk-spark.attempt`` name it.)
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from bk_spark.errors import BKError, NoSuchLedgerError
from bk_spark.io.pending_store import PendingLedgerStore

if TYPE_CHECKING:
    from bk_spark.core.client import BookKeeper

log = logging.getLogger(__name__)


#: The attempt of every log writer's spare ledger (see the module doc).
SPARE_ATTEMPT = "log-writer-spare"


def _store(bk: BookKeeper) -> PendingLedgerStore:
    return PendingLedgerStore(bk.zk, bk.msu.root)


def register(bk: BookKeeper, log_name: str, ledger_id: int, attempt: str,
             txn_key: str | None) -> None:
    """Record a new ledger of write ``attempt`` (and sink ``txn_key``) before its first add."""
    _store(bk).create(log_name, ledger_id, {"attempt": attempt, "txn": txn_key})


def record_znode(bk: BookKeeper, log_name: str, ledger_id: int, attempt: str,
                 txn_key: str | None) -> tuple[str, bytes]:
    """What :func:`register` creates, as (path, data): for the transaction that creates the
    ledger itself (a log writer's spare: both exist or neither)."""
    return _store(bk).znode(log_name, ledger_id, {"attempt": attempt, "txn": txn_key})


def make_directory(bk: BookKeeper, log_name: str) -> None:
    """Create the directory of ``log_name``'s records if missing: a writer that rolls does
    it when it opens a log that has none (:func:`sweep_spares` said so), so that its first
    spare's transaction, like every later one, is one ZooKeeper operation."""
    _store(bk).make_directory(log_name)


def record_path(bk: BookKeeper, log_name: str, ledger_id: int) -> str:
    """The znode of ``ledger_id``'s record: a transaction that deletes it claims the ledger
    (a log writer's roll claims its spare in the CAS that lists it)."""
    return _store(bk).path(log_name, ledger_id)


def registered(bk: BookKeeper, log_name: str) -> list[int]:
    """Ledger ids pending for ``log_name``."""
    return _store(bk).ledger_ids(log_name)


def claim(bk: BookKeeper, log_name: str, ledger_ids: list[int]) -> list[int]:
    """Delete the records of ``ledger_ids``; returns the ids whose record this call deleted."""
    store = _store(bk)
    return [lid for lid in ledger_ids if store.delete(log_name, lid)]


def discard(bk: BookKeeper, log_name: str, ledger_ids: list[int], password: bytes) -> None:
    """Delete ledgers that will never be in the log (and their records); ``password``: the
    ledgers' (bookies check it before deleting)."""
    for lid in ledger_ids:
        try:
            bk.delete_ledger(lid, password)
        except NoSuchLedgerError:
            pass
        except BKError as exc:
            log.warning("log %r: could not delete uncommitted ledger %d: %s", log_name,
                        lid, exc)
            continue
        claim(bk, log_name, [lid])


def sweep(bk: BookKeeper, log_name: str, *, attempt: str, txn_key: str | None,
          password: bytes) -> list[int] | None:
    """Claim and delete the pending ledgers of ``attempt`` and of sink ``txn_key``; returns
    their ids (None: the log has no directory of records, so nothing was pending)."""
    store = _store(bk)
    doomed = []
    listing = store.listing(log_name)
    if listing is None:
        return None
    for lid in listing:
        rec = store.record(log_name, lid)
        if rec is None:
            continue
        if rec.get("attempt") == attempt or (txn_key is not None and
                                             rec.get("txn") == txn_key):
            doomed.append(lid)
    swept = claim(bk, log_name, doomed)
    discard(bk, log_name, swept, password)
    return swept


def sweep_spares(bk: BookKeeper, log_name: str, password: bytes) -> list[int] | None:
    """Claim and delete the spare ledgers log writers of ``log_name`` prepared and never
    used (a writer that died, or one that lost the log, leaves its spare pending); returns
    their ids, or None: the log has no directory of records yet (:func:`make_directory`).
    A live writer whose spare this sweeps loses its claim and creates its next ledger
    itself."""
    return sweep(bk, log_name, attempt=SPARE_ATTEMPT, txn_key=None, password=password)
