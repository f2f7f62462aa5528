"""A multi-host test bed on one machine (``make cluster-demo``, ``tests/multihost``).

:class:`TestBed` starts a 3-server ZooKeeper ensemble, 5 bookies on 5 hosts with racks, a
Spark standalone master with 2 workers and, on demand, a Spark Connect server, each on its own
"host": a Linux network namespace (see :mod:`bk_spark.testbed.network`), or a distinct
loopback address where namespaces are unavailable (network faults are then skipped).
"""

from bk_spark.testbed.bed import TestBed, TestBedConfig
from bk_spark.testbed.network import Host, Network, TestBedError, leftover_namespaces

__all__ = ["Host", "Network", "TestBed", "TestBedConfig", "TestBedError", "leftover_namespaces"]
