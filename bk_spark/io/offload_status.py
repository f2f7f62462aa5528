"""Why the elected offloader cannot offload a log, kept in ZooKeeper for ``bk offload
status`` (as the Auditor keeps its status under ``<root>/underreplication/status``).

Layout: ``<root>/offloader/failing``, JSON ``{"<log>": {"reason": "...", "since_ms": ms,
"passes": n}}``. Only the elected offloader writes it, and only when the set of failing
logs or a reason changes (not every pass); a log whose pass succeeds again leaves it.
A kazoo recipe: the client is the caller's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError


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
