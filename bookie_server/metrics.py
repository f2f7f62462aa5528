"""Prometheus metrics of one bookie, on a registry of its own (no global state)."""

from __future__ import annotations

import gc
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.gc_collector import GCCollector
from prometheus_client.process_collector import ProcessCollector

_LATENCY_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0)
_GROUP_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)


class BookieMetrics:
    """Counters and histograms a bookie exports at ``/metrics``.

    Implements the storage's metrics hooks (``journal_sync``, ``added``, ``read``)
    and the RPC layer's (``rpc_error``, ``rpc_latency``).
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.adds = Counter("bookie_add_entries", "Entries added (acknowledged)", registry=r)
        self.add_bytes = Counter("bookie_add_bytes", "Payload bytes added", registry=r)
        self.reads = Counter("bookie_read_entries", "Entries read", registry=r)
        self.read_bytes = Counter("bookie_read_bytes", "Payload bytes read", registry=r)
        self.journal_sync_seconds = Histogram(
            "bookie_journal_sync_seconds", "Journal write+fdatasync latency per group",
            buckets=_LATENCY_BUCKETS, registry=r)
        self.journal_group_records = Histogram(
            "bookie_journal_group_records", "Records per group commit",
            buckets=_GROUP_BUCKETS, registry=r)
        self.journal_bytes = Counter("bookie_journal_bytes", "Bytes written to the journal",
                                     registry=r)
        self.errors = Counter("bookie_request_errors", "Requests answered with an error",
                              ["rpc", "status"], registry=r)
        self.rpc_seconds = Histogram("bookie_rpc_seconds", "RPC handling latency", ["rpc"],
                                     buckets=_LATENCY_BUCKETS, registry=r)
        self.read_only = Gauge("bookie_read_only", "1 when the bookie is readonly", registry=r)
        self.add_streams_open = Gauge("bookie_add_streams_open", "Add streams open (AddStream)",
                                      registry=r)
        self.add_streams_refused = Counter(
            "bookie_add_streams_refused", "Add streams refused (the client sends AddEntries)",
            ["reason"], registry=r)
        # the process: CPU, memory, open files, and Python's garbage collector
        ProcessCollector(registry=r)
        GCCollector(registry=r)
        Gauge("bookie_gc_frozen_objects", "Objects out of the cyclic GC's full collections "
              "(frozen once the bookie serves: bk_spark.allocator.freeze_heap)",
              registry=r).set_function(gc.get_freeze_count)

    def watch_storage(self, data_dir: Path, disk_usage: Callable[[], tuple[int, int]],
                      ledgers: Callable[[], int]) -> None:
        """Export the storage's disk and ledger count, read at each scrape:
        ``bookie_disk_used_bytes`` (files under the data dir), ``bookie_disk_free_bytes``,
        ``bookie_disk_usage_ratio`` (of the file system, what readonly mode compares with
        ``--disk-usage-threshold``) and ``bookie_ledgers``."""
        self.registry.register(_StorageCollector(data_dir, disk_usage, ledgers))

    # storage hooks
    def journal_sync(self, seconds: float, records: int, nbytes: int) -> None:
        self.journal_sync_seconds.observe(seconds)
        self.journal_group_records.observe(records)
        self.journal_bytes.inc(nbytes)

    def added(self, n: int, nbytes: int) -> None:
        self.adds.inc(n)
        self.add_bytes.inc(nbytes)

    def read(self, n: int, nbytes: int) -> None:
        self.reads.inc(n)
        self.read_bytes.inc(nbytes)

    # rpc hooks
    def rpc_error(self, rpc: str, status: str) -> None:
        self.errors.labels(rpc, status).inc()

    def serve(self, port: int, host: str = "127.0.0.1") -> int:
        """Start the HTTP endpoint; returns the port actually bound."""
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        return int(server.server_port)


class _StorageCollector:
    """Disk and ledger gauges computed when scraped (see :meth:`BookieMetrics.watch_storage`)."""

    def __init__(self, data_dir: Path, disk_usage: Callable[[], tuple[int, int]],
                 ledgers: Callable[[], int]) -> None:
        self.data_dir, self.disk_usage, self.ledgers = data_dir, disk_usage, ledgers

    def describe(self) -> list:
        return []  # collected at scrape time only (the storage may not be open yet)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        used, free = self.disk_usage()
        fs = shutil.disk_usage(self.data_dir)
        yield GaugeMetricFamily("bookie_disk_used_bytes", "Bytes of files under the data dir",
                                value=used)
        yield GaugeMetricFamily("bookie_disk_free_bytes", "Bytes free for the bookie on its "
                                "file system", value=free)
        yield GaugeMetricFamily("bookie_disk_usage_ratio", "Used fraction of the data dir's "
                                "file system", value=(fs.total - fs.free) / max(fs.total, 1))
        yield GaugeMetricFamily("bookie_ledgers", "Ledgers this bookie holds",
                                value=self.ledgers())
