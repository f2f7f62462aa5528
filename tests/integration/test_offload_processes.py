"""Tiered storage with the offloader in its own processes, as operators run it: inside
bookies (``bk bookie --offload``, what ``bk sandbox`` starts) with no password option, and
standalone (``bk offloader``) killed with -9 in the middle of a ledger's file.

Ledgers carry a password, as a user's would.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from bk_spark.cli.offload import offload_status_facts
from bk_spark.core import BookKeeper
from bk_spark.errors import NoSuchLedgerError
from bk_spark.log import open_log_reader, open_log_view, open_log_writer, update_log_properties
from bk_spark.offload.metrics import OffloadMetrics
from bk_spark.offload.offloader import Offloader, OffloaderConfig
from bk_spark.protocol import offload_rules as rules

PW = b"p"


def _records(bk: BookKeeper, name: str) -> list[tuple]:
    with open_log_reader(bk, name, password=PW) as r:
        return [(x.position.ledger_id, x.position.entry_id, x.payload, x.timestamp_ms)
                for x in r.read_available()]


def _tiers(bk: BookKeeper, name: str) -> list[str]:
    view = open_log_view(bk, name)
    states = rules.states_of(view.md.properties)
    return [rules.tier(states.get(r.ledger_id)).value for r in view.ledgers()]


def _bk(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bk_spark.cli", *args], capture_output=True,
                          text=True, timeout=120)


def _wait(what: str, check, timeout: float = 20.0, every: float = 0.1):  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"still waiting for {what}"
        time.sleep(every)


def test_bookies_offload_password_ledgers_with_their_own_keys_and_say_why_they_cannot(
        cluster_factory, tmp_path):
    """The sandbox's setup: every bookie runs an offloader contender (--offload) and none
    is given a password. A crc32c log with a password is offloaded with the key the
    elected offloader's bookie stored (AutoRecovery's ledger_secret) and its bookie copy
    is deleted with that key after the lag; a mac log (whose digests need the password)
    cannot be: `bk offload status` says why, and its ledgers stay on the bookies."""
    cluster = cluster_factory(3, extra_args=[
        "--offload", "--offload-target", tmp_path.as_uri(), "--no-autorecovery"])
    with BookKeeper(cluster.uri) as bk:
        logs = {"off-pw-crc": "crc32c", "off-pw-mac": "mac"}
        writers, before = {}, {}
        for name, digest in logs.items():
            w = writers[name] = open_log_writer(bk, name, password=PW, digest=digest,
                                                roll_max_entries=4)
            for i in range(10):  # ledgers of 4, 4, 2 entries: on each of the 3 bookies
                w.append(f"{name}-{i}".encode())
            w.roll()
            before[name] = _records(bk, name)
            if digest == "mac":
                update_log_properties(bk, name, {rules.POLICY_PROPERTY: rules.OffloadPolicy(
                    after="0", deletion_lag_ms=0).to_json()})
        # as a user sets a policy: the limit of offload records is stated there
        out = _bk("log", "set", "off-pw-crc", "--offload-after", "0",
                  "--offload-deletion-lag", "0", "-m", cluster.uri)
        assert out.returncode == 0, out.stderr
        assert "offloaded ledgers' records: 0 of about" in out.stdout, out.stdout
        crc_ids = [r.ledger_id for r in open_log_view(bk, "off-pw-crc").ledgers()]
        _wait("the crc32c log offloaded and its bookie copies dropped",
              lambda: _tiers(bk, "off-pw-crc")[:3] == ["offloaded"] * 3)
        for lid in crc_ids[:3]:
            try:
                bk.ledger_metadata(lid)
                raise AssertionError(f"ledger {lid} still on the bookies")
            except NoSuchLedgerError:
                pass
        assert _records(bk, "off-pw-crc") == before["off-pw-crc"]

        def mac_failing() -> dict | None:
            logs_ = {r["log"]: r for r in offload_status_facts(bk)["logs"]}
            return logs_["off-pw-mac"]["failing"]

        failing = _wait("bk offload status to say why the mac log fails", mac_failing)
        assert "RecoveryKeyUnavailableError" in failing["reason"], failing
        assert "can be verified only with it" in failing["reason"], failing
        assert "--password" in failing["reason"] and "--recovery-password" in \
            failing["reason"], failing
        mac = {r["log"]: r for r in offload_status_facts(bk)["logs"]}["off-pw-mac"]
        assert mac["tiers"]["offloaded"] == 0 and mac["tiers"]["both"] == 0
        assert mac["backlog"] == 3
        assert _records(bk, "off-pw-mac") == before["off-pw-mac"]  # from the bookies
        crc = {r["log"]: r for r in offload_status_facts(bk)["logs"]}["off-pw-crc"]
        assert crc["failing"] is None and crc["backlog"] == 0
        out = _bk("offload", "status", "-m", cluster.uri)
        assert out.returncode == 0, out.stderr
        assert "log off-pw-mac: offload failing" in out.stdout and \
            "RecoveryKeyUnavailableError" in out.stdout, out.stdout
        # readable as a pipe gets it (80 columns): headers whole, nothing cut
        assert "…" not in out.stdout and " offloading " in out.stdout, out.stdout
        for w in writers.values():
            w.close()


def test_a_standalone_offloader_killed_mid_file_leaves_nothing_counted_and_the_next_completes(
        module_cluster, tmp_path):
    """`bk offloader` in its own process, killed with -9 while it writes a big ledger's
    file (its hidden .inprogress file is there, the ledger's offload id recorded, no
    complete file): the ledger stays read from the bookies; a new offloader completes it,
    the killed attempt's file is gone, and reads return exactly the entries."""
    name = "off-killed"
    with BookKeeper(module_cluster.uri) as bk:
        w = open_log_writer(bk, name, password=PW, ensemble_size=3, write_quorum_size=2,
                            ack_quorum_size=2)
        # 16 MiB of random values (incompressible: the file is as big) in one ledger, read
        # and written in 4 batches of rows
        futures = [w.append_async(os.urandom(1024)) for _ in range(16_000)]
        futures[-1].result(timeout=120)
        w.roll()
        before = _records(bk, name)
        lid = before[0][0]
        update_log_properties(bk, name, {rules.POLICY_PROPERTY: rules.OffloadPolicy(
            after="0", target=tmp_path.as_uri(), deletion_lag_ms=-1).to_json()})
        log_path = tmp_path / "offloader.log"
        with open(log_path, "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "bk_spark.cli", "offloader", "--metadata-service-uri",
                 module_cluster.uri, "--password", "p", "--tick", "0.2"],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            half = _wait("the offloader to have written part of the ledger's file",
                         lambda: [p for p in tmp_path.rglob(".*.inprogress")
                                  if p.stat().st_size > 1 << 20],
                         timeout=60, every=0.005)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        # it landed mid-write: the half file is there, no whole one, the attempt recorded
        assert half[0].exists() and half[0].stat().st_size < 16 << 20, \
            log_path.read_text()[-2000:]
        assert list(tmp_path.rglob("*.parquet")) == []
        state = rules.states_of(open_log_view(bk, name).md.properties)[lid]
        assert not state.complete and f"-{state.offload_id}.parquet" in half[0].name
        assert _tiers(bk, name)[0] == "offloading"
        assert _records(bk, name) == before  # from the bookies: never the half file
        # the killed one's claim on the ledger goes with its ZooKeeper session (as its
        # election znode does): until then no other offloader starts the ledger
        from bk_spark.io.offload_status import claim_holder
        _wait("the killed offloader's claim gone with its session",
              lambda: claim_holder(bk.zk, bk.msu.root, lid) is None, timeout=40, every=0.2)
        # a new offloader takes the ledger over
        Offloader(bk, "next", OffloaderConfig(passwords=(PW,)), OffloadMetrics()).tick()
        assert _tiers(bk, name)[0] == "both"
        assert not half[0].exists()
        assert list(tmp_path.rglob(".*.inprogress")) == []
        files = list(tmp_path.rglob("*.parquet"))
        assert len(files) == 1 and state.offload_id not in files[0].name
        assert _records(bk, name) == before  # from Parquet: exactly the entries
        w.close()


def test_password_ledgers_not_on_the_elected_offloaders_bookie_are_offloaded_by_a_keyholder(
        cluster_factory, tmp_path):
    """The sandbox's setup (every bookie --offload, no password option) with a password
    log of E=Qw=2 ledgers, some not on the elected offloader's bookie: it cannot key those,
    records them as waiting for a keyholder, and the contender of a bookie holding a copy
    offloads them (under the ledger's claim). Every closed ledger ends offloaded, its bookie
    copy dropped after the lag, and the log reads back the same."""
    from bk_spark.io.election import elected
    from bk_spark.offload.offloader import election_path

    cluster = cluster_factory(3, extra_args=[
        "--offload", "--offload-target", tmp_path.as_uri(), "--no-autorecovery"])
    with BookKeeper(cluster.uri) as bk:
        leader = _wait("an elected offloader",
                       lambda: elected(bk.zk, election_path(bk.msu.root)))
        name = "off-pw-e2"
        w = open_log_writer(bk, name, password=PW, ensemble_size=2, write_quorum_size=2,
                            ack_quorum_size=2)
        away = 0
        for i in range(30):  # until 2 ledgers are placed away from the leader's bookie
            w.append(f"r{i}".encode())
            w.roll()
            ids = [r.ledger_id for r in open_log_view(bk, name).ledgers()]
            away = sum(leader not in bk.ledger_metadata(lid).ensembles[0][1]
                       for lid in ids[:-1])
            if away >= 2:
                break
        assert away >= 2, "placement never left the leader's bookie out"
        before = _records(bk, name)
        update_log_properties(bk, name, {rules.POLICY_PROPERTY: rules.OffloadPolicy(
            after="0", deletion_lag_ms=0).to_json()})
        closed = len(open_log_view(bk, name).ledgers()) - 1
        _wait("every closed ledger offloaded",
              lambda: _tiers(bk, name)[:closed] == ["offloaded"] * closed, timeout=40)
        assert _records(bk, name) == before
        facts = {r["log"]: r for r in offload_status_facts(bk)["logs"]}[name]
        assert facts["failing"] is None and facts["backlog"] == 0, facts
        w.close()
