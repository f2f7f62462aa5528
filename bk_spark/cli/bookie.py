"""``bk bookie`` (run a bookie), ``bk bookie format`` (empty its directories) and
``bk bookies`` (the registered ones).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from bk_spark.autorecovery.self_repair_peers import ReplicaPeers
from bk_spark.autorecovery.service import AutoRecoveryService
from bk_spark.cli.common import (
    JsonOpt,
    UriOpt,
    YesOpt,
    cli_security,
    confirm,
    connect,
    console,
    format_size,
    print_json,
    progress_bar,
)
from bk_spark.cli.cookie import zk_session
from bk_spark.errors import InvalidConfigError
from bk_spark.io.cookies import CookieStore
from bk_spark.io.registration import list_bookies
from bk_spark.security import ClientSecurity
from bookie_server.config import AutoRecoveryConfig, BookieConfig
from bookie_server.cookie import data_directories, format_directories, read_dir_facts
from bookie_server.main import make_bookie_app
from bookie_server.server import BookieServer


# --------------------------------------------------------------------------- bookie
def _start_autorecovery(server: BookieServer, config: AutoRecoveryConfig) -> Callable[[], None]:
    """``bk bookie``'s hook (:mod:`bookie_server.main`): an Auditor contender and a
    Replication Worker in the bookie's process (unless ``config`` runs neither), and an
    offloader contender with ``--offload`` (:mod:`bk_spark.offload`), on its metrics registry;
    returns their stop."""

    cfg = server.config
    stops: list[Callable[[], None]] = []
    if cfg.offload:
        from bk_spark.offload.offloader import OffloaderConfig
        from bk_spark.offload.service import OffloaderService

        offloader = OffloaderService(cfg.metadata_service_uri or "", OffloaderConfig(
            passwords=tuple(dict.fromkeys((b"", *config.passwords))),
            default_target=cfg.offload_target), identity=cfg.bookie_id,
            registry=server.metrics.registry, security=_bookie_client_security(cfg),
            local_key=server.storage.master_key)  # password ledgers, as its worker
        offloader.start_in_background()
        stops.append(offloader.stop)
    if not (config.run_auditor or config.run_worker):
        return lambda: [stop() for stop in stops] and None
    recovery = AutoRecoveryService(
        cfg.metadata_service_uri, config,
        identity=cfg.bookie_id,
        registry=server.metrics.registry,
        # under mutual TLS the bookie's worker presents the bookie's own certificate
        security=_bookie_client_security(cfg),
        # the keys this bookie stored: its worker heals the password-protected ledgers it
        # holds a copy of with no password configured (nothing crosses the network)
        local_key=server.storage.master_key)
    recovery.start_in_background()
    stops.append(recovery.stop)
    return lambda: [stop() for stop in stops] and None


def _start_http(server: BookieServer, autorecovery: AutoRecoveryConfig | None
                ) -> Callable[[], None]:
    """``bk bookie --http-port``'s hook (:mod:`bookie_server.main`): the HTTP admin API and
    status page (:mod:`bk_spark.admin.http`) in the bookie's process."""
    from bk_spark.admin.http import start_for_bookie

    assert server.config.http_port is not None
    return start_for_bookie(
        server, server.config.http_port, security=_bookie_client_security(server.config),
        lost_bookie_recovery_delay_s=None if autorecovery is None or not autorecovery.run_auditor
        else autorecovery.lost_bookie_recovery_delay_s)


def _make_repair_peers(cfg: BookieConfig, passwords: tuple[bytes, ...]) -> ReplicaPeers:
    """``bk bookie``'s self-repair client (:mod:`bookie_server.self_repair`): copies through
    AutoRecovery's path, as the bookie's in-process AutoRecovery would."""
    return ReplicaPeers(cfg.metadata_service_uri or "", cfg.bookie_id, passwords,
                        security=_bookie_client_security(cfg))


# The bookie's options, config and start live in bookie_server.main (below the CLI);
# `bk bookie` is that command with the in-process AutoRecovery, HTTP API and self-repair hooks.
bookie_app = make_bookie_app(start_autorecovery=_start_autorecovery, start_http=_start_http,
                             make_repair_peers=_make_repair_peers, client_security=cli_security)


def _bookie_client_security(cfg: BookieConfig) -> ClientSecurity:
    """The client side of a bookie's in-process AutoRecovery, HTTP API and self-repair: the
    bookie's credentials (``cfg.security``, passed as an object) and, with
    ``--tls-client-auth require``, the bookie's certificate (name it with
    ``--allow-bookie``) and ``--tls-ca``."""
    security = cfg.security if cfg.security is not None else ClientSecurity.from_env()
    if cfg.tls_client_auth == "require" and cfg.tls_ca is not None:
        security = replace(security, tls_ca=str(cfg.tls_ca), tls_cert=str(cfg.tls_cert),
                           tls_key=str(cfg.tls_key))
    return security


# --------------------------------------------------------------------------- format
def format_bookie(
    data_dir: Annotated[Path, typer.Option("--data-dir", help="the bookie's data directory",
                                           show_default=False)],
    bookie_id: Annotated[str | None, typer.Option(
        "--bookie-id", help="HOST:PORT whose cookie goes too (default: the bookie its "
                            "stamps name; a wiped directory has none, so name it)")] = None,
    metadata_service_uri: UriOpt = None,
    force: Annotated[bool, typer.Option(
        "--force", help="format even though ZooKeeper holds the bookie's cookie (the "
                        "cluster expects its data) or the bookie is registered")] = False,
    yes: YesOpt = False, as_json: JsonOpt = False,
) -> None:
    """Empty a bookie's directories (journal, ledgers, their stamps) and delete its cookie
    from ZooKeeper: the next start is a new, empty bookie. Refuses, unless --force, while
    the cluster expects its data (a cookie naming these directories) or it is registered."""
    journal_dirs, ledger_dirs = data_directories(data_dir)
    mine = set(journal_dirs + ledger_dirs)
    stamps = [f.stamp for f in map(read_dir_facts, journal_dirs + ledger_dirs) if f.stamp]
    ids = sorted({s.bookie_id for s in stamps} | ({bookie_id} if bookie_id else set()))
    with zk_session(metadata_service_uri) as (zk, msu):
        store = CookieStore(zk, msu)
        live = {b.bookie_id for b in list_bookies(msu, zk=zk)}
        cookies = {i: c for i in ids if (c := store.find(i)) is not None
                   and mine & set(c.value.directories)}
        problems = [f"ZooKeeper holds the cookie of bookie {i} naming these directories (the "
                    f"cluster expects their data: `bk recover {i}` re-replicates it first)"
                    for i in cookies]
        problems += [f"bookie {i} is registered (running): stop it first" for i in ids
                     if i in live]
        if problems and not force:
            raise InvalidConfigError(f"refusing to format {data_dir}: " + "; ".join(problems)
                                     + ". Pass --force to format anyway")
        what = f"format {data_dir}: delete its journal and ledgers" + (
            f" and the cookie of {', '.join(cookies)}" if cookies else "")
        confirm(yes, what)
        removed = format_directories(data_dir)
        for i, c in cookies.items():
            store.delete(i, c.version)
    if as_json:
        print_json({"data_dir": str(data_dir), "removed": removed,
                    "cookies_deleted": sorted(cookies)})
        return
    console.print(f"formatted {data_dir}: removed {', '.join(removed) or 'nothing (empty)'}"
                  + (f"; deleted the cookie of {', '.join(cookies)}" if cookies else ""))
    console.print("the next start of a bookie on it is a new, empty bookie")


# --------------------------------------------------------------------------- bookies
def bookies(metadata_service_uri: UriOpt = None, as_json: JsonOpt = False) -> None:
    """List registered bookies and whether each is writable or readonly."""

    with zk_session(metadata_service_uri) as (zk, msu):
        found = list_bookies(msu, zk=zk)

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


# --------------------------------------------------------------------------- repair-status
def _repair_row(bookie_id: str, info: object) -> dict:
    return {"bookie": bookie_id, "state": info.repair_state or "none",  # type: ignore[attr-defined]
            "ledgers_total": info.repair_ledgers_total,  # type: ignore[attr-defined]
            "ledgers_left": info.repair_ledgers_left,  # type: ignore[attr-defined]
            "ledgers_in_limbo": info.repair_limbo_ledgers,  # type: ignore[attr-defined]
            "entries_copied": info.repair_entries_copied,  # type: ignore[attr-defined]
            "bytes_copied": info.repair_bytes_copied,  # type: ignore[attr-defined]
            "error": info.repair_error}  # type: ignore[attr-defined]


def repair_status(
    bookie: Annotated[str | None, typer.Argument(
        help="HOST:PORT of one bookie (default: every registered bookie)")] = None,
    metadata_service_uri: UriOpt = None,
    watch: Annotated[bool, typer.Option(
        "--watch", help="follow one bookie's repair with a progress bar until it is done")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Self-repair of bookies that lost their data: ledgers left (and in limbo: fenced,
    answering UNKNOWN), entries and bytes copied back. Asked of each bookie (``Info``): the
    progress is what the bookie persisted on its own disk, ledger by ledger."""
    with connect(metadata_service_uri) as bk:
        ids = [bookie] if bookie else [b.bookie_id for b in list_bookies(bk.msu, bk.zk)]
        if watch:
            if bookie is None:
                raise InvalidConfigError("--watch follows one bookie: name it (HOST:PORT)")
            info = bk.bookies.get(bookie).info()
            total = info.repair_ledgers_total
            done = total - info.repair_ledgers_left
            with progress_bar(f"repairing {bookie}", total) as advance:
                advance(done)
                while info.repair_state == "repairing":
                    time.sleep(0.5)
                    info = bk.bookies.get(bookie).info()
                    now = total - info.repair_ledgers_left
                    advance(now - done)
                    done = now
        rows = [_repair_row(b, bk.bookies.get(b).info()) for b in ids]
    if as_json:
        print_json(rows if bookie is None else rows[0])
        return
    t = Table()
    for name in ("bookie", "state", "left", "limbo", "entries", "copied", "progress"):
        t.add_column(name, no_wrap=True)
    errors = any(r["error"] for r in rows)
    if errors:
        t.add_column("last error")
    for r in rows:
        total, left = r["ledgers_total"], r["ledgers_left"]
        frac = 1.0 if total == 0 else (total - left) / total
        bar = "█" * round(10 * frac) + "░" * (10 - round(10 * frac))
        t.add_row(r["bookie"], r["state"], f"{left}/{total}", str(r["ledgers_in_limbo"]),
                  str(r["entries_copied"]), format_size(r["bytes_copied"]),
                  f"{bar} {100 * frac:.0f}%" if r["state"] != "none" else "",
                  *([r["error"]] if errors else []))
    console.print(t)
