"""Every acknowledged change survives kill -9 of the bookie process.

A child process writes to a :class:`BookieStorage` from several threads (with checkpoints,
16 entries per slice, and GC running every few tens of milliseconds) and prints each
change once the storage acknowledged it. The test kills the child with SIGKILL (by its
own PID), restarts the storage on the same directory, and checks every acknowledged add,
fence and delete.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from bookie_server.config import BookieConfig
from bookie_server.storage import BookieStorage

REPO = Path(__file__).resolve().parents[2]

WRITER = textwrap.dedent(
    """
    import sys, threading
    sys.path.insert(0, sys.argv[1])
    import bookie_server.storage
    from bookie_server.config import BookieConfig
    from bookie_server.storage import BookieStorage

    # checkpoints of a few slices each: the kill lands inside a sliced one as often as not
    bookie_server.storage.CHECKPOINT_SLICE = 16
    run = int(sys.argv[3])
    cfg = BookieConfig(
        data_dir=sys.argv[2], journal_file_size=1 << 20, max_entry_size=64 * 1024,
        entry_log_size=256 * 1024, checkpoint_interval_s=0.03, gc_interval_s=0.05,
        disk_check_interval_s=0,
    )
    storage = BookieStorage(cfg)
    storage.start()
    lock = threading.Lock()

    def say(line):
        with lock:
            sys.stdout.write(line + "\\n")
            sys.stdout.flush()

    def payload(ledger, entry):
        return (b"%d/%d;" % (ledger, entry)) * 40

    def writer(ledger):
        entry = 0
        while True:
            batch = [(entry + k, entry + k - 1, payload(ledger, entry + k), b"d%d" % (entry + k))
                     for k in range(8)]
            storage.add_entries(ledger, b"key", batch)
            say("A %d %d" % (ledger, entry + 7))
            entry += 8

    def churn():
        n = 0
        while True:
            ledger = run * 1000 + 500 + n
            storage.add_entries(ledger, b"key", [(e, -1, b"x" * 2000, b"") for e in range(50)])
            if n % 3 == 0:
                storage.fence(ledger, b"key")
                say("F %d" % ledger)
            else:
                storage.delete_ledger(ledger)
                say("D %d" % ledger)
            n += 1

    for t in range(4):
        threading.Thread(target=writer, args=(run * 1000 + t,), daemon=True).start()
    threading.Thread(target=churn, daemon=True).start()
    say("started")
    threading.Event().wait()
    """
)


def config(data_dir: Path) -> BookieConfig:
    return BookieConfig(
        data_dir=data_dir,
        journal_file_size=1 << 20,
        max_entry_size=64 * 1024,
        entry_log_size=256 * 1024,
        checkpoint_interval_s=0,
        gc_interval_s=0,
        disk_check_interval_s=0,
    )


def run_and_kill(script: Path, data_dir: Path, run: int, min_acks: int) -> list[str]:
    """Start a writer, let it acknowledge ``min_acks`` adds, SIGKILL it; its output."""
    proc = subprocess.Popen(
        [sys.executable, str(script), str(REPO), str(data_dir), str(run)],
        stdout=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        adds = 0
        while adds < min_acks and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line.strip())
            adds += line.startswith("A ")
        assert adds >= min_acks, f"writer acknowledged only {adds} adds: {lines[-3:]}"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        rest, _ = proc.communicate(timeout=30)
    return lines + [line for line in rest.splitlines() if line]  # acknowledged before the kill


def check(storage: BookieStorage, lines: list[str]) -> None:
    last: dict[int, int] = {}
    for line in lines:
        kind, *args = line.split()
        if kind == "A":
            ledger, entry = int(args[0]), int(args[1])
            last[ledger] = max(last.get(ledger, -1), entry)
        elif kind == "F":
            assert storage.ledger_state(int(args[0]))[2], f"fence of {args[0]} lost"
        elif kind == "D":
            assert int(args[0]) not in storage.ledger_ids(), f"delete of {args[0]} lost"
    for ledger, entry in last.items():
        found, missing = storage.read_entries(ledger, range(entry + 1), max_entries=entry + 1)
        assert missing == [] and len(found) == entry + 1, f"ledger {ledger} lost entries"
        for e in found:
            assert e.payload == (b"%d/%d;" % (ledger, e.entry_id)) * 40
            assert e.digest == b"d%d" % e.entry_id
        assert storage.ledger_state(ledger)[0] >= entry - 1


def test_every_acknowledged_change_survives_kill_9(tmp_path):
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    data_dir = tmp_path / "bookie"
    first = run_and_kill(script, data_dir, run=1, min_acks=1500)
    second = run_and_kill(script, data_dir, run=2, min_acks=1500)  # crash after a replay too
    storage = BookieStorage(config(data_dir))
    storage.start()
    try:
        check(storage, first + second)
    finally:
        storage.close()
    storage = BookieStorage(config(data_dir))  # and again after a clean close
    storage.start()
    try:
        check(storage, first + second)
    finally:
        storage.close()
