"""The ``bk`` command: one module per command group (see the README's layout table).

:mod:`.common` (console, shared options, connecting, errors as one line), :mod:`.sandbox`,
:mod:`.bookie` (a bookie, its format, the bookie list), :mod:`.cookie` (cookies),
:mod:`.ledger`, :mod:`.log`, :mod:`.checks` (simpletest, bookie-sanity), :mod:`.admin`
(spark-check, zk-acl), :mod:`.autorecovery` (autorecovery, underreplicated, recover,
decommission), :mod:`.doctor`, :mod:`.ui` (the status page).
"""

from __future__ import annotations

import contextvars
import os
from pathlib import Path
from typing import Annotated

import typer

from bk_spark.cli import (
    admin,
    autorecovery,
    bookie,
    checks,
    cookie,
    doctor,
    ledger,
    log,
    sandbox,
    ui,
)
from bk_spark.cli.common import SecurityOptions, err_console, set_security_options
from bk_spark.errors import BKError
from bk_spark.security import ENV_TLS_CA, ENV_TLS_CERT, ENV_TLS_KEY, ENV_ZK_AUTH_FILE

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="bk-spark: a replicated, durable log in the design of Apache BookKeeper.")


# The command groups, each in its own module; they import nothing from here.
app.add_typer(sandbox.sandbox_app, name="sandbox")
app.add_typer(bookie.bookie_app, name="bookie")
app.add_typer(ledger.ledger_app, name="ledger")
app.add_typer(log.log_app, name="log")
app.add_typer(autorecovery.autorecovery_app, name="autorecovery")
app.add_typer(cookie.cookie_app, name="cookie")
app.command("bookies")(bookie.bookies)
app.command("spark-check")(admin.spark_check)
app.command("zk-acl")(admin.zk_acl)
app.command("simpletest")(checks.simpletest)
app.command("bookie-sanity")(checks.bookie_sanity)
app.command("recover")(autorecovery.recover)
app.command("doctor")(doctor.doctor)
app.command("ui")(ui.ui)
ledger.ledger_app.command("underreplicated")(autorecovery.ledger_underreplicated)
bookie.bookie_app.command("decommission")(autorecovery.decommission)
bookie.bookie_app.command("format")(bookie.format_bookie)
bookie.bookie_app.command("repair-status")(bookie.repair_status)


@app.callback()
def _client_security(
    tls_ca: Annotated[Path | None, typer.Option(
        "--tls-ca", envvar=ENV_TLS_CA, help="client: PEM CA of the bookies' certificates "
                                             "(turns TLS to bookies on)")] = None,
    tls_cert: Annotated[Path | None, typer.Option(
        "--tls-cert", envvar=ENV_TLS_CERT,
        help="client: PEM certificate for bookies that require one")] = None,
    tls_key: Annotated[Path | None, typer.Option(
        "--tls-key", envvar=ENV_TLS_KEY, help="client: its PEM private key file")] = None,
    zk_auth_file: Annotated[Path | None, typer.Option(
        "--zk-auth-file", envvar=ENV_ZK_AUTH_FILE,
        help="file holding ZooKeeper credentials user:password (or env BK_ZK_AUTH)")] = None,
) -> None:
    # Given before the command (`bk --tls-ca ca.pem ledger list`), they reach every client
    # the command opens as one object (bk_spark.cli.common.cli_security), not os.environ.
    set_security_options(SecurityOptions(tls_ca, tls_cert, tls_key, zk_auth_file))


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``bk``: typed errors become one line and exit code 1."""
    try:
        # in a copy of the context: the root options (set_security_options) end with the run
        rv = contextvars.copy_context().run(app, args=argv, prog_name="bk",
                                            standalone_mode=False)
        if isinstance(rv, int):  # click returns typer.Exit's code in this mode
            return rv
    except typer.Exit as exc:
        return int(exc.exit_code or 0)
    except typer.Abort:
        err_console.print("aborted")
        return 130
    except KeyboardInterrupt:
        return 130
    except BKError as exc:
        if os.environ.get("BK_DEBUG"):
            raise
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        return 1
    except Exception as exc:
        if hasattr(exc, "show") and hasattr(exc, "exit_code"):  # click usage errors
            exc.show()
            return int(exc.exit_code)
        if os.environ.get("BK_DEBUG"):
            raise
        err_console.print(f"[bold red]error:[/] {type(exc).__name__}: {exc} "
                          f"(BK_DEBUG=1 shows the traceback)", highlight=False, soft_wrap=True)
        return 1
    return 0
