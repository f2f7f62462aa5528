"""Process-wide side effects happen only where correctness needs them or a user opts in:
importing the package changes nothing; the gRPC adapters turn gRPC's fork support off; the
data source freezes the garbage collector and tunes malloc only in Spark's workers. Each
case runs in a fresh interpreter (these settings are once per process)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _run(code: str, **env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, env={**environ, **env})
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.mark.parametrize("modules", ["bk_spark", "bk_spark.errors",
                                     "bk_spark.protocol.log_format",
                                     "bk_spark.metadata_uri"])
def test_importing_the_package_or_its_pure_parts_sets_no_environment_variable(
        modules: str) -> None:
    assert _run(f"import os, {modules}; "
                f"print(os.environ.get('GRPC_ENABLE_FORK_SUPPORT'))") == "None"


def test_the_grpc_adapters_turn_fork_support_off_before_grpc_unless_the_user_chose() -> None:
    code = ("import os, sys, bk_spark.io; assert 'grpc' not in sys.modules; "
            "import bk_spark.core; print(os.environ.get('GRPC_ENABLE_FORK_SUPPORT'))")
    assert _run(code) == "false"
    assert _run(code, GRPC_ENABLE_FORK_SUPPORT="true") == "true"


_CLIENT = """
import gc
from bk_spark import allocator
from bk_spark.datasource import connections
made = []
class Client:
    is_closed = False
    def __init__(self, uri, config, security=None):
        made.append(config)
connections.BookKeeper = Client  # what is checked is what happens around the client
{setup}
connections.client("zk://127.0.0.1:1/x")
print(made[0].tune_allocator, gc.get_freeze_count() > 0)
"""


def test_the_data_source_leaves_the_drivers_gc_and_malloc_alone() -> None:
    assert _run(_CLIENT.format(setup="")) == "False False"


def test_the_data_source_freezes_gc_and_tunes_malloc_in_a_spark_worker() -> None:
    setup = "connections.in_spark_worker = lambda: True"
    assert _run(_CLIENT.format(setup=setup)) == "True True"
