"""bk-spark: a replicated, durable log in the design of Apache BookKeeper, with a PySpark
data source.

Importing the package changes nothing in the process. Process-wide settings happen where they
are needed, each documented there: the gRPC adapters (:mod:`bk_spark.io`) turn gRPC's fork
support off before importing gRPC; :func:`bk_spark.allocator.tune_allocator` retunes glibc's
malloc in bookies and where a client opts in; the data source freezes the garbage collector's
long-lived heap only in Spark's Python workers (:mod:`bk_spark.datasource.connections`).

``from bk_spark import BookKeeper`` is the client of ledgers and logs
(:mod:`bk_spark.client`), imported when first named.
"""

from __future__ import annotations

from typing import Any

__all__ = ["BookKeeper"]


def __getattr__(name: str) -> Any:
    if name == "BookKeeper":  # lazily: importing the package opens nothing, imports no gRPC
        from bk_spark.client import BookKeeper

        return BookKeeper
    raise AttributeError(f"module 'bk_spark' has no attribute {name!r}")
