"""Process-wide memory settings, made only where the process is ours: glibc's thresholds
(:func:`tune_allocator`) and the cyclic garbage collector's long-lived heap
(:func:`freeze_heap`).

Bookies and writers move data in messages of a megabyte or more (a batch of entries). With
glibc's defaults each such buffer above the *mmap threshold* is a fresh ``mmap`` and its
``free`` a ``munmap``, and memory freed at the top of the heap beyond the *trim threshold*
goes back to the kernel at once: every message then costs page faults to map and zero its
pages again. Measured on the benchmark machine, this was a third of a ledger writer's kernel
time, and raising the two thresholds took a 3-bookie ledger from about 83,000 to over
100,000 adds/s (``make bench``).

:func:`tune_allocator` raises the mmap threshold to 16 MiB (larger than any batch the client
sends by default: ``max_batch_bytes`` is 8 MiB) and the trim threshold to 128 MiB, so a
process keeps at most that much freed memory for reuse. It is process-wide, so it runs only
where the process is ours or the user opts in: bookies call it when they start, Spark's Python
workers when the data source opens its client there (:mod:`bk_spark.datasource.connections`),
and a :class:`~bk_spark.core.BookKeeper` client when ``BookKeeperConfig(tune_allocator=True)``
(the benchmarks do). It changes nothing where the C library is not glibc.

:func:`freeze_heap` moves every object alive at the call out of the cyclic garbage
collector's reach (``gc.collect()`` then ``gc.freeze()``). CPython runs a *full* collection
whenever the objects promoted to its oldest generation since the last one reach a quarter
of that generation, and a full collection walks every module, class and function the
process imported: 30-45 ms in a bookie and 15-30 ms in a writer on the 2-core bench machine
(measured with ``gc.callbacks``, `bench/profiles.md`, "Paced adds: what stalls"). It runs on
whichever thread allocated last, under the GIL: in a bookie that is the journal writer
between its fdatasync and its answers, so every add in flight waited for it, and at 50% of
the max rate these pauses made most of the adds slower than the p99. Frozen objects are
never collected cyclically (freed by reference counting as ever), so it is called once, when
the long-lived heap is built and nothing else lives yet: a bookie once it serves
(:meth:`bookie_server.server.BookieServer.serve_forever`), Spark's Python workers once their
client is open (:mod:`bk_spark.datasource.connections`), the benchmarks once connected; a
user's process that wants no such pause calls it after its own start-up.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import sys
import threading

log = logging.getLogger(__name__)

MiB = 1024 * 1024
MMAP_THRESHOLD = 16 * MiB
TRIM_THRESHOLD = 128 * MiB
_M_TRIM_THRESHOLD = -1  # glibc's malloc.h
_M_MMAP_THRESHOLD = -3

_lock = threading.Lock()
_done: bool | None = None


def tune_allocator() -> bool:
    """Raise glibc's mmap and trim thresholds for this process (once); True if applied."""
    global _done
    with _lock:
        if _done is None:
            _done = _apply()
        return _done


def _apply() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
        gnu_get_libc_version = libc.gnu_get_libc_version  # glibc only
    except (OSError, AttributeError):
        return False
    gnu_get_libc_version.restype = ctypes.c_char_p
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    ok = (mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
          and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1)
    log.debug("glibc %s: mmap threshold %d, trim threshold %d: %s",
              gnu_get_libc_version().decode(), MMAP_THRESHOLD, TRIM_THRESHOLD,
              "set" if ok else "refused")
    return ok


def freeze_heap() -> None:
    """Collect, then move every object alive now out of the cyclic collector's reach (see
    the module docstring): later full collections walk only what was made after."""
    gc.collect()
    gc.freeze()
