"""Entry log files: the bookie's append-only data files (their garbage collection, and the
liveness accounting it decides on, are in :mod:`bookie_server.gc`).

An entry log is a file ``<log id>.log`` in ``data_dir/ledgers/logs``: a 16-byte header
(magic, log id) and then entry records back to back. Entries of all ledgers share the
current log; it rotates to a new log id once it would grow past ``entry_log_size``.

Entry record (little endian, :mod:`bk_spark.protocol.records`), also embedded verbatim in the
journal's ADD records so that one buffer serves both files, and sent as it is by a packed
read::

    u32 record length (header + digest + payload) | i64 ledger id | i64 entry id
    | i64 lac | u16 digest length | digest | payload

Guarantees kept here:

* A log is only ever appended to, and only the current log; a location handed out by
  :meth:`EntryLogs.append` keeps its bytes until the log is deleted.
* Writes are not synced when made (the journal already made the add durable).
  :meth:`EntryLogs.sync` fsyncs every log written since the previous call (and the
  directory, when logs were created); a checkpoint calls it *before* it persists an index
  that points into those logs.
* Written data does not wait for that sync to travel: a flusher thread writes back each
  ``writeback_chunk`` the logs grow by as soon as it is there, one chunk at a time
  (:func:`bookie_server.writeback.write_back`), so the checkpoint's sync finds little to
  write and never queues seconds of data in front of the journal's syncs (which share the
  disk: :mod:`bookie_server.writeback`). Durability still comes from :meth:`sync` alone,
  and a write-back error fails it: the kernel reports a write-back error once per open
  file, and ``sync_file_range`` on the log's descriptor takes that report, so the
  ``fdatasync`` after it would return 0 for pages that never reached the disk. The
  flusher keeps the error and :meth:`sync` (which waits for a write-back in progress)
  raises it, then and every time after.
* :meth:`EntryLogs.delete` removes a log the storage found to hold no live entry; a reader
  that acquired the log before keeps a working file descriptor until it releases it.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

from bk_spark.errors import BookieStorageError, CorruptedEntryError
from bk_spark.protocol.records import ENTRY_HEADER as ENTRY_HEADER  # its one definition
from bookie_server import writeback
from bookie_server.writeback import WRITEBACK_CHUNK, Buffer, write_all_at, write_back

_log = logging.getLogger(__name__)

LOG_HEADER = struct.Struct("<8sQ")  # magic, log id
LOG_MAGIC = b"BKSPELOG"
LOG_SUFFIX = ".log"
def read_exact(fd: int, length: int, offset: int) -> bytes:
    """``length`` bytes at ``offset``; a short file is an error (a location pointing past the
    end of a log means the log lost data it had before a checkpoint)."""
    data = os.pread(fd, length, offset)
    if len(data) == length:
        return data
    parts = [data]
    got = len(data)
    while got < length:
        more = os.pread(fd, length - got, offset + got)
        if not more:
            raise CorruptedEntryError(f"entry log truncated: wanted {length} bytes at {offset}, "
                                      f"got {got}")
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def fsync_directory(path: Path) -> None:
    """Make file creations, renames and deletions in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LogFile:
    """One entry log: its path, lazily opened descriptor and reader count."""

    __slots__ = ("log_id", "path", "fd", "size", "refs", "deleted", "written_back")

    def __init__(self, log_id: int, path: Path, fd: int | None, size: int) -> None:
        self.log_id = log_id
        self.path = path
        self.fd = fd
        self.size = size  # bytes in the file, header included
        self.refs = 0
        self.deleted = False
        self.written_back = size  # bytes before this offset were written back (or were there)


class EntryLogs:
    """The set of entry logs of one bookie.

    Thread safety: :meth:`append` and :meth:`rotate` are called by one writer at a time (the
    storage holds its state lock); readers use :meth:`acquire`/:meth:`release` from any
    thread; :meth:`sync` may run concurrently with appends. ``writeback_chunk``: the
    flusher's step (0: no flusher, every byte waits for :meth:`sync`).
    """

    def __init__(self, directory: Path, max_log_size: int,
                 writeback_chunk: int = WRITEBACK_CHUNK) -> None:
        self._dir = Path(directory)
        self._max_size = max_log_size
        self._lock = threading.Lock()  # guards _logs, refs, _unsynced, _new_files, flusher
        self._logs: dict[int, LogFile] = {}
        self._current: LogFile | None = None
        self._unsynced: set[int] = set()
        self._new_files = False
        self._chunk = writeback_chunk if writeback_chunk > 0 and writeback.available() else 0
        self._flush_wanted = threading.Condition(self._lock)
        self._flush_idle = threading.Condition(self._lock)  # _flushing went False
        self._flusher: threading.Thread | None = None
        self._closing = False
        self._flushing = False  # the flusher is writing back (its error not yet recorded)
        self._writeback_error: OSError | None = None  # sticky: see the module docstring
        self.written_back = 0  # bytes the flusher wrote back (tests, metrics)

    # -- lifecycle -------------------------------------------------------------------------

    def open(self) -> None:
        """Find the existing logs and start a fresh current log after them.

        The previous current log is never appended to again: its tail may hold writes that
        were never synced, which the journal replay rewrites into the new log.
        """
        self._dir.mkdir(parents=True, exist_ok=True)
        for entry in os.scandir(self._dir):
            name = entry.name
            if name.endswith(".tmp"):
                os.unlink(entry.path)
            elif name.endswith(LOG_SUFFIX):
                try:
                    log_id = int(name[: -len(LOG_SUFFIX)], 16)
                except ValueError:
                    continue
                size = entry.stat().st_size
                self._logs[log_id] = LogFile(log_id, Path(entry.path), None, size)
        self._new_log(max(self._logs, default=0) + 1)
        if self._chunk:
            self._closing = False
            self._flusher = threading.Thread(target=self._run_flusher,
                                             name="entrylog-writeback", daemon=True)
            self._flusher.start()

    def close(self) -> None:
        """Close every descriptor (call after the last reader and writer are done)."""
        with self._lock:
            self._closing = True
            self._flush_wanted.notify_all()
        if self._flusher is not None:
            self._flusher.join()
            self._flusher = None
        with self._lock:
            for log in self._logs.values():
                if log.fd is not None:
                    os.close(log.fd)
                    log.fd = None
            self._current = None

    def _new_log(self, log_id: int) -> None:
        path = self._dir / f"{log_id:016x}{LOG_SUFFIX}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        os.pwrite(fd, LOG_HEADER.pack(LOG_MAGIC, log_id), 0)
        log = LogFile(log_id, path, fd, LOG_HEADER.size)
        with self._lock:
            self._logs[log_id] = log
            self._unsynced.add(log_id)
            self._new_files = True
            self._current = log

    # -- writing ---------------------------------------------------------------------------

    @property
    def current_id(self) -> int:
        assert self._current is not None, "entry logs not open"
        return self._current.log_id

    def rotate(self) -> None:
        """Start a new current log; the old one becomes read-only (and collectable)."""
        assert self._current is not None, "entry logs not open"
        self._new_log(self._current.log_id + 1)

    def append(self, buffers: Sequence[Buffer]) -> list[tuple[int, int]]:
        """Append each buffer (whole entry records) to the current log; returns where each
        went as ``(log id, offset)``. A buffer never straddles two logs; the log rotates
        before a buffer that would take it past the size limit. One ``pwritev`` per log.
        """
        log = self._current
        assert log is not None, "entry logs not open"
        places: list[tuple[int, int]] = []
        pending: list[Buffer] = []
        pos = log.size
        for buf in buffers:
            n = len(buf)
            if pos > LOG_HEADER.size and pos + n > self._max_size:
                self._write(log, pending, pos)
                pending = []
                self.rotate()
                log = self._current
                pos = log.size
            places.append((log.log_id, pos))
            pending.append(buf)
            pos += n
        self._write(log, pending, pos)
        return places

    def _write(self, log: LogFile, buffers: list[Buffer], end: int) -> None:
        if not buffers:
            return
        assert log.fd is not None
        write_all_at(log.fd, buffers, log.size)
        log.size = end
        with self._lock:
            self._unsynced.add(log.log_id)
            if self._chunk and end - log.written_back >= self._chunk:
                self._flush_wanted.notify()

    def _run_flusher(self) -> None:
        """Write back every full chunk the logs grew by, one chunk at a time (see the
        module docstring); a failure is kept for :meth:`sync` to raise."""
        chunk = self._chunk
        while True:
            with self._lock:
                while not self._closing:
                    due = [log for log in self._logs.values()
                           if log.size - log.written_back >= chunk and not log.deleted]
                    if due:
                        break
                    self._flush_wanted.wait()
                if self._closing:
                    return
                work = [(self._acquire_locked(log.log_id), log.written_back,
                         log.size & ~(writeback.PAGE - 1)) for log in due]
                self._flushing = True
            try:
                for log, start, end in work:
                    pos = start
                    while pos < end:
                        n = min(chunk, end - pos)
                        assert log.fd is not None
                        write_back(log.fd, pos, n)
                        pos += n
                    with self._lock:
                        log.written_back = max(log.written_back, end)
                        self.written_back += end - start
            except OSError as exc:
                _log.error("entry log write-back failed (every later sync reports it): %s",
                           exc)
                with self._lock:  # do not spin on a failing disk: wait for the next chunk
                    if self._writeback_error is None:
                        self._writeback_error = exc
                    for log, _start, end in work:
                        log.written_back = max(log.written_back, end)
            finally:
                with self._lock:
                    self._release_locked([w[0] for w in work])
                    self._flushing = False
                    self._flush_idle.notify_all()

    def sync(self) -> None:
        """fsync every log written since the last call, then the directory if logs were
        created. On error the logs stay marked unsynced. A write-back error of the
        flusher, now or earlier, fails it too (the kernel reported that error to the
        flusher, not to this ``fdatasync``: see the module docstring)."""
        with self._lock:
            ids, self._unsynced = self._unsynced, set()
            new_files, self._new_files = self._new_files, False
            logs = [self._acquire_locked(i) for i in ids if i in self._logs]
        try:
            for log in logs:
                assert log.fd is not None
                os.fdatasync(log.fd)
            if new_files:
                fsync_directory(self._dir)
            with self._lock:
                # A write-back that took an error report before our fdatasync checked
                # has recorded it once its pass is over.
                while self._flushing:
                    self._flush_idle.wait()
                failed = self._writeback_error
            if failed is not None:
                raise OSError(failed.errno, f"entry log write-back failed: {failed.strerror}")
        except BaseException:
            with self._lock:
                self._unsynced |= ids
                self._new_files = self._new_files or new_files
            raise
        finally:
            self.release(logs)

    # -- reading ---------------------------------------------------------------------------

    def _acquire_locked(self, log_id: int) -> LogFile:
        log = self._logs.get(log_id)
        if log is None:
            raise CorruptedEntryError(f"entry log {log_id:x} is missing: the bookie lost data")
        if log.fd is None:
            log.fd = os.open(log.path, os.O_RDONLY | os.O_CLOEXEC)
        log.refs += 1
        return log

    def acquire(self, log_ids: Iterable[int]) -> dict[int, LogFile]:
        """Pin logs for reading: they keep an open descriptor until :meth:`release`."""
        with self._lock:
            out: dict[int, LogFile] = {}
            try:
                for log_id in log_ids:
                    if log_id not in out:
                        out[log_id] = self._acquire_locked(log_id)
            except BaseException:
                self._release_locked(out.values())
                raise
            return out

    def release(self, logs: Iterable[LogFile]) -> None:
        with self._lock:
            self._release_locked(logs)

    def _release_locked(self, logs: Iterable[LogFile]) -> None:
        for log in logs:
            log.refs -= 1
            if log.refs == 0 and log.deleted and log.fd is not None:
                os.close(log.fd)
                log.fd = None

    def read(self, log_id: int, offset: int, length: int) -> bytes:
        """Read ``length`` bytes at ``offset`` of a log (pins it for the call)."""
        logs = self.acquire((log_id,))
        try:
            fd = logs[log_id].fd
            assert fd is not None
            return read_exact(fd, length, offset)
        finally:
            self.release(logs.values())

    # -- garbage collection ----------------------------------------------------------------

    def data_sizes(self) -> dict[int, int]:
        """Bytes of entry records in each log (header excluded)."""
        with self._lock:
            return {i: log.size - LOG_HEADER.size for i, log in self._logs.items()}

    def log_ids(self) -> list[int]:
        with self._lock:
            return sorted(self._logs)

    def delete(self, log_id: int) -> None:
        """Remove a log that is not the current one; pinned readers keep their descriptor."""
        with self._lock:
            log = self._logs.get(log_id)
            if log is None:
                return
            if log is self._current:
                raise BookieStorageError("cannot delete the current entry log")
            del self._logs[log_id]
            self._unsynced.discard(log_id)
            log.deleted = True
            os.unlink(log.path)
            if log.refs == 0 and log.fd is not None:
                os.close(log.fd)
                log.fd = None
