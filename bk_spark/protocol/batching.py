"""When to wait for a bigger batch: the bookie's group commit waits only for records the
observed arrival rate says come within its limit (pure: no clocks, threads or I/O; callers
pass the time).

The journal may wait for more records before one ``fdatasync`` (``max_group_wait_s``).
Waiting pays only when the records it waits for come soon; at a moderate load they do
not, and a lone record would wait the whole limit for a group that never comes. So it
waits only for what the *observed arrival rate* says will come within its limit:

* :class:`ArrivalRate` estimates arrivals per second from the mean time between them
  (an idle stretch lowers it at once; a lone arrival predicts nothing);
* :func:`batch_wait` is how long to wait for ``target`` items when ``queued`` are there:
  the expected time for the missing ones at that rate, if it is within ``max_wait_s``;
  otherwise 0 (go now: that batch will not come in time, waiting only adds latency).

The ledger writer's linger (``add_linger_s``) does not use it: measured at 20% of the
maximum rate on the 2-core bench machine, shipping small rounds at once raised the median
add latency (5.4 vs 4.3 ms), because their RPCs cost more CPU than the linger costs time
(``bench/latency.py``).
"""

from __future__ import annotations


class ArrivalRate:
    """Arrivals per second, from an exponentially weighted mean of the time between them.

    ``observe(now, n)`` records ``n`` arrivals at time ``now`` (seconds, any monotonic
    clock): the time since the previous observation, shared by the ``n``, updates the mean
    interval with weight ``alpha``. ``rate(now)`` is ``1 / interval``, where the interval is
    the larger of that mean and the time since the last arrival: an idle stretch lowers the
    estimate at once, and a lone arrival (no interval seen yet) gives 0, so nothing waits
    for a second one that has never been seen to come.
    """

    __slots__ = ("alpha", "_interval", "_at")

    def __init__(self, alpha: float = 0.2) -> None:
        if not 0 < alpha <= 1:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        self.alpha = alpha
        self._interval: float | None = None  # mean seconds between arrivals
        self._at: float | None = None  # time of the last observation

    def observe(self, now: float, n: int = 1) -> None:
        if n <= 0:
            return
        if self._at is not None:
            each = max(0.0, now - self._at) / n
            mean = self._interval
            self._interval = each if mean is None else mean + self.alpha * (each - mean)
        if self._at is None or now > self._at:
            self._at = now

    def rate(self, now: float) -> float:
        """Estimated arrivals per second at ``now`` (0: none expected)."""
        if self._interval is None or self._at is None:
            return 0.0
        return 1.0 / max(self._interval, now - self._at, 1e-9)


def batch_wait(queued: int, target: int, rate: float, max_wait_s: float) -> float:
    """Seconds to wait for ``target`` items when ``queued`` are there and items arrive at
    ``rate`` per second: the expected time for the missing ones if within ``max_wait_s``,
    else 0 (do not wait for a batch that will not come in time).

    >>> batch_wait(10, 64, 100_000.0, 0.001)   # 54 more in 0.54 ms: worth it
    0.00054
    >>> batch_wait(10, 64, 10_000.0, 0.001)    # 5.4 ms > 1 ms: ship now
    0.0
    """
    if queued >= target or max_wait_s <= 0 or rate <= 0:
        return 0.0
    eta = (target - queued) / rate
    return eta if eta <= max_wait_s else 0.0
