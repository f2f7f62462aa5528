"""The operator shell (`bk ledger|log|simpletest|bookie-sanity`) as an operator runs it:
real `python -m bk_spark.cli` processes against real bookies and ZooKeeper."""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bk_spark.core import BookKeeper
from bk_spark.errors import BKError

CLI = [sys.executable, "-m", "bk_spark.cli"]


def bk(*args: str, stdin: str | None = None, timeout: float = 60
       ) -> subprocess.CompletedProcess:
    """Run `bk ...`; stdin is never a terminal, as in a script."""
    return subprocess.run([*CLI, *args], input=stdin, capture_output=True, text=True,
                          timeout=timeout, stdin=None if stdin is not None else subprocess.DEVNULL)


def ok(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    r = bk(*args, stdin=stdin)
    assert r.returncode == 0, f"bk {' '.join(args)}: {r.stderr}"
    return r


def ok_json(*args: str, stdin: str | None = None):
    return json.loads(ok(*args, "--json", stdin=stdin).stdout)


def assert_one_line_error(r: subprocess.CompletedProcess, *fragments: str) -> None:
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    for f in fragments:
        assert f in lines[0], (f, lines[0])


def test_ledger_list_show_read_recover_delete(cluster, metadata_uri: str) -> None:
    m = ("-m", metadata_uri)
    binary = bytes(range(256))
    with BookKeeper(metadata_uri) as client:
        closed = client.create_ledger(3, 2, 2, password=b"pw", custom_metadata={"app": "demo"})
        for i in range(5):
            closed.add_entry(f"entry {i}".encode())
        closed.add_entry(binary)
        closed.close()
        live = client.create_ledger(3, 2, 2, password=b"pw")
        for i in range(3):
            live.add_entry(f"live {i}".encode())
        # The idle writer's explicit LAC reaches the bookies: all 3 entries are readable.
        assert client.open_ledger(live.id, b"pw", recovery=False).wait_for_entry(2, 10)

        listed = {x["ledger_id"]: x for x in ok_json("ledger", "list", *m)}
        assert listed[closed.id]["state"] == "CLOSED" and listed[closed.id]["last_entry_id"] == 5
        assert listed[live.id]["state"] == "OPEN" and listed[live.id]["last_entry_id"] is None
        human = ok("ledger", "list", *m).stdout
        assert "CLOSED" in human and "OPEN" in human and "2 ledgers" in human

        shown = ok_json("ledger", "show", str(closed.id), *m)
        assert shown["custom_metadata"] == {"app": "demo"} and shown["password_set"]
        assert shown["fragments"][0]["first_entry"] == 0
        assert len(shown["fragments"][0]["ensemble"]) == 3
        assert "app" in ok("ledger", "show", str(closed.id), *m).stdout

        read = ok_json("ledger", "read", str(closed.id), "-p", "pw", *m)
        assert [e["payload"] for e in read[:5]] == [f"entry {i}" for i in range(5)]
        assert read[5]["encoding"] == "base64"
        assert base64.b64decode(read[5]["payload"]) == binary
        part = ok_json("ledger", "read", str(closed.id), "-p", "pw", "--from", "1", "--to", "2",
                       *m)
        assert [e["entry_id"] for e in part] == [1, 2]
        assert "entry 4" in ok("ledger", "read", str(closed.id), "-p", "pw", *m).stdout
        assert_one_line_error(bk("ledger", "read", str(closed.id), "-p", "nope", *m),
                              "wrong password", "--password")

        # The default read does not fence: the writer goes on; recovery fences and closes.
        seen = ok_json("ledger", "read", str(live.id), "-p", "pw", *m)
        assert [e["payload"] for e in seen] == ["live 0", "live 1", "live 2"]
        assert live.add_entry(b"live 3") == 3
        recovered = ok_json("ledger", "recover", str(live.id), "-p", "pw", *m)
        assert recovered["state_before"] == "OPEN" and recovered["state"] == "CLOSED"
        assert recovered["last_entry_id"] == 3
        with pytest.raises(BKError):
            live.add_entry(b"after recovery", timeout=10)
        again = ok("ledger", "recover", str(live.id), "-p", "pw", *m).stdout
        assert "already CLOSED" in again

    assert_one_line_error(bk("ledger", "delete", str(closed.id), *m), "--yes")
    assert_one_line_error(bk("ledger", "delete", str(closed.id), "--yes", *m),
                          "wrong password", "--password")
    ok("ledger", "delete", str(closed.id), "--yes", "--password", "pw", *m)
    assert_one_line_error(bk("ledger", "show", str(closed.id), *m), "does not exist")
    assert [x["ledger_id"] for x in ok_json("ledger", "list", *m)] == [live.id]


def test_log_create_append_read_show_truncate_delete(cluster, metadata_uri: str,
                                                     tmp_path: Path) -> None:
    m = ("-m", metadata_uri)
    created = ok_json("log", "create", "events", "-E", "3", "-Qw", "2", "-Qa", "2",
                      "-P", "owner=ops", *m)
    assert created["properties"]["owner"] == "ops"
    assert_one_line_error(bk("log", "create", "events", *m), "already exists")

    first = ok_json("log", "append", "events", "hello", "world", *m)
    assert first["entries"] == 2 and len(first["positions"]) == 2
    l1 = int(first["first"].split(":")[0])
    bulk = ok_json("log", "append", "events", "--count", "3000", "--size", "64", *m)
    assert bulk["entries"] == 3000 and bulk["bytes"] == 3000 * 64
    assert bulk["entries_per_s"] > 0 and "positions" not in bulk
    l2 = int(bulk["first"].split(":")[0])
    assert bulk["last"] == f"{l2}:2999"
    piped = ok_json("log", "append", "events", "-", *m, stdin="line one\nline two\n")
    l3 = int(piped["first"].split(":")[0])
    assert piped["positions"] == [f"{l3}:0", f"{l3}:1"]

    assert [(x["log"], x["ledgers"]) for x in ok_json("log", "list", *m)] == [("events", 3)]
    shown = ok_json("log", "show", "events", *m)
    rows = shown["ledgers"]
    assert [r["ledger_id"] for r in rows] == [l1, l2, l3]
    assert [r["entries"] for r in rows] == [2, 3000, 2]
    assert {r["state"] for r in rows} == {"CLOSED"}
    assert all(r["first_ts_ms"] <= r["last_ts_ms"] for r in rows)
    assert shown["properties"]["bk-spark.ensemble_size"] == 3
    assert "3004" in ok("log", "show", "events", *m).stdout

    records = ok_json("log", "read", "events", *m)
    assert len(records) == 3004
    payloads = [r["payload"] for r in records]
    assert payloads[:2] == ["hello", "world"] and payloads[-2:] == ["line one", "line two"]
    assert all(p.startswith(f"{i:010d} ") for i, p in enumerate(payloads[2:3002]))
    window = ok_json("log", "read", "events", "--from", f"{l2}:2998", "--limit", "3", *m)
    assert [r["position"] for r in window] == [f"{l2}:2998", f"{l2}:2999", f"{l3}:0"]
    since = ok_json("log", "read", "events", "--timestamp-ms", str(records[-2]["timestamp_ms"]),
                    "--limit", "1", *m)
    assert since[0]["position"] == f"{l3}:0"
    out = tmp_path / "events.txt"
    assert "wrote 3004 records" in ok("log", "read", "events", "--output", str(out), *m).stdout
    assert out.read_text().splitlines()[:2] == ["hello", "world"]
    assert "hello" in ok("log", "read", "events", "--limit", "2", *m).stdout

    truncated = ok_json("log", "truncate", "events", "--before", f"{l3}:0", "--yes", *m)
    assert truncated["dropped"] == [l1, l2]
    assert_one_line_error(bk("ledger", "show", str(l1), *m), "does not exist")
    assert [r["payload"] for r in ok_json("log", "read", "events", *m)] == ["line one",
                                                                             "line two"]
    assert ok_json("log", "delete", "events", "--yes", *m)["deleted_ledgers"] == [l3]
    assert ok_json("log", "list", *m) == []


def test_tail_prints_entries_another_process_appends(cluster, metadata_uri: str) -> None:
    m = ("-m", metadata_uri)
    ok("log", "create", "feed", *m)

    def tail(*extra: str) -> subprocess.Popen:
        p = subprocess.Popen([*CLI, "log", "tail", "feed", *m, *extra], text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             stdin=subprocess.DEVNULL)
        assert p.stderr is not None
        assert "tailing log 'feed'" in p.stderr.readline()  # positioned: ready for entries
        return p

    limited = tail("--json", "--timeout", "30", "--limit", "3")
    until_ctrl_c = tail()
    try:
        ok("log", "append", "feed", "one", "two", "three", *m)
        out, _err = limited.communicate(timeout=30)
        assert limited.returncode == 0
        got = [json.loads(line) for line in out.splitlines()]
        assert [g["payload"] for g in got] == ["one", "two", "three"]
        deadline = time.monotonic() + 20
        seen = ""
        assert until_ctrl_c.stdout is not None
        while seen.count("\n") < 3 and time.monotonic() < deadline:
            seen += until_ctrl_c.stdout.readline()
        assert [line.split("\t")[2] for line in seen.splitlines()] == ["one", "two", "three"]
        until_ctrl_c.send_signal(signal.SIGINT)
        _out, err = until_ctrl_c.communicate(timeout=30)
        assert until_ctrl_c.returncode == 0 and "3 records" in err
        assert "Traceback" not in err
    finally:
        for p in (limited, until_ctrl_c):
            if p.poll() is None:
                p.kill()
                p.wait()


def test_simpletest_verifies_a_round_trip_and_cleans_up(cluster, metadata_uri: str) -> None:
    m = ("-m", metadata_uri)
    report = ok_json("simpletest", "--entries", "500", "--size", "32", *m)
    assert report["ok"] and report["verified"] == 500
    assert report["write"]["entries_per_s"] > 0 and report["read"]["entries_per_s"] > 0
    assert ok_json("ledger", "list", *m) == []  # its ledger is deleted
    assert "simpletest OK" in ok("simpletest", "--entries", "50", "-E", "2", "-Qw", "2",
                                 "-Qa", "1", *m).stdout
    assert_one_line_error(bk("simpletest", "-E", "5", *m), "need 5 writable bookies",
                          "--ensemble")


def test_bookie_sanity_checks_each_bookie_and_fails_for_a_dead_one(cluster,
                                                                   metadata_uri: str) -> None:
    m = ("-m", metadata_uri)
    results = ok_json("bookie-sanity", *m)
    assert sorted(r["bookie"] for r in results) == sorted(b.bookie_id for b in cluster.bookies)
    assert all(r["ok"] and r["registered"] == "rw" for r in results)
    assert ok_json("ledger", "list", *m) == []  # the check ledgers are deleted
    assert ok("bookie-sanity", *m).stdout.count("OK") == 3

    hung, dead = cluster.bookies[0], cluster.bookies[1]
    hung.pause()  # still registered, answers nothing
    try:
        r = bk("bookie-sanity", "--timeout", "1", "--json", *m)
    finally:
        hung.resume()
    assert_one_line_error(r, "1 of 3 bookies failed", hung.bookie_id)
    by_id = {x["bookie"]: x for x in json.loads(r.stdout)}
    assert not by_id[hung.bookie_id]["ok"]
    assert all(x["ok"] for b, x in by_id.items() if b != hung.bookie_id)

    dead.stop()
    r = bk("bookie-sanity", "--bookie", dead.bookie_id, "--timeout", "1", *m)
    assert_one_line_error(r, "1 of 1 bookies failed")
    assert "FAIL" in r.stdout


def test_errors_are_one_line_with_exit_code_1(metadata_uri: str) -> None:
    """Unknown ledger or log, bad positions, bad names, no bookies: one line, exit 1."""
    m = ("-m", metadata_uri)
    cases = {
        ("ledger", "show", "424242"): ["ledger 424242 does not exist", "bk ledger list"],
        ("ledger", "read", "424242"): ["ledger 424242 does not exist"],
        ("log", "read", "nope"): ["log 'nope' does not exist", "bk log create nope"],
        ("log", "show", "nope"): ["log 'nope' does not exist"],
        ("log", "read", "nope", "--from", "12-0"): ["--from '12-0'", "LEDGER:ENTRY"],
        ("log", "truncate", "nope", "--before", "latest"): ["--before 'latest'"],
        ("log", "append", "nope", "hi"): ["--create"],
        ("log", "append", "nope"): ["MESSAGE", "--file", "--count"],
        ("log", "create", "no/slash"): ["log name 'no/slash'"],
        ("log", "create", "q", "-E", "2", "-Qw", "3"): ["must be >= write_quorum_size"],
        ("simpletest",): ["need 3 writable bookies, 0 registered"],
        ("bookie-sanity",): ["no bookie is registered"],
    }
    procs = {args: subprocess.Popen([*CLI, *args, *m], text=True, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
             for args in cases}
    for args, p in procs.items():
        out, err = p.communicate(timeout=60)
        r = subprocess.CompletedProcess(p.args, p.returncode, out, err)
        assert_one_line_error(r, *cases[args])
