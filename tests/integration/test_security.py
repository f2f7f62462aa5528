"""Security at the bookie and in ZooKeeper, on real processes: ledger passwords checked by
every bookie, mutual TLS with per-role allow-lists, ZooKeeper digest auth and ACLs."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from bk_spark.certs import issue_cert, make_ca
from bk_spark.core import BookKeeper
from bk_spark.core.bookie_client import BookieClient, ClientConfig, TlsOptions
from bk_spark.core.digest import master_key
from bk_spark.errors import BookieUnavailableError, UnauthorizedError
from bk_spark.proto import bookie_pb2 as pb
from bk_spark.proto import bookie_pb2_grpc
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

    def client(bookie: str, cert=None, tls: bool = True) -> BookieClient:
        opts = TlsOptions(ca.cert, cert.cert, cert.key) if cert else TlsOptions(ca.cert)
        return BookieClient(bookie, ClientConfig(read_timeout_s=3, tls=opts if tls else None))

    target = cluster.bookies[0].bookie_id
    for refused in (client(target, tls=False), client(target), client(target, stranger)):
        try:  # plaintext, no client certificate, a certificate of another CA: no handshake
            with pytest.raises(BookieUnavailableError):
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
            as_admin.delete_ledger(lh.id, b"")  # admin may delete any ledger
        finally:
            as_app.close()
            as_admin.close()
