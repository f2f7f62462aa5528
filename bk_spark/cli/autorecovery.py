"""``bk autorecovery``, ``bk ledger underreplicated``, ``bk recover``,
``bk bookie decommission``.
"""

from __future__ import annotations

import logging
import time
from typing import Annotated

import typer
from rich.table import Table

from bk_spark.admin import facts
from bk_spark.autorecovery.auditor import ledgers_naming, mark_ledgers_of
from bk_spark.autorecovery.replicator import LedgerReplicator
from bk_spark.autorecovery.service import AutoRecoveryService
from bk_spark.cli.common import (
    JsonOpt,
    UriOpt,
    cli_security,
    connect,
    console,
    err_console,
    format_time,
    print_json,
    progress_bar,
    serve_in_foreground,
)
from bk_spark.core.client import BookKeeper
from bk_spark.errors import (
    BKError,
    BKTimeoutError,
    InvalidConfigError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
    RecoveryError,
    RecoveryKeyUnavailableError,
)
from bk_spark.io.registration import clear_decommissioning, mark_decommissioning
from bk_spark.io.underreplication import UnderReplicationManager
from bookie_server.main import (
    ENV_RECOVERY_PASSWORD,
    AuditIntervalOpt,
    LostBookieRecoveryDelayOpt,
    OpenLedgerGraceOpt,
    autorecovery_config,
)

autorecovery_app = typer.Typer(
    invoke_without_command=True,
    help="AutoRecovery: run it standalone (no subcommand), or status / enable / disable.")


#: `bk recover`'s own grace (default 0: recover open ledgers now); AutoRecovery's is
#: AutoRecoveryConfig.open_ledger_grace_s.
GraceOpt = Annotated[float, typer.Option(
    "--open-ledger-grace",
    help="seconds without adds before an open ledger's last fragment is recovered")]


PasswordsOpt = Annotated[list[str] | None, typer.Option(
    "--recovery-password", envvar=ENV_RECOVERY_PASSWORD,
    help="a ledger password re-replication may use (repeatable; the empty one always is). "
         "Rarely needed: a worker in a bookie takes a ledger's key from its own copy, one "
         "with a --allow-bookie/--allow-admin certificate from a surviving bookie; a 'mac' "
         "ledger needs its password")]


@autorecovery_app.callback()
def autorecovery(
    ctx: typer.Context,
    metadata_service_uri: UriOpt = None,
    lost_bookie_recovery_delay: LostBookieRecoveryDelayOpt = None,
    audit_interval: AuditIntervalOpt = None,
    open_ledger_grace: OpenLedgerGraceOpt = None,
    recovery_password: PasswordsOpt = None,
    metrics_port: Annotated[int | None, typer.Option(
        "--metrics-port", help="Prometheus /metrics HTTP port (0: any free port)")] = None,
) -> None:
    """Run an Auditor contender and a Replication Worker in the foreground (Ctrl-C stops)."""
    if ctx.invoked_subcommand is not None:
        return

    from bk_spark.metadata_uri import parse_metadata_service_uri

    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    uri = parse_metadata_service_uri(metadata_service_uri).uri
    service = AutoRecoveryService(uri, autorecovery_config(
        lost_bookie_recovery_delay, audit_interval, open_ledger_grace, recovery_password),
        security=cli_security())
    serve_in_foreground(service, "autorecovery", uri, metrics_port)


@autorecovery_app.command("status")
def autorecovery_status(metadata_service_uri: UriOpt = None, as_json: JsonOpt = False) -> None:
    """Who is the Auditor, which workers run, the last audit, the under-replicated count."""
    with connect(metadata_service_uri) as bk:
        out = facts.autorecovery_status(UnderReplicationManager(bk.zk, bk.msu.root))
    if as_json:
        print_json(out)
        return
    t = Table("", "", show_header=False)
    t.add_row("enabled", "yes" if out["enabled"] else "NO (bk autorecovery enable)")
    t.add_row("auditor", out["auditor"] or "none elected")
    t.add_row("workers", ", ".join(out["workers"]) or "none")
    t.add_row("under-replicated ledgers", str(out["under_replicated"]))
    t.add_row("of them failing", f"{out['failing']} (reasons: bk ledger underreplicated)"
              if out["failing"] else "0")
    t.add_row("lost bookies", ", ".join(out["lost_bookies"]) or "none")
    t.add_row("last full check", format_time(out["last_check_ms"]))
    console.print(t)


@autorecovery_app.command("enable")
def autorecovery_enable(metadata_service_uri: UriOpt = None) -> None:
    """Let Replication Workers run again."""
    with connect(metadata_service_uri) as bk:
        UnderReplicationManager(bk.zk, bk.msu.root).set_enabled(True)
    console.print("autorecovery enabled")


@autorecovery_app.command("disable")
def autorecovery_disable(metadata_service_uri: UriOpt = None) -> None:
    """Pause Replication Workers (e.g. during a rolling restart); marks still accumulate."""
    with connect(metadata_service_uri) as bk:
        UnderReplicationManager(bk.zk, bk.msu.root).set_enabled(False)
    console.print("autorecovery disabled: `bk autorecovery enable` resumes it")


def ledger_underreplicated(metadata_service_uri: UriOpt = None, as_json: JsonOpt = False
                           ) -> None:
    """List under-replicated ledgers: missing bookies, the worker holding each, and why the
    last attempt to heal it failed (empty: none failed)."""
    with connect(metadata_service_uri) as bk:
        rows = facts.under_replicated(UnderReplicationManager(bk.zk, bk.msu.root))
    if as_json:
        print_json(rows)
        return
    t = Table("ledger", "missing bookies", "worker", "marked", "reason")
    for r in rows:
        t.add_row(str(r["ledger"]), ", ".join(r["missing"]), r["lock_holder"] or "-",
                  format_time(r["marked_ms"]), r["reason"] or "-")
    console.print(t)
    failing = sum(1 for r in rows if r["reason"])
    console.print(f"{len(rows)} under-replicated ledgers"
                  + (f", {failing} of them failing (see reason)" if failing else ""))


def _check_bookie_id(bookie: str) -> str:
    host, _, port = bookie.rpartition(":")
    if not host or not port.isdigit():
        raise InvalidConfigError(f"bookie {bookie!r}: expected HOST:PORT")
    return bookie


def recover(
    bookie: Annotated[str, typer.Argument(help="HOST:PORT of the dead bookie")],
    metadata_service_uri: UriOpt = None,
    open_ledger_grace: GraceOpt = 0.0,
    recovery_password: PasswordsOpt = None,
) -> None:
    """Re-replicate a dead bookie's data now, in the foreground, with progress."""
    bookie = _check_bookie_id(bookie)
    with connect(metadata_service_uri) as bk:
        urm = UnderReplicationManager(bk.zk, bk.msu.root)
        replicator = LedgerReplicator(
            bk, passwords=(b"", *(p.encode() for p in recovery_password or ())),
            open_ledger_grace_s=open_ledger_grace)
        # Placement first, for every ledger: with no possible replacement nothing is marked
        # or copied, and the command fails at once naming the constraint (as BookKeeper's
        # recoverBookieData does), instead of retrying what no retry can fix.
        for lid in ledgers_naming(bk, bookie):
            try:
                replicator.check_replaceable(bk.ledger_metadata(lid), {bookie})
            except NoSuchLedgerError:
                continue
        todo = mark_ledgers_of(bk, urm, [bookie])
        copied = 0
        started = time.monotonic()
        left_to_workers: set[int] = set()
        with progress_bar(f"re-replicating {bookie}", len(todo)) as advance:
            for _attempt in range(600):
                left = []
                for lid in todo:
                    if not urm.try_lock(lid, f"bk-recover-{bookie}"):
                        left.append(lid)  # a worker has it: look again later
                        continue
                    try:
                        result = replicator.replicate(lid, {bookie})
                    except NotEnoughBookiesError:
                        raise  # bookies left meanwhile: no retry brings them back
                    except RecoveryKeyUnavailableError as exc:
                        if not urm.workers():  # nobody else can copy it: say so now
                            raise
                        if lid not in left_to_workers:  # a worker in a bookie holding a
                            left_to_workers.add(lid)    # copy can: wait for it
                            err_console.print(f"ledger {lid}: left to the replication "
                                              f"workers ({exc})")
                        left.append(lid)
                        continue
                    except BKError as exc:
                        err_console.print(f"ledger {lid}: {exc}; retrying")
                        left.append(lid)
                        continue
                    finally:
                        urm.unlock(lid)
                    copied += result.entries
                    if bookie in result.replaced:
                        urm.mark_replicated(lid, {bookie})
                        advance(1)
                    else:
                        left.append(lid)
                todo = [lid for lid in left if lid in set(ledgers_naming(bk, bookie))]
                if not todo:
                    break
                time.sleep(1.0)
        if todo:
            raise RecoveryError(f"ledgers {todo} still name {bookie}: are enough bookies up? "
                                f"run `bk recover {bookie}` again")
    console.print(f"{bookie}: re-replicated {copied} entries in "
                  f"{time.monotonic() - started:.1f}s; no ledger names it any more")


def decommission(
    bookie: Annotated[str, typer.Argument(help="HOST:PORT of the bookie to empty")],
    metadata_service_uri: UriOpt = None,
    timeout: Annotated[float, typer.Option(help="give up after this many seconds")] = 3600.0,
) -> None:
    """Move every ledger off a live bookie (AutoRecovery's workers copy them), with progress;
    once done the bookie may be stopped. From the start until the bookie process stops,
    placement never picks it for a new ensemble, an ensemble change or re-replication
    (a marker in ZooKeeper); an interrupted or failed decommission removes the marker
    again."""
    bookie = _check_bookie_id(bookie)
    started = time.monotonic()
    with connect(metadata_service_uri) as bk:
        urm = UnderReplicationManager(bk.zk, bk.msu.root)
        if not urm.workers():
            err_console.print("WARNING: no replication worker is running: start bookies with "
                              "--autorecovery or `bk autorecovery`")
        if not urm.is_enabled():
            raise RecoveryError("autorecovery is disabled: `bk autorecovery enable` first")
        mark_decommissioning(bk.zk, bk.msu, bookie)
        try:
            total = _wait_decommissioned(bk, urm, bookie, started, timeout)
        except BaseException:
            clear_decommissioning(bk.zk, bk.msu, bookie)
            err_console.print(f"{bookie} is a full member again (placement may pick it)")
            raise
    console.print(f"{bookie} decommissioned: {total} ledgers moved off it in "
                  f"{time.monotonic() - started:.1f}s; placement no longer picks it: stop it "
                  f"now")


def _wait_decommissioned(bk: BookKeeper, urm: UnderReplicationManager, bookie: str,
                         started: float, timeout: float) -> int:
    """Mark the bookie's ledgers and wait, with a progress bar, until none names it;
    returns how many ledgers were moved."""
    total = len(mark_ledgers_of(bk, urm, [bookie]))
    done = 0
    with progress_bar(f"decommissioning {bookie}", total) as advance:
        while True:
            left = ledgers_naming(bk, bookie)
            if not left:
                return total
            if time.monotonic() - started > timeout:
                raise BKTimeoutError(f"{len(left)} ledgers still on {bookie} after {timeout:.0f}s "
                                     f"(`bk ledger underreplicated` shows them)")
            for lid in left:  # ledgers placed on it just before the marker
                if urm.get(lid) is None:
                    urm.mark(lid, [bookie])
                    total += 1
            now_done = max(0, total - len(left))
            if now_done > done:
                advance(now_done - done)
                done = now_done
            time.sleep(0.5)
