"""``bk cookie list|show|delete``: the bookies' cookies in ZooKeeper, and ``bk bookie
format`` (in :mod:`.bookie`) shares :func:`zk_session` with it.

A cookie (``<root>/cookies/<bookie id>``, :mod:`bk_spark.protocol.cookie_rules`) is how a
bookie recognises its own directories and its cluster at start-up. Deleting the cookie of a
bookie whose data the cluster still relies on makes that bookie refuse to start
(``cookie_missing``); delete one only for a bookie that is gone for good (after `bk
recover`) or moved.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

import typer
from rich.table import Table

from bk_spark.cli.common import (
    JsonOpt,
    UriOpt,
    YesOpt,
    cli_security,
    confirm,
    console,
    print_json,
)
from bk_spark.errors import InvalidConfigError
from bk_spark.io.cookies import CookieStore, read_instance_id
from bk_spark.io.registration import list_bookies
from bk_spark.io.zk import connect_zk
from bk_spark.metadata_uri import MetadataServiceUri, parse_metadata_service_uri

cookie_app = typer.Typer(no_args_is_help=True,
                         help="The bookies' cookies (their identity) in ZooKeeper.")

BookieIdArg = Annotated[str, typer.Argument(help="HOST:PORT of the bookie",
                                            show_default=False)]


@contextmanager
def zk_session(uri: str | None) -> Iterator[tuple[object, MetadataServiceUri]]:
    """A ZooKeeper session for one command (with its credentials, :func:`cli_security`):
    ``(kazoo client, parsed URI)``."""
    msu = parse_metadata_service_uri(uri)
    zk = connect_zk(msu, security=cli_security().zk)
    try:
        yield zk, msu
    finally:
        zk.stop()
        zk.close()


def _registered(zk, msu: MetadataServiceUri) -> set[str]:  # type: ignore[no-untyped-def]
    return {b.bookie_id for b in list_bookies(msu, zk=zk)}


@cookie_app.command("list")
def cookie_list(metadata_service_uri: UriOpt = None, as_json: JsonOpt = False) -> None:
    """Every bookie with a cookie: its directories, whether it is registered now."""
    with zk_session(metadata_service_uri) as (zk, msu):
        store = CookieStore(zk, msu)
        instance = read_instance_id(zk, msu)
        live = _registered(zk, msu)
        rows = []
        for bookie_id in store.bookie_ids():
            found = store.find(bookie_id)
            if found is None:
                continue  # deleted meanwhile
            rows.append({"bookie": bookie_id, "registered": bookie_id in live,
                         "version": found.version, **found.value.to_dict()})
    if as_json:
        print_json({"instance_id": instance, "cookies": rows})
        return
    console.print(f"cluster instance id: {instance or '(none: no bookie started yet)'}")
    t = Table("bookie", "registered", "directories", "cluster")
    for r in rows:
        t.add_row(r["bookie"], "yes" if r["registered"] else "no",
                  "\n".join(r["journal_dirs"] + r["ledger_dirs"]),
                  "this" if r["instance_id"] == instance else f"OTHER: {r['instance_id']}")
    console.print(t)
    console.print(f"{len(rows)} cookies")


@cookie_app.command("show")
def cookie_show(bookie: BookieIdArg, metadata_service_uri: UriOpt = None,
                as_json: JsonOpt = False) -> None:
    """One bookie's cookie (CookieNotFoundError when it has none)."""
    with zk_session(metadata_service_uri) as (zk, msu):
        found = CookieStore(zk, msu).read(bookie)
        registered = bookie in _registered(zk, msu)
    out = {"bookie": bookie, "registered": registered, "version": found.version,
           **found.value.to_dict()}
    if as_json:
        print_json(out)
        return
    c = found.value
    console.print(f"bookie:        {bookie} ({'registered' if registered else 'not registered'})")
    console.print(f"instance id:   {c.instance_id}")
    console.print(f"journal dirs:  {', '.join(c.journal_dirs)}")
    console.print(f"ledger dirs:   {', '.join(c.ledger_dirs)}")
    console.print(f"layout:        {c.layout_version}   znode version: {found.version}")


@cookie_app.command("delete")
def cookie_delete(
    bookie: BookieIdArg, metadata_service_uri: UriOpt = None, yes: YesOpt = False,
    force: Annotated[bool, typer.Option(
        "--force", help="delete it even while that bookie is registered (running)")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Delete a bookie's cookie: for a bookie gone for good (after `bk recover`) or moved
    to another address. Its directories then no longer start as that bookie."""
    with zk_session(metadata_service_uri) as (zk, msu):
        store = CookieStore(zk, msu)
        found = store.read(bookie)
        if bookie in _registered(zk, msu) and not force:
            raise InvalidConfigError(
                f"bookie {bookie} is registered (running): deleting its cookie would make it "
                f"refuse its next start. Stop it first, or pass --force")
        confirm(yes, f"delete the cookie of bookie {bookie} (its directories will no longer "
                     f"start as this bookie)")
        store.delete(bookie, found.version)
    if as_json:
        print_json({"bookie": bookie, "deleted": True})
    else:
        console.print(f"deleted the cookie of bookie {bookie}")
