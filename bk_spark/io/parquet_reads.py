"""Reads served from Parquet: offloaded ledgers read from their files, counted in the
reading process (a client: ``LogReader``, ``bk log read/tail``; the ``bookkeeper`` Spark
source, in the Python worker that reads a partition) on the default registry of
the ``prometheus_client`` package (what an application's ``start_http_server(port)``
serves). Created on the first read from Parquet, so importing the package registers
nothing. The offloader's own metrics: :mod:`bk_spark.offload.metrics`.

Every read of an offloaded ledger's file calls :func:`parquet_read_served` once (the log
reader's ``LogReader._read_offloaded``, the source's ``_parquet_rows`` for each slice of a
file it reads).
"""

from __future__ import annotations

import threading

from prometheus_client import REGISTRY, CollectorRegistry, Counter


class ParquetReadMetrics:
    """Reads served from Parquet: offloaded ledgers read, and the entries they gave."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry(auto_describe=True)
        self.reads = Counter("offload_parquet_reads",
                             "Reads of an offloaded ledger served from its Parquet file "
                             "(LogReader, bk log read/tail, the bookkeeper source)", registry=r)
        self.entries = Counter("offload_parquet_read_entries",
                               "Entries read from offloaded ledgers' Parquet files",
                               registry=r)


_process_reads: ParquetReadMetrics | None = None
_process_reads_lock = threading.Lock()


def parquet_read_metrics() -> ParquetReadMetrics:
    """This process's :class:`ParquetReadMetrics`, on the default registry (created on
    first use)."""
    global _process_reads
    with _process_reads_lock:
        if _process_reads is None:
            _process_reads = ParquetReadMetrics(REGISTRY)
        return _process_reads


def parquet_read_served(entries: int) -> None:
    """Count one read of an offloaded ledger served from Parquet, of ``entries`` entries:
    called by the one function through which a reader reads an offloaded ledger."""
    m = parquet_read_metrics()
    m.reads.inc()
    m.entries.inc(entries)
