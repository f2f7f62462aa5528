"""The ``bk`` command line: run bookies and the sandbox, inspect the cluster.

Errors are one clear line on stderr and a non-zero exit code, never a
traceback (set ``BK_DEBUG=1`` to see one).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from bk_spark.errors import BKError
from bookie_server.main import AutoRecoveryOptions, make_bookie_app

if TYPE_CHECKING:
    from bk_spark.security import ClientSecurity
    from bookie_server.config import BookieConfig
    from bookie_server.server import BookieServer

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="bk-spark: a replicated, durable log in the design of Apache BookKeeper.")
sandbox_app = typer.Typer(help="The embedded sandbox: ZooKeeper plus bookies on 127.0.0.1.",
                          invoke_without_command=True)
app.add_typer(sandbox_app, name="sandbox")

console = Console()
err_console = Console(stderr=True)

UriOpt = Annotated[str | None, typer.Option(
    "--metadata-service-uri", "-m", envvar="BK_METADATA_SERVICE_URI",
    help="zk://host:port/root (default: the sandbox's zk://127.0.0.1:2181/ledgers)")]
JsonOpt = Annotated[bool, typer.Option("--json", help="machine-readable output")]
DEFAULT_SANDBOX_DIR = Path(os.environ.get("BK_SANDBOX_DIR", ".bk-sandbox"))


@app.callback()
def _client_security(
    tls_ca: Annotated[Path | None, typer.Option(
        "--tls-ca", envvar="BK_TLS_CA", help="client: PEM CA of the bookies' certificates "
                                             "(turns TLS to bookies on)")] = None,
    tls_cert: Annotated[Path | None, typer.Option(
        "--tls-cert", envvar="BK_TLS_CERT",
        help="client: PEM certificate for bookies that require one")] = None,
    tls_key: Annotated[Path | None, typer.Option(
        "--tls-key", envvar="BK_TLS_KEY", help="client: its PEM private key file")] = None,
    zk_auth_file: Annotated[Path | None, typer.Option(
        "--zk-auth-file", envvar="BK_ZK_AUTH_FILE",
        help="file holding ZooKeeper credentials user:password (or env BK_ZK_AUTH)")] = None,
) -> None:
    # Given before the command (`bk --tls-ca ca.pem ledger list`), they reach every client
    # the command opens through the environment (bk_spark.security.ClientSecurity.from_env).
    for env, value in (("BK_TLS_CA", tls_ca), ("BK_TLS_CERT", tls_cert),
                       ("BK_TLS_KEY", tls_key), ("BK_ZK_AUTH_FILE", zk_auth_file)):
        if value is not None:
            os.environ[env] = str(value)


def _fail(msg: str, code: int = 1) -> None:
    err_console.print(f"[bold red]error:[/] {msg}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _print_json(obj: object) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


# --------------------------------------------------------------------------- bookie
def _start_autorecovery(server: BookieServer, options: AutoRecoveryOptions) -> Callable[[], None]:
    """``bk bookie``'s hook (:mod:`bookie_server.main`): an Auditor contender and a
    Replication Worker in the bookie's process, on its metrics registry; returns their stop."""
    from bk_spark.autorecovery.service import AutoRecoveryConfig, AutoRecoveryService

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


# The bookie's options, config and start live in bookie_server.main (below the CLI);
# `bk bookie` is that command with the in-process AutoRecovery hook.
bookie_app = make_bookie_app(start_autorecovery=_start_autorecovery)
app.add_typer(bookie_app, name="bookie")


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


# --------------------------------------------------------------------------- sandbox
SandboxDir = Annotated[Path, typer.Option("--data-dir", help="where the sandbox keeps its data")]


SecureOpt = Annotated[bool, typer.Option(
    "--secure", help="mutual TLS to bookies and to ZooKeeper (TLS only), ZooKeeper ACLs: a "
                     "generated CA, certificates and ZooKeeper credentials in "
                     "<data-dir>/secure")]


def _make_sandbox(data_dir: Path, bookies: int, zk_port: int, bookie_port: int,
                  secure: bool = False, lost_bookie_recovery_delay: float | None = None):
    from bk_spark.sandbox import Sandbox

    args = ([] if lost_bookie_recovery_delay is None else
            ["--lost-bookie-recovery-delay", str(lost_bookie_recovery_delay)])
    return Sandbox(data_dir, n_bookies=bookies, zk_port=zk_port, first_bookie_port=bookie_port,
                   secure=secure, bookie_args=args)


SandboxDelayOpt = Annotated[float | None, typer.Option(
    "--lost-bookie-recovery-delay",
    help="seconds a bookie may be gone before AutoRecovery re-replicates its ledgers "
         "(the bookies' default: 60; 0 to watch it at once)")]


def _print_secure_usage(sb) -> None:  # sb: Sandbox
    """How a client uses a secure sandbox (file names only: no secret is printed)."""
    f = sb.secure_files
    if f is None:
        return
    uri = sb.metadata_service_uri
    console.print(f"  secure: bookies and ZooKeeper (TLS only) require a client certificate "
                  f"of {f['ca']}; ZooKeeper credentials are in {f['zk_auth']}",
                  highlight=False, soft_wrap=True)
    console.print(f"  shell:  source {f['env']} && bk bookies", highlight=False, soft_wrap=True)
    console.print(f"  python: BookKeeper('{uri}', security=ClientSecurity('{f['ca']}', "
                  f"'{f['client_cert']}', '{f['client_key']}', "
                  f"ZkSecurity.from_env({{'BK_ZK_AUTH_FILE': '{f['zk_auth']}', "
                  f"'BK_ZK_TLS_CA': '{f['ca']}', 'BK_ZK_TLS_CERT': '{f['client_cert']}', "
                  f"'BK_ZK_TLS_KEY': '{f['client_key']}'}})))",
                  highlight=False, soft_wrap=True)
    console.print(f"  spark:  .option('tlsCaCert', '{f['ca']}').option('tlsCert', "
                  f"'{f['client_cert']}').option('tlsKey', '{f['client_key']}')"
                  f".option('zkAuthSecretFile', '{f['zk_auth']}')"
                  f".option('zkTlsCaCert', '{f['ca']}').option('zkTlsCert', "
                  f"'{f['client_cert']}').option('zkTlsKey', '{f['client_key']}')"
                  f"  (or, with the shell's environment, no option)", highlight=False,
                  soft_wrap=True)
    console.print(f"  admin (may delete any ledger): the same with {f['admin_cert']} and "
                  f"{f['admin_key']}", highlight=False, soft_wrap=True)


@sandbox_app.callback()
def sandbox(
    ctx: typer.Context,
    bookies: Annotated[int, typer.Option("--bookies", help="bookie processes")] = 3,
    data_dir: SandboxDir = DEFAULT_SANDBOX_DIR,
    zk_port: Annotated[int, typer.Option("--zk-port")] = 2181,
    bookie_port: Annotated[int, typer.Option("--bookie-port", help="first bookie port")] = 3181,
    secure: SecureOpt = False,
    lost_bookie_recovery_delay: SandboxDelayOpt = None,
) -> None:
    """Run ZooKeeper and bookies in the foreground; Ctrl-C stops everything."""
    if ctx.invoked_subcommand is not None:
        return
    sb = _make_sandbox(data_dir, bookies, zk_port, bookie_port, secure,
                       lost_bookie_recovery_delay)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    sb.start()
    try:
        console.print(f"sandbox running: metadataServiceUri = [bold]{sb.metadata_service_uri}[/]")
        console.print(f"  {len(sb.bookies)} bookies: "
                      + ", ".join(b.bookie_id for b in sb.bookies))
        _print_secure_usage(sb)
        console.print("  Ctrl-C stops it.")
        while not done.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        sb.stop()
        console.print("sandbox stopped")


@sandbox_app.command("start")
def sandbox_start(
    bookies: Annotated[int, typer.Option("--bookies", help="bookie processes")] = 3,
    data_dir: SandboxDir = DEFAULT_SANDBOX_DIR,
    zk_port: Annotated[int, typer.Option("--zk-port")] = 2181,
    bookie_port: Annotated[int, typer.Option("--bookie-port", help="first bookie port")] = 3181,
    secure: SecureOpt = False,
    lost_bookie_recovery_delay: SandboxDelayOpt = None,
) -> None:
    """Start the sandbox detached (for scripts); its PIDs go to <data-dir>/sandbox.json."""
    from bk_spark.sandbox import pid_alive, read_state, write_state

    o = {"bookies": bookies, "data_dir": data_dir, "zk_port": zk_port,
         "bookie_port": bookie_port}
    existing = read_state(o["data_dir"])
    if existing is not None and pid_alive(existing.zk_pid):
        _fail(f"a sandbox already runs from {o['data_dir']} "
              f"({existing.metadata_service_uri}); `bk sandbox stop` first")
    sb = _make_sandbox(o["data_dir"], o["bookies"], o["zk_port"], o["bookie_port"], secure,
                       lost_bookie_recovery_delay)
    state = sb.start(detached=True)
    write_state(o["data_dir"], state)
    console.print(state.metadata_service_uri)
    _print_secure_usage(sb)


@sandbox_app.command("status")
def sandbox_status(data_dir: SandboxDir = DEFAULT_SANDBOX_DIR, as_json: JsonOpt = False
                   ) -> None:
    """Show whether the detached sandbox runs, with its processes."""
    from bk_spark.sandbox import pid_alive, read_state

    state = read_state(data_dir)
    if state is None:
        _fail(f"no sandbox started from {data_dir}")
    assert state is not None
    procs = [{"process": "zookeeper", "pid": state.zk_pid, "address": f"127.0.0.1:{state.zk_port}",
              "alive": pid_alive(state.zk_pid)}]
    procs += [{"process": "bookie", "pid": b["pid"], "address": b["id"],
               "alive": pid_alive(int(b["pid"]))} for b in state.bookies]
    if as_json:
        _print_json({"metadata_service_uri": state.metadata_service_uri, "processes": procs})
    else:
        console.print(f"metadataServiceUri = {state.metadata_service_uri}")
        t = Table("process", "pid", "address", "alive")
        for p in procs:
            t.add_row(p["process"], str(p["pid"]), p["address"], "yes" if p["alive"] else "NO")
        console.print(t)
    if not all(p["alive"] for p in procs):
        raise typer.Exit(1)


@sandbox_app.command("stop")
def sandbox_stop(data_dir: SandboxDir = DEFAULT_SANDBOX_DIR) -> None:
    """Stop the detached sandbox (by the PIDs it recorded)."""
    from bk_spark.sandbox import stop_detached

    state = stop_detached(data_dir)
    if state is None:
        console.print(f"no sandbox running from {data_dir}")
    else:
        console.print(f"stopped sandbox {state.metadata_service_uri}")


# --------------------------------------------------------------------------- bookies
@app.command()
def bookies(metadata_service_uri: UriOpt = None, as_json: JsonOpt = False) -> None:
    """List registered bookies and whether each is writable or readonly."""
    from bk_spark.io.registration import list_bookies

    found = list_bookies(metadata_service_uri or "")

    def mode(b) -> str:  # type: ignore[no-untyped-def]
        return ("readonly" if b.read_only else "rw") + (
            ", decommissioning" if b.decommissioning else "")

    if as_json:
        _print_json([{"bookie": b.bookie_id, "mode": "readonly" if b.read_only else "rw",
                      "decommissioning": b.decommissioning} for b in found])
        return
    t = Table("bookie", "mode")
    for b in found:
        t.add_row(b.bookie_id, mode(b))
    console.print(t)
    console.print(f"{len(found)} bookies")


# --------------------------------------------------------------------------- spark-check
@app.command("spark-check")
def spark_check(
    python: Annotated[str | None, typer.Option(
        "--python", help="check this Python instead of the one Spark would pick")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Check that Spark's Python workers find the bookkeeper data source; exit 1 if not.

    Prints which Python the workers use (PYSPARK_PYTHON, spark.pyspark.python, or python3
    on the PATH), whether it imports pyspark, bk_spark and pyspark_bookkeeper, and whether
    Spark's lookup (pkgutil.iter_modules) lists pyspark_bookkeeper; every failure says how
    to fix it.
    """
    from bk_spark.spark_check import run_checks, worker_python

    wp = worker_python(python)
    report = run_checks(wp)
    if as_json:
        _print_json(report.to_json())
    else:
        console.print(f"Spark's Python workers run {wp.path or wp.command} (from "
                      f"{wp.source})", highlight=False, soft_wrap=True)
        for note in wp.notes:
            console.print(f"  note: {note}", highlight=False, soft_wrap=True)
        for c in report.checks:
            mark = "[green]ok  [/]" if c.ok else "[bold red]FAIL[/]"
            console.print(f"{mark} {c.name}: {c.detail}", highlight=False, soft_wrap=True)
        for names, fix in report.fixes():
            err_console.print(f"[bold red]error:[/] {', '.join(names)}: {fix}",
                              highlight=False, soft_wrap=True)
        if report.ok:
            console.print("format(\"bookkeeper\") will be found by Spark's workers.")
    if not report.ok:
        raise typer.Exit(1)


# --------------------------------------------------------------------------- zk-acl
@app.command("zk-acl")
def zk_acl(metadata_service_uri: UriOpt = None, as_json: JsonOpt = False) -> None:
    """Protect an existing cluster's metadata: give every znode under the root the ACL
    "all rights to the ZooKeeper user in use (--zk-auth-file / BK_ZK_AUTH_FILE), none to
    anyone else". Bookies and clients then need those credentials too."""
    from bk_spark.io.zk import apply_acls, connect_zk
    from bk_spark.metadata_uri import parse_metadata_service_uri
    from bk_spark.security import ZkSecurity

    security = ZkSecurity.from_env()
    acl = security.acl()
    if acl is None:
        _fail("zk-acl needs ZooKeeper credentials: put user:password in a file and pass "
              "--zk-auth-file FILE (or set BK_ZK_AUTH_FILE)")
    msu = parse_metadata_service_uri(metadata_service_uri)
    zk = connect_zk(msu, security=security)
    try:
        if not zk.exists(msu.root):
            _fail(f"{msu.root} does not exist at {msu.hosts}: nothing to protect")
        n = apply_acls(zk, msu.root, acl)
    finally:
        zk.stop()
        zk.close()
    if as_json:
        _print_json({"root": msu.root, "user": security.user, "znodes": n})
    else:
        console.print(f"{n} znodes under {msu.root} now readable and writable only by "
                      f"ZooKeeper user {security.user!r}")


# The shell (ledger, log, simpletest, bookie-sanity) reuses the options above; under
# `python -m bk_spark.cli` it must import this module, not a second copy of it.
if __name__ == "__main__":
    sys.modules.setdefault("bk_spark.cli", sys.modules[__name__])
from bk_spark.shell import register  # noqa: E402

register(app)
from bk_spark.autorecovery.cli import register as register_autorecovery  # noqa: E402

register_autorecovery(app)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``bk``: typed errors become one line and exit code 1."""
    try:
        rv = app(args=argv, prog_name="bk", standalone_mode=False)
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


if __name__ == "__main__":
    sys.exit(main())
