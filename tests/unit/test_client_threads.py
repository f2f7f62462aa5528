"""The client's own threads (core/client_threads.py) and its bound on bytes of adds in
flight (core/backpressure.py), without bookies."""

from __future__ import annotations

import threading
import time

import pytest

from bk_spark.core.backpressure import AddBudget
from bk_spark.core.client_threads import ClientThreads
from bk_spark.errors import BookieUnavailableError, TooManyRequestsError


def test_scheduled_calls_run_on_one_loop_in_order_and_timers_after_their_delay() -> None:
    threads = ClientThreads()
    ran: list[tuple[str, str]] = []
    done = threading.Event()
    t0 = time.monotonic()
    threads.call_later(0.05, lambda: (ran.append(("late", threading.current_thread().name)),
                                      done.set()))
    for i in range(5):
        threads.schedule(lambda i=i: ran.append((str(i), threading.current_thread().name)))
    assert done.wait(5)
    assert time.monotonic() - t0 >= 0.05
    assert [r[0] for r in ran] == ["0", "1", "2", "3", "4", "late"]
    assert len({r[1] for r in ran}) == 1  # one loop thread
    threads.close()
    assert threads.threads() == []


def test_close_runs_pending_timers_joins_every_thread_and_refuses_new_work() -> None:
    threads = ClientThreads()
    ran: list[str] = []
    threads.call_later(60, lambda: ran.append("timer"))
    fut = threads.submit(lambda: "work")
    wait = threads.submit_wait(lambda: "wait")
    assert (fut.result(5), wait.result(5)) == ("work", "wait")
    assert len(threads.threads()) == 3
    threads.close()
    assert ran == ["timer"]
    assert threads.threads() == []
    with pytest.raises(BookieUnavailableError, match="closed"):
        threads.submit(lambda: None)
    threads.schedule(lambda: ran.append("inline"))  # after close: on the caller's thread
    assert ran == ["timer", "inline"]


def test_items_gathered_within_an_interval_run_in_one_call_after_it_in_order() -> None:
    """A thousand writers' lingers and explicit LACs cost one timer per interval."""
    threads = ClientThreads()
    calls: list[list[int]] = []
    done = threading.Event()

    def flush(items: list[int]) -> None:
        calls.append(items)
        if sum(map(len, calls)) == 6:
            done.set()

    t0 = time.monotonic()
    for i in range(5):
        threads.gather_later(0.05, flush, i)
    assert done.wait(0.02) is False and calls == []  # not before the interval
    time.sleep(0.1)
    assert calls == [[0, 1, 2, 3, 4]] and time.monotonic() - t0 >= 0.05
    threads.gather_later(0.01, flush, 5)  # a new interval: a new call
    assert done.wait(5)
    assert calls == [[0, 1, 2, 3, 4], [5]]
    threads.close()
    threads.gather_later(60, flush, 6)  # after close: at once, on the caller's thread
    assert calls[-1] == [6]


def test_gathered_items_run_at_close() -> None:
    threads = ClientThreads()
    calls: list[list[str]] = []
    threads.gather_later(60, calls.append, "lac")
    threads.close()
    assert calls == [["lac"]]


def test_a_failing_call_does_not_stop_the_loop() -> None:
    threads = ClientThreads()
    done = threading.Event()
    threads.schedule(lambda: 1 / 0)
    threads.schedule(done.set)
    assert done.wait(5)
    threads.close()


def test_the_budget_fails_fast_past_its_bound_and_takes_adds_again_once_released() -> None:
    budget = AddBudget(limit=100, block=False)
    budget.charge(60)
    budget.charge(40)
    with pytest.raises(TooManyRequestsError, match="adds_in_flight_max_bytes"):
        budget.charge(1)
    budget.release(40)
    budget.charge(40)
    assert budget.in_flight == 100


def test_the_budget_makes_an_add_wait_until_earlier_ones_are_released() -> None:
    budget = AddBudget(limit=100, block=True)
    budget.charge(100)
    passed = threading.Event()
    waiter = threading.Thread(target=lambda: (budget.charge(10), passed.set()))
    waiter.start()
    assert not passed.wait(0.2)
    budget.release(50)
    assert passed.wait(5)
    waiter.join()
    assert budget.in_flight == 60


def test_an_add_larger_than_the_bound_goes_alone_and_a_completing_thread_never_waits(
        ) -> None:
    budget = AddBudget(limit=100, block=False)
    budget.charge(500)  # nothing else in flight: it goes
    budget.completing(True)
    budget.charge(10)  # a callback adding again: never refused nor made to wait
    budget.completing(False)
    with pytest.raises(TooManyRequestsError):
        budget.charge(10)
    assert budget.in_flight == 510
