"""commit_ledgers: closed ledgers appended to a log in one CAS with a transaction id.

Against real bookies and ZooKeeper: the ledgers are written and closed first (as Spark
tasks do), then added by the owner's take-over protocol (fence the last two, CAS).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from bk_spark.core import BookKeeper
from bk_spark.errors import LogOwnershipLostError, NoSuchLedgerError
from bk_spark.io.bookie_client import BookieClient
from bk_spark.log import (
    ClosedLedger,
    commit_ledgers,
    committed_txn,
    create_log,
    log_ledgers,
    log_metadata,
    open_log_reader,
    open_log_writer,
    write_closed_ledger,
)
from bk_spark.protocol.ledger_metadata import LedgerState
from bk_spark.protocol.log_format import LogLimits, encode_entry, now_ms


@pytest.fixture
def bk(cluster, metadata_uri: str) -> Iterator[BookKeeper]:
    client = BookKeeper(metadata_uri)
    yield client
    client.close()


def closed_ledger(bk: BookKeeper, payloads: list[bytes]) -> ClosedLedger:
    """A ledger written outside any log, framed like a log's entries, then closed."""
    lh = bk.create_ledger(3, 2, 2)
    first = now_ms()
    stamps = [first + i for i in range(len(payloads))]
    for p, ts in zip(payloads, stamps, strict=True):
        lh.add_entry(encode_entry(p, ts))
    lh.close()
    return ClosedLedger(lh.id, len(payloads) - 1, first, stamps[-1] if stamps else first)


def read_all(bk: BookKeeper, name: str) -> list[bytes]:
    with open_log_reader(bk, name, "earliest") as r:
        return [rec.payload for rec in r.read_available()]


def test_commit_appends_closed_ledgers_and_the_txn_id_in_one_cas(bk):
    a = closed_ledger(bk, [b"a0", b"a1"])
    b = closed_ledger(bk, [b"b0"])
    result = commit_ledgers(bk, "events", [a, b], txn_key="sink-1", txn_id=0,
                            properties={"format": "raw"})
    assert result.committed
    md = log_metadata(bk, "events")
    assert committed_txn(md, "sink-1") == 0 and md.properties["format"] == "raw"
    infos = log_ledgers(bk, "events")
    assert [(i.ledger_id, i.last_entry_id) for i in infos] == [(a.ledger_id, 1),
                                                               (b.ledger_id, 0)]
    assert infos[0].first_ts_ms == a.first_ts_ms and infos[0].last_ts_ms == a.last_ts_ms
    assert read_all(bk, "events") == [b"a0", b"a1", b"b0"]


def test_a_txn_id_committed_already_adds_nothing(bk):
    commit_ledgers(bk, "events", [closed_ledger(bk, [b"x"])], txn_key="s", txn_id=4)
    again = closed_ledger(bk, [b"x"])
    assert not commit_ledgers(bk, "events", [again], txn_key="s", txn_id=4).committed
    assert not commit_ledgers(bk, "events", [again], txn_key="s", txn_id=2).committed
    assert commit_ledgers(bk, "events", [closed_ledger(bk, [b"y"])], txn_key="other",
                          txn_id=0).committed  # another sink has its own ids
    assert read_all(bk, "events") == [b"x", b"y"]


def test_commit_fences_the_log_writer_that_owned_the_log(bk):
    w = open_log_writer(bk, "events")
    acked = [w.append(f"w{i}".encode()) for i in range(5)]
    assert acked
    commit_ledgers(bk, "events", [closed_ledger(bk, [b"c0"])])
    with pytest.raises(LogOwnershipLostError):
        for _ in range(100):
            w.append(b"late")  # the ledger is fenced: the first add fails
    w.close()
    assert read_all(bk, "events") == [b"w0", b"w1", b"w2", b"w3", b"w4", b"c0"]


def test_only_one_of_two_concurrent_commits_of_a_txn_wins(bk):
    create_log(bk, "events")
    ledgers = [closed_ledger(bk, [f"{k}".encode()]) for k in range(2)]
    results = []

    def commit(c: ClosedLedger) -> None:
        results.append(commit_ledgers(bk, "events", [c], txn_key="s", txn_id=9).committed)

    threads = [threading.Thread(target=commit, args=(c,)) for c in ledgers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False, True]
    assert len(read_all(bk, "events")) == 1


def test_replace_swaps_the_whole_ledger_list_and_deletes_the_old_ledgers(bk):
    old = closed_ledger(bk, [b"old"])
    commit_ledgers(bk, "events", [old])
    new = closed_ledger(bk, [b"new"])
    result = commit_ledgers(bk, "events", [new], replace=True)
    assert result.dropped == (old.ledger_id,)
    assert read_all(bk, "events") == [b"new"]
    with pytest.raises(NoSuchLedgerError):
        bk.open_ledger(old.ledger_id, recovery=False)


def test_a_log_of_100000_ledgers_keeps_small_metadata_and_still_commits(bk):
    """Commits spill ledger rows into segment znodes: the main znode stays small."""
    limits = LogLimits()
    fake = 10**12  # ids of described rows only (no ledger behind them)
    index = 0
    for _chunk in range(10):
        rows = [ClosedLedger(fake + index + i, 9, 1_000 + index + i, 1_000 + index + i)
                for i in range(9_998)]
        index += 9_998
        real = [closed_ledger(bk, [b"r"]), closed_ledger(bk, [b"r"])]  # fenced next time
        commit_ledgers(bk, "big", rows + real, limits=limits)
        index += 2
    data, _stat = bk.zk.get(f"{bk.msu.root}/logs/big")
    assert len(data) < 64 * 1024
    assert len(log_ledgers(bk, "big")) == 100_000
    last = closed_ledger(bk, [b"last"])
    assert commit_ledgers(bk, "big", [last], txn_key="s", txn_id=1).committed
    w = open_log_writer(bk, "big")  # opening as writer: fence the last two, CAS
    pos = w.append(b"after")
    w.close()
    with open_log_reader(bk, "big", pos) as r:
        assert [rec.payload for rec in r.read_available()] == [b"after"]


def test_a_closed_ledger_written_for_a_log_sends_no_explicit_lac(bk, monkeypatch):
    """A Spark task's ledger is read only once closed and committed: its writer, idle
    between slow payloads, must not cost every bookie an explicit-LAC RPC and journal
    sync per idle moment (the real bookies answer; the wrapper only counts)."""
    calls: list[int] = []
    real = BookieClient.write_lac

    def counting(self, ledger_id: int, master_key: bytes, lac: int) -> None:
        calls.append(lac)
        real(self, ledger_id, master_key, lac)

    monkeypatch.setattr(BookieClient, "write_lac", counting)
    assert bk.config.explicit_lac_interval_s > 0

    def slow() -> Iterator[bytes]:  # each add acknowledged long before the next comes
        for i in range(4):
            yield b"p%d" % i
            time.sleep(4 * bk.config.explicit_lac_interval_s)

    written = write_closed_ledger(bk, "slow", slow())
    assert written is not None and written.entries == 4
    time.sleep(4 * bk.config.explicit_lac_interval_s)
    assert calls == []
    commit_ledgers(bk, "slow", [written.ledger])
    assert read_all(bk, "slow") == [b"p0", b"p1", b"p2", b"p3"]


def test_a_write_whose_input_fails_leaves_no_thread_of_its_own_and_leaves_it_out_of_the_log(
        bk: BookKeeper) -> None:
    """A Spark task's rows raising half way (or a failed add) leaves the ledger OPEN (for
    the caller's clean-up) and no thread of its own: a reused Python worker keeps no thread
    per failed task. The client's own threads (``bk-client<N>-*``, core/client_threads.py,
    a fixed set however many ledgers, and its registration cache's ``bookie-registrations``,
    started at its first placement) are the only ones a write may leave running."""
    created: list[int] = []

    def failing() -> Iterator[bytes]:
        for i in range(50):
            yield b"r%d" % i
        raise RuntimeError("the task's input failed")

    before = set(threading.enumerate())
    with pytest.raises(RuntimeError, match="input failed"):
        write_closed_ledger(bk, "failing", failing(), on_created=created.append)
    [lid] = created

    def left() -> list[str]:
        return [t.name for t in threading.enumerate()
                if t not in before and not t.name.startswith("bk-client")
                and t.name != "bookie-registrations"]

    deadline = time.monotonic() + 10
    while left():
        assert time.monotonic() < deadline, f"the failed write left threads: {left()}"
        time.sleep(0.05)
    assert bk.ledger_metadata(lid).state == LedgerState.OPEN  # for the clean-up to delete
