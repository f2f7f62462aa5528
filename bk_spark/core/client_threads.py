"""The client's threads: a fixed few, however many ledgers are open (issue 28, §4).

Theory of operation. A client used to start two threads per open ledger (a sender and an
explicit-LAC thread), one more per ensemble change (never joined), a pool per
``iter_batches`` and another per stream wait: a Spark executor with 1,000 ledgers open ran
2,000 threads. As Apache BookKeeper's client does with its ``OrderedExecutor``, work is now
handed to threads the client owns:

* **the I/O loop** (one thread, ``bk-clientN-io``): ships the rounds of every ledger writer
  (:meth:`LedgerHandle._ship`), runs timers (a writer's linger) and the explicit-LAC sends.
  It runs whatever is ready in one pass, with the add streams corked
  (:func:`~bk_spark.io.add_stream.corked`): the requests of every writer shipped in a pass
  leave for each bookie in one stream message. Timers many writers set alike (lingers,
  explicit LACs) are gathered (:meth:`gather_later`): one timer and one call per interval.
  Everything it runs is short and never waits on a bookie: a writer whose bookies' request
  windows are full is parked on them (:meth:`BookieClient.when_window`) and called again
  when an answer frees the window. One loop runs one writer's rounds one at a time, in
  entry order, as its own sender thread did.
* **the work pool** (``work_threads`` threads, ``bk-clientN-work_K``): work that blocks on
  ZooKeeper: ensemble changes.
* **the wait pool** (``wait_threads`` threads, ``bk-clientN-wait_K``): work that waits on
  bookies for the caller: the read-ahead of ``iter_batches``, a streaming source's long
  polls. Apart from the work pool, so that readers waiting never delay an ensemble change.

Both start on first use and :meth:`close` joins them: nothing a client started outlives it.
Answers from bookies arrive on gRPC's own threads (one per channel), which only count
acknowledgements and schedule here.

Lock order: a caller may hold a ledger handle's lock while it calls :meth:`schedule` or
:meth:`call_later` (they take only this object's condition, briefly); nothing here is run
while that condition is held.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from bk_spark.errors import BookieUnavailableError
from bk_spark.io.add_stream import corked

log = logging.getLogger(__name__)

#: Threads of the work pool (ensemble changes) and of the wait pool (read-ahead, long polls).
WORK_THREADS = 4
WAIT_THREADS = 4
_CLIENTS = itertools.count(1)  # numbers the clients' thread names


class ClientThreads:
    """One I/O loop and one small work pool for a client (see the module docstring)."""

    def __init__(self, work_threads: int = WORK_THREADS,
                 wait_threads: int = WAIT_THREADS) -> None:
        self._cv = threading.Condition()
        self._ready: deque[Callable[[], None]] = deque()
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        # gather_later: the items gathered per function until its timer runs it
        self._gathered: dict[Callable[[list[Any]], None], list[Any]] = {}
        self._seq = itertools.count()
        self._loop: threading.Thread | None = None
        self._pools: dict[str, ThreadPoolExecutor] = {}
        self._sizes = {"work": work_threads, "wait": wait_threads}
        self._closed = False
        self._prefix = f"bk-client{next(_CLIENTS)}-"

    # ------------------------------------------------------------------ the I/O loop
    def schedule(self, fn: Callable[[], None]) -> None:
        """Run ``fn()`` on the I/O loop, after what is already scheduled. After
        :meth:`close` it runs at once on the caller's thread (a writer failing its adds
        must still decide them)."""
        with self._cv:
            if not self._closed:
                self._ready.append(fn)
                self._start_loop()
                self._cv.notify()
                return
        fn()

    def call_later(self, delay_s: float, fn: Callable[[], None]) -> None:
        """Run ``fn()`` on the I/O loop once ``delay_s`` passed (at once after close)."""
        with self._cv:
            if not self._closed:
                heapq.heappush(self._timers, (time.monotonic() + delay_s, next(self._seq), fn))
                self._start_loop()
                self._cv.notify()
                return
        fn()

    def gather_later(self, delay_s: float, fn: Callable[[list[Any]], None], item: Any
                     ) -> None:
        """Run ``fn(items)`` on the I/O loop ``delay_s`` after the first ``item`` gathered
        for ``fn`` since it last ran, with every item gathered meanwhile (in order): one
        timer and one call for many writers, not one each (a thousand writers' lingers and
        explicit LACs, issue 28). ``fn`` must be one object for all callers (a module-level
        function, not a bound method). After :meth:`close`: ``fn([item])`` at once."""
        with self._cv:
            if not self._closed:
                items = self._gathered.get(fn)
                if items is not None:
                    items.append(item)
                    return
                self._gathered[fn] = [item]
                heapq.heappush(self._timers, (time.monotonic() + delay_s, next(self._seq),
                                              lambda: self._run_gathered(fn)))
                self._start_loop()
                self._cv.notify()
                return
        fn([item])

    def _run_gathered(self, fn: Callable[[list[Any]], None]) -> None:
        with self._cv:
            items = self._gathered.pop(fn, None)
        if items:
            fn(items)

    def _start_loop(self) -> None:
        if self._loop is None:
            self._loop = threading.Thread(target=self._run, name=self._prefix + "io", daemon=True)
            self._loop.start()

    def _run(self) -> None:
        ready, timers = self._ready, self._timers
        while True:
            with self._cv:
                while True:
                    now = time.monotonic()
                    while timers and timers[0][0] <= now:
                        ready.append(heapq.heappop(timers)[2])
                    if ready or self._closed:
                        break
                    self._cv.wait(timers[0][0] - now if timers else None)
                if not ready and self._closed:
                    return
                batch = list(ready)
                ready.clear()
            # One pass over every writer ready now: what they hand a bookie's add stream
            # leaves together once the pass ends (corked: one wake-up of the stream's sender,
            # one message, instead of one per writer).
            with corked():
                for fn in batch:
                    try:
                        fn()
                    except Exception:  # a bug in one writer's round must not stop the others
                        log.exception("client I/O loop: %r failed", fn)

    # ------------------------------------------------------------------ the pools
    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        """Run ``fn(*args)`` on the work pool; :class:`BookieUnavailableError` after close
        (as :meth:`BookieClientPool.get`: no bookie is reached through a closed client)."""
        return self._submit("work", fn, args)

    def submit_wait(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        """Run ``fn(*args)`` on the wait pool (a read or a long poll for a caller that
        waits on its future meanwhile); :class:`BookieUnavailableError` after close."""
        return self._submit("wait", fn, args)

    def _submit(self, kind: str, fn: Callable[..., Any], args: tuple[Any, ...]
                ) -> Future[Any]:
        with self._cv:
            if self._closed:
                raise BookieUnavailableError("the BookKeeper client is closed")
            pool = self._pools.get(kind)
            if pool is None:
                pool = self._pools[kind] = ThreadPoolExecutor(
                    self._sizes[kind], thread_name_prefix=self._prefix + kind)
        return pool.submit(fn, *args)

    # ------------------------------------------------------------------ lifecycle
    def close(self, timeout: float | None = 30.0) -> None:
        """Run what is scheduled (timers due later run now), then join the loop and the
        pools. Work a pool is running finishes; work queued there is cancelled."""
        with self._cv:
            if self._closed:
                return
            self._closed = True
            self._ready.extend(fn for _due, _seq, fn in sorted(self._timers))
            self._timers.clear()
            self._cv.notify_all()
            loop, pools = self._loop, list(self._pools.values())
        if loop is not None and loop is not threading.current_thread():
            loop.join(timeout)
        for pool in pools:
            pool.shutdown(wait=True, cancel_futures=True)

    def threads(self) -> list[threading.Thread]:
        """The threads this object started and that still run (for tests and diagnosis)."""
        return [t for t in threading.enumerate() if t.name.startswith(self._prefix)]
