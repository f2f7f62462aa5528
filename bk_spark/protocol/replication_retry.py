"""When a Replication Worker tries a ledger again after a failed pass, and when it says so.

BookKeeper's ``ReplicationWorker`` defers a ledger it could not replicate
(``lockReleaseOfFailedLedgerGracePeriod``, doubled per failure up to a cap); ours did it
every 5 s forever and logged a warning each time. The rules, pure (no clock, no I/O):

* the n-th consecutive failure of a ledger waits ``base * 2**(n-1)`` seconds, capped at
  ``cap`` (:func:`retry_delay`): a ledger that cannot be healed costs one attempt per cap
  once it got there, one that failed on a passing fault is tried again soon;
* a failure is logged as a warning the first time, when its reason changes, and when the
  delay reaches its cap (then the log says it stays there); every other failure is logged at
  debug level (:func:`warn_of_failure`). The reason lives on in the ledger's record, where
  ``bk ledger underreplicated`` shows it, and in a metric: not in a log line per attempt;
* a pass that makes progress (a bookie replaced, entries copied) starts the count again.
"""

from __future__ import annotations

#: Seconds before the first retry of a failed ledger, and the most a retry ever waits.
RETRY_BASE_S = 5.0
RETRY_CAP_S = 300.0


def retry_delay(failures: int, base: float = RETRY_BASE_S, cap: float = RETRY_CAP_S) -> float:
    """Seconds to wait after the ``failures``-th consecutive failure (>= 1) of a ledger."""
    if failures < 1:
        return 0.0
    if base >= cap:
        return cap
    # 2**(n-1) overflows nothing: past the cap the exponent no longer matters
    return min(cap, base * 2.0 ** min(failures - 1, 64))


def warn_of_failure(failures: int, reason_changed: bool, base: float = RETRY_BASE_S,
                    cap: float = RETRY_CAP_S) -> bool:
    """Whether the ``failures``-th consecutive failure is logged as a warning: the first,
    one with a new reason, and the one whose delay first reaches the cap."""
    if failures <= 1 or reason_changed:
        return True
    return retry_delay(failures, base, cap) >= cap > retry_delay(failures - 1, base, cap)
