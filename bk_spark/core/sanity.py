"""A bookie's own add and read path, checked alone (``bk bookie-sanity``; BookKeeper's
``bookiesanity``): a real ledger of the metadata store placed on that bookie only
(E=Qw=Qa=1), entries added straight to it with the ledger's codec and master key, read
back, verified, deleted. It talks to the one bookie directly, not through a ledger handle:
a handle would replace a failing bookie by an ensemble change, and the check would then
pass on another bookie."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from bk_spark.core.client import BookKeeper
from bk_spark.errors import BKError, CheckFailedError, NoSuchEntryError
from bk_spark.io.entry import EntryCodec
from bk_spark.protocol.digest import DigestManager, master_key, password_digest
from bk_spark.protocol.ledger_metadata import LedgerMetadata

#: Custom metadata key marking the short-lived ledgers of operator tools.
TOOL_KEY = "bk-spark.tool"


def _settle(fut: Future) -> Callable[[BKError | None], None]:
    def done(err: BKError | None) -> None:
        if err is None:
            fut.set_result(None)
        else:
            fut.set_exception(err)
    return done


def check_bookie(bk: BookKeeper, bookie: str, registered: str, entries: int,
                  timeout: float) -> dict[str, Any]:
    """Sanity of one bookie's own add and read path: a ledger placed on it alone
    (E=Qw=Qa=1), ``entries`` adds straight to it, a read back, verification, deletion.

    The ledger id comes from the metadata store (a real, unique ledger), so the check can
    never touch another ledger's data on the bookie."""
    out: dict[str, Any] = {"bookie": bookie, "registered": registered, "ok": False,
                           "add_ms": None, "read_ms": None, "detail": ""}
    client = bk.bookies.get(bookie)
    try:
        info = client.info()
    except BKError as exc:
        out["detail"] = str(exc)
        return out
    if info.read_only:
        out["detail"] = "readonly: it takes no adds (disk full?)"
        return out
    password = b"bookie-sanity"
    md = bk.metadata_store.create(lambda lid: LedgerMetadata.new(
        lid, (bookie,), write_quorum_size=1, ack_quorum_size=1,
        password_digest=password_digest(password),
        custom_metadata={TOOL_KEY: "bookie-sanity"})).value
    lid = md.ledger_id
    codec = EntryCodec(lid, DigestManager(md.digest_type, password))
    try:
        payloads = [f"bookie-sanity {bookie} entry {i}".encode() for i in range(entries)]
        t0 = time.monotonic()
        futs: list[Future] = []
        length = 0
        for i, p in enumerate(payloads):
            length += len(p)
            futs.append(Future())
            client.add_entry(lid, master_key(password), codec.encode(i, i - 1, length, p),
                             _settle(futs[-1]))
        for f in futs:
            f.result(timeout + 1)
        out["add_ms"] = round((time.monotonic() - t0) * 1000, 1)
        t1 = time.monotonic()
        resp = client.read_entries(lid, first_entry=0, last_entry=entries - 1, timeout=timeout,
                                   master_key=master_key(password))
        got = {e.entry_id: e for e in resp.entries}
        for i, p in enumerate(payloads):
            if i not in got:
                raise NoSuchEntryError(f"entry {i} was acknowledged but does not read back")
            codec.verify(got[i])
            if got[i].payload != p:
                raise CheckFailedError(f"entry {i} reads back different bytes")
        out["read_ms"] = round((time.monotonic() - t1) * 1000, 1)
        out["ok"] = True
        out["detail"] = f"{entries} entries added, read back, verified (ledger {lid})"
    except (BKError, TimeoutError) as exc:
        out["detail"] = f"ledger {lid}: {exc or type(exc).__name__}"
    finally:
        try:
            client.delete_ledger(lid, master_key(password))
        except BKError:
            pass  # a bookie that failed may not answer; the metadata goes anyway
        try:
            bk.metadata_store.delete(lid)
        except BKError:
            pass
    return out


