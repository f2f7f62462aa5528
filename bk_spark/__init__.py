"""bk-spark: a replicated, durable log in the design of Apache BookKeeper, with a PySpark
data source.

Importing the package sets ``GRPC_ENABLE_FORK_SUPPORT=false`` unless the process already
chose a value. With gRPC's fork support on (its default), a process whose gRPC channels are
busy sometimes loses the children it starts with ``subprocess.Popen(preexec_fn=...)``: gRPC's
fork handler restarts its poller in the child, which crashes on a closed epoll descriptor
before ``exec`` (grpc/grpc#43055). On this project's machines 13 of 1,000 such children
died; PySpark starts its JVM that way, and the sandbox starts bookies. bk-spark never uses
a channel across a fork, so it does not need the support. gRPC reads the variable when it is
first imported: import ``bk_spark`` before ``grpc``, or set the variable yourself.
"""

import os as _os

_os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
