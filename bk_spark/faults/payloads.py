"""Payloads derivable from their id, so a checker can verify every byte it reads (pure).

A writer never invents bytes: the payload of ledger entry ``(ledger id, entry id)`` and of
log append ``(tag, session, seq)`` is a readable header followed by a body of 0..200 bytes
expanded from a SHA-256 of the header. The checker recomputes it from the id alone: a read
that returns anything else is a corrupt or misplaced entry.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

MAX_BODY = 200


def _body(header: bytes) -> bytes:
    seed = hashlib.sha256(header).digest()
    n = int.from_bytes(seed[:2], "big") % (MAX_BODY + 1)
    out = bytearray()
    block = seed
    while len(out) < n:
        block = hashlib.sha256(block).digest()
        out += block
    return bytes(out[:n])


def ledger_payload(ledger_id: int, entry_id: int) -> bytes:
    """The payload a ledger writer adds as entry ``entry_id`` of ledger ``ledger_id``."""
    header = f"L{ledger_id}:{entry_id}:".encode()
    return header + _body(header)


def log_payload(tag: str, session: int, seq: int) -> bytes:
    """The payload of append ``seq`` (per writer process) made in writer session ``session``."""
    if ":" in tag:
        raise ValueError(f"a writer tag has no ':' ({tag!r})")
    header = f"{tag}:{session}:{seq}:".encode()
    return header + _body(header)


@dataclass(frozen=True)
class LogPayloadId:
    """Who appended a log entry: writer process ``tag``, its ``session`` and ``seq``."""

    tag: str
    session: int
    seq: int

    @property
    def writer_session(self) -> str:
        return f"{self.tag}:{self.session}"


def parse_log_payload(payload: bytes) -> LogPayloadId | None:
    """The id of a log payload, or None when the bytes are not exactly what
    :func:`log_payload` makes for the id in their header (corrupt, foreign or truncated)."""
    parts = payload.split(b":", 3)
    if len(parts) != 4:
        return None
    try:
        tag = parts[0].decode("ascii")
        session, seq = int(parts[1]), int(parts[2])
    except (UnicodeDecodeError, ValueError):
        return None
    if not tag or ":" in tag or log_payload(tag, session, seq) != payload:
        return None
    return LogPayloadId(tag, session, seq)
