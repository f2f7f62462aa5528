"""``bk doctor``: every check a support engineer would ask for, each finding with its remedy
(:mod:`bk_spark.admin.doctor`); exit code 0 only when all is well.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from bk_spark.admin import doctor as checks
from bk_spark.cli.common import (
    JsonOpt,
    UriOpt,
    cli_security,
    console,
    print_json,
    setup_logging,
)
from bookie_server.main import given

STYLES = {checks.OK: "green", checks.INFO: "cyan", checks.WARN: "bold yellow",
          checks.FAIL: "bold red"}


def _default(name: str) -> str:
    """A default of :func:`bk_spark.admin.doctor.run`, stated once there (for --help)."""
    return str(inspect.signature(checks.run).parameters[name].default)


def doctor(
    metadata_service_uri: UriOpt = None,
    open_grace: Annotated[float | None, typer.Option(
        "--open-grace", min=0, show_default=_default("open_grace_s"),
        help="an OPEN ledger older than this many seconds with no add during the sample has "
             "lost its writer")] = None,
    sample: Annotated[float | None, typer.Option(
        "--sample", min=0, show_default=_default("sample_s"),
        help="seconds to watch open ledgers for adds")] = None,
    cert: Annotated[list[Path] | None, typer.Option(
        "--cert", help="also check this PEM certificate's expiry (repeatable)")] = None,
    cert_days: Annotated[int | None, typer.Option(
        "--cert-days", min=1, show_default=_default("cert_days"),
        help="warn about certificates expiring within this many days")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Check ZooKeeper, bookies, cookies, AutoRecovery, writers, TLS certificates and clocks;
    print each finding with its remedy. Exit code 0 only when all is well."""
    setup_logging()
    findings = checks.run(metadata_service_uri, cert_files=cert or (),
                          security=cli_security(), **given(
                              open_grace_s=open_grace, sample_s=sample, cert_days=cert_days))
    well = checks.all_well(findings)
    if as_json:
        print_json({"ok": well, "findings": [f.to_json() for f in findings]})
    else:
        t = Table("check", "status", "finding", "remedy")
        for f in findings:
            t.add_row(f.check, Text(f.status.upper(), style=STYLES[f.status]),
                      Text(f.message), Text(f.remedy))
        console.print(t)
        bad = [f for f in findings if f.status in (checks.WARN, checks.FAIL)]
        console.print(Text("all is well", style="bold green") if well else
                      Text(f"{len(bad)} problem{'s' if len(bad) > 1 else ''}: see the remedies "
                           f"above", style="bold red"))
    if not well:
        raise typer.Exit(1)
