"""The offloader in one process: inside a bookie (``bk bookie --offload``) or standalone
(``bk offloader --metadata-service-uri URI``). It opens its own client (its own ZooKeeper
session: the election lives and dies with it).
"""

from __future__ import annotations

import logging
import os
import socket

from prometheus_client import CollectorRegistry

from bk_spark.autorecovery.replicator import LocalKeySource
from bk_spark.core.client import BookKeeper, BookKeeperConfig
from bk_spark.core.service import BackgroundService
from bk_spark.offload.metrics import OffloadMetrics
from bk_spark.offload.offloader import Offloader, OffloaderConfig
from bk_spark.security import ClientSecurity

log = logging.getLogger(__name__)


class OffloaderService(BackgroundService):
    """Start/stop an offloader contender in this process (the service loop:
    :class:`~bk_spark.core.service.BackgroundService`)."""

    role = "offloader"

    def __init__(self, metadata_service_uri: str, config: OffloaderConfig | None = None, *,
                 identity: str | None = None, registry: CollectorRegistry | None = None,
                 security: ClientSecurity | None = None,
                 local_key: LocalKeySource | None = None) -> None:
        """``local_key``: in a bookie's process (``bk bookie --offload``), the master key
        its storage keeps with each ledger, so password-protected ledgers are offloaded
        with no password configured, as its AutoRecovery worker heals them
        (:func:`~bk_spark.offload.offloader.offload_secret`)."""
        super().__init__()
        self.uri = metadata_service_uri
        self.config = config or OffloaderConfig()
        self.identity = identity or f"{socket.gethostname()}-{os.getpid()}"
        self.metrics = OffloadMetrics(registry)
        self.security = security
        self.local_key = local_key

    def start(self) -> None:
        self.bk = bk = BookKeeper(self.uri, BookKeeperConfig(tune_allocator=False),
                                  security=self.security)
        offloader = Offloader(bk, self.identity, self.config, self.metrics,
                              local_key=self.local_key)
        self.spawn("offloader", offloader.run)
        if self.local_key is not None:  # a bookie's: it keys the ledgers it holds
            self.spawn("offload-keyholder", offloader.serve_waiting)
        log.info("offloader %s started", self.identity)
