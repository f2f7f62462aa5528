"""ZooKeeper's own TLS port and SASL, on a real ZooKeeper (pyspark's jars): bookies and
clients reach a TLS-only ZooKeeper (``BK_ZK_TLS_*``) and one requiring SASL DIGEST-MD5
(``BK_ZK_SASL=1``), and those without TLS or without credentials are refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.security import ACL, Id, Permissions

from bk_spark.certs import issue_cert, make_ca
from bk_spark.core import BookKeeper
from bk_spark.errors import MetadataServiceUnavailableError, UnauthorizedError
from bk_spark.io.registration import list_bookies
from bk_spark.io.zk import connect_zk
from bk_spark.metadata_uri import parse_metadata_service_uri
from bk_spark.sandbox import (
    BookieProcess,
    ZkServerTls,
    ZooKeeperServer,
    free_port,
    start_bookies,
    wait_for_registrations,
)
from bk_spark.security import ZkSecurity


def _bookies(uri: str, base: Path, n: int = 3) -> list[BookieProcess]:
    out = [BookieProcess(uri, base / f"bookie-{i}", port=free_port(),
                         extra_args=["--journal-file-size-mb", "8"]) for i in range(n)]
    start_bookies(out)
    return out


def _write_and_read(uri: str) -> None:
    with BookKeeper(uri) as bk:
        lh = bk.create_ledger(3, 2, 2, password=b"pw")
        for i in range(10):
            lh.add_entry(b"zk-secured-%d" % i)
        lh.close()
        rh = bk.open_ledger(lh.id, b"pw")
        assert [e.payload for e in rh.read_entries(0, 9)] == [b"zk-secured-%d" % i
                                                             for i in range(10)]


@pytest.fixture
def stopped_at_end() -> Iterator[list]:
    """Processes (ZooKeeper, bookies) a test started: stopped by PID, bookies first."""
    procs: list = []
    yield procs
    for p in reversed(procs):
        p.stop()


def test_bookies_and_clients_work_through_zookeepers_tls_port_and_plaintext_is_refused(
        tmp_path: Path, monkeypatch, stopped_at_end: list) -> None:
    ca = make_ca(tmp_path / "ca")
    certs = tmp_path / "certs"
    server, client = issue_cert(ca, certs, "zookeeper"), issue_cert(ca, certs, "bk-client")
    zk = ZooKeeperServer(tmp_path / "zk", port=None,  # TLS only: no plaintext port at all
                         tls=ZkServerTls(free_port(), server.cert, server.key, ca.cert))
    zk.start()
    stopped_at_end.append(zk)
    uri = f"zk://{zk.connect_string}/ledgers"
    for name, path in (("BK_ZK_TLS_CA", ca.cert), ("BK_ZK_TLS_CERT", client.cert),
                       ("BK_ZK_TLS_KEY", client.key)):
        monkeypatch.setenv(name, str(path))  # bookies (child processes) and clients alike
    stopped_at_end.extend(_bookies(uri, tmp_path))
    wait_for_registrations(uri, 3)
    assert len(list_bookies(uri)) == 3
    _write_and_read(uri)
    msu = parse_metadata_service_uri(uri)
    # A client without TLS, or with TLS but no client certificate, gets no session.
    for refused in (ZkSecurity(), ZkSecurity(tls_ca=str(ca.cert))):
        with pytest.raises(MetadataServiceUnavailableError, match="TLS"):
            connect_zk(msu, timeout=2, security=refused)
    plain = KazooClient(hosts=zk.connect_string)
    try:
        with pytest.raises(KazooTimeoutError):
            plain.start(timeout=2)
    finally:
        plain.stop()
        plain.close()


def test_sasl_clients_create_sasl_protected_znodes_that_others_cannot_change(
        tmp_path: Path, monkeypatch, stopped_at_end: list) -> None:
    zk = ZooKeeperServer(tmp_path / "zk", port=free_port(),
                         sasl_users={"bk-cluster": "sasl-s3cret"})
    zk.start()
    stopped_at_end.append(zk)
    uri = f"zk://{zk.connect_string}/ledgers"
    monkeypatch.setenv("BK_ZK_AUTH", "bk-cluster:sasl-s3cret")
    monkeypatch.setenv("BK_ZK_SASL", "1")
    stopped_at_end.extend(_bookies(uri, tmp_path))
    wait_for_registrations(uri, 3)
    _write_and_read(uri)
    msu = parse_metadata_service_uri(uri)
    owner = connect_zk(msu)
    anon = KazooClient(hosts=zk.connect_string)
    anon.start(timeout=15)
    try:
        paths, stack = [], [msu.root]
        while stack:
            path = stack.pop()
            paths.append(path)
            stack.extend(f"{path}/{c}" for c in owner.get_children(path))
        assert len(paths) > 5  # root, ledgers, registrations, ...
        only_owner = [ACL(Permissions.ALL, Id("sasl", "bk-cluster"))]
        for path in paths:
            assert owner.get_acls(path)[0] == only_owner, path
            for attempt in (lambda p: anon.get(p), lambda p: anon.set(p, b"forged"),
                            lambda p: anon.create(p + "/intruder")):
                with pytest.raises(NoAuthError):
                    attempt(path)
    finally:
        anon.stop()
        anon.close()
        owner.stop()
        owner.close()
    # Wrong SASL credentials: refused, and told what to set.
    with pytest.raises(UnauthorizedError, match="'bk-cluster'"):
        connect_zk(msu, timeout=30, security=ZkSecurity(digest="bk-cluster:wrong", sasl=True))
