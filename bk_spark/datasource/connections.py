"""One :class:`BookKeeper` client per metadata service URI per process.

Spark reuses Python worker processes, and a client (a kazoo session plus gRPC channels) is
costly to open, so ``read()``/``write()`` borrow a cached one instead of opening their own.
The cache is keyed by URI and by process id: a forked worker never uses its parent's
sockets. Nothing here is pickled.
"""

from __future__ import annotations

import atexit
import os
import threading

from bk_spark.core.client import BookKeeper
from bk_spark.security import ClientSecurity

_lock = threading.Lock()
_clients: dict[tuple[int, str, ClientSecurity | None], BookKeeper] = {}


def client(uri: str, security: ClientSecurity | None = None) -> BookKeeper:
    """The process's client for ``uri`` with ``security`` (TLS files, ZooKeeper credentials;
    None: from the environment), opened on first use."""
    key = (os.getpid(), uri, security)
    with _lock:
        bk = _clients.get(key)
        if bk is None or bk.is_closed:
            bk = BookKeeper(uri, security=security)
            _clients[key] = bk
        return bk


def close_all() -> None:
    """Close this process's clients (e.g. before the cluster goes away)."""
    with _lock:
        mine = [bk for (pid, _uri, _sec), bk in _clients.items() if pid == os.getpid()]
        _clients.clear()
    for bk in mine:
        try:
            bk.close()
        except Exception:  # noqa: BLE001 - best effort at interpreter exit
            pass


atexit.register(close_all)
