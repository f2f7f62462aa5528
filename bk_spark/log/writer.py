"""The log writer: appends, and the seed's "Rolling ledgers" (four steps in
:meth:`LogWriter._roll_locked`): appends continue into the previous ledger until the CAS
adding the next one succeeded.

A writer with rolling limits assigns each append to a ledger as it is appended
(:mod:`bk_spark.protocol.roll_policy`): to the current ledger while it fits the entry and byte
limits, otherwise to a queue for the next ledger, which the roll that switches to it feeds
into it in append order (as many as fit; the rest wait for the ledger after). So no ledger
exceeds ``roll_max_entries`` or ``roll_max_bytes`` however many appends are in flight, an
entry larger than ``roll_max_bytes`` gets a ledger to itself, and the age limit holds within
one roll's latency (age never holds an append back). The roller thread rolls as soon as the
current ledger is full, appends wait, or its first entry is ``roll_max_age_s`` old.

The roller (:mod:`bk_spark.log.roller`: its thread and the spare ledger) also does step 1
ahead of time: once the current ledger is half-way to a rolling limit, it creates the next
ledger (the *spare*) and registers it as pending for the log (:mod:`bk_spark.log.pending`).
A roll is then one ZooKeeper transaction: the CAS that lists the spare also claims it
(deletes its pending record) and checks its metadata is as created (not recovered by
AutoRecovery meanwhile); if the claim or the check fails, nothing is written and the roll
creates the next ledger itself. The roller runs that transaction ahead too
(:meth:`LogWriter._list_next_locked`, issue 28), shortly before the current ledger is
expected to be full (:func:`~bk_spark.protocol.roll_policy.list_ahead_due`): the next ledger
is then listed while appends still go into the current one, as in the seed's window between
steps 3 and 4 ("we can continue writing to the log while we perform metadata update
operations"), and the roll due once the current ledger is full is only the switch, with no
ZooKeeper operation on the appends' path; the append that finds the current ledger full
makes that switch itself (:meth:`LogWriter._switch_from_append`) rather than waiting for the
roller thread to be scheduled, and leaves step 4 to the roller. While the next ledger is
listed, the current one is second to last (a new owner fences both), readers move on to the
next one only once the current one is closed, and this writer owns the log through the
listed one. An unused spare is deleted when the writer closes or stops, and a crashed
writer's spare is swept by the next writer of the log (or by ``delete_log``): no spare
outlives the next owner.

Appending, as a ledger's add does: an append takes the current ledger's lock once, and (a
writer that rolls) the writer's lock around its assignment. The ledger's sender frames each
round it ships (:meth:`LedgerHandle.frame_rounds_with`): every entry of a round gets the
same frame header, stamped ``max(now, the last stamp of the log)`` (:class:`LedgerStamps`),
joined to the payload without a copy. A roll stops the previous ledger's adds
(:meth:`LedgerHandle.stop_adds`, which also counts them) and caps its later stamps at the
log's last stamp before the next ledger takes any append; an append that raced with the
switch is refused by the previous ledger and retried under the writer's lock, which the
switch holds. So timestamps never decrease in log order, across rolls too.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bk_spark.core.futures import complete_in_order, shared_condition
from bk_spark.core.ledger import LedgerHandle
from bk_spark.errors import (
    BKError,
    InvalidConfigError,
    LedgerClosedError,
    LedgerFencedError,
    LedgerStateError,
    LogNotFoundError,
    LogOwnershipLostError,
    TooLargeError,
    copy_error,
)
from bk_spark.io.metadata_store import ReservedIds, Versioned
from bk_spark.log import pending
from bk_spark.log.acks import AckSegment, AppendFuture, InOrderAcks
from bk_spark.log.admin import delete_ledger_quietly, truncate_log
from bk_spark.log.roller import Roller
from bk_spark.log.store import LEDGER_LOG_KEY, update_log
from bk_spark.log.view import unlisted_ledgers
from bk_spark.protocol import log_rules
from bk_spark.protocol.ledger_metadata import DEFAULT_QUORUMS, LedgerMetadata
from bk_spark.protocol.log_format import (
    FRAME_HEADER_SIZE,
    LogLimits,
    LogMetadata,
    Position,
    PropertiesUpdate,
    encode_entry,
    frame_header,
    now_ms,
)
from bk_spark.protocol.log_rules import LogDecision
from bk_spark.protocol.roll_policy import LedgerAssignment, Placement, RollLimits

if TYPE_CHECKING:
    from bk_spark.core.client import BookKeeper

log = logging.getLogger(__name__)

#: The payload a null value is handed to the ledger as: an object of its own (made at run
#: time, so no caller's payload is this object), which the round framer finds by identity
#: and replaces with a null frame (:func:`encode_entry` of None). A plain ``bytes``: the
#: ledger keeps it as it is (``bytes()`` of a subclass would copy it).
NULL_PAYLOAD = bytes(bytearray(b"<null>"))


class LogClock:
    """The last timestamp given to an entry of the log (ms), shared by the ledgers in
    flight: stamps are ``max(now, last)``."""

    def __init__(self, floor: int) -> None:
        self.lock = threading.Lock()
        self.last = floor

    def raise_to(self, floor: int) -> None:
        with self.lock:
            if floor > self.last:
                self.last = floor


class LedgerStamps:
    """The timestamps of one ledger's entries, given a round at a time by the ledger's
    sender (:meth:`frame`, its round framer), in entry order.

    While the ledger takes appends a round is stamped ``max(now, log's last)`` and raises
    the log's last; once the writer moved on (:meth:`seal`, after the ledger stopped taking
    adds and before the next ledger took any) its remaining rounds are stamped with the
    log's last stamp at that moment: no later than any entry of the next ledger, no earlier
    than any of its own.
    """

    __slots__ = ("clock", "cap", "last", "nulls")

    def __init__(self, clock: LogClock) -> None:
        self.clock = clock
        self.cap: int | None = None
        self.last: int | None = None  # the stamp of its last framed entry (None: none)
        self.nulls = False  # a null was appended: rounds are searched for NULL_PAYLOAD

    def frame(self, payloads: list[bytes]) -> tuple[bytes, list[bytes]]:
        clock = self.clock
        with clock.lock:
            if self.cap is None:
                now = time.time_ns() // 1_000_000  # now_ms(), inlined
                if now > clock.last:
                    clock.last = now
                ts = clock.last
            else:
                ts = self.cap
        self.last = ts
        header = frame_header(ts)
        if not self.nulls or NULL_PAYLOAD not in payloads:
            return header, payloads
        null = encode_entry(None, ts)
        return b"", [null if p is NULL_PAYLOAD else header + p for p in payloads]

    def seal(self) -> None:
        with self.clock.lock:
            self.cap = self.clock.last


@dataclass(frozen=True)
class LogWriterConfig:
    """How a log writer creates and rolls its ledgers.

    ``roll_max_entries`` / ``roll_max_bytes`` (payload bytes) / ``roll_max_age_s``: roll
    once the current ledger reaches any of them (None: never; the age counts only for a
    ledger with entries). ``max_open_attempts``: how often opening restarts at step 1 after
    a lost CAS before giving up. ``limits``: when ledger rows spill into segments.
    """

    ensemble_size: int = DEFAULT_QUORUMS.ensemble_size
    write_quorum_size: int = DEFAULT_QUORUMS.write_quorum_size
    ack_quorum_size: int = DEFAULT_QUORUMS.ack_quorum_size
    password: bytes = b""
    digest: str = "crc32c"
    roll_max_entries: int | None = None
    roll_max_bytes: int | None = None
    roll_max_age_s: float | None = None
    max_open_attempts: int = 30
    close_timeout_s: float = 60.0
    limits: LogLimits = field(default_factory=LogLimits)

    def __post_init__(self) -> None:
        LedgerMetadata.validate_quorums(self.ensemble_size, self.write_quorum_size,
                                        self.ack_quorum_size)
        if isinstance(self.password, str):
            object.__setattr__(self, "password", self.password.encode())
        for opt in ("roll_max_entries", "roll_max_bytes", "roll_max_age_s"):
            value = getattr(self, opt)
            if value is not None and (isinstance(value, bool) or value <= 0):
                raise InvalidConfigError(f"{opt} must be > 0 or None, got {value!r}")
        if self.max_open_attempts < 1:
            raise InvalidConfigError(
                f"max_open_attempts must be >= 1, got {self.max_open_attempts}")

    @property
    def roll_limits(self) -> RollLimits:
        return RollLimits(self.roll_max_entries, self.roll_max_bytes, self.roll_max_age_s)

    @property
    def rolls(self) -> bool:
        return self.roll_limits.any


class LogWriter:
    """The single writer of a log (use :func:`open_log_writer`).

    ``append_async`` may have thousands of appends in flight; their futures complete in
    append order with the :class:`Position` each entry got. If another writer takes the log
    (fences this writer's ledger, or wins the CAS of a roll), every add not yet acknowledged
    and every later call fails with :class:`LogOwnershipLostError`.
    """

    #: Called with the new ledger's id right after a roll's CAS succeeded (step 3) and
    #: before the previous ledger is closed (step 4), on the rolling thread: the window in
    #: which two ledgers of one writer are open. A test seam, not API: set it through
    #: :func:`bk_spark.log.testing.after_roll_cas`.
    _after_roll_cas: Callable[[int], None] | None = None

    def __init__(self, bk: BookKeeper, name: str, config: LogWriterConfig,
                 lh: LedgerHandle, md: Versioned[LogMetadata], ts_floor: int, *,
                 ids: ReservedIds | None = None) -> None:
        """``ids``: the next ledger id, reserved when ``lh`` was created, for the roller's
        first spare (:class:`~bk_spark.log.roller.Roller`)."""
        self._bk = bk
        self.name = name
        self.config = config
        self._md = md
        self._lh = lh
        info = md.value.find_in_tail(lh.id)
        assert info is not None
        self._index = info.index
        self._clock = LogClock(ts_floor)  # the last stamp of the log
        self._stamps = LedgerStamps(self._clock)  # the current ledger's
        self._error: BKError | None = None
        self._error_lock = threading.Lock()
        self._closed = False
        # Lock order: _meta_lock -> the acknowledgement deliverer (InOrderAcks.lock) ->
        # _lock -> _error_lock -> a ledger's own locks. The roller (roller.py) takes
        # _meta_lock for each step and _lock (as _wakeup) to look at the assignment and its
        # spare; an append takes _lock only (none, for a writer without limits).
        self._lock = threading.RLock()
        self._wakeup = threading.Condition(self._lock)  # wakes the roller
        self._meta_lock = threading.Lock()  # one metadata-changing operation at a time
        # closed ledgers whose (last entry, last timestamp) is not recorded yet
        self._ends_to_record: dict[int, tuple[int, int | None]] = {}
        self._acks = InOrderAcks(self._on_add_failed)
        segment = self._acks.open_segment(lh.id, self._index)
        lh.complete_runs_with(segment.complete_run)
        lh.frame_rounds_with(self._stamps.frame, FRAME_HEADER_SIZE)
        # What an append reads (one attribute, swapped whole by a roll): the current ledger
        # and the acknowledgement segment of its appends.
        self._current = (lh, segment)
        self._futures_condition = shared_condition()  # see core/futures.py
        # The next ledger when it is listed ahead of the switch (see the module docstring),
        # with the first timestamp its CAS recorded (under _lock; changed under _meta_lock).
        self._listed: tuple[LedgerHandle, int] | None = None
        # Ledgers an append switched away from (:meth:`_switch_from_append`), with their
        # stamps: step 4 of their roll (close, record the end) is still to do (under
        # _meta_lock; the roller does it before any other step).
        self._unclosed: list[tuple[LedgerHandle, LedgerStamps]] = []
        # Which ledger each append goes to (roll_policy.py; under _lock): the current one, or
        # the queue of the next one once the current one is full for it. None: no limits.
        self._assign: LedgerAssignment[tuple[bytes, AppendFuture]] | None = (
            LedgerAssignment(config.roll_limits, time.monotonic) if config.rolls else None)
        self._max_payload = bk.config.max_entry_size - FRAME_HEADER_SIZE
        # The roller thread and the spare ledger (None: no limits, no roller).
        self._roller: Roller | None = None
        if self._assign is not None:
            self._roller = Roller(
                bk, name, config.password, self._assign, self._wakeup, self._meta_lock,
                max_age_s=config.roll_max_age_s,
                create_ledger=lambda **kw: create_log_ledger(bk, name, config, **kw),
                roll=lambda: self._roll_locked(None),
                list_next=lambda: self._list_next_locked(None),
                listed=lambda: self._listed is not None,
                close_previous=self._close_switched,
                unclosed=lambda: bool(self._unclosed),
                stopped=lambda: self._closed or self._error is not None,
                fail=self._set_error, ids=ids)
            self._roller.start()

    # ----------------------------------------------------------------- state
    @property
    def ledger_id(self) -> int:
        """The ledger new appends go to."""
        return self._lh.id

    @property
    def metadata(self) -> LogMetadata:
        """The log metadata as this writer last wrote or read it."""
        return self._md.value

    @property
    def properties(self) -> dict[str, Any]:
        return dict(self._md.value.properties)

    @property
    def is_closed(self) -> bool:
        return self._closed

    def _check_usable(self) -> None:
        if self._error is not None:
            raise copy_error(self._error)
        if self._closed:
            raise LedgerClosedError(f"the writer of log {self.name!r} is closed: open a new one")

    def _set_error(self, err: BKError) -> BKError:
        """Stop the writer with ``err`` (the first error wins); returns the error kept."""
        with self._error_lock:
            if self._error is None:
                self._error = err
            kept = self._error
        with self._lock:
            self._lh.stop_adds()  # appends go to the slow path, which raises
            self._wakeup.notify_all()
            waiting = list(self._assign.waiting) if self._assign is not None else []
            if self._assign is not None:
                self._assign.waiting.clear()
        # appends that waited for the next ledger were never added: they fail (any earlier
        # append may still be acknowledged; none after a failed one is)
        complete_in_order([(fut, None, copy_error(kept)) for _, (_, fut) in waiting])
        return kept

    def _lost_by_fencing(self, ledger_id: int) -> LogOwnershipLostError:
        return LogOwnershipLostError(
            f"log {self.name!r}: another writer took over the log (ledger {ledger_id} was "
            f"fenced); this writer has stopped. Appends not acknowledged may or may not be "
            f"in the log; open a new writer to continue.")

    def _on_add_failed(self, exc: BaseException, ledger_id: int) -> BKError:
        if isinstance(exc, LedgerFencedError):
            err: BKError = self._lost_by_fencing(ledger_id)
        elif isinstance(exc, BKError):
            err = exc
        else:
            err = BKError(f"log {self.name!r}: add to ledger {ledger_id} failed: {exc!r}")
        return self._set_error(err)

    # ----------------------------------------------------------------- appending
    def append(self, payload: bytes | None, timeout: float | None = None) -> Position:
        """Append one entry; returns its position once it is acknowledged.

        ``payload=None`` appends a null value: readers get ``LogRecord.payload is None``
        (``b""`` is an empty value, a different entry; see log_format.py's framing).
        """
        return self.append_async(payload).result(timeout)

    def append_async(self, payload: bytes | None) -> Future[Position]:
        """Start appending one entry; the future yields its position when acknowledged.

        The entry is stamped ``max(now, last timestamp of the log)`` when the ledger's
        sender ships it, a few ms at most after this call (log_format.py), with one
        exception: an entry still queued in the previous ledger when a roll switched
        ledgers gets the log's last stamp at that moment (:class:`LedgerStamps`), which can
        be earlier than this call by the time the queue took to ship. Stamps never
        decrease along the log either way. ``None`` is a null value (:meth:`append`).
        """
        assign = self._assign
        if payload.__class__ is not bytes:
            return self._append_locked(payload)
        if assign is not None:  # _append_locked's path for bytes, inline (the hot path)
            size = len(payload)
            if size > self._max_payload:
                return self._append_locked(payload)  # raises TooLargeError
            with self._lock:
                if self._error is not None or self._closed:
                    self._check_usable()  # raises
                lh, segment = self._current
                fut = AppendFuture(self._futures_condition, segment)
                if assign.take(size) or assign.append(
                        size, (payload, fut)) is not Placement.ROLL_BEFORE:
                    try:
                        lh.add_entry_token(payload, fut)
                    except BKError as exc:  # the ledger failed: the writer stops
                        raise copy_error(self._on_add_failed(exc, lh.id)) from None
                    switch = False
                else:  # it waits for the next ledger: switch to it now if it is listed
                    switch = self._listed is not None
                if assign.wake:
                    assign.disarm()
                    self._wakeup.notify_all()
            if switch:
                self._switch_from_append()
            return fut
        # A writer without rolling limits: no lock of the writer, the ledger's only.
        lh, segment = self._current
        fut = AppendFuture(self._futures_condition, segment)
        try:  # the future is completed by the segment (complete_runs_with)
            lh.add_entry_token(payload, fut)
        except TooLargeError:
            raise
        except BKError:  # the writer or its ledger stopped: the slow path raises the
            return self._append_locked(payload)  # writer's own error
        return fut

    def _append_locked(self, payload: bytes | bytearray | memoryview | None
                       ) -> Future[Position]:
        """An append under the writer's lock: every append of a writer that rolls (its
        ledger is chosen by :class:`LedgerAssignment`, so that no ledger exceeds a rolling
        limit, and one that waits for the next ledger is added by the roll that switches to
        it), a null or a payload of another type, or one that met a ledger that stopped."""
        if payload is None:
            size = 0
        else:
            if payload.__class__ is not bytes:
                payload = bytes(payload)
            size = len(payload)
            if size > self._max_payload:  # refused now, not when it leaves the queue
                raise TooLargeError(
                    f"entry of {size} bytes exceeds max_entry_size "
                    f"{self._max_payload + FRAME_HEADER_SIZE} (less {FRAME_HEADER_SIZE} "
                    f"bytes of framing)")
        with self._lock:
            if self._error is not None or self._closed:
                self._check_usable()  # raises
            lh, segment = self._current
            fut = AppendFuture(self._futures_condition, segment)
            assign = self._assign
            if assign is not None and assign.append(
                    size, (NULL_PAYLOAD if payload is None else payload, fut)
                    ) is Placement.ROLL_BEFORE:
                if assign.wake:  # the roll adds it (_feed_waiting); wake the roller
                    assign.disarm()
                    self._wakeup.notify_all()
                switch = self._listed is not None
            else:
                switch = False
                if payload is None:
                    self._stamps.nulls = True  # before the sender can see the null
                    payload = NULL_PAYLOAD
                try:
                    lh.add_entry_token(payload, fut)
                except TooLargeError:
                    raise
                except BKError as exc:  # the ledger failed (its adds fail with it): the
                    # writer stops with that error, and each caller gets a copy of it (a
                    # traceback of its own, never the ledger's one exception raised again)
                    raise copy_error(self._on_add_failed(exc, lh.id)) from None
                if assign is not None and assign.wake:
                    assign.disarm()
                    self._wakeup.notify_all()
        if switch:
            self._switch_from_append()
        return fut

    # ----------------------------------------------------------------- rolling
    def _take_spare(self) -> LedgerHandle | None:
        return self._roller.take_spare() if self._roller is not None else None

    def _discard_spare(self, spare: LedgerHandle | None = None) -> None:
        if self._roller is not None:  # (only a roller prepares spares)
            self._roller.discard_spare(spare)

    def roll(self, properties: PropertiesUpdate | None = None) -> int:
        """Roll to a new ledger; returns its id. Appends continue meanwhile.

        ``properties`` (see :meth:`LogMetadata.with_properties`) are changed in the same CAS,
        or, when the roller listed the next ledger ahead already, in a CAS of their own
        right before the switch to it.
        """
        with self._meta_lock:
            self._check_usable()
            return self._roll_locked(properties)

    def _roll_locked(self, properties: PropertiesUpdate | None) -> int:
        """The seed's "Rolling ledgers":

        1. Create a new ledger
        2. Add the new ledger to the ledger list
        3. Write the new ledger list to the datastore using CAS
        4. Close the previous ledger

        "By deferring the closing of the previous ledger until step 4, we can continue
        writing to the log while we perform metadata update operations to add the new
        ledger." Appends switch to the new ledger right after step 3 (the roller may have
        done steps 1-3 ahead, :meth:`_list_next_locked`: then the roll is the switch and
        step 4). Then the previous
        ledger's last entry and timestamp are recorded for seeks (one more CAS). Appends
        that waited for the next ledger (a full one: :class:`LedgerAssignment`) are added to
        it at the switch, in append order, as many as fit it.
        """
        if self._error is not None:
            raise copy_error(self._error)
        if self._listed is None:
            self._list_next_locked(properties)  # steps 1-3
        elif properties is not None:  # listed ahead already: the properties' own CAS
            self._md = self._cas_properties(properties)
        return self._switch_to_listed()

    def _list_next_locked(self, properties: PropertiesUpdate | None) -> None:
        """Steps 1-3 of a roll (under _meta_lock): the next ledger is created (or the
        spare taken) and listed with a CAS; appends still go to the current ledger until
        :meth:`_switch_to_listed`. The roller calls it ahead of the switch (the module
        docstring), a roll right before it."""
        if self._error is not None:
            raise copy_error(self._error)
        self._close_switched()  # the previous roll's step 4 first, if an append switched
        # Step 1: create a new ledger (or take the one prepared ahead).
        spare = self._take_spare()
        new = spare or create_log_ledger(self._bk, self.name, self.config)
        # Steps 2 and 3: add it to the ledger list; write the list back with a CAS.
        try:
            try:
                md, first_ts = self._cas_add_ledger(new, properties, claim=spare is not None)
            except LedgerStateError as exc:
                if spare is None:
                    raise
                # A spare waits up to half a rolling period: if a bookie of its ensemble
                # died meanwhile, AutoRecovery recovers (fences and closes) an OPEN ledger
                # without adds after its grace period, and a writer that opened the log
                # meanwhile swept it. Rolling into it would stop this writer.
                log.info("log %r: spare ledger %d was recovered or swept (%s); creating the "
                         "next ledger instead", self.name, spare.id, exc)
                self._discard_spare(spare)
                spare, new = None, create_log_ledger(self._bk, self.name, self.config)
                md, first_ts = self._cas_add_ledger(new, properties, claim=False)
        except BaseException as exc:
            self._forget_unlisted_ledger(new.id, spare=spare is not None)
            if isinstance(exc, LogOwnershipLostError | LogNotFoundError):
                self._set_error(exc)
            raise
        self._md = md
        with self._lock:
            self._listed = (new, first_ts)
            if self._assign is not None:
                self._assign.listed_at = time.monotonic()
        if self._after_roll_cas is not None:  # a test seam: bk_spark.log.testing
            self._after_roll_cas(new.id)

    def _switch_to_listed(self) -> int:
        """The rest of a roll (under _meta_lock), once the next ledger is listed: appends
        switch to it, then step 4 closes the previous ledger and its end is recorded.
        Returns the new ledger's id."""
        new_id = self._switch_locked()
        self._close_switched()
        return new_id

    def _switch_from_append(self) -> None:
        """The switch made by the append that found the current ledger full while the next
        one is listed (issue 28, :mod:`~bk_spark.protocol.roll_policy`): on this thread, so
        the appends queued behind the full ledger wait for no hand-off to the roller; step 4
        (:meth:`_close_switched`) is left to the roller, which does it before any other
        step. Only if nothing else holds _meta_lock (a roller's step, a roll, a close, a
        properties CAS): otherwise the roller switches, as before, once it looks again."""
        if not self._meta_lock.acquire(blocking=False):
            return
        try:
            with self._lock:
                due = (self._listed is not None and self._error is None and not self._closed
                       and self._assign is not None and bool(self._assign.waiting))
            if due:
                self._switch_locked()
        finally:
            self._meta_lock.release()

    def _switch_locked(self) -> int:
        """The switch of a roll (under _meta_lock; takes the acknowledgement deliverer's
        lock and _lock): appends go to the listed ledger from now on, the ones that waited
        for it first; the previous ledger takes no more adds and waits for step 4 in
        :attr:`_unclosed`. Returns the new ledger's id."""
        assert self._listed is not None
        md = self._md
        with self._acks.lock, self._lock:  # (lock order: see InOrderAcks.lock)
            (new, first_ts), self._listed = self._listed, None
            prev, prev_stamps = self._lh, self._stamps
            appended = prev.stop_adds()  # an append meeting it retries under self._lock
            prev_stamps.seal()  # its rounds still to ship: no later than the next ledger's
            self._unclosed.append((prev, prev_stamps))
            info = md.value.find_in_tail(new.id)
            assert info is not None
            segment = self._acks.open_segment(new.id, info.index, appended)
            stamps = LedgerStamps(self._clock)
            new.complete_runs_with(segment.complete_run)
            new.frame_rounds_with(stamps.frame, FRAME_HEADER_SIZE)
            self._clock.raise_to(first_ts)  # the new ledger's first_ts bounds its entries
            self._lh, self._stamps, self._index = new, stamps, info.index
            self._current = (new, segment)
            if self._error is not None:
                new.stop_adds()
            elif self._assign is not None:
                self._feed_waiting(new, stamps, segment)
            self._wakeup.notify_all()  # the roller: step 4 is due
        return new.id

    def _close_switched(self) -> None:
        """Step 4 of every roll whose switch is made (under _meta_lock), oldest first:
        close the previous ledger (waits for its outstanding adds; a failure stops the
        writer), then record its last entry and timestamp. Done before any later ledger is
        listed (:meth:`_list_next_locked`), so at most the last two ledgers are open."""
        while self._unclosed:
            prev, stamps = self._unclosed[0]
            self._close_ledger(prev)
            with self._lock:
                del self._unclosed[0]
            self._record_description(prev.id, prev.last_add_confirmed, stamps.last)

    def _feed_waiting(self, new: LedgerHandle, stamps: LedgerStamps, segment: AckSegment
                      ) -> None:
        """At a roll's switch (under _lock): the appends that waited for the next ledger go
        to ``new``, oldest first, as many as fit; the rest wait for the one after it (the
        roller rolls again at once)."""
        assert self._assign is not None
        taken = self._assign.switch()
        for i, (payload, fut) in enumerate(taken):
            fut._segment = segment
            if payload is NULL_PAYLOAD:
                stamps.nulls = True
            try:
                new.add_entry_token(payload, fut)
            except BKError as exc:  # the new ledger failed already: the writer stops (and
                err = self._on_add_failed(exc, new.id)  # fails the appends still waiting)
                complete_in_order([(f, None, copy_error(err)) for _, f in taken[i:]])
                return
        if self._assign.waiting:
            self._wakeup.notify_all()

    def _ownership_check(self, m: LogMetadata, ledger_id: int) -> None:
        if not log_rules.owns(m, ledger_id):
            last = m.last_ledger
            raise LogOwnershipLostError(
                f"log {self.name!r}: another writer took over the log (its last ledger is "
                f"{last.ledger_id if last else None}, not this writer's {ledger_id}); this "
                f"writer has stopped. Appends not acknowledged may or may not be in the log; "
                f"open a new writer to continue.")

    def _cas_add_ledger(self, new: LedgerHandle, properties: PropertiesUpdate | None, *,
                        claim: bool) -> tuple[Versioned[LogMetadata], int]:
        """Steps 2 and 3 of a roll; ``claim``: ``new`` is the spare, claimed by the same
        transaction (its pending record deleted, its metadata checked unchanged since it
        was created: :class:`LedgerStateError` if either is not so, and nothing is
        written)."""
        current_id, new_id = self._owner_ledger(), new.id
        first_ts = [0]

        def needs_change(m: LogMetadata) -> bool:
            decision = log_rules.roll(m, current_id, new_id)
            if decision is LogDecision.LOST:
                self._ownership_check(m, current_id)
            return decision is LogDecision.CHANGE  # DONE: our own CAS landed

        def make_change(m: LogMetadata) -> LogMetadata:
            m = self._apply_descriptions(m)
            first_ts[0] = max(now_ms(), self._clock.last, m.max_known_ts_ms)
            m = m.with_ledger_added(new_id, first_ts[0])
            if properties is not None:
                m = m.with_properties(properties)
            return m.spilled(self.config.limits)

        checks, deletes = (), ()
        if claim:
            checks = ((self._bk.metadata_store.ledger_path(new_id), new.metadata_version),)
            deletes = (pending.record_path(self._bk, self.name, new_id),)
        md = update_log(self._bk, self.name, needs_change=needs_change,
                         make_change=make_change, current=self._md, also_check=checks,
                         also_delete=deletes)
        return md, first_ts[0] or max(now_ms(), self._clock.last)

    def _owner_ledger(self) -> int:
        """The ledger through which this writer owns the log: the last one it listed."""
        listed = self._listed
        return listed[0].id if listed is not None else self._lh.id

    def _forget_unlisted_ledger(self, ledger_id: int, spare: bool = False) -> None:
        """Delete a ledger whose CAS failed, unless the log lists it after all (a spare:
        with its pending record)."""
        for lid in unlisted_ledgers(self._bk, self.name, [ledger_id]) or []:
            if spare:
                pending.discard(self._bk, self.name, [lid], self.config.password)
            else:
                delete_ledger_quietly(self._bk, lid, self.config.password)

    def _close_ledger(self, lh: LedgerHandle) -> None:
        try:
            lh.close(self.config.close_timeout_s)
        except (LedgerFencedError, LedgerStateError):
            raise copy_error(self._set_error(self._lost_by_fencing(lh.id))) from None
        except BKError as exc:
            # The previous ledger must be closed before the next roll makes it third to
            # last (a new owner fences only the last two): stop this writer.
            raise copy_error(self._set_error(BKError(
                f"log {self.name!r}: could not close ledger {lh.id} ({exc}); this writer "
                f"has stopped, open a new one"))) from None

    def _apply_descriptions(self, m: LogMetadata) -> LogMetadata:
        for lid, (last, ts) in self._ends_to_record.items():
            m = m.with_ledger_described(lid, last, ts)
        return m

    def _record_description(self, ledger_id: int, last_entry: int, last_ts: int | None
                            ) -> None:
        """Record a closed ledger's last entry and timestamp in the log metadata (any client
        may: they are facts of a closed ledger); on failure the next CAS carries them."""
        self._ends_to_record[ledger_id] = (last_entry, last_ts if last_entry >= 0 else None)
        try:
            self._md = update_log(
                self._bk, self.name,
                needs_change=lambda m: any(m.undescribed(lid) for lid in self._ends_to_record),
                make_change=self._apply_descriptions, current=self._md)
        except BKError as exc:
            log.warning("log %r: could not record the end of ledger %d yet: %s",
                        self.name, ledger_id, exc)
            return
        self._ends_to_record.clear()

    # ----------------------------------------------------------------- properties
    def update_properties(self, update: PropertiesUpdate) -> dict[str, Any]:
        """CAS the log properties, only while this writer still owns the log.

        ``update``: a mapping merged in (None removes a key) or a function from the current
        properties to the new ones. Returns the properties written.
        """
        with self._meta_lock:
            self._check_usable()
            self._md = self._cas_properties(update)
            return dict(self._md.value.properties)

    def _cas_properties(self, update: PropertiesUpdate) -> Versioned[LogMetadata]:
        """CAS the log properties while this writer owns the log (under _meta_lock)."""
        current_id = self._owner_ledger()

        def make_change(m: LogMetadata) -> LogMetadata:
            self._ownership_check(m, current_id)
            return self._apply_descriptions(m).with_properties(update)

        try:
            md = update_log(self._bk, self.name, needs_change=lambda m: True,
                            make_change=make_change, current=self._md)
        except (LogOwnershipLostError, LogNotFoundError) as exc:
            raise copy_error(self._set_error(exc)) from None
        self._ends_to_record.clear()
        return md

    def truncate(self, before: Position) -> list[int]:
        """:func:`~bk_spark.log.truncate_log` with this writer's password (given once, when
        it was opened): drop the log's whole ledgers before ``before``; their ids."""
        return truncate_log(self._bk, self.name, before, self.config.password)

    # ----------------------------------------------------------------- closing
    def close(self) -> None:
        """Wait for outstanding appends, close the current ledger, record its end.

        A writer that lost the log closes quietly (its adds already failed).
        """
        with self._meta_lock:
            with self._lock:
                if self._closed:
                    return
                self._closed = True  # an append from now on raises
                self._wakeup.notify_all()
            try:
                if self._error is None:
                    self._close_switched()  # an append switched: step 4 of that roll
                # appends that wait for the next ledger (the current one is full): roll
                # until every one is in a ledger (the roller stops once it sees _closed)
                while self._error is None and self._assign is not None and (
                        self._assign.waiting):
                    self._roll_locked(None)
                if self._error is None and self._listed is not None:
                    self._switch_to_listed()  # listed ahead: close it as the current one
            except BaseException as exc:  # the waiting appends fail with the roll's error
                self._set_error(exc if isinstance(exc, BKError) else BKError(
                    f"log {self.name!r}: closing could not roll to a ledger for the "
                    f"appends that waited for one: {exc!r}"))
                self._discard_spare()
                raise
            with self._lock:
                lh, stamps, error = self._lh, self._stamps, self._error
                lh.stop_adds()
            try:
                if error is None:
                    try:
                        lh.close(self.config.close_timeout_s)
                    except (LedgerFencedError, LedgerStateError):
                        log.info("log %r: ledger %d was fenced before close", self.name,
                                 lh.id)
                    else:
                        self._record_description(lh.id, lh.last_add_confirmed, stamps.last)
            finally:
                self._discard_spare()
        if self._roller is not None:
            self._roller.join(5.0)

    def __enter__(self) -> LogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def create_log_ledger(bk: BookKeeper, name: str, config: LogWriterConfig, **kw: Any
                      ) -> LedgerHandle:
    """A new ledger for log ``name`` (``kw``: for :meth:`BookKeeper.create_ledger`)."""
    return bk.create_ledger(config.ensemble_size, config.write_quorum_size,
                            config.ack_quorum_size, config.digest, config.password,
                            custom_metadata={LEDGER_LOG_KEY: name}, **kw)
