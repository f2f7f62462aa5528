"""Write-back smoothing: background writes reach the disk in small pieces, never in bursts.

Why (bench/profiles.md, "Ledger add latency"): a bookie acknowledges an add after its
journal record's ``fdatasync``, a few KiB, 0.25 ms here. But the journal shares the disk with
the bookie's own background writes, and an ``fdatasync`` that finds 16-130 MB of other
writes queued before it waits for them: a journal file zero-filled and synced at once
(every ~2 s per bookie at 20% load on the sandbox's 16 MiB files, all bookies together
because they fill their journals at the same pace) or a checkpoint's ``fdatasync`` of ten
seconds of entry-log data stalled every bookie's journal for 20-57 ms (block-layer trace).
BookKeeper puts the journal on its own disk for this reason; on one disk the background
writer must keep what it queues small.

So every background writer goes through here: :func:`write_paced` writes a file region in
``chunk``-sized pieces and waits for each piece to reach the device
(``sync_file_range(WAIT_BEFORE | WRITE | WAIT_AFTER)``) before queueing the next, so at any
moment at most one chunk of background data is queued in front of a journal sync; the
entry logs' flusher (:class:`bookie_server.entrylog.EntryLogs`) writes back what the
journal writer appended with :func:`write_back` as it goes, so a checkpoint's ``fdatasync``
finds almost nothing left to write.

None of this replaces a sync: ``sync_file_range`` makes no durability promise (no file
metadata, no device cache flush), so every caller still ``fdatasync``\\ s where it did before.
It only decides *when* the data travels. Where ``sync_file_range`` does not exist (not
Linux) :func:`write_back` does nothing and the final sync writes everything, as before.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import time
from collections.abc import Callable, Sequence

IOV_MAX = 1024  # os.sysconf("SC_IOV_MAX") on Linux

Buffer = bytes | bytearray | memoryview


def write_all_at(fd: int, buffers: Sequence[Buffer], offset: int) -> int:
    """Write ``buffers`` back to back at ``offset`` with as few ``pwritev`` calls as the OS
    allows (one per 1024 buffers); returns the number of bytes written."""
    total = 0
    for start in range(0, len(buffers), IOV_MAX):
        chunk = buffers[start : start + IOV_MAX]
        expected = sum(len(b) for b in chunk)
        done = os.pwritev(fd, chunk, offset)
        if done != expected:  # short write: finish it from one joined buffer
            data = memoryview(b"".join(chunk))
            while done < expected:
                done += os.pwrite(fd, data[done:], offset + done)
        offset += expected
        total += expected
    return total



PAGE = 4096
#: Bytes of background data queued at the disk at most (a :class:`PacedWriter`'s step,
#: one step of the entry logs' flusher): ~0.5 ms of this machine's virtio disk.
WRITEBACK_CHUNK = 1 << 20

_WAIT_BEFORE, _WRITE, _WAIT_AFTER = 1, 2, 4


def _load_sync_file_range():  # type: ignore[no-untyped-def]
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        fn = libc.sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_sync_file_range = _load_sync_file_range()


def write_back(fd: int, offset: int, nbytes: int) -> None:
    """Write ``nbytes`` of ``fd`` from ``offset`` to the device now and wait until they are
    there (not durable: no metadata, no cache flush; a later ``fdatasync`` still is).
    A no-op where ``sync_file_range`` is unavailable."""
    if _sync_file_range is None or nbytes <= 0:
        return
    if _sync_file_range(fd, offset, nbytes, _WAIT_BEFORE | _WRITE | _WAIT_AFTER) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"sync_file_range: {os.strerror(err)}")


class PacedWriter:
    """Writes at increasing offsets of ``fd`` from ``offset``; each time ``chunk`` bytes
    accumulated since the last write-back it writes them back (:func:`write_back`) before
    going on, so the disk never holds more than about one chunk of this writer's data in
    its queue. :meth:`finish` writes back the rest; the caller then syncs as before."""

    __slots__ = ("fd", "offset", "chunk", "_back")

    def __init__(self, fd: int, offset: int, chunk: int = WRITEBACK_CHUNK) -> None:
        self.fd, self.offset, self.chunk = fd, offset, chunk
        self._back = offset  # written back up to here

    def write(self, buffers: Sequence[Buffer]) -> int:
        n = write_all_at(self.fd, buffers, self.offset)
        self.offset += n
        if self.offset - self._back >= self.chunk:
            self.finish()
        return n

    def finish(self) -> None:
        write_back(self.fd, self._back, self.offset - self._back)
        self._back = self.offset


def write_paced(fd: int, buffers: Sequence[Buffer], offset: int,
                chunk: int = WRITEBACK_CHUNK) -> int:
    """:func:`write_all_at` through a :class:`PacedWriter`, in pieces of at most ``chunk``
    bytes; returns the bytes written. Not synced."""
    w = PacedWriter(fd, offset, chunk)
    for buf in buffers:
        view = memoryview(buf)
        for start in range(0, len(view), chunk):
            w.write([view[start : start + chunk]])
    w.finish()
    return w.offset - offset


def write_zeros_paced(fd: int, nbytes: int, chunk: int = WRITEBACK_CHUNK,
                      pace: Callable[[int], bool] | None = None) -> None:
    """Fill ``fd`` with ``nbytes`` zeros from offset 0, one written-back chunk at a time.
    ``pace(bytes written so far)`` runs after each chunk and may sleep to spread the fill
    over time; when it returns False this raises ``InterruptedError`` (the journal's
    allocator gives up when the journal closes)."""
    zeros = bytes(min(chunk, nbytes))
    w = PacedWriter(fd, 0, chunk)
    while w.offset < nbytes:
        w.write([zeros[: nbytes - w.offset]])
        w.finish()
        if pace is not None and not pace(w.offset):
            raise InterruptedError("aborted")


def available() -> bool:
    """Whether write-back smoothing works here (``sync_file_range`` exists)."""
    return _sync_file_range is not None


#: Background work that shares the GIL and the storage's state lock with the journal
#: writer (a checkpoint) runs in bursts of at most this long...
YIELD_EVERY_S = 0.0005
#: ...each followed by a sleep this long: the writer, waiting for the GIL or the lock,
#: takes it then (CPython hands the GIL over on its own only after 5 ms, and a lock
#: released and taken again at once is rarely caught by the thread waiting for it).
YIELD_FOR_S = 0.0001


class Yielder:
    """Called between the pieces of a background task: sleeps :data:`YIELD_FOR_S` once
    :data:`YIELD_EVERY_S` of work passed since the last sleep, so a journal group never
    waits more than about one burst (plus one piece) for the task (bench/profiles.md,
    "Checkpoints invisible to adds"). Call it with no lock held."""

    __slots__ = ("_since", "every", "pause", "yields")

    def __init__(self, every: float = YIELD_EVERY_S, pause: float = YIELD_FOR_S) -> None:
        self.every, self.pause = every, pause
        self._since = time.perf_counter()
        self.yields = 0

    def __call__(self) -> None:
        if time.perf_counter() - self._since >= self.every:
            time.sleep(self.pause)
            self.yields += 1
            self._since = time.perf_counter()
