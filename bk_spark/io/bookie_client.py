"""gRPC adapter to bookies: the I/O edge of the ledger core.

Adds go in batches, by one path and no thread of its own: a caller (a ledger writer's
round, a recovery write-back) hands :meth:`BookieClient.send_batch` the framed entries of one
ledger, which go as few ``AddEntries`` requests as ``max_batch_entries`` /
``max_batch_bytes`` allow, keeping at most ``max_in_flight`` requests of that ledger
outstanding to the bookie (the caller blocks meanwhile, so its next batch grows with the
load: thousands of adds in flight cost a handful of round trips, not one each). The window
is per ledger (and per kind: a recovery's write-backs apart from a writer's adds), so a
thousand writers sharing a bookie, or a recovery beside a writer, do not queue behind each
other's requests. :meth:`BookieClient.add_entry` is one
entry sent that way, for tools and tests.

Each request goes on the bookie's add stream (:mod:`bk_spark.io.add_stream`, issue 28 §2):
one long-lived ``AddStream`` call per bookie, opened on first use, whose messages carry the
requests of many ledgers (and explicit LACs, :meth:`BookieClient.send_lac`) gathered while
its window was shut; a bookie that refuses the stream (older, full, or not for this peer)
gets unary ``AddEntries`` calls, as it does with ``ClientConfig.add_stream`` off. The
answer, and what a failure does to the writer, are the same either way. Within one corked
pass of the client's I/O loop, the small plain adds and explicit LACs of all its writers to
one bookie become ONE unit of many ledgers (:class:`_Unit`, ``AddStreamRequest.adds``,
issue 28) once the bookie's stream said it reads units: one message, one journal
submission on the bookie, one answer with an outcome per ledger.

A ledger writer's rounds (:meth:`BookieClient.send_batch`) pipeline deeper when they are
big: beyond ``max_in_flight`` requests, a request of at least ``pipeline_min_bytes`` may
go while the bookie's requests in flight hold less than ``max_in_flight_bytes`` (like
BookKeeper's pipelining, bounded by bytes, and by the writer's own window). Two requests of
a thousand entries each cover a round trip on one host, not across a 10 ms link: there a
writer with thousands of adds queued kept only ~2,000 of them in flight. Small requests
(moderate load) still wait for one of the ``max_in_flight``: they gain nothing from depth,
and waiting lets the next one carry more entries for one RPC.
"""

from __future__ import annotations

import logging
import struct
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, Generic, Protocol, TypeVar

import grpc

from bk_spark.errors import (
    BKError,
    BookieUnavailableError,
    DigestMismatchError,
    InvalidConfigError,
    UnauthorizedError,
    error_for_code,
)
from bk_spark.io.add_stream import (
    UNIT,
    AddStream,
    corked_unit,
    flush_cork,
    release_unit,
)
from bk_spark.io.entry import (  # noqa: F401 - _varint, frame_entry: their old home
    _varint,
    add_answer_error,
    add_request,
    add_request_head,
    frame_entry,
    record_of,
    unit_answer_errors,
)
from bk_spark.io.tls import TlsOptions, refusal_for
from bk_spark.proto import bookie_pb2 as pb
from bk_spark.protocol.add_stream import RETRY_STREAM_S, Refusal, window_open
from bk_spark.protocol.records import (
    MalformedRecordsError,
    Records,
    pack_records,
    parse_records,
)

R = TypeVar("R")
K = TypeVar("K")

READ_BATCH = 1000  # entry ids per read request to one bookie
#: Entry ids per packed read request: an answer costs the bookie little per entry, so fewer,
#: larger requests (each RPC costs both sides a fixed ~0.1-0.3 ms of gRPC).
PACKED_READ_BATCH = 4096

log = logging.getLogger(__name__)

MiB = 1024 * 1024
SERVICE = "/bkspark.v1.Bookie/"
# A bookie's answer to a batch: None = every entry stored, else the error for all of them.
AddCallback = Callable[[BKError | None], None]


class AddSink(Protocol):
    """Receives a bookie's answer for many adds at once (one call per RPC, not per entry)."""

    def on_added(self, tokens: Sequence[Any], err: BKError | None) -> None: ...


@dataclass(frozen=True)
class ClientConfig:
    """Timeouts and batching of bookie RPCs (``BookKeeperConfig.client``). Each field's
    docstring is its row of the README's client settings table (:mod:`bk_spark.readme`)."""

    add_timeout_s: float = 10.0
    """seconds an add request to one bookie may take before that bookie counts as failed"""
    read_timeout_s: float = 10.0
    """seconds a read or LAC request to one bookie may take"""
    max_batch_entries: int = 2048
    """most entries in one add request to a bookie"""
    max_batch_bytes: int = 8 * MiB
    """most payload bytes in one add request to a bookie"""
    max_in_flight: int = 2
    """add requests of one ledger outstanding per bookie (small requests wait for one of
    them)"""
    max_in_flight_bytes: int = 32 * MiB
    """beyond ``max_in_flight``, big requests pipeline while the bookie's requests in flight
    hold less than this"""
    pipeline_min_bytes: int = 256 * 1024
    """the smallest request that may pipeline beyond ``max_in_flight``"""
    tls: TlsOptions | None = None
    """TLS to bookies (CA, client certificate and key); None: from ``security`` (the
    environment's ``BK_TLS_*`` by default), else plaintext"""
    adds_in_flight_max_bytes: int = 2 * MiB
    """most payload bytes of adds one client keeps in flight, over all its ledgers (0: no
    bound); past it an add waits or fails (backpressure, :mod:`bk_spark.core.backpressure`).
    An add offered faster than the bookies take waits at most about this over the client's
    byte rate: 2 MiB holds the 2,000 adds of 1 KiB one ledger needs in flight for its
    maximum rate, and is ~15-20 ms of them at that rate; entries of megabytes need more
    (the Spark data source's clients take 64 MiB)"""
    adds_block_when_full: bool = True
    """past ``adds_in_flight_max_bytes`` an add waits (True) or fails at once with
    ``TooManyRequestsError`` (False)"""
    add_stream: bool = True
    """send adds and explicit LACs on one long-lived stream per bookie, requests of many
    ledgers per message (False, or a bookie that refuses the stream: one unary
    ``AddEntries`` per request)"""

    def __post_init__(self) -> None:
        if self.max_in_flight < 1:
            raise InvalidConfigError(f"max_in_flight must be >= 1, got {self.max_in_flight}")
        if self.max_in_flight_bytes < 0 or self.pipeline_min_bytes < 0:
            raise InvalidConfigError("max_in_flight_bytes and pipeline_min_bytes must be >= 0")
        if self.adds_in_flight_max_bytes < 0:
            raise InvalidConfigError(f"adds_in_flight_max_bytes must be >= 0 (0: no bound), "
                                     f"got {self.adds_in_flight_max_bytes}")

    @property
    def min_connect_timeout_ms(self) -> int:
        """How long one connection attempt may take (gRPC's min reconnect backoff): at
        least the longest operation timeout, and gRPC's own default of 20 s."""
        return int(1000 * max(20.0, self.add_timeout_s, self.read_timeout_s))


def _chunk_ends(entries: Sequence[bytes], max_entries: int, max_bytes: int) -> list[int]:
    """Where to cut ``entries`` into RPCs of at most ``max_entries`` entries, each also
    stopping once it holds ``max_bytes`` (at least one entry per RPC)."""
    sizes = list(accumulate(map(len, entries)))
    ends: list[int] = []
    start, base, n = 0, 0, len(entries)
    while start < n:
        # first index whose running size reaches max_bytes past this chunk's start
        end = min(bisect_left(sizes, base + max_bytes, start) + 1, n, start + max_entries)
        ends.append(end)
        base = sizes[end - 1]
        start = end
    return ends


def _raise_for(resp, bookie_id: str) -> None:
    if resp.status != pb.OK:
        raise error_for_code(resp.status, f"bookie {bookie_id}: {resp.message}")


def unavailable(bookie_id: str, exc: grpc.RpcError, tls: TlsOptions | None = None
                ) -> BKError:
    """The typed error for a failed RPC, with gRPC's status code *and* its detail text
    (\"failed to connect ...: Connection refused\", \"Deadline Exceeded\"): the reason is
    what tells a user a dead bookie from a slow one.

    The one place bookie RPC failures are translated. A connection that failed in or right
    after its TLS handshake is not an unavailable bookie but a refusal the user must fix
    (gRPC only says \"Socket closed\": a bookie requiring client certificates drops the
    connection after TLS 1.3's handshake): :func:`~bk_spark.io.tls.refusal_for` asks the
    bookie once more with the client's TLS files and, when it refused them, the error is an
    :class:`UnauthorizedError` saying which certificate or option is missing (``tls``: the
    client's TLS options, None for plaintext). Callers fail at once on it, as on a wrong
    password, instead of replacing the bookie. Calls made ``wait_for_ready`` see a refused
    handshake as their deadline passing: a TLS client asks then too."""
    code = exc.code() if hasattr(exc, "code") else None
    detail = exc.details() if hasattr(exc, "details") else str(exc)
    detail = detail or ""
    refusal = refusal_for(bookie_id, code, detail, tls)
    if refusal is not None:
        return UnauthorizedError(refusal)
    name = code.name if code is not None else "ERROR"
    return BookieUnavailableError(f"bookie {bookie_id} unavailable ({name}: {detail})")


class BookieCall(Generic[R]):
    """One request in flight to one bookie (``read_entries_future`` and friends).

    :meth:`result` is the bookie's answer, or raises the typed :class:`BKError` it failed
    with: a transport failure (including a cancelled call) as
    :class:`BookieUnavailableError` with gRPC's reason (:func:`unavailable`), a typed
    status (NoSuchLedger, Unauthorized, ...) as its own error. No gRPC type crosses this
    line: the protocol code above waits on calls and sees only bk-spark's errors.
    """

    __slots__ = ("_fut", "bookie_id", "_tls", "_convert")

    def __init__(self, fut: grpc.Future, bookie_id: str, tls: TlsOptions | None = None,
                 convert: Callable[[Any], R] | None = None) -> None:
        self._fut = fut
        self.bookie_id = bookie_id
        self._tls = tls  # the client's: a refused TLS handshake is told apart (unavailable)
        self._convert = convert  # the OK answer into what the caller gets (may raise BKError)

    def result(self) -> R:
        try:
            resp = self._fut.result()
        except grpc.RpcError as exc:
            raise unavailable(self.bookie_id, exc, self._tls) from None
        except grpc.FutureCancelledError:
            raise BookieUnavailableError(
                f"bookie {self.bookie_id}: request cancelled") from None
        _raise_for(resp, self.bookie_id)
        return resp if self._convert is None else self._convert(resp)

    def add_done_callback(self, fn: Callable[[BookieCall[R]], None]) -> None:
        """Run ``fn(self)`` once the call is done (on a gRPC thread, or at once)."""
        self._fut.add_done_callback(lambda _fut: fn(self))

    def cancel(self) -> None:
        self._fut.cancel()


class _CallbackSink:
    """An :class:`AddSink` for one entry whose outcome goes to ``callback(err)``."""

    __slots__ = ("callback",)

    def __init__(self, callback: AddCallback) -> None:
        self.callback = callback

    def on_added(self, tokens: Sequence[Any], err: BKError | None) -> None:
        self.callback(err)


class BookieClient:
    """One gRPC channel to one bookie; adds go in batches (:meth:`send_batch`)."""

    def __init__(self, bookie_id: str, config: ClientConfig | None = None) -> None:
        self.bookie_id = bookie_id
        self.config = config or ClientConfig()
        opts = [("grpc.max_receive_message_length", 256 * MiB),
                ("grpc.max_send_message_length", 256 * MiB),
                ("grpc.enable_retries", 0),
                # A restarted bookie must be reachable again soon: gRPC's default reconnect
                # backoff grows to minutes, and channels share subchannels (and their
                # backoff) unless each has its own pool.
                ("grpc.use_local_subchannel_pool", 1),
                ("grpc.initial_reconnect_backoff_ms", 100),
                ("grpc.max_reconnect_backoff_ms", 2000),
                # gRPC's "min reconnect backoff" is in fact its minimum *connect timeout*
                # (a handshake slower than it fails the attempt): never shorter than an
                # operation's own timeout, or a bookie that stalls briefly while a client
                # connects is taken for dead (needless ensemble changes, failed reads).
                ("grpc.min_reconnect_backoff_ms", self.config.min_connect_timeout_ms)]
        if self.config.tls is not None:
            self.channel = grpc.secure_channel(bookie_id, self.config.tls.credentials(), opts)
        else:
            self.channel = grpc.insecure_channel(bookie_id, opts)
        ch = self.channel

        def unary(name: str, req, resp):
            return ch.unary_unary(SERVICE + name, request_serializer=req.SerializeToString,
                                  response_deserializer=resp.FromString)

        self._add = unary("AddEntries", pb.AddRequest, pb.AddResponse)
        self._add_raw = ch.unary_unary(SERVICE + "AddEntries", request_serializer=None,
                                       response_deserializer=pb.AddResponse.FromString)
        self._read = unary("ReadEntries", pb.ReadRequest, pb.ReadResponse)
        self._read_lac = unary("ReadLac", pb.ReadLacRequest, pb.ReadLacResponse)
        self._fence = unary("Fence", pb.FenceRequest, pb.FenceResponse)
        self._delete = unary("DeleteLedger", pb.DeleteLedgerRequest, pb.DeleteLedgerResponse)
        self._info = unary("Info", pb.InfoRequest, pb.InfoResponse)
        self._held = unary("HeldEntries", pb.HeldEntriesRequest, pb.HeldEntriesResponse)
        self._master_key = unary("ReadMasterKey", pb.MasterKeyRequest, pb.MasterKeyResponse)
        self._add_stream_call = ch.stream_stream(SERVICE + "AddStream", request_serializer=None,
                                                 response_deserializer=None)
        self._stream_lock = threading.Lock()
        self._stream: AddStream | None = None
        self._unary_until = 0.0  # a bookie that refused the stream gets unary adds till then
        self._cv = threading.Condition()
        self._in_flight: dict[tuple[int, bool], int] = {}  # requests out per (ledger, recovery)
        self._in_flight_bytes = 0  # of send_batch's requests (pipelining, see the docstring)
        # see has_window: by (ledger, recovery), woken when one of its requests is answered
        self._window_waiters: dict[tuple[int, bool], list[Callable[[], None]]] = {}
        self._closed = False

    # ---------------------------------------------------------------- adds (batched)
    def add_entry(self, ledger_id: int, master_key: bytes, entry: pb.Entry,
                  callback: AddCallback, *, recovery: bool = False) -> None:
        """Send one entry (a tool's or a test's add: writers and recovery send rounds with
        :meth:`send_batch`, the one add path); ``callback(err)`` gets the bookie's answer
        once, None when it stored the entry."""
        self.send_batch(ledger_id, master_key, [record_of(entry)],
                        [None], _CallbackSink(callback), lac=entry.lac, recovery=recovery)

    def send_batch(self, ledger_id: int, master_key: bytes, entries: Sequence[bytes],
                   tokens: Sequence[Any], sink: AddSink, *, lac: int = -1,
                   recovery: bool = False) -> None:
        """Send entries already made records (:meth:`EntryCodec.frame_run`,
        :func:`~bk_spark.io.entry.record_of`), packed (:func:`~bk_spark.io.entry.add_request`)
        in as few RPCs as the batch limits allow; ``sink.on_added(tokens, err)`` gets each
        RPC's answer, with the tokens of the entries it carried.

        Blocks while ``max_in_flight`` requests of this ledger are outstanding (the
        caller's next batch grows meanwhile), unless the request is big enough to pipeline
        deeper (:meth:`_may_send`).
        """
        cfg = self.config
        if not recovery and self._gather(ledger_id, master_key, entries, tokens, sink, lac):
            return
        release_unit(self)  # a unit this pass built for this bookie goes first (order)
        head = add_request_head(ledger_id, master_key, recovery=recovery, lac=lac)
        ends = (_chunk_ends(entries, cfg.max_batch_entries, cfg.max_batch_bytes)
                if len(entries) > 1 else [len(entries)])
        start = 0
        for end in ends:
            request = add_request(head, entries[start:end])  # one copy of each entry
            chunk_tokens = tokens[start:end]
            size = len(request)
            key = (ledger_id, recovery)
            while True:
                with self._cv:
                    closed = self._closed
                    if closed or self._may_send(size, ledger_id, recovery):
                        if not closed:
                            self._in_flight[key] = self._in_flight.get(key, 0) + 1
                            self._in_flight_bytes += size
                        break
                # What this thread queued corked must go before it waits, and outside the
                # client's lock: a unit whose stream ended sends its parts alone, and a part
                # failing at once completes its ledger's adds (the ledger's lock, which
                # LedgerHandle._ship holds while it asks this client for a window).
                flush_cork()
                with self._cv:
                    if not self._closed and not self._may_send(size, ledger_id, recovery):
                        self._cv.wait()
            if closed:
                err = BookieUnavailableError(f"client for bookie {self.bookie_id} is closed")
                sink.on_added(chunk_tokens, err)
                return
            self._send_add(request, end > start,
                           lambda err, t=chunk_tokens, n=size, k=key: self._batch_done(
                               sink, t, err, n, k))
            start = end

    def _gather(self, ledger_id: int, master_key: bytes, entries: Sequence[bytes],
                tokens: Sequence[Any], sink: AddSink | None, lac: int) -> bool:
        """Join a writer's small plain add (or, with no entries, an explicit LAC) to the
        unit this thread's corked pass builds for this bookie (:class:`_Unit`), if it can:
        the pass is corked, the bookie's open stream reads units, the ledger's request
        window is open (:meth:`_may_send`, accounted as one request of the ledger, as
        :meth:`send_batch` does), and the unit stays under ``max_batch_bytes``. False: send
        it alone."""
        stream = self._stream
        if stream is None or not stream.reads_adds or len(entries) > UNIT_MAX_ENTRIES:
            return False
        size = sum(map(len, entries))
        if size > UNIT_PART_MAX_BYTES:
            return False
        unit = corked_unit(self, lambda: _Unit(self, stream))
        if unit is None:
            return False
        if unit.stream is not stream or unit.nbytes + size > self.config.max_batch_bytes:
            release_unit(self)
            unit = corked_unit(self, lambda: _Unit(self, stream))
        if entries:
            key = (ledger_id, False)
            with self._cv:
                if self._closed or not self._may_send(size, ledger_id, False):
                    return False
                self._in_flight[key] = self._in_flight.get(key, 0) + 1
                self._in_flight_bytes += size
            unit.add(ledger_id, master_key, entries, lac, (sink, tokens, size, key))
        else:
            unit.add(ledger_id, master_key, entries, lac, None)
        return True

    def _parts_done(self, parts: list[_Part | None], errors: Sequence[BKError | None]) -> None:
        """A unit's answer: each ledger part's window freed (one lock for all of them) and
        its outcome handed to its sink, as :meth:`_batch_done` does for one request."""
        woken: list[Callable[[], None]] = []
        with self._cv:
            for part in parts:
                if part is not None:
                    woken += self._release_locked(part[3], part[2])
            self._cv.notify_all()
        for part, err in zip(parts, errors, strict=True):
            if part is None:
                if err is not None:
                    log.debug("explicit LAC to %s failed: %s", self.bookie_id, err)
                continue
            try:
                part[0].on_added(part[1], err)
            except Exception:
                log.exception("add sink failed")
        for wake in woken:
            wake()

    def _send_add(self, request: bytes, packed: bool, done: AddCallback) -> None:
        """Send one serialized ``AddRequest`` (``packed``: it carries records,
        :func:`~bk_spark.io.entry.add_request`); ``done(err)`` gets its answer once. On the
        bookie's add stream (opened on first use, again after it broke), else (refused,
        or ``add_stream`` off) as a unary ``AddEntries``: the same answer either way, read
        by :func:`~bk_spark.io.entry.add_answer_error`."""
        stream = self._stream  # the open stream's fast path (no lock, no clock)
        if stream is not None and stream.submit(request, packed, done):
            return
        if self.config.add_stream and time.monotonic() >= self._unary_until:
            for _ in range(2):  # a stream that just ended: once more, on a new one
                try:
                    stream = self._add_stream()
                except Exception as exc:  # the channel closed under us: unary says so
                    log.debug("add stream to %s not opened: %r", self.bookie_id, exc)
                    break
                if stream is None:
                    break
                if stream.submit(request, packed, done):
                    return
        self._send_unary(request, packed, done)

    def _send_unary(self, request: bytes, packed: bool, done: AddCallback) -> None:
        try:
            fut = self._add_raw.future(request, timeout=self.config.add_timeout_s)
        except Exception as exc:  # channel closed under us
            done(BookieUnavailableError(f"bookie {self.bookie_id}: {exc}"))
        else:
            fut.add_done_callback(lambda f: done(self._outcome(f, packed)))

    def _add_stream(self) -> AddStream | None:
        """The open add stream, opened now if there is none (None: the client is closed,
        or the bookie refused streams a moment ago)."""
        with self._stream_lock:
            stream = self._stream
            if stream is not None and not stream.ended:
                return stream
            if self._closed or time.monotonic() < self._unary_until:
                return None
            cfg = self.config
            self._stream = stream = AddStream(
                self.bookie_id, self._add_stream_call, max_in_flight=cfg.max_in_flight,
                max_in_flight_bytes=cfg.max_in_flight_bytes,
                pipeline_min_bytes=cfg.pipeline_min_bytes,
                max_message_bytes=cfg.max_batch_bytes, timeout_s=cfg.add_timeout_s,
                on_broken=lambda exc: unavailable(self.bookie_id, exc, cfg.tls),
                on_refused=self._stream_refused)
            return stream

    def _stream_refused(self, why: Refusal, items: list[tuple[bytes, bool, AddCallback]]
                        ) -> None:
        """The bookie refused the stream before serving any of it: unary from now on (for
        :data:`~bk_spark.protocol.add_stream.RETRY_STREAM_S` if it had no stream to spare),
        and the stream's requests go again that way (an add is idempotent on a bookie)."""
        with self._stream_lock:
            self._unary_until = time.monotonic() + (
                RETRY_STREAM_S if why is Refusal.UNARY_FOR_A_WHILE else float("inf"))
        for request, packed, done in items:
            if packed == UNIT:  # never sent before an answer said the bookie reads units
                done(BookieUnavailableError(  # type: ignore[arg-type]
                    f"bookie {self.bookie_id} refused its add stream ({why.value})"))
                continue
            self._send_unary(request, packed, done)

    def has_window(self, size: int, wake: Callable[[], None], ledger_id: int) -> bool:
        """Whether a :meth:`send_batch` request of about ``size`` bytes would go now,
        without waiting for an answer (:meth:`_may_send`). If not, ``wake()`` runs once,
        on the thread of the answer that frees a request (or at :meth:`close`): a writer
        shipping on the client's I/O loop parks there instead of blocking it."""
        with self._cv:
            if self._closed or self._may_send(size, ledger_id, False):
                return True
            self._window_waiters.setdefault((ledger_id, False), []).append(wake)
            return False

    def _may_send(self, size: int, ledger_id: int, recovery: bool) -> bool:
        """Whether a ``send_batch`` request of ``size`` bytes may go now (caller holds the
        lock): while fewer than ``max_in_flight`` requests of the ledger are out, always;
        beyond that,
        a request of at least ``pipeline_min_bytes`` while the bytes in flight stay under
        ``max_in_flight_bytes`` (see the module docstring)."""
        cfg = self.config
        return window_open(self._in_flight.get((ledger_id, recovery), 0),
                           self._in_flight_bytes, size, max_in_flight=cfg.max_in_flight,
                           max_in_flight_bytes=cfg.max_in_flight_bytes,
                           pipeline_min_bytes=cfg.pipeline_min_bytes)

    def _outcome(self, fut: grpc.Future, sent_records: bool) -> BKError | None:
        try:
            resp = fut.result()
        except grpc.RpcError as exc:
            return unavailable(self.bookie_id, exc, self.config.tls)
        except Exception as exc:  # cancelled on close
            return BookieUnavailableError(f"bookie {self.bookie_id}: {exc!r}")
        return add_answer_error(resp, self.bookie_id, sent_records)

    def _release_locked(self, key: tuple[int, bool], size: int) -> list[Callable[[], None]]:
        """Under ``_cv``: one answered request of ledger window ``key`` (``size`` bytes) out
        of the window; returns the writers waiting for that window, to wake outside the
        lock (the one accounting of :meth:`_may_send`'s window, for a request and for
        each part of a unit alike)."""
        left = self._in_flight[key] - 1
        if left:
            self._in_flight[key] = left
        else:
            del self._in_flight[key]
        self._in_flight_bytes -= size
        return self._window_waiters.pop(key, [])

    def _batch_done(self, sink: AddSink, tokens: Sequence[Any], err: BKError | None,
                    size: int, key: tuple[int, bool]) -> None:
        with self._cv:
            waiters = self._release_locked(key, size)
            self._cv.notify_all()
        try:
            sink.on_added(tokens, err)
        except Exception:
            log.exception("add sink failed")
        for wake in waiters:
            wake()

    def send_lac(self, ledger_id: int, master_key: bytes, lac: int) -> None:
        """:meth:`write_lac` without waiting for the answer (the client's I/O loop sends
        a writer's explicit LAC this way), on the add stream with the adds (it gathers with
        other ledgers' requests while the stream is busy, or joins the pass's unit); a
        failure is only logged (the next add carries the LAC anyway)."""
        if self._gather(ledger_id, master_key, (), (), None, lac):
            return
        release_unit(self)
        request = pb.AddRequest(ledger_id=ledger_id, master_key=master_key,
                                lac=lac).SerializeToString()
        bookie = self.bookie_id

        def done(err: BKError | None) -> None:
            if err is not None:
                log.debug("explicit LAC to %s failed: %s", bookie, err)

        self._send_add(request, False, done)

    def write_lac(self, ledger_id: int, master_key: bytes, lac: int) -> None:
        """Explicit LAC: tell the bookie how far the writer has been acknowledged."""
        try:
            resp = self._add(pb.AddRequest(ledger_id=ledger_id, master_key=master_key, lac=lac),
                             timeout=self.config.add_timeout_s)
        except grpc.RpcError as exc:
            raise unavailable(self.bookie_id, exc, self.config.tls) from None
        _raise_for(resp, self.bookie_id)

    # ---------------------------------------------------------------- other RPCs
    def read_entries(self, ledger_id: int, *, entry_ids: Sequence[int] | None = None,
                     first_entry: int = 0, last_entry: int = -1, fence: bool = False,
                     master_key: bytes = b"", max_entries: int = 0, max_bytes: int = 0,
                     timeout: float | None = None) -> pb.ReadResponse:
        """Batched read: a range or a list of ids; raises the bookie's typed error."""
        req = pb.ReadRequest(ledger_id=ledger_id, first_entry=first_entry,
                             last_entry=last_entry, entry_ids=entry_ids or [], fence=fence,
                             master_key=master_key, max_entries=max_entries,
                             max_bytes=max_bytes)
        try:
            resp = self._read(req, timeout=timeout or self.config.read_timeout_s)
        except grpc.RpcError as exc:
            raise unavailable(self.bookie_id, exc, self.config.tls) from None
        _raise_for(resp, self.bookie_id)
        return resp

    def read_entries_future(self, ledger_id: int, entry_ids: Iterable[int],
                            master_key: bytes, timeout: float | None = None, *,
                            wait_for_ready: bool = False) -> BookieCall[pb.ReadResponse]:
        """Read ``entry_ids`` asynchronously with the ledger's ``master_key`` (bookies
        refuse reads without it). ``wait_for_ready``: while the channel is down
        (reconnecting after a failure), wait for it within ``timeout`` instead of failing
        at once."""
        req = pb.ReadRequest(ledger_id=ledger_id, entry_ids=list(entry_ids),
                             master_key=master_key)
        return self._call(self._read.future(
            req, timeout=timeout or self.config.read_timeout_s, wait_for_ready=wait_for_ready))

    def read_records_future(self, ledger_id: int, entry_ids: Sequence[int],
                            master_key: bytes, timeout: float | None = None, *,
                            wait_for_ready: bool = False) -> BookieCall[ReadAnswer]:
        """:meth:`read_entries_future` as a packed read: the answer's entries as
        :class:`~bk_spark.protocol.records.Records` columns, parsed at once
        (:class:`ReadAnswer`; a bookie that predates packed reads answers ``Entry``
        messages, turned into the same columns). A malformed answer raises
        :class:`~bk_spark.errors.DigestMismatchError` from ``result()``, as a corrupt copy."""
        req = pb.ReadRequest(ledger_id=ledger_id, entry_ids=entry_ids, master_key=master_key,
                             packed=True)
        fut = self._read.future(req, timeout=timeout or self.config.read_timeout_s,
                                wait_for_ready=wait_for_ready)
        bookie = self.bookie_id
        return BookieCall(fut, bookie, self.config.tls,
                          convert=lambda resp: ReadAnswer.of(resp, bookie))

    def read_lac(self, ledger_id: int, previous_lac: int = -1, wait_ms: int = 0
                 ) -> pb.ReadLacResponse:
        req = pb.ReadLacRequest(ledger_id=ledger_id, previous_lac=previous_lac, wait_ms=wait_ms)
        try:
            resp = self._read_lac(req, timeout=self.config.read_timeout_s + wait_ms / 1000.0)
        except grpc.RpcError as exc:
            raise unavailable(self.bookie_id, exc, self.config.tls) from None
        _raise_for(resp, self.bookie_id)
        return resp

    def held_entries(self, ledger_id: int, first_entry: int, last_entry: int, *,
                     verify: int = 0) -> list[tuple[int, int]]:
        """Which entries of ``first_entry..last_entry`` the bookie holds, as ascending
        ``(first, last)`` ranges (one call per fragment: the Auditor's periodic check).
        ``verify``: the bookie reads back up to that many of them and leaves out any whose
        record is corrupt (``HeldEntriesRequest.verify_entries``)."""
        req = pb.HeldEntriesRequest(ledger_id=ledger_id, first_entry=first_entry,
                                    last_entry=last_entry, verify_entries=max(0, verify))
        try:
            resp = self._held(req, timeout=self.config.read_timeout_s)
        except grpc.RpcError as exc:
            raise unavailable(self.bookie_id, exc, self.config.tls) from None
        _raise_for(resp, self.bookie_id)
        return list(zip(resp.range_first, resp.range_last, strict=True))

    def read_master_key(self, ledger_id: int) -> bytes:
        """The master key this bookie stored with ``ledger_id`` (re-replication without the
        password). Bookies answer it only to a bookie or admin certificate under mutual
        TLS: anyone else gets :class:`UnauthorizedError`."""
        try:
            resp = self._master_key(pb.MasterKeyRequest(ledger_id=ledger_id),
                                    timeout=self.config.read_timeout_s)
        except grpc.RpcError as exc:
            raise unavailable(self.bookie_id, exc, self.config.tls) from None
        _raise_for(resp, self.bookie_id)
        return bytes(resp.master_key)

    def read_lac_future(self, ledger_id: int, previous_lac: int = -1, wait_ms: int = 0, *,
                        wait_for_ready: bool = False) -> BookieCall[pb.ReadLacResponse]:
        """The bookie's LAC (a long poll when ``wait_ms`` > 0); ``wait_for_ready`` as in
        :meth:`read_entries_future`."""
        req = pb.ReadLacRequest(ledger_id=ledger_id, previous_lac=previous_lac, wait_ms=wait_ms)
        return self._call(self._read_lac.future(
            req, timeout=self.config.read_timeout_s + wait_ms / 1000.0,
            wait_for_ready=wait_for_ready))

    def fence_future(self, ledger_id: int, master_key: bytes, *,
                     wait_for_ready: bool = False) -> BookieCall[pb.FenceResponse]:
        """Fence the ledger on this bookie; ``wait_for_ready`` as in
        :meth:`read_entries_future`."""
        req = pb.FenceRequest(ledger_id=ledger_id, master_key=master_key)
        return self._call(self._fence.future(req, timeout=self.config.read_timeout_s,
                                             wait_for_ready=wait_for_ready))

    def _call(self, fut: grpc.Future) -> BookieCall[Any]:
        return BookieCall(fut, self.bookie_id, self.config.tls)

    def fence(self, ledger_id: int, master_key: bytes) -> pb.FenceResponse:
        return self.fence_future(ledger_id, master_key).result()

    def delete_ledger(self, ledger_id: int, master_key: bytes) -> None:
        """Delete the ledger's data here; ``master_key`` must be the ledger's (or the
        certificate an admin's)."""
        try:
            resp = self._delete(pb.DeleteLedgerRequest(ledger_id=ledger_id,
                                                       master_key=master_key),
                                timeout=self.config.read_timeout_s)
        except grpc.RpcError as exc:
            raise unavailable(self.bookie_id, exc, self.config.tls) from None
        _raise_for(resp, self.bookie_id)

    def info(self) -> pb.InfoResponse:
        try:
            resp = self._info(pb.InfoRequest(), timeout=self.config.read_timeout_s)
        except grpc.RpcError as exc:
            raise unavailable(self.bookie_id, exc, self.config.tls) from None
        _raise_for(resp, self.bookie_id)
        return resp

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()
            waiters = [w for ws in self._window_waiters.values() for w in ws]
            self._window_waiters.clear()
        for wake in waiters:
            wake()
        with self._stream_lock:
            stream, self._stream = self._stream, None
        if stream is not None:
            stream.close(BookieUnavailableError(f"client for bookie {self.bookie_id} is closed"))
        self.channel.close()


#: A writer's add of at most this many entries joins its pass's unit (:class:`_Unit`);
#: larger rounds go as their own ``AddRequest`` (they are few, and big enough alone).
UNIT_MAX_ENTRIES = 64
#: ... and of at most this many bytes.
UNIT_PART_MAX_BYTES = 256 * 1024

#: One ledger's part of a unit: its sink, its tokens, its size, its window key (None: an
#: explicit LAC, nothing to count).
_Part = tuple[AddSink, Sequence[Any], int, tuple[int, bool]]


class _Unit:
    """One corked pass's plain adds and explicit LACs of many ledgers to one bookie: ONE
    ``LedgerAdds`` (``AddStreamRequest.adds``), queued on the bookie's stream when the pass
    ends (:func:`~bk_spark.io.add_stream.corked`) and answered once, one status per ledger
    part (read by :meth:`_done`, outcomes to :meth:`BookieClient._parts_done`). A ledger's
    parts keep their order (a request of the bookie that cannot join the unit first queues
    it: :func:`~bk_spark.io.add_stream.release_unit`). If the stream ended before the unit
    was queued, each part goes as its own ``AddRequest`` (:meth:`BookieClient._send_add`)."""

    __slots__ = ("client", "stream", "records", "ledger_ids", "counts", "keys", "lacs",
                 "parts", "nbytes")

    def __init__(self, client: BookieClient, stream: AddStream) -> None:
        self.client, self.stream = client, stream
        self.records: list[bytes] = []
        self.ledger_ids: list[int] = []
        self.counts: list[int] = []
        self.keys: list[bytes] = []
        self.lacs: list[int] = []
        self.parts: list[_Part | None] = []
        self.nbytes = 0

    def add(self, ledger_id: int, master_key: bytes, entries: Sequence[bytes], lac: int,
            part: _Part | None) -> None:
        self.records += entries
        self.ledger_ids.append(ledger_id)
        self.counts.append(len(entries))
        self.keys.append(master_key)
        self.lacs.append(lac)
        self.parts.append(part)
        self.nbytes += part[2] if part is not None else 0

    def flush(self) -> None:
        """Queue the unit on its stream (or, if it ended, each part alone)."""
        if not self.parts:
            return
        records = self.records
        sizes = list(map(len, records))
        body = pb.LedgerAdds(records=b"".join(records),
                             record_lengths=struct.pack(f"<{len(sizes)}I", *sizes),
                             ledger_ids=self.ledger_ids, counts=self.counts,
                             master_keys=self.keys, lacs=self.lacs).SerializeToString()
        if self.stream.submit(body, UNIT, self._done):  # type: ignore[arg-type]
            return
        client, start = self.client, 0
        for lid, key, n, lac, part in zip(self.ledger_ids, self.keys, self.counts, self.lacs,
                                          self.parts, strict=True):
            request = add_request(add_request_head(lid, key, lac=lac),
                                  records[start:start + n])
            start += n
            if part is None:
                client._send_add(request, False, lambda err: None)
            else:
                client._send_add(request, n > 0,
                                 lambda err, p=part: client._parts_done([p], [err]))

    def _done(self, answer: pb.AddStreamResponse | BKError) -> None:
        """The bookie's answer (or the error the stream failed with): one outcome per
        part; an answer without one status per part fails them all."""
        k = len(self.parts)
        errors: list[BKError | None] = (
            [answer] * k if isinstance(answer, BKError)
            else unit_answer_errors(answer, k, self.client.bookie_id))
        self.client._parts_done(self.parts, errors)


@dataclass(frozen=True, eq=False)
class ReadAnswer:
    """A bookie's answer to a packed read: the entries found (columns, ascending entry
    id), the ids it does not have, and its LAC for the ledger. Ids asked but in neither
    were cut by the bookie's size limit."""

    records: Records
    missing: list[int]
    lac: int

    @classmethod
    def of(cls, resp: pb.ReadResponse, bookie_id: str) -> ReadAnswer:
        try:
            if resp.entries:  # a bookie that predates packed reads
                data, lengths = pack_records(
                    (e.ledger_id, e.entry_id, e.lac, e.payload, e.digest)
                    for e in resp.entries)
                recs = parse_records(data, lengths)
            else:
                recs = parse_records(resp.records, resp.record_lengths)
        except MalformedRecordsError as exc:
            raise DigestMismatchError(f"bookie {bookie_id}: {exc}") from None
        return cls(recs, list(resp.missing), resp.lac)


def check_response(resp, bookie_id: str) -> None:
    """Raise the typed error a bookie's response carries (for callers using futures)."""
    _raise_for(resp, bookie_id)


class BookieClientPool:
    """One :class:`BookieClient` per bookie id, created on first use."""

    def __init__(self, config: ClientConfig | None = None) -> None:
        self.config = config or ClientConfig()
        self._clients: dict[str, BookieClient] = {}
        self._lock = threading.Lock()
        self._closed = False

    def get(self, bookie_id: str) -> BookieClient:
        """The client of ``bookie_id``; :class:`BookieUnavailableError` once the pool is
        closed (a read still running on another thread must not open new channels)."""
        c = self._clients.get(bookie_id)  # the open client's fast path (a writer's every
        if c is not None and not self._closed:  # round asks for each of its bookies)
            return c
        with self._lock:
            if self._closed:
                raise BookieUnavailableError(f"bookie {bookie_id}: the client is closed")
            c = self._clients.get(bookie_id)
            if c is None:
                c = self._clients[bookie_id] = BookieClient(bookie_id, self.config)
            return c

    def scatter_reads(self, ledger_id: int, master_key: bytes,
                      asks: Mapping[K, Sequence[int]], bookie: Callable[[K], str],
                      timeout: Callable[[K], float | None] | None = None, *,
                      packed: bool = False) -> list[tuple[K, list[int], BookieCall[Any]]]:
        """Scatter one read over bookies: for each key of ``asks`` (e.g. an ensemble index
        and a bookie), ``ReadEntries`` of its ids from ``bookie(key)``, in chunks of
        :data:`READ_BATCH` ids (:data:`PACKED_READ_BATCH` for packed reads), all sent
        before any answer is awaited. ``timeout(key)``: a
        request timeout for that key's calls, which then also wait for a reconnecting
        channel (None: the read timeout, failing at once on a down channel). ``packed``:
        packed reads, each call's result a :class:`ReadAnswer` (else a
        ``pb.ReadResponse``). Returns ``(key, chunk, call)`` in sending order; the caller
        gathers the answers."""
        calls = []
        for key, ids in asks.items():
            client = self.get(bookie(key))
            t = timeout(key) if timeout is not None else None
            read = client.read_records_future if packed else client.read_entries_future
            step = PACKED_READ_BATCH if packed else READ_BATCH
            for i in range(0, len(ids), step):
                part = ids[i:i + step]
                chunk = part.tolist() if hasattr(part, "tolist") else list(part)
                calls.append((key, chunk, read(ledger_id, chunk, master_key, t,
                                               wait_for_ready=t is not None)))
        return calls

    def close(self) -> None:
        with self._lock:
            self._closed = True
            clients, self._clients = list(self._clients.values()), {}
        for c in clients:
            c.close()
