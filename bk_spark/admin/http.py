"""The HTTP admin API (BookKeeper's ``bookkeeper-http`` paths and field names) and the status
page, served by aiohttp on a thread of its own.

Theory of operation: :class:`AdminHttpServer` owns one thread running one asyncio event loop
with an aiohttp application. Handlers never block that loop: every fact is gathered by a
blocking function (:mod:`bk_spark.admin.facts`, ZooKeeper and gRPC calls) run in the loop's
default thread pool. The cluster client (:class:`~bk_spark.core.client.BookKeeper`) is opened
on the first request that needs it and closed by :meth:`AdminHttpServer.stop`; its lock is
the only lock here.

Served by a bookie (``bk bookie --http-port``) the API also answers for that bookie
(``/heartbeat``, ``/metrics``, ``/api/v1/bookie/{info,state,is_ready,gc}``); served by
``bk ui`` only the cluster-wide endpoints and the page answer.

Security: with the bookie's TLS on, the API is served over TLS with its certificate, and when
the bookie requires client certificates so does the API. Endpoints that change state need the
admin identity (:mod:`bk_spark.admin.access`). No answer carries a secret: ledger metadata is
shown without its password digest, and no credential is ever read into an answer.
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import logging
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from bk_spark.admin import access, facts
from bk_spark.errors import BKError, InvalidConfigError, NoSuchLedgerError, RecoveryError
from bk_spark.io.underreplication import UnderReplicationManager
from bk_spark.security import ClientSecurity
from bookie_server.access import AccessPolicy, peer_identities

if TYPE_CHECKING:
    from bk_spark.core.client import BookKeeper
    from bookie_server.server import BookieServer

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
MAX_READ_ENTRIES = 1000


@dataclass
class AdminContext:
    """What the handlers serve from: the cluster (by URI), and the bookie when there is one."""

    metadata_service_uri: str
    bookie: BookieServer | None = None
    policy: AccessPolicy = field(default_factory=AccessPolicy)
    loopback: bool = True
    security: ClientSecurity | None = None
    lost_bookie_recovery_delay_s: float | None = None
    checkpoints: tuple[Path, ...] = ()
    _bk: BookKeeper | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    tracker: facts.ActivityTracker = field(default_factory=facts.ActivityTracker)
    seen: set[str] = field(default_factory=set)

    def bk(self) -> BookKeeper:
        from bk_spark.core.client import BookKeeper, BookKeeperConfig
        from bk_spark.io.bookie_client import ClientConfig

        with self._lock:
            if self._bk is None:
                cfg = BookKeeperConfig(client=ClientConfig(add_timeout_s=2.0,
                                                           read_timeout_s=2.0))
                self._bk = BookKeeper(self.metadata_service_uri, cfg, security=self.security)
            return self._bk

    def urm(self) -> UnderReplicationManager:
        bk = self.bk()
        return UnderReplicationManager(bk.zk, bk.msu.root)

    def close(self) -> None:
        with self._lock:
            if self._bk is not None:
                self._bk.close()
                self._bk = None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _identities(request: web.Request) -> frozenset[str]:
    """The names the peer's verified certificate gives it (subject CN and every SAN), in
    the bookie's own terms (:func:`bookie_server.access.peer_identities`)."""
    cert = request.transport.get_extra_info("peercert") if request.transport else None
    if not cert:
        return frozenset()
    cns = [v for rdn in cert.get("subject", ()) for k, v in rdn if k == "commonName"]
    sans = [v for _k, v in cert.get("subjectAltName", ())]
    return peer_identities({"x509_common_name": cns, "x509_subject_alternative_name": sans})


def _json(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=_dumps)


def _dumps(obj: Any) -> str:
    import json

    return json.dumps(obj, indent=2, default=str)


def _error(status: int, message: str) -> web.Response:
    return _json({"error": message}, status)


def _int_param(request: web.Request, name: str, default: int | None = None) -> int:
    raw = request.query.get(name)
    if raw is None:
        if default is None:
            raise InvalidConfigError(f"query parameter {name} is required")
        return default
    try:
        return int(raw)
    except ValueError:
        raise InvalidConfigError(f"query parameter {name} must be an integer, got {raw!r}"
                                 ) from None


def make_app(ctx: AdminContext) -> web.Application:
    """The aiohttp application: BookKeeper's admin paths, the page, and the page's JSON."""

    async def run(fn: Callable[[], Any]) -> Any:
        return await asyncio.get_running_loop().run_in_executor(None, fn)

    @web.middleware
    async def guard(request: web.Request, handler: Callable) -> web.StreamResponse:
        kind = access.kind_of(request.method, request.path)
        role = ctx.policy.role(_identities(request)) if ctx.policy.restricted else None
        refused = access.decide(kind, ctx.policy.restricted, role, ctx.loopback)
        if refused is not None:
            return _error(403, refused)
        try:
            return await handler(request)
        except web.HTTPException:
            raise
        except NoSuchLedgerError as exc:
            return _error(404, str(exc))
        except InvalidConfigError as exc:
            return _error(400, str(exc))
        except BKError as exc:
            return _error(503, str(exc))

    def bookie() -> BookieServer:
        if ctx.bookie is None:
            raise web.HTTPNotFound(text="this server is `bk ui`, not a bookie: ask a "
                                        "bookie's --http-port")
        return ctx.bookie

    # ------------------------------------------------------------------ this bookie
    async def heartbeat(_r: web.Request) -> web.Response:
        return web.Response(text="OK\n")

    async def metrics(_r: web.Request) -> web.Response:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        body = generate_latest(bookie().metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def bookie_info(_r: web.Request) -> web.Response:
        b = bookie()
        used, free = await run(b.storage.disk_usage)
        m = b.metrics
        return _json({
            "bookieId": b.config.bookie_id, "freeSpace": free, "usedSpace": used,
            "totalSpace": used + free, "readOnly": b.storage.read_only,
            "ledgers": len(b.storage.ledger_ids()), "rack": b.config.rack,
            "addEntries": m.registry.get_sample_value("bookie_add_entries_total"),
            "readEntries": m.registry.get_sample_value("bookie_read_entries_total"),
            "timeMs": int(time.time() * 1000)})

    def _state(b: BookieServer) -> dict[str, Any]:
        started = b.grpc_server is not None
        running = started and b.storage.is_running()
        return {"running": running, "readOnly": b.storage.read_only,
                "shuttingDown": started and not running,
                "availableForHighPriorityWrites": running}

    async def bookie_state(_r: web.Request) -> web.Response:
        return _json(_state(bookie()))

    async def bookie_state_readonly(request: web.Request) -> web.Response:
        b = bookie()
        body = await request.json() if request.can_read_body else {}
        if not isinstance(body, dict) or not isinstance(body.get("readOnly"), bool):
            raise InvalidConfigError('send {"readOnly": true} or {"readOnly": false}')
        await run(lambda: b.storage.set_forced_read_only(body["readOnly"]))
        return _json(_state(b))

    async def is_ready(_r: web.Request) -> web.Response:
        b = bookie()
        st = _state(b)
        registered = b.registration is None or getattr(b.registration, "zk", None) is not None
        if st["running"] and registered:
            return web.Response(text="OK\n")
        return web.Response(status=503, text="bookie is not ready\n")

    async def gc_get(_r: web.Request) -> web.Response:
        return _json({"is_in_force_gc": gc_running.is_set()})

    gc_running = threading.Event()

    async def gc_put(_r: web.Request) -> web.Response:
        b = bookie()

        def collect() -> None:
            gc_running.set()
            try:
                b.storage.gc()
            finally:
                gc_running.clear()

        await run(collect)
        return _json({"is_in_force_gc": False, "done": True})

    # ------------------------------------------------------------------ the cluster
    async def list_bookies(request: web.Request) -> web.Response:
        kind = request.query.get("type", "rw")
        if kind not in ("rw", "ro"):
            raise InvalidConfigError("type must be rw or ro")

        def get() -> dict[str, str]:
            from bk_spark.io.registration import list_bookies as registered

            bk = ctx.bk()
            return {b.bookie_id: b.bookie_id.rpartition(":")[0]
                    for b in registered(bk.msu, zk=bk.zk) if b.read_only == (kind == "ro")}

        return _json(await run(get))

    async def list_bookie_info(_r: web.Request) -> web.Response:
        def get() -> dict[str, Any]:
            urm = ctx.urm()
            views = facts.bookie_views(ctx.bk(), urm, security=ctx.security)
            out: dict[str, Any] = {v.bookie_id: {
                "state": v.state, "ledgers": v.ledgers, "freeSpace": v.disk_free_bytes,
                "usedSpace": v.disk_used_bytes, "rack": v.rack} for v in views}
            out["ClusterInfo"] = facts.cluster_info(urm, views)
            return out

        return _json(await run(get))

    async def cluster_info(_r: web.Request) -> web.Response:
        def get() -> dict[str, Any]:
            urm = ctx.urm()
            return facts.cluster_info(urm, facts.bookie_views(ctx.bk(), urm,
                                                              security=ctx.security))

        return _json(await run(get))

    async def ar_status(_r: web.Request) -> web.Response:
        return _json(await run(lambda: facts.autorecovery_status(ctx.urm())))

    async def ar_status_put(request: web.Request) -> web.Response:
        body = await request.json() if request.can_read_body else {}
        if not isinstance(body, dict) or not isinstance(body.get("enabled"), bool):
            raise InvalidConfigError('send {"enabled": true} or {"enabled": false}')
        await run(lambda: ctx.urm().set_enabled(body["enabled"]))
        return _json(await run(lambda: facts.autorecovery_status(ctx.urm())))

    async def list_under_replicated(_r: web.Request) -> web.Response:
        rows = await run(lambda: facts.under_replicated(ctx.urm()))
        return _json({str(r["ledger"]): r["missing"] for r in rows})

    async def who_is_auditor(_r: web.Request) -> web.Response:
        auditor = await run(lambda: ctx.urm().auditor())
        if auditor is None:
            return _error(404, "no Auditor is elected: run bookies with --autorecovery, or "
                               "`bk autorecovery`")
        return _json({"Auditor": auditor})

    async def trigger_audit(_r: web.Request) -> web.Response:
        def audit() -> dict[str, Any]:
            from bk_spark.autorecovery.auditor import mark_ledgers_of
            from bk_spark.io.registration import list_bookies as registered
            from bk_spark.protocol.recovery_plan import bookies_of

            bk = ctx.bk()
            named: set[str] = set()
            for md in facts.all_ledgers(bk):
                named |= bookies_of(md)
            gone = named - {b.bookie_id for b in registered(bk.msu, zk=bk.zk)}
            marked = mark_ledgers_of(bk, ctx.urm(), gone) if gone else []
            return {"lostBookies": sorted(gone), "markedLedgers": marked}

        return _json(await run(audit))

    async def lost_bookie_recovery_delay(_r: web.Request) -> web.Response:
        if ctx.lost_bookie_recovery_delay_s is None:
            return _error(404, "this process runs no AutoRecovery (bk bookie --autorecovery "
                               "--lost-bookie-recovery-delay SECONDS)")
        return _json({"lostBookieRecoveryDelay": ctx.lost_bookie_recovery_delay_s})

    async def decommission(request: web.Request) -> web.Response:
        body = await request.json() if request.can_read_body else {}
        src = body.get("bookie_src") if isinstance(body, dict) else None
        if not isinstance(src, str) or ":" not in src:
            raise InvalidConfigError('send {"bookie_src": "HOST:PORT"}')

        def start() -> dict[str, Any]:
            from bk_spark.autorecovery.auditor import mark_ledgers_of
            from bk_spark.io.registration import mark_decommissioning

            bk = ctx.bk()
            urm = ctx.urm()
            if not urm.is_enabled():
                raise RecoveryError("autorecovery is disabled: `bk autorecovery enable` first")
            mark_decommissioning(bk.zk, bk.msu, src)
            marked = mark_ledgers_of(bk, urm, [src])
            return {"bookie_src": src, "markedLedgers": marked,
                    "next": f"wait until no ledger names it (bk ledger list), then stop it; "
                            f"`bk bookie decommission {src}` does both with progress"}

        return _json(await run(start))

    # ------------------------------------------------------------------ ledgers
    async def ledger_list(request: web.Request) -> web.Response:
        with_md = request.query.get("print_metadata", "false").lower() == "true"
        mds = await run(lambda: facts.all_ledgers(ctx.bk()))
        return _json({str(md.ledger_id): facts.ledger_summary(md) if with_md else None
                      for md in mds})

    async def ledger_metadata(request: web.Request) -> web.Response:
        lid = _int_param(request, "ledger_id")

        def get() -> dict[str, Any]:
            md = ctx.bk().ledger_metadata(lid)
            return {str(lid): facts.ledger_summary(md) | {
                "digest_type": md.digest_type,
                "fragments": [{"first_entry": f, "ensemble": list(e)}
                              for f, e in md.ensembles],
                "custom_metadata": dict(md.custom_metadata)}}

        return _json(await run(get))

    def _password(request: web.Request) -> bytes:
        # a header, never the URL: URLs end up in logs
        return request.headers.get("X-Ledger-Password", "").encode()

    async def ledger_read(request: web.Request) -> web.Response:
        lid = _int_param(request, "ledger_id")
        first = _int_param(request, "start_entry_id", 0)
        last_asked = request.query.get("end_entry_id")
        password = _password(request)

        def read() -> dict[str, Any]:
            rh = ctx.bk().open_ledger(lid, password, recovery=False)
            last = rh.last_add_confirmed if last_asked is None else min(
                int(last_asked), rh.last_add_confirmed)
            last = min(last, first + MAX_READ_ENTRIES - 1)
            out: dict[str, Any] = {}
            if first <= last:
                for e in rh.iter_entries(first, last):
                    try:
                        out[str(e.entry_id)] = e.payload.decode("utf-8")
                    except UnicodeDecodeError:
                        out[str(e.entry_id)] = "base64:" + base64.b64encode(e.payload).decode()
            return out

        return _json(await run(read))

    async def ledger_delete(request: web.Request) -> web.Response:
        lid = _int_param(request, "ledger_id")
        password = _password(request)
        await run(lambda: ctx.bk().delete_ledger(lid, password))
        return _json({"deleted": lid})

    # ------------------------------------------------------------------ the page
    async def ui_status(_r: web.Request) -> web.Response:
        return _json(await run(lambda: facts.status(ctx.bk(), ctx.tracker, ctx.seen,
                                                    ctx.checkpoints)))

    async def index(_r: web.Request) -> web.FileResponse:
        return web.FileResponse(STATIC / "index.html")

    app = web.Application(middlewares=[guard])
    r = app.router
    r.add_get("/", index)
    r.add_get("/ui", index)
    r.add_static("/ui/static", STATIC)
    r.add_get("/heartbeat", heartbeat)
    r.add_get("/metrics", metrics)
    r.add_get("/api/v1/bookie/info", bookie_info)
    r.add_get("/api/v1/bookie/state", bookie_state)
    r.add_put("/api/v1/bookie/state/readonly", bookie_state_readonly)
    r.add_get("/api/v1/bookie/is_ready", is_ready)
    r.add_get("/api/v1/bookie/gc", gc_get)
    r.add_put("/api/v1/bookie/gc", gc_put)
    r.add_get("/api/v1/bookie/list_bookies", list_bookies)
    r.add_get("/api/v1/bookie/list_bookie_info", list_bookie_info)
    r.add_get("/api/v1/bookie/cluster_info", cluster_info)
    r.add_get("/api/v1/autorecovery/status", ar_status)
    r.add_put("/api/v1/autorecovery/status", ar_status_put)
    r.add_get("/api/v1/autorecovery/list_under_replicated_ledger", list_under_replicated)
    r.add_get("/api/v1/autorecovery/who_is_auditor", who_is_auditor)
    r.add_put("/api/v1/autorecovery/trigger_audit", trigger_audit)
    r.add_get("/api/v1/autorecovery/lost_bookie_recovery_delay", lost_bookie_recovery_delay)
    r.add_put("/api/v1/autorecovery/decommission", decommission)
    r.add_get("/api/v1/ledger/list", ledger_list)
    r.add_get("/api/v1/ledger/metadata", ledger_metadata)
    r.add_get("/api/v1/ledger/read", ledger_read)
    r.add_delete("/api/v1/ledger/delete", ledger_delete)
    r.add_get("/api/v1/ui/status", ui_status)
    return app


def server_ssl_context(cert: Path, key: Path, client_ca: Path | None, require: bool
                       ) -> ssl.SSLContext:
    """The API's TLS: the bookie's certificate; client certificates of ``client_ca`` required
    when the bookie requires them (``--tls-client-auth require``)."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(cert), str(key))
    if require and client_ca is not None:
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(cafile=str(client_ca))
    return ctx


class AdminHttpServer:
    """One aiohttp server on a thread of its own (see the module docstring)."""

    def __init__(self, ctx: AdminContext, host: str, port: int,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.ctx, self.host, self.port, self.ssl_context = ctx, host, port, ssl_context
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    def start(self, timeout: float = 10.0) -> int:
        """Listen and serve in the background; returns the bound port."""
        self._thread = threading.Thread(target=self._serve, name="admin-http", daemon=True)
        self._thread.start()
        self._ready.wait(timeout)
        if self._error is not None:
            raise InvalidConfigError(f"cannot serve the HTTP admin API on {self.host}:{self.port}: "
                          f"{self._error} (port taken? choose another --http-port)")
        return self.port

    def _serve(self) -> None:
        loop = self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        runner = web.AppRunner(make_app(self.ctx), access_log=None)
        try:
            loop.run_until_complete(runner.setup())
            site = web.TCPSite(runner, self.host, self.port, ssl_context=self.ssl_context)
            loop.run_until_complete(site.start())
            self.port = int(runner.addresses[0][1])
        except BaseException as exc:  # reported by start()
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(runner.cleanup())
            loop.close()

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5.0)
        self.ctx.close()


def start_for_bookie(server: BookieServer, http_port: int, *,
                     security: ClientSecurity | None = None,
                     lost_bookie_recovery_delay_s: float | None = None) -> Callable[[], None]:
    """Serve the API of a (built) bookie on ``http_port``, on its listen address and with its
    TLS; returns the function that stops it (``bk bookie --http-port``)."""
    cfg = server.config
    ctx = AdminContext(
        metadata_service_uri=cfg.metadata_service_uri or "", bookie=server,
        policy=AccessPolicy.of(cfg.allow_clients, cfg.allow_bookies, cfg.allow_admins),
        loopback=is_loopback(cfg.host), security=security,
        lost_bookie_recovery_delay_s=lost_bookie_recovery_delay_s)
    tls = None
    if cfg.tls_cert is not None and cfg.tls_key is not None:
        tls = server_ssl_context(cfg.tls_cert, cfg.tls_key, cfg.tls_ca,
                                 cfg.tls_client_auth == "require")
    http = AdminHttpServer(ctx, cfg.host, http_port, tls)
    port = http.start()
    log.info("HTTP admin API on %s://%s:%d", "https" if tls else "http", cfg.host, port)
    return http.stop
