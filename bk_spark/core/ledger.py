"""Writing a ledger: ``PendingAddOp``, ensemble change and closing as a writer.

Theory of operation (bookkeeper-protocol.txt, "Writing to ledgers"):

* entry ``n`` goes to the ``Qw`` bookies of its write set, starting at index
  ``n % E`` of its fragment's ensemble (:func:`schedule.write_set`);
* it is acknowledged to the caller once ``Qa`` of them confirmed *and* every
  lower entry was acknowledged (:class:`pending.PendingAdds`, pure);
* every entry carries the writer's current last-add-confirmed (LAC);
* when a bookie fails an add, the writer replaces it (:meth:`_change_ensemble`):
  a new fragment starts at the first entry not yet acknowledged, the metadata
  is CASed, and the unacknowledged entries are resent to the replacement. If
  the ledger is no longer OPEN (a recoverer fenced it), outstanding adds fail;
* closing as a writer (:meth:`LedgerHandle.close`) CASes the state to CLOSED
  with the last acknowledged entry, deciding conflicts as the seed says.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import numpy as np

from bk_spark.core.context import ClientContext
from bk_spark.core.ensemble_change import cas_new_fragment
from bk_spark.core.futures import SharedConditionFuture, complete_adds, shared_condition
from bk_spark.errors import (
    BKError,
    BKTimeoutError,
    LedgerClosedError,
    LedgerFencedError,
    LedgerStateError,
    NoSuchLedgerError,
    TooLargeError,
    UnauthorizedError,
    copy_error,
)
from bk_spark.io.entry import EntryCodec
from bk_spark.io.metadata_store import Versioned
from bk_spark.protocol import ledger_rules
from bk_spark.protocol.ledger_metadata import LedgerMetadata
from bk_spark.protocol.ledger_rules import REPLACEABLE_ERRORS, Decision
from bk_spark.protocol.pending import PendingAdds
from bk_spark.protocol.rounds import round_indexes, round_shares

log = logging.getLogger(__name__)

#: While earlier adds are in flight, the sender lingers (``add_linger_s``) for a round of at
#: least this many entries rather than ship a few at once.
LINGER_MIN_ENTRIES = 64

# Completion of an add: (entry id, None) once acknowledged, (entry id, error) if it failed.
RunCompleter = Callable[[list[Any], int, "BKError | None"], None]
# Frames one round's payloads: (the prefix every entry of the round gets, the payloads).
RoundFramer = Callable[[list[bytes]], tuple[bytes, list[bytes]]]
AddDone = Callable[[int, "BKError | None"], None]


class LedgerHandle:
    """A ledger opened for writing by its single writer (SWMR)."""

    def __init__(self, bk: ClientContext, md: Versioned[LedgerMetadata], password: bytes,
                 codec: EntryCodec, master_key: bytes, *, next_entry: int = 0) -> None:
        self._bk = bk
        self._md = md
        self._password = password
        self._codec = codec
        self._master_key = master_key
        m = md.value
        self.id = m.ledger_id
        self._E, self._Qw, self._Qa = m.ensemble_size, m.write_quorum_size, m.ack_quorum_size
        self._max_entry_size = bk.config.max_entry_size
        self._max_payload = self._max_entry_size  # less what a round framer adds
        # Entries handed out but not yet sent are in the outbox; once the sender encoded
        # them they are registered with _pending, which decides their acknowledgement.
        self._pending = PendingAdds(self._E, self._Qw, self._Qa, last_acked=next_entry - 1)
        self._ensemble: list[str | None] = list(m.last_ensemble)
        self._next_entry = next_entry
        self._acked_length = 0
        # The adds not yet acknowledged, by entry id from _unacked_first: the caller's
        # future or callback for each id handed out, and for each id the sender already
        # encoded its framed wire entry and the ledger's length after it.
        self._unacked_first = next_entry
        self._targets: list[Future[int] | AddDone] = []
        self._wire: list[bytes] = []
        self._ends: list[int] = []
        # runs of decided adds: (first entry id, their targets, error or None)
        self._deliveries: deque[tuple[int, list[Future[int] | AddDone], BKError | None]] = (
            deque())
        self._deliver_lock = threading.Lock()
        self._lock = threading.RLock()
        self._drained = threading.Condition(self._lock)
        self._error: BKError | None = None
        self._closed = False
        self._adds_stopped = False  # stop_adds(): no more adds, the taken ones go on
        self._changing: set[int] = set()  # ensemble indexes being replaced
        # Bookies that failed an add of this ledger since the last acknowledgement: never
        # chosen again as a replacement until the ledger makes progress (see _change_ensemble)
        self._failed_since_progress: set[str] = set()
        self._change_lock = threading.Lock()
        self._lac_sent = -1
        self._lac_flush_due = False  # gathered for _flush_lacs on the I/O loop
        self._sinks: dict[tuple[int, str], _BookieSink] = {}
        # payloads handed out but not yet encoded: the ids before _next_entry
        self._outbox: list[bytes] = []
        # Rounds are shipped by the client's I/O loop (core/client_threads.py), one _ship
        # call at a time: _ship_scheduled while a call is due, _lingering while that call is
        # the linger's timer; _shipped_length is the ledger's length after the last round.
        self._threads = bk.threads
        self._ship_scheduled = False
        self._lingering = False
        self._shipping = False  # a _ship call runs (on the loop, or inline: see _add)
        self._shipped_length = 0
        self._wake_ship = lambda: self._threads.schedule(self._ship)
        # Backpressure (core/backpressure.py): each add's payload is charged to the client
        # until it is decided; _charged holds the running total charged at each add not yet
        # acknowledged (in step with _targets), _charged_released what was given back.
        self._budget = bk.add_budget
        self._charged: list[int] = []
        self._charged_total = 0
        self._charged_released = 0
        self.explicit_lac_interval_s = bk.config.explicit_lac_interval_s
        self._futures_condition = shared_condition()  # see core/futures.py
        # Completes one run of decided adds in entry order (see complete_runs_with).
        self._complete_run: RunCompleter = complete_adds
        self._framer: RoundFramer | None = None  # see frame_rounds_with

    # ------------------------------------------------------------------ properties
    @property
    def metadata(self) -> LedgerMetadata:
        return self._md.value

    @property
    def metadata_version(self) -> int:
        """The store version of :attr:`metadata` (a transaction may check the ledger is
        still as this handle last wrote it)."""
        return self._md.version

    @property
    def last_add_confirmed(self) -> int:
        """The highest entry id acknowledged to the caller (-1: none)."""
        return self._pending.last_add_confirmed

    @property
    def length(self) -> int:
        """Bytes of all acknowledged entries."""
        return self._acked_length

    @property
    def is_closed(self) -> bool:
        return self._closed

    @property
    def added(self) -> int:
        """How many adds the handle took (acknowledged or not): the next entry id."""
        return self._next_entry

    # ------------------------------------------------------------------ adding
    def add_entry(self, payload: bytes, timeout: float | None = None) -> int:
        """Add one entry; blocks until it is acknowledged and returns its entry id."""
        return self.add_entry_async(payload).result(timeout)

    def add_entry_async(self, payload: bytes) -> Future[int]:
        """Start adding one entry (``PendingAddOp``); the future yields its entry id.

        Futures complete in entry-id order: an entry is acknowledged only after
        Qa bookies of its write set confirmed it and every lower entry was.
        """
        fut: Future[int] = SharedConditionFuture(self._futures_condition)
        self._add(bytes(payload), fut)
        return fut

    def add_entry_callback(self, payload: bytes, callback: AddDone) -> int:
        """Start adding one entry; ``callback(entry_id, error)`` runs once it is decided,
        in entry-id order (the log writer's hot path: no future per entry). Returns the
        entry id; raises at once if the handle already failed or closed."""
        return self._add(bytes(payload), callback)

    def add_entry_token(self, payload: bytes, token: Any) -> int:
        """Start adding one entry whose outcome goes, with ``token``, to the completer given
        to :meth:`complete_runs_with`. Returns the entry id."""
        return self._add(bytes(payload), token)

    def complete_runs_with(self, complete: RunCompleter) -> None:
        """Hand every run of decided adds, ``complete(targets, first entry id, error or
        None)``, in entry order, to ``complete`` instead of the default
        (:func:`~bk_spark.core.futures.complete_adds`, which gives each future its entry id
        and calls each callback). For a caller that adds with :meth:`add_entry_token` and
        completes a whole run at a time (the log writer); set it before the first add."""
        with self._lock:
            if self._next_entry:
                raise LedgerStateError(f"ledger {self.id}: set the completer before adding")
            self._complete_run = complete

    def frame_rounds_with(self, framer: RoundFramer, overhead: int) -> None:
        """Have the sender frame each round it ships: ``framer(payloads)`` returns the
        prefix every entry of the round gets and the payloads (the same list, or one made
        anew). For a writer whose entries carry a header stamped when they are shipped
        (the log writer's frame: a timestamp that never decreases, joined to the payload
        without a copy, :meth:`EntryCodec.frame_run`). ``overhead``: the most bytes the
        framer adds to a payload (an add must leave room for them under ``max_entry_size``).
        Called on the sender thread, a round at a time in entry order; it must not raise.
        Set it before the first add."""
        with self._lock:
            if self._next_entry:
                raise LedgerStateError(f"ledger {self.id}: set the framer before adding")
            self._framer = framer
            self._max_payload = self._max_entry_size - overhead

    def stop_adds(self) -> int:
        """Refuse every later add (:class:`LedgerClosedError`) while the adds already taken
        go on (a log writer moving on to its next ledger, or stopping); returns how many
        adds the handle took. :meth:`close` still waits for them."""
        with self._lock:
            self._adds_stopped = True
            return self._next_entry

    def _add(self, payload: bytes, target: Future[int] | AddDone) -> int:
        """Hand out the next entry id; the client's I/O loop encodes and ships it
        (:meth:`_ship`). Waits first while the client has too many bytes of adds in flight,
        or raises :class:`TooManyRequestsError` (:mod:`bk_spark.core.backpressure`)."""
        size = len(payload)
        if size > self._max_payload:
            raise TooLargeError(
                f"entry of {size} bytes exceeds max_entry_size {self._max_entry_size}"
                + (f" (less {self._max_entry_size - self._max_payload} bytes of framing)"
                   if self._max_payload < self._max_entry_size else ""))
        budget = self._budget
        budget.charge(size)
        with self._lock:
            if self._error is not None or self._closed or self._adds_stopped:
                budget.release(size)
                if self._error is not None:
                    raise copy_error(self._error)
                raise LedgerClosedError(f"ledger {self.id} is closed" if self._closed else
                                        f"ledger {self.id} takes no more adds")
            eid = self._next_entry
            self._next_entry = eid + 1
            self._targets.append(target)
            self._outbox.append(payload)
            self._charged_total += size
            self._charged.append(self._charged_total)
            inline = False
            if not self._ship_scheduled:
                self._ship_scheduled = True
                # A lone add (nothing else of this ledger unacknowledged, no round being
                # shipped, and no other add of the client in flight) ships from the
                # caller's thread: no hand-off to the I/O loop on a lone add's path. With
                # other writers' adds in flight it goes to the loop, whose pass ships every
                # ready writer's round to a bookie as one unit (issue 28: a thousand
                # ledgers). A framer (the log writer's) runs on the loop only.
                inline = (eid == self._unacked_first and not self._shipping
                          and self._framer is None and budget.in_flight <= size)
                if not inline:
                    if self._should_linger():
                        # Decided here, not on the loop: no wake-up of the loop for an add
                        # that lingers (a thousand writers with an add or two each).
                        self._linger()
                    else:
                        self._threads.schedule(self._ship)
            elif self._lingering and len(self._outbox) == LINGER_MIN_ENTRIES:
                self._threads.schedule(self._ship)  # the burst came: no need to wait more
        if inline:
            self._ship()
        return eid

    def _should_linger(self) -> bool:
        """Under the lock: whether the queued adds wait ``add_linger_s`` for more before
        their round ships. Earlier adds are in flight, so these few are not alone: the rest
        of a burst usually follows at once (one round of many, not one request each). The
        lingering writers of a client ship together when the linger ends
        (:meth:`_ship_each`)."""
        n_out = len(self._outbox)
        return (self._bk.config.add_linger_s > 0 and n_out < LINGER_MIN_ENTRIES
                and len(self._targets) > n_out and not self._closed)

    def _linger(self) -> None:
        """Under the lock, with a ship due: the queued adds ship ``add_linger_s`` from now,
        with every other writer of the client lingering then (one timer and one pass of
        the I/O loop for all of them, :meth:`_ship_each`)."""
        self._lingering = True
        self._threads.gather_later(self._bk.config.add_linger_s, LedgerHandle._ship_each,
                                   self)

    def _ship(self) -> None:
        """Encode and ship one round of queued entries: one batch per bookie of the ensemble.

        Runs on the client's I/O loop (a lone add's on the caller's thread, see
        :meth:`_add`), one call at a time, so rounds go in entry order.
        While the previous batches are in flight new adds pile up in the outbox, so rounds
        grow with the load (many entries per RPC, as the bookie wants), up to
        ``add_round_max_entries``: a burst of thousands of adds becomes a few rounds in flight
        at once, a pipeline, rather than one. A few adds queued while others are in flight
        wait up to ``add_linger_s`` for more (the rest of a burst usually follows at once),
        so they do not cost every bookie an RPC and a sync of their own. A round whose
        bookies have no request window free waits for one (it is called again when an
        answer frees it), growing meanwhile. Each entry carries the last-add-confirmed at
        the time its round is encoded.
        """
        with self._lock:
            if self._shipping:  # one call at a time: the running one goes on with the rest
                self._ship_scheduled = False
                return
            self._shipping = True
        try:
            self._ship_round()
        finally:
            with self._lock:
                self._shipping = False
                # What came meanwhile ships next (a call that found this one running left
                # it), unless a call is due already (a linger's timer, a window's wake).
                if self._outbox and self._error is None and not self._ship_scheduled:
                    self._ship_scheduled = True
                    self._threads.schedule(self._ship)

    def _ship_round(self) -> None:
        """The body of :meth:`_ship` (one call at a time)."""
        E, Qw = self._E, self._Qw
        config = self._bk.config
        round_max = config.add_round_max_entries
        with self._lock:
            self._ship_scheduled = False
            lingered, self._lingering = self._lingering, False
            if not self._outbox or self._error is not None:
                return  # shipped already, or failed: _fail decided every add
            n_out = len(self._outbox)
            if not lingered and self._should_linger():
                self._ship_scheduled = True
                self._linger()
                return
            payloads = self._outbox[:round_max]
            share = (sum(map(len, payloads)) + 64 * len(payloads)) * Qw // E
            first = self._next_entry - n_out
            ensemble = self._ensemble
            try:
                # the bookies this round goes to (a round of fewer than E entries skips
                # the others: they get nothing of it)
                for idx in round_indexes(first, len(payloads), E, Qw):
                    bookie = ensemble[idx]
                    if bookie is not None and not self._bk.bookies.get(bookie).has_window(
                            share, self._wake_ship, self.id):
                        self._ship_scheduled = True  # _wake_ship calls again
                        return
            except BKError as exc:  # the BookKeeper client was closed under this writer
                failed: BKError | None = exc
            else:
                failed = None
                del self._outbox[:round_max]
                lac = self._pending.last_add_confirmed
        if failed is not None:
            self._fail(failed)  # every add fails with it, none waits forever
            return
        length = self._shipped_length
        if self._framer is None:
            wire, ends = self._codec.frame_run(first, lac, length, payloads)
        else:
            prefix, payloads = self._framer(payloads)
            wire, ends = self._codec.frame_run(first, lac, length, payloads, prefix)
        self._shipped_length = ends[-1]
        n = len(wire)
        with self._lock:
            if self._error is not None:
                return
            # Published and ensemble read together: an ensemble change resends what was
            # published before it took the lock, and this round sees its replacement.
            self._pending.register(first, n)
            self._wire += wire
            self._ends += ends
            ensemble = list(self._ensemble)
        for idx, eids, part in round_shares(first, wire, E, Qw):
            bookie = ensemble[idx]
            if bookie is not None:  # None: being replaced; the resend covers it
                self._send(idx, bookie, eids, part)

    def _send(self, index: int, bookie: str, eids: np.ndarray | list[int],
              entries: list[bytes]) -> None:
        sink = self._sinks.get((index, bookie))
        if sink is None:
            sink = self._sinks.setdefault((index, bookie), _BookieSink(self, index, bookie))
        try:
            client = self._bk.bookies.get(bookie)
        except BKError as exc:  # the BookKeeper client was closed under this writer
            self._fail(exc)  # every add fails with it (the sender ends), none waits forever
            return
        client.send_batch(self.id, self._master_key, entries, eids, sink)

    def _on_responses(self, eids: np.ndarray, index: int, bookie: str,
                      err: BKError | None) -> None:
        """A bookie answered for ``eids`` (one RPC): count the confirmations."""
        if err is not None:
            self._on_bookie_error(index, bookie, err)
            return
        with self._lock:
            if self._ensemble[index] != bookie or self._error is not None:
                return  # a stale answer from a replaced bookie
            # every id was registered, and is still unacknowledged or already acknowledged
            acked = self._pending.ack_many(eids, index)
            if not acked:
                return
            released, idle = self._acknowledge(acked)
        self._after_acknowledged(released, idle)

    def _acknowledge(self, acked: range) -> tuple[int, bool]:
        """Under the lock: the adds of ``acked`` (the next ones) are acknowledged; queues
        their completion. Returns the bytes to give back to the budget and whether no add
        is left outstanding (:meth:`_after_acknowledged` does both, outside the lock)."""
        k = len(acked)
        targets = self._targets[:k]
        del self._targets[:k]
        del self._wire[:k]
        self._acked_length = self._ends[k - 1]
        del self._ends[:k]
        self._unacked_first += k
        charged = self._charged[k - 1]
        del self._charged[:k]
        released, self._charged_released = charged - self._charged_released, charged
        self._deliveries.append((acked.start, targets, None))
        self._failed_since_progress.clear()
        idle = not self._targets
        if idle:  # close may go on
            self._drained.notify_all()
        return released, idle

    def _after_acknowledged(self, released: int, idle: bool) -> None:
        self._budget.release(released)
        self._deliver()
        if idle and self.explicit_lac_interval_s > 0:
            with self._lock:
                due, self._lac_flush_due = self._lac_flush_due, True
            if not due:  # the LAC the last entry could not carry, once the interval passed
                self._threads.gather_later(self.explicit_lac_interval_s,
                                           LedgerHandle._flush_lacs, self)

    @staticmethod
    def _ship_each(handles: list[LedgerHandle]) -> None:
        """The lingers that ended together (:meth:`ClientThreads.gather_later`): each
        writer ships, in one pass of the I/O loop."""
        for h in handles:
            h._ship()

    def _deliver(self) -> None:
        """Complete decided adds in entry order, whichever thread decided them.

        Acknowledgements are decided in order under the handle's lock and queued in that
        order; one deliverer at a time drains the queue, so no caller ever sees entry n
        complete before entry n - 1.
        """
        with self._deliver_lock:
            q = self._deliveries
            complete = self._complete_run
            self._budget.completing(True)  # a callback's own adds never wait (backpressure)
            try:
                while q:
                    first, targets, err = q.popleft()
                    try:
                        complete(targets, first, err)
                    except Exception:  # a bug there must not stop later deliveries
                        log.exception("completing adds %d.. failed", first)
            finally:
                self._budget.completing(False)

    def _on_bookie_error(self, index: int, bookie: str, err: BKError) -> None:
        if isinstance(err, REPLACEABLE_ERRORS):
            try:  # on the client's work pool: it waits on ZooKeeper
                self._threads.submit(self._change_ensemble, index, bookie, err)
            except BKError as exc:  # the client closed: nobody will replace the bookie
                self._fail(exc)
        elif isinstance(err, LedgerFencedError):
            self._fail(LedgerFencedError(
                f"ledger {self.id} was fenced by a recovery open; this writer must stop "
                f"(the unacknowledged adds may or may not be in the ledger)"))
        elif isinstance(err, UnauthorizedError):
            self._fail(err)
        elif isinstance(err, NoSuchLedgerError):
            self._fail(NoSuchLedgerError(
                f"ledger {self.id} was deleted ({err}); this writer must stop (the "
                f"unacknowledged adds are in no ledger)"))
        else:
            self._fail(BKError(f"ledger {self.id}: bookie {bookie} failed an add: {err}"))

    def _fail(self, err: BKError) -> None:
        """Fail every outstanding add and every later one with ``err``."""
        with self._lock:
            if self._error is None:
                self._error = err
            if self._targets:
                self._deliveries.append((self._unacked_first, self._targets, err))
                self._unacked_first += len(self._targets)
                self._targets, self._wire, self._ends, self._outbox = [], [], [], []
            released = self._charged_total - self._charged_released
            self._charged_released = self._charged_total
            self._charged = []
            self._drained.notify_all()
        self._budget.release(released)
        self._deliver()

    # ------------------------------------------------------------------ ensemble change
    def _change_ensemble(self, index: int, failed: str, cause: BKError) -> None:
        """Replace the bookie at ``index``: new fragment, CAS, resend (seed: ensemble change).

        Bounded: a bookie that failed an add of this ledger is not chosen again as a
        replacement until an add is acknowledged (BookKeeper quarantines failed bookies).
        Without that rule a writer cut from every spare bookie (a partition: its adds time
        out, the bookies stay registered) swapped cut bookies in and out of its ensemble
        forever; with it, each bookie costs at most one add timeout, then the adds fail
        with :class:`NotEnoughBookiesError`.
        """
        with self._lock:
            if self._error is not None or self._ensemble[index] != failed:
                return
            if index in self._changing:
                return
            self._changing.add(index)
            self._failed_since_progress.add(failed)
            first = self._pending.first_unacknowledged()
            # From here on no answer of the failed bookie counts: the entries of the
            # new fragment must be confirmed by bookies of the new ensemble. And none is
            # acknowledged until the change ends, so that every entry of the new fragment
            # is still here to resend to the replacement (protocol/pending.py).
            self._ensemble[index] = None
            self._pending.replace_bookie(index, first)
            self._pending.hold()
        log.warning("ledger %d: replacing bookie %s at index %d from entry %d (%s)",
                    self.id, failed, index, first, cause)
        with self._change_lock:
            try:
                new_md = self._cas_new_fragment(index, failed, first)
            except Exception as exc:  # BKError, and kazoo's own (session expired, connection
                # lost): a replacement that cannot finish must fail the adds, never leave
                # them waiting forever on an index that has no bookie
                with self._lock:
                    self._changing.discard(index)
                    # what the other bookies confirmed meanwhile is acknowledged, as it
                    # would have been without the change; the rest fails below
                    acked = self._pending.release(acknowledge=self._error is None)
                    after = self._acknowledge(acked) if acked else None
                if after is not None:
                    self._after_acknowledged(*after)
                self._fail(exc if isinstance(exc, BKError) else BKError(
                    f"ledger {self.id}: could not replace bookie {failed} ({exc!r}); this "
                    f"writer stops, the unacknowledged adds may or may not be in the ledger"))
                return
        with self._lock:
            self._md = new_md
            replacement = new_md.value.last_ensemble[index]
            self._ensemble[index] = replacement
            self._changing.discard(index)
            if self._error is not None:
                self._pending.release(acknowledge=False)  # every add was failed already
                return
            resend = self._pending.unacknowledged_in_write_set(index, first)
            wire, base = self._wire, self._unacked_first
            blobs = [wire[e - base] for e in resend.tolist()]
            acked = self._pending.release()
            after = self._acknowledge(acked) if acked else None
        if blobs:
            self._send(index, replacement, resend, blobs)
        if after is not None:
            self._after_acknowledged(*after)

    def _cas_new_fragment(self, index: int, failed: str, first: int) -> Versioned:
        with self._lock:
            current = [b for b in self._ensemble if b is not None]
            failed_before = sorted(self._failed_since_progress - {failed})
        tried = (f"; bookies that already failed it since its last acknowledged add are not "
                 f"tried again: {', '.join(failed_before)}" if failed_before else "")
        return cas_new_fragment(
            self._bk, self._md, first, {index: failed},
            lambda m: ledger_rules.writer_ensemble_change(m, index, failed),
            exclude=[failed, *current, *failed_before],
            note=f"{tried}; check the network between this client and the bookies")

    # ------------------------------------------------------------------ explicit LAC
    @staticmethod
    def _flush_lacs(handles: list[LedgerHandle]) -> None:
        """Explicit LAC (BookKeeper's ``ExplicitLacFlushPolicy``), on the client's I/O loop
        up to ``explicit_lac_interval_s`` after a writer fell idle: tell its bookies the LAC
        its last entry could not carry, without waiting for their answers. A writer busy
        again by then skips it (its entries carry the LAC; its next idle moment sets the
        next flush): a writer adding one entry at a time sends one explicit LAC per
        interval, not one per add (three more requests and journal records per add for the
        bookies). The writers that fell idle within one interval are flushed together
        (:meth:`ClientThreads.gather_later`: one timer per interval for the whole client,
        not one per writer), and their LACs to one bookie leave in one stream message
        (the I/O loop's pass is corked)."""
        for h in handles:
            with h._lock:
                h._lac_flush_due = False
                if h._closed or h._error is not None or h._targets:
                    continue
                lac, bookies = h._take_lac_to_send()
            for b in bookies:
                try:
                    h._bk.bookies.get(b).send_lac(h.id, h._master_key, lac)
                except BKError as exc:  # the client closed: the close sends the final LAC
                    log.debug("explicit LAC to %s failed: %s", b, exc)

    def _take_lac_to_send(self) -> tuple[int, list[str]]:
        """The LAC no bookie was told yet, and the bookies to tell (none: nothing new).
        Under the lock: each LAC is sent once, by whoever takes it."""
        lac = self._pending.last_add_confirmed
        if lac <= self._lac_sent:
            return lac, []
        self._lac_sent = lac
        return lac, [b for b in self._ensemble if b is not None]

    def _send_lac(self, lac: int, bookies: list[str]) -> bool:
        """Explicit LAC (BookKeeper's ``ExplicitLacFlushPolicy``): tell ``bookies`` the
        writer's LAC; True if at least one took it."""
        told = False
        for b in bookies:
            try:
                self._bk.bookies.get(b).write_lac(self.id, self._master_key, lac)
                told = True
            except BKError as exc:
                log.debug("explicit LAC to %s failed: %s", b, exc)
        return told

    def close_on_client_close(self, timeout: float | None) -> None:
        """What :meth:`BookKeeper.close` does to a handle its caller left open: no
        acknowledged entry may stay unreadable.

        1. Wait up to ``timeout`` for the adds in flight and close as a writer
           (:meth:`close`): the ledger is CLOSED at its last acknowledged entry.
        2. If it cannot be closed (adds still in flight, ZooKeeper lost, fenced), send the
           final explicit LAC to its bookies instead, so a non-fencing reader still sees
           every acknowledged entry (the LAC thread would have, had the client lived).

        A handle that failed or was abandoned (:meth:`abandon`: a writer that crashed) is
        left as it is, OPEN for whoever recovers it. Raises what closing raised, after
        step 2.
        """
        with self._lock:
            if self._closed or self._error is not None:
                return
        try:
            self.close(timeout)
        except BaseException:
            with self._lock:
                lac, bookies = self._take_lac_to_send()
            if bookies and not self._send_lac(lac, bookies):
                log.warning("ledger %d: no bookie took its final LAC %d", self.id, lac)
            raise

    # ------------------------------------------------------------------ closing
    def close(self, timeout: float | None = 60.0) -> None:
        """Close as a writer: wait for outstanding adds, then CAS to CLOSED.

        On a CAS conflict the metadata is re-read: OPEN -> retry; IN_RECOVERY ->
        error; CLOSED with our last entry -> success; CLOSED with another last
        entry -> error (bookkeeper-protocol.txt, "Closing a ledger as a writer").
        """
        with self._lock:
            if self._closed:
                return
            if not self._drained.wait_for(lambda: not self._targets, timeout):
                raise BKTimeoutError(f"ledger {self.id}: adds still outstanding after {timeout}s")
            self._closed = True
            error = self._error
            last = self._pending.last_add_confirmed
            length = self._acked_length
        if isinstance(error, LedgerFencedError):
            raise LedgerFencedError(f"ledger {self.id} was fenced; it cannot be closed by "
                                    f"this writer") from None
        self._md = close_as_writer(self._bk, self._md, last, length)

    def abandon(self, reason: str) -> None:
        """Stop writing without closing: every outstanding and later add fails with
        :class:`LedgerClosedError` (``reason``). The ledger stays
        OPEN in the metadata: whoever owns it next recovers or deletes it (what a writer that
        crashed leaves, minus the threads a live process would keep running)."""
        self._fail(LedgerClosedError(f"ledger {self.id} abandoned: {reason}"))

    def __enter__(self) -> LedgerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._closed:
            self.close()


class _BookieSink:
    """Routes one bookie's batched answers back to the handle with its ensemble index."""

    __slots__ = ("handle", "index", "bookie")

    def __init__(self, handle: LedgerHandle, index: int, bookie: str) -> None:
        self.handle, self.index, self.bookie = handle, index, bookie

    def on_added(self, tokens: np.ndarray, err: BKError | None) -> None:
        self.handle._on_responses(tokens, self.index, self.bookie, err)


def close_as_writer(bk: ClientContext, md: Versioned[LedgerMetadata], last_entry: int,
                    length: int) -> Versioned[LedgerMetadata]:
    """CAS the ledger to CLOSED at ``last_entry``, deciding conflicts as the seed says
    (:data:`bk_spark.protocol.ledger_rules.CLOSE_AS_WRITER`)."""
    lid = md.value.ledger_id

    def needs_change(m: LedgerMetadata) -> bool:
        decision = ledger_rules.close_as_writer(m, last_entry)
        if decision is Decision.RECOVERING:
            raise LedgerStateError(
                f"ledger {lid} is being recovered by another client; this writer cannot "
                f"close it")
        if decision is Decision.CLOSED_ELSEWHERE:
            raise LedgerStateError(
                f"ledger {lid} was closed at entry {m.last_entry_id}, but this writer had "
                f"{last_entry} acknowledged")
        return decision is Decision.CHANGE  # DONE: closed by someone else at our last entry

    def make_change(m: LedgerMetadata) -> LedgerMetadata:
        return m.closed(last_entry, length)

    return bk.metadata_store.update(lid, needs_change, make_change, current=md)
