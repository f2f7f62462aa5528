"""``bk doctor``: every check a support engineer would ask for, each finding with its remedy
(:mod:`bk_spark.admin.doctor`); exit code 0 only when all is well.
"""

from __future__ import annotations

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

STYLES = {checks.OK: "green", checks.INFO: "cyan", checks.WARN: "bold yellow",
          checks.FAIL: "bold red"}


def doctor(
    metadata_service_uri: UriOpt = None,
    open_grace: Annotated[float, typer.Option(
        "--open-grace", min=0, help="an OPEN ledger older than this many seconds with no add "
                                    "during the sample has lost its writer")] = 60.0,
    sample: Annotated[float, typer.Option(
        "--sample", min=0, help="seconds to watch open ledgers for adds")] = 2.0,
    cert: Annotated[list[Path] | None, typer.Option(
        "--cert", help="also check this PEM certificate's expiry (repeatable)")] = None,
    cert_days: Annotated[int, typer.Option(
        "--cert-days", min=1, help="warn about certificates expiring within this many days")
    ] = 30,
    as_json: JsonOpt = False,
) -> None:
    """Check ZooKeeper, bookies, cookies, AutoRecovery, writers, TLS certificates and clocks;
    print each finding with its remedy. Exit code 0 only when all is well."""
    setup_logging()
    findings = checks.run(metadata_service_uri, open_grace_s=open_grace, sample_s=sample,
                          cert_files=cert or (), cert_days=cert_days,
                          security=cli_security())
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
