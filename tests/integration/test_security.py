"""Security at the bookie and in ZooKeeper, on real processes: ledger passwords checked by
every bookie, mutual TLS with per-role allow-lists, ZooKeeper digest auth and ACLs."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from bk_spark.certs import issue_cert, make_ca
from bk_spark.cli import main as bk_main
from bk_spark.core import BookKeeper, BookKeeperConfig
from bk_spark.errors import UnauthorizedError
from bk_spark.io.bookie_client import BookieClient, ClientConfig, TlsOptions
from bk_spark.io.zk import connect_zk
from bk_spark.log import open_log_writer
from bk_spark.metadata_uri import parse_metadata_service_uri
from bk_spark.proto import bookie_pb2 as pb
from bk_spark.proto import bookie_pb2_grpc
from bk_spark.protocol.digest import master_key
from bk_spark.security import ClientSecurity

PASSWORD = b"s3cret-ledger-password"


def test_every_bookie_refuses_reads_and_deletes_of_a_protected_ledger_without_its_password(
        cluster, metadata_uri) -> None:
    with BookKeeper(metadata_uri) as bk:
        lh = bk.create_ledger(3, 3, 2, password=PASSWORD)
        for i in range(10):
            lh.add_entry(b"private-%d" % i)
        ensemble = lh.metadata.ensembles[0][1]
        # Raw gRPC with the project's own stubs, as anyone who reaches a bookie's port can.
        for bookie in ensemble:
            with grpc.insecure_channel(bookie) as channel:
                stub = bookie_pb2_grpc.BookieStub(channel)
                for key in (b"", master_key(b"guess")):
                    got = stub.ReadEntries(pb.ReadRequest(ledger_id=lh.id, first_entry=0,
                                                          last_entry=9, master_key=key))
                    assert got.status == pb.UNAUTHORIZED and not got.entries, bookie
                    gone = stub.DeleteLedger(pb.DeleteLedgerRequest(ledger_id=lh.id,
                                                                    master_key=key))
                    assert gone.status == pb.UNAUTHORIZED, bookie
                # the key itself is handed to bookie/admin certificates only: never here
                asked = stub.ReadMasterKey(pb.MasterKeyRequest(ledger_id=lh.id))
                assert asked.status == pb.UNAUTHORIZED and not asked.master_key, bookie
                ok = stub.ReadEntries(pb.ReadRequest(ledger_id=lh.id, first_entry=0,
                                                     last_entry=9,
                                                     master_key=master_key(PASSWORD)))
                assert ok.status == pb.OK and len(ok.entries) == 10
        # The client API says what to do, for a non-fencing read, a recovery open, a delete.
        for recovery in (False, True):
            with pytest.raises(UnauthorizedError, match="password"):
                bk.open_ledger(lh.id, b"wrong", recovery=recovery)
        with pytest.raises(UnauthorizedError, match="password"):
            bk.delete_ledger(lh.id)
        # The writer was not disturbed; its owner still reads everything.
        lh.add_entry(b"private-10")
        lh.close()
        rh = bk.open_ledger(lh.id, PASSWORD)
        assert [e.payload for e in rh.read_entries(0, 10)] == [b"private-%d" % i
                                                              for i in range(11)]
        bk.delete_ledger(lh.id, PASSWORD)
        assert lh.id not in list(bk.list_ledgers())


def test_mutual_tls_bookies_refuse_strangers_and_grant_each_allow_listed_role_its_rights(
        cluster_factory, metadata_uri, tmp_path: Path) -> None:
    ca = make_ca(tmp_path / "ca")
    other_ca = make_ca(tmp_path / "other", "other-ca")
    certs = tmp_path / "certs"
    server = issue_cert(ca, certs, "bookie")
    app, ops, intruder = (issue_cert(ca, certs, n) for n in ("app-1", "ops", "intruder"))
    stranger = issue_cert(other_ca, tmp_path / "other", "app-1")  # right name, wrong CA
    cluster = cluster_factory(3, extra_args=[
        "--tls-cert", str(server.cert), "--tls-key", str(server.key), "--tls-ca", str(ca.cert),
        "--tls-client-auth", "require", "--allow-client", "app-1", "--allow-admin", "ops"])
    app_security = ClientSecurity(str(ca.cert), str(app.cert), str(app.key))
    with BookKeeper(metadata_uri, security=app_security) as bk:
        lh = bk.create_ledger(3, 2, 2, password=PASSWORD)
        for i in range(20):
            lh.add_entry(b"mtls-%d" % i)
        lh.close()
        rh = bk.open_ledger(lh.id, PASSWORD, recovery=False)
        assert [e.payload for e in rh.read_entries(0, 19)] == [b"mtls-%d" % i for i in range(20)]
        ensemble = lh.metadata.ensembles[0][1]
        left_open = bk.create_ledger(3, 2, 2, password=PASSWORD)
        left_open.add_entry(b"a writer's last words")
        # its writer crashes: abandoned, it stays OPEN (closing the client would close it)
        left_open.abandon("the writer crashed")
    # A user without a certificate is told, through the API, what the bookies want: on an
    # add, a read, and a recovery open (whose fencing waits for the connection, then asks).
    quick = BookKeeperConfig(client=ClientConfig(read_timeout_s=1))
    with BookKeeper(metadata_uri, quick, security=ClientSecurity(str(ca.cert))) as bk:
        with pytest.raises(UnauthorizedError, match="requires a client certificate"):
            bk.create_ledger(3, 2, 2, password=PASSWORD).add_entry(b"refused")
        with pytest.raises(UnauthorizedError, match="requires a client certificate"):
            bk.open_ledger(lh.id, PASSWORD, recovery=False).read_entries(0, 19)
        with pytest.raises(UnauthorizedError, match="requires a client certificate"):
            bk.open_ledger(left_open.id, PASSWORD)

    def client(bookie: str, cert=None, tls: bool = True) -> BookieClient:
        opts = TlsOptions(ca.cert, cert.cert, cert.key) if cert else TlsOptions(ca.cert)
        return BookieClient(bookie, ClientConfig(read_timeout_s=3, tls=opts if tls else None))

    target = cluster.bookies[0].bookie_id
    for refused, says in ((client(target, tls=False), "serves TLS only.*BK_TLS_CA"),
                          (client(target), "requires a client certificate.*BK_TLS_CERT"),
                          (client(target, stranger), "refused this client's certificate")):
        try:  # plaintext, no client certificate, a certificate of another CA: no handshake,
            # and the error says so (gRPC itself only says "Socket closed")
            with pytest.raises(UnauthorizedError, match=says):
                refused.info()
        finally:
            refused.close()
    outsider = client(target, intruder)
    try:  # signed by the CA, but its identity is in no allow-list
        with pytest.raises(UnauthorizedError, match="allow-list"):
            outsider.info()
    finally:
        outsider.close()
    for bookie in ensemble:
        as_app, as_admin = client(bookie, app), client(bookie, ops)
        try:
            with pytest.raises(UnauthorizedError):  # a client needs the ledger's key
                as_app.read_entries(lh.id, entry_ids=[0], master_key=b"")
            with pytest.raises(UnauthorizedError):
                as_app.delete_ledger(lh.id, b"")
            assert as_admin.read_entries(lh.id, first_entry=0, last_entry=19).entries
            # re-replication's key copy: an admin (or bookie) certificate only
            with pytest.raises(UnauthorizedError, match="bookie and admin certificates only"):
                as_app.read_master_key(lh.id)
            assert as_admin.read_master_key(lh.id) == master_key(PASSWORD)
            as_admin.delete_ledger(lh.id, b"")  # admin may delete any ledger
        finally:
            as_app.close()
            as_admin.close()


def _znodes(zk: KazooClient, root: str) -> list[str]:
    out, stack = [], [root]
    while stack:
        path = stack.pop()
        out.append(path)
        stack.extend(f"{path}/{c}" for c in zk.get_children(path))
    return out


def test_zookeeper_acls_leave_an_unauthenticated_client_nothing_to_read_or_change(
        cluster_factory, metadata_uri, tmp_path: Path, monkeypatch) -> None:
    # An open cluster, made before it had ZooKeeper credentials: `bk zk-acl` protects it.
    cluster = cluster_factory(3)
    with BookKeeper(metadata_uri) as bk:
        old = bk.create_ledger(3, 2, 2, password=PASSWORD)
        old.add_entry(b"before the ACLs")
        old.close()
        with open_log_writer(bk, "events") as w:
            w.append(b"logged")
    creds = tmp_path / "zk-auth"
    creds.write_text("bk-cluster:zk-s3cret\n")
    assert bk_main(["--zk-auth-file", str(creds), "zk-acl", "-m", metadata_uri]) == 0
    monkeypatch.setenv("BK_ZK_AUTH_FILE", str(creds))  # bookies and clients from here on
    cluster.add_bookie()  # registers under the protected root, with the ACL
    with BookKeeper(metadata_uri) as bk:  # new znodes get the ACL too
        new = bk.create_ledger(3, 2, 2)
        new.add_entry(b"after the ACLs")
        with open_log_writer(bk, "events") as w:
            w.append(b"logged again")
        assert bk.open_ledger(old.id, PASSWORD).read_entries(0, 0)[0].payload == \
            b"before the ACLs"
        root = bk.msu.root
        paths = _znodes(bk.zk, root)
        assert any(f"/available/{cluster.bookies[-1].bookie_id}" in p for p in paths)
        anon = KazooClient(hosts=bk.msu.hosts)
        anon.start(timeout=15)
        try:
            for path in paths:
                for attempt in (lambda p: anon.get(p), lambda p: anon.get_children(p),
                                lambda p: anon.set(p, b"forged"),
                                lambda p: anon.create(p + "/intruder")):
                    with pytest.raises(NoAuthError):
                        attempt(path)
                if path != root:  # deleting a child needs DELETE on its (protected) parent
                    with pytest.raises(NoAuthError):
                        anon.delete(path, recursive=False)
        finally:
            anon.stop()
            anon.close()
        new.close()
    # Clients without the credentials, or with wrong ones, are told what to do.
    monkeypatch.delenv("BK_ZK_AUTH_FILE")
    with pytest.raises(UnauthorizedError, match="BK_ZK_AUTH_FILE"):
        BookKeeper(metadata_uri)
    monkeypatch.setenv("BK_ZK_AUTH", "bk-cluster:wrong")
    with pytest.raises(UnauthorizedError, match="'bk-cluster'"):
        connect_zk(parse_metadata_service_uri(metadata_uri))
