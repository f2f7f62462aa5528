"""Under-replication state in ZooKeeper (BookKeeper's ``LedgerUnderreplicationManager``).

A recipe in kazoo's style: the kazoo client is passed in and owned by the caller. Layout
under the metadata service root ``<root>``::

    <root>/underreplication/ledgers/DDD/DDDD/DDDD/DDDD/LDDDD  one record per under-replicated
                                   ledger (JSON: the missing bookies, and the reason the
                                   last attempt to heal it failed), laid out like the
                                   ledger metadata so no listing grows past 10,000 children
    <root>/underreplication/locks/L<19 digits>   ephemeral: a worker owns that ledger now
    <root>/underreplication/disable              present: AutoRecovery is paused
    <root>/underreplication/auditor/             the Auditor election (kazoo Election)
    <root>/underreplication/workers/<id>         ephemeral: one per running worker
    <root>/underreplication/status               JSON the Auditor writes after each check

Guarantees:

* Marking is idempotent and merges: a record is created, or its missing bookies are
  unioned with the new ones by a compare-and-swap through
  :func:`~bk_spark.io.metadata_store.metadata_update_loop`, so several auditors (an old
  one not yet aware it lost the election, and the new one) never lose each other's marks.
* A worker removes only the bookies it replaced, by the same CAS loop; the record is
  deleted (at the version read) when none remains. A mark added meanwhile changes the
  version, the delete fails and the loop re-reads: the new mark survives.
* The lock of a ledger is an ephemeral znode: a worker that dies loses it with its
  session, and another worker takes the ledger over.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from bk_spark.errors import MetadataVersionError
from bk_spark.io.metadata_store import (
    Versioned,
    ledger_path,
    list_ledger_ids,
    metadata_update_loop,
)
from bk_spark.io.zk import ephemeral_lock_holder, release_ephemeral_lock, try_ephemeral_lock
from bk_spark.protocol.recovery_plan import UnderReplicated

_ABSENT = -1  # the "version" of a record that does not exist


class UnderReplicationManager:
    """Mark, list, lock and clear under-replicated ledgers; pause and resume AutoRecovery."""

    def __init__(self, zk: KazooClient, root: str) -> None:
        self._zk = zk
        self.root = root.rstrip("/")
        self.base = f"{self.root}/underreplication"
        self.ledgers_path = f"{self.base}/ledgers"
        self.locks_path = f"{self.base}/locks"
        self.disable_path = f"{self.base}/disable"
        self.election_path = f"{self.base}/auditor"
        self.workers_path = f"{self.base}/workers"
        self.status_path = f"{self.base}/status"

    # -- records -----------------------------------------------------------------------------

    def record_path(self, ledger_id: int) -> str:
        return ledger_path(self.base, ledger_id)

    def _read(self, ledger_id: int) -> Versioned[UnderReplicated]:
        try:
            data, stat = self._zk.retry(self._zk.get, self.record_path(ledger_id))
        except NoNodeError:
            return Versioned(UnderReplicated(ledger_id, frozenset()), _ABSENT)
        return Versioned(UnderReplicated.from_bytes(ledger_id, data), stat.version)

    def _write(self, new: UnderReplicated, version: int) -> Versioned[UnderReplicated]:
        """CAS one record: create it, change it at ``version``, or delete it when empty."""
        path = self.record_path(new.ledger_id)
        zk = self._zk
        try:
            if version == _ABSENT:
                if not new.missing:
                    return Versioned(new, _ABSENT)
                zk.retry(zk.create, path, new.to_bytes(), makepath=True)
                return Versioned(new, 0)
            if not new.missing:
                zk.retry(zk.delete, path, version=version)
                return Versioned(new, _ABSENT)
            stat = zk.retry(zk.set, path, new.to_bytes(), version=version)
            return Versioned(new, stat.version)
        except (BadVersionError, NodeExistsError, NoNodeError):
            raise MetadataVersionError(
                f"under-replication record of ledger {new.ledger_id} changed since version "
                f"{version}") from None

    def mark(self, ledger_id: int, missing: Iterable[str]) -> UnderReplicated:
        """Mark ``ledger_id`` under-replicated for the bookies ``missing`` (idempotent)."""
        missing = frozenset(missing)
        now = int(time.time() * 1000)

        def make(r: UnderReplicated) -> UnderReplicated:
            marked = r.marked_ms or now
            return UnderReplicated(ledger_id, r.missing | missing, marked, r.reason)

        return metadata_update_loop(
            read=lambda: self._read(ledger_id), write=self._write,
            needs_change=lambda r: not missing <= r.missing, make_change=make).value

    def mark_replicated(self, ledger_id: int, bookies: Iterable[str]) -> UnderReplicated:
        """Remove ``bookies`` (now replaced) from the record; delete it when none remains."""
        done = frozenset(bookies)
        return metadata_update_loop(
            read=lambda: self._read(ledger_id), write=self._write,
            needs_change=lambda r: bool(r.missing & done),
            make_change=lambda r: r.without(done)).value

    def set_reason(self, ledger_id: int, reason: str) -> None:
        """Record why the last re-replication attempt of ``ledger_id`` failed ("": clear it),
        by the same CAS loop; a record deleted meanwhile (healed) is not created again."""
        metadata_update_loop(
            read=lambda: self._read(ledger_id), write=self._write,
            needs_change=lambda r: bool(r.missing) and r.reason != reason,
            make_change=lambda r: r.with_reason(reason))

    def get(self, ledger_id: int) -> UnderReplicated | None:
        r = self._read(ledger_id)
        return None if r.version == _ABSENT else r.value

    def list(self) -> Iterator[UnderReplicated]:
        """Every under-replicated ledger's record, ascending ledger id."""
        for lid in list_ledger_ids(self._zk, self.ledgers_path):
            r = self.get(lid)
            if r is not None:
                yield r

    def count(self) -> int:
        return sum(1 for _ in list_ledger_ids(self._zk, self.ledgers_path))

    # -- locks -------------------------------------------------------------------------------

    def lock_path(self, ledger_id: int) -> str:
        return f"{self.locks_path}/L{ledger_id:019d}"

    def try_lock(self, ledger_id: int, owner: str) -> bool:
        """Take the ephemeral lock of ``ledger_id`` for ``owner``; False if another holds it."""
        return try_ephemeral_lock(self._zk, self.lock_path(ledger_id), owner)

    def unlock(self, ledger_id: int) -> None:
        release_ephemeral_lock(self._zk, self.lock_path(ledger_id))

    def lock_holder(self, ledger_id: int) -> str | None:
        return ephemeral_lock_holder(self._zk, self.lock_path(ledger_id))

    # -- enable / disable, workers, auditor status -------------------------------------------

    def is_enabled(self) -> bool:
        return self._zk.retry(self._zk.exists, self.disable_path) is None

    def set_enabled(self, enabled: bool) -> None:
        zk = self._zk
        try:
            if enabled:
                zk.retry(zk.delete, self.disable_path)
            else:
                zk.retry(zk.create, self.disable_path, b"", makepath=True)
        except (NoNodeError, NodeExistsError):
            pass

    def register_worker(self, worker_id: str, info: dict) -> None:
        """Keep ``workers/<worker_id>`` registered by this session (idempotent: call it
        often; a znode left by a previous process with the same id is replaced)."""
        zk = self._zk
        path = f"{self.workers_path}/{worker_id}"
        stat = zk.retry(zk.exists, path)
        if stat is not None and stat.ephemeralOwner == zk.client_id[0]:
            return
        try:
            if stat is not None:
                zk.retry(zk.delete, path)
            zk.retry(zk.create, path, json.dumps(info).encode(), ephemeral=True, makepath=True)
        except (NodeExistsError, NoNodeError):
            pass  # another process with the same id raced us: the next call decides

    def workers(self) -> list[str]:
        try:
            return sorted(self._zk.retry(self._zk.get_children, self.workers_path))
        except NoNodeError:
            return []

    def auditor(self) -> str | None:
        """The elected Auditor's id (the first contender of the election), or None."""
        contenders = self._zk.Election(self.election_path).contenders()
        return contenders[0] if contenders else None

    def write_status(self, status: dict) -> None:
        zk = self._zk
        data = json.dumps(status).encode()
        try:
            zk.retry(zk.set, self.status_path, data)
        except NoNodeError:
            try:
                zk.retry(zk.create, self.status_path, data, makepath=True)
            except NodeExistsError:
                zk.retry(zk.set, self.status_path, data)

    def status(self) -> dict:
        try:
            data, _ = self._zk.retry(self._zk.get, self.status_path)
            return json.loads(data or b"{}")
        except (NoNodeError, ValueError):
            return {}
