"""The Grafana dashboard and Prometheus alert rules in deploy/: generated from the metric
registries (stale files fail), loadable, and accepted by Prometheus' own promtool."""

from __future__ import annotations

import json
import shutil
import subprocess

from bk_spark.admin import dashboard


def test_committed_dashboard_and_rules_are_what_the_generator_writes():
    for path, text in dashboard.render().items():
        assert path.read_text() == text, f"{path} is stale: run `make dashboards`"


def test_the_dashboard_loads_and_every_panel_plots_a_metric_the_registry_exports():
    board = json.loads(dashboard.DASHBOARD.read_text())
    graphs = [p for p in board["panels"] if p["type"] == "timeseries"]
    rows = {p["title"] for p in board["panels"] if p["type"] == "row"}
    assert {"Bookie", "Journal", "Disk", "GC and process", "AutoRecovery",
            "Tiered storage"} <= rows
    assert len({p["id"] for p in board["panels"]}) == len(board["panels"])
    exported = dashboard.registry_metrics()
    for p in graphs:
        assert p["targets"], p["title"]
        for t in p["targets"]:
            names = dashboard.named_metrics(t["expr"])
            assert names and names <= exported, (p["title"], names - exported)
    titles = " ".join(p["title"] for p in graphs)
    for word in ("Adds", "Reads", "latency", "fsync", "Disk", "GC", "Under-replicated",
                 "Offload lag per log", "Reads served from Parquet"):
        assert word in titles


def test_alert_rules_cover_the_operators_cases_and_pass_promtool():
    names = {a.name for a in dashboard.ALERTS}
    assert names == {"BookieDown", "LedgersUnderReplicated", "BookieDiskAlmostFull",
                     "BookieReadonly", "NoAuditor", "OffloadFailing", "OffloadLagging"}
    assert {a.for_ for a in dashboard.ALERTS if a.name == "LedgersUnderReplicated"} == {"5m"}
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: `make test` installs Debian's prometheus"
    out = subprocess.run([promtool, "check", "rules", str(dashboard.ALERT_RULES)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "SUCCESS: 7 rules found" in out.stdout, out.stdout + out.stderr
