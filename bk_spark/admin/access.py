"""Who may call which endpoint of the HTTP admin API (pure: no I/O).

Reading is open to any peer the bookie accepts (with ``--tls-client-auth require`` TLS has
already refused peers without a certificate of the bookie's CA, and with allow-lists a peer
in none is refused). Endpoints that change state need the admin identity: the bookie's own
:class:`~bookie_server.access.AccessPolicy` decides roles, as for its RPCs.

============  ====================  =============================================================
kind          allow-lists set       no allow-list (no identity to check)
============  ====================  =============================================================
``read``      any listed role       anyone
``change``    ``admin`` only        only a server bound to a loopback address (a sandbox on this
                                    machine); elsewhere refused: name an admin with
                                    ``--allow-admin`` and ``--tls-client-auth require``
============  ====================  =============================================================
"""

from __future__ import annotations

from collections.abc import Mapping

from bookie_server.access import ADMIN

READ, CHANGE = "read", "change"

#: (HTTP method, path) of every endpoint that changes state; every other endpoint reads.
CHANGES: frozenset[tuple[str, str]] = frozenset({
    ("PUT", "/api/v1/bookie/state"), ("PUT", "/api/v1/bookie/state/readonly"),
    ("PUT", "/api/v1/bookie/gc"), ("PUT", "/api/v1/autorecovery/trigger_audit"),
    ("PUT", "/api/v1/autorecovery/decommission"), ("DELETE", "/api/v1/ledger/delete"),
    ("PUT", "/api/v1/autorecovery/status"),
})

#: (kind, allow-lists set) -> who passes: a role name, "any" (any listed role), "anyone",
#: "loopback" (only when the server listens on a loopback address).
RULES: Mapping[tuple[str, bool], str] = {
    (READ, True): "any", (READ, False): "anyone",
    (CHANGE, True): ADMIN, (CHANGE, False): "loopback",
}


def kind_of(method: str, path: str) -> str:
    return CHANGE if (method.upper(), path.rstrip("/") or "/") in CHANGES else READ


def decide(kind: str, restricted: bool, role: str | None, loopback: bool) -> str | None:
    """None when the call may go ahead, else the reason it is refused (for the answer)."""
    rule = RULES[(kind, restricted)]
    if rule == "anyone" or (rule == "any" and role is not None) or rule == role:
        return None
    if rule == "loopback":
        if loopback:
            return None
        return ("this endpoint changes the cluster: on a bookie reachable from other hosts it "
                "needs the admin identity (start the bookie with --tls-client-auth require "
                "and --allow-admin NAME, and call it with that certificate)")
    if rule == ADMIN:
        return ("this endpoint changes the cluster: it needs a certificate the bookie lists "
                "with --allow-admin")
    return "your certificate identity is in no allow-list of this bookie"
