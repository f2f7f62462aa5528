"""bk_spark.allocator: glibc's thresholds are raised once per process, elsewhere nothing."""

from __future__ import annotations

import ctypes
import subprocess
import sys

from bk_spark import allocator


def _is_glibc() -> bool:
    try:
        ctypes.CDLL(None).gnu_get_libc_version  # noqa: B018 - a glibc-only symbol
    except AttributeError:
        return False
    return sys.platform.startswith("linux")


def test_tuning_applies_on_glibc_and_is_idempotent() -> None:
    assert allocator.tune_allocator() is _is_glibc()
    assert allocator.tune_allocator() is _is_glibc()  # the second call changes nothing


def _tuned_after_client(config: str) -> str:
    """In a fresh interpreter (tuning is once per process): build a client with ``config``,
    stopping it before ZooKeeper (not what is tested), and report whether tuning ran."""
    code = (
        "from bk_spark import allocator\n"
        "import bk_spark.core.client as client\n"
        "def no_zk(msu, **_kw):\n"
        "    raise ConnectionError('stop before ZooKeeper')\n"
        "client.connect_zk = no_zk\n"
        "try:\n"
        f"    client.BookKeeper('zk://127.0.0.1:1/x', {config})\n"
        "except ConnectionError:\n"
        "    pass\n"
        "print(allocator._done)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    return out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr


def test_a_client_tunes_only_when_told_to() -> None:
    assert _tuned_after_client("client.BookKeeperConfig()") == "None"  # process-wide: opt in
    assert _tuned_after_client("client.BookKeeperConfig(tune_allocator=True)") == str(
        _is_glibc())
