"""The HTTP admin API of a bookie (``bk bookie --http-port``): BookKeeper's paths and field
names, readiness for probes, TLS and client certificates like the bookie's, the admin identity
for endpoints that change state, and no secret in any answer."""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
from typing import Any

from bk_spark.core.client import BookKeeper
from bk_spark.io.registration import list_bookies
from bk_spark.sandbox import make_secure_files
from bk_spark.security import ClientSecurity


def call(url: str, method: str = "GET", body: Any = None, ctx: ssl.SSLContext | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as resp:
            raw, status = resp.read(), resp.status
    except urllib.error.HTTPError as exc:
        raw, status = exc.read(), exc.code
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode()


def http_ports(uri: str) -> dict[str, int]:
    return {b.bookie_id: int(b.info["http_port"]) for b in list_bookies(uri)}


def wait_for(predicate, timeout: float = 20.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.2)


def test_http_admin_api_answers_bookkeepers_paths_without_secrets(cluster_factory,
                                                                    metadata_uri):
    cluster_factory(3, extra_args=["--http-port", "0"])
    ports = http_ports(metadata_uri)
    assert len(ports) == 3
    bookie_id, port = sorted(ports.items())[0]
    base = f"http://127.0.0.1:{port}"
    with BookKeeper(metadata_uri) as bk:
        lh = bk.create_ledger(3, 2, 2, password=b"s3cret-pw")
        for i in range(5):
            lh.add_entry(f"entry-{i}".encode())
        lh.close()
        lid = lh.id
        open_lh = bk.create_ledger(3, 2, 2, password=b"s3cret-pw")  # a writer left open
        open_lh.add_entry(b"x")

    assert call(base + "/heartbeat") == (200, "OK\n")
    status, metrics = call(base + "/metrics")
    assert status == 200 and "bookie_add_entries_total" in metrics
    assert call(base + "/api/v1/bookie/is_ready")[0] == 200
    status, info = call(base + "/api/v1/bookie/info")
    assert status == 200 and info["bookieId"] == bookie_id
    assert info["freeSpace"] > 0 and info["totalSpace"] >= info["freeSpace"]
    assert info["addEntries"] >= 1 and abs(info["timeMs"] - time.time() * 1000) < 60_000
    status, state = call(base + "/api/v1/bookie/state")
    assert state == {"running": True, "readOnly": False, "shuttingDown": False,
                     "availableForHighPriorityWrites": True}
    assert call(base + "/api/v1/bookie/list_bookies?type=rw")[1].keys() == ports.keys()
    assert call(base + "/api/v1/bookie/list_bookies?type=ro")[1] == {}

    def elected() -> dict | None:
        ci = call(base + "/api/v1/bookie/cluster_info")[1]
        return ci if ci["auditorElected"] else None

    ci = wait_for(elected)
    assert ci and ci["auditorId"] and ci["totalBookiesCount"] == 3
    assert (ci["writableBookiesCount"], ci["readonlyBookiesCount"],
            ci["unavailableBookiesCount"], ci["underReplicatedLedgersCount"]) == (3, 0, 0, 0)
    assert call(base + "/api/v1/autorecovery/who_is_auditor")[1] == {"Auditor":
                                                                     ci["auditorId"]}
    assert call(base + "/api/v1/autorecovery/list_under_replicated_ledger") == (200, {})
    assert call(base + "/api/v1/autorecovery/status")[1]["enabled"] is True
    assert call(base + "/api/v1/autorecovery/lost_bookie_recovery_delay")[1] == {
        "lostBookieRecoveryDelay": 60.0}
    status, infos = call(base + "/api/v1/bookie/list_bookie_info")
    assert status == 200 and set(infos) == set(ports) | {"ClusterInfo"}

    status, ledgers = call(base + "/api/v1/ledger/list?print_metadata=true")
    assert status == 200 and ledgers[str(lid)]["state"] == "CLOSED"
    assert ledgers[str(lid)]["last_entry_id"] == 4
    status, md = call(base + f"/api/v1/ledger/metadata?ledger_id={lid}")
    assert status == 200 and md[str(lid)]["fragments"][0]["first_entry"] == 0
    assert call(base + "/api/v1/ledger/metadata?ledger_id=999999999")[0] == 404
    assert call(base + "/api/v1/ledger/metadata?ledger_id=abc")[0] == 400
    # a read needs the password (a header, never the URL)
    assert call(base + f"/api/v1/ledger/read?ledger_id={lid}")[0] != 200
    status, entries = call(base + f"/api/v1/ledger/read?ledger_id={lid}&start_entry_id=1"
                                  f"&end_entry_id=3", headers={"X-Ledger-Password": "s3cret-pw"})
    assert (status, entries) == (200, {"1": "entry-1", "2": "entry-2", "3": "entry-3"})

    # no answer carries a secret: neither the password nor its digest
    from bk_spark.protocol.digest import password_digest

    digest = password_digest(b"s3cret-pw")
    for path in ("/api/v1/ledger/list?print_metadata=true",
                 f"/api/v1/ledger/metadata?ledger_id={lid}",
                 f"/api/v1/ledger/metadata?ledger_id={open_lh.id}", "/api/v1/ui/status",
                 "/api/v1/bookie/list_bookie_info", "/api/v1/bookie/info"):
        text = json.dumps(call(base + path)[1])
        assert "s3cret" not in text and "password" not in text.lower(), path
        assert str(digest) not in text, path

    # state changes from loopback: allowed on a bookie listening on 127.0.0.1 only
    assert call(base + "/api/v1/bookie/gc", "PUT")[0] == 200
    status, audit = call(base + "/api/v1/autorecovery/trigger_audit", "PUT")
    assert status == 200 and audit["lostBookies"] == []
    status, _ = call(base + f"/api/v1/ledger/delete?ledger_id={lid}", "DELETE",
                     headers={"X-Ledger-Password": "s3cret-pw"})
    assert status == 200
    assert call(base + f"/api/v1/ledger/metadata?ledger_id={lid}")[0] == 404
    with BookKeeper(metadata_uri) as bk:
        bk.recover_ledger(open_lh.id, b"s3cret-pw")


def test_http_admin_api_is_tls_with_client_certificates_and_changes_need_the_admin(
        cluster_factory, metadata_uri, tmp_path):
    f = make_secure_files(tmp_path / "secure")
    c = cluster_factory(1, extra_args=[
        "--http-port", "0", "--tls-cert", str(f["bookie_cert"]), "--tls-key",
        str(f["bookie_key"]), "--tls-ca", str(f["ca"]), "--tls-client-auth", "require",
        "--allow-client", "client", "--allow-admin", "admin", "--allow-bookie", "bookie"])
    port = wait_for(lambda: next(iter(http_ports(metadata_uri).values()), None))
    url = f"https://127.0.0.1:{port}"

    def ctx(who: str | None) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(f["ca"]))
        ctx.check_hostname = False
        if who is not None:
            ctx.load_cert_chain(str(f[f"{who}_cert"]), str(f[f"{who}_key"]))
        return ctx

    # plain HTTP is not served, and TLS without a client certificate is refused
    for attempt in (lambda: call(f"http://127.0.0.1:{port}/heartbeat"),
                    lambda: call(url + "/heartbeat", ctx=ctx(None))):
        try:
            status, _ = attempt()
        except (OSError, ssl.SSLError):
            continue
        raise AssertionError(f"answered {status} without a client certificate")
    assert call(url + "/heartbeat", ctx=ctx("client")) == (200, "OK\n")
    status, ci = call(url + "/api/v1/bookie/cluster_info", ctx=ctx("client"))
    assert status == 200 and ci["totalBookiesCount"] == 1, ci
    # a client may read, only the admin may change
    status, err = call(url + "/api/v1/autorecovery/trigger_audit", "PUT", ctx=ctx("client"))
    assert status == 403 and "--allow-admin" in err["error"]
    assert call(url + "/api/v1/bookie/gc", "PUT", ctx=ctx("client"))[0] == 403
    assert call(url + "/api/v1/autorecovery/trigger_audit", "PUT", ctx=ctx("admin"))[0] == 200
    sec = ClientSecurity(tls_ca=str(f["ca"]), tls_cert=str(f["client_cert"]),
                         tls_key=str(f["client_key"]))
    with BookKeeper(metadata_uri, security=sec) as bk:
        lh = bk.create_ledger(1, 1, 1, password=b"p")
        lh.add_entry(b"x")
        lh.close()
    assert call(url + f"/api/v1/ledger/delete?ledger_id={lh.id}", "DELETE",
                ctx=ctx("client"))[0] == 403
    assert call(url + f"/api/v1/ledger/delete?ledger_id={lh.id}", "DELETE",
                ctx=ctx("admin"), headers={"X-Ledger-Password": "p"})[0] == 200
    assert c.bookies[0].proc is not None and c.bookies[0].proc.poll() is None


def test_a_running_bookie_exports_every_metric_the_dashboard_and_alert_rules_name(
        cluster_factory, metadata_uri):
    from prometheus_client.parser import text_string_to_metric_families

    from bk_spark.admin import dashboard

    cluster_factory(1, extra_args=["--http-port", "0", "--offload"])  # its offloader's too
    port = next(iter(http_ports(metadata_uri).values()))
    with BookKeeper(metadata_uri) as bk:
        lh = bk.create_ledger(1, 1, 1, password=b"p")
        lh.add_entry(b"x")
        lh.close()
    status, text = call(f"http://127.0.0.1:{port}/metrics")
    assert status == 200
    exported = dashboard.exported_names(text_string_to_metric_families(text))
    named = {n for e in dashboard.exprs_of() for n in dashboard.named_metrics(e)}
    named -= dashboard.SYNTHETIC | dashboard.CLIENT_METRICS  # a reading client's
    assert named <= exported, sorted(named - exported)
    assert {"bookie_disk_usage_ratio", "bookie_read_only",
            "autorecovery_under_replicated_ledgers", "python_gc_collections_total"} <= exported
