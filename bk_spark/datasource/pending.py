"""Ledgers written by Spark tasks but not committed to their log yet (a kazoo recipe).

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
ledger can never be committed. (A process killed between creating its ledger and
registering it leaves that ledger behind; its custom metadata ``bk-spark.log`` and
``bk-spark.attempt`` name it.)
"""

from __future__ import annotations

import json
import logging

from kazoo.exceptions import NodeExistsError, NoNodeError

from bk_spark.core.client import BookKeeper
from bk_spark.errors import BKError, NoSuchLedgerError

log = logging.getLogger(__name__)


def _dir(bk: BookKeeper, log_name: str) -> str:
    return f"{bk.msu.root}/bk-spark/pending/{log_name}"


def register(bk: BookKeeper, log_name: str, ledger_id: int, attempt: str,
             txn_key: str | None) -> None:
    data = json.dumps({"attempt": attempt, "txn": txn_key}).encode()
    try:
        bk.zk.retry(bk.zk.create, f"{_dir(bk, log_name)}/{ledger_id}", data, makepath=True)
    except NodeExistsError:
        pass


def registered(bk: BookKeeper, log_name: str) -> list[int]:
    """Ledger ids pending for ``log_name``."""
    try:
        return sorted(int(c) for c in bk.zk.retry(bk.zk.get_children, _dir(bk, log_name)))
    except NoNodeError:
        return []


def claim(bk: BookKeeper, log_name: str, ledger_ids: list[int]) -> list[int]:
    """Delete the znodes of ``ledger_ids``; returns the ids whose znode this call deleted."""
    won = []
    for lid in ledger_ids:
        try:
            bk.zk.retry(bk.zk.delete, f"{_dir(bk, log_name)}/{lid}")
        except NoNodeError:
            continue
        won.append(lid)
    return won


def discard(bk: BookKeeper, log_name: str, ledger_ids: list[int], password: bytes) -> None:
    """Delete ledgers that will never be in the log (and their znodes); ``password``: the
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
          password: bytes) -> list[int]:
    """Claim and delete the pending ledgers of ``attempt`` and of sink ``txn_key``; returns
    their ids."""
    path = _dir(bk, log_name)
    try:
        children = bk.zk.retry(bk.zk.get_children, path)
    except NoNodeError:
        return []
    doomed = []
    for child in children:
        try:
            lid = int(child)
            data, _stat = bk.zk.retry(bk.zk.get, f"{path}/{child}")
            rec = json.loads(data or b"{}")
        except (ValueError, NoNodeError):
            continue
        if rec.get("attempt") == attempt or (txn_key is not None and
                                             rec.get("txn") == txn_key):
            doomed.append(lid)
    swept = claim(bk, log_name, doomed)
    discard(bk, log_name, swept, password)
    return swept
