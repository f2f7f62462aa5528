"""``bk doctor``: what a support engineer would ask about, checked, each finding with its
remedy.

Checks, in order (each reads its facts from :mod:`bk_spark.admin.facts` or the project's own
stores):

1. ZooKeeper: every server of the connect string asked ``srvr`` (mode and latency), a quorum
   of them serving, and this client's own round trip;
2. bookies: each registered or known bookie reachable, its disk and readonly state;
3. cookies (``<root>/cookies/<bookie id>``, ``<root>/INSTANCEID``) where the cluster has them;
4. the Auditor and under-replication;
5. ledgers stuck OPEN with no writer, and logs whose writer is gone (no add during the sample
   on a ledger older than the grace period);
6. TLS certificates (the client's files, those given with ``--cert``, the bookies' own) that
   expire within ``cert_days``;
7. clock skew between each bookie (its HTTP API's time) and this machine.

A finding is ``ok``, ``info`` (nothing to do), ``warn`` or ``fail``; all is well only when
there is no ``warn`` nor ``fail`` (``bk doctor`` then exits 0).
"""

from __future__ import annotations

import datetime
import socket
import ssl
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bk_spark.admin import facts
from bk_spark.errors import BKError
from bk_spark.io.underreplication import UnderReplicationManager
from bk_spark.log import LEDGER_LOG_KEY
from bk_spark.protocol.ledger_metadata import LedgerState
from bk_spark.security import ClientSecurity, ZkSecurity

if TYPE_CHECKING:
    from bk_spark.core.client import BookKeeper

OK, INFO, WARN, FAIL = "ok", "info", "warn", "fail"
ZK_SLOW_MS = 200.0
DISK_LOW_FRACTION = 0.10
SKEW_LIMIT_S = 2.0


@dataclass(frozen=True)
class Finding:
    check: str
    status: str
    message: str
    remedy: str = ""

    def to_json(self) -> dict[str, str]:
        return asdict(self)


def all_well(findings: Iterable[Finding]) -> bool:
    return all(f.status in (OK, INFO) for f in findings)


# --------------------------------------------------------------------------- 1. ZooKeeper
def four_letter_word(host: str, port: int, word: str = "srvr", timeout: float = 2.0,
                     tls: ssl.SSLContext | None = None) -> str:
    """Ask one ZooKeeper server a four-letter word (over TLS on a ``secureClientPort``)."""
    with socket.create_connection((host, port), timeout=timeout) as raw:
        s = tls.wrap_socket(raw, server_hostname=host) if tls is not None else raw
        s.sendall(word.encode())
        chunks = []
        while chunk := s.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def zk_tls_context(zk: ZkSecurity | None) -> ssl.SSLContext | None:
    """The client's TLS to ZooKeeper (``BK_ZK_TLS_*``), for ``srvr`` on a TLS-only port."""
    if zk is None or zk.tls_ca is None:
        return None
    ctx = ssl.create_default_context(cafile=zk.tls_ca)
    ctx.check_hostname = False
    if zk.tls_cert and zk.tls_key:
        ctx.load_cert_chain(zk.tls_cert, zk.tls_key)
    return ctx


def check_zookeeper(hosts: str, bk: BookKeeper | None,
                    security: ClientSecurity | None = None) -> list[Finding]:
    out: list[Finding] = []
    servers = [hp.rpartition(":") for hp in hosts.split(",")]
    serving = 0
    tls = zk_tls_context(bk.security.zk if bk is not None else security.zk
                         if security is not None else ZkSecurity.from_env())
    for host, _, port in servers:
        try:
            text = four_letter_word(host, int(port), tls=tls)
        except OSError as exc:
            out.append(Finding("zookeeper", WARN, f"{host}:{port} does not answer ({exc})",
                               "start that ZooKeeper server, or check the address in the "
                               "metadata service URI"))
            continue
        fields = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
        mode = fields.get("Mode")
        if mode is None:  # srvr not allowed, or a TLS-only port: it answered all the same
            serving += 1
            out.append(Finding("zookeeper", INFO, f"{host}:{port} answers but not to srvr "
                                                   f"(4lw.commands.whitelist=srvr shows more)"))
            continue
        serving += 1
        latency = fields.get("Latency min/avg/max", "?")
        avg = _float(latency.split("/")[1]) if latency.count("/") == 2 else None
        status = WARN if avg is not None and avg > ZK_SLOW_MS else OK
        out.append(Finding("zookeeper", status, f"{host}:{port} is {mode}, latency "
                                                f"min/avg/max {latency} ms",
                           "a slow ZooKeeper slows every metadata change: check its disk "
                           "(dataLogDir on its own device)" if status == WARN else ""))
    quorum = len(servers) // 2 + 1
    if serving < quorum:
        out.append(Finding("zookeeper", FAIL, f"{serving} of {len(servers)} ZooKeeper servers "
                                              f"serve: no quorum ({quorum} needed)",
                           "start the stopped ZooKeeper servers"))
    if bk is not None:
        t0 = time.perf_counter()
        bk.zk.exists(bk.msu.root)
        ms = (time.perf_counter() - t0) * 1000
        out.append(Finding("zookeeper", WARN if ms > ZK_SLOW_MS else OK,
                           f"a metadata read from here takes {ms:.1f} ms"))
    return out


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


# --------------------------------------------------------------------------- 2. bookies
def check_bookies(views: list[facts.BookieView]) -> list[Finding]:
    if not views:
        return [Finding("bookies", FAIL, "no bookie is registered",
                        "start bookies (bk sandbox start, or bk bookie --data-dir ...)")]
    out = []
    for v in views:
        port = v.bookie_id.rpartition(":")[2]
        if v.state == facts.DOWN:
            out.append(Finding("bookies", FAIL, f"bookie {v.bookie_id} is down: {v.error}",
                               f"restart it (bk bookie --port {port} --data-dir ...); if it is "
                               f"gone for good, re-replicate its data: bk recover "
                               f"{v.bookie_id}"))
            continue
        used, free = v.disk_used_bytes or 0, v.disk_free_bytes or 0
        disk = f"{used / 2**20:.0f} MiB used, {free / 2**30:.1f} GiB free"
        if v.state == facts.READONLY:
            out.append(Finding("bookies", WARN, f"bookie {v.bookie_id} is readonly ({disk})",
                               "free space on its disk or add bookies; it turns writable by "
                               "itself once below the threshold"))
        elif free < DISK_LOW_FRACTION * (used + free):
            out.append(Finding("bookies", WARN, f"bookie {v.bookie_id}: disk almost full "
                                                f"({disk})",
                               "free space or add bookies before it turns readonly"))
        else:
            out.append(Finding("bookies", OK, f"bookie {v.bookie_id} is {v.state} ({disk}, "
                                              f"{v.ledgers} ledgers)"))
    return out


# --------------------------------------------------------------------------- 3. cookies
def check_cookies(bk: BookKeeper, views: list[facts.BookieView]) -> list[Finding]:
    """Each registered bookie's cookie (:mod:`bk_spark.io.cookies`), where the cluster has an
    instance id; a cookie of another instance id is a bookie of another cluster."""
    from bk_spark.io.cookies import CookieStore, read_instance_id

    instance = read_instance_id(bk.zk, bk.msu)
    store = CookieStore(bk.zk, bk.msu)
    if instance is None and not store.bookie_ids():
        return [Finding("cookies", INFO, "no cookies: this cluster does not record them")]
    out = []
    for v in views:
        if not v.registered:
            continue
        found = store.find(v.bookie_id)
        if found is None:
            out.append(Finding("cookies", WARN, f"bookie {v.bookie_id} runs without a cookie",
                               "restart it: a bookie writes its cookie when it starts (bk "
                               "cookie list shows them)"))
        elif instance is not None and found.value.instance_id != instance:
            out.append(Finding("cookies", FAIL, f"bookie {v.bookie_id}'s cookie names cluster "
                                                f"{found.value.instance_id}, not {instance}",
                               f"bk cookie show {v.bookie_id}; see the README's cookies "
                               f"section"))
    if not out:
        n = sum(v.registered for v in views)
        out.append(Finding("cookies", OK, f"instance {instance}: each of the {n} registered "
                                          f"bookies has its cookie"))
    return out


# --------------------------------------------------------------------------- 4. AutoRecovery
def check_autorecovery(urm: UnderReplicationManager) -> list[Finding]:
    status = facts.autorecovery_status(urm)
    out = []
    if status["auditor"] is None:
        out.append(Finding("autorecovery", FAIL, "no Auditor is elected: a lost bookie is "
                                                 "never noticed",
                           "run bookies with --autorecovery (the default of bk bookie), or "
                           "start one: bk autorecovery"))
    else:
        out.append(Finding("autorecovery", OK, f"Auditor {status['auditor']}, "
                                               f"{len(status['workers'])} workers"))
    if not status["enabled"]:
        out.append(Finding("autorecovery", WARN, "AutoRecovery is disabled",
                           "bk autorecovery enable"))
    if status["under_replicated"]:
        out.append(Finding("autorecovery", WARN, f"{status['under_replicated']} ledgers are "
                                                 f"under-replicated",
                           "bk ledger underreplicated shows them; AutoRecovery's workers copy "
                           "them (bk recover BOOKIE does it now)"))
    return out


# --------------------------------------------------------------------------- 5. writers
def check_writers(bk: BookKeeper, mds: list, grace_s: float, sample_s: float
                  ) -> list[Finding]:
    """OPEN ledgers older than ``grace_s`` whose last-add-confirmed did not move during
    ``sample_s`` (:class:`facts.ActivityTracker`, the rule of AutoRecovery's grace)."""
    now_ms = time.time() * 1000
    candidates = [md for md in mds if md.state == LedgerState.OPEN
                  and now_ms - md.ctime_ms >= grace_s * 1000]
    tracker = facts.ActivityTracker(grace_s=sample_s)
    t0 = time.monotonic()
    for md in candidates:
        tracker.observe(md.ledger_id, facts.bookie_lac(bk, md), t0)
    if candidates:
        time.sleep(max(0.0, sample_s - (time.monotonic() - t0)))
    out = []
    for md in candidates:
        still = tracker.observe(md.ledger_id, facts.bookie_lac(bk, md))
        if still < sample_s:
            continue
        log_name = dict(md.custom_metadata).get(LEDGER_LOG_KEY)
        what = f"log {log_name!r}: its writer is gone? ledger" if log_name else "ledger"
        out.append(Finding("writers", WARN,
                           f"{what} {md.ledger_id} is OPEN, created "
                           f"{(now_ms - md.ctime_ms) / 1000:.0f} s ago, and no add reached it "
                           f"during {sample_s:.0f} s",
                           f"if its writer is gone: bk ledger recover {md.ledger_id} "
                           f"--password ... (fences and closes it)"
                           + (f"; the next writer of the log does it: bk log append "
                              f"{log_name} ..." if log_name else "")))
    if not out:
        out.append(Finding("writers", OK, f"every OPEN ledger older than {grace_s:.0f} s is "
                                          f"being written ({len(candidates)} of them)"))
    return out


# --------------------------------------------------------------------------- 6. TLS
def cert_expiry(pem: bytes) -> datetime.datetime:
    from cryptography import x509

    return x509.load_pem_x509_certificate(pem).not_valid_after_utc


def check_certificates(named: dict[str, bytes], days: int) -> list[Finding]:
    now = datetime.datetime.now(datetime.UTC)
    out = []
    for what, pem in sorted(named.items()):
        try:
            until = cert_expiry(pem)
        except ValueError as exc:
            out.append(Finding("tls", WARN, f"{what}: not a PEM certificate ({exc})",
                               "point the option at the certificate file"))
            continue
        left = (until - now).days
        if until <= now:
            out.append(Finding("tls", FAIL, f"{what} expired on {until:%Y-%m-%d}",
                               "issue a new certificate and restart what uses it"))
        elif left < days:
            out.append(Finding("tls", WARN, f"{what} expires in {left} days ({until:%Y-%m-%d})",
                               "issue a new certificate before then and restart what uses it"))
        else:
            out.append(Finding("tls", OK, f"{what} valid until {until:%Y-%m-%d}"))
    return out


def gather_certificates(bk: BookKeeper | None, files: Iterable[Path],
                        views: list[facts.BookieView]) -> dict[str, bytes]:
    named: dict[str, bytes] = {}
    sec = bk.security if bk is not None else None
    paths = [*files]
    if sec is not None:
        paths += [Path(p) for p in (sec.tls_ca, sec.tls_cert, sec.zk.tls_ca, sec.zk.tls_cert)
                  if p]
    for p in paths:
        try:
            named[f"certificate {p}"] = p.read_bytes()
        except OSError as exc:
            named[f"certificate {p}"] = f"unreadable: {exc.strerror}".encode()
    for v in views:
        if v.state == facts.DOWN or sec is None or sec.tls_ca is None:
            continue
        host, _, port = v.bookie_id.rpartition(":")
        try:
            pem = ssl.get_server_certificate((host, int(port)), timeout=2.0)
        except (OSError, ssl.SSLError):
            continue
        named[f"bookie {v.bookie_id}'s certificate"] = pem.encode()
    return named


# --------------------------------------------------------------------------- 7. clocks
def check_clocks(views: list[facts.BookieView], measured_at_ms: float) -> list[Finding]:
    out = []
    unmeasured = []
    for v in views:
        if v.time_ms is None:
            if v.state != facts.DOWN:
                unmeasured.append(v.bookie_id)
            continue
        skew = (v.time_ms - measured_at_ms) / 1000
        if abs(skew) > SKEW_LIMIT_S:
            out.append(Finding("clocks", WARN, f"bookie {v.bookie_id}'s clock is {skew:+.1f} s "
                                               f"off this machine's",
                               "run NTP (chrony, systemd-timesyncd) on every host"))
        else:
            out.append(Finding("clocks", OK, f"bookie {v.bookie_id}'s clock is within "
                                             f"{SKEW_LIMIT_S:.0f} s ({skew:+.2f} s)"))
    if unmeasured:
        out.append(Finding("clocks", INFO, f"clock of {', '.join(unmeasured)} not measured: "
                                           f"no HTTP API (bk bookie --http-port)"))
    return out


# --------------------------------------------------------------------------- all of them
def run(metadata_service_uri: str | None, *, open_grace_s: float = 60.0,
        sample_s: float = 2.0, cert_files: Iterable[Path] = (), cert_days: int = 30,
        security: ClientSecurity | None = None) -> list[Finding]:
    """Every check, in the module docstring's order (``security``: the client's TLS files
    and ZooKeeper credentials; None: from the environment)."""
    from bk_spark.core.client import BookKeeper, BookKeeperConfig
    from bk_spark.io.bookie_client import ClientConfig
    from bk_spark.metadata_uri import parse_metadata_service_uri

    msu = parse_metadata_service_uri(metadata_service_uri)
    try:
        bk = BookKeeper(msu.uri, BookKeeperConfig(client=ClientConfig(
            add_timeout_s=2.0, read_timeout_s=2.0)), security=security)
    except BKError as exc:
        return [*check_zookeeper(msu.hosts, None, security),
                Finding("zookeeper", FAIL, f"cannot open a session: {exc}",
                        "start ZooKeeper (bk sandbox start) or fix --metadata-service-uri")]
    try:
        findings = check_zookeeper(msu.hosts, bk)
        urm = UnderReplicationManager(bk.zk, bk.msu.root)
        mds = facts.all_ledgers(bk)
        from bk_spark.protocol.recovery_plan import bookies_of

        named = set().union(*(bookies_of(md) for md in mds)) if mds else set()
        before = time.time() * 1000
        views = facts.bookie_views(bk, urm, timeout=2.0, also=named)
        measured = (before + time.time() * 1000) / 2
        findings += check_bookies(views)
        findings += check_cookies(bk, views)
        findings += check_autorecovery(urm)
        findings += check_writers(bk, mds, open_grace_s, sample_s)
        findings += check_certificates(gather_certificates(bk, cert_files, views), cert_days)
        findings += check_clocks(views, measured)
        return findings
    finally:
        bk.close()
