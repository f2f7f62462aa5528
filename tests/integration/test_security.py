"""Security at the bookie and in ZooKeeper, on real processes: ledger passwords checked by
every bookie, mutual TLS with per-role allow-lists, ZooKeeper digest auth and ACLs."""

from __future__ import annotations

import grpc
import pytest

from bk_spark.core import BookKeeper
from bk_spark.core.digest import master_key
from bk_spark.errors import UnauthorizedError
from bk_spark.proto import bookie_pb2 as pb
from bk_spark.proto import bookie_pb2_grpc

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
