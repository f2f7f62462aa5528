"""``bk sandbox``: the embedded sandbox (ZooKeeper plus bookies on 127.0.0.1).
"""

from __future__ import annotations

import inspect
import os
import signal
import threading
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from bk_spark.cli.common import JsonOpt, console, err_console, fail, print_json
from bookie_server.config import AutoRecoveryConfig
from bookie_server.main import field_option, given

sandbox_app = typer.Typer(help="The embedded sandbox: ZooKeeper plus bookies on 127.0.0.1.",
                          invoke_without_command=True)


DEFAULT_SANDBOX_DIR = Path(os.environ.get("BK_SANDBOX_DIR", ".bk-sandbox"))


# --------------------------------------------------------------------------- sandbox
SandboxDir = Annotated[Path, typer.Option("--data-dir", help="where the sandbox keeps its data")]


SecureOpt = Annotated[bool, typer.Option(
    "--secure", help="mutual TLS to bookies and to ZooKeeper (TLS only), ZooKeeper ACLs: a "
                     "generated CA, certificates and ZooKeeper credentials in "
                     "<data-dir>/secure")]


def _sandbox_default(name: str) -> object:
    """The default of a :class:`~bk_spark.sandbox.Sandbox` argument, stated once there."""
    from bk_spark.sandbox import Sandbox

    return inspect.signature(Sandbox.__init__).parameters[name].default


# The sandbox's shape: None leaves it to Sandbox (whose default --help shows).
BookiesOpt = Annotated[int | None, typer.Option(
    "--bookies", help="bookie processes", show_default=str(_sandbox_default("n_bookies")))]
ZkPortOpt = Annotated[int | None, typer.Option(
    "--zk-port", help="ZooKeeper's client port", show_default=str(_sandbox_default("zk_port")))]
BookiePortOpt = Annotated[int | None, typer.Option(
    "--bookie-port", help="first bookie port",
    show_default=str(_sandbox_default("first_bookie_port")))]


def _make_sandbox(data_dir: Path, bookies: int | None, zk_port: int | None,
                  bookie_port: int | None, secure: bool = False,
                  lost_bookie_recovery_delay: float | None = None):
    from bk_spark.sandbox import Sandbox

    args = ([] if lost_bookie_recovery_delay is None else
            ["--lost-bookie-recovery-delay", str(lost_bookie_recovery_delay)])
    return Sandbox(data_dir, secure=secure, bookie_args=args, **given(
        n_bookies=bookies, zk_port=zk_port, first_bookie_port=bookie_port))


SandboxDelayOpt = Annotated[float | None, field_option(
    "lost_bookie_recovery_delay_s", "--lost-bookie-recovery-delay", cls=AutoRecoveryConfig,
    help="seconds a bookie may be gone before AutoRecovery re-replicates its ledgers "
         "(0 to watch it at once)")]


def _print_status_page(sb, out=console) -> None:  # sb: Sandbox, out: a rich Console
    """Where the status page and the HTTP admin API of each bookie are."""
    scheme = "https" if sb.secure_files else "http"
    urls = [f"{scheme}://127.0.0.1:{b.http_port}/" for b in sb.bookies if b.http_port]
    if urls:
        out.print(f"  status page: {urls[0]}  (every bookie serves it: "
                      f"{', '.join(urls[1:]) or 'the one above'}; HTTP admin API under "
                      f"/api/v1/); bk doctor checks everything", highlight=False,
                      soft_wrap=True)


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


def _refuse_options_before_subcommand(ctx: typer.Context) -> None:
    """`bk sandbox --data-dir X start` would start from the default directory: say so instead.

    The options given before a subcommand belong to the foreground form; the subcommands take
    their own, after their name.
    """
    given = [name for name in ctx.params
             if getattr(ctx.get_parameter_source(name), "name", "DEFAULT") != "DEFAULT"]
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        fail(f"{flags} must come after the subcommand, e.g. "
             f"`bk sandbox {ctx.invoked_subcommand} {flags.split(', ')[0]} ...`")


@sandbox_app.callback()
def sandbox(
    ctx: typer.Context,
    bookies: BookiesOpt = None,
    data_dir: SandboxDir = DEFAULT_SANDBOX_DIR,
    zk_port: ZkPortOpt = None,
    bookie_port: BookiePortOpt = None,
    secure: SecureOpt = False,
    lost_bookie_recovery_delay: SandboxDelayOpt = None,
) -> None:
    """Run ZooKeeper and bookies in the foreground; Ctrl-C stops everything."""
    if ctx.invoked_subcommand is not None:
        _refuse_options_before_subcommand(ctx)
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
        _print_status_page(sb)
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
    bookies: BookiesOpt = None,
    data_dir: SandboxDir = DEFAULT_SANDBOX_DIR,
    zk_port: ZkPortOpt = None,
    bookie_port: BookiePortOpt = None,
    secure: SecureOpt = False,
    lost_bookie_recovery_delay: SandboxDelayOpt = None,
) -> None:
    """Start the sandbox detached (for scripts); its PIDs go to <data-dir>/sandbox.json."""
    from bk_spark.sandbox import pid_alive, read_state, write_state

    o = {"bookies": bookies, "data_dir": data_dir, "zk_port": zk_port,
         "bookie_port": bookie_port}
    existing = read_state(o["data_dir"])
    if existing is not None and pid_alive(existing.zk_pid):
        fail(f"a sandbox already runs from {o['data_dir']} "
              f"({existing.metadata_service_uri}); `bk sandbox stop` first")
    sb = _make_sandbox(o["data_dir"], o["bookies"], o["zk_port"], o["bookie_port"], secure,
                       lost_bookie_recovery_delay)
    state = sb.start(detached=True)
    write_state(o["data_dir"], state)
    console.print(state.metadata_service_uri)
    _print_status_page(sb, err_console)  # stdout stays the URI alone, for scripts
    _print_secure_usage(sb)


@sandbox_app.command("status")
def sandbox_status(data_dir: SandboxDir = DEFAULT_SANDBOX_DIR, as_json: JsonOpt = False
                   ) -> None:
    """Show whether the detached sandbox runs, with its processes."""
    from bk_spark.sandbox import pid_alive, read_state

    state = read_state(data_dir)
    if state is None:
        fail(f"no sandbox started from {data_dir}")
    assert state is not None
    procs = [{"process": "zookeeper", "pid": state.zk_pid, "address": f"127.0.0.1:{state.zk_port}",
              "alive": pid_alive(state.zk_pid)}]
    procs += [{"process": "bookie", "pid": b["pid"], "address": b["id"],
               "alive": pid_alive(int(b["pid"]))} for b in state.bookies]
    if as_json:
        print_json({"metadata_service_uri": state.metadata_service_uri, "processes": procs})
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
