"""Seams for fault injection and tests: not part of the API, no compatibility promised.

The fault harness (:mod:`bk_spark.faults.writers`) and the integration tests pause a
writer inside a roll, between the CAS that lists its new ledger (step 3 of "Rolling
ledgers") and the close of the previous one (step 4): the one window in which two ledgers of
one writer are open. The hook is set on a writer already open, so it stays out of
:func:`~bk_spark.log.open_log_writer`'s signature.
"""

from __future__ import annotations

from collections.abc import Callable

from bk_spark.log.writer import LogWriter


def after_roll_cas(writer: LogWriter, hook: Callable[[int], None] | None) -> LogWriter:
    """Call ``hook(new ledger id)`` on the rolling thread after each roll's CAS succeeded
    and before the previous ledger is closed (None: no hook). ``hook`` must not raise; it
    may block (the roll waits, appends go on into the previous ledger). Returns ``writer``.
    Set it before the writer's first roll (right after opening it)."""
    writer._after_roll_cas = hook
    return writer
