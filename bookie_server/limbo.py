"""Repair marks: which ledgers a bookie that lost its data must not answer for yet (BP-46).

A bookie that restarts without the data it acknowledged (a wiped or replaced disk) has
forgotten its fences and its entries. Before it serves, self-repair
(:mod:`bookie_server.self_repair`) marks, from the ledger metadata, every ledger whose
ensembles name it, with one of three kinds (BookKeeper's ``DataIntegrityCheckImpl``):

* ``LIMBO``: not closed, and its last ensemble names this bookie. The bookie may have
  acknowledged entries or a fence it no longer holds, so the ledger is *fenced* (plain
  adds refused) and *in limbo*: a read, LAC read, fence or held-entries query of what the
  bookie does not hold answers ``UNKNOWN``, never "no such entry" (the gRPC service,
  :mod:`bookie_server.server`). Clients count that as no answer.
* ``FENCED``: closed, and its last ensemble names this bookie: an old writer (fenced by a
  recovery whose fence this bookie forgot) must not reach its ack quorum again, so plain
  adds are refused. Reads answer as usual (a closed ledger's readers know where it ends).
* ``COPY``: named only in earlier fragments: its entries are copied back, nothing else.

A mark is cleared, ledger by ledger, once repair copied the ledger's entries back and
fenced it durably with its master key (:meth:`BookieStorage.clear_repair_mark`). A mark
whose ledger no longer names the bookie (AutoRecovery replaced it) is *retired*: it no
longer counts as left to repair, and where
:data:`~bk_spark.protocol.recovery_plan.RETIRED_MARK_REFUSES_PLAIN_ADDS` says so the
ledger's plain adds stay refused for good (the fence the bookie forgot, with no key to
write it again: :meth:`BookieStorage.retire_repair_mark`).

On disk (``data_dir/ledgers/repair-marks.log``): an append-only file of 25-byte records
``u8 op | i64 ledger id | i64 entries | i64 bytes`` (op: ``L``/``F``/``C`` marks, ``X``
cleared with the entries and bytes copied, ``R`` retired with its plain adds refused for
good, ``B`` a repair began, ``D`` it completed), each
batch of appends fdatasync'd before the call returns, so a mark is durable before the
bookie serves and a restart mid-repair resumes from the marks left. A torn last record (a
crash mid-append) is ignored.

Thread-safe (one lock; it nests inside none of the storage's locks and takes none).
"""

from __future__ import annotations

import os
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bk_spark.protocol.recovery_plan import RepairMark as MarkKind
from bookie_server.entrylog import fsync_directory

RECORD = struct.Struct("<cqqq")
FILE_NAME = "repair-marks.log"


#: Which marks refuse plain (non-recovery) adds, and which answer UNKNOWN to reads.
REFUSES_PLAIN_ADDS = frozenset({MarkKind.LIMBO, MarkKind.FENCED})
ANSWERS_UNKNOWN = frozenset({MarkKind.LIMBO})

_BEGIN, _DONE, _CLEARED, _REFUSED = b"B", b"D", b"X", b"R"


@dataclass(frozen=True)
class RepairProgress:
    """What a repair did so far, as persisted (``bk bookie repair-status`` shows it)."""

    state: str              # "none" | "repairing" | "done"
    total: int              # ledgers marked when the repair began
    left: int               # marks not cleared yet
    limbo: int              # of which in limbo
    entries_copied: int
    bytes_copied: int
    started_ms: int


class RepairMarks:
    """The durable repair marks of one bookie (see the module docstring)."""

    def __init__(self, directory: Path) -> None:
        self._path = Path(directory) / FILE_NAME
        self._lock = threading.Lock()
        self._marks: dict[int, MarkKind] = {}
        self._refused: set[int] = set()  # retired marks whose plain adds stay refused
        self._total = 0
        self._entries = 0
        self._bytes = 0
        self._started_ms = 0
        self._state = "none"
        self._fd: int | None = None

    def load(self) -> None:
        """Read the file (if any) and open it for appends."""
        data = self._path.read_bytes() if self._path.exists() else b""
        n = len(data) // RECORD.size
        for op, lid, entries, nbytes in RECORD.iter_unpack(data[:n * RECORD.size]):
            self._apply(op, lid, entries, nbytes)
        self._path.parent.mkdir(parents=True, exist_ok=True)
        created = not self._path.exists()
        self._fd = os.open(self._path, os.O_WRONLY | os.O_CREAT, 0o644)
        os.ftruncate(self._fd, n * RECORD.size)  # drop a torn last record
        os.lseek(self._fd, 0, os.SEEK_END)
        if created:
            fsync_directory(self._path.parent)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def _apply(self, op: bytes, lid: int, entries: int, nbytes: int) -> None:
        if op == _BEGIN:
            self._marks.clear()
            self._total, self._entries, self._bytes = 0, 0, 0
            self._started_ms, self._state = lid, "repairing"
        elif op == _DONE:
            self._state = "done"
        elif op in (_CLEARED, _REFUSED):
            if self._marks.pop(lid, None) is not None:
                self._entries += entries
                self._bytes += nbytes
            if op == _REFUSED:
                self._refused.add(lid)
        else:
            kind = MarkKind(op.decode())
            if lid not in self._marks:
                self._total += 1
            self._marks[lid] = kind

    def _append(self, records: list[tuple[bytes, int, int, int]]) -> None:
        if self._fd is None:
            raise RuntimeError("repair marks are not loaded")
        os.write(self._fd, b"".join(RECORD.pack(*r) for r in records))
        os.fdatasync(self._fd)
        for r in records:
            self._apply(*r)

    # -- writes ----------------------------------------------------------------------------
    def begin(self, marks: dict[int, MarkKind]) -> None:
        """Start a repair with ``marks`` (replacing any earlier repair's): durable on return."""
        with self._lock:
            records = [(_BEGIN, int(time.time() * 1000), 0, 0)]
            records += [(k.value.encode(), lid, 0, 0) for lid, k in sorted(marks.items())]
            self._append(records)

    def clear(self, ledger_id: int, entries: int = 0, nbytes: int = 0) -> None:
        """The ledger is repaired (its entries copied back, fenced with its key): durable."""
        with self._lock:
            self._append([(_CLEARED, ledger_id, entries, nbytes)])

    def retire(self, ledger_id: int, refuse_plain_adds: bool) -> None:
        """No fragment of the ledger names this bookie any more: its mark no longer counts
        as left to repair; with ``refuse_plain_adds`` its plain adds stay refused for good.
        Durable on return."""
        with self._lock:
            self._append([(_REFUSED if refuse_plain_adds else _CLEARED, ledger_id, 0, 0)])

    def finish(self) -> None:
        """Every mark is cleared and the caller's completion ran: the repair is done."""
        with self._lock:
            self._append([(_DONE, 0, 0, 0)])

    # -- reads -----------------------------------------------------------------------------
    def kind(self, ledger_id: int) -> MarkKind | None:
        return self._marks.get(ledger_id)  # a dict read: atomic under the GIL

    def refuses_plain_adds(self, ledger_id: int) -> bool:
        """Whether a plain add of the ledger is refused: its mark refuses them, or a retired
        mark kept them refused (atomic reads under the GIL)."""
        return self._marks.get(ledger_id) in REFUSES_PLAIN_ADDS or ledger_id in self._refused

    def pending(self) -> dict[int, MarkKind]:
        with self._lock:
            return dict(self._marks)

    def in_progress(self) -> bool:
        """A repair began and did not complete (a restart resumes it)."""
        with self._lock:
            return self._state == "repairing"

    def progress(self) -> RepairProgress:
        with self._lock:
            return RepairProgress(
                self._state, self._total, len(self._marks),
                sum(1 for k in self._marks.values() if k == MarkKind.LIMBO),
                self._entries, self._bytes, self._started_ms)
