"""Seams for fault injection and tests: not part of the API, no compatibility promised.

The fault harness (:mod:`bk_spark.faults.writers`) and the integration tests pause a writer
inside a roll (:func:`after_roll_cas`), between the CAS that lists its new ledger (step 3 of
"Rolling ledgers") and the close of the previous one (step 4): the one window in which two
ledgers of one writer are open; or hold the roller thread (:func:`hold_roller`) to see what
appends do without it. Both are set on a writer already open, so they stay out of
:func:`~bk_spark.log.open_log_writer`'s signature. """

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from bk_spark.log.writer import LogWriter


def after_roll_cas(writer: LogWriter, hook: Callable[[int], None] | None) -> LogWriter:
    """Call ``hook(new ledger id)`` on the rolling thread after each roll's CAS succeeded
    and before the previous ledger is closed (None: no hook). ``hook`` must not raise; it
    may block (the roll waits, appends go on into the previous ledger). Returns ``writer``.
    Set it before the writer's first roll (right after opening it)."""
    writer._after_roll_cas = hook
    return writer


@contextmanager
def hold_roller(writer: LogWriter) -> Iterator[None]:
    """While inside, the writer's roller thread takes no step it is woken for (it waits
    before taking the writer's metadata lock): what the appending threads do on their
    own, e.g. the switch to a ledger listed ahead. On exit it goes on. A writer without
    rolling limits has no roller: nothing to hold."""
    roller = writer._roller
    if roller is None:
        yield
        return
    held = threading.Event()
    roller.hold = held
    try:
        yield
    finally:
        roller.hold = None
        held.set()
