"""The formats of a log made of ledgers: entry framing and log metadata (pure, no I/O).

Everything that another reader of the log (the Spark connector, a tool) must agree on is
in this one file; :mod:`bk_spark.log` does the I/O.

Entry framing
-------------
Every ledger entry written by a log writer is one of two frames, told apart by byte 0::

    version 1: a value (possibly empty)
        byte 0       0x01
        bytes 1..8   append timestamp, ms since the epoch, signed 64-bit big-endian
        bytes 9..    the user's payload, unchanged

    version 2: a value with flags
        byte 0       0x02
        bytes 1..8   append timestamp, as in version 1
        byte 9       flags: bit 0 (FLAG_NULL) the value is null; other bits are reserved (0)
        bytes 10..   the payload (empty when FLAG_NULL is set)

(:func:`encode_entry` / :func:`decode_entry`). A writer frames every non-null payload as
version 1, byte for byte as before version 2 existed, so a log without nulls stays readable
by every bk-spark release; only a null value (Kafka's null record value) takes version 2,
which a release knowing only version 1 refuses ("upgrade bk-spark") instead of reading it
as empty. An empty payload and a null one are different entries. Timestamps never go
backwards in log order:
a writer stamps ``max(now, the last timestamp of the log)``, and a new owner starts from the
last timestamp of the ledgers it fenced. So the first entry at or after a timestamp is found
by picking the ledger from the metadata and binary-searching the entries inside it.

Log metadata
------------
``<root>/logs/<name>`` (JSON) holds the ordered ledger list and the free-form
``properties``; it is only ever changed by compare-and-swap through
:func:`bk_spark.io.metadata_store.metadata_update_loop`. Every ledger has an *absolute
index*: its place in the log counted from the log's first ledger ever; truncation never
renumbers. The newest ledgers live in the main znode (the *tail*); to keep the main znode
small for any number of ledgers, each CAS that finds more than ``LogLimits.tail_max``
ledgers in the tail *spills* the oldest ``segment_ledgers`` ones into an immutable child
znode ``<root>/logs/<name>/segments/<number>``, created in the same ZooKeeper transaction
as the CAS (``multi``: both or neither). Only described ledgers (closed, last entry known)
are spilled, and never the last two. The main znode keeps one summary per segment::

    {"v": 1, "ctime": <ms>, "first": <absolute index of the first live ledger>,
     "next_seg": <number of the next segment>,
     "segs": [[number, start, count, first_ts, last_ts|null], ...],
     "tail_start": <absolute index of tail[0]>,
     "tail": [row, ...],
     "props": {...},
     "id": "<log id>",                        (fixed at creation; absent in older logs)
     "deleting": true}                                     (only while delete_log runs)

    segments/<number>: {"v": 1, "n": number, "start": start, "rows": [row, ...]}

A *row* describes one ledger, each number a delta against the previous row of the same
list (the first row against zero), so a row is ~22 bytes (100,000 ledgers: ~2.2 MB in
~390 segments of ~6 KB, and a main znode of ~26 KB)::

    [d_ledger_id, d_first_ts]                          not described yet (open)
    [d_ledger_id, d_first_ts, -1]                      closed, empty
    [d_ledger_id, d_first_ts, last_entry, last_ts - first_ts]   closed

``first_ts`` is the ledger's creation time, a lower bound of its entries' timestamps;
``last_ts`` the timestamp of its last entry (the largest). Truncation moves ``first``;
segments wholly before it are deleted in the same transaction, a segment cut in the middle
stays (immutable) and readers skip its rows before ``first``.
"""

from __future__ import annotations

import json
import re
import struct
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

import numpy as np

from bk_spark.errors import InvalidConfigError, LogFormatError, MetadataSerializationError
from bk_spark.protocol.ledger_metadata import MAX_METADATA_BYTES

# ------------------------------------------------------------------------------- entries

#: Frame version of a non-null payload (:func:`encode_entry`).
FRAME_VERSION = 1
#: Frame version carrying a flags byte after the timestamp (a null value).
FRAME_VERSION_FLAGS = 2
#: Flag of a version-2 frame: the entry holds a null value, not an empty one.
FLAG_NULL = 0x01
_KNOWN_FLAGS = FLAG_NULL
_FRAME = struct.Struct(">Bq")
_NULL_FRAME_SIZE = _FRAME.size + 1
#: Bytes the frame adds to a non-null entry.
FRAME_HEADER_SIZE = _FRAME.size

Buffer = bytes | bytearray | memoryview


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def frame_header(timestamp_ms: int) -> bytes:
    """The bytes :func:`encode_entry` puts before a non-null payload stamped
    ``timestamp_ms``: ``frame_header(ts) + payload == encode_entry(payload, ts)`` (a writer
    appending many entries in one millisecond frames each with one concatenation)."""
    return _FRAME.pack(FRAME_VERSION, timestamp_ms)


def encode_entry(payload: bytes | None, timestamp_ms: int) -> bytes:
    """The ledger entry of one log record: version byte, 8-byte timestamp, payload.

    ``payload=None`` (a null value) is framed as version 2 with :data:`FLAG_NULL`; every
    other payload, empty included, as version 1.
    """
    if payload is None:
        return _FRAME.pack(FRAME_VERSION_FLAGS, timestamp_ms) + bytes((FLAG_NULL,))
    return _FRAME.pack(FRAME_VERSION, timestamp_ms) + bytes(payload)


def decode_entry(data: bytes) -> tuple[int, bytes | None]:
    """``(timestamp_ms, payload)`` of a ledger entry written by :func:`encode_entry`;
    ``payload`` is None for a null value."""
    if len(data) >= _FRAME.size:  # the hot path, inlined: a version-1 frame
        version, ts = _FRAME.unpack_from(data)
        if version == FRAME_VERSION:
            return ts, bytes(data[_FRAME.size:])
    ts, start = frame_of(data)
    return ts, None if start is None else bytes(data[start:])


def frame_of(data: Buffer) -> tuple[int, int | None]:
    """``(timestamp_ms, where the payload starts)`` of an entry written by
    :func:`encode_entry` (None: a null value), checking the frame as :func:`decode_entry`
    does; the payload is ``data[start:]``, taken without a copy by callers that want a
    view (an arrow entry of a megabyte)."""
    version, ts = _unpack_head(data)
    if version == FRAME_VERSION:
        return ts, _FRAME.size
    if len(data) < _NULL_FRAME_SIZE:
        raise LogFormatError(
            f"a version-2 log entry of {len(data)} bytes has no flags byte: the entry is "
            f"damaged or was not written by a log writer")
    flags = data[_FRAME.size]
    if flags & ~_KNOWN_FLAGS:
        raise LogFormatError(
            f"log entry flags 0x{flags:02x} are not supported (this bk-spark knows "
            f"0x{_KNOWN_FLAGS:02x}): upgrade bk-spark")
    if flags & FLAG_NULL:
        if len(data) > _NULL_FRAME_SIZE:
            raise LogFormatError(
                f"a log entry flagged null carries {len(data) - _NULL_FRAME_SIZE} payload "
                f"bytes: the entry is damaged or was not written by a log writer")
        return ts, None
    return ts, _NULL_FRAME_SIZE


@dataclass(frozen=True, eq=False)
class Frames:
    """The frames of many entries (:func:`decode_frames`), one element per entry: the
    timestamps (ms), where each value starts (it ends where its entry ends) and which
    values are null."""

    timestamps_ms: np.ndarray  # int64
    value_starts: np.ndarray  # int64
    nulls: np.ndarray  # bool


def decode_frames(data: Buffer, starts: np.ndarray, ends: np.ndarray) -> Frames:
    """:func:`frame_of` of many entries at once, entry ``i`` being
    ``data[starts[i]:ends[i]]``: numpy operations over all of them (a raw log's entries
    are decoded in bulk, no Python object per entry). Raises :class:`LogFormatError` as
    :func:`decode_entry` does, for the first bad entry."""
    n = len(starts)
    raw = np.frombuffer(data, np.uint8)
    if n == 0:
        return Frames(starts.astype(np.int64), starts.astype(np.int64),
                      np.zeros(0, dtype=np.bool_))
    short = (ends - starts) < _FRAME.size
    # a short entry's bytes are read from a safe place, then decoded (and refused) below
    at = np.where(short, 0, starts)[:, None] + np.arange(_FRAME.size)
    head = np.ascontiguousarray(raw[np.minimum(at, max(len(raw) - 1, 0))] if len(raw)
                                else np.zeros((n, _FRAME.size), np.uint8))
    odd = short | (head[:, 0] != FRAME_VERSION)
    ts = head[:, 1:].copy().view(">i8")[:, 0].astype(np.int64)
    value_starts = starts + _FRAME.size
    nulls = np.zeros(n, dtype=np.bool_)
    for i in np.flatnonzero(odd).tolist():  # version 2 (nulls), or an error to raise
        a, b = int(starts[i]), int(ends[i])
        t, start = frame_of(memoryview(raw[a:b]))
        ts[i] = t
        if start is None:
            nulls[i] = True
            value_starts[i] = b
        else:
            value_starts[i] = a + start
    return Frames(ts, value_starts, nulls)


def entry_timestamp(data: bytes) -> int:
    """Only the timestamp of a framed entry (any frame version; reads 9 bytes)."""
    return _unpack_head(data)[1]


def _unpack_head(data: bytes) -> tuple[int, int]:
    """``(frame version, timestamp_ms)``, checking both are readable."""
    if len(data) < _FRAME.size:
        raise LogFormatError(
            f"a log entry of {len(data)} bytes is shorter than its {_FRAME.size}-byte frame: "
            f"the ledger was not written by a log writer")
    version, ts = _FRAME.unpack_from(data)
    if version != FRAME_VERSION and version != FRAME_VERSION_FLAGS:
        raise LogFormatError(
            f"log entry frame version {version} is not supported (this bk-spark reads "
            f"versions {FRAME_VERSION} and {FRAME_VERSION_FLAGS}): upgrade bk-spark")
    return version, ts


# ------------------------------------------------------------------------------- names

_NAME = re.compile(r"[A-Za-z0-9._-]{1,200}")


def validate_log_name(name: str) -> str:
    """A log name is 1-200 of ``[A-Za-z0-9._-]`` (and not ``.`` or ``..``)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or name in (".", ".."):
        raise InvalidConfigError(
            f"log name {name!r}: use 1-200 characters of A-Z a-z 0-9 . _ - (not '.' or '..')")
    return name


# ------------------------------------------------------------------------------- positions


@dataclass(frozen=True, init=False, eq=False)
class Position:
    """A place in a log: entry ``entry_id`` of ledger ``ledger_id``, the ledger at absolute
    index ``ledger_index`` of the log's ledger list.

    A position is the triple ``(ledger_index, ledger_id, entry_id)``: equality, hashing and
    ordering all use that one key, so ``a == b`` exactly when neither ``a < b`` nor
    ``b < a`` (a total order). Within a log the index fixes the ledger, so positions made by
    writers and readers sort in log order (by ledger index, then entry), not by ledger id.
    One made by hand without the index (``ledger_index=-1``, e.g. parsed from ``"12:5"``)
    can be passed to a reader, which finds the ledger by its id; it equals only positions
    also without an index and sorts before every indexed one. ``ledger_id=-1`` names the
    ledger that will be added at ``ledger_index`` (the end of a log with no readable ledger
    there yet). Plain, picklable data.

    Stable forms (:meth:`to_string` / :meth:`parse`, :meth:`to_bytes` / :meth:`from_bytes`):
    ``"LEDGER:ENTRY"`` or ``"LEDGER:ENTRY@INDEX"`` with the index, and 25 bytes (a version
    byte, then the three numbers as signed 64-bit big-endian). The CLI, Spark's streaming
    offsets and checkpoints use them.
    """

    ledger_id: int
    entry_id: int
    ledger_index: int = -1

    def __init__(self, ledger_id: int, entry_id: int, ledger_index: int = -1) -> None:
        # The dataclass's frozen __init__ sets each field through object.__setattr__ (~0.5
        # us); a writer makes one Position per acknowledged append: fill the dict directly.
        d = self.__dict__
        d["ledger_id"] = ledger_id
        d["entry_id"] = entry_id
        d["ledger_index"] = ledger_index

    @property
    def key(self) -> tuple[int, int, int]:
        """``(ledger_index, ledger_id, entry_id)``: what equality, hashing and order use."""
        return self.ledger_index, self.ledger_id, self.entry_id

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Position):
            return NotImplemented
        return self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Position):
            return NotImplemented
        return self.key < other.key

    def __le__(self, other: object) -> bool:
        if not isinstance(other, Position):
            return NotImplemented
        return self.key <= other.key

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, Position):
            return NotImplemented
        return self.key > other.key

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, Position):
            return NotImplemented
        return self.key >= other.key

    def without_index(self) -> Position:
        """The same ledger and entry with no ledger index (as a user names it)."""
        return Position(self.ledger_id, self.entry_id)

    def to_string(self) -> str:
        """``"LEDGER:ENTRY"``, with ``"@INDEX"`` appended when the index is known; stable
        (what :meth:`parse` reads back)."""
        s = f"{self.ledger_id}:{self.entry_id}"
        return s if self.ledger_index < 0 else f"{s}@{self.ledger_index}"

    @classmethod
    def parse(cls, text: str) -> Position:
        """A position from :meth:`to_string`'s form: ``"12:5"`` or ``"12:5@3"`` (ledger 12,
        entry 5, the log's ledger #3); ``-1:0@3`` is the ledger still to be added at #3."""
        m = _POSITION.fullmatch(text.strip()) if isinstance(text, str) else None
        if m is None or (m.group(1) == "-1" and m.group(3) is None):
            raise InvalidConfigError(
                f"position {text!r}: expected LEDGER:ENTRY or LEDGER:ENTRY@INDEX "
                f"(e.g. 12:0 or 12:0@3)")
        index = m.group(3)
        return cls(int(m.group(1)), int(m.group(2)), int(index) if index is not None else -1)

    def to_bytes(self) -> bytes:
        """25 bytes: version 1, then ledger id, entry id, ledger index (signed 64-bit
        big-endian); stable (what :meth:`from_bytes` reads back)."""
        return _POSITION_BYTES.pack(POSITION_BYTES_VERSION, self.ledger_id, self.entry_id,
                                    self.ledger_index)

    @classmethod
    def from_bytes(cls, data: bytes) -> Position:
        """A position from :meth:`to_bytes`'s form."""
        if len(data) != _POSITION_BYTES.size or data[0] != POSITION_BYTES_VERSION:
            raise LogFormatError(
                f"a position of {len(data)} bytes starting {bytes(data[:1])!r} is not in "
                f"format version {POSITION_BYTES_VERSION} ({_POSITION_BYTES.size} bytes): "
                f"it was not written by Position.to_bytes (upgrade bk-spark if it is newer)")
        _v, ledger_id, entry_id, index = _POSITION_BYTES.unpack(data)
        return cls(ledger_id, entry_id, index)


#: Version byte of :meth:`Position.to_bytes`.
POSITION_BYTES_VERSION = 1
_POSITION_BYTES = struct.Struct(">Bqqq")
_POSITION = re.compile(r"(-1|\d+):(\d+)(?:@(\d+))?")


@dataclass(frozen=True)
class LogRecord:
    """One entry read from a log: where it is, what it holds, when it was appended.

    ``payload`` is None for a null value (appended as ``LogWriter.append(None)`` or
    written by Spark from a null ``value``); ``b""`` is an empty, non-null value.
    """

    position: Position
    payload: bytes | None
    timestamp_ms: int


# ------------------------------------------------------------------------------- metadata

#: Version of the log metadata and segment JSON.
LOG_FORMAT_VERSION = 1


@dataclass(frozen=True)
class LedgerInfo:
    """What the log metadata knows about one of its ledgers.

    ``index``: the ledger's absolute index in the log. ``first_ts_ms``: its creation time,
    at most the timestamp of any of its entries. ``last_entry_id`` is None until the ledger
    is *described* (closed and its last entry recorded; -1: empty); ``last_ts_ms`` is then
    its last entry's timestamp (None if empty).
    """

    ledger_id: int
    index: int
    first_ts_ms: int
    last_entry_id: int | None = None
    last_ts_ms: int | None = None

    @property
    def is_described(self) -> bool:
        return self.last_entry_id is not None

    def described(self, last_entry_id: int, last_ts_ms: int | None) -> LedgerInfo:
        if last_entry_id < -1 or (last_entry_id >= 0 and last_ts_ms is None):
            raise ValueError(f"ledger {self.ledger_id}: last entry {last_entry_id} and last "
                             f"timestamp {last_ts_ms} do not go together")
        return replace(self, last_entry_id=last_entry_id,
                       last_ts_ms=None if last_entry_id < 0 else last_ts_ms)

    def may_hold_timestamp(self, timestamp_ms: int) -> bool:
        """False only if every entry of the ledger is known to be older than ``timestamp_ms``."""
        if not self.is_described:
            return True
        return self.last_ts_ms is not None and self.last_ts_ms >= timestamp_ms


def _encode_rows(rows: Iterable[LedgerInfo]) -> list[list[int]]:
    out: list[list[int]] = []
    prev_id = prev_ts = 0
    for r in rows:
        row = [r.ledger_id - prev_id, r.first_ts_ms - prev_ts]
        if r.last_entry_id is not None:
            row.append(r.last_entry_id)
            if r.last_entry_id >= 0:
                assert r.last_ts_ms is not None
                row.append(r.last_ts_ms - r.first_ts_ms)
        out.append(row)
        prev_id, prev_ts = r.ledger_id, r.first_ts_ms
    return out


def _decode_rows(rows: Any, start: int) -> tuple[LedgerInfo, ...]:
    out = []
    lid = ts = 0
    for i, row in enumerate(rows):
        if not isinstance(row, list) or not 2 <= len(row) <= 4 or \
                not all(isinstance(x, int) for x in row):
            raise MetadataSerializationError(f"invalid ledger row {row!r} in log metadata")
        lid += row[0]
        ts += row[1]
        info = LedgerInfo(lid, start + i, ts)
        if len(row) >= 3:
            if (row[2] >= 0) != (len(row) == 4):
                raise MetadataSerializationError(f"invalid ledger row {row!r} in log metadata")
            info = info.described(row[2], ts + row[3] if len(row) == 4 else None)
        out.append(info)
    return tuple(out)


@dataclass(frozen=True)
class SegmentSummary:
    """What the main znode keeps of a spilled segment (enough to pick one for a seek)."""

    number: int
    start: int
    count: int
    first_ts_ms: int
    last_ts_ms: int | None

    @property
    def end(self) -> int:
        """Absolute index after the segment's last ledger."""
        return self.start + self.count


@dataclass(frozen=True)
class Segment:
    """Described ledgers spilled from the tail: immutable once stored."""

    number: int
    start: int
    ledgers: tuple[LedgerInfo, ...]

    def summary(self) -> SegmentSummary:
        stamps = [r.last_ts_ms for r in self.ledgers if r.last_ts_ms is not None]
        return SegmentSummary(self.number, self.start, len(self.ledgers),
                              self.ledgers[0].first_ts_ms, max(stamps, default=None))

    def to_bytes(self) -> bytes:
        return _dump({"v": LOG_FORMAT_VERSION, "n": self.number, "start": self.start,
                      "rows": _encode_rows(self.ledgers)}, f"segment {self.number}")

    @classmethod
    def from_bytes(cls, data: bytes) -> Segment:
        d = _load(data, "log segment")
        try:
            return cls(d["n"], d["start"], _decode_rows(d["rows"], d["start"]))
        except (KeyError, TypeError) as exc:
            raise MetadataSerializationError(f"invalid log segment: {exc!r}") from exc


@dataclass(frozen=True)
class LogLimits:
    """When a CAS spills tail ledgers into a segment (a client choice, not a protocol one:
    every segment records its own size). ``tail_max`` must leave the last two ledgers."""

    segment_ledgers: int = 256
    tail_max: int = 512

    def __post_init__(self) -> None:
        if self.segment_ledgers < 1 or self.tail_max < self.segment_ledgers + 2:
            raise InvalidConfigError(
                f"LogLimits: need segment_ledgers >= 1 and tail_max >= segment_ledgers + 2, "
                f"got {self.segment_ledgers} and {self.tail_max}")


PropertiesUpdate = Mapping[str, Any] | Callable[[dict[str, Any]], Mapping[str, Any]]


@dataclass(frozen=True, kw_only=True)
class LogMetadata:
    """The log metadata of the main znode (immutable: every change returns a new value).

    ``new_segments`` / ``dropped_segments`` are not stored in the main znode: they are the
    segment znodes the CAS writing this value must create / delete in the same transaction.
    """

    ctime_ms: int
    log_id: str = ""  # fixed at creation, tells incarnations of a name apart ("": older log)
    first_index: int = 0
    next_segment: int = 0
    segments: tuple[SegmentSummary, ...] = ()
    tail_start: int = 0
    tail: tuple[LedgerInfo, ...] = ()
    properties: Mapping[str, Any] = field(default_factory=dict)
    deleting: bool = False
    #: The lowest and highest ids of the ledgers truncation removed from the log (None:
    #: none removed, or only before this field existed), so that a position in a removed
    #: ledger is told from one in a ledger that was never part of the log
    #: (:func:`~bk_spark.protocol.log_rules.outside_position`). Ledger ids only grow, so a
    #: log's removed ledgers lie in this range (with other logs' ledgers between them).
    removed_ledgers: tuple[int, int] | None = None
    new_segments: tuple[Segment, ...] = field(default=(), compare=False)
    dropped_segments: tuple[int, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "properties", MappingProxyType(dict(self.properties)))
        for i, r in enumerate(self.tail):
            if r.index != self.tail_start + i:
                raise ValueError(f"tail row {i} has index {r.index}, expected "
                                 f"{self.tail_start + i}")
        if self.segments and self.segments[-1].end != self.tail_start:
            raise ValueError("the tail must start where the last segment ends")
        if not 0 <= self.first_index <= self.tail_start:
            raise ValueError(f"first_index {self.first_index} outside 0..tail_start "
                             f"({self.tail_start})")

    # -- queries -------------------------------------------------------------------------

    @property
    def end_index(self) -> int:
        """Absolute index the next added ledger gets."""
        return self.tail_start + len(self.tail)

    @property
    def ledger_count(self) -> int:
        """Live ledgers (not truncated)."""
        return self.end_index - self.first_index

    @property
    def last_ledger(self) -> LedgerInfo | None:
        return self.tail[-1] if self.tail and self.tail[-1].index >= self.first_index else None

    def tail_ledger(self, index: int) -> LedgerInfo | None:
        """The tail row at absolute ``index`` (None if outside the tail)."""
        i = index - self.tail_start
        return self.tail[i] if 0 <= i < len(self.tail) else None

    def find_in_tail(self, ledger_id: int) -> LedgerInfo | None:
        for r in reversed(self.tail):
            if r.ledger_id == ledger_id:
                return r
        return None

    def segment_for(self, index: int) -> SegmentSummary | None:
        """The summary of the segment holding absolute ``index`` (None: not in a segment)."""
        for s in self.segments:
            if s.start <= index < s.end:
                return s
        return None

    @property
    def live_segments(self) -> tuple[SegmentSummary, ...]:
        return tuple(s for s in self.segments if s.end > self.first_index)

    @property
    def max_known_ts_ms(self) -> int:
        """The largest timestamp the metadata knows (0 if none): a floor for new entries."""
        stamps = [s.last_ts_ms or s.first_ts_ms for s in self.segments]
        for r in self.tail:
            stamps.append(r.first_ts_ms)
            if r.last_ts_ms is not None:
                stamps.append(r.last_ts_ms)
        return max(stamps, default=0)

    # -- changes -------------------------------------------------------------------------

    def with_ledger_added(self, ledger_id: int, first_ts_ms: int) -> LogMetadata:
        """Seed step "Add the new ledger to the ledger list"."""
        if self.find_in_tail(ledger_id) is not None:
            raise ValueError(f"ledger {ledger_id} is already in the log")
        row = LedgerInfo(ledger_id, self.end_index, first_ts_ms)
        return replace(self, tail=self.tail + (row,))

    def with_ledger_described(self, ledger_id: int, last_entry_id: int,
                              last_ts_ms: int | None) -> LogMetadata:
        """Record a closed ledger's last entry and last timestamp (no-op if already known
        or if the ledger is no longer in the tail)."""
        rows = list(self.tail)
        for i, r in enumerate(rows):
            if r.ledger_id == ledger_id and not r.is_described:
                rows[i] = r.described(last_entry_id, last_ts_ms)
                return replace(self, tail=tuple(rows))
        return self

    def undescribed(self, ledger_id: int) -> bool:
        r = self.find_in_tail(ledger_id)
        return r is not None and not r.is_described

    def with_properties(self, update: PropertiesUpdate) -> LogMetadata:
        """``update`` is a mapping merged into the properties (a None value removes the
        key) or a function from the current properties to the new ones."""
        current = dict(self.properties)
        if callable(update):
            new = dict(update(json.loads(json.dumps(current))))
        else:
            new = current
            for k, v in update.items():
                if v is None:
                    new.pop(k, None)
                else:
                    new[k] = v
        try:
            json.dumps(new)
        except (TypeError, ValueError) as exc:
            raise InvalidConfigError(f"log properties must be JSON values: {exc}") from None
        if not all(isinstance(k, str) for k in new):
            raise InvalidConfigError("log property names must be strings")
        return replace(self, properties=new)

    def spilled(self, limits: LogLimits) -> LogMetadata:
        """Move the oldest described tail ledgers into new segments while the tail is longer
        than ``limits.tail_max`` (the segments are created by the CAS that writes the value)."""
        md = self
        while len(md.tail) > limits.tail_max:
            rows = md.tail[:limits.segment_ledgers]
            if not all(r.is_described for r in rows):
                break
            seg = Segment(md.next_segment, md.tail_start, rows)
            md = replace(md, next_segment=md.next_segment + 1,
                         segments=md.segments + (seg.summary(),),
                         tail=md.tail[len(rows):], tail_start=md.tail_start + len(rows),
                         new_segments=md.new_segments + (seg,))
        return md

    def truncated(self, before_index: int, removed: Sequence[int] = ()) -> LogMetadata:
        """Drop whole ledgers before absolute index ``before_index``; ``removed``: their ids
        (the caller's view of them, segments included), recorded in
        :attr:`removed_ledgers` (:meth:`with_removed`).

        Stops at the first ledger that is not described (it may still be written). Segments
        entirely before the new first ledger are deleted by the CAS writing this value.
        """
        stop = before_index
        for r in self.tail:
            if r.index >= stop:
                break
            if not r.is_described:
                stop = r.index
                break
        stop = min(stop, self.end_index)
        if stop <= self.first_index:
            return self
        dropped = tuple(s.number for s in self.segments if s.end <= stop)
        keep = tuple(s for s in self.segments if s.end > stop)
        tail, tail_start = self.tail, self.tail_start
        if stop > tail_start:
            tail, tail_start = tail[stop - tail_start:], stop
        return replace(self.with_removed(removed), first_index=stop, segments=keep, tail=tail,
                       tail_start=tail_start,
                       dropped_segments=self.dropped_segments + dropped)

    def with_removed(self, ledger_ids: Sequence[int]) -> LogMetadata:
        """Record that truncation removed ``ledger_ids`` (:attr:`removed_ledgers` grows to
        cover them). A log truncated before the field existed (``first_index`` > 0 and no
        range) may have removed any lower id: its range then starts at 0."""
        if not ledger_ids:
            return self
        lo, hi = min(ledger_ids), max(ledger_ids)
        if self.removed_ledgers is not None:
            lo, hi = min(lo, self.removed_ledgers[0]), max(hi, self.removed_ledgers[1])
        elif self.first_index > 0:
            lo = 0
        return replace(self, removed_ledgers=(lo, hi))

    def marked_deleting(self) -> LogMetadata:
        return replace(self, deleting=True)

    def without_pending(self) -> LogMetadata:
        """This value as read back from the store (no pending segment operations)."""
        return replace(self, new_segments=(), dropped_segments=())

    # -- serialized form -----------------------------------------------------------------

    def to_bytes(self) -> bytes:
        d: dict[str, Any] = {
            "v": LOG_FORMAT_VERSION, "ctime": self.ctime_ms, "first": self.first_index,
            "next_seg": self.next_segment,
            "segs": [[s.number, s.start, s.count, s.first_ts_ms, s.last_ts_ms]
                     for s in self.segments],
            "tail_start": self.tail_start, "tail": _encode_rows(self.tail),
            "props": dict(self.properties),
        }
        if self.log_id:
            d["id"] = self.log_id
        if self.deleting:
            d["deleting"] = True
        if self.removed_ledgers is not None:
            d["removed"] = list(self.removed_ledgers)  # absent in older metadata
        return _dump(d, "log metadata")

    @classmethod
    def from_bytes(cls, data: bytes) -> LogMetadata:
        d = _load(data, "log metadata")
        try:
            return cls(
                ctime_ms=d["ctime"], first_index=d["first"], next_segment=d["next_seg"],
                segments=tuple(SegmentSummary(*s) for s in d["segs"]),
                tail_start=d["tail_start"], tail=_decode_rows(d["tail"], d["tail_start"]),
                properties=d["props"], deleting=bool(d.get("deleting", False)),
                log_id=str(d.get("id", "")),
                removed_ledgers=(int(d["removed"][0]), int(d["removed"][1]))
                if d.get("removed") is not None else None)
        except (KeyError, TypeError, ValueError) as exc:
            raise MetadataSerializationError(f"invalid log metadata: {exc!r}") from exc


def _dump(d: dict[str, Any], what: str) -> bytes:
    data = json.dumps(d, separators=(",", ":")).encode()
    if len(data) > MAX_METADATA_BYTES:
        raise MetadataSerializationError(
            f"{what} would be {len(data)} bytes, more than ZooKeeper's limit "
            f"{MAX_METADATA_BYTES}: keep the log properties small")
    return data


def _load(data: bytes, what: str) -> dict[str, Any]:
    try:
        d = json.loads(data)
        version = d["v"]
    except (ValueError, TypeError, KeyError) as exc:
        raise MetadataSerializationError(f"undecodable {what}: {exc}") from exc
    if version != LOG_FORMAT_VERSION:
        raise MetadataSerializationError(
            f"{what} format version {version!r} is not supported (this bk-spark reads "
            f"version {LOG_FORMAT_VERSION}): upgrade bk-spark")
    return d


# ------------------------------------------------------------------------------- seeking


def first_segment_for_timestamp(md: LogMetadata, timestamp_ms: int) -> SegmentSummary | None:
    """The first live segment that may hold an entry at or after ``timestamp_ms`` (None:
    look in the tail). Timestamps never decrease in log order, so every earlier segment
    only holds older entries."""
    for s in md.live_segments:
        if s.last_ts_ms is not None and s.last_ts_ms >= timestamp_ms:
            return s
    return None


def bisect_timestamp(lo: int, hi: int, timestamp_of: Callable[[int], int],
                     timestamp_ms: int) -> int:
    """The smallest entry id in ``lo..hi`` whose timestamp is >= ``timestamp_ms`` (``hi + 1``
    if none), asking ``timestamp_of`` O(log n) times; timestamps must not decrease."""
    while lo <= hi:
        mid = (lo + hi) // 2
        if timestamp_of(mid) >= timestamp_ms:
            hi = mid - 1
        else:
            lo = mid + 1
    return lo
