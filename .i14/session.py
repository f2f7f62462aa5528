"""Drive the AutoRecovery session as a new user would type it, and record it verbatim.

Each step prints "$ command" and its output (stdout+stderr). The PIDs and bookie ids a user
would read off the screen are taken from the same outputs the transcript shows.
"""
import json
import re
import subprocess
import sys
import time
from pathlib import Path

DEMO = Path("/work/wt-i14/.i14/demo")
OUT = Path("/work/wt-i14/.i14/session.txt")
ENV = {"PATH": "/work/wt-i14/.venv/bin:/usr/bin:/bin", "HOME": "/root", "COLUMNS": "110",
       "BK_METADATA_SERVICE_URI": "zk://127.0.0.1:2191/ledgers", "LANG": "C.UTF-8"}
log = open(OUT, "w")


def say(text: str) -> None:
    log.write(text)
    log.flush()
    sys.stdout.write(text)
    sys.stdout.flush()


def run(cmd: str, show: bool = True, max_lines: int = 40) -> str:
    t0 = time.monotonic()
    p = subprocess.run(["bash", "-c", cmd], cwd=DEMO, env=ENV, capture_output=True, text=True)
    out = p.stdout + p.stderr
    if show:
        lines = out.rstrip("\n").split("\n") if out.strip() else []
        if len(lines) > max_lines:
            lines = lines[: max_lines // 2] + [f"... ({len(lines) - max_lines} lines trimmed)"] \
                + lines[-max_lines // 2:]
        say(f"$ {cmd}\n" + "".join(l + "\n" for l in lines)
            + (f"[exit {p.returncode}]\n" if p.returncode else "")
            + f"# ({time.monotonic() - t0:.1f}s)\n\n")
    return out


DEMO.mkdir(parents=True, exist_ok=True)
say("# AutoRecovery as a new user sees it: 5 bookies, a log, one bookie killed for good,\n"
    "# `bk ledger underreplicated` down to zero, a second bookie killed, the log read back.\n"
    f"# recorded {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by .i14/session.py\n\n")
say("$ export BK_METADATA_SERVICE_URI=zk://127.0.0.1:2191/ledgers\n\n")
run("bk sandbox start --bookies 5 --zk-port 2191 --bookie-port 3291 --data-dir ./sandbox "
    "--lost-bookie-recovery-delay 0")
try:
    run("bk bookies")
    run('seq -f "event %g" 1 30000 > events.txt && wc -l events.txt')
    run("bk log create events -E 3 -Qw 2 -Qa 2")
    run("bk log append events --file events.txt --roll-max-entries 3000")
    run("bk log show events")
    run("bk sandbox status --data-dir ./sandbox")
    state = json.loads((DEMO / "sandbox" / "sandbox.json").read_text())
    run("cat sandbox/sandbox.json", max_lines=60)
    pid_of = {b["id"]: b["pid"] for b in state["bookies"]}
    ledgers = json.loads(run("bk ledger list --json", show=False))
    first_lid = ledgers[0].get("ledger_id", ledgers[0].get("id"))
    shown = run(f"bk ledger show {first_lid}")
    victim = re.findall(r"127\.0\.0\.1:\d+", shown)[0]
    run(f"kill -9 {pid_of[victim]}    # bookie {victim}, in ledger {first_lid}'s ensemble")
    t0 = time.monotonic()
    seen = False
    for _ in range(150):
        out = run("bk ledger underreplicated", max_lines=16)
        m = re.search(r"(\d+) under-replicated ledgers", out)
        n = int(m.group(1)) if m else -1
        seen = seen or n > 0
        if (seen and n == 0) or time.monotonic() - t0 > 240:
            break
        time.sleep(1)
    run("bk autorecovery status")
    shown = run(f"bk ledger show {first_lid}")
    second = next(b for b in re.findall(r"127\.0\.0\.1:\d+", shown) if b != victim)
    run(f"kill -9 {pid_of[second]}    # a second bookie of the same ensemble: {second}")
    run("bk log read events -o back.txt")
    run("wc -l back.txt && cmp events.txt back.txt && echo 'all 30000 events read back, in order'")
finally:
    run("bk sandbox stop --data-dir ./sandbox")
