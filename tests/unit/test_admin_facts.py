"""The pure parts of bk_spark.admin.facts: when an open ledger has lost its writer, and
which problems the status page shows with their fixes."""

from __future__ import annotations

from bk_spark.admin import facts


def test_an_open_ledger_is_idle_only_after_its_lac_stood_still_for_the_grace_period():
    t = facts.ActivityTracker(grace_s=30)
    old_ms = 0  # created long ago
    assert not t.idle(7, 5, old_ms, now=100.0)   # first sight starts the clock
    assert not t.idle(7, 5, old_ms, now=120.0)
    assert t.idle(7, 5, old_ms, now=130.0)       # 30 s without a new entry
    assert not t.idle(7, 6, old_ms, now=131.0)   # an add: alive again


def test_problems_name_the_down_bookie_the_missing_auditor_and_the_fixing_commands():
    views = [facts.BookieView("h:1", facts.DOWN, True, error="unreachable"),
             facts.BookieView("h:2", facts.READONLY, True),
             facts.BookieView("h:3", facts.RW, True)]
    info = {"auditorElected": False, "underReplicatedLedgersCount": 2,
            "ledgerReplicationEnabled": False}
    logs = [{"log": "events", "writer": "gone", "open_ledger": 9},
            {"log": "ok", "writer": "alive", "open_ledger": 3}]
    out = facts.problems(views, info, logs, [])
    text = " | ".join(p["what"] + " -> " + p["fix"] for p in out)
    assert "bk recover h:1" in text and "h:2 is readonly" in text
    assert "no Auditor" in text and "bk autorecovery enable" in text
    assert "bk ledger recover 9" in text and "log ok" not in text
    assert facts.problems([views[2]], {"auditorElected": True,
                                       "underReplicatedLedgersCount": 0,
                                       "ledgerReplicationEnabled": True}, [], []) == []


def test_short_error_keeps_the_cause_of_an_unreachable_bookie():
    long = ("bookie 127.0.0.1:1 unavailable (UNAVAILABLE: failed to connect to all addresses; "
            "last error: UNKNOWN: ipv4:127.0.0.1:1: Failed to connect to remote host: "
            "Connection refused)")
    assert facts.short_error(long) == "unreachable: connection refused"
    assert len(facts.short_error("x" * 500)) == 120
