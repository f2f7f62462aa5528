"""Cheap ``concurrent.futures.Future`` objects for the add hot path.

A writer hands out one future per add, thousands per second. A plain ``Future()`` builds its
own ``threading.Condition`` (about 8 us of CPU on these machines, and a reference cycle the
garbage collector must then trace), which cost more than the rest of an add together.
:class:`SharedConditionFuture` is a real ``concurrent.futures.Future`` (``isinstance`` holds,
``concurrent.futures.wait`` and ``as_completed`` work) whose futures of one writer share one
condition. Sharing is safe because :meth:`result` and :meth:`exception` wait in a loop: a
wake-up meant for another future of the same writer is a spurious one, and they wait again
until their own future is done or their own timeout expires.

That relies on CPython's private ``Future`` fields (``_condition``, ``_state``, ...) and
state names (``concurrent.futures._base``): :func:`init_future` is the one place that fills
them, and :func:`_finish` the one that completes through them. Where they are absent (another
Python implementation or a future CPython), :data:`PRIVATE_FIELDS` is False and every future
takes the public road instead: ``Future.__init__`` (a condition of its own),
``set_result``/``set_exception`` and ``Future.result``: slower, the same behaviour.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import CancelledError, Future
from itertools import repeat
from typing import Any, TypeVar

T = TypeVar("T")
_log = logging.getLogger(__name__)

#: The private fields :func:`init_future` fills, as CPython's ``Future.__init__`` does.
_FIELDS = ("_condition", "_state", "_result", "_exception", "_waiters", "_done_callbacks")


def _private_fields() -> bool:
    """True when ``Future`` keeps its state in the fields and states this module fills."""
    try:
        from concurrent.futures import _base
        states = (_base.PENDING, _base.RUNNING, _base.FINISHED, _base.CANCELLED,
                  _base.CANCELLED_AND_NOTIFIED)
    except (ImportError, AttributeError):
        return False
    probe: Future[Any] = Future()
    return (all(hasattr(probe, f) for f in _FIELDS) and probe._state in states
            and callable(getattr(probe, "_invoke_callbacks", None)))


#: Whether the fast path applies (read at each call, so a test can take either road).
PRIVATE_FIELDS = _private_fields()
if PRIVATE_FIELDS:
    from concurrent.futures._base import (
        CANCELLED,
        CANCELLED_AND_NOTIFIED,
        FINISHED,
        PENDING,
        RUNNING,
    )
else:  # never compared against on the public road
    CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED, PENDING, RUNNING = (
        "CANCELLED", "CANCELLED_AND_NOTIFIED", "FINISHED", "PENDING", "RUNNING")


def init_future(fut: Future[Any], condition: threading.Condition) -> None:
    """Make ``fut`` a pending future waiting on ``condition`` (shared with its owner's other
    futures): CPython's fields set directly, or, without them, ``Future.__init__``."""
    if PRIVATE_FIELDS:
        fut._condition = condition  # type: ignore[attr-defined]
        fut._state = PENDING  # type: ignore[attr-defined]
        fut._result = None  # type: ignore[attr-defined]
        fut._exception = None  # type: ignore[attr-defined]
        fut._waiters = []  # type: ignore[attr-defined]
        fut._done_callbacks = []  # type: ignore[attr-defined]
    else:
        Future.__init__(fut)
        fut._shared_condition = condition  # type: ignore[attr-defined]


def _condition_attr() -> str:
    """The attribute holding the condition a future shares (what runs are grouped by)."""
    return "_condition" if PRIVATE_FIELDS else "_shared_condition"


class SharedConditionFuture(Future[T]):
    """A ``Future`` whose condition variable is shared with other futures of one owner."""

    def __init__(self, condition: threading.Condition) -> None:  # no super(): see module doc
        init_future(self, condition)

    def _wait_done(self, timeout: float | None) -> None:
        """Wait (holding the condition) until done; raise TimeoutError / CancelledError."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            state = self._state
            if state in (CANCELLED, CANCELLED_AND_NOTIFIED):
                raise CancelledError()
            if state == FINISHED:
                return
            if deadline is None:
                self._condition.wait()
            else:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError()
                self._condition.wait(remaining)

    def result(self, timeout: float | None = None) -> T:
        if not PRIVATE_FIELDS:
            return Future.result(self, timeout)
        if self._state == FINISHED and self._exception is None:
            return self._result  # done: its result is set before its state, no lock needed
        with self._condition:
            self._wait_done(timeout)
        if self._exception is not None:
            raise self._exception
        return self._result

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if not PRIVATE_FIELDS:
            return Future.exception(self, timeout)
        with self._condition:
            self._wait_done(timeout)
        return self._exception


def complete_in_order(items: list[tuple[SharedConditionFuture[Any], Any, BaseException | None]]
                      ) -> None:
    """Complete futures that share one condition, in list order, holding it once.

    ``items`` are ``(future, result, error)``; a future already done (cancelled by its
    caller) is skipped. Waiters are woken once for the whole list, then the done-callbacks
    run in list order, each future's after the earlier ones' (what ``set_result`` called
    per future would do, for one lock round trip instead of one per future).
    """
    futures = [fut for fut, _, _ in items]
    for start, end in _condition_runs(futures):
        run = items[start:end]
        _finish(getattr(futures[start], _condition_attr()), futures[start:end],
                [r for _, r, _ in run],
                [e for _, _, e in run])


def complete_results(futures: list[SharedConditionFuture[Any]], results: list[Any]) -> None:
    """Give ``futures[i]`` the result ``results[i]``, in list order: :func:`complete_in_order`
    for a run that succeeded, without a tuple per future."""
    for start, end in _condition_runs(futures):
        _finish(getattr(futures[start], _condition_attr()), futures[start:end],
                results[start:end],
                repeat(None))


def _condition_runs(futures: list[SharedConditionFuture[Any]]) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of each run of consecutive futures sharing a condition."""
    start, n, attr = 0, len(futures), _condition_attr()
    while start < n:
        condition = getattr(futures[start], attr)
        end = start + 1
        while end < n and getattr(futures[end], attr) is condition:
            end += 1
        yield start, end
        start = end


def complete_adds(targets: list[Any], first: int, error: BaseException | None) -> None:
    """Complete the adds of entries ``first, first + 1, ...`` in that order.

    ``targets[i]`` is the :class:`SharedConditionFuture` (its result: the entry id) or the
    callback (called as ``callback(entry_id, error)``) of entry ``first + i``. A run of
    futures is completed holding their condition once; a callback runs after every earlier
    future of the list is done. A failing callback is logged and does not stop the others.
    """
    start, n, attr = 0, len(targets), _condition_attr()
    while start < n:
        target = targets[start]
        if not isinstance(target, SharedConditionFuture):
            try:
                target(first + start, error)
            except Exception:
                _log.exception("add callback failed")
            start += 1
            continue
        condition = getattr(target, attr)
        end = start + 1
        while end < n and getattr(targets[end], attr, None) is condition:
            end += 1
        _finish(condition, targets[start:end], range(first + start, first + end),
                repeat(error))
        start = end


def _finish(condition: threading.Condition, futures: list[Any], results: Iterable[Any],
            errors: Iterable[BaseException | None]) -> None:
    """Complete ``futures`` (sharing ``condition``) in order, each with its result or its
    error; skips cancelled ones; wakes waiters once, then runs the done-callbacks."""
    if not PRIVATE_FIELDS:
        for fut, result, error in zip(futures, results, errors):  # noqa: B905 - repeat()
            if fut.cancelled():
                continue
            if error is None:
                fut.set_result(result)
            else:
                fut.set_exception(error)
        return
    done: list[SharedConditionFuture[Any]] = []
    with condition:
        for fut, result, error in zip(futures, results, errors):  # noqa: B905 - repeat()
            state = fut._state
            if state != PENDING and state != RUNNING:
                continue  # cancelled by its caller
            if error is None:
                fut._result = result
                fut._state = FINISHED
                if fut._waiters:
                    for waiter in fut._waiters:
                        waiter.add_result(fut)
            else:
                fut._exception = error
                fut._state = FINISHED
                for waiter in fut._waiters:
                    waiter.add_exception(fut)
            if fut._done_callbacks:
                done.append(fut)
        condition.notify_all()
    for fut in done:
        fut._invoke_callbacks()


def shared_condition() -> threading.Condition:
    """The condition one owner's :class:`SharedConditionFuture` objects share."""
    return threading.Condition(threading.RLock())


class InFlightWindow:
    """Adds in flight, bounded, settled in the order they were started: the one home of
    "keep the ledger pipeline full but bounded" for every bulk writer (the shell's
    ``append``/``write``, the Spark sink's tasks, the fault harness's writers).

    :meth:`push` tracks one more future with its payload ``size`` (and a ``tag`` for the
    caller); the futures at the head that are already done are settled at once, and while
    more than ``max_entries`` futures or ``max_bytes`` bytes are open it waits for the
    oldest. Settling hands ``(future, tag)`` to ``on_done`` (default: the future's result,
    so a failed add raises from :meth:`push` or :meth:`drain`); since adds complete in
    order, so do the calls. An exception ``on_done`` raises stops that push or drain
    (the future it settled is no longer tracked).
    """

    def __init__(self, max_entries: int, max_bytes: float = float("inf"),
                 on_done: Callable[[Future[Any], Any], object] | None = None) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._on_done = on_done or (lambda fut, _tag: fut.result())
        self._open: deque[tuple[Future[Any], int, Any]] = deque()
        self._bytes = 0
        self.settled = 0

    def __len__(self) -> int:
        return len(self._open)

    def push(self, fut: Future[Any], size: int = 0, tag: Any = None) -> None:
        """Track ``fut``; settle what is done, and wait while the window is over a limit."""
        self._open.append((fut, size, tag))
        self._bytes += size
        q = self._open
        while q and (len(q) > self.max_entries or self._bytes > self.max_bytes
                     or q[0][0].done()):
            self._settle()

    def drain(self) -> None:
        """Wait for and settle every future still open, in order."""
        while self._open:
            self._settle()

    def _settle(self) -> None:
        fut, size, tag = self._open.popleft()
        self._bytes -= size
        self.settled += 1
        self._on_done(fut, tag)
