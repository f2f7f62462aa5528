"""``bk doctor`` as an operator runs it: exit code 0 on a healthy cluster, non-zero with the
finding and its remedy when a bookie was killed."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from bk_spark.core.client import BookKeeper
from bk_spark.io.underreplication import UnderReplicationManager


def doctor(uri: str, *args: str) -> tuple[int, dict, str]:
    proc = subprocess.run([sys.executable, "-m", "bk_spark.cli", "doctor", "-m", uri,
                           "--sample", "0.5", *args], capture_output=True, text=True,
                          timeout=120)
    report = json.loads(proc.stdout) if "--json" in args else {}
    return proc.returncode, report, proc.stdout + proc.stderr


def test_doctor_passes_a_healthy_cluster_and_names_a_killed_bookie_with_its_remedy(
        cluster_factory, metadata_uri):
    c = cluster_factory(3, extra_args=["--http-port", "0"])
    with BookKeeper(metadata_uri) as bk:
        lh = bk.create_ledger(3, 2, 2, password=b"p")
        lh.add_entry(b"hello")
        lh.close()
        urm = UnderReplicationManager(bk.zk, bk.msu.root)
        deadline = time.monotonic() + 20
        while urm.auditor() is None and time.monotonic() < deadline:
            time.sleep(0.2)

    code, report, out = doctor(metadata_uri, "--json")
    assert code == 0 and report["ok"], out
    checks = {f["check"] for f in report["findings"]}
    assert {"zookeeper", "bookies", "cookies", "autorecovery", "writers", "clocks"} <= checks
    assert any(f["check"] == "cookies" and f["status"] == "ok" and "each of the 3 registered "
               "bookies has its cookie" in f["message"] for f in report["findings"]), report
    assert sum(f["check"] == "bookies" and f["status"] == "ok"
               for f in report["findings"]) == 3
    assert any(f["check"] == "zookeeper" and "standalone" in f["message"]
               for f in report["findings"]), report

    victim = c.bookies[1]
    victim.kill()  # kill -9: its registration lingers until its session expires
    code, report, out = doctor(metadata_uri, "--json")
    assert code != 0 and not report["ok"], out
    down = [f for f in report["findings"] if f["status"] == "fail"
            and victim.bookie_id in f["message"]]
    assert down and "down" in down[0]["message"], report
    assert f"bk recover {victim.bookie_id}" in down[0]["remedy"]
    code, _, text = doctor(metadata_uri)  # the table a person reads
    assert code == 1 and victim.bookie_id in text and "bk recover" in text
