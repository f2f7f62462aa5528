"""``bk bookie`` (run a bookie) and ``bk bookies`` (the registered ones).
"""

from __future__ import annotations

from collections.abc import Callable

from rich.table import Table

from bk_spark.autorecovery.self_repair_peers import ReplicaPeers
from bk_spark.autorecovery.service import AutoRecoveryConfig, AutoRecoveryService
from bk_spark.cli.common import JsonOpt, UriOpt, console, print_json
from bk_spark.io.registration import list_bookies
from bk_spark.security import ClientSecurity
from bookie_server.config import BookieConfig
from bookie_server.main import AutoRecoveryOptions, make_bookie_app
from bookie_server.server import BookieServer


# --------------------------------------------------------------------------- bookie
def _start_autorecovery(server: BookieServer, options: AutoRecoveryOptions) -> Callable[[], None]:
    """``bk bookie``'s hook (:mod:`bookie_server.main`): an Auditor contender and a
    Replication Worker in the bookie's process, on its metrics registry; returns their stop."""

    cfg = server.config
    recovery = AutoRecoveryService(cfg.metadata_service_uri, AutoRecoveryConfig(
        lost_bookie_recovery_delay_s=options.lost_bookie_recovery_delay_s,
        audit_interval_s=options.audit_interval_s,
        open_ledger_grace_s=options.open_ledger_grace_s,
        passwords=options.passwords),
        identity=cfg.bookie_id,
        registry=server.metrics.registry,
        # under mutual TLS the bookie's worker presents the bookie's own certificate
        security=_bookie_client_security(cfg))
    recovery.start_in_background()
    return recovery.stop


def _make_repair_peers(cfg: BookieConfig, passwords: tuple[bytes, ...]) -> ReplicaPeers:
    """``bk bookie``'s self-repair client (:mod:`bookie_server.self_repair`): copies through
    AutoRecovery's path, as the bookie's in-process AutoRecovery would."""
    return ReplicaPeers(cfg.metadata_service_uri or "", cfg.bookie_id, passwords,
                        security=_bookie_client_security(cfg))


# The bookie's options, config and start live in bookie_server.main (below the CLI);
# `bk bookie` is that command with the in-process AutoRecovery and self-repair hooks.
bookie_app = make_bookie_app(start_autorecovery=_start_autorecovery,
                             make_repair_peers=_make_repair_peers)


def _bookie_client_security(cfg: BookieConfig) -> ClientSecurity | None:
    """The client side of a bookie's in-process AutoRecovery: with ``--tls-client-auth
    require`` it presents the bookie's certificate (name it with ``--allow-bookie``) and
    trusts ``--tls-ca``; otherwise None (from the environment, as any client)."""
    if cfg.tls_client_auth != "require" or cfg.tls_ca is None:
        return None
    from dataclasses import replace

    from bk_spark.security import ClientSecurity

    return replace(ClientSecurity.from_env(), tls_ca=str(cfg.tls_ca),
                   tls_cert=str(cfg.tls_cert), tls_key=str(cfg.tls_key))


# --------------------------------------------------------------------------- bookies
def bookies(metadata_service_uri: UriOpt = None, as_json: JsonOpt = False) -> None:
    """List registered bookies and whether each is writable or readonly."""

    found = list_bookies(metadata_service_uri or "")

    def mode(b) -> str:  # type: ignore[no-untyped-def]
        return ("readonly" if b.read_only else "rw") + (
            ", decommissioning" if b.decommissioning else "")

    if as_json:
        print_json([{"bookie": b.bookie_id, "mode": "readonly" if b.read_only else "rw",
                      "decommissioning": b.decommissioning} for b in found])
        return
    t = Table("bookie", "mode")
    for b in found:
        t.add_row(b.bookie_id, mode(b))
    console.print(t)
    console.print(f"{len(found)} bookies")
