"""The I/O adapters: the only modules that import gRPC, protobuf or kazoo.

The bookie client (gRPC calls, answers turned into typed errors), the entry codec (the wire
framing of entries), the ledger metadata store and its one CAS loop, ZooKeeper sessions
with their credentials, and bookie registration. Everything above them sees bk-spark's own
types and :class:`~bk_spark.errors.BKError` only.

Importing this package sets ``GRPC_ENABLE_FORK_SUPPORT=false`` unless the process already
chose a value, because correctness needs it: with gRPC's fork support on (its default), a
process whose gRPC channels are busy sometimes loses the children it starts with
``subprocess.Popen(preexec_fn=...)``: gRPC's fork handler restarts its poller in the child,
which crashes on a closed epoll descriptor before ``exec`` (grpc/grpc#43055). On this
project's machines 13 of 1,000 such children died; PySpark starts its JVM that way, and the
sandbox starts bookies. bk-spark never uses a channel across a fork, so it does not need the
support. gRPC reads the variable when it is first imported, and bk-spark's clients import it
from below this package: import a client (or ``bk_spark.io``) before ``grpc``, or set the
variable yourself. Importing only the pure parts (``bk_spark.protocol``, ``bk_spark.errors``)
changes nothing.
"""

import os as _os

_os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
