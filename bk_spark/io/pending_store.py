"""The znodes of ledgers written for a log but not committed yet (a kazoo recipe):
``<root>/bk-spark/pending/<log>/<ledger id>`` holding a small JSON record. ZooKeeper lets
exactly one delete of a znode succeed: :meth:`PendingLedgerStore.delete` says whether this
call was the one (:mod:`bk_spark.log.pending` builds the claim protocol on that)."""

from __future__ import annotations

import json
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from bk_spark.io.zk import delete_if_present


class PendingLedgerStore:
    """Pending-ledger records of the logs under one metadata root."""

    def __init__(self, zk: KazooClient, root: str) -> None:
        self._zk = zk
        self._root = root

    def _dir(self, log_name: str) -> str:
        return f"{self._root}/bk-spark/pending/{log_name}"

    def path(self, log_name: str, ledger_id: int) -> str:
        """The znode of ``ledger_id``'s record (deleting it claims the ledger)."""
        return f"{self._dir(log_name)}/{ledger_id}"

    def znode(self, log_name: str, ledger_id: int, record: dict[str, Any]
              ) -> tuple[str, bytes]:
        """The znode (path, data) recording ``ledger_id`` as pending: :meth:`create` makes
        it, or the transaction that creates the ledger (a log writer's spare)."""
        return self.path(log_name, ledger_id), json.dumps(record).encode()

    def create(self, log_name: str, ledger_id: int, record: dict[str, Any]) -> None:
        """Record ``ledger_id`` as pending for ``log_name`` (idempotent)."""
        try:
            self._zk.retry(self._zk.create, *self.znode(log_name, ledger_id, record),
                           makepath=True)
        except NodeExistsError:
            pass

    def make_directory(self, log_name: str) -> None:
        """Create the znode holding ``log_name``'s records (and its parents) if missing."""
        self._zk.retry(self._zk.ensure_path, self._dir(log_name))

    def ledger_ids(self, log_name: str) -> list[int]:
        """The ledger ids pending for ``log_name``, ascending."""
        return self.listing(log_name) or []

    def listing(self, log_name: str) -> list[int] | None:
        """The ledger ids pending for ``log_name``, ascending; None: the directory of its
        records does not exist (no ledger was ever pending for it)."""
        try:
            children = self._zk.retry(self._zk.get_children, self._dir(log_name))
        except NoNodeError:
            return None
        return sorted(int(c) for c in children if c.isdigit())

    def record(self, log_name: str, ledger_id: int) -> dict[str, Any] | None:
        """The record of a pending ledger (None: not pending, or unreadable)."""
        try:
            data, _stat = self._zk.retry(self._zk.get, f"{self._dir(log_name)}/{ledger_id}")
            return json.loads(data or b"{}")
        except (ValueError, NoNodeError):
            return None

    def delete(self, log_name: str, ledger_id: int) -> bool:
        """Delete the record; True if this call deleted it (ZooKeeper lets one win)."""
        return delete_if_present(self._zk, f"{self._dir(log_name)}/{ledger_id}")
