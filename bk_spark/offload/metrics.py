"""Prometheus metrics of the offloader, on the registry the caller gives (a bookie's own,
or ``bk offloader``'s). Reads served from Parquet are counted in the reading process
(:mod:`bk_spark.io.parquet_reads`: below the log reader, which counts them)."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_SECONDS = (0.05, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)


class OffloadMetrics:
    """Bytes and ledgers offloaded, time to offload one ledger, offload lag (the largest,
    and per log), backlog per log, failed passes, logs failing now, and whether this
    process is the elected offloader. The per-log series are the elected offloader's:
    a contender that is not elected exports none."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry(auto_describe=True)
        self.bytes = Counter("offload_bytes", "Parquet bytes offloaded", registry=r)
        self.ledgers = Counter("offload_ledgers", "Ledgers offloaded (complete)", registry=r)
        self.seconds = Histogram("offload_ledger_seconds",
                                 "Time to offload one ledger (write and verify)",
                                 buckets=_SECONDS, registry=r)
        self.lag = Gauge("offload_lag_seconds",
                         "Seconds since the oldest ledger due for offload closed (the "
                         "largest over the logs)", registry=r)
        self.log_lag = Gauge("offload_log_lag_seconds",
                             "Per log: seconds since its oldest ledger due for offload "
                             "closed (0: none due)", ["log"], registry=r)
        self.log_backlog = Gauge("offload_log_backlog_ledgers",
                                 "Per log: closed ledgers due for offload, not complete",
                                 ["log"], registry=r)
        self.log_failing = Gauge("offload_log_failing",
                                 "Per log: 1 while its last offload pass failed (why: bk "
                                 "offload status)", ["log"], registry=r)
        self.failures = Counter("offload_failures", "Failed offload passes", registry=r)
        self.elected = Gauge("offload_elected", "1 while this process is the elected "
                             "offloader", registry=r)
        self._logs: set[str] = set()

    def offloaded(self, nbytes: int, seconds: float) -> None:
        self.bytes.inc(nbytes)
        self.ledgers.inc()
        self.seconds.observe(seconds)

    def log_pass(self, log: str, lag_s: float, backlog: int, failing: bool) -> None:
        """One log's state after a pass of the elected offloader."""
        self._logs.add(log)
        self.log_lag.labels(log).set(lag_s)
        self.log_backlog.labels(log).set(backlog)
        self.log_failing.labels(log).set(1 if failing else 0)

    def keep_logs(self, logs: Iterable[str]) -> None:
        """Drop the per-log series of every log not in ``logs`` (deleted, its policy
        removed, or this process no longer elected: ``keep_logs(())``)."""
        keep = set(logs)
        for log in self._logs - keep:
            for g in (self.log_lag, self.log_backlog, self.log_failing):
                try:
                    g.remove(log)
                except KeyError:
                    pass
        self._logs &= keep
