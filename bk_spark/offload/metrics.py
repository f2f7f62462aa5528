"""Prometheus metrics of the offloader, on the registry the caller gives (a bookie's own)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_SECONDS = (0.05, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)


class OffloadMetrics:
    """Bytes and ledgers offloaded, time to offload one ledger, offload lag, failed
    attempts, and whether this process is the elected offloader."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry(auto_describe=True)
        self.bytes = Counter("offload_bytes", "Parquet bytes offloaded", registry=r)
        self.ledgers = Counter("offload_ledgers", "Ledgers offloaded (complete)", registry=r)
        self.seconds = Histogram("offload_ledger_seconds",
                                 "Time to offload one ledger (write and verify)",
                                 buckets=_SECONDS, registry=r)
        self.lag = Gauge("offload_lag_seconds",
                         "Seconds since the oldest ledger due for offload closed", registry=r)
        self.failures = Counter("offload_failures", "Failed offload passes", registry=r)
        self.elected = Gauge("offload_elected", "1 while this process is the elected "
                             "offloader", registry=r)

    def offloaded(self, nbytes: int, seconds: float) -> None:
        self.bytes.inc(nbytes)
        self.ledgers.inc()
        self.seconds.observe(seconds)
