"""A client's threads and its bound on adds in flight (issue 28, §4 and §5), against real
bookies: a fixed few threads however many ledgers are open, all joined at close; past
``adds_in_flight_max_bytes`` an add waits, or fails fast with ``TooManyRequestsError``."""

from __future__ import annotations

import threading
import time

import pytest

from bk_spark.core import BookKeeper
from bk_spark.core.context import BookKeeperConfig
from bk_spark.errors import TooManyRequestsError
from bk_spark.io.bookie_client import ClientConfig
from bk_spark.protocol.ledger_metadata import LedgerState

PW = b"p"
KiB = 1024


def _started_since(before: set[threading.Thread]) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t not in before and t.is_alive()]


def test_a_client_with_1000_open_ledgers_runs_at_most_16_threads_and_joins_them_at_close(
        module_cluster) -> None:
    before = set(threading.enumerate())
    bk = BookKeeper(module_cluster.uri)
    handles = [bk.create_ledger(3, 2, 2, password=PW) for _ in range(1000)]
    futures = [lh.add_entry_async(b"entry %d of %d" % (i, lh.id))
               for lh in handles for i in range(2)]
    assert [f.result(60) for f in futures] == [0, 1] * 1000
    mid = _started_since(before)
    assert len(mid) <= 16, sorted(t.name for t in mid)
    ids = [lh.id for lh in handles]
    bk.close()  # closes the 1,000 ledgers left open, then joins its threads
    deadline = time.monotonic() + 10
    while _started_since(before):
        assert time.monotonic() < deadline, \
            f"threads left after close(): {sorted(t.name for t in _started_since(before))}"
        time.sleep(0.05)
    with BookKeeper(module_cluster.uri) as reader:
        for lid in ids[::97]:
            md = reader.ledger_metadata(lid)
            assert (md.state, md.last_entry_id) == (LedgerState.CLOSED, 1)


def _bounded(block: bool) -> BookKeeperConfig:
    return BookKeeperConfig(client=ClientConfig(adds_in_flight_max_bytes=64 * KiB,
                                                adds_block_when_full=block,
                                                add_timeout_s=30))


def test_an_add_past_the_clients_bytes_in_flight_waits_until_earlier_adds_are_acknowledged(
        module_cluster) -> None:
    data = b"d" * KiB
    with BookKeeper(module_cluster.uri, _bounded(block=True)) as bk:
        lh = bk.create_ledger(3, 2, 2, password=PW)
        lh.add_entry(b"first")  # connections up, nothing in flight
        for b in module_cluster.bookies:
            b.pause()
        try:
            futures = [lh.add_entry_async(data) for _ in range(64)]  # 64 KiB: the bound
            assert bk.add_budget.in_flight == 64 * KiB
            late: list = []
            waiter = threading.Thread(target=lambda: late.append(lh.add_entry_async(data)))
            waiter.start()
            waiter.join(0.5)
            assert waiter.is_alive(), "the add past the bound did not wait"
            assert not late and lh.added == 65
        finally:
            for b in module_cluster.bookies:
                b.resume()
        waiter.join(20)
        assert not waiter.is_alive()
        assert [f.result(30) for f in futures + late] == list(range(1, 66))
        assert bk.add_budget.in_flight == 0
        lh.close()


def test_by_default_a_client_keeps_at_most_2_mib_of_adds_in_flight(module_cluster) -> None:
    """The default bound is a latency bound (ClientConfig.adds_in_flight_max_bytes): the
    2,048th add of 1 KiB still goes (one ledger's maximum rate needs ~2,000 in flight), the
    next waits; before, 64 MiB let a writer queue seconds of adds."""
    data = b"b" * KiB
    with BookKeeper(module_cluster.uri, BookKeeperConfig(
            client=ClientConfig(add_timeout_s=30))) as bk:
        lh = bk.create_ledger(3, 2, 2, password=PW)
        lh.add_entry(b"first")
        for b in module_cluster.bookies:
            b.pause()
        try:
            futures = [lh.add_entry_async(data) for _ in range(2048)]
            assert bk.add_budget.in_flight == 2048 * KiB
            late: list = []
            waiter = threading.Thread(target=lambda: late.append(lh.add_entry_async(data)))
            waiter.start()
            waiter.join(0.5)
            assert waiter.is_alive(), "the add past 2 MiB in flight did not wait"
        finally:
            for b in module_cluster.bookies:
                b.resume()
        waiter.join(20)
        assert [f.result(30) for f in futures + late][-1] == 2049
        lh.close()


def test_an_add_past_the_clients_bytes_in_flight_fails_fast_when_configured(
        module_cluster) -> None:
    data = b"f" * KiB
    with BookKeeper(module_cluster.uri, _bounded(block=False)) as bk:
        lh = bk.create_ledger(3, 2, 2, password=PW)
        lh.add_entry(b"first")
        for b in module_cluster.bookies:
            b.pause()
        try:
            futures = [lh.add_entry_async(data) for _ in range(64)]
            t0 = time.monotonic()
            with pytest.raises(TooManyRequestsError, match="adds_in_flight_max_bytes"):
                lh.add_entry_async(data)
            assert time.monotonic() - t0 < 0.5
            assert lh.added == 65  # the refused add took no entry id
        finally:
            for b in module_cluster.bookies:
                b.resume()
        assert [f.result(30) for f in futures] == list(range(1, 65))
        assert lh.add_entry(data) == 65  # room again once they were acknowledged
        lh.close()
        assert bk.ledger_metadata(lh.id).last_entry_id == 65
