"""The offloader in one process: inside a bookie (``bk bookie --offload``) or standalone
(``bk offloader --metadata-service-uri URI``). It opens its own client (its own ZooKeeper
session: the election lives and dies with it).
"""

from __future__ import annotations

import logging
import os
import socket
import threading

from prometheus_client import CollectorRegistry

from bk_spark.autorecovery.replicator import LocalKeySource
from bk_spark.core.client import BookKeeper, BookKeeperConfig
from bk_spark.offload.metrics import OffloadMetrics
from bk_spark.offload.offloader import Offloader, OffloaderConfig
from bk_spark.security import ClientSecurity

log = logging.getLogger(__name__)


class OffloaderService:
    """Start/stop an offloader contender in this process."""

    def __init__(self, metadata_service_uri: str, config: OffloaderConfig | None = None, *,
                 identity: str | None = None, registry: CollectorRegistry | None = None,
                 security: ClientSecurity | None = None,
                 local_key: LocalKeySource | None = None) -> None:
        """``local_key``: in a bookie's process (``bk bookie --offload``), the master key
        its storage keeps with each ledger, so password-protected ledgers are offloaded
        with no password configured, as its AutoRecovery worker heals them
        (:func:`~bk_spark.offload.offloader.offload_secret`)."""
        self.uri = metadata_service_uri
        self.config = config or OffloaderConfig()
        self.identity = identity or f"{socket.gethostname()}-{os.getpid()}"
        self.metrics = OffloadMetrics(registry)
        self.security = security
        self.local_key = local_key
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.bk: BookKeeper | None = None

    def start(self) -> None:
        self.bk = bk = BookKeeper(self.uri, BookKeeperConfig(tune_allocator=False),
                                  security=self.security)
        offloader = Offloader(bk, self.identity, self.config, self.metrics,
                              local_key=self.local_key)

        def run() -> None:
            try:
                offloader.run(self._stop)
            except Exception:
                if not self._stop.is_set():
                    log.exception("offloader died")

        self._thread = threading.Thread(target=run, name="offloader", daemon=True)
        self._thread.start()
        log.info("offloader %s started", self.identity)

    def start_in_background(self) -> None:
        """:meth:`start` from a thread, retrying while ZooKeeper is unreachable."""

        def run() -> None:
            while not self._stop.is_set():
                try:
                    self.start()
                    return
                except Exception as exc:
                    log.warning("offloader cannot start yet (%s); retrying", exc)
                    self._stop.wait(2.0)

        threading.Thread(target=run, name="offloader-start", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self.bk is not None:
            self.bk.close()
            self.bk = None

    def serve_forever(self, done: threading.Event) -> None:
        self.start()
        try:
            while not done.wait(1.0):
                pass
        finally:
            self.stop()
