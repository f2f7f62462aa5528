"""The facts an operator asks about, gathered with the project's own functions.

One home per fact: registration (:func:`bk_spark.io.registration.list_bookies`),
under-replication and the Auditor (:class:`bk_spark.io.underreplication.UnderReplicationManager`),
ledger metadata (the client's store), logs (:mod:`bk_spark.log`), a bookie's own disk and mode
(its ``Info`` RPC), a streaming query's lag (the data source's own rule,
:func:`bk_spark.datasource.planning.lag_behind`). The HTTP admin API, ``bk ui`` and ``bk doctor``
all read them here.

A bookie is ``down`` when it is registered or known (named by an under-replicated ledger, the
Auditor's lost bookies, or seen before by the caller) but does not answer ``Info`` within the
timeout: a bookie killed with ``-9`` shows as down at once, before its ZooKeeper session
expires and its registration vanishes.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.request
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bk_spark.errors import BKError, InvalidConfigError, LogNotFoundError, NoSuchLedgerError
from bk_spark.io.registration import RegisteredBookie, list_bookies
from bk_spark.io.underreplication import UnderReplicationManager
from bk_spark.log import LEDGER_LOG_KEY
from bk_spark.protocol.ledger_metadata import LedgerMetadata
from bk_spark.security import ClientSecurity

if TYPE_CHECKING:
    from bk_spark.core.client import BookKeeper

#: BookKeeper's names of a bookie's modes, as the page and the API show them.
RW, READONLY, DOWN, DECOMMISSIONING = "rw", "readonly", "down", "decommissioning"


def http_scheme(info: dict) -> str:
    """``https`` when the bookie registered TLS (its HTTP API is then served over TLS)."""
    return "https" if info.get("tls") else "http"


def client_ssl_context(security: ClientSecurity | None) -> ssl.SSLContext | None:
    """The TLS context a client of a bookie's HTTP API uses: the bookies' CA, and the client
    certificate when it has one (bookies with ``--tls-client-auth require``)."""
    sec = security or ClientSecurity.from_env()
    if sec.tls_ca is None:
        return None
    ctx = ssl.create_default_context(cafile=sec.tls_ca)
    ctx.check_hostname = False  # bookies are named by address; the CA is ours alone
    if sec.tls_cert and sec.tls_key:
        ctx.load_cert_chain(sec.tls_cert, sec.tls_key)
    return ctx


def fetch_json(url: str, timeout: float, context: ssl.SSLContext | None = None) -> Any:
    """GET ``url`` and decode its JSON (errors propagate: OSError, ValueError)."""
    with urllib.request.urlopen(url, timeout=timeout, context=context) as resp:  # noqa: S310
        return json.loads(resp.read())


# --------------------------------------------------------------------------- bookies
def short_error(text: str) -> str:
    """A bookie's connection error in a few words (gRPC's text names every address tried)."""
    for cause in ("Connection refused", "Deadline Exceeded", "handshake", "certificate"):
        if cause.lower() in text.lower():
            return f"unreachable: {cause.lower()}"
    return text if len(text) <= 120 else text[:117] + "..."


@dataclass
class BookieView:
    """One bookie as an operator sees it (no secret: addresses, sizes, modes)."""

    bookie_id: str
    state: str  # rw | readonly | down | decommissioning
    registered: bool
    rack: str = ""
    disk_used_bytes: int | None = None
    disk_free_bytes: int | None = None
    ledgers: int | None = None
    http_port: int | None = None
    add_entries: float | None = None  # counter: the page turns it into adds per second
    time_ms: int | None = None  # the bookie's clock (HTTP info), for clock skew
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def known_bookies(bk: BookKeeper, urm: UnderReplicationManager, also: Iterable[str] = ()
                  ) -> tuple[list[RegisteredBookie], set[str]]:
    """The registered bookies, and the ids of bookies known but not registered (named by an
    under-replicated ledger, the Auditor's lost bookies, or ``also``)."""
    registered = list_bookies(bk.msu, zk=bk.zk)
    ids = {b.bookie_id for b in registered}
    known = set(also) | set(urm.status().get("lost_bookies", []))
    for rec in urm.list():
        known |= set(rec.missing)
    return registered, known - ids


def _probe(bk: BookKeeper, bookie_id: str, reg: RegisteredBookie | None, timeout: float,
           ctx: ssl.SSLContext | None) -> BookieView:
    if reg is None:
        view = BookieView(bookie_id, DOWN, registered=False,
                          error="not registered (its ZooKeeper session ended)")
    else:
        state = DECOMMISSIONING if reg.decommissioning else READONLY if reg.read_only else RW
        view = BookieView(bookie_id, state, registered=True,
                          rack=str(reg.info.get("rack") or ""),
                          http_port=reg.info.get("http_port"))
    try:
        info = bk.bookies.get(bookie_id).info()
    except BKError as exc:
        view.state, view.error = DOWN, short_error(str(exc))
        return view
    view.disk_used_bytes, view.disk_free_bytes = info.disk_used_bytes, info.disk_free_bytes
    view.ledgers = info.ledgers
    if info.read_only and view.state == RW:
        view.state = READONLY
    if view.http_port and reg is not None:
        host = bookie_id.rpartition(":")[0]
        try:
            own = fetch_json(f"{http_scheme(reg.info)}://{host}:{view.http_port}"
                             f"/api/v1/bookie/info", timeout, ctx)
            view.add_entries, view.time_ms = own.get("addEntries"), own.get("timeMs")
        except (OSError, ValueError) as exc:
            view.error = f"HTTP API: {exc}"
    return view


def bookie_views(bk: BookKeeper, urm: UnderReplicationManager, timeout: float = 1.0,
                 also: Iterable[str] = (), security: ClientSecurity | None = None
                 ) -> list[BookieView]:
    """Every registered or known bookie, probed in parallel (``Info`` RPC, and its HTTP API
    for counters and clock when it registered one)."""
    registered, unregistered = known_bookies(bk, urm, also)
    regs = {b.bookie_id: b for b in registered}
    ids = sorted(regs) + sorted(unregistered)
    if not ids:
        return []
    ctx = client_ssl_context(security or bk.security)
    with ThreadPoolExecutor(max_workers=min(16, len(ids))) as pool:
        return list(pool.map(lambda b: _probe(bk, b, regs.get(b), timeout, ctx), ids))


def cluster_info(urm: UnderReplicationManager, views: list[BookieView]) -> dict[str, Any]:
    """BookKeeper's ``/api/v1/bookie/cluster_info`` (same field names), plus the number of
    under-replicated ledgers."""
    auditor = urm.auditor()
    count = urm.count()
    return {
        "auditorElected": auditor is not None, "auditorId": auditor or "",
        "clusterUnderReplicated": count > 0, "underReplicatedLedgersCount": count,
        "ledgerReplicationEnabled": urm.is_enabled(),
        "totalBookiesCount": len(views),
        "writableBookiesCount": sum(v.state == RW for v in views),
        "readonlyBookiesCount": sum(v.state == READONLY for v in views),
        "decommissioningBookiesCount": sum(v.state == DECOMMISSIONING for v in views),
        "unavailableBookiesCount": sum(v.state == DOWN for v in views),
    }


def autorecovery_status(urm: UnderReplicationManager) -> dict[str, Any]:
    """Who is the Auditor, which workers run, the last audit, the under-replicated count
    (``bk autorecovery status``)."""
    status = urm.status()
    records = list(urm.list())
    return {"enabled": urm.is_enabled(), "auditor": urm.auditor(), "workers": urm.workers(),
            "under_replicated": len(records),
            "failing": sum(1 for r in records if r.reason),  # their reason: under_replicated()
            "last_check_ms": status.get("last_check_ms"),
            "last_bookie_check_ms": status.get("last_bookie_check_ms"),
            "lost_bookies": status.get("lost_bookies", [])}


def under_replicated(urm: UnderReplicationManager) -> list[dict[str, Any]]:
    """Every under-replicated ledger: missing bookies, the worker holding it, when marked,
    and why it has not healed yet (``reason``: None while nothing failed)."""
    return [{"ledger": r.ledger_id, "missing": sorted(r.missing),
             "lock_holder": urm.lock_holder(r.ledger_id), "marked_ms": r.marked_ms,
             "reason": r.reason}
            for r in urm.list()]


# --------------------------------------------------------------------------- ledgers
def ledger_summary(md: LedgerMetadata) -> dict[str, Any]:
    """A ledger's metadata without its password digest (what ``bk ledger list`` shows)."""
    return {
        "ledger_id": md.ledger_id, "state": md.state.value,
        "ensemble_size": md.ensemble_size, "write_quorum_size": md.write_quorum_size,
        "ack_quorum_size": md.ack_quorum_size,
        "last_entry_id": md.last_entry_id if md.is_closed else None,
        "length": md.length if md.is_closed else None,
        "fragments": len(md.ensembles), "ensemble": list(md.last_ensemble),
        "log": dict(md.custom_metadata).get(LEDGER_LOG_KEY), "ctime_ms": md.ctime_ms,
    }


def all_ledgers(bk: BookKeeper) -> list[LedgerMetadata]:
    out = []
    for lid in bk.list_ledgers():
        try:
            out.append(bk.ledger_metadata(lid))
        except NoSuchLedgerError:  # deleted meanwhile
            continue
    return out


def bookie_lac(bk: BookKeeper, md: LedgerMetadata) -> int | None:
    """An open ledger's last-add-confirmed as its bookies report it (no password needed);
    None when too few answered."""
    from bk_spark.core.reader import read_lac

    try:
        lac, answers = read_lac(bk, md)
    except BKError:
        return None
    return lac if answers.covered else None


@dataclass
class ActivityTracker:
    """Whether an open ledger still has a writer, judged by its progress: the
    last-add-confirmed seen last time and since when it has not moved (the rule of
    AutoRecovery's ``open_ledger_grace``: no add for the grace period means no writer)."""

    grace_s: float = 30.0
    seen: dict[int, tuple[int | None, float]] = field(default_factory=dict)

    def observe(self, ledger_id: int, lac: int | None, now: float | None = None) -> float:
        """Record the ledger's LAC; returns for how long it has not moved (seconds)."""
        now = time.monotonic() if now is None else now
        last = self.seen.get(ledger_id)
        if last is None or last[0] != lac:
            self.seen[ledger_id] = (lac, now)
            return 0.0
        return now - last[1]

    def idle(self, ledger_id: int, lac: int | None, created_ms: int,
             now: float | None = None) -> bool:
        """True when the ledger has not moved for the grace period (and is older than it)."""
        still = self.observe(ledger_id, lac, now)
        age_s = time.time() - created_ms / 1000.0
        return still >= self.grace_s and age_s >= self.grace_s


def log_views(bk: BookKeeper, tracker: ActivityTracker) -> list[dict[str, Any]]:
    """Every log: ledgers, bytes in closed ledgers, whether its last ledger is open and has a
    writer (``writer``: ``alive``, ``gone`` (open, no add for the grace period) or ``none``
    (its last ledger is closed: nobody writes now))."""
    from bk_spark.log import list_logs, log_ledgers

    out = []
    for name in list_logs(bk):
        try:
            infos = log_ledgers(bk, name)
        except LogNotFoundError:
            continue
        size, writer, open_ledger = 0, "none", None
        for i, info in enumerate(infos):
            try:
                md = bk.ledger_metadata(info.ledger_id)
            except NoSuchLedgerError:
                continue
            if md.is_closed:
                size += md.length
            elif i == len(infos) - 1:
                open_ledger = md.ledger_id
                lac = bookie_lac(bk, md)
                writer = "gone" if tracker.idle(md.ledger_id, lac, md.ctime_ms) else "alive"
        out.append({"log": name, "ledgers": len(infos), "bytes": size, "writer": writer,
                    "open_ledger": open_ledger})
    return out


# --------------------------------------------------------------------------- streaming
def query_lag(bk: BookKeeper, name: str, checkpoint: Path, password: str) -> dict[str, Any]:
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
    out: dict[str, Any] = {"batch": batch, "position": off.describe(), **off.fields(),
                           "lag_entries": None, "lag_bytes": None, "note": None}
    if off.log_id and off.log_id != view.incarnation:
        out["note"] = (f"the position is in a deleted log of this name (log id {off.log_id});"
                       f" the query reports data loss on its next batch")
        return out
    pw = password.encode()
    out["lag_entries"], out["lag_bytes"] = lag_behind(view, off, log_end(view, pw), pw,
                                                      EntrySizes())
    return out


def stream_views(bk: BookKeeper, checkpoints: Iterable[Path]) -> list[dict[str, Any]]:
    """For each checkpoint directory, each log it reads and its lag (errors as notes)."""
    from bk_spark.datasource.offsets import checkpoint_offsets

    out: list[dict[str, Any]] = []
    for cp in checkpoints:
        try:
            _batch, offsets = checkpoint_offsets(cp)
        except BKError as exc:
            out.append({"checkpoint": str(cp), "log": None, "error": str(exc)})
            continue
        for name in sorted(offsets):
            try:
                out.append({"checkpoint": str(cp), "log": name,
                            **query_lag(bk, name, cp, ""), "error": None})
            except BKError as exc:
                out.append({"checkpoint": str(cp), "log": name, "error": str(exc)})
    return out


# --------------------------------------------------------------------------- the page
def problems(views: list[BookieView], info: dict[str, Any], logs: list[dict[str, Any]],
             streams: list[dict[str, Any]]) -> list[dict[str, str]]:
    """What is wrong, each with the command that fixes it (the page shows them in red)."""
    out = []
    for v in views:
        if v.state == DOWN:
            out.append({"what": f"bookie {v.bookie_id} is down ({v.error})",
                        "fix": f"restart it (bk bookie ... --port {v.bookie_id.rpartition(':')[2]})"
                               f", or re-replicate its data now: bk recover {v.bookie_id}"})
        elif v.state == READONLY:
            out.append({"what": f"bookie {v.bookie_id} is readonly (disk full?)",
                        "fix": "free disk space or add bookies: bk bookies; bk sandbox status"})
    if not info["auditorElected"]:
        out.append({"what": "no Auditor is elected: lost bookies are not noticed",
                    "fix": "run bookies with --autorecovery, or start one: bk autorecovery"})
    if info["underReplicatedLedgersCount"]:
        out.append({"what": f"{info['underReplicatedLedgersCount']} ledgers are "
                            f"under-replicated", "fix": "bk ledger underreplicated"
                    + ("" if info["ledgerReplicationEnabled"] else
                       "; AutoRecovery is disabled: bk autorecovery enable")})
    for lg in logs:
        if lg["writer"] == "gone":
            out.append({"what": f"log {lg['log']}: ledger {lg['open_ledger']} is open but its "
                                f"writer added nothing for the grace period",
                        "fix": f"bk ledger recover {lg['open_ledger']} --password ..."})
    for s in streams:
        if s.get("error"):
            out.append({"what": f"streaming checkpoint {s['checkpoint']}: {s['error']}",
                        "fix": f"bk log show {s['log'] or 'LOG'} --checkpoint "
                               f"{s['checkpoint']}"})
    return out


def status(bk: BookKeeper, tracker: ActivityTracker, seen: set[str],
           checkpoints: Iterable[Path] = (), timeout: float = 1.0) -> dict[str, Any]:
    """Everything the status page shows, in one answer (``seen``: bookies shown before,
    kept as ``down`` when they vanish)."""
    urm = UnderReplicationManager(bk.zk, bk.msu.root)
    views = bookie_views(bk, urm, timeout, also=seen)
    seen.update(v.bookie_id for v in views)
    info = cluster_info(urm, views)
    logs = log_views(bk, tracker)
    streams = stream_views(bk, checkpoints)
    return {"time_ms": int(time.time() * 1000), "metadata_service_uri": bk.msu.uri,
            "bookies": [v.to_json() for v in views], "cluster_info": info,
            "autorecovery": autorecovery_status(urm), "under_replicated": under_replicated(urm),
            "logs": logs, "streams": streams,
            "problems": problems(views, info, logs, streams)}
