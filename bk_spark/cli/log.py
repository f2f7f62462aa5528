"""``bk log``: logs made of ledgers: create, list, show, append, read, tail, truncate,
delete.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from bk_spark.admin.facts import query_lag
from bk_spark.cli.common import (
    POSITIONS_SHOWN,
    TABLE_ROWS,
    AckQuorumOpt,
    EnsembleOpt,
    JsonArray,
    JsonOpt,
    LogArg,
    PasswordOpt,
    UriOpt,
    WriteQuorumOpt,
    YesOpt,
    confirm,
    connect,
    console,
    err_console,
    explained,
    filler_bytes,
    format_position,
    format_size,
    format_time,
    kv_table,
    parse_position,
    payload_cell,
    payload_json,
    payload_line,
    pipelined,
    print_json,
    progress_bar,
    rate,
    synthetic_payload,
)
from bk_spark.core.client import BookKeeper
from bk_spark.errors import (
    InvalidConfigError,
    LogNotFoundError,
    NoSuchLedgerError,
    UnauthorizedError,
)
from bk_spark.log import (
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
    update_log_properties,
)
from bk_spark.protocol import log_rules, offload_rules
from bk_spark.protocol.log_format import LedgerInfo, LogRecord, Position, entry_timestamp

log_app = typer.Typer(no_args_is_help=True,
                      help="Logs made of ledgers: create, list, show, append, read, tail, "
                           "truncate, delete.")


def _record_json(r: LogRecord) -> dict[str, Any]:
    return {"position": format_position(r.position), "ledger_id": r.position.ledger_id,
            "entry_id": r.position.entry_id, "timestamp_ms": r.timestamp_ms,
            "length": None if r.payload is None else len(r.payload)} | \
        payload_json(r.payload)


def _ledger_row(bk: BookKeeper, info: LedgerInfo, password: str,
                offload: offload_rules.OffloadState | None = None) -> dict[str, Any]:
    """One ledger of a log: the log's row completed from the ledger's metadata and, while
    it is open, from its last-add-confirmed (non-fencing: the writer is not disturbed);
    ``tier``: where its data is (bookies, offloading, both, offloaded)."""
    tier = offload_rules.tier(offload)
    row: dict[str, Any] = {"index": info.index, "ledger_id": info.ledger_id,
                           "state": "MISSING", "entries": None, "length": None,
                           "first_ts_ms": info.first_ts_ms, "last_ts_ms": info.last_ts_ms,
                           "ensemble": [], "tier": tier.value}
    if offload is not None and offload.complete:
        row |= {"entries": offload.entries, "parquet_bytes": offload.bytes}
    if tier is offload_rules.Tier.OFFLOADED:
        return row | {"state": "CLOSED"}
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
    with connect(metadata_service_uri) as bk, explained(name):
        md = create_log(bk, name, properties=props)
    if as_json:
        print_json({"log": name, "properties": dict(md.properties), "ctime_ms": md.ctime_ms})
    else:
        console.print(f"created log {name!r} (E={quorums[0]} Qw={quorums[1]} Qa={quorums[2]})")


@log_app.command("list")
def log_list(metadata_service_uri: UriOpt = None, as_json: JsonOpt = False) -> None:
    """List the logs with their ledger counts and latest known append time."""
    rows = []
    with connect(metadata_service_uri) as bk, explained():
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
        print_json(rows)
        return
    t = Table("log", "ledgers", "created", "last known append", "properties")
    for r in rows:
        t.add_row(Text(r["log"] + (" (deleting)" if r["deleting"] else "")),
                  str(r["ledgers"]), format_time(r["ctime_ms"]), format_time(r["last_known_ts_ms"]),
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
    with connect(metadata_service_uri) as bk, explained(name):
        md = log_metadata(bk, name)
        ledgers = log_ledgers(bk, name)
        shown = ledgers[-last:] if last else ledgers
        states = offload_rules.states_of(md.properties)
        rows = [_ledger_row(bk, info, password, states.get(info.ledger_id))
                for info in shown]
        query = query_lag(bk, name, checkpoint, password) if checkpoint else None
    out = {"log": name, "log_id": log_incarnation(md), "ctime_ms": md.ctime_ms,
           "ledger_count": md.ledger_count,
           "first_index": md.first_index, "segments": len(md.live_segments),
           "deleting": md.deleting, "properties": dict(md.properties), "ledgers": rows}
    if query is not None:
        out["query"] = query
    if as_json:
        print_json(out)
        return
    entries = [r["entries"] for r in rows]
    total = "?" if None in entries else str(sum(entries))
    pairs: list[tuple[str, Any]] = [
        ("log", name), ("log id", log_incarnation(md)), ("created", format_time(md.ctime_ms)),
        ("ledgers", f"{md.ledger_count} (first index {md.first_index}, "
                    f"{len(md.live_segments)} spilled segments)"),
        ("entries", total + ("" if len(shown) == len(ledgers) else " in the ledgers shown")),
        # each ledger's offload record is its tier below (all of them: --json)
        ("properties", Text(json.dumps({k: v for k, v in md.properties.items()
                                        if k != offload_rules.STATE_PROPERTY})))]
    if query is not None:
        pairs.append(("query", Text(
            f"batch {query['batch']}: next {query['position']}; " + (
                f"lag {query['lag_entries']} entries, ~{format_size(query['lag_bytes'])}"
                if query["lag_entries"] is not None else query["note"]))))
    console.print(kv_table(pairs))
    t = Table("#", "ledger", "state", "tier", "entries", "length", "from", "to")
    for r in rows:
        t.add_row(str(r["index"]), str(r["ledger_id"]), r["state"], r["tier"],
                  "?" if r["entries"] is None else str(r["entries"]), format_size(r["length"]),
                  format_time(r["first_ts_ms"]), format_time(r["last_ts_ms"]))
    console.print(t)
    if None in entries:
        console.print("entries '?': an open ledger with another password (--password)")


def _entry_source(messages: list[str] | None, file: Path | None, count: int | None,
                  size: int) -> tuple[Iterable[bytes], bool]:
    """What to append, and whether it is a synthetic bulk load."""
    given = [bool(messages), file is not None, count is not None]
    if sum(given) != 1:
        raise InvalidConfigError("give the entries as MESSAGE... ('-' for stdin), --file FILE "
                                 "or --count N (exactly one of them)")
    if count is not None:
        fill = filler_bytes(size)
        return (synthetic_payload(i, size, fill) for i in range(count)), True
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
        help="roll to a new ledger every N entries (no ledger holds more, however many "
             "appends are in flight)")] = None,
    create: Annotated[bool, typer.Option("--create", help="create the log if missing")] = False,
    metadata_service_uri: UriOpt = None, as_json: JsonOpt = False,
) -> None:
    """Append messages, the lines of a file or stdin, or N synthetic entries (--count).

    The command becomes the log's writer: it takes the log over (fencing any other writer),
    appends, and closes its ledger. Quorums default to the log's (`bk log create`).
    """
    source, bulk = _entry_source(messages, file, count, size)
    with connect(metadata_service_uri) as bk, explained(name):
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
            with progress_bar(f"appending to {name}", count) as advance:
                n, first, last = pipelined(started(), advance, record)
            seconds = time.monotonic() - t0
    out: dict[str, Any] = {"log": name, "entries": n, "bytes": nbytes,
                           **rate(n, nbytes, seconds),
                           "first": format_position(first) if first else None,
                           "last": format_position(last) if last else None}
    if not bulk:
        out["positions"] = [format_position(p) for p, _n in positions]
    if as_json:
        print_json(out)
    elif not bulk and n <= POSITIONS_SHOWN:
        t = Table("position", "bytes")
        for p, size_ in positions:
            t.add_row(format_position(p), str(size_))
        console.print(t)
    else:
        t = Table("entries", "bytes", "seconds", "entries/s", "MiB/s", "first", "last")
        t.add_row(str(n), format_size(nbytes), f"{seconds:.2f}", f"{out['entries_per_s']:,.0f}",
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
    where = parse_position(start, "--from") if start is not None else "earliest"
    if start is not None and timestamp_ms is not None:
        raise InvalidConfigError("give --from or --timestamp-ms, not both")
    with connect(metadata_service_uri) as bk, explained(name):
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
        with progress_bar(f"reading log {name}", total) as advance:
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
                arr = JsonArray(sys.stdout)
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
                    t.add_row(format_position(r.position), format_time(r.timestamp_ms),
                              "-" if r.payload is None else str(len(r.payload)),
                              payload_cell(r.payload))
                    n += 1
                    advance(1)
                    if n == limit:
                        break
        seconds = time.monotonic() - t0
        nxt = format_position(unshown or reader.position)
    if output is not None:
        console.print(f"wrote {n} records ({format_size(nbytes)}) of log {name!r} to {output} in "
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
    where = parse_position(start, "--from")
    n = 0
    with connect(metadata_service_uri) as bk, explained(name):
        reader = open_log_reader(bk, name, where, password=password)
        err_console.print(f"tailing log {name!r} from {format_position(reader.position)} "
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
                    line = (f"{format_position(r.position)}\t{format_time(r.timestamp_ms)}\t"
                            f"{payload_line(r.payload)}")
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
    pos = parse_position(before, "--before", keywords=False)
    assert isinstance(pos, Position)
    with connect(metadata_service_uri) as bk, explained(name):
        ledgers = [i.ledger_id for i in log_ledgers(bk, name)]
        if pos.ledger_id not in ledgers:
            raise InvalidConfigError(f"--before {before}: ledger {pos.ledger_id} is not in "
                                     f"log {name!r} (`bk log show {name}` lists its ledgers)")
        older = ledgers[:ledgers.index(pos.ledger_id)]
        dropped: list[int] = []
        if older:
            confirm(yes, f"drop {len(older)} ledgers of log {name!r} (before ledger "
                          f"{pos.ledger_id}) and delete their data")
            dropped = truncate_log(bk, name, pos, password)
    if as_json:
        print_json({"log": name, "dropped": dropped})
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
    with connect(metadata_service_uri) as bk, explained(name):
        md = log_metadata(bk, name)
        confirm(yes, f"delete log {name!r} and its {md.ledger_count} ledgers")
        deleted = delete_log(bk, name, password)
    if as_json:
        print_json({"log": name, "deleted_ledgers": deleted})
    else:
        console.print(f"deleted log {name!r} ({len(deleted)} ledgers)")


@log_app.command("set")
def log_set(
    name: LogArg,
    offload_after: Annotated[str | None, typer.Option(
        "--offload-after", help="offload closed ledgers to Parquet: after N closed ledgers "
        "(0: as soon as a ledger closes), a size (64MiB: keep that much on bookies only) or "
        "an age (2h); 'off' removes the policy", show_default=False)] = None,
    offload_target: Annotated[str | None, typer.Option(
        "--offload-target", help="where the Parquet files go: a pyarrow filesystem URI "
        "(file:///dir, s3://bucket/prefix); default: the offloader's --offload-target",
        show_default=False)] = None,
    offload_deletion_lag: Annotated[str | None, typer.Option(
        "--offload-deletion-lag", help="how long a bookie copy is kept once its offload is "
        "complete (30s, 4h; -1 keeps both copies; default 4h)", show_default=False)] = None,
    offload_iceberg_catalog: Annotated[str | None, typer.Option(
        "--offload-iceberg-catalog", help="also commit the offloaded files to an Apache "
        "Iceberg table in this catalog (sqlite:///path/catalog.db: pyiceberg's SQL catalog "
        "on SQLite; 'off': none)", show_default=False)] = None,
    metadata_service_uri: UriOpt = None, as_json: JsonOpt = False,
) -> None:
    """Change a log's settings: its offload policy (tiered storage to Parquet)."""
    from bk_spark.io.offload_files import shown_uri

    def change(props: dict[str, Any]) -> dict[str, Any]:
        if offload_after is not None and offload_after.strip().lower() == "off":
            props.pop(offload_rules.POLICY_PROPERTY, None)
            return props
        old = offload_rules.policy_of(props)
        if old is None and offload_after is None:
            raise InvalidConfigError(
                f"log {name!r} has no offload policy: give --offload-after first")
        base = old or offload_rules.OffloadPolicy()
        new = offload_rules.OffloadPolicy(
            after=offload_after if offload_after is not None else base.after,
            target=offload_target if offload_target is not None else base.target,
            deletion_lag_ms=offload_rules.parse_lag_ms(offload_deletion_lag)
            if offload_deletion_lag is not None else base.deletion_lag_ms,
            iceberg_catalog=base.iceberg_catalog if offload_iceberg_catalog is None
            else None if offload_iceberg_catalog == "off" else offload_iceberg_catalog)
        props[offload_rules.POLICY_PROPERTY] = new.to_json()
        return props

    if offload_after is None and offload_target is None and offload_deletion_lag is None \
            and offload_iceberg_catalog is None:
        raise InvalidConfigError("nothing to set: give --offload-after, --offload-target or "
                                 "--offload-deletion-lag")
    with connect(metadata_service_uri) as bk, explained(name):
        props = update_log_properties(bk, name, change)
        md_bytes = len(log_metadata(bk, name).to_bytes())
    policy = offload_rules.policy_of(props)
    # the records' limit, stated where the user sets the policy (check_records_room)
    records = len(offload_rules.states_of(props))
    limit = offload_rules.records_limit(md_bytes, records)
    if as_json:
        print_json({"log": name, "offload": None if policy is None else policy.to_json()
                    | {"target": policy.target and shown_uri(policy.target)},
                    "offload_records": records, "offload_records_limit": limit})
    elif policy is None:
        console.print(f"log {name!r}: no offload policy")
    else:
        lag = "keep both copies" if policy.deletion_lag_ms < 0 else \
            f"{policy.deletion_lag_ms / 1000:g}s"
        console.print(f"log {name!r}: offload after {policy.after} to "
                      f"{shown_uri(policy.target) if policy.target else 'the default target'}"
                      f", bookie copy deleted after {lag}")
        console.print(f"offloaded ledgers' records: {records} of about {limit:,} its "
                      f"metadata can hold (one per ledger, in ZooKeeper's 1 MB znode: past "
                      f"it the offloader stops until the log is truncated)")
