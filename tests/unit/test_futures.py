"""SharedConditionFuture: a real concurrent.futures.Future whose condition is shared.

Every test runs on both roads of core/futures.py: CPython's private Future fields filled
directly (PRIVATE_FIELDS, what runs here) and the public constructor and setters used where
those fields are absent."""

from __future__ import annotations

import threading
import time
from concurrent.futures import CancelledError, Future, as_completed, wait

import pytest

from bk_spark.core import futures as futures_module
from bk_spark.core.futures import InFlightWindow, SharedConditionFuture, shared_condition
from bk_spark.io.bookie_client import _chunk_ends


@pytest.fixture(autouse=True, params=["private fields", "public constructor"])
def road(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "public constructor":
        monkeypatch.setattr(futures_module, "PRIVATE_FIELDS", False)
    return str(request.param)


def test_this_cpython_has_the_private_fields_and_a_future_without_them_takes_the_public_road(
        road: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert futures_module._private_fields()  # CPython 3.10-3.13: the fast path is the one used

    class BareFuture:  # a Future keeping its state some other way
        pass

    monkeypatch.setattr(futures_module, "Future", BareFuture)
    assert not futures_module._private_fields()


def test_a_future_filled_on_either_road_holds_its_own_state_and_shares_the_condition(
        road: str) -> None:
    cond = shared_condition()
    f: SharedConditionFuture[int] = SharedConditionFuture(cond)
    own = f._condition  # type: ignore[attr-defined]
    assert (own is cond) == (road == "private fields")
    assert not f.done() and not f.running() and not f.cancelled()


def test_append_futures_give_positions_in_order_on_either_road() -> None:
    from bk_spark.errors import BKError
    from bk_spark.log.acks import AppendFuture, InOrderAcks
    from bk_spark.protocol.log_format import Position

    acks = InOrderAcks(lambda exc, lid: BKError(f"lost at ledger {lid}"))
    segment = acks.open_segment(7, 4)
    cond = shared_condition()
    futs = [AppendFuture(cond, segment) for _ in range(3)]
    segment.complete_run(futs[:2], 10, None)
    assert [f.result(0) for f in futs[:2]] == [Position(7, 10, 4), Position(7, 11, 4)]
    assert not futs[2].done()
    segment.complete_run(futs[2:], 12, RuntimeError("fenced"))
    with pytest.raises(BKError, match="lost at ledger 7"):
        futs[2].result(0)


def test_is_a_future_and_completes() -> None:
    cond = shared_condition()
    f: SharedConditionFuture[int] = SharedConditionFuture(cond)
    seen: list[int] = []
    f.add_done_callback(lambda fut: seen.append(fut.result()))
    assert isinstance(f, Future) and not f.done()
    f.set_result(7)
    assert f.done() and f.result() == 7 and f.exception() is None and seen == [7]


def test_exception_is_raised_by_result() -> None:
    f: SharedConditionFuture[int] = SharedConditionFuture(shared_condition())
    f.set_exception(ValueError("boom"))
    with pytest.raises(ValueError, match="boom"):
        f.result(0)
    assert isinstance(f.exception(0), ValueError)


def test_wake_up_for_a_sibling_is_not_a_timeout() -> None:
    """A plain Future raises TimeoutError after one wait; sharing a condition must not."""
    cond = shared_condition()
    a: SharedConditionFuture[str] = SharedConditionFuture(cond)
    b: SharedConditionFuture[str] = SharedConditionFuture(cond)
    out: list[object] = []
    waiter = threading.Thread(target=lambda: out.append(a.result(5)))
    waiter.start()
    time.sleep(0.05)
    b.set_result("b")  # wakes the waiter of a spuriously
    time.sleep(0.05)
    assert waiter.is_alive() and out == []
    a.set_result("a")
    waiter.join(5)
    assert out == ["a"]


def test_timeout_and_cancel() -> None:
    cond = shared_condition()
    f: SharedConditionFuture[int] = SharedConditionFuture(cond)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        f.result(0.1)
    assert time.monotonic() - t0 >= 0.1
    g: SharedConditionFuture[int] = SharedConditionFuture(cond)
    assert g.cancel()
    with pytest.raises(CancelledError):
        g.result(1)


def test_wait_and_as_completed_work_with_shared_conditions() -> None:
    cond = shared_condition()
    futures = [SharedConditionFuture(cond) for _ in range(5)]
    threading.Timer(0.05, lambda: [f.set_result(i) for i, f in enumerate(futures)]).start()
    done, not_done = wait(futures, timeout=5)
    assert len(done) == 5 and not not_done
    assert sorted(f.result() for f in as_completed(futures, timeout=5)) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("sizes,max_entries,max_bytes,expected", [
    ([10] * 10, 4, 1000, [4, 8, 10]),
    ([10] * 10, 100, 25, [3, 6, 9, 10]),  # a chunk stops once it reaches max_bytes
    ([100] * 3, 100, 5, [1, 2, 3]),       # an entry larger than max_bytes goes alone
    ([1], 10, 10, [1]),
    ([], 10, 10, []),
])
def test_chunk_ends(sizes: list[int], max_entries: int, max_bytes: int,
                    expected: list[int]) -> None:
    entries = [b"x" * n for n in sizes]
    ends = _chunk_ends(entries, max_entries, max_bytes)
    assert ends == expected
    start = 0
    for end in ends:  # the chunks cover everything, in order, within the limits
        assert 0 < end - start <= max_entries
        assert sum(sizes[start:end - 1]) < max_bytes
        start = end
    assert start == len(sizes)


def test_complete_in_order_runs_callbacks_in_order_and_skips_cancelled() -> None:
    from bk_spark.core.futures import complete_in_order

    one, other = shared_condition(), shared_condition()
    futures = [SharedConditionFuture(one), SharedConditionFuture(one),
               SharedConditionFuture(other), SharedConditionFuture(one)]
    order: list[int] = []
    for i, f in enumerate(futures):
        f.add_done_callback(lambda fut, i=i: order.append(i))
    assert futures[1].cancel()
    order.clear()  # cancel() ran the callback of 1
    err = RuntimeError("failed")
    complete_in_order([(futures[0], 0, None), (futures[1], 1, None), (futures[2], 2, None),
                       (futures[3], None, err)])
    assert order == [0, 2, 3]
    assert futures[0].result(0) == 0 and futures[2].result(0) == 2
    assert futures[1].cancelled() and futures[3].exception(0) is err
    done, _ = wait(futures, timeout=0)  # (a cancelled future counts once it is notified)
    assert done == {futures[0], futures[2], futures[3]}


@pytest.mark.parametrize("value", [1, 127, 128, 300, 2**32, 2**63 - 1, -1, -(2**63)])
def test_varint_matches_protobuf(value: int) -> None:
    """add_request's varint is protobuf's (negative numbers as 64-bit two's complement)."""
    from bk_spark.io.bookie_client import _varint
    from bk_spark.proto import bookie_pb2 as pb

    assert b"\x18" + _varint(value) == pb.Entry(lac=value).SerializeToString()


def test_complete_adds_keeps_entry_order_across_futures_and_callbacks() -> None:
    """The ledger's delivery: entry ids first, first + 1, ... to futures and callbacks in
    order; a cancelled future is skipped; a failing callback does not stop the others."""
    from bk_spark.core.futures import complete_adds

    cond = shared_condition()
    order: list[tuple[str, int, object]] = []
    futures = [SharedConditionFuture(cond) for _ in range(4)]
    for f in futures:
        f.add_done_callback(lambda fut: order.append(("future", fut.result(0), None)))
    assert futures[2].cancel()
    order.clear()

    def callback(eid: int, err: BaseException | None) -> None:
        order.append(("callback", eid, err))

    def broken(eid: int, err: BaseException | None) -> None:
        order.append(("broken", eid, err))
        raise ValueError("a bug in the caller's callback")

    targets = [futures[0], futures[1], callback, futures[2], broken, futures[3]]
    complete_adds(targets, 10, None)
    assert order == [("future", 10, None), ("future", 11, None), ("callback", 12, None),
                     ("broken", 14, None), ("future", 15, None)]
    assert futures[2].cancelled()

    err = RuntimeError("fenced")
    failed = [SharedConditionFuture(cond), callback]
    order.clear()
    complete_adds(failed, 20, err)
    assert failed[0].exception(0) is err
    assert order == [("callback", 21, err)]


def test_result_of_a_done_future_needs_no_lock() -> None:
    """The fast path of result(): a finished future answers even while its shared
    condition is held by another thread (a writer delivering other adds)."""
    from bk_spark.core.futures import complete_adds

    cond = shared_condition()
    fut: SharedConditionFuture[int] = SharedConditionFuture(cond)
    complete_adds([fut], 7, None)
    got: list[int] = []
    with cond:
        t = threading.Thread(target=lambda: got.append(fut.result(1)))
        t.start()
        t.join(5)
    assert got == [7]


def _done(value: object) -> Future:
    fut: Future = Future()
    fut.set_result(value)
    return fut


def test_in_flight_window_settles_in_start_order_and_never_holds_more_than_its_limit() -> None:
    seen: list[tuple[object, object]] = []
    window = InFlightWindow(2, on_done=lambda fut, tag: seen.append((tag, fut.result())))
    open_futs = [Future() for _ in range(3)]
    window.push(open_futs[0], tag="a")
    window.push(open_futs[1], tag="b")
    assert len(window) == 2 and seen == []           # at the limit: nothing waited for
    threading.Timer(0.05, open_futs[0].set_result, (1,)).start()
    window.push(open_futs[2], tag="c")               # over the limit: waits for the oldest
    assert seen == [("a", 1)] and len(window) == 2
    open_futs[2].set_result(3)                       # done, but behind "b": not settled
    assert [t for t, _ in seen] == ["a"]
    threading.Timer(0.05, open_futs[1].set_result, (2,)).start()
    window.push(_done(4), tag="d")                   # over again: waits for "b", then "c"
    window.drain()
    assert [t for t, _ in seen] == ["a", "b", "c", "d"] and window.settled == 4


def test_in_flight_window_bounds_bytes_and_raises_a_failed_add() -> None:
    window = InFlightWindow(100, max_bytes=10)
    window.push(_done(0), size=6)
    failed: Future = Future()
    failed.set_exception(ValueError("add failed"))
    with pytest.raises(ValueError):
        window.push(failed, size=6)  # done heads are settled at once: the failure raises
    assert len(window) == 0
