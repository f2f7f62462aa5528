"""The bookie's gRPC service: the wire protocol in front of :class:`BookieStorage`.

Requests are decoded here, not by gRPC, so that garbage bytes on the wire get a
typed ``INVALID_REQUEST`` answer instead of an opaque transport error. Every
handler maps :class:`BKError` to its wire status code; the bookie keeps serving
other clients whatever one client sends. Ids, sizes, keys and readonly mode are
checked once, by the storage operation a handler calls
(:mod:`bookie_server.validation`); a handler checks only the wire's own fields.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import grpc
from google.protobuf.message import DecodeError, Message

from bk_spark.allocator import freeze_heap, tune_allocator
from bk_spark.errors import (
    BKError,
    InvalidConfigError,
    InvalidRequestError,
    NoSuchLedgerError,
    UnauthorizedError,
    UnknownError,
)
from bk_spark.io.registration import BookieRegistration
from bk_spark.proto import bookie_pb2 as pb
from bk_spark.protocol.cookie_rules import Action, Decision
from bk_spark.protocol.records import LENGTHS_DTYPE
from bookie_server.access import CLIENT, AccessPolicy, peer_identities
from bookie_server.config import BookieConfig, MiB
from bookie_server.cookie import check_cookies as run_cookie_check
from bookie_server.cookie import stamp_directories
from bookie_server.metrics import BookieMetrics
from bookie_server.self_repair import RepairPeers, SelfRepair, enter_repair
from bookie_server.storage import BookieStorage
from bookie_server.validation import check_read_range, check_same_ledger

log = logging.getLogger(__name__)

SERVICE = "bkspark.v1.Bookie"
MAX_LONG_POLL_MS = 30_000
VERSION = "0.1.0"


def grpc_message_limit(config: BookieConfig) -> int:
    """Largest gRPC message either side may send: a batch of max-size entries."""
    return max(64 * MiB, 4 * config.max_entry_size + MiB)


_ADD_OK = pb.AddResponse(status=pb.OK)
_ADD_OK_PACKED = pb.AddResponse(status=pb.OK, packed=True)


def add_ok(req: pb.AddRequest) -> pb.AddResponse:
    """The OK answer to an add, unary or on a stream alike: ``packed`` set when the request
    carried records, the client's proof that this bookie read them (an older bookie's OK
    lacks it: :func:`bk_spark.io.entry.add_answer_error`)."""
    # record_lengths first: reading a bytes field copies it, and the lengths are small
    return _ADD_OK_PACKED if req.record_lengths or req.records else _ADD_OK


class AddStreams:
    """Admission of add streams: at most ``limit`` open at once (``max_add_streams``), and
    the counts ``Info`` reports."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self.open_now = 0
        self.requests = 0  # AddRequests served over streams
        self.units = self.unit_parts = 0  # units (AddStreamRequest.adds), their parts

    def open(self) -> bool:
        with self._lock:
            if self.open_now >= self.limit:
                return False
            self.open_now += 1
            return True

    def close(self) -> None:
        with self._lock:
            self.open_now -= 1

    def served(self, n: int) -> None:
        with self._lock:
            self.requests += n

    def served_unit(self, parts: int) -> None:
        with self._lock:
            self.units += 1
            self.unit_parts += parts


class _StreamAnswers:
    """The answers of one add stream, queued by journal-writer callbacks and taken by the
    stream's pool thread, which sends them. The stream ends once its reader finished and
    every message read was answered, or at once when the call was cancelled."""

    __slots__ = ("_cv", "_ready", "_due", "_due_bytes", "_finished", "_cancelled",
                 "abort_message")

    def __init__(self) -> None:
        self._cv = threading.Condition(threading.Lock())
        self._ready: list[bytes] = []
        self._due = 0  # messages read and not yet answered
        self._due_bytes = 0  # their size on the wire
        self._finished = False
        self._cancelled = False
        self.abort_message = ""

    def expect(self, size: int, limit: int) -> None:
        """One more message of ``size`` bytes read; first waits while the messages read and
        not yet answered hold ``limit`` bytes or more (the bookie's memory bound per stream:
        meanwhile gRPC's flow control holds the client back, as a full pool of unary calls
        does)."""
        with self._cv:
            while self._due_bytes >= limit and not self._cancelled:
                self._cv.wait()
            self._due += 1
            self._due_bytes += size

    def push(self, answer: bytes, size: int) -> None:
        with self._cv:
            self._ready.append(answer)
            self._due -= 1
            self._due_bytes -= size
            self._cv.notify_all()

    def take(self) -> list[bytes] | None:
        """Every answer ready (waits for one); None: the stream is over."""
        with self._cv:
            while not self._ready:
                if self._cancelled or (self._finished and self._due == 0):
                    return None
                self._cv.wait()
            out, self._ready = self._ready, []
            return out

    def finish(self) -> None:
        with self._cv:
            self._finished = True
            self._cv.notify_all()

    def abort(self, message: str) -> None:
        with self._cv:
            self.abort_message = message
            self._cancelled = True
            self._cv.notify_all()

    def cancel(self) -> None:
        with self._cv:
            self._cancelled = True
            self._cv.notify_all()


class _MessageAnswer:
    """The answer to one stream message, sent once each of its requests is answered."""

    __slots__ = ("_lock", "request_id", "size", "_responses", "_left", "_answers", "_hist",
                 "_t0")

    def __init__(self, request_id: int, size: int, n: int, answers: _StreamAnswers, hist: Any,
                 t0: float) -> None:
        self._lock = threading.Lock()
        self.request_id = request_id
        self.size = size
        self._responses: list[Message | None] = [None] * n
        self._left = n
        self._answers, self._hist, self._t0 = answers, hist, t0

    def put(self, i: int, response: Message) -> None:
        self._hist.observe(time.perf_counter() - self._t0)
        with self._lock:
            self._responses[i] = response
            self._left -= 1
            if self._left:
                return
        self.send()

    def send(self) -> None:
        self._answers.push(pb.AddStreamResponse(
            request_id=self.request_id, responses=self._responses,
            reads_adds=True).SerializeToString(), self.size)


class BookieService:
    """Handlers of the ``Bookie`` RPCs over one storage instance."""

    def __init__(self, config: BookieConfig, storage: BookieStorage,
                 metrics: BookieMetrics) -> None:
        self.config = config
        self.storage = storage
        self.metrics = metrics
        self.policy = AccessPolicy.of(config.allow_clients, config.allow_bookies,
                                      config.allow_admins)
        self.streams = AddStreams(config.max_add_streams)
        #: The last error of self-repair (set by the bookie while it repairs), for Info.
        self.repair_error: Callable[[], str] = lambda: ""

    def _unknown(self, ledger_id: int, what: str) -> UnknownError:
        """The answer for a ledger in limbo (:mod:`bookie_server.limbo`): this bookie lost
        its data and cannot tell, so it never says "no such entry"."""
        return UnknownError(
            f"bookie {self.config.bookie_id} lost its data and is repairing ledger "
            f"{ledger_id}: it cannot tell {what}; ask the other bookies")

    # -- handlers: each takes a decoded request and returns a response message --------
    def add_entries(self, req: pb.AddRequest, _key_required: bool = True,
                    done: Callable[[BKError | None], None] | None = None) -> pb.AddResponse:
        """Store the request's entries (unary ``AddEntries``, and each request of an add
        stream). An add carries its entries packed (``records``, the client's way: checked
        and journaled as they came) or as ``Entry`` messages (a client that predates packed
        adds), never both. With ``done`` it does not wait: ``done(err)`` runs after the
        fdatasync and apply (:meth:`BookieStorage.add_entries_then`,
        :meth:`BookieStorage.add_records_then`); validation raises either way. Returns the
        OK answer (:func:`add_ok`)."""
        lid = req.ledger_id
        ok = add_ok(req)
        if ok.packed:
            if req.entries:
                raise InvalidRequestError(f"an add of ledger {lid} with both records and "
                                          f"entries: send one or the other")
            if done is None:
                self.storage.add_records(lid, req.master_key, req.records, req.record_lengths,
                                         recovery=req.recovery, lac=req.lac)
            else:
                self.storage.add_records_then(lid, req.master_key, req.records,
                                              req.record_lengths, done, recovery=req.recovery,
                                              lac=req.lac)
            return ok
        check_same_ledger(lid, (e.ledger_id for e in req.entries))
        entries = [(e.entry_id, e.lac, e.payload, e.digest) for e in req.entries]
        if done is None:
            self.storage.add_entries(lid, req.master_key, entries, recovery=req.recovery,
                                     lac=req.lac)
        else:
            self.storage.add_entries_then(lid, req.master_key, entries, done,
                                          recovery=req.recovery, lac=req.lac)
        # The status covers every entry of the request: no per-entry results needed.
        return ok

    def add_unit(self, request_id: int, adds: pb.LedgerAdds, size: int,
                 answers: _StreamAnswers, hist: Any, t0: float) -> None:
        """A stream message's unit (``AddStreamRequest.adds``): plain adds and explicit LACs
        of many ledgers, accepted as one (:meth:`BookieStorage.add_records_many_then`: each
        ledger's part checked as its own ``AddRequest`` would be, one journal submission)
        and answered once, after the fdatasync, with one status per part: a part refused
        (fenced, wrong master key, ...) fails alone, counted in ``AddEntries``' error metric
        as a unary add's refusal is (:meth:`_error_answer`); the others are OK."""
        k = len(adds.ledger_ids)

        def answer(part_errors: list[BaseException | None], err: BaseException | None) -> None:
            hist.observe(time.perf_counter() - t0)
            status = [pb.OK] * k
            message = [""] * k
            for i, e in enumerate(part_errors):
                e = e if e is not None else err
                if e is not None:
                    r = self._error_answer("AddEntries", pb.AddResponse, e)
                    status[i], message[i] = r.status, r.message
            answers.push(pb.AddStreamResponse(request_id=request_id, adds_status=status,
                                              adds_message=message, reads_adds=True
                                              ).SerializeToString(), size)

        # The parts' outcomes (known when the call returns) and the write's (known after
        # the fdatasync, on the journal writer): whichever comes second answers.
        lock = threading.Lock()
        outcome: list[list[BaseException | None]] = []
        written: list[BaseException | None] = []

        def done(err: BKError | None) -> None:
            with lock:
                written.append(err)
                ready = bool(outcome)
            if ready:
                answer(outcome[0], err)

        try:
            errors: list[BaseException | None] = list(self.storage.add_records_many_then(
                adds.ledger_ids, adds.master_keys, adds.counts, adds.lacs, adds.records,
                adds.record_lengths, done))
        except Exception as exc:  # the unit's layout is broken: every part fails with it
            answer([exc] * k, None)  # nothing was accepted: done never runs
            return
        with lock:
            outcome.append(errors)
            ready = bool(written)
        if ready:
            answer(errors, written[0])

    def read_entries(self, req: pb.ReadRequest, key_required: bool = True) -> pb.ReadResponse:
        limbo = self.storage.in_limbo(req.ledger_id)
        if req.fence:
            if limbo:
                raise self._unknown(req.ledger_id, "its last-add-confirmed")
            self.storage.fence(req.ledger_id, req.master_key)
        if req.entry_ids:
            ids: Any = list(req.entry_ids)
        else:
            check_read_range(req.first_entry, req.last_entry)
            ids = range(req.first_entry, req.last_entry + 1)
        max_entries = req.max_entries if req.max_entries > 0 else 10_000
        max_bytes = req.max_bytes if req.max_bytes > 0 else 16 * MiB
        try:
            recs, missing = self.storage.read_records(
                req.ledger_id, ids, max_entries=min(max_entries, 100_000),
                max_bytes=min(max_bytes, grpc_message_limit(self.config) - MiB),
                master_key=req.master_key if key_required else None)
        except NoSuchLedgerError:
            if limbo:
                raise self._unknown(req.ledger_id, "which entries it held") from None
            raise
        if limbo:  # only what it holds is answered; its LAC is not known
            if missing:
                raise self._unknown(req.ledger_id, f"whether it held entry {missing[0]}")
            lac, fenced = -1, True
        else:
            lac, _last, fenced = self.storage.ledger_state(req.ledger_id)
        if req.packed:  # the records as read from the entry logs: no object per entry
            return pb.ReadResponse(
                status=pb.OK, lac=lac, fenced=fenced, missing=missing, records=recs.data,
                record_lengths=(recs.payload_ends - recs.starts).astype(
                    LENGTHS_DTYPE).tobytes())
        data = recs.data
        return pb.ReadResponse(
            status=pb.OK, lac=lac, fenced=fenced, missing=missing,
            entries=[pb.Entry(ledger_id=req.ledger_id, entry_id=eid, lac=elac,
                              payload=data[ps:pe], digest=data[ds:ps])
                     for eid, elac, ds, ps, pe in zip(
                         recs.entry_ids.tolist(), recs.lacs.tolist(),
                         recs.digest_starts.tolist(), recs.payload_starts.tolist(),
                         recs.payload_ends.tolist(), strict=True)])

    def read_lac(self, req: pb.ReadLacRequest, _key_required: bool = True
                 ) -> pb.ReadLacResponse:
        if self.storage.in_limbo(req.ledger_id):
            raise self._unknown(req.ledger_id, "its last-add-confirmed")
        if req.wait_ms > 0:
            wait_s = min(req.wait_ms, MAX_LONG_POLL_MS) / 1000.0
            lac, last, fenced = self.storage.wait_for_lac(req.ledger_id, req.previous_lac, wait_s)
        else:
            lac, last, fenced = self.storage.ledger_state(req.ledger_id)
        return pb.ReadLacResponse(status=pb.OK, lac=lac, last_entry=last, fenced=fenced)

    def held_entries(self, req: pb.HeldEntriesRequest, _key_required: bool = True
                     ) -> pb.HeldEntriesResponse:
        if self.storage.repair_mark(req.ledger_id) is not None:
            # still copying it back: what it holds now says nothing of what it should hold
            # (the Auditor would re-replicate what self-repair is about to copy)
            raise self._unknown(req.ledger_id, "which entries it holds until repaired")
        ranges = self.storage.held_ranges(req.ledger_id, req.first_entry, req.last_entry,
                                          verify=req.verify_entries)
        return pb.HeldEntriesResponse(status=pb.OK, range_first=[a for a, _ in ranges],
                                      range_last=[b for _, b in ranges])

    def fence(self, req: pb.FenceRequest, _key_required: bool = True) -> pb.FenceResponse:
        if self.storage.in_limbo(req.ledger_id):  # fenced already, by its repair mark
            raise self._unknown(req.ledger_id, "its last-add-confirmed")
        lac, last = self.storage.fence(req.ledger_id, req.master_key)
        return pb.FenceResponse(status=pb.OK, lac=lac, last_entry=last)

    def delete_ledger(self, req: pb.DeleteLedgerRequest, key_required: bool = True
                      ) -> pb.DeleteLedgerResponse:
        self.storage.delete_ledger(req.ledger_id, req.master_key if key_required else None)
        return pb.DeleteLedgerResponse(status=pb.OK)

    def read_master_key(self, req: pb.MasterKeyRequest, _key_required: bool = True
                        ) -> pb.MasterKeyResponse:
        """The key stored with the ledger (re-replication with no password): the wrapper
        has already refused every peer without the bookie or admin role."""
        return pb.MasterKeyResponse(status=pb.OK,
                                    master_key=self.storage.master_key(req.ledger_id))

    def info(self, req: pb.InfoRequest, _key_required: bool = True) -> pb.InfoResponse:
        used, free = self.storage.disk_usage()
        rp = self.storage.repair_progress()
        return pb.InfoResponse(
            status=pb.OK, bookie_id=self.config.bookie_id, read_only=self.storage.read_only,
            ledgers=len(self.storage.ledger_ids()), disk_used_bytes=used,
            disk_free_bytes=free, max_entry_size=self.config.max_entry_size, version=VERSION,
            repair_state=rp.state, repair_ledgers_total=rp.total, repair_ledgers_left=rp.left,
            repair_limbo_ledgers=rp.limbo, repair_entries_copied=rp.entries_copied,
            repair_bytes_copied=rp.bytes_copied, repair_error=self.repair_error(),
            add_streams_open=self.streams.open_now, stream_add_requests=self.streams.requests,
            stream_add_units=self.streams.units, stream_unit_parts=self.streams.unit_parts)

    # -- plumbing -----------------------------------------------------------------
    def _authorize(self, name: str, context: grpc.ServicerContext) -> bool:
        """The access rules of every RPC (unary, and an add stream when it opens): the
        peer's role from its verified certificate (:mod:`bookie_server.access`), whether it
        may call ``name`` at all, and whether it must present the ledger's master key
        (returned). Raises :class:`UnauthorizedError` for a peer that may not."""
        policy = self.policy
        key_required = True
        role = CLIENT
        if policy.restricted:  # the peer's verified certificate decides its role
            names = peer_identities(context.auth_context())
            role = policy.role(names)
            if role is None:
                raise UnauthorizedError(
                    f"bookie {self.config.bookie_id}: certificate identity "
                    f"{', '.join(sorted(names)) or '(none)'} is in no allow-list of "
                    f"this bookie: ask its operator to add it")
            key_required = policy.key_required(role, name)
        if not policy.may_call(role, name):
            raise UnauthorizedError(
                f"bookie {self.config.bookie_id}: {name} is answered to bookie and "
                f"admin certificates only (mutual TLS with --allow-bookie / "
                f"--allow-admin); this peer is a {role}")
        return key_required

    def _error_answer(self, name: str, resp_type: type[Message], exc: BaseException
                      ) -> Message:
        """The answer for a request that raised (counted in the RPC's error metric): a
        :class:`BKError` as its typed status, anything else as INTERNAL (one request never
        takes the bookie down)."""
        if isinstance(exc, BKError):
            self.metrics.rpc_error(name, pb.StatusCode.Name(exc.code))
            return resp_type(status=exc.code, message=str(exc))
        log.error("%s failed", name, exc_info=exc)
        self.metrics.rpc_error(name, "INTERNAL")
        return resp_type(status=pb.INTERNAL, message=f"{type(exc).__name__}: {exc}")

    def _wrap(self, name: str, req_type: type[Message], resp_type: type[Message],
              fn: Callable[[Any, bool], Message]
              ) -> Callable[[bytes, grpc.ServicerContext], Message]:
        hist = self.metrics.rpc_seconds.labels(name)

        def handler(raw: bytes, context: grpc.ServicerContext) -> Message:
            t0 = time.perf_counter()
            try:
                key_required = self._authorize(name, context)
                try:
                    req = req_type.FromString(raw)
                except (DecodeError, RuntimeError, ValueError) as exc:
                    raise InvalidRequestError(f"undecodable {req_type.__name__}: {exc}") from None
                return fn(req, key_required)
            except Exception as exc:
                return self._error_answer(name, resp_type, exc)
            finally:
                hist.observe(time.perf_counter() - t0)

        return handler

    # -- the add stream ------------------------------------------------------------
    def add_stream(self, requests: Iterator[bytes], context: grpc.ServicerContext
                   ) -> Iterator[bytes]:
        """``AddStream``: one client's adds and explicit LACs, many ledgers per message
        (issue 28 §2). Every request is held to exactly what a unary ``AddEntries`` is:
        the peer's access rights (:meth:`_authorize`, checked once: they are the
        connection's), then :meth:`add_entries` (master key, fencing, recovery flag,
        readonly, validation), its answer built and counted as the unary one
        (:meth:`_error_answer`, the ``AddEntries`` metrics). A stream holds this pool thread
        (it sends the answers) and one reader thread (it decodes and submits the requests)
        for its life, never a thread per request: a request's answer is queued by the
        journal writer after the fdatasync (:meth:`BookieStorage.add_entries_then`, or
        :meth:`BookieStorage.add_records_then` for a packed add, answered ``packed`` as the
        unary call is: :func:`add_ok`) and sent
        from here. At most ``max_add_streams`` are open (the pool has that many threads
        beyond ``grpc_workers``, so unary calls never wait for streams); beyond, the stream
        is refused with RESOURCE_EXHAUSTED and the client sends unary calls."""
        try:
            key_required = self._authorize("AddEntries", context)
        except UnauthorizedError as exc:
            self.metrics.add_streams_refused.labels("PERMISSION_DENIED").inc()
            context.abort(grpc.StatusCode.PERMISSION_DENIED, str(exc))
        if not self.streams.open():
            self.metrics.add_streams_refused.labels("RESOURCE_EXHAUSTED").inc()
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"bookie {self.config.bookie_id} has {self.streams.limit} add streams "
                          f"open, its max_add_streams: send AddEntries")
        self.metrics.add_streams_open.inc()
        answers = _StreamAnswers()
        context.add_callback(answers.cancel)
        reader = threading.Thread(target=self._read_stream, args=(requests, answers, key_required),
                                  name="bookie-add-stream", daemon=True)
        try:
            reader.start()
            while True:
                out = answers.take()
                if out is None:
                    break
                yield from out
            if answers.abort_message:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, answers.abort_message)
        finally:
            answers.cancel()
            self.streams.close()
            self.metrics.add_streams_open.dec()

    def _read_stream(self, requests: Iterator[bytes], answers: _StreamAnswers,
                     key_required: bool) -> None:
        """The stream's reader thread: decode each message and submit its requests, in
        arrival order (so a ledger's requests are journaled in the order sent)."""
        hist = self.metrics.rpc_seconds.labels("AddEntries")
        limit = grpc_message_limit(self.config)
        accepting_many = self.storage.accepting_many
        try:
            for raw in requests:
                t0 = time.perf_counter()
                try:
                    msg = pb.AddStreamRequest.FromString(raw)
                except (DecodeError, RuntimeError, ValueError) as exc:
                    answers.abort(f"undecodable AddStreamRequest: {exc}")
                    return
                if msg.HasField("adds"):  # a unit: many ledgers' adds as one
                    answers.expect(len(raw), limit)
                    self.streams.served_unit(len(msg.adds.ledger_ids))
                    self.add_unit(msg.request_id, msg.adds, len(raw), answers, hist, t0)
                    continue
                n = len(msg.requests)
                answer = _MessageAnswer(msg.request_id, len(raw), n, answers, hist, t0)
                answers.expect(len(raw), limit)
                self.streams.served(n)
                if not n:
                    answer.send()
                # The message's requests are accepted as one (one journal submission),
                # each validated and answered on its own.
                with accepting_many():
                    for i, req in enumerate(msg.requests):
                        try:
                            ok = add_ok(req)  # as the unary answer: packed=True for records
                            self.add_entries(req, key_required,
                                             done=lambda err, i=i, a=answer, ok=ok: a.put(
                                                 i, ok if err is None else self._error_answer(
                                                     "AddEntries", pb.AddResponse, err)))
                        except Exception as exc:
                            answer.put(i, self._error_answer("AddEntries", pb.AddResponse,
                                                             exc))
        except grpc.RpcError:
            pass  # the client went away or cancelled: the answers still due are dropped
        except Exception:  # noqa: BLE001
            log.exception("add stream reader failed")
        finally:
            answers.finish()

    def generic_handler(self) -> grpc.GenericRpcHandler:
        table = {
            "AddEntries": (pb.AddRequest, pb.AddResponse, self.add_entries),
            "ReadEntries": (pb.ReadRequest, pb.ReadResponse, self.read_entries),
            "ReadLac": (pb.ReadLacRequest, pb.ReadLacResponse, self.read_lac),
            "Fence": (pb.FenceRequest, pb.FenceResponse, self.fence),
            "DeleteLedger": (pb.DeleteLedgerRequest, pb.DeleteLedgerResponse,
                             self.delete_ledger),
            "Info": (pb.InfoRequest, pb.InfoResponse, self.info),
            "HeldEntries": (pb.HeldEntriesRequest, pb.HeldEntriesResponse, self.held_entries),
            "ReadMasterKey": (pb.MasterKeyRequest, pb.MasterKeyResponse,
                              self.read_master_key),
        }
        handlers = {
            name: grpc.unary_unary_rpc_method_handler(
                self._wrap(name, req, resp, fn),
                request_deserializer=None,
                response_serializer=resp.SerializeToString,
            )
            for name, (req, resp, fn) in table.items()
        }
        handlers["AddStream"] = grpc.stream_stream_rpc_method_handler(
            self.add_stream, request_deserializer=None, response_serializer=None)
        return grpc.method_handlers_generic_handler(SERVICE, handlers)


class BookieServer:
    """A whole bookie: storage, gRPC server, metrics endpoint and ZooKeeper registration."""

    def __init__(self, config: BookieConfig,
                 make_repair_peers: Callable[[BookieConfig], RepairPeers] | None = None
                 ) -> None:
        """``make_repair_peers``: the cluster client self-repair copies through (``bk
        bookie`` passes one; without it a bookie in repair keeps its marks)."""
        self.config = config
        self.make_repair_peers = make_repair_peers
        self.repair: SelfRepair | None = None
        self.metrics = BookieMetrics()
        self.storage = BookieStorage(config, metrics=self.metrics)
        self.service = BookieService(config, self.storage, self.metrics)
        self.registration: BookieRegistration | None = None
        self.grpc_server: grpc.Server | None = None
        self.metrics_port: int | None = None
        self._stopped = threading.Event()
        self._cookie_checked = False
        self._decision: Decision | None = None  # of the cookie check

    def check_cookies(self) -> Decision | None:
        """Start-up step 1: the cookie check (:mod:`bookie_server.cookie`), before the
        storage opens; None for a bookie without a metadata service (nothing to check).
        Runs once: :meth:`start` calls it unless the caller did (``bk bookie`` does, before
        it starts AutoRecovery beside a bookie that may refuse)."""
        if self._cookie_checked:
            return self._decision
        self._cookie_checked = True
        if not self.config.metadata_service_uri:
            return None
        self._decision = run_cookie_check(self.config)
        return self._decision

    def start(self) -> None:
        """Start the bookie, in this order: 1. the cookie check (a bookie whose directories
        do not match its cookie refuses here); 2. the storage (journal replay); 3. for a
        bookie that lost data, the self-repair's first step (limbo marking) before any
        request is served; 4. gRPC; 5. metrics; 6. registration in ZooKeeper."""
        cfg = self.config
        tune_allocator()  # megabyte batches in and out: see bk_spark.allocator
        decision = self.check_cookies()
        self.storage.start()
        # 3. A bookie that lost data (REPAIR) marks its ledgers before it serves, and its
        # directories are stamped only once the repair is complete; a restart mid-repair
        # is REPAIR again (its directories are still unstamped) and resumes. A crash after
        # the stamping but before the completion was recorded resumes too (and completes).
        if (decision is not None and decision.action is Action.REPAIR) \
                or self.storage.repair_in_progress():
            try:
                self.enter_repair(lambda: stamp_directories(cfg))
            except BaseException:
                self.storage.close()
                raise
        self.metrics.watch_storage(cfg.data_dir, self.storage.disk_usage,
                                   lambda: len(self.storage.ledger_ids()))
        limit = grpc_message_limit(cfg)
        server = grpc.server(
            # a thread per open add stream beyond the unary calls' (BookieService.add_stream)
            futures.ThreadPoolExecutor(max_workers=cfg.grpc_workers + cfg.max_add_streams,
                                       thread_name_prefix="bookie-rpc"),
            options=[("grpc.max_receive_message_length", limit),
                     ("grpc.max_send_message_length", limit),
                     ("grpc.so_reuseport", 0)],
        )
        server.add_generic_rpc_handlers((self.service.generic_handler(),))
        address = f"{cfg.host}:{cfg.port}"
        if cfg.tls_cert is not None and cfg.tls_key is not None:
            # --tls-client-auth require: gRPC refuses, in the handshake, any peer without a
            # certificate signed by --tls-ca (mutual TLS).
            require = cfg.tls_client_auth == "require"
            creds = grpc.ssl_server_credentials(
                [(cfg.tls_key.read_bytes(), cfg.tls_cert.read_bytes())],
                root_certificates=cfg.tls_ca.read_bytes() if cfg.tls_ca is not None else None,
                require_client_auth=require)
            add_port = lambda: server.add_secure_port(address, creds)  # noqa: E731
        else:
            add_port = lambda: server.add_insecure_port(address)  # noqa: E731
        try:
            bound = add_port()
        except RuntimeError:
            bound = 0
        if bound == 0:
            self.storage.close()
            raise InvalidConfigError(f"cannot listen on {address}: port taken?")
        server.start()
        self.grpc_server = server
        if cfg.metrics_port is not None:
            self.metrics_port = self.metrics.serve(cfg.metrics_port, cfg.host)
        self.metrics.read_only.set(1 if self.storage.read_only else 0)
        if cfg.metadata_service_uri:
            self.registration = BookieRegistration(
                cfg.metadata_service_uri, cfg.bookie_id,
                info={"metrics_port": self.metrics_port, "tls": cfg.tls_cert is not None,
                      "http_port": cfg.http_port,
                      "rack": cfg.rack, "mtls": cfg.tls_client_auth == "require"},
                security=cfg.zk_security)
            self.registration.read_only = self.storage.read_only
            self.registration.start()
        self.storage.on_mode_change = self._on_mode_change
        log.info("bookie %s serving (data dir %s)", cfg.bookie_id, cfg.data_dir)

    def enter_repair(self, on_complete: Callable[[], None]) -> SelfRepair:
        """The start-up decision was REPAIR (this bookie lost its data): mark its ledgers
        before it serves, then repair in the background (:mod:`bookie_server.self_repair`);
        ``on_complete`` (stamping the directories) runs once everything is back. Call after
        the storage started and before the bookie registers."""
        peers = self.make_repair_peers(self.config) if self.make_repair_peers else None
        self.repair = enter_repair(self.storage, self.config, peers, on_complete)
        repair = self.repair
        self.service.repair_error = lambda: repair.error
        return repair

    def _on_mode_change(self, read_only: bool) -> None:
        log.warning("bookie %s is now %s", self.config.bookie_id,
                    "readonly" if read_only else "writable")
        self.metrics.read_only.set(1 if read_only else 0)
        if self.registration is not None:
            self.registration.set_read_only(read_only)

    def stop(self) -> None:
        """Unregister, drain RPCs, checkpoint storage. Idempotent."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        if self.registration is not None:
            self.registration.stop()
        if self.repair is not None:
            self.repair.stop()
        if self.grpc_server is not None:
            self.grpc_server.stop(grace=2.0).wait()
        self.storage.close()

    def serve_forever(self) -> None:
        """Run until SIGTERM or SIGINT, then stop cleanly."""
        done = threading.Event()

        def on_signal(signum: int, _frame: object) -> None:
            log.info("signal %d: stopping", signum)
            done.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        self.start()
        freeze_heap()  # this process is the bookie's: no full GC walk of its modules
        try:
            while not done.wait(1.0):
                pass
        finally:
            self.stop()
