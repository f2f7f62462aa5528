"""Prometheus metrics of AutoRecovery, on the registry the caller gives (a bookie's own)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_SECONDS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0)


class AutoRecoveryMetrics:
    """Under-replicated ledgers (as the Auditor last counted them), those of them that
    cannot be healed now (a failed attempt's reason is on their record), entries and bytes
    re-replicated by this process's worker, its failed attempts, time to re-replicate one
    ledger, and whether this process is the elected Auditor (BookKeeper's
    ``NUM_UNDER_REPLICATED_LEDGERS``,
    ``NUM_ENTRIES_WRITTEN``/``NUM_BYTES_WRITTEN``, ``REPLICATE_LEDGER_TIME``)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry(auto_describe=True)
        self.under_replicated = Gauge(
            "autorecovery_under_replicated_ledgers",
            "Ledgers marked under-replicated (counted by the elected Auditor)", registry=r)
        self.entries = Counter("autorecovery_entries_replicated",
                               "Entries copied to replacement bookies", registry=r)
        self.bytes = Counter("autorecovery_bytes_replicated",
                             "Payload bytes copied to replacement bookies", registry=r)
        self.ledger_seconds = Histogram(
            "autorecovery_replicate_ledger_seconds", "Time to re-replicate one ledger",
            buckets=_SECONDS, registry=r)
        self.auditor_elected = Gauge("autorecovery_auditor_elected",
                                     "1 while this process is the elected Auditor", registry=r)
        self.ledgers_marked = Counter("autorecovery_ledgers_marked",
                                      "Ledgers this Auditor marked under-replicated", registry=r)

        self.unhealable = Gauge(
            "autorecovery_unhealable_ledgers",
            "Under-replicated ledgers whose last re-replication attempt failed (their reason: "
            "`bk ledger underreplicated`), as this worker last counted them", registry=r)
        self.failures = Counter("autorecovery_replication_failures",
                                "Failed re-replication attempts of this process's worker",
                                registry=r)

    def copied(self, entries: int, nbytes: int) -> None:
        self.entries.inc(entries)
        self.bytes.inc(nbytes)
