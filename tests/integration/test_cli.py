"""The `bk` command as a user runs it: real processes, one-line errors, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bk_spark.sandbox import free_port


def bk(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bk_spark.cli", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_bookies_lists_registered_bookies_as_json(cluster, metadata_uri) -> None:
    r = bk("bookies", "-m", metadata_uri, "--json")
    assert r.returncode == 0, r.stderr
    listed = json.loads(r.stdout)
    assert sorted(b["bookie"] for b in listed) == sorted(b.bookie_id for b in cluster.bookies)
    assert {b["mode"] for b in listed} == {"rw"}


def test_detached_sandbox_starts_reports_and_stops_by_pid(tmp_path: Path) -> None:
    d = tmp_path / "sb"
    port = free_port()
    r = bk("sandbox", "start", "--bookies", "2", "--data-dir", str(d), "--zk-port", str(port),
           "--bookie-port", "0")
    assert r.returncode == 0, r.stderr
    try:
        assert r.stdout.strip().endswith(f"zk://127.0.0.1:{port}/ledgers")
        st = bk("sandbox", "status", "--data-dir", str(d), "--json")
        assert st.returncode == 0, st.stderr
        procs = json.loads(st.stdout)["processes"]
        assert [p["process"] for p in procs] == ["zookeeper", "bookie", "bookie"]
        assert all(p["alive"] for p in procs)
        again = bk("sandbox", "start", "--data-dir", str(d), "--zk-port", str(port))
        assert again.returncode == 1 and "already runs" in again.stderr
    finally:
        stop = bk("sandbox", "stop", "--data-dir", str(d))
    assert stop.returncode == 0
    st = bk("sandbox", "status", "--data-dir", str(d))
    assert st.returncode == 1 and "no sandbox" in st.stderr


def test_errors_are_one_line_with_nonzero_exit(tmp_path: Path, zk_server) -> None:
    r = bk("bookies", "-m", "http://nowhere")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "zk://host:port/root" in r.stderr
    busy = bk("sandbox", "start", "--data-dir", str(tmp_path / "x"), "--zk-port",
              str(zk_server.port))
    assert busy.returncode == 1 and f"port {zk_server.port}" in busy.stderr
    assert "Traceback" not in busy.stderr
    r = bk("bookies", "--no-such-option")
    assert r.returncode == 2 and "No such option" in r.stderr
