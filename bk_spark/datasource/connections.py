"""One :class:`BookKeeper` client per metadata service URI per process.

Spark reuses Python worker processes, and a client (a kazoo session plus gRPC channels) is
costly to open, so ``read()``/``write()`` borrow a cached one instead of opening their own.
The cache is keyed by URI and by process id: a forked worker never uses its parent's
sockets. Nothing here is pickled.

Spark's Python worker runs a full ``gc.collect()`` after every task; with a client open
the process holds a large, long-lived heap (gRPC, kazoo, pyarrow, the client itself) that
each collection walks again (tens of milliseconds per task, on a CPU the other tasks and
the bookies need). So once a client is open, the objects then alive are moved out of the
collector's reach (``gc.freeze()``: they are never garbage collected; the interpreter's
own objects and the client live as long as the process anyway).
"""

from __future__ import annotations

import atexit
import gc
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
            gc.collect()
            gc.freeze()  # the long-lived heap, out of the per-task collections' way
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
