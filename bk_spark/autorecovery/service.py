"""AutoRecovery in one process: an Auditor contender plus a Replication Worker.

Runs inside every bookie process by default (``bk bookie --autorecovery``) and standalone
(``bk autorecovery --metadata-service-uri URI``). It opens its own client (its own
ZooKeeper session: the worker's locks and the election live and die with it).
"""

from __future__ import annotations

import logging
import os
import socket

from prometheus_client import CollectorRegistry

from bk_spark.autorecovery.auditor import Auditor
from bk_spark.autorecovery.metrics import AutoRecoveryMetrics
from bk_spark.autorecovery.replicator import LedgerReplicator, LocalKeySource
from bk_spark.autorecovery.worker import ReplicationWorker
from bk_spark.core.client import BookKeeper, BookKeeperConfig
from bk_spark.core.service import BackgroundService
from bk_spark.io.underreplication import UnderReplicationManager
from bk_spark.security import ClientSecurity
from bookie_server.config import AutoRecoveryConfig

log = logging.getLogger(__name__)


class AutoRecoveryService(BackgroundService):
    """Start/stop an Auditor contender and a Replication Worker in this process (the
    service loop: :class:`~bk_spark.core.service.BackgroundService`)."""

    role = "autorecovery"

    def __init__(self, metadata_service_uri: str, config: AutoRecoveryConfig | None = None, *,
                 identity: str | None = None, registry: CollectorRegistry | None = None,
                 client_config: BookKeeperConfig | None = None,
                 security: ClientSecurity | None = None,
                 local_key: LocalKeySource | None = None) -> None:
        """``security``: how the worker's client reaches secured bookies and ZooKeeper
        (default: from the environment, as every client); ``local_key``: in a bookie's
        process, reads the master key that bookie stored with a ledger (the worker then
        heals password-protected ledgers the bookie holds a copy of with no password)."""
        super().__init__()
        self.config = config or AutoRecoveryConfig()
        self.security = security
        self.local_key = local_key
        self.uri = metadata_service_uri
        self.identity = identity or f"{socket.gethostname()}-{os.getpid()}"
        self.metrics = AutoRecoveryMetrics(registry)
        self.client_config = client_config or BookKeeperConfig(tune_allocator=False)

    def start(self) -> None:
        cfg = self.config
        if self.stopping:
            return
        self.bk = bk = BookKeeper(self.uri, self.client_config, security=self.security)
        urm = UnderReplicationManager(bk.zk, bk.msu.root)
        passwords = tuple(dict.fromkeys((b"", *cfg.passwords)))
        replicator = LedgerReplicator(bk, passwords=passwords,
                                      open_ledger_grace_s=cfg.open_ledger_grace_s,
                                      on_copied=self.metrics.copied,
                                      local_key=self.local_key)
        if cfg.run_worker:
            worker = ReplicationWorker(urm, replicator, self.identity, self.metrics,
                                       poll_s=cfg.worker_poll_s)
            self.spawn("replication-worker", worker.run)
        if cfg.run_auditor:
            auditor = Auditor(bk, urm, self.identity, self.metrics,
                              lost_bookie_recovery_delay_s=cfg.lost_bookie_recovery_delay_s,
                              audit_interval_s=cfg.audit_interval_s, tick_s=cfg.auditor_tick_s,
                              verify_entries=cfg.audit_verify_entries)
            self.spawn("auditor", auditor.run)
        log.info("autorecovery %s started (auditor %s, worker %s)", self.identity,
                 cfg.run_auditor, cfg.run_worker)
