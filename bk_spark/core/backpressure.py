"""Backpressure: a client-wide bound on the bytes of adds in flight (issue 28, §5).

Theory of operation. Every add a ledger handle takes is charged its payload's size here
before it gets an entry id, and released once it is decided (acknowledged or failed):
:meth:`AddBudget.charge` and :meth:`AddBudget.release`. Past
``ClientConfig.adds_in_flight_max_bytes`` a new add either waits until earlier ones are
decided (``adds_block_when_full``, the default) or fails at once with
:class:`~bk_spark.errors.TooManyRequestsError`: a caller offering more than the bookies
take learns it in the add's latency or in an error, instead of queueing seconds of work
that every later add waits behind.

An add larger than the whole bound goes when nothing else is in flight. A thread that is
completing adds (a callback that adds again) is never made to wait: the answers that would
free the budget may have to come through it. Lock order: a handle's lock may be held while
:meth:`release` runs (it takes only this object's condition); :meth:`charge` is called
with no lock held, since it may wait.
"""

from __future__ import annotations

import threading

from bk_spark.errors import TooManyRequestsError


class AddBudget:
    """Bytes of adds in flight in one client, bounded by ``limit`` (0: unbounded)."""

    def __init__(self, limit: int, block: bool = True) -> None:
        self.limit = limit
        self.block = block
        self._cv = threading.Condition()
        self._used = 0
        self._closed = False
        self._completing = threading.local()  # set on threads delivering completions

    @property
    def in_flight(self) -> int:
        """Bytes charged and not yet released."""
        return self._used

    def charge(self, size: int) -> None:
        """Take ``size`` bytes for one add: wait for room, or raise
        :class:`TooManyRequestsError` when the client fails fast."""
        limit = self.limit
        with self._cv:
            if limit <= 0 or self._used == 0 or self._used + size <= limit or self._closed \
                    or getattr(self._completing, "on", False):
                self._used += size
                return
            if not self.block:
                raise TooManyRequestsError(
                    f"{self._used:,} bytes of adds are in flight in this client, the most its "
                    f"adds_in_flight_max_bytes ({limit:,}) allows: retry once earlier adds "
                    f"are acknowledged, or raise the bound")
            self._cv.wait_for(
                lambda: self._used == 0 or self._used + size <= limit or self._closed)
            self._used += size

    def release(self, size: int) -> None:
        """Give back the bytes of adds just decided."""
        if size:
            with self._cv:
                self._used -= size
                self._cv.notify_all()

    def completing(self, on: bool) -> None:
        """Mark the calling thread as delivering completions (its adds never wait)."""
        self._completing.on = on

    def close(self) -> None:
        """Wake every waiting add (the client closes: they fail on the closed handle)."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
