"""One :class:`BookKeeper` client per metadata service URI per process.

Spark reuses Python worker processes, and a client (a kazoo session plus gRPC channels) is
costly to open, so ``read()``/``write()`` borrow a cached one instead of opening their own.
The cache is keyed by URI and by process id: a forked worker never uses its parent's
sockets. Nothing here is pickled.

Two process-wide settings are made only in Spark's Python workers (a task is running:
``TaskContext.get()``), processes Spark starts and reuses for tasks, never in the driver (the
user's own process, which gets a plain client):

* Spark's Python worker runs a full ``gc.collect()`` after every task; with a client open
  the process holds a large, long-lived heap (gRPC, kazoo, pyarrow, the client itself) that
  each collection walks again (tens of milliseconds per task, on a CPU the other tasks and
  the bookies need). So once a client is open, the objects then alive are moved out of the
  collector's reach (``gc.freeze()``: they are never garbage collected; the interpreter's
  own objects and the client live as long as the process anyway).
* The client retunes glibc's malloc for megabyte batches (``tune_allocator``,
  :mod:`bk_spark.allocator`).
"""

from __future__ import annotations

import atexit
import os
import threading

from bk_spark.allocator import freeze_heap
from bk_spark.core.client import BookKeeper, BookKeeperConfig
from bk_spark.io.bookie_client import ClientConfig
from bk_spark.security import ClientSecurity

#: The bound on adds in flight of the data source's clients (``ClientConfig``'s default,
#: 2 MiB, is a latency bound for small entries): a write task keeps up to this many bytes of
#: its 2-4 MiB arrow entries in flight (``writer.MAX_IN_FLIGHT_BYTES``), as many as its
#: pipeline wants.
ADDS_IN_FLIGHT_MAX_BYTES = 64 << 20

_lock = threading.Lock()
_clients: dict[tuple[int, str, ClientSecurity | None], BookKeeper] = {}


def client(uri: str, security: ClientSecurity | None = None) -> BookKeeper:
    """The process's client for ``uri`` with ``security`` (TLS files, ZooKeeper credentials;
    None: from the environment), opened on first use."""
    key = (os.getpid(), uri, security)
    with _lock:
        bk = _clients.get(key)
        if bk is None or bk.is_closed:
            worker = in_spark_worker()
            bk = BookKeeper(uri, BookKeeperConfig(
                tune_allocator=worker,
                client=ClientConfig(adds_in_flight_max_bytes=ADDS_IN_FLIGHT_MAX_BYTES)),
                security=security)
            _clients[key] = bk
            if worker:
                freeze_heap()  # the long-lived heap, out of the per-task collections' way
        return bk


def in_spark_worker() -> bool:
    """True in a Spark Python worker running a task (not in the driver)."""
    try:
        from pyspark import TaskContext
    except ImportError:
        return False
    return TaskContext.get() is not None


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
