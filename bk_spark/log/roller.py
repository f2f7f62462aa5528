"""The roller of a log writer: the thread that rolls by the writer's limits, and the spare
ledger it prepares ahead (issue 27: one job per class; issue 31).

Theory of operation. What to do is the pure policy's
(:func:`~bk_spark.protocol.roll_policy.roller_step` over the writer's
:class:`~bk_spark.protocol.roll_policy.LedgerAssignment`): roll when the current ledger is
full, appends wait for the next one, or its first entry reached the age limit; prepare the
next ledger once the current one is half-way. The roller does it:

* **the spare** (step 1 of the next roll, ahead of time): a new ledger for the log,
  registered as pending (:mod:`bk_spark.log.pending`) so that, should this process die, the
  next writer of the log finds and deletes it. Its metadata and its pending record are
  created in one ZooKeeper transaction (both or neither), which also reserves the id of
  the next spare (:class:`~bk_spark.io.metadata_store.ReservedIds`), and placement reads
  the client's registration cache: one ZooKeeper operation per spare. A roll is then
  four: this one, the roll's CAS, closing the previous ledger and recording its end.
  The first spare too (issue 28): its id was reserved by the transaction that created
  the writer's first ledger (``ids``, from :func:`~bk_spark.log.open_log_writer`), and
  the directory of the log's pending records was made at the open if it was missing.
  Before, the first spare reserved an id, failed its transaction on the missing
  directory and made it: 6-9 more ZooKeeper operations, 40-90 ms on a loaded machine,
  so the first ledger was often full before its spare was ready and the appends
  queued behind the first roll.
  The writer's roll takes it (:meth:`Roller.take_spare`) and claims it in its CAS; an
  unused one is deleted when the writer closes or stops (:meth:`Roller.discard_spare`).
* **listing ahead** (issue 28): with the spare ready, once the current ledger would be
  full within :data:`~bk_spark.protocol.roll_policy.LIST_AHEAD_S` at its rate, the roller
  runs the roll's CAS early (``list_next``: the spare claimed and listed, appends still
  going into the current ledger), so the roll due when the ledger is full is only the
  switch: the appends waiting for the next ledger wait for no ZooKeeper operation.
* **closing the previous ledger** (issue 28): when an append found the current ledger
  full with the next one listed, it switched ledgers itself (no hand-off to this thread on
  the appends' path); step 4 of that roll, closing the previous ledger and recording its
  end, is this thread's, before any other step (``close_previous``).
* **the thread**: waits on the writer's condition until an append reaches the next
  threshold (:meth:`LedgerAssignment.arm`; appends notify it) or the age check is due,
  then takes one step under the writer's metadata lock: the writer's roll (its four steps
  stay in :class:`~bk_spark.log.writer.LogWriter`), or preparing the spare. A failed step
  (no bookies, ZooKeeper away) is retried a second later; a lost log ends the thread, and
  so does a closed client, after stopping the writer (``fail``: an append waiting for the
  next ledger would otherwise wait forever, and the thread retry for the life of the
  process).

Lock order (the writer's locks; the roller has none of its own): ``meta_lock`` (one
metadata-changing operation at a time: a step, a roll, a close) -> the writer's lock (the
condition ``wakeup``: the assignment and :attr:`Roller.spare` are read and changed under
it). The spare is created, taken and discarded under ``meta_lock``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bk_spark.core.ledger import LedgerHandle
from bk_spark.errors import BKError, LogNotFoundError, LogOwnershipLostError
from bk_spark.io.metadata_store import ReservedIds
from bk_spark.log import pending
from bk_spark.protocol.roll_policy import SPARE_AT, LedgerAssignment, RollerStep

if TYPE_CHECKING:
    from bk_spark.core.client import BookKeeper

log = logging.getLogger(__name__)


class Roller:
    """Rolls a writer's log by its limits from a thread of its own, and holds the spare.

    ``create_ledger(**kw)`` makes a ledger for the log (``kw``: for
    :meth:`BookKeeper.create_ledger`); ``roll()`` is the writer's roll (under
    ``meta_lock``, which the roller holds when it calls it); ``list_next()`` the writer's
    steps 2-3 ahead of the switch (under ``meta_lock``), ``listed()`` (under the writer's
    lock): the next ledger is listed already; ``close_previous()`` (under ``meta_lock``):
    step 4 of a roll whose switch an append made, ``unclosed()`` (under the writer's lock):
    one is due; ``stopped()`` (under the writer's lock): the writer closed or failed;
    ``fail(error)``: stop the writer with ``error`` (its appends waiting for the next
    ledger fail with it). ``ids``: the next ledger id, reserved when the writer's first
    ledger was created (None: the first spare reserves one).
    """

    def __init__(self, bk: BookKeeper, name: str, password: bytes,
                 assignment: LedgerAssignment[Any], wakeup: threading.Condition,
                 meta_lock: threading.Lock, *, max_age_s: float | None,
                 create_ledger: Callable[..., LedgerHandle], roll: Callable[[], object],
                 list_next: Callable[[], object], listed: Callable[[], bool],
                 close_previous: Callable[[], object], unclosed: Callable[[], bool],
                 stopped: Callable[[], bool], fail: Callable[[BKError], object],
                 ids: ReservedIds | None = None) -> None:
        self._bk, self.name, self._password = bk, name, password
        self._assign = assignment
        self._wakeup, self._meta_lock = wakeup, meta_lock
        self._max_age_s = max_age_s
        self._create_ledger, self._roll, self._stopped = create_ledger, roll, stopped
        self._fail = fail
        self._list_next, self._listed = list_next, listed
        self._close_previous, self._unclosed = close_previous, unclosed
        #: A test seam (:func:`bk_spark.log.testing.hold_roller`): while set and not
        #: released, the thread waits before each step it was woken for.
        self.hold: threading.Event | None = None
        #: The next ledger, created ahead and registered as pending (None: none).
        self.spare: LedgerHandle | None = None
        # the next spare's id, reserved by the transaction that created the last ledger
        self._ids = ids if ids is not None else ReservedIds()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"log-roller-{name}")

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> None:
        """Wait for the thread to end (the writer stopped it), unless called from it."""
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)

    # ----------------------------------------------------------------- the thread
    def _run(self) -> None:
        assign = self._assign
        try:
            while True:
                with self._wakeup:
                    while not self._stopped():
                        has_spare, listed = self.spare is not None, self._listed()
                        now = time.monotonic()
                        assign.arm(has_spare, listed, now)  # before looking: none is lost
                        if assign.step(now, has_spare, listed,
                                       self._unclosed()) is not RollerStep.WAIT:
                            break
                        wait = assign.next_age_check(now, has_spare, listed)
                        if wait is None and self._max_age_s is not None:
                            wait = self._max_age_s * SPARE_AT  # no entry yet: look again
                        self._wakeup.wait(None if wait is None else max(0.005, wait))
                    assign.disarm()
                    if self._stopped():
                        return
                hold = self.hold
                if hold is not None:
                    hold.wait()
                try:
                    with self._meta_lock:
                        with self._wakeup:
                            step = RollerStep.WAIT if self._stopped() else assign.step(
                                time.monotonic(), self.spare is not None, self._listed(),
                                self._unclosed())
                        if step is RollerStep.CLOSE_PREVIOUS:
                            self._close_previous()
                        elif step is RollerStep.ROLL:
                            self._roll()
                        elif step is RollerStep.LIST_NEXT:
                            self._list_next()
                        elif step is RollerStep.PREPARE_SPARE:
                            self._prepare_spare()
                except (LogOwnershipLostError, LogNotFoundError):
                    return
                except Exception as exc:  # e.g. no bookies or ZooKeeper away for now
                    if self._bk.is_closed:  # for good: no roll will ever succeed
                        self._fail(BKError(
                            f"log {self.name!r}: the BookKeeper client was closed under "
                            f"this writer; appends not acknowledged may or may not be in "
                            f"the log. Open a new client and writer to continue."))
                        return
                    log.warning("log %r: rolling failed, retrying in 1s: %s", self.name, exc)
                    with self._wakeup:
                        self._wakeup.wait(1.0)
        finally:
            with self._meta_lock:
                self.discard_spare()
                try:
                    self._bk.metadata_store.release(self._ids)
                except Exception as exc:  # noqa: BLE001 - its znode goes with the session
                    log.debug("log %r: reserved ledger id not released: %s", self.name, exc)

    # ----------------------------------------------------------------- the spare
    def _prepare_spare(self) -> None:
        """Step 1 of the next roll, ahead of time: create the next ledger registered as
        pending for the log (one transaction, see the module docstring). Under meta_lock."""
        lh = self._create_ledger(
            also_create=lambda lid: [pending.record_znode(self._bk, self.name, lid,
                                                          pending.SPARE_ATTEMPT, None)],
            ids=self._ids)
        with self._wakeup:
            self.spare = lh

    def take_spare(self) -> LedgerHandle | None:
        """The spare for this roll (None: none prepared); still pending, the roll's CAS
        claims it. Under meta_lock."""
        with self._wakeup:
            spare, self.spare = self.spare, None
        return spare

    def discard_spare(self, spare: LedgerHandle | None = None) -> None:
        """Delete an unused spare (this roller's, or ``spare``: one the roll could not use)
        and its pending record (closing or stopping). Under meta_lock."""
        if spare is None:
            with self._wakeup:
                spare, self.spare = self.spare, None
        if spare is None:
            return
        try:
            pending.discard(self._bk, self.name, [spare.id], self._password)
        except Exception as exc:  # still pending: the next writer of the log sweeps it
            log.warning("log %r: could not delete spare ledger %d: %s", self.name, spare.id,
                        exc)
