"""``stop_pids``: every process stopped by its PID, at once, the stubborn ones killed."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from bk_spark.sandbox import pid_alive, stop_pids

OBEYS = "import time; time.sleep(60)"
IGNORES_TERM = ("import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                "print('ready', flush=True); time.sleep(60)")


def test_stop_pids_stops_all_at_once_and_kills_what_ignores_sigterm() -> None:
    polite = [subprocess.Popen([sys.executable, "-c", OBEYS]) for _ in range(3)]
    stubborn = subprocess.Popen([sys.executable, "-c", IGNORES_TERM], stdout=subprocess.PIPE)
    assert stubborn.stdout is not None and stubborn.stdout.readline() == b"ready\n"
    procs = [*polite, stubborn]
    try:
        t0 = time.monotonic()
        stop_pids([p.pid for p in procs], timeout=1.0)
        took = time.monotonic() - t0
        assert not any(pid_alive(p.pid) for p in procs)  # (pid_alive reaps them)
        assert took >= 1.0  # the stubborn one outlived SIGTERM and got SIGKILL after it
        assert took < 5.0  # one timeout for all, not one per process
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_stop_pids_skips_pids_already_gone() -> None:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    stop_pids([p.pid])  # no error: nothing to stop


def test_start_bookies_stops_every_launched_bookie_when_one_fails(tmp_path) -> None:
    """A bookie that cannot come up (here: no ZooKeeper answers its metadata URI, and its
    port is taken by a listener that is not a bookie) fails the start, and the others
    launched with it are stopped by their PIDs, not left running."""
    import socket

    from bk_spark.sandbox import BookieProcess, SandboxError, free_port, start_bookies

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    port = taken.getsockname()[1]
    ok = [BookieProcess("zk://127.0.0.1:1/none", tmp_path / f"b{i}", port=free_port())
          for i in range(2)]
    bad = BookieProcess("zk://127.0.0.1:1/none", tmp_path / "bad", port=port)
    try:
        with pytest.raises(SandboxError):
            start_bookies([*ok, bad], timeout=5)
        assert all(b.proc is None for b in ok)
    finally:
        taken.close()
        for b in ok:
            if b.proc is not None:
                b.kill()
