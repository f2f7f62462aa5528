"""The cluster side of a bookie's self-repair (:mod:`bookie_server.self_repair`).

:class:`ReplicaPeers` gives the repair what it needs of the other bookies through one
:class:`~bk_spark.core.client.BookKeeper` client: ledger metadata, the ledger's password
among the candidates (AutoRecovery's :func:`~bk_spark.autorecovery.replicator.ledger_password`,
BookKeeper's ``bookieRecoveryPasswd``), a recovery open for a ledger in limbo, and the copy
of entries, which is AutoRecovery's own copy path (:meth:`LedgerReplicator._copy`: read
from the surviving replicas with the reader's fail-over, every copy digest-verified, then
batched recovery adds) with this bookie as the target. That call is the one place the
repair reaches into re-replication.
"""

from __future__ import annotations

from collections.abc import Sequence

from bk_spark.autorecovery.replicator import LedgerReplicator, LocalStore, ledger_password
from bk_spark.core.client import BookKeeper
from bk_spark.core.context import BookKeeperConfig
from bk_spark.io.entry import EntryCodec
from bk_spark.io.underreplication import UnderReplicationManager
from bk_spark.protocol.digest import DigestManager, master_key
from bk_spark.protocol.ledger_metadata import LedgerMetadata
from bk_spark.security import ClientSecurity


class ReplicaPeers:
    """:class:`bookie_server.self_repair.RepairPeers` over the other bookies of the cluster.

    The client is made on first use (the bookie's gRPC server is up by then)."""

    def __init__(self, metadata_service_uri: str, bookie_id: str,
                 passwords: Sequence[bytes] = (), security: ClientSecurity | None = None) -> None:
        self.uri = metadata_service_uri
        self.bookie_id = bookie_id
        self.passwords = tuple(dict.fromkeys((b"", *passwords)))
        self.security = security
        self._bk: BookKeeper | None = None
        self._replicator: LedgerReplicator | None = None

    def _client(self) -> tuple[BookKeeper, LedgerReplicator]:
        if self._bk is None or self._replicator is None:
            self._bk = BookKeeper(self.uri, BookKeeperConfig(tune_allocator=False),
                                  security=self.security)
            self._replicator = LedgerReplicator(self._bk, passwords=self.passwords)
        return self._bk, self._replicator

    def metadata(self, ledger_id: int) -> LedgerMetadata:
        return self._client()[0].metadata_store.read(ledger_id).value

    def password(self, md: LedgerMetadata) -> bytes:
        return ledger_password(md, self.passwords)

    def recover(self, md: LedgerMetadata, password: bytes) -> LedgerMetadata:
        bk = self._client()[0]
        bk.open_ledger(md.ledger_id, password, recovery=True)
        return bk.metadata_store.read(md.ledger_id).value

    def hand_over(self, md: LedgerMetadata) -> str:
        bk = self._client()[0]
        record = UnderReplicationManager(bk.zk, bk.msu.root).mark(md.ledger_id,
                                                                   [self.bookie_id])
        return record.reason

    def healed(self, md: LedgerMetadata) -> None:
        bk = self._client()[0]
        UnderReplicationManager(bk.zk, bk.msu.root).mark_replicated(md.ledger_id,
                                                                    [self.bookie_id])

    def copy(self, md: LedgerMetadata, password: bytes, entry_ids: Sequence[int],
             store: LocalStore | None = None) -> tuple[int, int]:
        replicator = self._client()[1]
        codec = EntryCodec(md.ledger_id, DigestManager(md.digest_type, password))
        return replicator._copy(md, codec, master_key(password), list(entry_ids),
                                self.bookie_id, store)

    def close(self) -> None:
        if self._bk is not None:
            self._bk.close()
            self._bk = None
