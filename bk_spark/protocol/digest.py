"""Entry digests and ledger passwords ("self-verifying" ledgers).

The seed: "Self-verifying includes a digest on every entry, which enables a reduction on the
degree of replication." Each entry carries a digest over its ledger id, entry id, the
writer's last-add-confirmed when it was written, its length and its payload, so a reader
detects a corrupt or misplaced copy and reads another bookie of the write quorum instead.

* ``crc32c``: CRC32C (Castagnoli), 4 bytes, big-endian.
* ``mac``: HMAC-SHA256, 32 bytes, keyed by a key derived from the ledger password (an entry
  forged without the password does not verify).
* ``none``: no digest (b"").

As in BookKeeper, the *master key* that a writer presents to bookies is a digest of the
password (``SHA-256("ledger" + password)``, BookKeeper uses SHA-1), never the password, and a
bookie stores that key with the ledger and checks it on every later request. Unlike
BookKeeper, whose ledger metadata carries the password itself (so its AutoRecovery opens any
ledger with it, ``LedgerOpenOp`` as admin), our metadata stores only
:func:`password_digest`, a different digest: reading the metadata store reveals neither the
password nor the master key. Re-replication, which knows no password, therefore gets the
master key from a surviving replica instead (its own bookie's storage, or the bookie-only
``ReadMasterKey`` RPC): enough for the digest types of :data:`VERIFIABLE_WITHOUT_PASSWORD`,
whose digests it checks without a password; a ``mac`` digest is keyed by the password and
can be checked (so copied) only with it. The module is pure.
"""

from __future__ import annotations

import hashlib
import hmac
import struct

import crc32c

from bk_spark.errors import DigestMismatchError, InvalidConfigError, UnauthorizedError

#: The digest types a ledger may use.
DIGEST_TYPES: tuple[str, ...] = ("crc32c", "mac", "none")

#: The digest types whose digests are computed, so verified, without the ledger's password
#: (a copy of such a ledger is checked with its master key alone).
VERIFIABLE_WITHOUT_PASSWORD: frozenset[str] = frozenset({"crc32c", "none"})

_HEADER = struct.Struct(">qqqq")  # ledger id, entry id, lac, payload length

Buffer = bytes | bytearray | memoryview


def master_key(password: bytes) -> bytes:
    """The key a writer presents to bookies: SHA-256 of ``b"ledger"`` + password."""
    return hashlib.sha256(b"ledger" + password).digest()


def _mac_key(password: bytes) -> bytes:
    return hashlib.sha256(b"mac" + password).digest()


def password_digest(password: bytes) -> str:
    """Hex digest of the password, stored in ledger metadata to check it on open."""
    return hashlib.sha256(b"bk-spark-password" + password).hexdigest()


def check_password(password: bytes, expected_digest: str, ledger_id: int | None = None) -> None:
    """Raise :class:`UnauthorizedError` unless ``password`` matches ``expected_digest``."""
    if not hmac.compare_digest(password_digest(password), expected_digest):
        what = f"ledger {ledger_id}" if ledger_id is not None else "the ledger"
        raise UnauthorizedError(
            f"wrong password for {what}: open it with the password it was created with"
        )


class DigestManager:
    """Computes and verifies entry digests of one ledger (one digest type and password)."""

    def __init__(self, digest_type: str, password: bytes = b"") -> None:
        if digest_type not in DIGEST_TYPES:
            raise InvalidConfigError(
                f"digestType {digest_type!r}: expected one of {', '.join(DIGEST_TYPES)}"
            )
        self.digest_type = digest_type
        self._mac = (
            hmac.new(_mac_key(password), digestmod=hashlib.sha256) if digest_type == "mac" else None
        )

    @property
    def digest_length(self) -> int:
        """Bytes of digest per entry: 4 (crc32c), 32 (mac) or 0 (none)."""
        return {"crc32c": 4, "mac": 32, "none": 0}[self.digest_type]

    def compute(self, ledger_id: int, entry_id: int, lac: int, payload: Buffer) -> bytes:
        """The digest of one entry (over ledger id, entry id, lac, length and payload)."""
        if self.digest_type == "none":
            return b""
        header = _HEADER.pack(ledger_id, entry_id, lac, len(payload))
        if self._mac is None:
            value = crc32c.crc32c(payload, value=crc32c.crc32c(header))
            return value.to_bytes(4, "big")
        mac = self._mac.copy()
        mac.update(header)
        mac.update(payload)
        return mac.digest()

    def verify(
        self, ledger_id: int, entry_id: int, lac: int, payload: Buffer, digest: bytes
    ) -> None:
        """Raise :class:`DigestMismatchError` unless ``digest`` matches the entry."""
        expected = self.compute(ledger_id, entry_id, lac, payload)
        if not hmac.compare_digest(expected, bytes(digest)):
            raise DigestMismatchError(
                f"entry {entry_id} of ledger {ledger_id}: {self.digest_type} digest mismatch "
                f"(corrupt or foreign copy): read it from another bookie of its write quorum"
            )


def password_bytes(password: bytes | str) -> bytes:
    """A ledger password as bytes (a ``str`` is UTF-8 encoded): every API takes either."""
    return password.encode() if isinstance(password, str) else bytes(password)
