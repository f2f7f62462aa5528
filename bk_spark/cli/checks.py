"""``bk simpletest`` and ``bk bookie-sanity``: the cluster's and each bookie's own
add/read path, checked end to end.
"""

from __future__ import annotations

import time
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from bk_spark.cli.common import (
    JsonOpt,
    UriOpt,
    connect,
    console,
    err_console,
    explained,
    filler_bytes,
    pipelined,
    print_json,
    progress_bar,
    rate,
    synthetic_payload,
)
from bk_spark.core.sanity import TOOL_KEY, check_bookie
from bk_spark.errors import (
    BKError,
    CheckFailedError,
    NotEnoughBookiesError,
)
from bk_spark.io.registration import list_bookies
from bk_spark.protocol.ledger_metadata import DEFAULT_QUORUMS


def simpletest(
    ensemble: Annotated[int, typer.Option(
        "--ensemble", "-E", min=1, help="ensemble size (bookies per ledger)")
    ] = DEFAULT_QUORUMS.ensemble_size,
    write_quorum: Annotated[int, typer.Option(
        "--write-quorum", "-Qw", min=1, help="write quorum (copies of each entry)")
    ] = DEFAULT_QUORUMS.write_quorum_size,
    ack_quorum: Annotated[int, typer.Option(
        "--ack-quorum", "-Qa", min=1, help="ack quorum (acknowledgements an add waits for)")
    ] = DEFAULT_QUORUMS.ack_quorum_size,
    entries: Annotated[int, typer.Option("--entries", "-n", min=1, help="entries to write")
                       ] = 1000,
    size: Annotated[int, typer.Option("--size", min=1, help="bytes per entry")] = 100,
    metadata_service_uri: UriOpt = None, as_json: JsonOpt = False,
) -> None:
    """Write N entries to a new ledger, read them back, verify them, delete the ledger."""
    password = b"simpletest"
    fill = filler_bytes(size)
    nbytes = entries * size
    with connect(metadata_service_uri) as bk, explained():
        lh = bk.create_ledger(ensemble, write_quorum, ack_quorum, password=password,
                              custom_metadata={TOOL_KEY: "simpletest"})
        bad: list[int] = []
        try:
            t0 = time.monotonic()
            with progress_bar(f"writing ledger {lh.id}", entries) as advance:
                pipelined((lh.add_entry_async(synthetic_payload(i, size, fill))
                            for i in range(entries)), advance)
            lh.close()
            write_s = time.monotonic() - t0
            t1 = time.monotonic()
            rh = bk.open_ledger(lh.id, password, recovery=False)
            if rh.last_add_confirmed != entries - 1:
                raise CheckFailedError(f"simpletest FAILED: ledger {lh.id} closed at entry "
                                       f"{rh.last_add_confirmed}, expected {entries - 1}")
            with progress_bar(f"reading ledger {lh.id}", entries) as advance:
                for e in rh.iter_entries(0, entries - 1):
                    if e.payload != synthetic_payload(e.entry_id, size, fill):
                        bad.append(e.entry_id)
                    advance(1)
            read_s = time.monotonic() - t1
        finally:
            try:
                bk.delete_ledger(lh.id, password)
            except BKError as exc:
                err_console.print(f"warning: could not delete ledger {lh.id}: {exc}")
    if bad:
        raise CheckFailedError(f"simpletest FAILED: {len(bad)} of {entries} entries of ledger "
                               f"{lh.id} did not read back as written (first: entry {bad[0]})")
    out = {"ledger_id": lh.id, "ensemble_size": ensemble, "write_quorum_size": write_quorum,
           "ack_quorum_size": ack_quorum, "entries": entries, "entry_size": size,
           "write": rate(entries, nbytes, write_s), "read": rate(entries, nbytes, read_s),
           "verified": entries, "ok": True}
    if as_json:
        print_json(out)
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
    with connect(metadata_service_uri, timeout_s=timeout) as bk, explained():
        found = {b.bookie_id: ("readonly" if b.read_only else "rw")
                 for b in list_bookies(bk.msu, zk=bk.zk)}
        targets = list(bookie) if bookie else list(found)
        if not targets:
            raise NotEnoughBookiesError(f"no bookie is registered under {bk.msu.uri}: start "
                                        f"some (`bk sandbox start`, `bk bookie`)")
        results = []
        with progress_bar("checking bookies", len(targets)) as advance:
            for b in targets:
                results.append(check_bookie(bk, b, found.get(b, "no"), entries, timeout))
                advance(1)
    failed = [r["bookie"] for r in results if not r["ok"]]
    if as_json:
        print_json(results)
    else:
        t = Table("bookie", "registered", "result", "add ms", "read ms", "detail")
        for r in results:
            t.add_row(r["bookie"], r["registered"],
                      Text("OK", style="green") if r["ok"] else Text("FAIL", style="bold red"),
                      "-" if r["add_ms"] is None else str(r["add_ms"]),
                      "-" if r["read_ms"] is None else str(r["read_ms"]), Text(r["detail"]))
        console.print(t)
    if failed:
        raise CheckFailedError(f"{len(failed)} of {len(results)} bookies failed the sanity check: "
                               + ", ".join(failed))
