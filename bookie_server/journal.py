"""The bookie's write-ahead journal with group commit.

Theory of operation
-------------------
Every change a bookie acknowledges (adds, fences, explicit LACs, ledger deletes) is first
appended to the journal and fdatasync'd; only then is it applied and acknowledged.
Concurrent requests share one sync: a single writer thread takes everything queued (up to
``max_group_bytes``), writes it with one ``pwritev`` and one ``fdatasync``, then hands the
whole group to ``on_synced``. With ``max_group_wait_s`` > 0 it may wait for more records
first, but only while the observed arrival rate says the next record comes within what is
left of that wait (:func:`bk_spark.protocol.batching.batch_wait`): at a moderate load a lone
record is synced at once instead of waiting for a group that will not come.

Journal files ``<seq>.jnl`` in ``data_dir/journal`` have a fixed size and are written in
place: they are recycled from files a checkpoint released (BookKeeper's
``journalReuseFiles``) or, when there is none, preallocated (filled with zeros and synced by
a background thread before they are needed), because overwriting allocated blocks syncs
much faster than appending (1.0 M vs 1.6 M records/s of 1 KiB, 256 per fdatasync, on this
machine's ext4; ``fallocate``, plain or ``FALLOC_FL_ZERO_RANGE``, leaves unwritten extents
whose first sync converts them and runs as slowly as appending). :meth:`Journal.start`
prepares the first two files before the first add, and a zero-fill in progress gives way
to a spare that appears meanwhile (bench/profiles.md, "The bookie's kernel time").
The zeros go to the disk one chunk at a
time (:func:`bookie_server.writeback.write_zeros_paced`): synced all at once they queued
16-64 MiB in front of the writer's own syncs, a 10-50 ms stall of every add. A file's
sequence number is never reused. When a group does not fit in the current file, a ROLL
record naming the next file is written and synced at its end and writing goes on in the
next file.

Record format (little endian)::

    u32 body length | u32 crc32c | u8 type | body

The CRC is ``crc32c(body ++ u64 file seq ++ u32 body length ++ u8 type)``: it covers the
file's sequence number, so records left in a recycled file (written under an older
number), zeros and garbage never check out.

Replay (after a crash or a clean stop) starts at the last checkpoint's position and applies
every valid record in order, following ROLL records from file to file. The first record
that is torn, corrupt, zeroed or absent ends the replay: such a record was never
acknowledged, because its group's sync did not complete. After a replay the journal always
continues in a fresh file (a higher sequence number), so the stale bytes after the replay's
end can never be mistaken for records.

Record bodies (ADD embeds the entry log's entry records verbatim, see
:mod:`bookie_server.entrylog`; a packed add's records are the request's bytes as they came,
:func:`encode_records`)::

    ROLL    u64 next file seq
    ADD     i64 ledger id | u16 key length | u32 n entries | master key | entry record * n
    FENCE   i64 ledger id | u16 key length | master key
    LAC     i64 ledger id | i64 lac | u16 key length | master key
    DELETE  i64 ledger id
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import Any, NamedTuple

import crc32c
import numpy as np

from bk_spark.errors import BookieStorageError
from bk_spark.protocol.batching import ArrivalRate, batch_wait
from bk_spark.protocol.records import RecordList, Records
from bookie_server.entrylog import ENTRY_HEADER, fsync_directory
from bookie_server.location import pack_span, pack_spans
from bookie_server.writeback import write_all_at, write_zeros_paced

log = logging.getLogger(__name__)

MiB = 1 << 20


class RecordType(IntEnum):
    ROLL = 1
    ADD = 2
    FENCE = 3
    LAC = 4
    DELETE = 5


VALID_TYPES = frozenset(int(t) for t in RecordType)
RECORD_HEADER = struct.Struct("<IIB")  # body length, crc32c, type
CRC_TRAILER = struct.Struct("<QIB")  # file seq, body length, type: covered by the CRC
ADD_HEADER = struct.Struct("<qHI")  # ledger id, master key length, entry count
FENCE_BODY = struct.Struct("<qH")  # ledger id, master key length
LAC_BODY = struct.Struct("<qqH")  # ledger id, lac, master key length
DELETE_BODY = struct.Struct("<q")  # ledger id
ROLL_BODY = struct.Struct("<Q")  # next file seq
ROLL_RECORD_SIZE = RECORD_HEADER.size + ROLL_BODY.size
#: The allocator zero-fills the next journal file at least this fast (bytes/s).
MIN_FILL_RATE = 16 * MiB
JOURNAL_SUFFIX = ".jnl"
SPARE_PREFIX = "spare-"


class JournalPosition(NamedTuple):
    """A place in the journal: file sequence number and byte offset in that file."""

    seq: int
    offset: int


class JournalRecord:
    """One record waiting to be journaled; ``token`` travels with it to ``on_synced``."""

    __slots__ = ("rtype", "body", "crc", "token")

    def __init__(self, rtype: int, body: bytes, token: Any = None) -> None:
        self.rtype = rtype
        self.body = body
        self.crc = crc32c.crc32c(body)  # of the body alone; the writer adds the trailer
        self.token = token

    @property
    def size(self) -> int:
        return RECORD_HEADER.size + len(self.body)


# -- record codecs -----------------------------------------------------------------------


def frame(seq: int, rtype: int, body: bytes, body_crc: int | None = None) -> bytes:
    """The bytes of one record as written in file ``seq``."""
    if body_crc is None:
        body_crc = crc32c.crc32c(body)
    n = len(body)
    crc = crc32c.crc32c(CRC_TRAILER.pack(seq, n, rtype), value=body_crc)
    return RECORD_HEADER.pack(n, crc, rtype) + body


def parse_record(data: memoryview, pos: int, seq: int) -> tuple[int, memoryview, int] | None:
    """``(type, body, end)`` of the record at ``pos`` of file ``seq``, or None when there is
    no valid record there (end of data, zeros, torn write, garbage, stale record)."""
    if pos + RECORD_HEADER.size > len(data):
        return None
    n, crc, rtype = RECORD_HEADER.unpack_from(data, pos)
    end = pos + RECORD_HEADER.size + n
    if n == 0 or rtype not in VALID_TYPES or end > len(data):
        return None
    body = data[pos + RECORD_HEADER.size : end]
    expect = crc32c.crc32c(CRC_TRAILER.pack(seq, n, rtype), value=crc32c.crc32c(body))
    if expect != crc:
        return None
    return rtype, body, end


@dataclass(slots=True)
class AddBatch:
    """Entries of one ledger in one ADD record.

    ``spans[i]`` is entry i's :func:`~bookie_server.location.pack_span` (its record's offset
    relative to ``entries_start`` and its length), so that an entry's location is the
    batch's location plus its span. Both are lists (:func:`encode_adds`,
    :func:`decode_add`) or numpy arrays, int64 and uint64 (:func:`encode_records`: a
    packed add, no Python object per entry).
    """

    ledger_id: int
    master_key: bytes
    body: bytes | memoryview
    entries_start: int
    entry_ids: list[int] | np.ndarray
    spans: list[int] | np.ndarray
    max_lac: int
    min_entry: int
    max_entry: int

    @property
    def entries(self) -> memoryview:
        """The entry records, ready for the entry log."""
        return memoryview(self.body)[self.entries_start :]

    @property
    def nbytes(self) -> int:
        return len(self.body) - self.entries_start


def _finish_add(
    ledger_id: int,
    master_key: bytes,
    parts: list,
    entry_ids: list[int],
    spans: list[int],
    max_lac: int,
) -> AddBatch:
    head = ADD_HEADER.pack(ledger_id, len(master_key), len(entry_ids)) + master_key
    parts[0] = head
    return AddBatch(
        ledger_id,
        master_key,
        b"".join(parts),
        len(head),
        entry_ids,
        spans,
        max_lac,
        min(entry_ids),
        max(entry_ids),
    )


def encode_adds(
    ledger_id: int,
    master_key: bytes,
    entries: Sequence[tuple[int, int, bytes, bytes]],
    record_cap: int,
) -> list[AddBatch]:
    """ADD record bodies for ``entries`` (``(entry_id, lac, payload, digest)``), each at most
    ``record_cap`` bytes unless a single entry is larger. Inputs must be validated."""
    pack = ENTRY_HEADER.pack
    header_size = ENTRY_HEADER.size
    batches: list[AddBatch] = []
    parts: list = [b""]
    entry_ids: list[int] = []
    spans: list[int] = []
    offset = 0
    max_lac = -1
    for entry_id, lac, payload, digest in entries:
        n = header_size + len(digest) + len(payload)
        if offset and offset + n > record_cap:
            batches.append(_finish_add(ledger_id, master_key, parts, entry_ids, spans, max_lac))
            parts, entry_ids, spans, offset, max_lac = [b""], [], [], 0, -1
        parts.append(pack(n, ledger_id, entry_id, lac, len(digest)))
        parts.append(digest)
        parts.append(payload)
        entry_ids.append(entry_id)
        spans.append(pack_span(offset, n))
        if lac > max_lac:
            max_lac = lac
        offset += n
    if entry_ids:
        batches.append(_finish_add(ledger_id, master_key, parts, entry_ids, spans, max_lac))
    return batches


def encode_records(ledger_id: int, master_key: bytes, recs: Records | RecordList,
                   record_cap: int) -> list[AddBatch]:
    """ADD record bodies for the records of a packed add (checked by
    :func:`bookie_server.validation.check_records`): the same bodies :func:`encode_adds`
    makes of the same entries, built from the request's bytes as they came (one copy per
    body, its header joined to a slice of them) with the batch's columns in numpy. Each
    body holds at most ``record_cap`` bytes of records unless a single record is larger.
    A :class:`~bk_spark.protocol.records.RecordList` (a few records) is encoded the same
    way in plain Python."""
    n = len(recs)
    if n == 0:
        return []
    if isinstance(recs, RecordList):
        return _encode_record_list(ledger_id, master_key, recs, record_cap)
    starts, ends = recs.starts, recs.payload_ends
    raw = memoryview(recs.data)
    batches: list[AddBatch] = []
    a = 0
    while a < n:
        # the most records from a on whose bytes fit the cap (at least one)
        b = int(np.searchsorted(ends, int(starts[a]) + record_cap, side="right"))
        b = min(max(b, a + 1), n)
        lo, hi = int(starts[a]), int(ends[b - 1])
        ids = recs.entry_ids[a:b]
        spans = pack_spans(starts[a:b] - lo, ends[a:b] - starts[a:b])
        head = ADD_HEADER.pack(ledger_id, len(master_key), b - a) + master_key
        batches.append(AddBatch(ledger_id, master_key, b"".join((head, raw[lo:hi])),
                                len(head), ids, spans, max(-1, int(recs.lacs[a:b].max())),
                                int(ids.min()), int(ids.max())))
        a = b
    return batches


def _encode_record_list(ledger_id: int, master_key: bytes, recs: RecordList, record_cap: int
                        ) -> list[AddBatch]:
    """:func:`encode_records` of a few records (a :class:`RecordList`, plain Python): the
    same bodies and batches, its columns as lists (numpy's set-up would cost more)."""
    starts, ends, n = recs.starts, recs.payload_ends, len(recs)
    if ends[-1] <= record_cap or n == 1:  # the usual case: the whole request, one body
        head = ADD_HEADER.pack(ledger_id, len(master_key), n) + master_key
        ids = recs.entry_ids
        return [AddBatch(ledger_id, master_key, head + bytes(recs.data), len(head), ids,
                         [pack_span(s, e - s) for s, e in zip(starts, ends, strict=True)],
                         max(-1, *recs.lacs), min(ids), max(ids))]
    raw = memoryview(recs.data)
    batches: list[AddBatch] = []
    a = 0
    while a < n:
        # the most records from a on whose bytes fit the cap (at least one)
        b = min(max(bisect_right(ends, starts[a] + record_cap), a + 1), n)
        lo, hi = starts[a], ends[b - 1]
        ids = recs.entry_ids[a:b]
        spans = [pack_span(s - lo, e - s) for s, e in zip(starts[a:b], ends[a:b], strict=True)]
        head = ADD_HEADER.pack(ledger_id, len(master_key), b - a) + master_key
        batches.append(AddBatch(ledger_id, master_key, b"".join((head, raw[lo:hi])),
                                len(head), ids, spans, max(-1, *recs.lacs[a:b]),
                                min(ids), max(ids)))
        a = b
    return batches


def decode_add(body: memoryview) -> AddBatch:
    """The :class:`AddBatch` of an ADD record body (raises ValueError when malformed)."""
    ledger_id, key_len, count = ADD_HEADER.unpack_from(body, 0)
    start = ADD_HEADER.size + key_len
    master_key = bytes(body[ADD_HEADER.size : start])
    unpack = ENTRY_HEADER.unpack_from
    entry_ids: list[int] = []
    spans: list[int] = []
    offset = 0
    max_lac = -1
    for _ in range(count):
        n, entry_ledger, entry_id, lac, digest_len = unpack(body, start + offset)
        if entry_ledger != ledger_id or n < ENTRY_HEADER.size + digest_len:
            raise ValueError("malformed ADD record")
        entry_ids.append(entry_id)
        spans.append(pack_span(offset, n))
        max_lac = max(max_lac, lac)
        offset += n
    if not entry_ids or start + offset != len(body):
        raise ValueError("malformed ADD record")
    return AddBatch(
        ledger_id,
        master_key,
        body,
        start,
        entry_ids,
        spans,
        max_lac,
        min(entry_ids),
        max(entry_ids),
    )


def encode_fence(ledger_id: int, master_key: bytes) -> bytes:
    return FENCE_BODY.pack(ledger_id, len(master_key)) + master_key


def decode_fence(body: memoryview) -> tuple[int, bytes]:
    ledger_id, key_len = FENCE_BODY.unpack_from(body, 0)
    return ledger_id, bytes(body[FENCE_BODY.size : FENCE_BODY.size + key_len])


def encode_lac(ledger_id: int, lac: int, master_key: bytes) -> bytes:
    return LAC_BODY.pack(ledger_id, lac, len(master_key)) + master_key


def decode_lac(body: memoryview) -> tuple[int, int, bytes]:
    ledger_id, lac, key_len = LAC_BODY.unpack_from(body, 0)
    return ledger_id, lac, bytes(body[LAC_BODY.size : LAC_BODY.size + key_len])


def encode_delete(ledger_id: int) -> bytes:
    return DELETE_BODY.pack(ledger_id)


def decode_delete(body: memoryview) -> int:
    return DELETE_BODY.unpack_from(body, 0)[0]


def iter_file_records(
    data: memoryview, seq: int, offset: int = 0
) -> Iterator[tuple[int, memoryview, int]]:
    """Valid records of file ``seq`` from ``offset`` up to the first invalid one."""
    while True:
        parsed = parse_record(data, offset, seq)
        if parsed is None:
            return
        yield parsed
        offset = parsed[2]


# -- the journal ---------------------------------------------------------------------------


class _File:
    __slots__ = ("seq", "path", "fd", "offset")

    def __init__(self, seq: int, path: Path, fd: int) -> None:
        self.seq = seq
        self.path = path
        self.fd = fd
        self.offset = 0


SyncedCallback = Callable[[list[JournalRecord], JournalPosition], None]
FailedCallback = Callable[[list[JournalRecord], BaseException], None]
SyncMetric = Callable[[float, int, int], None]
HalfCallback = Callable[[], None]

#: A journal file half written prompts a checkpoint (:func:`roll_wants_checkpoint`) only
#: while the writer writes at least this many bytes/s into the journal...
REUSE_MIN_RATE = 32 * MiB
#: ...and at most once per this many seconds.
REUSE_MIN_GAP_S = 0.25


def roll_wants_checkpoint(byte_rate: float, spares: int, since_checkpoint_s: float) -> bool:
    """Whether the journal, half through its current file, should prompt a checkpoint
    now, so that the files before it come back as spares (reused as they are) before the
    allocator prepares the file after the next, instead of it zero-filling new ones
    (BookKeeper's ``journalReuseFiles``; prompted at the roll itself, the spare came
    while the allocator had already begun a fill). Zero-filling costs ~1.1 us of system CPU per
    KiB journaled, a third of a saturated bookie's CPU; a checkpoint costs two fdatasyncs
    (entry logs, index) on the journal's disk, which at paced loads made the add p99 2-3x
    worse when prompted at every roll, before checkpoints ran in slices (bench/profiles.md,
    "The bookie's kernel time"). Since they do, the zero-fill is the worse of the two: at
    100% offered the bookies' next files being zero-filled beside the journal's syncs set
    the p99 ("The lone add's hand-offs and the bound at 100% offered"), and reuse from
    :data:`REUSE_MIN_RATE` = 32 MiB/s (a ledger paced above ~25% of the sandbox's maximum)
    halved it (the A/B in "Journal reuse from 32 MiB/s"). So: only when no spare is left,
    from that rate, and at most every :data:`REUSE_MIN_GAP_S`."""
    return (spares == 0 and byte_rate >= REUSE_MIN_RATE
            and since_checkpoint_s >= REUSE_MIN_GAP_S)


class Journal:
    """Write-ahead journal with group commit (see the module docstring).

    Use: :meth:`replay` (optional) then :meth:`start`, :meth:`submit` from any thread,
    :meth:`release_before` after each checkpoint, :meth:`close`.

    ``on_synced(records, end)`` runs on the writer thread after the records' sync, in
    journal order; ``end`` is the position just after the last one. ``on_failed(records,
    error)`` gets the records that will never be synced when writing fails; the journal
    then refuses new records.
    """

    def __init__(
        self,
        directory: Path,
        *,
        file_size: int,
        on_synced: SyncedCallback,
        on_failed: FailedCallback,
        max_group_wait_s: float = 0.0,
        max_group_bytes: int = 4 * MiB,
        preallocate: bool = True,
        max_spares: int = 2,
        on_sync: SyncMetric | None = None,
        on_half: HalfCallback | None = None,
    ) -> None:
        self._dir = Path(directory)
        self._file_size = file_size
        self._on_synced = on_synced
        self._on_failed = on_failed
        self._on_sync = on_sync
        self._on_half = on_half
        self._half_seq = -1  # the last file on_half was called for
        self._max_wait = max(0.0, max_group_wait_s)
        self._group_limit = max(1, min(max_group_bytes, file_size - ROLL_RECORD_SIZE))
        self._preallocate = preallocate
        self._max_spares = max_spares if preallocate else 0

        self._cond = threading.Condition()  # guards the queue and the flags below
        self._queue: deque[JournalRecord] = deque()
        self._queued_bytes = 0
        self._arrivals = ArrivalRate()  # records submitted per second (adaptive wait)
        self._started = False
        self._closing = False
        self._failed: BaseException | None = None

        self._alloc_cond = threading.Condition()  # guards _next, _max_seq, allocator flags
        self._next: _File | None = None
        self._allocating = False
        self._alloc_failed = False
        self._max_seq = 0

        self._files_lock = threading.Lock()  # guards _files and _spares
        self._files: dict[int, Path] = {}
        self._spares: list[Path] = []
        self._scanned = False

        self._current: _File | None = None
        # The allocator's pace (_pace_fill): bytes/s the writer writes, set when the
        # writer waits for the next file (or the journal closes)
        self._byte_rate = 0.0
        self._rate_bytes = 0
        self._rate_since = time.monotonic()
        self._hurry = threading.Event()
        self._fill_started = 0.0
        self._threads: list[threading.Thread] = []
        self.syncs = 0  # number of group syncs (for tests and metrics)
        self.recycled = 0  # files prepared from a spare, not zero-filled (tests, metrics)
        self.filled = 0  # files zero-filled
        self.replayed = 0  # records applied by the last replay

    # -- files -----------------------------------------------------------------------------

    def _path(self, seq: int) -> Path:
        return self._dir / f"{seq:016x}{JOURNAL_SUFFIX}"

    def _scan(self) -> None:
        if self._scanned:
            return
        self._scanned = True
        self._dir.mkdir(parents=True, exist_ok=True)
        spare_seqs: list[int] = []
        for entry in os.scandir(self._dir):
            name = entry.name
            path = Path(entry.path)
            if name.endswith(".tmp"):
                path.unlink()
            elif name.startswith(SPARE_PREFIX):
                try:  # a spare's name keeps its old number: never hand that number out again
                    spare_seqs.append(int(name[len(SPARE_PREFIX):-len(JOURNAL_SUFFIX)], 16))
                except ValueError:
                    pass
                if len(self._spares) < self._max_spares and entry.stat().st_size == self._file_size:
                    self._spares.append(path)
                else:
                    path.unlink()
            elif name.endswith(JOURNAL_SUFFIX):
                try:
                    seq = int(name[: -len(JOURNAL_SUFFIX)], 16)
                except ValueError:
                    continue
                self._files[seq] = path
        self._max_seq = max([*self._files, *spare_seqs], default=0)

    def file_seqs(self) -> list[int]:
        """Sequence numbers of the journal files on disk (current and prepared included)."""
        with self._files_lock:
            return sorted(self._files)

    def _prepare(self, seq: int, *, abortable: bool = False) -> _File:
        """Make file ``seq`` ready to be overwritten in place, durably named. A spare (a file
        a checkpoint released) is renamed and reused as it is; otherwise a new file is
        zero-filled. ``abortable`` (the allocator): give up (raise) when the journal closes
        meanwhile, and drop a zero-fill in progress as soon as a spare appears (a
        checkpoint released one meanwhile: :meth:`release_before`)."""
        path = self._path(seq)
        while True:
            with self._files_lock:
                spare = self._spares.pop() if self._spares else None
            if spare is not None:
                os.rename(spare, path)
                fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
                self.recycled += 1
                break
            tmp = path.with_name(path.name + ".tmp")
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            try:
                if self._preallocate:
                    # Zeros written back one chunk at a time, not queued all at once in
                    # front of the journal's own syncs (bookie_server.writeback), and
                    # spread over the time the current file lasts (_pace_fill).
                    try:
                        write_zeros_paced(fd, self._file_size,
                                          pace=self._pace_fill if abortable else None)
                    except InterruptedError:
                        if self._closing:
                            raise BookieStorageError("journal closing") from None
                        os.close(fd)  # a spare appeared: reuse it instead
                        fd = -1
                        tmp.unlink(missing_ok=True)
                        continue
                    os.fdatasync(fd)
                os.rename(tmp, path)
            except BaseException:
                if fd >= 0:
                    os.close(fd)
                tmp.unlink(missing_ok=True)
                raise
            self.filled += 1
            break
        fsync_directory(self._dir)
        with self._files_lock:
            self._files[seq] = path
        return _File(seq, path, fd)

    def _measure_rate(self, nbytes: int) -> None:
        """The writer's bytes/s, averaged over 0.1 s windows (writer thread)."""
        self._rate_bytes += nbytes
        now = time.monotonic()
        elapsed = now - self._rate_since
        if elapsed >= 0.1:
            recent = self._rate_bytes / elapsed
            self._byte_rate = recent if elapsed > 1.0 else 0.7 * self._byte_rate + 0.3 * recent
            self._rate_bytes, self._rate_since = 0, now

    def _pace_fill(self, filled: int) -> bool:
        """The allocator's pace while it zero-fills the next file (``filled`` bytes so
        far): no faster than twice the rate the writer fills the current one (at least
        :data:`MIN_FILL_RATE`), so its writes are spread thin between the writer's syncs
        and the file is still ready when half the current one is left. Full speed as soon
        as the writer waits for it. False: the journal is closing, or a spare is
        there to reuse instead: give the fill up."""
        if filled >= self._file_size:
            return not self._closing
        if self._closing or self._spares:
            return False
        if self._hurry.is_set():
            return True
        rate = max(2.0 * self._byte_rate, MIN_FILL_RATE)
        started = self._fill_started
        due = started + filled / rate  # when this many bytes are due at that rate
        wait = due - time.monotonic()
        if wait > 0:
            self._hurry.wait(min(wait, 1.0))
        return not self._closing

    @property
    def byte_rate(self) -> float:
        """Bytes/s the writer writes (averaged over 0.1 s windows)."""
        return self._byte_rate

    @property
    def spares(self) -> int:
        """Files released by checkpoints, waiting to be reused. Read without the files'
        lock (one ``len``, as :meth:`_pace_fill` reads it): the writer thread asks, and
        :meth:`release_before` holds that lock across renames and unlinks."""
        return len(self._spares)

    def _new_seq(self) -> int:
        with self._alloc_cond:
            self._max_seq += 1
            return self._max_seq

    def release_before(self, position: JournalPosition | tuple[int, int]) -> None:
        """Recycle (or delete) the files wholly before ``position``: a checkpoint covers them."""
        with self._files_lock:
            old = sorted(seq for seq in self._files if seq < position[0])
            for seq in old:
                path = self._files.pop(seq)
                try:
                    if (
                        len(self._spares) < self._max_spares
                        and path.stat().st_size == self._file_size
                    ):
                        spare = self._dir / f"{SPARE_PREFIX}{seq:016x}{JOURNAL_SUFFIX}"
                        os.rename(path, spare)
                        self._spares.append(spare)
                    else:
                        path.unlink()
                except FileNotFoundError:
                    pass

    # -- replay ----------------------------------------------------------------------------

    def replay(
        self,
        start: JournalPosition | tuple[int, int] | None,
        apply: Callable[[int, memoryview, JournalPosition], None],
    ) -> JournalPosition:
        """Apply every valid record from ``start`` (the oldest file when None) in order;
        returns the position where the replay ended. Call before :meth:`start`."""
        self._scan()
        self.replayed = 0
        if start is None:
            seq: int | None = min(self._files, default=None)
            offset = 0
        else:
            seq, offset = start
        end = JournalPosition(seq or 0, offset)
        while seq is not None and seq in self._files:
            data = memoryview(self._files[seq].read_bytes())
            pos = offset
            next_seq = None
            for rtype, body, after in iter_file_records(data, seq, offset):
                if rtype == RecordType.ROLL:
                    next_seq = ROLL_BODY.unpack_from(body, 0)[0]
                    break
                apply(rtype, body, JournalPosition(seq, after))
                self.replayed += 1
                pos = after
            end = JournalPosition(seq, pos)
            seq, offset = next_seq, 0
        return end

    # -- writing ---------------------------------------------------------------------------

    def start(self, min_seq: int = 0) -> JournalPosition:
        """Open a fresh file (after every existing one and ``min_seq``) and the next one,
        and start the writer and allocator threads; returns the position of the first
        record to come. Both files are ready before the first add (zero-filled, or spares
        of an earlier run): the second is filled here at full speed, with no add to
        delay, instead of under the first adds' load (a first burst of adds ran into the
        allocator's zeros: bench/profiles.md)."""
        self._scan()
        with self._alloc_cond:
            self._max_seq = max(self._max_seq, min_seq)
        self._current = self._prepare(self._new_seq())
        self._next = self._prepare(self._new_seq())
        with self._cond:
            self._started = True
        self._threads = [
            threading.Thread(target=self._run_writer, name="journal-writer", daemon=True),
            threading.Thread(target=self._run_allocator, name="journal-allocator", daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        return JournalPosition(self._current.seq, 0)

    def submit(self, records: Sequence[JournalRecord]) -> None:
        """Queue records for the next group; they are synced in submission order."""
        nbytes = 0
        for record in records:
            nbytes += RECORD_HEADER.size + len(record.body)
        with self._cond:
            if self._failed is not None:
                raise BookieStorageError(f"journal failed ({self._failed}): restart the bookie")
            if self._closing or not self._started:
                raise BookieStorageError("journal is closed")
            self._queue.extend(records)
            self._queued_bytes += nbytes
            if self._max_wait > 0:
                self._arrivals.observe(time.monotonic(), len(records))
            self._cond.notify()

    def _take_group(self) -> tuple[list[JournalRecord], int] | None:
        with self._cond:
            while not self._queue:
                if self._closing:
                    return None
                self._cond.wait()
            limit = self._group_limit
            if self._max_wait > 0:
                # Wait for more records only while the arrival rate says the next one comes
                # before the limit: never for a group that will not come.
                deadline = time.monotonic() + self._max_wait
                while self._queued_bytes < limit and not self._closing:
                    now = time.monotonic()
                    wait = batch_wait(len(self._queue), len(self._queue) + 1,
                                      self._arrivals.rate(now), deadline - now)
                    if wait <= 0:
                        break
                    before = len(self._queue)
                    self._cond.wait(wait)
                    if len(self._queue) == before:
                        break  # the record the rate predicted did not come: sync now
            queue = self._queue
            group: list[JournalRecord] = []
            total = 0
            while queue:
                n = RECORD_HEADER.size + len(queue[0].body)
                if group and total + n > limit:
                    break
                group.append(queue.popleft())
                total += n
            self._queued_bytes -= total
            return group, total

    def _run_writer(self) -> None:
        group: list[JournalRecord] = []
        try:
            while True:
                taken = self._take_group()
                if taken is None:
                    return
                group, total = taken
                self._write_group(group, total)
                group = []
        except BaseException as exc:  # noqa: BLE001 - every failure fails the journal
            log.exception("journal write failed")
            with self._cond:
                self._failed = exc
                pending = group + list(self._queue)
                self._queue.clear()
                self._queued_bytes = 0
            self._on_failed(pending, exc)

    def _write_group(self, group: list[JournalRecord], total: int) -> None:
        current = self._current
        assert current is not None
        if current.offset + total + ROLL_RECORD_SIZE > self._file_size:
            current = self._roll()
        seq = current.seq
        header = RECORD_HEADER.pack
        trailer = CRC_TRAILER.pack
        crc = crc32c.crc32c
        parts: list[bytes] = []
        append = parts.append
        for record in group:
            n = len(record.body)
            rtype = record.rtype
            append(header(n, crc(trailer(seq, n, rtype), value=record.crc), rtype))
            append(record.body)
        started = time.perf_counter()
        write_all_at(current.fd, parts, current.offset)
        os.fdatasync(current.fd)
        self._measure_rate(total)
        elapsed = time.perf_counter() - started
        current.offset += total
        self.syncs += 1
        if self._on_sync is not None:
            try:
                self._on_sync(elapsed, len(group), total)
            except Exception:  # noqa: BLE001 - a metrics bug must not fail the journal
                log.exception("journal sync metric failed")
        self._on_synced(group, JournalPosition(seq, current.offset))
        if (self._on_half is not None and current.offset * 2 >= self._file_size
                and self._half_seq != seq):
            self._half_seq = seq  # once per file, after a group of it was applied
            self._on_half()

    def _roll(self) -> _File:
        """End the current file with a synced ROLL record and continue in the next one."""
        following = self._take_next()
        current = self._current
        assert current is not None
        roll = frame(current.seq, RecordType.ROLL, ROLL_BODY.pack(following.seq))
        os.pwrite(current.fd, roll, current.offset)
        os.fdatasync(current.fd)
        os.close(current.fd)
        self._current = following
        return following

    def _take_next(self) -> _File:
        self._hurry.set()  # the allocator fills at full speed now
        with self._alloc_cond:
            while self._next is None and self._allocating:
                self._alloc_cond.wait()
            following, self._next = self._next, None
            self._alloc_failed = False
            self._alloc_cond.notify_all()
        if following is None:  # the allocator is behind or failing: prepare it here
            following = self._prepare(self._new_seq())
        return following

    def _run_allocator(self) -> None:
        """Keep the next journal file ready ahead of need."""
        while True:
            with self._alloc_cond:
                while (self._next is not None or self._alloc_failed) and not self._closing:
                    self._alloc_cond.wait()
                if self._closing:
                    return
                self._allocating = True
                self._max_seq += 1
                seq = self._max_seq
                self._hurry.clear()
                self._fill_started = time.monotonic()
            prepared: _File | None = None
            try:
                prepared = self._prepare(seq, abortable=True)
            except BaseException as exc:  # noqa: BLE001 - the writer retries itself
                if not self._closing:
                    log.warning("could not prepare journal file %x: %s", seq, exc)
            with self._alloc_cond:
                self._allocating = False
                if prepared is None:
                    self._alloc_failed = True
                elif self._closing:
                    os.close(prepared.fd)
                else:
                    self._next = prepared
                self._alloc_cond.notify_all()

    def close(self) -> None:
        """Write and sync everything queued, then stop the threads and close the files."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._hurry.set()
        with self._alloc_cond:
            self._alloc_cond.notify_all()
        for thread in self._threads:
            thread.join()
        self._threads = []
        with self._alloc_cond:
            following, self._next = self._next, None
        for f in (self._current, following):
            if f is not None:
                os.close(f.fd)
        self._current = None
