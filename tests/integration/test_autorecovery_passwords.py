"""Issue 25, section 1 and the last point of section 5, as a user meets them: bookies
started as the README shows (``bk bookie`` with AutoRecovery on, the default, and a short
``--lost-bookie-recovery-delay``; no ``--recovery-password``), ledgers written with a
password, some closed and some left open, and one bookie killed with -9 and its directory
removed.

The module's 4 bookies are shared: the fixture writes the ledgers and loses the bookie, the
tests then check what healed, what could not and says why, and ``bk recover``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from bk_spark.core.client import BookKeeper
from bk_spark.io.registration import list_bookies
from bk_spark.io.underreplication import UnderReplicationManager
from bk_spark.protocol.recovery_plan import bookies_of
from bk_spark.sandbox import (
    BookieProcess,
    free_port,
    start_bookies,
    stop_bookies,
    wait_for_registrations,
)

PASSWORD = b"p"
# as the README's AutoRecovery section shows (plus small journals, as every test bookie)
README_ARGS = ["--lost-bookie-recovery-delay", "1", "--open-ledger-grace", "2",
               "--metrics-port", "0", "--journal-file-size-mb", "8"]
HEAL_TIMEOUT_S = 60.0


@dataclass
class Loss:
    uri: str
    bk: BookKeeper
    victim: str
    expected: dict[int, list[bytes]] = field(default_factory=dict)  # healable ledgers
    stuck: int = -1  # an E=4 ledger: no 5th bookie can replace the lost one


def _naming(bk: BookKeeper, bookie: str) -> list[int]:
    return [lid for lid in bk.list_ledgers() if bookie in bookies_of(bk.ledger_metadata(lid))]


@pytest.fixture(scope="module")
def loss(zk_server, tmp_path_factory) -> Iterator[Loss]:
    uri = f"zk://{zk_server.connect_string}/pw-{uuid.uuid4().hex[:10]}"
    base = tmp_path_factory.mktemp("ar-passwords")
    bookies = [BookieProcess(uri, base / f"bookie-{i}", port=free_port(),
                             extra_args=README_ARGS) for i in range(4)]
    try:
        start_bookies(bookies)
        wait_for_registrations(uri, 4)
        with BookKeeper(uri) as bk:
            out = Loss(uri, bk, victim="")
            writers = []
            for n in range(4):  # 2 closed, 2 left open (their writer never closes them)
                lh = bk.create_ledger(3, 2, 2, password=PASSWORD)
                payloads = [b"pw-%d-%d" % (n, i) * 8 for i in range(40)]
                for f in [lh.add_entry_async(p) for p in payloads]:
                    f.result(30)
                if n % 2 == 0:
                    lh.close()
                else:
                    writers.append(lh)
                out.expected[lh.id] = payloads
            wide = bk.create_ledger(4, 2, 2, password=PASSWORD)
            for f in [wide.add_entry_async(b"wide-%d" % i) for i in range(10)]:
                f.result(30)
            wide.close()
            out.stuck = wide.id
            out.victim = max((b.bookie_id for b in bookies),
                             key=lambda b: len(_naming(bk, b)))
            victim = next(b for b in bookies if b.bookie_id == out.victim)
            victim.kill()  # kill -9
            shutil.rmtree(victim.data_dir)  # its directory removed: lost for good
            yield out
    finally:
        stop_bookies(bookies)


def _bk_cli(uri: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "BK_METADATA_SERVICE_URI": uri}
    return subprocess.run([sys.executable, "-m", "bk_spark.cli", *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


def _metric(bk: BookKeeper, name: str) -> list[float]:
    out = []
    for b in list_bookies(bk.msu, zk=bk.zk):
        port = b.info.get("metrics_port")
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        out += [float(line.split()[1]) for line in text.decode().splitlines()
                if line.startswith(name + " ")]
    return out


def test_password_protected_ledgers_closed_and_left_open_heal_with_no_password_configured(
        loss: Loss):
    bk = loss.bk
    named = [lid for lid in loss.expected if loss.victim in bookies_of(bk.ledger_metadata(lid))]
    assert named, "the lost bookie held some of the ledgers"
    deadline = time.monotonic() + HEAL_TIMEOUT_S
    while True:
        left = [lid for lid in loss.expected
                if loss.victim in bookies_of(bk.ledger_metadata(lid))]
        if not left:
            break
        if time.monotonic() > deadline:
            urm = UnderReplicationManager(bk.zk, bk.msu.root)
            pytest.fail(f"after {HEAL_TIMEOUT_S:.0f}s ledgers {left} still name "
                        f"{loss.victim}: {list(urm.list())}")
        time.sleep(0.5)
    for lid, payloads in loss.expected.items():  # every acknowledged entry, from the copies
        rh = bk.open_ledger(lid, PASSWORD)
        assert rh.last_add_confirmed == len(payloads) - 1, lid
        assert [e.payload for e in rh.read_entries(0, rh.last_add_confirmed)] == payloads


def test_a_ledger_that_cannot_heal_says_why_in_the_listing_and_in_a_metric(
        loss: Loss):
    bk = loss.bk
    urm = UnderReplicationManager(bk.zk, bk.msu.root)
    deadline = time.monotonic() + HEAL_TIMEOUT_S
    while (rec := urm.get(loss.stuck)) is None or not rec.reason:
        assert time.monotonic() < deadline, f"no reason recorded: {rec}"
        time.sleep(0.5)
    assert "NotEnoughBookiesError" in rec.reason
    listing = _bk_cli(loss.uri, "ledger", "underreplicated", "--json")
    assert listing.returncode == 0, listing.stderr
    row = next(r for r in json.loads(listing.stdout) if r["ledger"] == loss.stuck)
    assert "no writable bookie left" in row["reason"]
    table = _bk_cli(loss.uri, "ledger", "underreplicated")
    assert "reason" in table.stdout and "failing" in table.stdout
    assert max(_metric(bk, "autorecovery_unhealable_ledgers")) >= 1
    status = _bk_cli(loss.uri, "autorecovery", "status", "--json")
    assert json.loads(status.stdout)["failing"] >= 1, status.stdout + status.stderr


def test_bk_recover_with_no_spare_bookie_fails_at_once_naming_the_constraint_and_changes_nothing(
        loss: Loss):
    bk = loss.bk
    urm = UnderReplicationManager(bk.zk, bk.msu.root)
    before_md = bk.metadata_store.read(loss.stuck)
    before_rec = urm.get(loss.stuck)
    started = time.monotonic()
    got = _bk_cli(loss.uri, "recover", loss.victim, timeout=30)
    took = time.monotonic() - started
    assert got.returncode == 1, got.stdout + got.stderr
    said = " ".join((got.stderr + got.stdout).split())
    assert f"no writable bookie left to replace {loss.victim}" in said, said
    assert "outside the fragment's ensemble" in said and "Nothing was changed" in said
    assert took < 20, f"bk recover took {took:.1f}s"
    after_md = bk.metadata_store.read(loss.stuck)
    assert (after_md.version, after_md.value) == (before_md.version, before_md.value)
    assert urm.get(loss.stuck) == before_rec


def test_under_mutual_tls_a_standalone_recover_with_a_bookie_certificate_copies_the_key(
        cluster_factory, tmp_path):
    """No worker runs in the bookies and nobody gives the password: ``bk recover``, holding
    a certificate the bookies list with ``--allow-bookie``, copies the ledger's master key
    from a surviving bookie (``ReadMasterKey``) and heals it; the application's own
    certificate may not read that key."""
    from bk_spark.certs import issue_cert, make_ca
    from bk_spark.errors import UnauthorizedError
    from bk_spark.security import ClientSecurity

    ca = make_ca(tmp_path / "ca")
    server, app, worker = (issue_cert(ca, tmp_path / "certs", n)
                           for n in ("bookie", "app", "recoverer"))
    c = cluster_factory(0)
    c.add_bookies(4, extra_args=[
        "--tls-cert", str(server.cert), "--tls-key", str(server.key), "--tls-ca", str(ca.cert),
        "--tls-client-auth", "require", "--allow-client", "app", "--allow-bookie", "recoverer",
        "--no-autorecovery"])
    as_app = ClientSecurity(str(ca.cert), str(app.cert), str(app.key))
    with BookKeeper(c.uri, security=as_app) as bk:
        lh = bk.create_ledger(3, 2, 2, password=PASSWORD)
        payloads = [b"tls-%d" % i for i in range(30)]
        for f in [lh.add_entry_async(p) for p in payloads]:
            f.result(30)
        lh.close()
        victim = next(b for b in c.bookies if b.bookie_id == lh.metadata.ensembles[0][1][0])
        with pytest.raises(UnauthorizedError):
            bk.bookies.get(lh.metadata.ensembles[0][1][1]).read_master_key(lh.id)
        victim.kill()
        env = {"BK_TLS_CA": str(ca.cert), "BK_TLS_CERT": str(worker.cert),
               "BK_TLS_KEY": str(worker.key)}
        got = subprocess.run(
            [sys.executable, "-m", "bk_spark.cli", "recover", victim.bookie_id],
            env={**os.environ, **env, "BK_METADATA_SERVICE_URI": c.uri},
            capture_output=True, text=True, timeout=60)
        assert got.returncode == 0, got.stdout + got.stderr
        assert victim.bookie_id not in bookies_of(bk.ledger_metadata(lh.id))
        rh = bk.open_ledger(lh.id, PASSWORD)
        assert [e.payload for e in rh.read_entries(0, 29)] == payloads
