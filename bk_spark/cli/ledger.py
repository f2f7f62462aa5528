"""``bk ledger``: list, show, read, recover (fence + close), delete.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from bk_spark.admin.facts import bookie_lac, ledger_summary
from bk_spark.cli.common import (
    TABLE_ROWS,
    JsonArray,
    JsonOpt,
    LedgerArg,
    PasswordOpt,
    UriOpt,
    YesOpt,
    confirm,
    connect,
    console,
    explained,
    format_size,
    format_time,
    kv_table,
    payload_cell,
    payload_json,
    print_json,
    progress_bar,
    spinner_status,
)
from bk_spark.errors import (
    InvalidConfigError,
    LogNotFoundError,
    NoSuchEntryError,
    NoSuchLedgerError,
    ReadPastLacError,
)
from bk_spark.log import (
    LEDGER_LOG_KEY,
    log_ledgers,
)
from bk_spark.protocol.digest import password_digest
from bk_spark.protocol.ledger_metadata import LedgerState

ledger_app = typer.Typer(no_args_is_help=True,
                         help="Ledgers: list, show, read, recover (fence + close), delete.")


@ledger_app.command("list")
def ledger_list(metadata_service_uri: UriOpt = None, as_json: JsonOpt = False) -> None:
    """List every ledger: state, E/Qw/Qa, last entry and length (once closed), owning log."""
    with connect(metadata_service_uri) as bk, explained():
        found = []
        for lid in bk.list_ledgers():
            try:
                found.append(bk.ledger_metadata(lid))
            except NoSuchLedgerError:  # deleted meanwhile
                continue
    if as_json:
        print_json([ledger_summary(md) for md in found])
        return
    t = Table("ledger", "state", "E/Qw/Qa", "last entry", "length", "log", "ensemble")
    for md in found:
        s = ledger_summary(md)
        t.add_row(str(md.ledger_id), md.state.value,
                  f"{md.ensemble_size}/{md.write_quorum_size}/{md.ack_quorum_size}",
                  "-" if s["last_entry_id"] is None else str(s["last_entry_id"]),
                  format_size(s["length"]), Text(s["log"] or "-"), ", ".join(md.last_ensemble))
    console.print(t)
    console.print(f"{len(found)} ledgers")


@ledger_app.command("show")
def ledger_show(ledger_id: LedgerArg, metadata_service_uri: UriOpt = None,
                as_json: JsonOpt = False) -> None:
    """Show a ledger's metadata: quorums, state, fragments (ensembles), custom metadata."""
    with connect(metadata_service_uri) as bk, explained():
        md = bk.ledger_metadata(ledger_id)
        lac = None if md.is_closed else bookie_lac(bk, md)
    out = ledger_summary(md) | {
        "digest_type": md.digest_type,
        "password_set": md.password_digest != password_digest(b""),
        "bookie_lac": lac,
        "fragments": [{"first_entry": first, "ensemble": list(ens)}
                      for first, ens in md.ensembles],
        "custom_metadata": dict(md.custom_metadata),
    }
    if as_json:
        print_json(out)
        return
    rows: list[tuple[str, Any]] = [
        ("ledger", md.ledger_id), ("state", md.state.value),
        ("ensemble size (E)", md.ensemble_size), ("write quorum (Qw)", md.write_quorum_size),
        ("ack quorum (Qa)", md.ack_quorum_size)]
    if md.is_closed:
        rows += [("last entry", md.last_entry_id), ("length", format_size(md.length))]
    else:
        rows.append(("last-add-confirmed", "unknown (no bookie answered)" if lac is None
                     else f"{lac} (as the bookies report it)"))
    rows += [("digest", md.digest_type), ("password", "set" if out["password_set"] else "none"),
             ("created", format_time(md.ctime_ms))]
    rows += [(f"custom: {k}", v) for k, v in md.custom_metadata]
    console.print(kv_table(rows))
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
    with connect(metadata_service_uri) as bk, explained():
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
        with progress_bar(f"reading ledger {ledger_id}", max(0, last - first + 1)) as advance:
            if as_json:
                arr = JsonArray(sys.stdout)
                for e in entries:
                    arr.add({"entry_id": e.entry_id, "length": e.length}
                            | payload_json(e.payload))
                    advance(1)
                arr.close()
                return
            t = Table("entry", "bytes", "payload")
            n = 0
            for e in entries:
                t.add_row(str(e.entry_id), str(e.length), payload_cell(e.payload))
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
    with connect(metadata_service_uri) as bk, explained():
        before = bk.ledger_metadata(ledger_id).state
        with spinner_status(f"recovering ledger {ledger_id}: fencing its bookies, reading forward, "
                      f"closing"):
            md = bk.recover_ledger(ledger_id, password)
    out = {"ledger_id": ledger_id, "state_before": before.value, "state": md.state.value,
           "last_entry_id": md.last_entry_id, "length": md.length}
    if as_json:
        print_json(out)
    elif before == LedgerState.CLOSED:
        console.print(f"ledger {ledger_id} was already CLOSED at entry {md.last_entry_id}: "
                      f"nothing to recover")
    else:
        console.print(f"ledger {ledger_id} recovered: {before.value} -> {md.state.value} at "
                      f"entry {md.last_entry_id} ({format_size(md.length)})")


@ledger_app.command("delete")
def ledger_delete(
    ledger_id: LedgerArg, yes: YesOpt = False,
    force: Annotated[bool, typer.Option(
        "--force", help="delete even a ledger a log still lists (breaks that log)")] = False,
    password: PasswordOpt = "", metadata_service_uri: UriOpt = None,
) -> None:
    """Delete a ledger: its data on every bookie, then its metadata."""
    with connect(metadata_service_uri) as bk, explained():
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
        confirm(yes, f"delete ledger {ledger_id} ({md.state.value}) from "
                      f"{', '.join(sorted({b for _f, e in md.ensembles for b in e}))}")
        bk.delete_ledger(ledger_id, password)
    console.print(f"deleted ledger {ledger_id}")
