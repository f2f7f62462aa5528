"""Who may do what on a bookie: peer identities, roles and their rights (pure, no I/O).

With ``--tls-client-auth require`` a bookie accepts only peers presenting a certificate
signed by its CA (gRPC's TLS does that part). An optional allow-list per role then names the
identities (certificate subject common name or any subject alternative name) a role has:

============  ==================================================================================
role          may
============  ==================================================================================
``client``    add, read, fence and delete ledgers whose master key it presents (the password)
``bookie``    also read any ledger without its key, and read the master key a bookie stored
              with a ledger (``ReadMasterKey``): what re-replication (bookies, autorecovery)
              needs to copy a fragment, and add it to a replacement, with no password
``admin``     also delete any ledger without its key (and read it and its master key)
============  ==================================================================================

A peer with several roles gets the strongest. With no allow-list every peer is a ``client``
(the master key still guards every ledger); with any allow-list, a peer in none is refused
every RPC. Fencing and adds always need the ledger's key: they create the ledger's state on a
bookie that has not seen it, and the key stored then guards it.

``ReadMasterKey`` hands out what every other RPC of a ledger checks, so it is answered to a
``bookie`` or ``admin`` role only (:data:`ROLE_ONLY`): with no allow-list (no verified
identities, e.g. without mutual TLS) nobody has those roles and every peer is refused it. A
client thus never gains, by this RPC, a way to read or write a ledger it could not before.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

CLIENT, BOOKIE, ADMIN = "client", "bookie", "admin"
ROLES: tuple[str, ...] = (CLIENT, BOOKIE, ADMIN)  # weakest first

#: What each role may do without the ledger's master key (RPC names). Every RPC needs a role.
KEY_FREE: Mapping[str, frozenset[str]] = {
    CLIENT: frozenset(),
    BOOKIE: frozenset({"ReadEntries"}),
    ADMIN: frozenset({"ReadEntries", "DeleteLedger"}),
}

#: RPCs answered to these roles only (whatever key the request carries).
ROLE_ONLY: Mapping[str, frozenset[str]] = {
    "ReadMasterKey": frozenset({BOOKIE, ADMIN}),
}


def peer_identities(auth_context: Mapping[str, Sequence[bytes]]) -> frozenset[str]:
    """The names a peer's verified certificate gives it: subject CN and every SAN."""
    names: set[str] = set()
    for key in ("x509_common_name", "x509_subject_alternative_name"):
        for value in auth_context.get(key, ()):
            names.add(value.decode("utf-8", "replace") if isinstance(value, bytes) else value)
    return frozenset(names)


@dataclass(frozen=True)
class AccessPolicy:
    """The allow-lists of one bookie (empty everywhere: every peer is a client)."""

    clients: frozenset[str] = frozenset()
    bookies: frozenset[str] = frozenset()
    admins: frozenset[str] = frozenset()

    @classmethod
    def of(cls, clients: Iterable[str] = (), bookies: Iterable[str] = (),
           admins: Iterable[str] = ()) -> AccessPolicy:
        return cls(frozenset(clients), frozenset(bookies), frozenset(admins))

    @property
    def restricted(self) -> bool:
        """True when some allow-list is set: unlisted peers are refused."""
        return bool(self.clients or self.bookies or self.admins)

    def role(self, identities: frozenset[str]) -> str | None:
        """The strongest role of a peer with these identities; None: refused."""
        if not self.restricted:
            return CLIENT
        for role, names in ((ADMIN, self.admins), (BOOKIE, self.bookies),
                            (CLIENT, self.clients)):
            if identities & names:
                return role
        return None

    def key_required(self, role: str, method: str) -> bool:
        """Whether ``role`` must present the ledger's master key for ``method``."""
        return method not in KEY_FREE[role]

    def may_call(self, role: str, method: str) -> bool:
        """Whether ``role`` may call ``method`` at all (:data:`ROLE_ONLY`); a peer of an
        unrestricted policy is a ``client``."""
        allowed = ROLE_ONLY.get(method)
        return allowed is None or role in allowed
