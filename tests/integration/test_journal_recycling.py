"""A bookie reuses the journal files a checkpoint released, and a kill -9 during a reused
file's life replays the acknowledged records and nothing of the file's previous life."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from bk_spark.errors import BKError, NoSuchLedgerError
from bk_spark.io.bookie_client import BookieClient, ClientConfig
from bk_spark.proto import bookie_pb2 as pb
from bookie_server.journal import JOURNAL_SUFFIX, SPARE_PREFIX, iter_file_records

KEY = b"k" * 32
ENTRY = 8 * 1024  # ~120 entries per 1 MiB journal file


def payload(ledger: int, eid: int) -> bytes:
    return f"{ledger}/{eid}/".encode().ljust(ENTRY, b".")


def stale_tail(journal_dir: Path) -> bool:
    """Whether the journal file being written (the newest with a valid record) holds bytes
    past its last valid record that are not zeros: the records of its previous life (a
    fresh, zero-filled file has zeros there)."""
    files = sorted((p for p in journal_dir.glob(f"*{JOURNAL_SUFFIX}")
                    if not p.name.startswith(SPARE_PREFIX)), reverse=True)
    for path in files:
        seq = int(path.name[: -len(JOURNAL_SUFFIX)], 16)
        data = path.read_bytes()
        end = 0
        for _rtype, _body, after in iter_file_records(memoryview(data), seq):
            end = after
        if end > 0:
            return data.count(0, end) < len(data) - end
    return False


@pytest.fixture
def recycling_bookie(cluster_factory):
    # 1 MiB journal files and a checkpoint every 0.2 s: files are released and reused
    # within the test's first seconds.
    c = cluster_factory(1, extra_args=["--journal-file-size-mb", "1",
                                       "--max-entry-size", str(64 * 1024),
                                       "--checkpoint-interval", "0.2"])
    b = c.bookies[0]
    client = BookieClient(b.bookie_id, ClientConfig(add_timeout_s=10, read_timeout_s=10))
    yield b, client
    client.close()


def test_a_kill_9_in_a_reused_journal_file_replays_every_acknowledged_entry_and_nothing_else(
        recycling_bookie) -> None:
    b, client = recycling_bookie
    journal_dir = b.data_dir / "journal"
    acked: dict[int, bytes] = {}
    lock = threading.Lock()
    done = threading.Semaphore(0)

    def add(ledger: int, eid: int, track: bool) -> None:
        e = pb.Entry(ledger_id=ledger, entry_id=eid, lac=eid - 1, payload=payload(ledger, eid),
                     digest=b"\0" * 12)

        def cb(err: BKError | None) -> None:
            if err is None and track:
                with lock:
                    acked[eid] = e.payload
            done.release()
        client.add_entry(ledger, KEY, e, cb)

    # A ledger written into the first files, then deleted: its ADD records are what a
    # reused file holds from its previous life.
    for eid in range(300):
        add(5, eid, track=False)
    for _ in range(300):
        assert done.acquire(timeout=30)
    client.delete_ledger(5, KEY)

    # Ledger 7 until the current journal file is a reused one, then a kill -9 with adds in
    # flight.
    eid = 0
    deadline = time.monotonic() + 20
    while not (eid >= 600 and stale_tail(journal_dir)):
        assert time.monotonic() < deadline, "the journal never reused a file"
        for i in range(eid, eid + 40):
            add(7, i, track=True)
        for _ in range(40):
            assert done.acquire(timeout=30)
        eid += 40
    for i in range(eid, eid + 100):  # in flight at the kill
        add(7, i, track=True)
    b.kill()
    sent = eid + 100
    with lock:
        snapshot = dict(acked)
    assert len(snapshot) >= 600

    b.start()
    fresh = BookieClient(b.bookie_id, ClientConfig(read_timeout_s=10))
    try:
        got: dict[int, bytes] = {}
        for first in range(0, sent + 50, 200):
            resp = fresh.read_entries(7, entry_ids=list(range(first, first + 200)),
                                      master_key=KEY)
            got.update({e.entry_id: e.payload for e in resp.entries})
        lost = [i for i in sorted(snapshot) if got.get(i) != snapshot[i]]
        assert lost == [], f"{len(lost)} acknowledged entries lost or changed: {lost[:5]}"
        # Nothing else: only entries that were sent, each with its own payload (an entry
        # in flight at the kill may or may not be there).
        assert all(i < sent and got[i] == payload(7, i) for i in got)
        assert fresh.read_lac(7).last_entry < sent
        with pytest.raises(NoSuchLedgerError):
            fresh.read_entries(5, entry_ids=[0, 1], master_key=KEY)
    finally:
        fresh.close()
