"""``bk offload status`` in 80 columns (rich's width when the output is not a terminal):
every header whole, log names and targets whole (a long target folds, nothing is cut)."""

from __future__ import annotations

import io

from rich.console import Console

from bk_spark.cli import offload

HEADERS = ("log", "bookies", "offloading", "both", "offloaded", "backlog", "lag", "offload",
           "after", "deletion lag", "target")


def _facts() -> dict:
    def log(name: str, target: str | None, failing: dict | None) -> dict:
        return {"log": name, "after": "ledgers:2", "target": target, "deletion_lag_ms": 60_000,
                "tiers": {"bookies": 3, "offloading": 1, "both": 12, "offloaded": 120},
                "backlog": 4, "lag_ms": 12_345, "parquet_bytes": 0, "failing": failing}

    return {"offloader": "127.0.0.1:3181", "logs": [
        log("orders-events", "file:///var/lib/bookkeeper/offload/orders-events-archive", None),
        log("clicks", None, {"reason": "RecoveryKeyUnavailableError: no key", "since_ms": 0,
                             "passes": 3})]}


def test_offload_status_is_readable_in_80_columns(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(offload, "console", Console(file=out, width=80))
    offload.render_offload_status(_facts())
    text = out.getvalue()
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "…" not in text
    header_lines = [line for line in lines if line.startswith(" log ")]
    assert len(header_lines) == 2
    for h in HEADERS:
        assert any(f" {h} " in f" {line} " for line in header_lines), h
    assert any("orders-events" in line and "120" in line for line in lines)
    policy = header_lines[1]
    col = policy.index(" target ") + 1
    below = lines[lines.index(policy) + 2:]
    folded = "".join(line[col:].strip() for line in below[:2])
    assert folded == "file:///var/lib/bookkeeper/offload/orders-events-archive"
    assert "log clicks: offload failing" in text


def test_offload_status_names_ledgers_waiting_for_a_keyholder_and_who_offloads_them(
        monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(offload, "console", Console(file=out, width=80))
    facts = _facts()
    facts["logs"][0]["waiting_for_keyholder"] = [
        {"ledger_id": 7, "since_ms": None, "claimed_by": "127.0.0.1:3182"},
        {"ledger_id": 9, "since_ms": None, "claimed_by": None}]
    offload.render_offload_status(facts)
    text = " ".join(out.getvalue().split())
    assert "log orders-events: ledger 7 waits for a keyholder" in text
    assert "offloading by 127.0.0.1:3182" in text
    assert "ledger 9 waits for a keyholder" in text and "bk bookie --offload" in text
