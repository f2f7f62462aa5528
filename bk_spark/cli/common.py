"""What every command group shares: the consoles, the shared options, connecting to the
cluster, typed errors shown as one line, progress bars, rendering helpers.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from bk_spark.core.client import BookKeeper, BookKeeperConfig
from bk_spark.core.futures import InFlightWindow
from bk_spark.errors import (
    InvalidConfigError,
    LogNotFoundError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
    UnauthorizedError,
)
from bk_spark.io.bookie_client import ClientConfig
from bk_spark.metadata_uri import ENV_METADATA_SERVICE_URI
from bk_spark.protocol.log_format import Position
from bk_spark.security import (
    ENV_TLS_CA,
    ENV_TLS_CERT,
    ENV_TLS_KEY,
    ENV_ZK_AUTH_FILE,
    ClientSecurity,
)

console = Console()


err_console = Console(stderr=True)


UriOpt = Annotated[str | None, typer.Option(
    "--metadata-service-uri", "-m", envvar=ENV_METADATA_SERVICE_URI,
    help="zk://host:port/root (default: the sandbox's zk://127.0.0.1:2181/ledgers)")]


JsonOpt = Annotated[bool, typer.Option("--json", help="machine-readable output")]


def fail(msg: str, code: int = 1) -> None:
    err_console.print(f"[bold red]error:[/] {msg}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def print_json(obj: object) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


PREVIEW_CHARS = 1000  # longest payload text shown in a table cell


PREVIEW_HEX_BYTES = 48


MAX_IN_FLIGHT = 8192  # appends outstanding during bulk loads


POSITIONS_SHOWN = 20  # `log append`: a table of positions up to this many entries


TABLE_ROWS = 1000  # a table shows at most this many entries unless asked for more


PasswordOpt = Annotated[str, typer.Option(
    "--password", "-p", envvar="BK_LEDGER_PASSWORD",
    help="the ledger password (default: none)")]


YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")]


EnsembleOpt = Annotated[int | None, typer.Option(
    "--ensemble", "-E", min=1, help="ensemble size (bookies per ledger)")]


WriteQuorumOpt = Annotated[int | None, typer.Option(
    "--write-quorum", "-Qw", min=1, help="write quorum (copies of each entry)")]


AckQuorumOpt = Annotated[int | None, typer.Option(
    "--ack-quorum", "-Qa", min=1, help="ack quorum (acknowledgements an add waits for)")]


LedgerArg = Annotated[int, typer.Argument(min=0, help="ledger id", show_default=False)]


LogArg = Annotated[str, typer.Argument(help="log name", show_default=False)]


@dataclass(frozen=True)
class SecurityOptions:
    """``bk``'s client security options, given before the command (``bk --tls-ca ca.pem
    ledger list``): they reach every client the command opens as an object
    (:func:`cli_security`), never through ``os.environ``."""

    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    zk_auth_file: Path | None = None

    def security(self) -> ClientSecurity:
        """The command's :class:`ClientSecurity`: these options over the environment's
        ``BK_TLS_*``/``BK_ZK_*`` (read here, at the edge, as given)."""
        given = {name: str(value) for name, value in (
            (ENV_TLS_CA, self.tls_ca), (ENV_TLS_CERT, self.tls_cert),
            (ENV_TLS_KEY, self.tls_key), (ENV_ZK_AUTH_FILE, self.zk_auth_file))
            if value is not None}
        return ClientSecurity.from_env({**os.environ, **given})


#: The root options of the ``bk`` invocation being run: set by its root callback
#: (:mod:`bk_spark.cli`) and scoped to that invocation (``main`` runs it in a copy of the
#: context), so nothing outlives the command.
_SECURITY_OPTIONS: ContextVar[SecurityOptions | None] = ContextVar("bk_security_options",
                                                                   default=None)


def set_security_options(options: SecurityOptions) -> None:
    """The root callback's: the security options of this invocation."""
    _SECURITY_OPTIONS.set(options)


def cli_security() -> ClientSecurity:
    """How every client of this command reaches the cluster (TLS files, ZooKeeper
    credentials): ``bk``'s root options over the environment."""
    return (_SECURITY_OPTIONS.get() or SecurityOptions()).security()


@contextmanager
def connect(uri: str | None, timeout_s: float | None = None) -> Iterator[BookKeeper]:
    """A client for the duration of one command (``timeout_s``: bookie RPC timeouts), with
    the command's credentials (:func:`cli_security`)."""
    setup_logging()
    config = None
    if timeout_s is not None:
        config = BookKeeperConfig(client=ClientConfig(add_timeout_s=timeout_s,
                                                      read_timeout_s=timeout_s))
    bk = BookKeeper(uri, config, security=cli_security())
    try:
        yield bk
    finally:
        bk.close()


def setup_logging() -> None:
    """Warnings of the client as ``WARNING: ...`` lines; kazoo's retry chatter only with
    ``BK_DEBUG=1`` (the connection error itself is reported as one line)."""
    debug = bool(os.environ.get("BK_DEBUG"))
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING,
                        format="%(levelname)s: %(message)s", stream=sys.stderr)
    if not debug:
        logging.getLogger("kazoo").setLevel(logging.CRITICAL)


@contextmanager
def explained(log: str | None = None) -> Iterator[None]:
    """Re-raise the client's errors with what to do in shell terms."""
    try:
        yield
    except UnauthorizedError as exc:
        if "password" not in str(exc):  # a refused certificate or identity: it says what to set
            raise
        raise UnauthorizedError(f"{exc} (--password, or env BK_LEDGER_PASSWORD)") from None
    except LogNotFoundError as exc:
        if log is None or "does not exist" not in str(exc) or "`bk log" in str(exc):
            raise
        raise LogNotFoundError(f"log {log!r} does not exist: `bk log list` shows the logs, "
                               f"`bk log create {log}` creates one") from None
    except NoSuchLedgerError as exc:
        if "does not exist" not in str(exc):
            raise
        raise NoSuchLedgerError(f"{exc}: `bk ledger list` shows the ledgers") from None
    except NotEnoughBookiesError as exc:
        raise NotEnoughBookiesError(
            f"{exc} (here: -E/--ensemble; `bk bookies` lists the bookies)") from None


def confirm(yes: bool, action: str) -> None:
    """Ask before a destructive action; refuse without ``--yes`` when nobody can answer."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise InvalidConfigError(f"refusing to {action} without confirmation: pass --yes")
    typer.confirm(f"{action[0].upper()}{action[1:]}?", abort=True, err=True)


@contextmanager
def progress_bar(description: str, total: int | None) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr when it is a terminal; yields ``advance(n)``."""
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                  MofNCompleteColumn(), TimeElapsedColumn(), console=err_console,
                  transient=True, disable=not err_console.is_terminal,
                  redirect_stdout=False, redirect_stderr=False) as bar:  # stdout: data only
        task = bar.add_task(description, total=total)
        yield lambda n=1: bar.advance(task, n)


def spinner_status(message: str):
    return err_console.status(message) if err_console.is_terminal else nullcontext()


def format_position(p: Position) -> str:
    """How the CLI shows a position: ``LEDGER:ENTRY`` (:meth:`Position.to_string` without
    the index), ``end`` for the ledger not added yet."""
    return p.without_index().to_string() if p.ledger_id >= 0 else "end"


def parse_position(text: str, option: str, keywords: bool = True) -> Position | str:
    """:meth:`Position.parse`'s form (or, with ``keywords``, ``earliest`` / ``latest``)."""
    t = text.strip().lower()
    if keywords and t in ("earliest", "latest"):
        return t
    try:
        return Position.parse(t)
    except InvalidConfigError:
        also = ", 'earliest' or 'latest'" if keywords else ""
        raise InvalidConfigError(
            f"{option} {text!r}: expected LEDGER:ENTRY (e.g. 12:0){also}") from None


def format_time(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def format_size(n: int | None) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def as_text(payload: bytes) -> str | None:
    """The payload as text if it is printable UTF-8 (tabs and newlines allowed), else None."""
    try:
        s = payload.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return s if s.isprintable() or all(c.isprintable() or c in "\t\n\r" for c in s) else None


def payload_json(payload: bytes | None) -> dict[str, Any]:
    if payload is None:  # a null value (log_format.py's FLAG_NULL)
        return {"encoding": None, "payload": None}
    text = as_text(payload)
    if text is not None:
        return {"encoding": "utf-8", "payload": text}
    return {"encoding": "base64", "payload": base64.b64encode(payload).decode()}


def payload_cell(payload: bytes | None) -> Text:
    if payload is None:
        return Text("null", style="italic dim")
    text = as_text(payload)
    if text is not None:
        if len(text) > PREVIEW_CHARS:
            text = f"{text[:PREVIEW_CHARS]}… ({len(payload)} bytes)"
        return Text(text)
    more = "…" if len(payload) > PREVIEW_HEX_BYTES else ""
    return Text(f"0x{payload[:PREVIEW_HEX_BYTES].hex()}{more}", style="dim")


def payload_line(payload: bytes | None) -> str:
    if payload is None:
        return "(null)"
    text = as_text(payload)
    return text if text is not None else "0x" + payload.hex()


class JsonArray:
    """Writes a JSON array one element at a time (reads of any length stay streaming)."""

    def __init__(self, out: IO[str]) -> None:
        self.out, self.count = out, 0
        out.write("[")

    def add(self, obj: object) -> None:
        self.out.write((",\n  " if self.count else "\n  ") + json.dumps(obj, default=str))
        self.count += 1

    def close(self) -> None:
        self.out.write("\n]\n" if self.count else "]\n")


def pipelined(futures: Iterable[Future], advance: Callable[[int], None],
               on_result: Callable[[Any], None] | None = None) -> tuple[int, Any, Any]:
    """Wait for ``futures`` in order (started lazily) keeping at most :data:`MAX_IN_FLIGHT`
    open (:class:`~bk_spark.core.futures.InFlightWindow`); ``on_result`` sees each result in
    order. Returns ``(count, first, last result)``."""
    ends: dict[str, Any] = {"first": None, "last": None}

    def settle(fut: Future, _tag: object) -> None:
        result = fut.result()
        if window.settled == 1:  # counted before this call
            ends["first"] = result
        ends["last"] = result
        advance(1)
        if on_result is not None:
            on_result(result)

    window = InFlightWindow(MAX_IN_FLIGHT, on_done=settle)
    for fut in futures:
        window.push(fut)
    window.drain()
    return window.settled, ends["first"], ends["last"]


def synthetic_payload(i: int, size: int, fill: bytes) -> bytes:
    """Payload ``i`` of a bulk load: its number, then filler, ``size`` bytes in all."""
    head = f"{i:010d} ".encode()
    return (head + fill)[:size] if size > len(head) else head[:size]


def filler_bytes(size: int) -> bytes:
    return (b"abcdefghijklmnopqrstuvwxyz" * (size // 26 + 1))[:size]


def rate(count: int, nbytes: int, seconds: float) -> dict[str, Any]:
    s = max(seconds, 1e-9)
    return {"seconds": round(seconds, 3), "entries_per_s": round(count / s, 1),
            "mib_per_s": round(nbytes / s / 2**20, 2)}


def readable_table(*headers: str, fold: Iterable[str] = ()) -> Table:
    """A table that stays readable in 80 columns (rich's width when the output is not a
    terminal): each header is whole (its column at least as wide, never wrapped), cells
    of the ``fold`` columns (free text: names, URIs, reasons) fold onto more lines
    instead of the others being cut, and no vertical rules."""
    folding = set(fold)
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1), collapse_padding=True)
    for h in headers:
        if h in folding:
            t.add_column(h, overflow="fold", min_width=len(h))
        else:
            t.add_column(h, no_wrap=True, min_width=len(h))
    return t


def kv_table(rows: Iterable[tuple[str, Any]]) -> Table:
    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold")
    t.add_column()
    for k, v in rows:
        t.add_row(k, v if isinstance(v, Text) else Text(str(v)))
    return t


def serve_in_foreground(service: Any, what: str, uri: str, metrics_port: int | None) -> None:
    """Run an elected service (``bk autorecovery``, ``bk offloader``) until SIGTERM or
    Ctrl-C, with its metrics on ``metrics_port`` (0: any free port) when given."""
    import signal
    import threading

    from prometheus_client import start_http_server

    if metrics_port is not None:
        server, _ = start_http_server(metrics_port, addr="127.0.0.1",
                                      registry=service.metrics.registry)
        console.print(f"metrics on http://127.0.0.1:{server.server_port}/metrics")
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    console.print(f"{what} {service.identity} running on {uri}")
    service.serve_forever(done)
