"""A role that runs in the background of a process with its own client: the one service
loop AutoRecovery (:class:`bk_spark.autorecovery.service.AutoRecoveryService`) and the
offloader (:class:`bk_spark.offload.service.OffloaderService`) share.

Theory of operation: a subclass's :meth:`BackgroundService.start` opens its client (its
own ZooKeeper session, so the locks and elections of the role live and die with it) and
starts each loop of the role with :meth:`BackgroundService.spawn`: a daemon thread running
``loop(stop)`` until the service's one stop event is set. A loop that raises while the
service is not stopping is logged and ends; the others go on. :meth:`stop` sets the event,
joins every thread it started (up to :data:`JOIN_TIMEOUT_S` each) and closes the client.
:meth:`start_in_background` retries :meth:`start` while ZooKeeper is unreachable (a bookie
keeps serving meanwhile); :meth:`serve_forever` is the standalone command's main loop.

Threads: the caller's (start, stop, serve_forever), one per loop, and one for a start in
the background. State shared between them: the stop event, the thread list (appended only
before the event is set) and ``bk``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from bk_spark.core.client import BookKeeper

log = logging.getLogger(__name__)

#: How long :meth:`BackgroundService.stop` waits for each thread.
JOIN_TIMEOUT_S = 10.0
#: How long a start in the background waits before trying again.
START_RETRY_S = 2.0


class BackgroundService:
    """Start/stop one role's loops in this process (see the module docstring).

    Subclasses set :attr:`role` (how logs name it) and implement :meth:`start`, which
    sets :attr:`bk` and calls :meth:`spawn` for each loop."""

    role = "service"

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.bk: BookKeeper | None = None

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def start(self) -> None:
        raise NotImplementedError

    def spawn(self, name: str, loop: Callable[[threading.Event], object]) -> None:
        """Run ``loop(stop)`` on a daemon thread named ``name`` until the service stops."""

        def run() -> None:
            try:
                loop(self._stop)
            except Exception:
                if not self._stop.is_set():
                    log.exception("%s %s died", self.role, name)

        t = threading.Thread(target=run, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def start_in_background(self) -> None:
        """:meth:`start` from a thread, retrying while ZooKeeper is unreachable (a bookie
        keeps serving while the metadata service is down)."""

        def run() -> None:
            while not self._stop.is_set():
                try:
                    self.start()
                    return
                except Exception as exc:
                    log.warning("%s cannot start yet (%s); retrying", self.role, exc)
                    self._stop.wait(START_RETRY_S)

        t = threading.Thread(target=run, name=f"{self.role}-start", daemon=True)
        t.start()
        self._threads.append(t)

    def stop(self) -> None:
        """Stop every loop, wait for their threads, close the client."""
        self._stop.set()
        for t in list(self._threads):
            t.join(timeout=JOIN_TIMEOUT_S)
        if self.bk is not None:
            self.bk.close()
            self.bk = None

    def serve_forever(self, done: threading.Event) -> None:
        """Start, run until ``done`` is set (the command's signal handler), then stop."""
        self.start()
        try:
            while not done.wait(1.0):
                pass
        finally:
            self.stop()
