"""The entry as a ledger writer sends it and a reader verifies it.

On the wire an entry carries ledger id, entry id, last-add-confirmed, payload and
a digest. bk-spark's ``digest`` field is a small trailer: the ledger's length in
bytes up to and including this entry (8 bytes, big-endian, as BookKeeper keeps
it in every entry so recovery can close a ledger with its length) followed by
the digest of the chosen type, which covers ids, LAC, length and payload.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from bk_spark.core.digest import DigestManager
from bk_spark.errors import DigestMismatchError
from bk_spark.proto import bookie_pb2 as pb

_LEN = struct.Struct(">q")


@dataclass(frozen=True)
class LedgerEntry:
    """One entry read back from a ledger."""

    ledger_id: int
    entry_id: int
    payload: bytes

    @property
    def length(self) -> int:
        return len(self.payload)


class EntryCodec:
    """Makes and verifies wire entries of one ledger."""

    def __init__(self, ledger_id: int, digest: DigestManager) -> None:
        self.ledger_id = ledger_id
        self.digest = digest

    def encode(self, entry_id: int, lac: int, length: int, payload: bytes) -> pb.Entry:
        head = _LEN.pack(length)
        d = self.digest.compute(self.ledger_id, entry_id, lac, head + payload)
        return pb.Entry(ledger_id=self.ledger_id, entry_id=entry_id, lac=lac,
                        payload=payload, digest=head + d)

    def verify(self, e: pb.Entry) -> int:
        """Check ids and digest; returns the ledger length the entry carries."""
        if e.ledger_id != self.ledger_id or len(e.digest) < _LEN.size:
            raise DigestMismatchError(
                f"entry {e.ledger_id}/{e.entry_id} is not an entry of ledger {self.ledger_id}")
        head = e.digest[:_LEN.size]
        self.digest.verify(self.ledger_id, e.entry_id, e.lac, head + e.payload,
                           e.digest[_LEN.size:])
        return _LEN.unpack(head)[0]
