"""The operator shell, in the manner of ``bookkeeper shell``: ``bk ledger ...``, ``bk log ...``,
``bk simpletest`` and ``bk bookie-sanity`` (``bk bookies`` lives in :mod:`bk_spark.cli`).

:mod:`bk_spark.cli` adds these commands to its app with :func:`register` (import the shell
through ``bk_spark.cli``: it reuses the CLI's options and consoles). Every command takes
``-m/--metadata-service-uri`` (env ``BK_METADATA_SERVICE_URI``); those that print data take
``--json``. Human output is rich tables; progress bars and spinners go to stderr and only when
it is a terminal, so stdout stays clean for scripts. Failures are :class:`BKError` subclasses,
which ``cli.main`` prints as one ``error: ...`` line with exit code 1; :func:`_explained` adds
what to do in shell terms where the API's message names API calls.

Positions are written ``LEDGER:ENTRY`` (``12:0``); payloads print as text when they are
printable UTF-8, else as hex (tables) or base64 (``--json``, with ``"encoding"``).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import signal
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager, nullcontext
from datetime import datetime
from pathlib import Path
from typing import IO, Annotated, Any

import typer
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

from bk_spark.cli import JsonOpt, UriOpt, _print_json, console, err_console
from bk_spark.core.client import BookKeeper, BookKeeperConfig
from bk_spark.core.futures import InFlightWindow
from bk_spark.core.reader import read_lac
from bk_spark.core.sanity import TOOL_KEY, check_bookie
from bk_spark.errors import (
    BKError,
    InvalidConfigError,
    LogNotFoundError,
    NoSuchEntryError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
    ReadPastLacError,
    UnauthorizedError,
)
from bk_spark.io.bookie_client import ClientConfig
from bk_spark.io.registration import list_bookies
from bk_spark.log import (
    LEDGER_LOG_KEY,
    create_log,
    delete_log,
    ledger_end,
    list_logs,
    log_incarnation,
    log_ledgers,
    log_metadata,
    open_log_reader,
    open_log_writer,
    truncate_log,
)
from bk_spark.protocol import log_rules
from bk_spark.protocol.digest import password_digest
from bk_spark.protocol.ledger_metadata import LedgerMetadata, LedgerState
from bk_spark.protocol.log_format import LedgerInfo, LogRecord, Position, entry_timestamp

ledger_app = typer.Typer(no_args_is_help=True,
                         help="Ledgers: list, show, read, recover (fence + close), delete.")
log_app = typer.Typer(no_args_is_help=True,
                      help="Logs made of ledgers: create, list, show, append, read, tail, "
                           "truncate, delete.")

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


def register(app: typer.Typer) -> None:
    """Add the shell's commands to the ``bk`` app."""
    app.add_typer(ledger_app, name="ledger")
    app.add_typer(log_app, name="log")
    app.command("simpletest")(simpletest)
    app.command("bookie-sanity")(bookie_sanity)


# =========================================================================== plumbing
@contextmanager
def _connect(uri: str | None, timeout_s: float | None = None) -> Iterator[BookKeeper]:
    """A client for the duration of one command (``timeout_s``: bookie RPC timeouts)."""
    _setup_logging()
    config = None
    if timeout_s is not None:
        config = BookKeeperConfig(client=ClientConfig(add_timeout_s=timeout_s,
                                                      read_timeout_s=timeout_s))
    bk = BookKeeper(uri, config)
    try:
        yield bk
    finally:
        bk.close()


def _setup_logging() -> None:
    """Warnings of the client as ``WARNING: ...`` lines; kazoo's retry chatter only with
    ``BK_DEBUG=1`` (the connection error itself is reported as one line)."""
    debug = bool(os.environ.get("BK_DEBUG"))
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING,
                        format="%(levelname)s: %(message)s", stream=sys.stderr)
    if not debug:
        logging.getLogger("kazoo").setLevel(logging.CRITICAL)


@contextmanager
def _explained(log: str | None = None) -> Iterator[None]:
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


def _confirm(yes: bool, action: str) -> None:
    """Ask before a destructive action; refuse without ``--yes`` when nobody can answer."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise InvalidConfigError(f"refusing to {action} without confirmation: pass --yes")
    typer.confirm(f"{action[0].upper()}{action[1:]}?", abort=True, err=True)


@contextmanager
def _progress(description: str, total: int | None) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr when it is a terminal; yields ``advance(n)``."""
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                  MofNCompleteColumn(), TimeElapsedColumn(), console=err_console,
                  transient=True, disable=not err_console.is_terminal,
                  redirect_stdout=False, redirect_stderr=False) as bar:  # stdout: data only
        task = bar.add_task(description, total=total)
        yield lambda n=1: bar.advance(task, n)


def _spinner(message: str):
    return err_console.status(message) if err_console.is_terminal else nullcontext()


def _pos(p: Position) -> str:
    return f"{p.ledger_id}:{p.entry_id}" if p.ledger_id >= 0 else "end"


def _parse_position(text: str, option: str, keywords: bool = True) -> Position | str:
    """``LEDGER:ENTRY`` (or, with ``keywords``, ``earliest`` / ``latest``)."""
    t = text.strip().lower()
    if keywords and t in ("earliest", "latest"):
        return t
    m = re.fullmatch(r"(\d+):(\d+)", t)
    if m is None:
        also = ", 'earliest' or 'latest'" if keywords else ""
        raise InvalidConfigError(f"{option} {text!r}: expected LEDGER:ENTRY (e.g. 12:0){also}")
    return Position(int(m.group(1)), int(m.group(2)))


def _time(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def _as_text(payload: bytes) -> str | None:
    """The payload as text if it is printable UTF-8 (tabs and newlines allowed), else None."""
    try:
        s = payload.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return s if s.isprintable() or all(c.isprintable() or c in "\t\n\r" for c in s) else None


def _payload_json(payload: bytes | None) -> dict[str, Any]:
    if payload is None:  # a null value (log_format.py's FLAG_NULL)
        return {"encoding": None, "payload": None}
    text = _as_text(payload)
    if text is not None:
        return {"encoding": "utf-8", "payload": text}
    return {"encoding": "base64", "payload": base64.b64encode(payload).decode()}


def _payload_cell(payload: bytes | None) -> Text:
    if payload is None:
        return Text("null", style="italic dim")
    text = _as_text(payload)
    if text is not None:
        if len(text) > PREVIEW_CHARS:
            text = f"{text[:PREVIEW_CHARS]}… ({len(payload)} bytes)"
        return Text(text)
    more = "…" if len(payload) > PREVIEW_HEX_BYTES else ""
    return Text(f"0x{payload[:PREVIEW_HEX_BYTES].hex()}{more}", style="dim")


def _payload_line(payload: bytes | None) -> str:
    if payload is None:
        return "(null)"
    text = _as_text(payload)
    return text if text is not None else "0x" + payload.hex()


class _JsonArray:
    """Writes a JSON array one element at a time (reads of any length stay streaming)."""

    def __init__(self, out: IO[str]) -> None:
        self.out, self.count = out, 0
        out.write("[")

    def add(self, obj: object) -> None:
        self.out.write((",\n  " if self.count else "\n  ") + json.dumps(obj, default=str))
        self.count += 1

    def close(self) -> None:
        self.out.write("\n]\n" if self.count else "]\n")


def _pipelined(futures: Iterable[Future], advance: Callable[[int], None],
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


def _synthetic(i: int, size: int, fill: bytes) -> bytes:
    """Payload ``i`` of a bulk load: its number, then filler, ``size`` bytes in all."""
    head = f"{i:010d} ".encode()
    return (head + fill)[:size] if size > len(head) else head[:size]


def _filler(size: int) -> bytes:
    return (b"abcdefghijklmnopqrstuvwxyz" * (size // 26 + 1))[:size]


def _rate(count: int, nbytes: int, seconds: float) -> dict[str, Any]:
    s = max(seconds, 1e-9)
    return {"seconds": round(seconds, 3), "entries_per_s": round(count / s, 1),
            "mib_per_s": round(nbytes / s / 2**20, 2)}


def _kv_table(rows: Iterable[tuple[str, Any]]) -> Table:
    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold")
    t.add_column()
    for k, v in rows:
        t.add_row(k, v if isinstance(v, Text) else Text(str(v)))
    return t


# =========================================================================== ledger
def _bookie_lac(bk: BookKeeper, md: LedgerMetadata) -> int | None:
    """The ledger's last-add-confirmed as a reader would see it (None: too few bookies of
    the last fragment answered to tell). Needs no password: a LAC read is not an entry
    read."""
    try:
        lac, answers = read_lac(bk, md)
    except BKError:
        return None
    return lac if answers.covered else None


def _ledger_summary(md: LedgerMetadata) -> dict[str, Any]:
    return {
        "ledger_id": md.ledger_id, "state": md.state.value,
        "ensemble_size": md.ensemble_size, "write_quorum_size": md.write_quorum_size,
        "ack_quorum_size": md.ack_quorum_size,
        "last_entry_id": md.last_entry_id if md.is_closed else None,
        "length": md.length if md.is_closed else None,
        "fragments": len(md.ensembles), "ensemble": list(md.last_ensemble),
        "log": dict(md.custom_metadata).get(LEDGER_LOG_KEY), "ctime_ms": md.ctime_ms,
    }


@ledger_app.command("list")
def ledger_list(metadata_service_uri: UriOpt = None, as_json: JsonOpt = False) -> None:
    """List every ledger: state, E/Qw/Qa, last entry and length (once closed), owning log."""
    with _connect(metadata_service_uri) as bk, _explained():
        found = []
        for lid in bk.list_ledgers():
            try:
                found.append(bk.ledger_metadata(lid))
            except NoSuchLedgerError:  # deleted meanwhile
                continue
    if as_json:
        _print_json([_ledger_summary(md) for md in found])
        return
    t = Table("ledger", "state", "E/Qw/Qa", "last entry", "length", "log", "ensemble")
    for md in found:
        s = _ledger_summary(md)
        t.add_row(str(md.ledger_id), md.state.value,
                  f"{md.ensemble_size}/{md.write_quorum_size}/{md.ack_quorum_size}",
                  "-" if s["last_entry_id"] is None else str(s["last_entry_id"]),
                  _size(s["length"]), Text(s["log"] or "-"), ", ".join(md.last_ensemble))
    console.print(t)
    console.print(f"{len(found)} ledgers")


@ledger_app.command("show")
def ledger_show(ledger_id: LedgerArg, metadata_service_uri: UriOpt = None,
                as_json: JsonOpt = False) -> None:
    """Show a ledger's metadata: quorums, state, fragments (ensembles), custom metadata."""
    with _connect(metadata_service_uri) as bk, _explained():
        md = bk.ledger_metadata(ledger_id)
        lac = None if md.is_closed else _bookie_lac(bk, md)
    out = _ledger_summary(md) | {
        "digest_type": md.digest_type,
        "password_set": md.password_digest != password_digest(b""),
        "bookie_lac": lac,
        "fragments": [{"first_entry": first, "ensemble": list(ens)}
                      for first, ens in md.ensembles],
        "custom_metadata": dict(md.custom_metadata),
    }
    if as_json:
        _print_json(out)
        return
    rows: list[tuple[str, Any]] = [
        ("ledger", md.ledger_id), ("state", md.state.value),
        ("ensemble size (E)", md.ensemble_size), ("write quorum (Qw)", md.write_quorum_size),
        ("ack quorum (Qa)", md.ack_quorum_size)]
    if md.is_closed:
        rows += [("last entry", md.last_entry_id), ("length", _size(md.length))]
    else:
        rows.append(("last-add-confirmed", "unknown (no bookie answered)" if lac is None
                     else f"{lac} (as the bookies report it)"))
    rows += [("digest", md.digest_type), ("password", "set" if out["password_set"] else "none"),
             ("created", _time(md.ctime_ms))]
    rows += [(f"custom: {k}", v) for k, v in md.custom_metadata]
    console.print(_kv_table(rows))
    t = Table("fragment from entry", "ensemble")
    for first, ens in md.ensembles:
        t.add_row(str(first), ", ".join(ens))
    console.print(t)


@ledger_app.command("read")
def ledger_read(
    ledger_id: LedgerArg,
    first: Annotated[int, typer.Option("--from", min=0, help="first entry id")] = 0,
    last: Annotated[int | None, typer.Option(
        "--to", min=0, help="last entry id (default: the last readable entry)")] = None,
    password: PasswordOpt = "",
    recovery: Annotated[bool, typer.Option(
        "--recovery/--no-recovery",
        help="--recovery fences the writer and closes the ledger first; the default reads "
             "without disturbing a writer, up to the last-add-confirmed")] = False,
    metadata_service_uri: UriOpt = None, as_json: JsonOpt = False,
) -> None:
    """Print a ledger's entries (text if printable, else hex; base64 with --json)."""
    with _connect(metadata_service_uri) as bk, _explained():
        rh = bk.open_ledger(ledger_id, password, recovery=recovery)
        readable = rh.last_add_confirmed
        if last is not None and first > last:
            raise InvalidConfigError(f"--from {first} is after --to {last}")
        capped = False
        if last is None:
            last = readable
            if not as_json and last - first + 1 > TABLE_ROWS:
                last, capped = first + TABLE_ROWS - 1, True
        if last > readable:
            if rh.is_closed:
                raise NoSuchEntryError(f"ledger {ledger_id} is closed at entry {readable}: "
                                       f"--to {last} is past its last entry")
            raise ReadPastLacError(
                f"ledger {ledger_id} is open and its last-add-confirmed is {readable}: "
                f"entries after it may not be replicated yet; read up to {readable} or "
                f"recover it first (`bk ledger recover {ledger_id}`)")
        entries = rh.iter_entries(first, last) if first <= last else iter(())
        state = rh.metadata.state.value
        with _progress(f"reading ledger {ledger_id}", max(0, last - first + 1)) as advance:
            if as_json:
                arr = _JsonArray(sys.stdout)
                for e in entries:
                    arr.add({"entry_id": e.entry_id, "length": e.length}
                            | _payload_json(e.payload))
                    advance(1)
                arr.close()
                return
            t = Table("entry", "bytes", "payload")
            n = 0
            for e in entries:
                t.add_row(str(e.entry_id), str(e.length), _payload_cell(e.payload))
                n += 1
                advance(1)
    console.print(t)
    lac_word = "last entry" if state == LedgerState.CLOSED else "last-add-confirmed"
    console.print(f"{n} entries of ledger {ledger_id} ({state}, {lac_word} {readable})")
    if capped:
        console.print(f"showing entries {first}..{last}: --from/--to or --json for the others")


@ledger_app.command("recover")
def ledger_recover(ledger_id: LedgerArg, password: PasswordOpt = "",
                   metadata_service_uri: UriOpt = None, as_json: JsonOpt = False) -> None:
    """Recover a ledger: fence it and close it (progress spinner).

    Fencing stops its writer; the ledger is closed at the last entry a quorum holds. A
    CLOSED ledger is left as it is.
    """
    with _connect(metadata_service_uri) as bk, _explained():
        before = bk.ledger_metadata(ledger_id).state
        with _spinner(f"recovering ledger {ledger_id}: fencing its bookies, reading forward, "
                      f"closing"):
            md = bk.recover_ledger(ledger_id, password)
    out = {"ledger_id": ledger_id, "state_before": before.value, "state": md.state.value,
           "last_entry_id": md.last_entry_id, "length": md.length}
    if as_json:
        _print_json(out)
    elif before == LedgerState.CLOSED:
        console.print(f"ledger {ledger_id} was already CLOSED at entry {md.last_entry_id}: "
                      f"nothing to recover")
    else:
        console.print(f"ledger {ledger_id} recovered: {before.value} -> {md.state.value} at "
                      f"entry {md.last_entry_id} ({_size(md.length)})")


@ledger_app.command("delete")
def ledger_delete(
    ledger_id: LedgerArg, yes: YesOpt = False,
    force: Annotated[bool, typer.Option(
        "--force", help="delete even a ledger a log still lists (breaks that log)")] = False,
    password: PasswordOpt = "", metadata_service_uri: UriOpt = None,
) -> None:
    """Delete a ledger: its data on every bookie, then its metadata."""
    with _connect(metadata_service_uri) as bk, _explained():
        md = bk.ledger_metadata(ledger_id)
        owner = dict(md.custom_metadata).get(LEDGER_LOG_KEY)
        if owner and not force:
            try:
                listed = any(i.ledger_id == ledger_id for i in log_ledgers(bk, owner))
            except LogNotFoundError:
                listed = False
            if listed:
                raise InvalidConfigError(
                    f"ledger {ledger_id} belongs to log {owner!r}: `bk log truncate {owner}` "
                    f"or `bk log delete {owner}` removes it safely (--force deletes it anyway "
                    f"and breaks the log)")
        _confirm(yes, f"delete ledger {ledger_id} ({md.state.value}) from "
                      f"{', '.join(sorted({b for _f, e in md.ensembles for b in e}))}")
        bk.delete_ledger(ledger_id, password)
    console.print(f"deleted ledger {ledger_id}")


# =========================================================================== log
def _record_json(r: LogRecord) -> dict[str, Any]:
    return {"position": _pos(r.position), "ledger_id": r.position.ledger_id,
            "entry_id": r.position.entry_id, "timestamp_ms": r.timestamp_ms,
            "length": None if r.payload is None else len(r.payload)} | \
        _payload_json(r.payload)


def _ledger_row(bk: BookKeeper, info: LedgerInfo, password: str) -> dict[str, Any]:
    """One ledger of a log: the log's row completed from the ledger's metadata and, while
    it is open, from its last-add-confirmed (non-fencing: the writer is not disturbed)."""
    row: dict[str, Any] = {"index": info.index, "ledger_id": info.ledger_id,
                           "state": "MISSING", "entries": None, "length": None,
                           "first_ts_ms": info.first_ts_ms, "last_ts_ms": info.last_ts_ms,
                           "ensemble": []}
    try:
        md = bk.ledger_metadata(info.ledger_id)
    except NoSuchLedgerError:
        return row
    row |= {"state": md.state.value, "ensemble": list(md.last_ensemble),
            "length": md.length if md.is_closed else None}
    try:
        last, _closed = ledger_end(bk, info, password)
        row["entries"] = last + 1
        if last >= 0 and not info.is_described:  # a described row has its last timestamp
            rh = bk.open_ledger(info.ledger_id, password, recovery=False)
            row["last_ts_ms"] = entry_timestamp(rh.read_entries(last, last)[0].payload)
    except UnauthorizedError:
        pass  # shown as unknown; --password tells
    return row


@log_app.command("create")
def log_create(
    name: LogArg, ensemble: EnsembleOpt = None, write_quorum: WriteQuorumOpt = None,
    ack_quorum: AckQuorumOpt = None,
    prop: Annotated[list[str] | None, typer.Option(
        "--property", "-P", help="KEY=VALUE stored in the log's properties (repeatable)")
    ] = None,
    metadata_service_uri: UriOpt = None, as_json: JsonOpt = False,
) -> None:
    """Create an empty log (its quorums are kept for `bk log append`).

    -E/-Qw/-Qa (default 3/2/2) are stored in the log's properties as bk-spark.ensemble_size,
    bk-spark.write_quorum_size and bk-spark.ack_quorum_size.
    """
    quorums = log_rules.log_quorums({}, (ensemble, write_quorum, ack_quorum))
    props: dict[str, Any] = log_rules.quorum_properties(quorums)
    for p in prop or []:
        key, eq, value = p.partition("=")
        if not eq or not key:
            raise InvalidConfigError(f"--property {p!r}: expected KEY=VALUE")
        props[key] = value
    with _connect(metadata_service_uri) as bk, _explained(name):
        md = create_log(bk, name, properties=props)
    if as_json:
        _print_json({"log": name, "properties": dict(md.properties), "ctime_ms": md.ctime_ms})
    else:
        console.print(f"created log {name!r} (E={quorums[0]} Qw={quorums[1]} Qa={quorums[2]})")


@log_app.command("list")
def log_list(metadata_service_uri: UriOpt = None, as_json: JsonOpt = False) -> None:
    """List the logs with their ledger counts and latest known append time."""
    rows = []
    with _connect(metadata_service_uri) as bk, _explained():
        for name in list_logs(bk):
            try:
                md = log_metadata(bk, name)
            except LogNotFoundError:  # deleted meanwhile
                continue
            rows.append({"log": name, "ledgers": md.ledger_count,
                         "first_index": md.first_index, "ctime_ms": md.ctime_ms,
                         "last_known_ts_ms": md.max_known_ts_ms or None,
                         "deleting": md.deleting, "properties": dict(md.properties)})
    if as_json:
        _print_json(rows)
        return
    t = Table("log", "ledgers", "created", "last known append", "properties")
    for r in rows:
        t.add_row(Text(r["log"] + (" (deleting)" if r["deleting"] else "")),
                  str(r["ledgers"]), _time(r["ctime_ms"]), _time(r["last_known_ts_ms"]),
                  Text(json.dumps(r["properties"])))
    console.print(t)
    console.print(f"{len(rows)} logs")


@log_app.command("show")
def log_show(
    name: LogArg, password: PasswordOpt = "",
    last: Annotated[int | None, typer.Option(
        "--last", min=1, help="show only the last N ledgers")] = None,
    checkpoint: Annotated[Path | None, typer.Option(
        "--checkpoint", help="checkpointLocation of a Spark streaming query reading the "
        "log: also show its position and lag (entries, bytes behind the readable end)",
        show_default=False)] = None,
    metadata_service_uri: UriOpt = None, as_json: JsonOpt = False,
) -> None:
    """Show a log: its ledgers (id, state, entries, time range) and properties; with
    --checkpoint, how far a streaming query is behind."""
    with _connect(metadata_service_uri) as bk, _explained(name):
        md = log_metadata(bk, name)
        ledgers = log_ledgers(bk, name)
        shown = ledgers[-last:] if last else ledgers
        rows = [_ledger_row(bk, info, password) for info in shown]
        query = _query_lag(bk, name, checkpoint, password) if checkpoint else None
    out = {"log": name, "log_id": log_incarnation(md), "ctime_ms": md.ctime_ms,
           "ledger_count": md.ledger_count,
           "first_index": md.first_index, "segments": len(md.live_segments),
           "deleting": md.deleting, "properties": dict(md.properties), "ledgers": rows}
    if query is not None:
        out["query"] = query
    if as_json:
        _print_json(out)
        return
    entries = [r["entries"] for r in rows]
    total = "?" if None in entries else str(sum(entries))
    pairs: list[tuple[str, Any]] = [
        ("log", name), ("log id", log_incarnation(md)), ("created", _time(md.ctime_ms)),
        ("ledgers", f"{md.ledger_count} (first index {md.first_index}, "
                    f"{len(md.live_segments)} spilled segments)"),
        ("entries", total + ("" if len(shown) == len(ledgers) else " in the ledgers shown")),
        ("properties", Text(json.dumps(dict(md.properties))))]
    if query is not None:
        pairs.append(("query", Text(
            f"batch {query['batch']}: next {query['position']}; " + (
                f"lag {query['lag_entries']} entries, ~{_size(query['lag_bytes'])}"
                if query["lag_entries"] is not None else query["note"]))))
    console.print(_kv_table(pairs))
    t = Table("#", "ledger", "state", "entries", "length", "from", "to")
    for r in rows:
        t.add_row(str(r["index"]), str(r["ledger_id"]), r["state"],
                  "?" if r["entries"] is None else str(r["entries"]), _size(r["length"]),
                  _time(r["first_ts_ms"]), _time(r["last_ts_ms"]))
    console.print(t)
    if None in entries:
        console.print("entries '?': an open ledger with another password (--password)")


def _query_lag(bk: BookKeeper, name: str, checkpoint: Path, password: str
               ) -> dict[str, Any]:
    """Where a Spark streaming query (its checkpoint) is in log ``name``, and its lag: the
    entries and bytes (estimated from ledger lengths) between its last committed batch's
    end and the log's readable end (the data source's own rule)."""
    from bk_spark.datasource.offsets import LogOffset, checkpoint_offsets
    from bk_spark.datasource.planning import EntrySizes, LogView, lag_behind, log_end

    batch, offsets = checkpoint_offsets(checkpoint)
    off = offsets.get(name)
    if off is None:
        raise InvalidConfigError(f"--checkpoint {str(checkpoint)!r}: the query has no "
                                 f"position in log {name!r} (it reads {', '.join(offsets)})")
    view = LogView(bk, name)
    now_at = view.at(off.index)
    if off.ledger < 0 and now_at is not None and off.log_id in ("", view.incarnation):
        off = LogOffset(off.index, off.entry, now_at.ledger_id, off.log_id)  # added since
    out: dict[str, Any] = {"batch": batch, "position": off.describe(), **off.to_json(),
                           "lag_entries": None, "lag_bytes": None, "note": None}
    if off.log_id and off.log_id != view.incarnation:
        out["note"] = (f"the position is in a deleted log of this name (log id {off.log_id});"
                       f" the query reports data loss on its next batch")
        return out
    pw = password.encode()
    out["lag_entries"], out["lag_bytes"] = lag_behind(view, off, log_end(view, pw), pw,
                                                      EntrySizes())
    return out


def _entry_source(messages: list[str] | None, file: Path | None, count: int | None,
                  size: int) -> tuple[Iterable[bytes], bool]:
    """What to append, and whether it is a synthetic bulk load."""
    given = [bool(messages), file is not None, count is not None]
    if sum(given) != 1:
        raise InvalidConfigError("give the entries as MESSAGE... ('-' for stdin), --file FILE "
                                 "or --count N (exactly one of them)")
    if count is not None:
        fill = _filler(size)
        return (_synthetic(i, size, fill) for i in range(count)), True
    if messages and messages != ["-"]:
        return [m.encode() for m in messages], False
    stream = sys.stdin.buffer if file is None or str(file) == "-" else None
    if stream is None:
        assert file is not None
        try:
            stream = file.open("rb")
        except OSError as exc:
            raise InvalidConfigError(f"--file {str(file)!r}: {exc.strerror}") from None

    def lines() -> Iterator[bytes]:
        with stream:
            for line in stream:
                yield line[:-1].rstrip(b"\r") if line.endswith(b"\n") else line

    return lines(), False


@log_app.command("append")
def log_append(
    name: LogArg,
    messages: Annotated[list[str] | None, typer.Argument(
        help="entries to append, one per argument ('-': one per line of stdin)",
        show_default=False)] = None,
    file: Annotated[Path | None, typer.Option(
        "--file", help="append each line of FILE as one entry ('-': stdin)")] = None,
    count: Annotated[int | None, typer.Option(
        "--count", "-n", min=1, help="bulk load: append N synthetic entries")] = None,
    size: Annotated[int, typer.Option("--size", min=1, help="bytes per synthetic entry")] = 100,
    ensemble: EnsembleOpt = None, write_quorum: WriteQuorumOpt = None,
    ack_quorum: AckQuorumOpt = None, password: PasswordOpt = "",
    roll_max_entries: Annotated[int | None, typer.Option(
        "--roll-max-entries", min=1,
        help="roll to a new ledger every N entries (soft: adds in flight finish in the "
             "current ledger)")] = None,
    create: Annotated[bool, typer.Option("--create", help="create the log if missing")] = False,
    metadata_service_uri: UriOpt = None, as_json: JsonOpt = False,
) -> None:
    """Append messages, the lines of a file or stdin, or N synthetic entries (--count).

    The command becomes the log's writer: it takes the log over (fencing any other writer),
    appends, and closes its ledger. Quorums default to the log's (`bk log create`).
    """
    source, bulk = _entry_source(messages, file, count, size)
    with _connect(metadata_service_uri) as bk, _explained(name):
        try:
            props = dict(log_metadata(bk, name).properties)
            missing = False
        except LogNotFoundError:
            if not create:
                raise LogNotFoundError(f"log {name!r} does not exist: `bk log create {name}` "
                                       f"creates it (or pass --create)") from None
            props, missing = {}, True
        e, qw, qa = log_rules.log_quorums(props, (ensemble, write_quorum, ack_quorum))
        if missing:
            create_log(bk, name, quorums=(e, qw, qa))
        with open_log_writer(bk, name, create_if_missing=False, ensemble_size=e,
                                write_quorum_size=qw, ack_quorum_size=qa, password=password,
                                roll_max_entries=roll_max_entries) as writer:
            nbytes = 0
            sizes: deque[int] = deque()
            positions: list[tuple[Position, int]] = []

            def started() -> Iterator[Future]:
                nonlocal nbytes
                for payload in source:
                    nbytes += len(payload)
                    if not bulk:
                        sizes.append(len(payload))
                    yield writer.append_async(payload)

            def record(p: Position) -> None:
                if not bulk:
                    positions.append((p, sizes.popleft()))

            t0 = time.monotonic()
            with _progress(f"appending to {name}", count) as advance:
                n, first, last = _pipelined(started(), advance, record)
            seconds = time.monotonic() - t0
    out: dict[str, Any] = {"log": name, "entries": n, "bytes": nbytes,
                           **_rate(n, nbytes, seconds),
                           "first": _pos(first) if first else None,
                           "last": _pos(last) if last else None}
    if not bulk:
        out["positions"] = [_pos(p) for p, _n in positions]
    if as_json:
        _print_json(out)
    elif not bulk and n <= POSITIONS_SHOWN:
        t = Table("position", "bytes")
        for p, size_ in positions:
            t.add_row(_pos(p), str(size_))
        console.print(t)
    else:
        t = Table("entries", "bytes", "seconds", "entries/s", "MiB/s", "first", "last")
        t.add_row(str(n), _size(nbytes), f"{seconds:.2f}", f"{out['entries_per_s']:,.0f}",
                  f"{out['mib_per_s']:.2f}", out["first"] or "-", out["last"] or "-")
        console.print(t)


def _log_entries(bk: BookKeeper, name: str, password: str) -> int | None:
    """Entries of the whole log (the progress bar's total), None if unknown."""
    rows = [_ledger_row(bk, info, password) for info in log_ledgers(bk, name)]
    counts = [r["entries"] for r in rows]
    return None if None in counts else sum(counts)


@log_app.command("read")
def log_read(
    name: LogArg,
    start: Annotated[str | None, typer.Option(
        "--from", help="earliest (default), latest or LEDGER:ENTRY")] = None,
    timestamp_ms: Annotated[int | None, typer.Option(
        "--timestamp-ms", help="start at the first entry appended at or after this time "
                               "(ms since the epoch)")] = None,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="read at most N")] = None,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="write the payloads to FILE, one per line (--json: one JSON "
                               "record per line)")] = None,
    password: PasswordOpt = "", metadata_service_uri: UriOpt = None, as_json: JsonOpt = False,
) -> None:
    """Read a log's records (without disturbing its writer) up to what is readable now."""
    where = _parse_position(start, "--from") if start is not None else "earliest"
    if start is not None and timestamp_ms is not None:
        raise InvalidConfigError("give --from or --timestamp-ms, not both")
    with _connect(metadata_service_uri) as bk, _explained(name):
        reader = open_log_reader(bk, name, None if timestamp_ms is not None else where,
                                    timestamp_ms=timestamp_ms, password=password)
        total = limit
        whole = where == "earliest" and timestamp_ms is None and limit is None
        if whole and err_console.is_terminal and (output is not None or as_json):
            total = _log_entries(bk, name, password)
        records = reader.read_available()
        t0 = time.monotonic()
        n = nbytes = 0
        unshown: Position | None = None  # the first record a capped table leaves out
        with _progress(f"reading log {name}", total) as advance:
            if output is not None:
                with output.open("wb") as f:
                    for r in records:
                        if as_json:
                            f.write(json.dumps(_record_json(r)).encode() + b"\n")
                        else:
                            f.write((r.payload or b"") + b"\n")  # null: empty line
                        n, nbytes = n + 1, nbytes + len(r.payload or b"")
                        advance(1)
                        if n == limit:
                            break
            elif as_json:
                arr = _JsonArray(sys.stdout)
                for r in records:
                    arr.add(_record_json(r))
                    n += 1
                    advance(1)
                    if n == limit:
                        break
                arr.close()
                return
            else:
                t = Table("position", "time", "bytes", "payload")
                for r in records:
                    if limit is None and n == TABLE_ROWS:
                        unshown = r.position
                        break
                    t.add_row(_pos(r.position), _time(r.timestamp_ms),
                              "-" if r.payload is None else str(len(r.payload)),
                              _payload_cell(r.payload))
                    n += 1
                    advance(1)
                    if n == limit:
                        break
        seconds = time.monotonic() - t0
        nxt = _pos(unshown or reader.position)
    if output is not None:
        console.print(f"wrote {n} records ({_size(nbytes)}) of log {name!r} to {output} in "
                      f"{seconds:.2f}s; next position {nxt}")
        return
    console.print(t)
    console.print(f"{n} records; next position {nxt}")
    if unshown is not None:
        console.print(f"more records follow: --from {nxt}, --limit N, --json or --output FILE")


@log_app.command("tail")
def log_tail(
    name: LogArg,
    start: Annotated[str, typer.Option(
        "--from", help="latest (default: only new records), earliest or LEDGER:ENTRY")
    ] = "latest",
    timeout: Annotated[float | None, typer.Option(
        "--timeout", min=0, help="stop after this many seconds without a new record "
                                 "(default: until Ctrl-C)")] = None,
    limit: Annotated[int | None, typer.Option(
        "--limit", min=1, help="stop after N records")] = None,
    password: PasswordOpt = "", metadata_service_uri: UriOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print records as they are appended, until Ctrl-C, --timeout or --limit.

    One line per record (--json: one JSON object per line). Never disturbs the writer.
    """
    where = _parse_position(start, "--from")
    n = 0
    with _connect(metadata_service_uri) as bk, _explained(name):
        reader = open_log_reader(bk, name, where, password=password)
        err_console.print(f"tailing log {name!r} from {_pos(reader.position)} "
                          f"(Ctrl-C stops)", highlight=False)

        def stop_now(_signum: int, _frame: object) -> None:
            # A tail only reads (non-fencing): nothing to clean up, so Ctrl-C or SIGTERM ends
            # the process at once instead of waiting out a long-poll inside gRPC.
            sys.stdout.flush()
            err_console.print(f"{n} records", highlight=False)
            os._exit(0)

        signal.signal(signal.SIGINT, stop_now)
        signal.signal(signal.SIGTERM, stop_now)
        try:
            for r in reader.tail(timeout):
                if as_json:
                    line = json.dumps(_record_json(r))
                else:
                    line = (f"{_pos(r.position)}\t{_time(r.timestamp_ms)}\t"
                            f"{_payload_line(r.payload)}")
                sys.stdout.write(line + "\n")
                sys.stdout.flush()
                n += 1
                if n == limit:
                    break
        except KeyboardInterrupt:
            pass
    err_console.print(f"{n} records", highlight=False)


@log_app.command("truncate")
def log_truncate(
    name: LogArg,
    before: Annotated[str, typer.Option(
        "--before", help="LEDGER:ENTRY: drop the whole ledgers before this position's ledger",
        show_default=False)],
    yes: YesOpt = False, password: PasswordOpt = "", metadata_service_uri: UriOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Drop a log's whole ledgers before a position and delete their data.

    Ledgers not yet closed (and the ones after them) are kept.
    """
    pos = _parse_position(before, "--before", keywords=False)
    assert isinstance(pos, Position)
    with _connect(metadata_service_uri) as bk, _explained(name):
        ledgers = [i.ledger_id for i in log_ledgers(bk, name)]
        if pos.ledger_id not in ledgers:
            raise InvalidConfigError(f"--before {before}: ledger {pos.ledger_id} is not in "
                                     f"log {name!r} (`bk log show {name}` lists its ledgers)")
        older = ledgers[:ledgers.index(pos.ledger_id)]
        dropped: list[int] = []
        if older:
            _confirm(yes, f"drop {len(older)} ledgers of log {name!r} (before ledger "
                          f"{pos.ledger_id}) and delete their data")
            dropped = truncate_log(bk, name, pos, password)
    if as_json:
        _print_json({"log": name, "dropped": dropped})
    elif dropped:
        console.print(f"dropped {len(dropped)} ledgers of log {name!r}: "
                      + ", ".join(map(str, dropped)))
    else:
        console.print(f"nothing to drop: no closed ledger of log {name!r} lies before "
                      f"ledger {pos.ledger_id}")


@log_app.command("delete")
def log_delete(name: LogArg, yes: YesOpt = False, password: PasswordOpt = "",
               metadata_service_uri: UriOpt = None, as_json: JsonOpt = False) -> None:
    """Delete a log and all its ledgers."""
    with _connect(metadata_service_uri) as bk, _explained(name):
        md = log_metadata(bk, name)
        _confirm(yes, f"delete log {name!r} and its {md.ledger_count} ledgers")
        deleted = delete_log(bk, name, password)
    if as_json:
        _print_json({"log": name, "deleted_ledgers": deleted})
    else:
        console.print(f"deleted log {name!r} ({len(deleted)} ledgers)")


# =========================================================================== simpletest
def simpletest(
    ensemble: Annotated[int, typer.Option(
        "--ensemble", "-E", min=1, help="ensemble size (bookies per ledger)")] = 3,
    write_quorum: Annotated[int, typer.Option(
        "--write-quorum", "-Qw", min=1, help="write quorum (copies of each entry)")] = 2,
    ack_quorum: Annotated[int, typer.Option(
        "--ack-quorum", "-Qa", min=1, help="ack quorum (acknowledgements an add waits for)")
    ] = 2,
    entries: Annotated[int, typer.Option("--entries", "-n", min=1, help="entries to write")
                       ] = 1000,
    size: Annotated[int, typer.Option("--size", min=1, help="bytes per entry")] = 100,
    metadata_service_uri: UriOpt = None, as_json: JsonOpt = False,
) -> None:
    """Write N entries to a new ledger, read them back, verify them, delete the ledger."""
    password = b"simpletest"
    fill = _filler(size)
    nbytes = entries * size
    with _connect(metadata_service_uri) as bk, _explained():
        lh = bk.create_ledger(ensemble, write_quorum, ack_quorum, password=password,
                              custom_metadata={TOOL_KEY: "simpletest"})
        bad: list[int] = []
        try:
            t0 = time.monotonic()
            with _progress(f"writing ledger {lh.id}", entries) as advance:
                _pipelined((lh.add_entry_async(_synthetic(i, size, fill))
                            for i in range(entries)), advance)
            lh.close()
            write_s = time.monotonic() - t0
            t1 = time.monotonic()
            rh = bk.open_ledger(lh.id, password, recovery=False)
            if rh.last_add_confirmed != entries - 1:
                raise BKError(f"simpletest FAILED: ledger {lh.id} closed at entry "
                              f"{rh.last_add_confirmed}, expected {entries - 1}")
            with _progress(f"reading ledger {lh.id}", entries) as advance:
                for e in rh.iter_entries(0, entries - 1):
                    if e.payload != _synthetic(e.entry_id, size, fill):
                        bad.append(e.entry_id)
                    advance(1)
            read_s = time.monotonic() - t1
        finally:
            try:
                bk.delete_ledger(lh.id, password)
            except BKError as exc:
                err_console.print(f"warning: could not delete ledger {lh.id}: {exc}")
    if bad:
        raise BKError(f"simpletest FAILED: {len(bad)} of {entries} entries of ledger {lh.id} "
                      f"did not read back as written (first: entry {bad[0]})")
    out = {"ledger_id": lh.id, "ensemble_size": ensemble, "write_quorum_size": write_quorum,
           "ack_quorum_size": ack_quorum, "entries": entries, "entry_size": size,
           "write": _rate(entries, nbytes, write_s), "read": _rate(entries, nbytes, read_s),
           "verified": entries, "ok": True}
    if as_json:
        _print_json(out)
        return
    t = Table("phase", "entries", "seconds", "entries/s", "MiB/s")
    for phase in ("write", "read"):
        r = out[phase]
        t.add_row(phase, str(entries), f"{r['seconds']:.2f}", f"{r['entries_per_s']:,.0f}",
                  f"{r['mib_per_s']:.2f}")
    console.print(t)
    console.print(f"simpletest OK: {entries} entries of {size} bytes written to ledger "
                  f"{lh.id} (E={ensemble} Qw={write_quorum} Qa={ack_quorum}), read back, "
                  f"verified, deleted")


# =========================================================================== bookie-sanity
def bookie_sanity(
    bookie: Annotated[list[str] | None, typer.Option(
        "--bookie", "-b", help="host:port to check (repeatable; default: every registered "
                               "bookie)")] = None,
    entries: Annotated[int, typer.Option(
        "--entries", "-n", min=1, help="entries to add to each bookie")] = 10,
    timeout: Annotated[float, typer.Option(
        "--timeout", min=0.1, help="seconds per bookie request")] = 5.0,
    metadata_service_uri: UriOpt = None, as_json: JsonOpt = False,
) -> None:
    """Check each bookie's own add and read path; exit code 1 if any bookie fails.

    For each bookie: a ledger placed on it alone (E=Qw=Qa=1), entries added straight to it,
    read back, verified, deleted.
    """
    with _connect(metadata_service_uri, timeout_s=timeout) as bk, _explained():
        found = {b.bookie_id: ("readonly" if b.read_only else "rw")
                 for b in list_bookies(bk.msu, zk=bk.zk)}
        targets = list(bookie) if bookie else list(found)
        if not targets:
            raise NotEnoughBookiesError(f"no bookie is registered under {bk.msu.uri}: start "
                                        f"some (`bk sandbox start`, `bk bookie`)")
        results = []
        with _progress("checking bookies", len(targets)) as advance:
            for b in targets:
                results.append(check_bookie(bk, b, found.get(b, "no"), entries, timeout))
                advance(1)
    failed = [r["bookie"] for r in results if not r["ok"]]
    if as_json:
        _print_json(results)
    else:
        t = Table("bookie", "registered", "result", "add ms", "read ms", "detail")
        for r in results:
            t.add_row(r["bookie"], r["registered"],
                      Text("OK", style="green") if r["ok"] else Text("FAIL", style="bold red"),
                      "-" if r["add_ms"] is None else str(r["add_ms"]),
                      "-" if r["read_ms"] is None else str(r["read_ms"]), Text(r["detail"]))
        console.print(t)
    if failed:
        raise BKError(f"{len(failed)} of {len(results)} bookies failed the sanity check: "
                      + ", ".join(failed))
