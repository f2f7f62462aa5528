"""Why the elected offloader cannot offload a log, kept in ZooKeeper for ``bk offload
status`` (as the Auditor keeps its status under ``<root>/underreplication/status``).

Layout: ``<root>/offloader/failing``, JSON ``{"<log>": {"reason": "...", "since_ms": ms,
"passes": n}}``. Only the elected offloader writes it, and only when the set of failing
logs or a reason changes (not every pass); a log whose pass succeeds again leaves it.
Also the ledgers the elected offloader cannot key, left to a keyholder, and the claims
of the contenders offloading a ledger (below). Kazoo recipes: the client is the caller's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from bk_spark.io.zk import (
    delete_if_present,
    ephemeral_lock_holder,
    release_ephemeral_lock,
    try_ephemeral_lock,
)


def failing_path(root: str) -> str:
    return f"{root.rstrip('/')}/offloader/failing"


def write_failing(zk: KazooClient, root: str, failing: Mapping[str, Mapping[str, Any]]
                  ) -> None:
    """Replace the record of failing logs (the elected offloader is its one writer)."""
    path = failing_path(root)
    data = json.dumps(dict(failing), sort_keys=True).encode()
    try:
        zk.retry(zk.set, path, data)
    except NoNodeError:
        try:
            zk.retry(zk.create, path, data, makepath=True)
        except NodeExistsError:
            zk.retry(zk.set, path, data)


def read_failing(zk: KazooClient, root: str) -> dict[str, dict[str, Any]]:
    """The failing logs the elected offloader last recorded ({}: none, or no offloader)."""
    try:
        data, _ = zk.retry(zk.get, failing_path(root))
    except NoNodeError:
        return {}
    try:
        out = json.loads(data or b"{}")
    except ValueError:
        return {}
    return out if isinstance(out, dict) else {}


# ------------------------------------------------ ledgers waiting for a keyholder, claims
# ``<root>/offloader/waiting/L<ledger id>``: JSON ``{"log": name, "target": URI|null,
# "since_ms": ms}``, written by the elected offloader for a due ledger it cannot key
# (:data:`bk_spark.protocol.offload_rules.HANDOFF`), removed once it is no longer due.
# ``<root>/offloader/claims/L<ledger id>``: ephemeral, the identity of the contender
# running the protocol's four steps on that ledger (gone with its session).


def _waiting_dir(root: str) -> str:
    return f"{root.rstrip('/')}/offloader/waiting"


def _claim_path(root: str, ledger_id: int) -> str:
    return f"{root.rstrip('/')}/offloader/claims/L{ledger_id:019d}"


def record_waiting(zk: KazooClient, root: str, ledger_id: int, log_name: str,
                   target: str | None, since_ms: int) -> None:
    """Record (once) that ``ledger_id`` of ``log_name`` waits for a keyholder."""
    path = f"{_waiting_dir(root)}/L{ledger_id:019d}"
    data = json.dumps({"log": log_name, "target": target, "since_ms": since_ms}).encode()
    try:
        zk.retry(zk.create, path, data, makepath=True)
    except NodeExistsError:
        pass


def waiting(zk: KazooClient, root: str) -> dict[int, dict[str, Any]]:
    """The ledgers waiting for a keyholder: ledger id -> its record."""
    out: dict[int, dict[str, Any]] = {}
    try:
        names = zk.retry(zk.get_children, _waiting_dir(root))
    except NoNodeError:
        return out
    for n in names:
        try:
            data, _ = zk.retry(zk.get, f"{_waiting_dir(root)}/{n}")
            rec = json.loads(data or b"{}")
        except (NoNodeError, ValueError):
            continue
        if n.startswith("L") and n[1:].isdigit() and isinstance(rec, dict):
            out[int(n[1:])] = rec
    return out


def drop_waiting(zk: KazooClient, root: str, ledger_id: int) -> None:
    delete_if_present(zk, f"{_waiting_dir(root)}/L{ledger_id:019d}")


def try_claim(zk: KazooClient, root: str, ledger_id: int, owner: str) -> bool:
    """Take the ephemeral claim of ``ledger_id`` for ``owner``; False if another holds it
    (the Replication Workers' lock recipe, :func:`bk_spark.io.zk.try_ephemeral_lock`)."""
    return try_ephemeral_lock(zk, _claim_path(root, ledger_id), owner)


def release_claim(zk: KazooClient, root: str, ledger_id: int) -> None:
    release_ephemeral_lock(zk, _claim_path(root, ledger_id))


def claim_holder(zk: KazooClient, root: str, ledger_id: int) -> str | None:
    return ephemeral_lock_holder(zk, _claim_path(root, ledger_id))
