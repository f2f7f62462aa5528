"""One long-lived ``AddStream`` call to one bookie: the client's add transport (issue 28 §2).

Theory of operation. :class:`~bk_spark.io.bookie_client.BookieClient` hands every add
request (an ``AddRequest``'s bytes, as ``send_batch`` builds them, or an explicit LAC) with
its completion to :meth:`AddStream.submit`. Requests queue here; the stream's sender (the
request iterator gRPC consumes on its own thread) takes them while the stream's window is
open (:func:`~bk_spark.protocol.add_stream.window_open` over the messages in flight) and
sends as many as one message may carry (:func:`~bk_spark.protocol.add_stream.message_size`)
in one ``AddStreamRequest`` with a request id. While the window is shut, requests of many
ledgers gather and leave together once an answer frees it. The stream's reader thread
(``bk-add-stream``, one per open stream) takes each ``AddStreamResponse`` and completes the
requests it answers, with the same outcome a unary ``AddEntries`` would have given: each
answer is read by :func:`~bk_spark.io.entry.add_answer_error`, as the unary one is (a packed
request answered OK without ``packed`` fails).

Failure, with the guarantees of unary calls:

* a stream that breaks (bookie killed, network, server stop) fails every request queued or
  outstanding on it with the :class:`~bk_spark.errors.BookieUnavailableError` a failed
  unary call gives (:func:`~bk_spark.io.bookie_client.unavailable`), so a writer's
  ensemble change handles it; the next request opens a new stream;
* a request unanswered ``add_timeout_s`` after it was sent breaks the stream the same way
  (DEADLINE_EXCEEDED), checked by the sender while it waits;
* a stream idle for :data:`~bk_spark.protocol.add_stream.IDLE_CLOSE_S` is ended by its
  sender (nothing is outstanding on it): its threads end, the next request opens a new one;
* a stream the bookie refused before answering anything
  (:func:`~bk_spark.protocol.add_stream.refusal`) hands its requests back to
  ``on_refused``: the client sends them, and its next ones, as unary calls.

**Units** (``AddStreamRequest.adds``, a ``LedgerAdds``): on a stream whose bookie said it
reads them (:attr:`AddStream.reads_adds`, set from its answers), one corked pass of the I/O
loop gathers the small plain adds and explicit LACs of all its writers for one bookie into
ONE unit (:class:`~bk_spark.io.bookie_client.BookieClient`'s, built while corked:
:func:`corked_unit`), queued as one item of kind :data:`UNIT`, sent alone in its message
(:func:`~bk_spark.protocol.add_stream.message_take`), answered once with one status per
ledger part; its completion gets the whole ``AddStreamResponse`` (or the error the stream
broke with) and reads it itself.

An answer is only ever the bookie's, given after its fdatasync: nothing here acknowledges.
Lock order: this object's condition is a leaf; completions and ``on_refused`` run with no
lock held.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from itertools import count, islice
from typing import Any

import grpc

from bk_spark.errors import BKError, BookieUnavailableError
from bk_spark.io.entry import _varint, add_answer_error
from bk_spark.proto import bookie_pb2 as pb
from bk_spark.protocol.add_stream import (
    IDLE_CLOSE_S,
    Refusal,
    message_take,
    refusal,
    window_open,
)

log = logging.getLogger(__name__)

#: A request's completion: None when the bookie stored it, else the error it failed with.
Done = Callable[[BKError | None], None]
#: One request: its bytes, whether it carries records (packed; or :data:`UNIT`), its
#: completion (a unit's takes the whole answer, see :data:`UnitDone`).
Item = tuple[bytes, int, Done]
#: The kind of a queued item that is a unit (``LedgerAdds`` bytes), not an ``AddRequest``.
UNIT = 2
#: A unit's completion: the bookie's ``AddStreamResponse``, or the error the stream failed
#: with.
UnitDone = Callable[["pb.AddStreamResponse | BKError"], None]
#: What a refused stream hands back: the refusal, and its requests with their completions.
OnRefused = Callable[[Refusal, list[Item]], None]


_cork = threading.local()


@contextmanager
def corked() -> Iterator[None]:
    """While this runs, requests this thread submits wait in their stream's queue without
    waking its sender; when it ends, each stream they went to is woken once, and sends
    them together (the client's I/O loop corks each pass over its writers: a thousand
    writers' rounds to one bookie leave in one message, not in one each). Nests."""
    if getattr(_cork, "streams", None) is not None:
        yield
        return
    streams: dict[int, AddStream] = {}
    units: dict[int, Any] = {}
    _cork.streams = streams
    _cork.units = units
    try:
        yield
    finally:
        _cork.units = None
        for unit in list(units.values()):
            unit.flush()  # queued on its stream, which is woken below (or by the submit)
        _cork.streams = None
        for stream in streams.values():
            stream.wake()


def flush_cork() -> None:
    """Wake now the streams this thread's cork holds back (it stays corked): a thread that
    is about to wait for an answer must first let its requests go."""
    units = getattr(_cork, "units", None)
    if units:
        for unit in list(units.values()):
            unit.flush()
        units.clear()
    streams = getattr(_cork, "streams", None)
    if streams:
        for stream in streams.values():
            stream.wake()
        streams.clear()


def corked_unit(owner: object, make: Callable[[], Any]) -> Any:
    """The unit this thread's cork is building for ``owner`` (a bookie's client), made by
    ``make()`` on first use; None when the thread is not corked. Each unit's ``flush()``
    queues it on its stream when the cork ends (or at :func:`flush_cork`,
    :func:`release_unit`)."""
    units = getattr(_cork, "units", None)
    if units is None:
        return None
    unit = units.get(id(owner))
    if unit is None:
        unit = units[id(owner)] = make()
    return unit


def release_unit(owner: object) -> None:
    """Queue now the unit this thread's cork builds for ``owner``, if any (a request of
    ``owner``'s that cannot join it must go after it: a ledger's requests keep their
    order)."""
    units = getattr(_cork, "units", None)
    if units:
        unit = units.pop(id(owner), None)
        if unit is not None:
            unit.flush()


def encode_message(request_id: int, requests: list[bytes], unit: bool = False) -> bytes:
    """An ``AddStreamRequest`` wrapping already-serialized ``AddRequest``s (no re-encoding:
    field 1 the id, field 2 each request, length-delimited), or (``unit``) one serialized
    ``LedgerAdds`` (field 3)."""
    parts = [b"\x08", _varint(request_id)]
    tag = b"\x1a" if unit else b"\x12"
    for r in requests:
        parts += (tag, _varint(len(r)), r)
    return b"".join(parts)


class _Sent:
    __slots__ = ("items", "deadline", "size")

    def __init__(self, items: list[Item], deadline: float, size: int) -> None:
        self.items, self.deadline, self.size = items, deadline, size


class AddStream:
    """One ``AddStream`` call to one bookie (see the module docstring)."""

    def __init__(self, bookie_id: str, method: grpc.StreamStreamMultiCallable, *,
                 max_in_flight: int, max_in_flight_bytes: int, pipeline_min_bytes: int,
                 max_message_bytes: int, timeout_s: float, idle_close_s: float = IDLE_CLOSE_S,
                 on_broken: Callable[[grpc.RpcError], BKError], on_refused: OnRefused) -> None:
        self.bookie_id = bookie_id
        self._limits = dict(max_in_flight=max_in_flight, max_in_flight_bytes=max_in_flight_bytes,
                            pipeline_min_bytes=pipeline_min_bytes)
        self._max_message = max_message_bytes
        self._timeout = timeout_s
        self._idle_s = idle_close_s
        self._on_broken = on_broken
        self._on_refused = on_refused
        self._cv = threading.Condition()
        self._queue: deque[Item] = deque()
        self._queued_bytes = 0
        self._out: dict[int, _Sent] = {}  # by request id, oldest first
        self._out_bytes = 0
        self._ids = count(1)
        self._answered = False
        self._ended = False
        self.messages_sent = 0
        #: How often the sender woke from a wait (per message sent: 1 when only a request
        #: to send wakes it; what a lone add's round trip costs in wake-ups).
        self.sender_wakes = 0
        #: The bookie reads units (its answers say so): set by the reader, read unlocked.
        self.reads_adds = False
        self._idle_since = time.monotonic()  # when nothing was last outstanding
        self._call = method(self._requests())
        self._reader = threading.Thread(target=self._read, daemon=True,
                                        name=f"bk-add-stream-{bookie_id}")
        self._reader.start()

    @property
    def ended(self) -> bool:
        return self._ended

    def submit(self, request: bytes, packed: int, done: Done) -> bool:
        """Queue one serialized ``AddRequest`` (``packed``: it carries records);
        ``done(err)`` runs once with its answer. False if the stream has ended (the caller
        sends it another way)."""
        cork = getattr(_cork, "streams", None)
        with self._cv:
            if self._ended:
                return False
            self._queue.append((request, packed, done))
            self._queued_bytes += len(request)
            if cork is None:
                self._cv.notify_all()
        if cork is not None:
            cork[id(self)] = self  # woken as the cork ends
        return True

    def wake(self) -> None:
        """Wake the sender for what was queued while corked (:func:`corked`)."""
        with self._cv:
            self._cv.notify_all()

    # ---------------------------------------------------------------- the sender
    def _requests(self):  # type: ignore[no-untyped-def]
        """The request iterator gRPC's consumer thread runs: a message whenever the window
        opens; a request past its deadline ends the stream."""
        cv, queue = self._cv, self._queue
        while True:
            with cv:
                while True:
                    if self._ended:
                        return
                    now = time.monotonic()
                    if self._out:
                        oldest = next(iter(self._out.values())).deadline
                        if oldest <= now:
                            break
                    if queue and window_open(len(self._out), self._out_bytes,
                                             self._queued_bytes, **self._limits):
                        break
                    if not self._out and not queue:  # idle: end the stream after a while
                        idle = now - self._idle_since
                        if idle >= self._idle_s:
                            self._ended = True  # submit() now opens a new stream
                            return
                        cv.wait(self._idle_s - idle)
                        self.sender_wakes += 1
                        continue
                    # An answer wakes this thread only when requests wait for the window
                    # (_read): so it also looks at the idle clock at least every idle_s.
                    cv.wait(min(oldest - now, self._idle_s))
                    self.sender_wakes += 1
                if self._out and next(iter(self._out.values())).deadline <= now:
                    expired = True
                else:
                    expired = False
                    head = _head(queue, 4096)
                    n = message_take([len(it[0]) for it in head],
                                     [it[1] == UNIT for it in head], self._max_message)
                    taken = [queue.popleft() for _ in range(n)]
                    unit = taken[0][1] == UNIT
                    requests = [it[0] for it in taken]
                    size = sum(map(len, requests))
                    self._queued_bytes -= size
                    rid = next(self._ids)
                    self._out[rid] = _Sent(taken, now + self._timeout, size)
                    self._out_bytes += size
                    self.messages_sent += 1
            if expired:
                self._end(BookieUnavailableError(
                    f"bookie {self.bookie_id} unavailable (DEADLINE_EXCEEDED: an add on its "
                    f"stream had no answer within add_timeout_s={self._timeout:g}s)"), None)
                self._call.cancel()
                return
            yield encode_message(rid, requests, unit)

    # ---------------------------------------------------------------- the reader
    def _read(self) -> None:
        err: BKError
        ref: Refusal | None = None
        try:
            for raw in self._call:
                resp = pb.AddStreamResponse.FromString(raw)
                with self._cv:
                    sent = self._out.pop(resp.request_id, None)
                    self._answered = True
                    if sent is not None:
                        self._out_bytes -= sent.size
                        if not self._out:
                            self._idle_since = time.monotonic()
                        # The sender is woken only if the freed window has requests to
                        # send: a lone add's answer wakes its caller alone, not also this
                        # stream's sender (a thread more to run on the answer's path).
                        if self._queue:
                            self._cv.notify_all()
                if sent is None:
                    continue
                if resp.reads_adds:
                    self.reads_adds = True
                if sent.items[0][1] == UNIT:  # a unit reads its own answer
                    try:
                        sent.items[0][2](resp)  # type: ignore[arg-type]
                    except Exception:
                        log.exception("add completion failed")
                    continue
                answers = resp.responses
                for i, (_r, packed, done) in enumerate(sent.items):
                    e = (add_answer_error(answers[i], self.bookie_id, packed)
                         if i < len(answers) else
                         BookieUnavailableError(f"bookie {self.bookie_id}: no answer for an "
                                                f"add of its stream message"))
                    try:
                        done(e)
                    except Exception:
                        log.exception("add completion failed")
            err = BookieUnavailableError(f"bookie {self.bookie_id} unavailable (its add "
                                         f"stream ended)")
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            with self._cv:
                answered = self._answered
            ref = refusal(code.name if code is not None else "", answered)
            err = self._on_broken(exc)
        except Exception as exc:  # a malformed answer: the stream cannot be trusted
            log.exception("add stream to %s failed", self.bookie_id)
            err = BookieUnavailableError(f"bookie {self.bookie_id}: add stream failed ({exc!r})")
        self._end(err, ref)
        self._call.cancel()

    # ---------------------------------------------------------------- the end
    def _end(self, err: BKError, ref: Refusal | None) -> None:
        """End the stream once: hand its requests back (refused) or fail them (broken)."""
        with self._cv:
            if self._ended:
                return
            self._ended = True
            items = [it for s in self._out.values() for it in s.items]
            items += list(self._queue)
            self._out.clear()
            self._queue.clear()
            self._out_bytes = self._queued_bytes = 0
            self._cv.notify_all()
        if ref is not None:
            log.info("bookie %s refused the add stream (%s): %s", self.bookie_id, ref.value, err)
            self._on_refused(ref, items)
            return
        if items:
            log.debug("add stream to %s broke: %s", self.bookie_id, err)
        for _r, _packed, done in items:
            try:
                done(err)
            except Exception:
                log.exception("add completion failed")

    def close(self, err: BKError) -> None:
        """Fail what is queued or outstanding with ``err``, cancel the call, join the
        reader."""
        self._end(err, None)
        self._call.cancel()
        if self._reader is not threading.current_thread():
            self._reader.join(5.0)


def _head(queue: deque[Item], n: int) -> list[Item]:
    """The first ``n`` queued (a message never carries more than ``max_batch_bytes``, so a
    long queue need not be measured whole)."""
    return list(islice(queue, n))
