"""``bk offloader`` (the offloader, standalone) and ``bk offload status``."""

from __future__ import annotations

import logging
from typing import Annotated, Any

import typer
from rich.markup import escape

from bk_spark.cli.common import (
    JsonOpt,
    UriOpt,
    cli_security,
    connect,
    console,
    print_json,
    readable_table,
    serve_in_foreground,
)
from bk_spark.errors import LogNotFoundError
from bk_spark.io.election import elected
from bk_spark.io.offload_files import shown_uri
from bk_spark.io.offload_status import claim_holder, read_failing, waiting
from bk_spark.log import list_logs, open_log_view
from bk_spark.offload.offloader import OffloaderConfig, election_path, log_backlog
from bk_spark.offload.service import OffloaderService
from bk_spark.protocol import offload_rules
from bk_spark.protocol.log_format import now_ms
from bookie_server.main import ENV_OFFLOAD_TARGET, field_option, given

offload_app = typer.Typer(no_args_is_help=True,
                          help="Tiered storage: where each log's offload stands.")

OffloadPasswordsOpt = Annotated[list[str] | None, typer.Option(
    "--password", "-p", envvar="BK_OFFLOAD_PASSWORD",
    help="a ledger password the offloader reads and deletes ledgers with (repeatable; the "
         "empty one always is)")]
OffloadTargetOpt = Annotated[str | None, typer.Option(
    "--offload-target", envvar=ENV_OFFLOAD_TARGET,
    help="target of the logs whose policy names none (file:///dir, s3://bucket/prefix)",
    show_default=False)]


def offloader(
    metadata_service_uri: UriOpt = None, password: OffloadPasswordsOpt = None,
    offload_target: OffloadTargetOpt = None,
    tick: Annotated[float | None, field_option(
        "tick_s", "--tick", cls=OffloaderConfig,
        help="seconds between the elected offloader's passes")] = None,
    metrics_port: Annotated[int | None, typer.Option(
        "--metrics-port", help="Prometheus /metrics HTTP port (0: any free port)")] = None,
) -> None:
    """Run an offloader contender in the foreground (Ctrl-C stops): while elected it copies
    every log's due closed ledgers to Parquet and drops bookie copies past their lag."""
    from bk_spark.metadata_uri import parse_metadata_service_uri

    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    uri = parse_metadata_service_uri(metadata_service_uri).uri
    service = OffloaderService(uri, offloader_config(password, offload_target, tick),
                               security=cli_security())
    serve_in_foreground(service, "offloader", uri, metrics_port)


def offloader_config(passwords: list[str] | None, target: str | None,
                     tick: float | None = None) -> OffloaderConfig:
    """The offloader's config of the options given (the rest: the dataclass's defaults)."""
    return OffloaderConfig(
        passwords=tuple(dict.fromkeys((b"", *(p.encode() for p in passwords or ())))),
        **given(default_target=target, tick_s=tick))


def offload_status_facts(bk: Any) -> dict[str, Any]:
    """The elected offloader, and per log with a policy: ledgers by tier, the backlog
    (closed ledgers due but not complete), the lag (how long ago the oldest of them
    closed: :func:`~bk_spark.protocol.offload_rules.lag_ms`, as the offloader's
    ``offload_log_lag_seconds``) and, while its offload fails, why (the elected
    offloader's record, :mod:`bk_spark.io.offload_status`)."""
    logs = []
    now = now_ms()
    failing = read_failing(bk.zk, bk.msu.root)
    waits: dict[str, list[dict[str, Any]]] = {}
    for lid, rec in sorted(waiting(bk.zk, bk.msu.root).items()):
        waits.setdefault(str(rec.get("log")), []).append(
            {"ledger_id": lid, "since_ms": rec.get("since_ms"),
             "claimed_by": claim_holder(bk.zk, bk.msu.root, lid)})
    for name in list_logs(bk):
        try:
            view = open_log_view(bk, name)
            facts = log_backlog(bk, name)
        except LogNotFoundError:
            continue
        if facts is None:
            continue
        policy, backlog = facts
        states = offload_rules.states_of(view.md.properties)
        tiers = {t.value: 0 for t in offload_rules.Tier}
        for r in view.ledgers():
            tiers[offload_rules.tier(states.get(r.ledger_id)).value] += 1
        fail = failing.get(name)
        logs.append({"log": name, "after": policy.after,
                     "target": shown_uri(policy.target) if policy.target else None,
                     "deletion_lag_ms": policy.deletion_lag_ms, "tiers": tiers,
                     "backlog": len(backlog), "lag_ms": offload_rules.lag_ms(backlog, policy, now),
                     "parquet_bytes": sum(s.bytes for s in states.values()),
                     "waiting_for_keyholder": waits.get(name, []),
                     "failing": None if fail is None else {
                         "reason": fail.get("reason"), "since_ms": fail.get("since_ms"),
                         "passes": fail.get("passes")}})
    return {"offloader": elected(bk.zk, election_path(bk.msu.root)), "logs": logs}


@offload_app.command("status")
def offload_status(metadata_service_uri: UriOpt = None, as_json: JsonOpt = False) -> None:
    """The elected offloader; per log with a policy: tiers, backlog, lag, and why its
    offload fails (if it does)."""
    with connect(metadata_service_uri) as bk:
        out = offload_status_facts(bk)
    if as_json:
        print_json(out)
        return
    render_offload_status(out)


def render_offload_status(out: dict[str, Any]) -> None:
    """``bk offload status``'s tables from :func:`offload_status_facts`: ledgers per tier,
    backlog, lag and state per log, then each log's policy (its target URI folds), then
    why a log's offload fails. Readable in 80 columns (:func:`readable_table`)."""
    console.print(f"offloader: {out['offloader'] or 'none elected'}")
    if not out["logs"]:
        console.print("no log has an offload policy (bk log set LOG --offload-after ...)")
        return
    t = readable_table("log", "bookies", "offloading", "both", "offloaded", "backlog", "lag",
                       "offload", fold=("log",))
    for col in t.columns[1:6]:
        col.justify = "right"
    for r in out["logs"]:
        tiers = r["tiers"]
        t.add_row(r["log"], str(tiers["bookies"]), str(tiers["offloading"]),
                  str(tiers["both"]), str(tiers["offloaded"]), str(r["backlog"]),
                  f"{r['lag_ms'] / 1000:.1f}s", "[red]failing[/red]" if r["failing"] else "ok")
    console.print(t)
    p = readable_table("log", "after", "deletion lag", "target", fold=("log", "target"))
    for r in out["logs"]:
        lag = r.get("deletion_lag_ms", -1)
        p.add_row(r["log"], str(r["after"]), "keep both" if lag < 0 else f"{lag / 1000:g}s",
                  r["target"] or "(the offloader's default)")
    console.print(p)
    for r in out["logs"]:
        if r["failing"]:
            f = r["failing"]
            since = (now_ms() - (f["since_ms"] or now_ms())) / 1000
            console.print(f"[red]log {r['log']}: offload failing for {since:.0f}s "
                          f"({f['passes']} passes):[/red] {escape(f['reason'] or '')}")
        for w in r.get("waiting_for_keyholder", []):
            since = (now_ms() - (w["since_ms"] or now_ms())) / 1000
            who = (f"offloading by {w['claimed_by']}" if w["claimed_by"] else
                   "no contender whose bookie holds a copy has taken it yet (bk bookie "
                   "--offload on those bookies, or --recovery-password)")
            console.print(f"log {r['log']}: ledger {w['ledger_id']} waits for a keyholder "
                          f"for {since:.0f}s (the elected offloader cannot read it: its "
                          f"password is not given and its bookie holds no copy): "
                          f"{escape(who)}")
