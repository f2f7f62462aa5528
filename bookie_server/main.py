"""The bookie's own entry point: the ``bk bookie`` command, and ``python -m bookie_server``.

:func:`make_bookie_app` builds the command: its options become a
:class:`~bookie_server.config.BookieConfig`, a :class:`~bookie_server.server.BookieServer`
starts, and it serves in the foreground until SIGTERM or Ctrl-C.

AutoRecovery (an Auditor contender and a Replication Worker in the bookie's process) is a
client of the cluster, a layer above this package, so this package never imports it (nor
the ``bk`` CLI): whoever builds the command passes a :data:`StartAutoRecovery` hook. The
``bk`` CLI (:mod:`bk_spark.cli`) mounts :func:`make_bookie_app` as ``bk bookie`` with the hook
that starts it; ``python -m bookie_server`` runs the bare bookie, with no hook, so there
``--autorecovery`` is off by default and refused when asked for.

Errors a user can act on (a missing ``--data-dir``, a taken port, a bad option value) are
raised as :class:`~bk_spark.errors.BKError` and printed as one line by the caller's
``main`` (:func:`main` here).
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from bk_spark.errors import BKError, InvalidConfigError
from bk_spark.metadata_uri import ENV_METADATA_SERVICE_URI
from bk_spark.security import ENV_ZK_AUTH_FILE, ClientSecurity, read_secret_file
from bookie_server.config import (
    ON_LOST_DATA,
    AutoRecoveryConfig,
    BookieConfig,
    MiB,
    config_default,
)

if TYPE_CHECKING:
    from bookie_server.self_repair import RepairPeers
    from bookie_server.server import BookieServer


#: The environment variable of ``--recovery-password`` (``bk bookie``, ``bk autorecovery``):
#: ledger passwords AutoRecovery may use, separated by spaces (read by the option parser).
ENV_RECOVERY_PASSWORD = "BK_RECOVERY_PASSWORD"
#: The environment variable of ``--offload-target`` (``bk bookie``, ``bk offloader``).
ENV_OFFLOAD_TARGET = "BK_OFFLOAD_TARGET"

#: Starts AutoRecovery beside a built (not yet started) bookie server and returns the
#: function that stops it; called only when the bookie registers in ZooKeeper.
StartAutoRecovery = Callable[["BookieServer", AutoRecoveryConfig], Callable[[], None]]

#: Starts the HTTP admin API (``--http-port``, :mod:`bk_spark.admin.http`, a layer above)
#: beside a built bookie server (its port is in ``server.config.http_port``) and returns the
#: function that stops it; the AutoRecovery config is passed when AutoRecovery runs.
StartHttp = Callable[["BookieServer", "AutoRecoveryConfig | None"], Callable[[], None]]

#: Makes the cluster client a bookie's self-repair copies through
#: (:mod:`bookie_server.self_repair`), from the bookie's config and the ledger passwords
#: (``--recovery-password``) it may use.
MakeRepairPeers = Callable[[BookieConfig, tuple[bytes, ...]], "RepairPeers"]


def field_option(name: str, *param_decls: str, help: str, cls: type = BookieConfig,
                 scale: int = 1, **kwargs: Any) -> Any:
    """A typer option that sets the field ``name`` of the config dataclass ``cls``.

    Its command-line default is None: an option not given leaves the field to the dataclass,
    where its default is written once; ``--help`` shows that default (divided by ``scale``
    for an option in larger units, e.g. ``--journal-file-size-mb``; a None default is not
    shown, its help says what none means)."""
    default = config_default(name, cls)
    shown: bool | str = False
    if default not in (None, ()):
        shown = str(default // scale if scale != 1 else default)
    return typer.Option(*param_decls, help=help, show_default=shown, **kwargs)


def given(**options: object) -> dict[str, object]:
    """The options given on the command line (not None): the config fields they set."""
    return {name: value for name, value in options.items() if value is not None}


def _scaled(value: int | None, scale: int) -> int | None:
    return None if value is None else value * scale


# The AutoRecovery options, shared by `bk bookie` and `bk autorecovery` (bk_spark.cli).
LostBookieRecoveryDelayOpt = Annotated[float | None, field_option(
    "lost_bookie_recovery_delay_s", "--lost-bookie-recovery-delay", cls=AutoRecoveryConfig,
    help="seconds a bookie may be gone before its ledgers are re-replicated")]
AuditIntervalOpt = Annotated[float | None, field_option(
    "audit_interval_s", "--audit-interval", cls=AutoRecoveryConfig,
    help="seconds between the Auditor's full checks of what bookies hold")]
OpenLedgerGraceOpt = Annotated[float | None, field_option(
    "open_ledger_grace_s", "--open-ledger-grace", cls=AutoRecoveryConfig,
    help="seconds without adds before re-replication recovers an open ledger's last "
         "fragment")]


def autorecovery_config(lost_bookie_recovery_delay: float | None,
                        audit_interval: float | None, open_ledger_grace: float | None,
                        passwords: list[str] | None) -> AutoRecoveryConfig:
    """The AutoRecovery config of the options given (the rest: the dataclass's defaults)."""
    return AutoRecoveryConfig(**given(
        lost_bookie_recovery_delay_s=lost_bookie_recovery_delay,
        audit_interval_s=audit_interval, open_ledger_grace_s=open_ledger_grace,
        passwords=tuple(p.encode() for p in passwords) if passwords else None))


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server could listen on ``host:port`` right now."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def run_bookie(config: BookieConfig, *, autorecovery: AutoRecoveryConfig | None = None,
               start_autorecovery: StartAutoRecovery | None = None,
               start_http: StartHttp | None = None,
               make_repair_peers: MakeRepairPeers | None = None,
               passwords: tuple[bytes, ...] = ()) -> None:
    """Serve one bookie in the foreground until SIGTERM or SIGINT; with ``autorecovery``
    and a hook, AutoRecovery runs beside it and stops after it; with ``config.http_port``
    and ``start_http``, so does the HTTP admin API. ``make_repair_peers``: the cluster
    client of self-repair (with ``passwords``)."""
    from bookie_server.server import BookieServer

    server = BookieServer(config, (lambda cfg: make_repair_peers(cfg, passwords))
                          if make_repair_peers is not None else None)
    server.check_cookies()  # a bookie that refuses to start starts nothing beside it
    stop_recovery = stop_http = None
    if autorecovery is not None and start_autorecovery is not None:
        stop_recovery = start_autorecovery(server, autorecovery)
    try:
        if config.http_port is not None and start_http is not None:
            stop_http = start_http(server, autorecovery)
        server.serve_forever()
    finally:
        for stop in (stop_http, stop_recovery):
            if stop is not None:
                stop()


def make_bookie_app(start_autorecovery: StartAutoRecovery | None = None,
                    start_http: StartHttp | None = None,
                    make_repair_peers: MakeRepairPeers | None = None,
                    client_security: Callable[[], ClientSecurity] | None = None
                    ) -> typer.Typer:
    """The ``bookie`` command (a Typer app: no subcommand runs a bookie; the CLI adds
    ``decommission``). With ``start_autorecovery`` (``bk bookie``) AutoRecovery runs in
    the bookie's process by default; without (``python -m bookie_server``) it cannot.
    ``client_security``: the credentials the caller was given (``bk --zk-auth-file``,
    ``--tls-ca`` ...) before the bookie's own ``--zk-auth-file`` (default: the
    environment's)."""
    app = typer.Typer(invoke_without_command=True,
                      help="Run one bookie (no subcommand), or decommission one.")
    autorecovery_default = start_autorecovery is not None

    @app.callback()
    def bookie(
        ctx: typer.Context,
        data_dir: Annotated[Path | None, typer.Option(
            "--data-dir", help="journal and entry logs (required to run a bookie)")] = None,
        port: Annotated[int | None, field_option("port", "--port", help="gRPC port")] = None,
        metadata_service_uri: Annotated[str | None, typer.Option(
            "--metadata-service-uri", "-m", envvar=ENV_METADATA_SERVICE_URI,
            help="zk://host:port/root (default: the sandbox's zk://127.0.0.1:2181/ledgers)",
        )] = None,
        host: Annotated[str | None, field_option(
            "host", "--host", help="address to listen on (0.0.0.0: every interface)")] = None,
        advertised_address: Annotated[str | None, field_option(
            "advertised_address", "--advertised-address",
            help="address to register, that clients on other hosts reach (default: --host)",
        )] = None,
        metrics_port: Annotated[int | None, field_option(
            "metrics_port", "--metrics-port",
            help="Prometheus /metrics HTTP port (off unless set; 0: any free port)")] = None,
        http_port: Annotated[int | None, field_option(
            "http_port", "--http-port", help="HTTP admin API and status page (BookKeeper's "
                                             "/api/v1/...; off unless set; 0: any free port)",
        )] = None,
        max_entry_size: Annotated[int | None, field_option(
            "max_entry_size", "--max-entry-size",
            help="largest entry payload accepted, bytes (clients use the same default)")] = None,
        journal_max_group_wait_ms: Annotated[float | None, field_option(
            "journal_max_group_wait_ms", "--journal-max-group-wait-ms",
            help="group-commit wait")] = None,
        max_add_streams: Annotated[int | None, field_option(
            "max_add_streams", "--max-add-streams",
            help="add streams (one per client) served at once, each holding two threads; "
                 "beyond, and at 0, clients send unary AddEntries")] = None,
        journal_file_size_mb: Annotated[int | None, field_option(
            "journal_file_size", "--journal-file-size-mb", scale=MiB,
            help="journal file size (MiB)")] = None,
        entry_log_size_mb: Annotated[int | None, field_option(
            "entry_log_size", "--entry-log-size-mb", scale=MiB,
            help="entry log rotation size (MiB)")] = None,
        gc_interval: Annotated[float | None, field_option(
            "gc_interval_s", "--gc-interval", help="entry-log GC period, seconds")] = None,
        checkpoint_interval: Annotated[float | None, field_option(
            "checkpoint_interval_s", "--checkpoint-interval",
            help="checkpoint period, seconds")] = None,
        disk_usage_threshold: Annotated[float | None, field_option(
            "disk_usage_threshold", "--disk-usage-threshold",
            help="readonly above this fraction of the file system")] = None,
        max_disk_bytes: Annotated[int | None, field_option(
            "max_disk_bytes", "--max-disk-bytes",
            help="readonly when the data dir holds more than this many bytes (no limit "
                 "unless set)")] = None,
        disk_check_interval: Annotated[float | None, field_option(
            "disk_check_interval_s", "--disk-check-interval",
            help="seconds between disk usage checks")] = None,
        tls_cert: Annotated[Path | None, field_option(
            "tls_cert", "--tls-cert", help="PEM certificate (TLS off unless set)")] = None,
        tls_key: Annotated[Path | None, field_option(
            "tls_key", "--tls-key", help="PEM private key")] = None,
        tls_ca: Annotated[Path | None, field_option(
            "tls_ca", "--tls-ca", help="PEM CA that signs client certificates (mutual TLS)",
        )] = None,
        tls_client_auth: Annotated[str | None, field_option(
            "tls_client_auth", "--tls-client-auth",
            help="none | require: refuse clients without a certificate signed by --tls-ca",
        )] = None,
        allow_client: Annotated[list[str] | None, field_option(
            "allow_clients", "--allow-client",
            help="certificate CN/SAN allowed to add and read (repeat)")] = None,
        allow_bookie: Annotated[list[str] | None, field_option(
            "allow_bookies", "--allow-bookie",
            help="identity of a bookie/autorecovery: may also read any ledger without its "
                 "password (re-replication)")] = None,
        allow_admin: Annotated[list[str] | None, field_option(
            "allow_admins", "--allow-admin",
            help="identity that may also delete any ledger")] = None,
        zk_auth_file: Annotated[Path | None, typer.Option(
            "--zk-auth-file", envvar=ENV_ZK_AUTH_FILE,
            help="file holding ZooKeeper credentials user:password")] = None,
        no_register: Annotated[bool, typer.Option(help="do not register in ZooKeeper")] = False,
        rack: Annotated[str | None, field_option(
            "rack", "--rack", help="/region/rack of this bookie, for rack-aware placement")
        ] = None,
        autorecovery: Annotated[bool, typer.Option(
            "--autorecovery/--no-autorecovery",
            help="run an Auditor contender and a Replication Worker in this process")
        ] = autorecovery_default,
        lost_bookie_recovery_delay: LostBookieRecoveryDelayOpt = None,
        audit_interval: AuditIntervalOpt = None,
        open_ledger_grace: OpenLedgerGraceOpt = None,
        recovery_password: Annotated[list[str] | None, typer.Option(
            "--recovery-password", envvar=ENV_RECOVERY_PASSWORD,
            help="a ledger password this bookie's re-replication may use (repeatable; the empty "
                 "one always is). Needed only for 'mac' ledgers: the worker takes other "
                 "ledgers' keys from the copies this bookie holds")] = None,
        on_lost_data: Annotated[str | None, field_option(
            "on_lost_data", "--on-lost-data",
            help=f"a directory lost its stamp while ZooKeeper holds this bookie's cookie (a "
                 f"wiped or replaced disk): {' | '.join(ON_LOST_DATA)}: repair itself from the "
                 f"other replicas before serving, or refuse to start (BookKeeper's "
                 f"default)")] = None,
        offload: Annotated[bool | None, field_option(
            "offload", "--offload/--no-offload", help="run an offloader contender in this "
            "process (tiered storage of closed ledgers to Parquet; ledger passwords: "
            "--recovery-password)")] = None,
        offload_target: Annotated[str | None, field_option(
            "offload_target", "--offload-target", envvar=ENV_OFFLOAD_TARGET,
            help="offload target of logs whose policy names none (file:///dir, s3://b/p)")
        ] = None,
        debug_expose_session: Annotated[bool, typer.Option(
            "--debug-expose-session", hidden=True,
            help="fault injection: write the ZooKeeper session to <data-dir>/zk-session")
        ] = False,
    ) -> None:
        """Run one bookie in the foreground until SIGTERM or Ctrl-C."""
        if ctx.invoked_subcommand is not None:
            return
        if data_dir is None:
            raise InvalidConfigError("--data-dir is required to run a bookie")
        from bk_spark.metadata_uri import parse_metadata_service_uri

        logging.basicConfig(level=logging.INFO,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        # The bookie's credentials, read once, here at the edge (the caller's, else the
        # environment's), then passed down as an object (BookieConfig.security).
        security = client_security() if client_security else ClientSecurity.from_env()
        if zk_auth_file is not None:
            security = replace(security, zk=replace(security.zk, digest=read_secret_file(
                zk_auth_file, "ZooKeeper credentials user:password")))
        uri = None if no_register else parse_metadata_service_uri(metadata_service_uri).uri
        options = given(  # the options given; BookieConfig decides the rest
            host=host, port=port, advertised_address=advertised_address,
            metrics_port=metrics_port, max_entry_size=max_entry_size,
            journal_max_group_wait_ms=journal_max_group_wait_ms,
            max_add_streams=max_add_streams,
            journal_file_size=_scaled(journal_file_size_mb, MiB),
            entry_log_size=_scaled(entry_log_size_mb, MiB),
            gc_interval_s=gc_interval, checkpoint_interval_s=checkpoint_interval,
            disk_usage_threshold=disk_usage_threshold, max_disk_bytes=max_disk_bytes,
            disk_check_interval_s=disk_check_interval,
            tls_cert=tls_cert, tls_key=tls_key, tls_ca=tls_ca, tls_client_auth=tls_client_auth,
            allow_clients=allow_client, allow_bookies=allow_bookie, allow_admins=allow_admin,
            rack=rack, on_lost_data=on_lost_data, offload=offload, offload_target=offload_target)
        cfg = BookieConfig(data_dir=data_dir, metadata_service_uri=uri, security=security,
                           **options)
        if (autorecovery or offload) and start_autorecovery is None:
            raise InvalidConfigError(
                "--autorecovery: python -m bookie_server runs the bare bookie; run the bookie "
                "with `bk bookie` for an in-process AutoRecovery (or `bk autorecovery` beside it)")
        if http_port is not None and start_http is None:
            raise InvalidConfigError("--http-port: python -m bookie_server runs the bare "
                                     "bookie; run it with `bk bookie` for the HTTP admin API")
        if http_port == 0:
            with socket.socket() as s:
                s.bind((cfg.host, 0))
                http_port = int(s.getsockname()[1])
        cfg.http_port = http_port
        if cfg.port and not port_is_free(cfg.port, cfg.host):
            raise InvalidConfigError(
                f"port {cfg.port} on {cfg.host} is taken: is another bookie running? choose "
                f"another --port")
        if debug_expose_session:
            from bk_spark.io.registration import SESSION_FILE_ENV

            os.environ[SESSION_FILE_ENV] = str(data_dir / "zk-session")
        recovery = None
        if autorecovery and uri:
            recovery = autorecovery_config(lost_bookie_recovery_delay, audit_interval,
                                           open_ledger_grace, recovery_password)
        elif offload and uri:  # the offloader alone: AutoRecovery's hook starts only it
            recovery = replace(autorecovery_config(None, None, None, recovery_password),
                               run_auditor=False, run_worker=False)
        run_bookie(cfg, autorecovery=recovery, start_autorecovery=start_autorecovery,
                   start_http=start_http, make_repair_peers=make_repair_peers,
                   passwords=tuple(p.encode() for p in recovery_password or ()))

    return app


def main(argv: list[str] | None = None) -> int:
    """``python -m bookie_server``: the bare bookie (no AutoRecovery); a typed error is one
    ``error:`` line on stderr and exit code 1 (``BK_DEBUG=1`` shows the traceback)."""
    try:
        app = make_bookie_app()
        rv = app(args=argv, prog_name="python -m bookie_server", standalone_mode=False)
        return rv if isinstance(rv, int) else 0
    except typer.Exit as exc:
        return int(exc.exit_code or 0)
    except (typer.Abort, KeyboardInterrupt):
        return 130
    except Exception as exc:
        if hasattr(exc, "show") and hasattr(exc, "exit_code"):  # click usage errors
            exc.show()
            return int(exc.exit_code)
        if os.environ.get("BK_DEBUG"):
            raise
        shown = str(exc) if isinstance(exc, BKError) else f"{type(exc).__name__}: {exc}"
        print(f"error: {shown}", file=sys.stderr)
        return 1
