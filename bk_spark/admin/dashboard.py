"""The Grafana dashboard (``deploy/grafana/bk-spark.json``) and the Prometheus alert rules
(``deploy/prometheus/alerts.yml``), generated from the metric registries.

Every panel and rule is a row of :data:`PANELS` / :data:`ALERTS` naming the metrics it
plots; :func:`registry_metrics` lists what the bookie's registry
(:class:`bookie_server.metrics.BookieMetrics`, with the in-process AutoRecovery's
:class:`bk_spark.autorecovery.metrics.AutoRecoveryMetrics` on it) exports, and generation
fails when a row names a metric it does not export. ``python -m bk_spark.admin.dashboard``
(``make dashboards``) rewrites both files; ``tests/unit/test_dashboards.py`` fails when they
are stale, runs ``promtool check rules``, and an integration test checks that a running bookie
exports every metric named.

The offloader's metrics (:class:`bk_spark.offload.metrics.OffloadMetrics`) are on the
registry of a bookie run with ``--offload`` (or of ``bk offloader --metrics-port``). The
client exports one family of its own, reads served from Parquet (:data:`CLIENT_METRICS`,
:mod:`bk_spark.io.parquet_reads`, on its process's default registry: scrape the
application that reads); its requests are seen from the bookies' side (``bookie_rpc_seconds``,
``bookie_request_errors``). ``up`` is Prometheus' own (is the target scraped), not a
bookie's.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "bk-spark.json"
ALERT_RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
#: Prometheus' own series (not exported by any bookie).
SYNTHETIC = frozenset({"up"})
#: Exported by a reading client's process (:mod:`bk_spark.io.parquet_reads`), not by
#: bookies.
CLIENT_METRICS = frozenset({"offload_parquet_reads_total", "offload_parquet_read_entries_total"})

#: Metric names in a PromQL expression (names are followed by ``{``, ``[``, ``)`` or space).
_NAME = re.compile(r"\b((?:bookie|autorecovery|offload|python|process)_[a-z_]+|up)\b")


@dataclass(frozen=True)
class Panel:
    row: str
    title: str
    exprs: tuple[tuple[str, str], ...]  # (PromQL, legend)
    unit: str = "short"


def _q(metric: str, q: float, by: str = "instance") -> tuple[str, str]:
    return (f"histogram_quantile({q}, sum by (le, {by}) (rate({metric}_bucket[5m])))",
            f"p{int(q * 100) if q < 0.999 else 99.9} {{{{{by}}}}}")


def _rpc_q(rpc: str) -> tuple[tuple[str, str], ...]:
    return tuple((f"histogram_quantile({q}, sum by (le, instance) "
                  f'(rate(bookie_rpc_seconds_bucket{{rpc="{rpc}"}}[5m])))',
                  f"p{label} {{{{instance}}}}")
                 for q, label in ((0.5, "50"), (0.99, "99"), (0.999, "99.9")))


PANELS: tuple[Panel, ...] = (
    Panel("Bookie", "Adds per second", (
        ("sum by (instance) (rate(bookie_add_entries_total[1m]))", "{{instance}}"),), "ops"),
    Panel("Bookie", "Reads per second", (
        ("sum by (instance) (rate(bookie_read_entries_total[1m]))", "{{instance}}"),), "ops"),
    Panel("Bookie", "Bytes added and read per second", (
        ("sum by (instance) (rate(bookie_add_bytes_total[1m]))", "added {{instance}}"),
        ("sum by (instance) (rate(bookie_read_bytes_total[1m]))", "read {{instance}}")), "Bps"),
    Panel("Bookie", "Add latency (AddEntries RPC): p50, p99, p99.9", _rpc_q("AddEntries"), "s"),
    Panel("Bookie", "Read latency (ReadEntries RPC): p50, p99, p99.9", _rpc_q("ReadEntries"),
          "s"),
    Panel("Journal", "Journal fsync latency per group commit", (
        _q("bookie_journal_sync_seconds", 0.5), _q("bookie_journal_sync_seconds", 0.99),
        _q("bookie_journal_sync_seconds", 0.999)), "s"),
    Panel("Journal", "Records per group commit (p50, p99)", (
        _q("bookie_journal_group_records", 0.5), _q("bookie_journal_group_records", 0.99))),
    Panel("Journal", "Journal bytes written per second", (
        ("sum by (instance) (rate(bookie_journal_bytes_total[1m]))", "{{instance}}"),), "Bps"),
    Panel("Disk", "Disk usage of the data dir's file system", (
        ("bookie_disk_usage_ratio", "{{instance}}"),), "percentunit"),
    Panel("Disk", "Bytes under the data dir / free", (
        ("bookie_disk_used_bytes", "used {{instance}}"),
        ("bookie_disk_free_bytes", "free {{instance}}")), "bytes"),
    Panel("Disk", "Readonly bookies and ledgers held", (
        ("bookie_read_only", "readonly {{instance}}"),
        ("bookie_ledgers", "ledgers {{instance}}"))),
    Panel("GC and process", "Python GC collections per second", (
        ("sum by (instance, generation) (rate(python_gc_collections_total[1m]))",
         "gen {{generation}} {{instance}}"),), "ops"),
    Panel("GC and process", "Resident memory and CPU", (
        ("process_resident_memory_bytes", "rss {{instance}}"),
        ("rate(process_cpu_seconds_total[1m])", "cpu {{instance}}"))),
    Panel("Client requests (as bookies see them)", "RPC latency p99 by RPC", (
        _q("bookie_rpc_seconds", 0.99, "rpc"),), "s"),
    Panel("Client requests (as bookies see them)", "Requests answered with an error", (
        ("sum by (rpc, status) (rate(bookie_request_errors_total[5m]))",
         "{{rpc}} {{status}}"),), "ops"),
    Panel("AutoRecovery", "Under-replicated ledgers", (
        ("max(autorecovery_under_replicated_ledgers)", "under-replicated"),)),
    Panel("AutoRecovery", "Elected Auditor", (
        ("autorecovery_auditor_elected == 1", "{{instance}}"),)),
    Panel("AutoRecovery", "Re-replication: entries and bytes per second", (
        ("sum(rate(autorecovery_entries_replicated_total[1m]))", "entries"),
        ("sum(rate(autorecovery_bytes_replicated_total[1m]))", "bytes"))),
    Panel("AutoRecovery", "Time to re-replicate a ledger (p50, p99)", (
        _q("autorecovery_replicate_ledger_seconds", 0.5),
        _q("autorecovery_replicate_ledger_seconds", 0.99)), "s"),
    Panel("AutoRecovery", "Ledgers marked under-replicated per minute", (
        ("sum(increase(autorecovery_ledgers_marked_total[1m]))", "marked"),)),
    Panel("Tiered storage", "Offload lag per log", (
        ("max by (log) (offload_log_lag_seconds)", "{{log}}"),), "s"),
    Panel("Tiered storage", "Offload backlog per log (closed ledgers due)", (
        ("max by (log) (offload_log_backlog_ledgers)", "{{log}}"),)),
    Panel("Tiered storage", "Offloaded: ledgers and bytes per second", (
        ("sum(rate(offload_ledgers_total[1m]))", "ledgers"),
        ("sum(rate(offload_bytes_total[1m]))", "bytes"))),
    Panel("Tiered storage", "Offload failures per minute, failing logs, elected offloader", (
        ("sum(increase(offload_failures_total[1m]))", "failed passes"),
        ("sum(offload_log_failing)", "failing logs"),
        ("offload_elected == 1", "elected {{instance}}"))),
    Panel("Tiered storage", "Time to offload a ledger (p50, p99)", (
        _q("offload_ledger_seconds", 0.5), _q("offload_ledger_seconds", 0.99)), "s"),
    Panel("Tiered storage", "Reads served from Parquet per second (readers' processes)", (
        ("sum(rate(offload_parquet_reads_total[1m]))", "ledger reads"),
        ("sum(rate(offload_parquet_read_entries_total[1m]))", "entries"))),
)

@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    for_: str
    severity: str
    summary: str
    remedy: str


ALERTS: tuple[Alert, ...] = (
    Alert("BookieDown", 'up{job="bookie"} == 0', "1m", "critical",
          "bookie {{ $labels.instance }} is down",
          "restart it; if it is gone for good: bk recover HOST:PORT (bk doctor shows both)"),
    Alert("LedgersUnderReplicated", "max(autorecovery_under_replicated_ledgers) > 0", "5m",
          "warning", "{{ $value }} ledgers under-replicated for 5 minutes",
          "bk ledger underreplicated; check replication workers run (bk autorecovery status)"),
    Alert("BookieDiskAlmostFull", "bookie_disk_usage_ratio > 0.9", "5m", "warning",
          "bookie {{ $labels.instance }}: disk {{ $value | humanizePercentage }} full",
          "free disk space or add bookies before it turns readonly (at 95% by default)"),
    Alert("BookieReadonly", "bookie_read_only == 1", "1m", "warning",
          "bookie {{ $labels.instance }} is readonly: it accepts no adds",
          "free disk space (it turns writable by itself) or add bookies"),
    Alert("NoAuditor", "sum(autorecovery_auditor_elected) < 1 or "
          "absent(autorecovery_auditor_elected)", "2m", "critical",
          "no Auditor is elected: lost bookies are not re-replicated",
          "run bookies with --autorecovery (the default of bk bookie), or bk autorecovery"),
    Alert("OffloadFailing", "max by (log) (offload_log_failing) == 1", "10m", "warning",
          "offload of log {{ $labels.log }} has failed for 10 minutes",
          "bk offload status shows why (a password or key the offloader lacks, an "
          "unreachable target); its ledgers stay on the bookies meanwhile"),
    Alert("OffloadLagging", "max by (log) (offload_log_lag_seconds) > 3600", "15m", "warning",
          "log {{ $labels.log }}: its oldest ledger due for offload closed "
          "{{ $value | humanizeDuration }} ago",
          "bk offload status (backlog, failing); run an offloader (bk bookie --offload or "
          "bk offloader) if none is elected"),
)


def exprs_of() -> list[str]:
    return [e for p in PANELS for e, _ in p.exprs] + [a.expr for a in ALERTS]


def named_metrics(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (as exported: ``_bucket``, ``_total``)."""
    return set(_NAME.findall(expr))


def exported_names(families) -> set[str]:  # families: Iterable[prometheus Metric]
    """The sample names metric families export, labelled ones included before any sample
    (a counter ``x`` exports ``x_total``; a histogram ``x_bucket``, ``x_sum``, ``x_count``)."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"),
                "summary": ("_sum", "_count", "")}
    out: set[str] = set()
    for fam in families:
        out |= {fam.name + suffix for suffix in suffixes.get(fam.type, ("",))}
        out |= {s.name for s in fam.samples}
    return out


def registry_metrics() -> set[str]:
    """Every sample name the bookie's registry exports (with AutoRecovery and the
    offloader on it), and a reading client's (:data:`CLIENT_METRICS`)."""
    from bk_spark.autorecovery.metrics import AutoRecoveryMetrics
    from bk_spark.io.parquet_reads import ParquetReadMetrics
    from bk_spark.offload.metrics import OffloadMetrics
    from bookie_server.metrics import BookieMetrics

    m = BookieMetrics()
    m.watch_storage(ROOT, lambda: (0, 0), lambda: 0)
    AutoRecoveryMetrics(m.registry)
    OffloadMetrics(m.registry)
    exported = exported_names(m.registry.collect())
    client = exported_names(ParquetReadMetrics().registry.collect())
    assert client >= CLIENT_METRICS, client
    return exported | client


def check_names(exported: set[str]) -> None:
    """Raise when a panel or rule names a metric the registry does not export."""
    missing = {n for e in exprs_of() for n in named_metrics(e)} - exported - SYNTHETIC
    if missing:
        raise ValueError(f"panels or rules name metrics no registry exports: {sorted(missing)}")


def dashboard() -> dict:
    """The Grafana dashboard (schema 39; a Prometheus data source chosen on import)."""
    panels: list[dict] = []
    y, pid, row = 0, 1, None
    x = 0
    for p in PANELS:
        if p.row != row:
            row = p.row
            if x:
                y += 8
            panels.append({"type": "row", "title": row, "id": pid, "collapsed": False,
                           "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})
            pid, y, x = pid + 1, y + 1, 0
        panels.append({
            "type": "timeseries", "title": p.title, "id": pid,
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
            "fieldConfig": {"defaults": {"unit": p.unit}, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
            "targets": [{"expr": e, "legendFormat": legend, "refId": chr(ord("A") + i),
                         "datasource": {"type": "prometheus", "uid": "${datasource}"}}
                        for i, (e, legend) in enumerate(p.exprs)]})
        pid += 1
        x = 12 - x
        if x == 0:
            y += 8
    return {
        "title": "bk-spark: bookies, AutoRecovery, tiered storage", "uid": "bk-spark",
        "schemaVersion": 39,
        "version": 1, "editable": True, "tags": ["bk-spark", "bookkeeper"],
        "time": {"from": "now-1h", "to": "now"}, "refresh": "10s",
        "templating": {"list": [{"name": "datasource", "type": "datasource",
                                 "query": "prometheus", "label": "Prometheus"}]},
        "annotations": {"list": []}, "panels": panels,
        "description": "Generated by `make dashboards` (bk_spark/admin/dashboard.py) from the "
                       "bookie's metric registry; scrape each bookie's /metrics "
                       "(--http-port or --metrics-port) as job \"bookie\".",
    }


def alert_rules() -> str:
    """``deploy/prometheus/alerts.yml`` (Prometheus' rule file format), written by hand as
    YAML (no YAML library needed): every value is JSON-quoted, which YAML reads."""
    lines = ["# Generated by `make dashboards` (bk_spark/admin/dashboard.py): edit there.",
             "groups:", "  - name: bk-spark", "    rules:"]
    for a in ALERTS:
        lines += [f"      - alert: {a.name}", f"        expr: {json.dumps(a.expr)}",
                  f"        for: {a.for_}", "        labels:",
                  f"          severity: {a.severity}", "        annotations:",
                  f"          summary: {json.dumps(a.summary)}",
                  f"          remedy: {json.dumps(a.remedy)}"]
    return "\n".join(lines) + "\n"


def render() -> dict[Path, str]:
    check_names(registry_metrics())
    return {DASHBOARD: json.dumps(dashboard(), indent=2) + "\n", ALERT_RULES: alert_rules()}


def main() -> None:
    for path, text in render().items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
