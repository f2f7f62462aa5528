"""Acknowledgements of appends in append order across ledgers: a writer rolling to a new
ledger has two ledgers in flight, and an append to the new one is acknowledged only after
every earlier append to the previous one.

An append's future (:class:`AppendFuture`) is completed with its entry id, as a ledger's
add is, and makes its :class:`Position` when asked for it: the delivering thread completes
runs of hundreds of appends at once, and a Position made for each of them there (two
objects the cyclic GC tracks) set off a young-generation collection every few runs, and
with them full collections of the whole client (tens of ms each, holding the GIL that the
senders and the gRPC threads need).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from threading import Condition

from bk_spark.core.futures import (
    FINISHED,
    PRIVATE_FIELDS,
    SharedConditionFuture,
    complete_in_order,
    complete_results,
    init_future,
)
from bk_spark.errors import BKError, copy_error
from bk_spark.protocol.log_format import (
    Position,
)


class AppendFuture(SharedConditionFuture[Position]):
    """The future of one append to the ledger of ``segment``: completed with the entry id,
    its result is the entry's :class:`Position` (made on each ``result()``: a value, equal
    every time)."""

    def __init__(self, condition: Condition, segment: AckSegment) -> None:
        init_future(self, condition)  # the Future's fields (core/futures.py)
        self._segment = segment

    def result(self, timeout: float | None = None) -> Position:
        if PRIVATE_FIELDS and self._state == FINISHED and self._exception is None:
            entry_id = self._result  # done (SharedConditionFuture.result's own fast path)
        else:
            entry_id = SharedConditionFuture.result(self, timeout)  # waits; raises its error
        s = self._segment
        return Position(s.ledger_id, entry_id, s.index)



class AckSegment:
    """The appends to one ledger of the log, in append order.

    Their futures (:class:`AppendFuture`) are the ledger's tokens
    (:meth:`LedgerHandle.add_entry_token`), so the ledger hands them back a run at a time, in
    entry order, to :meth:`complete_run` (its :meth:`LedgerHandle.complete_runs_with`);
    nothing is kept per append here but a count.
    """

    __slots__ = ("acks", "ledger_id", "index", "appended", "completed", "sealed", "held")

    def __init__(self, acks: InOrderAcks, ledger_id: int, index: int) -> None:
        self.acks, self.ledger_id, self.index = acks, ledger_id, index
        self.appended = 0  # adds started: set when the segment is sealed (open_segment)
        self.completed = 0  # adds completed
        self.sealed = False  # no more appends: the writer moved on to the next ledger
        self.held: list[tuple[list[AppendFuture], int, BaseException | None]] = []

    def complete_run(self, futures: list[AppendFuture], first: int,
                     error: BaseException | None) -> None:
        self.acks._on_run(self, futures, first, error)


class InOrderAcks:
    """Completes a writer's futures in append order, across ledgers.

    Within one ledger the ledger handle already decides adds in entry order; across a roll
    the new ledger's first entries may be confirmed before the previous ledger's last ones.
    So a ledger's runs are completed at once only while its segment is the oldest one not
    wholly completed; a later segment's runs wait until every earlier append is completed.
    The first failed add fails it and every later one (with ``translate(error, ledger_id)``):
    nothing after an add whose fate is unknown is reported as written.
    """

    def __init__(self, translate: Callable[[BaseException, int], BKError]) -> None:
        self._segments: deque[AckSegment] = deque()
        #: One deliverer at a time (keeps the order); a writer changing segments takes it
        #: before its own lock (lock order: this -> the writer's lock).
        self.lock = threading.RLock()
        self._translate = translate
        self._error: BKError | None = None

    def open_segment(self, ledger_id: int, index: int, appended_before: int = 0
                     ) -> AckSegment:
        """Appends go to ``ledger_id`` (the ledger at ``index`` of the log) from now on;
        ``appended_before``: how many appends the previous segment got (it is sealed)."""
        with self.lock:
            if self._segments:
                self._segments[-1].appended = appended_before
                self._segments[-1].sealed = True
            segment = AckSegment(self, ledger_id, index)
            self._segments.append(segment)
            self._advance()
        return segment

    def _on_run(self, segment: AckSegment, futures: list[AppendFuture], first: int,
                error: BaseException | None) -> None:
        with self.lock:
            if self._segments[0] is not segment:
                segment.held.append((futures, first, error))  # an earlier ledger is not done
                return
            self._complete(segment, futures, first, error)
            self._advance()

    def _advance(self) -> None:
        """Drop wholly completed sealed segments; complete what the next one held back."""
        segments = self._segments
        while len(segments) > 1 and segments[0].sealed and (
                segments[0].completed >= segments[0].appended):
            segments.popleft()
            head = segments[0]
            held, head.held = head.held, []
            for futures, first, error in held:
                self._complete(head, futures, first, error)

    def _complete(self, segment: AckSegment, futures: list[AppendFuture], first: int,
                  error: BaseException | None) -> None:
        segment.completed += len(futures)
        if error is not None and self._error is None:
            self._error = self._translate(error, segment.ledger_id)
        if self._error is None:  # each future makes its Position from its entry id
            complete_results(futures, range(first, first + len(futures)))
        else:
            complete_in_order([(f, None, copy_error(self._error)) for f in futures])
