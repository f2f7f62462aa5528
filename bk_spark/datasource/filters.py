"""Filter pushdown: which Spark filters the source answers, as plain :class:`Constraints`.

Spark does not re-check a filter the source accepts, so the source applies every accepted
filter exactly: ``log`` and ``ledger_id`` choose ledgers, ``entry_id`` trims entry ranges
(and drops entries not in an ``IN`` list), ``timestamp`` skips ledgers by the per-ledger
time ranges of the log metadata, seeks inside a ledger by binary search, stops at the first
entry past the upper bound (timestamps never decrease inside a ledger) and drops entries
outside the range. Accepted: ``=``, ``IN``, ``<``, ``<=``, ``>``, ``>=`` and ``IS NOT
NULL`` on those columns; everything else is left to Spark.

A ledger read by id (option ``ledgers``) may belong to no log: its rows have a null ``log``
and a null ``timestamp`` (its entries carry no frame), which no comparison and no ``IS NOT
NULL`` matches, but which the source cannot drop by timestamp. So in such a read a filter on
``timestamp`` still narrows the read of framed ledgers and is left to Spark as well, which
drops the null ones.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np
from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
)

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MIN = -(1 << 63)
_MAX = (1 << 63) - 1


@dataclass(frozen=True)
class IntSet:
    """Integers in ``lo..hi`` (inclusive), and in ``only`` if it is not None."""

    lo: int = _MIN
    hi: int = _MAX
    only: frozenset[int] | None = None

    def and_range(self, lo: int, hi: int) -> IntSet:
        return replace(self, lo=max(self.lo, lo), hi=min(self.hi, hi))

    def and_values(self, values: Iterable[int]) -> IntSet:
        vals = frozenset(values)
        return replace(self, only=vals if self.only is None else self.only & vals)

    def __contains__(self, value: int) -> bool:
        return self.lo <= value <= self.hi and (self.only is None or value in self.only)

    def mask(self, values: np.ndarray) -> np.ndarray:
        """``value in self`` for each of ``values`` (int64), at once."""
        m = (values >= self.lo) & (values <= self.hi)
        if self.only is not None:
            m &= np.isin(values, np.fromiter(self.only, dtype=np.int64, count=len(self.only)))
        return m

    @property
    def empty(self) -> bool:
        return self.lo > self.hi or (self.only is not None and
                                     not any(self.lo <= v <= self.hi for v in self.only))

    def bounds(self) -> tuple[int, int]:
        """The smallest range holding every member."""
        if self.only is None:
            return self.lo, self.hi
        inside = [v for v in self.only if self.lo <= v <= self.hi]
        return (min(inside), max(inside)) if inside else (1, 0)

    @property
    def unbounded(self) -> bool:
        return self.lo == _MIN and self.hi == _MAX and self.only is None


@dataclass(frozen=True)
class Constraints:
    """What accepted filters allow: logs, ledger ids, entry ids, timestamps (microseconds)."""

    logs: frozenset[str] | None = None
    ledger_ids: IntSet = IntSet()
    entry_ids: IntSet = IntSet()
    timestamps_us: IntSet = IntSet()

    def allows_log(self, log: str | None) -> bool:
        return self.logs is None or log in self.logs

    def allows_entry(self, entry_id: int, ts_ms: int | None) -> bool:
        if entry_id not in self.entry_ids:
            return False
        return ts_ms is None or self.timestamps_us.unbounded or \
            ts_ms * 1000 in self.timestamps_us

    def entry_mask(self, entry_ids: np.ndarray, ts_ms: np.ndarray | None) -> np.ndarray:
        """:meth:`allows_entry` of many entries at once (``ts_ms`` None: unframed)."""
        m = self.entry_ids.mask(entry_ids)
        if ts_ms is not None and not self.timestamps_us.unbounded:
            m &= self.timestamps_us.mask(ts_ms * 1000)
        return m

    def ledger_may_match(self, first_ts_ms: int | None, last_ts_ms: int | None) -> bool:
        """False if the ledger's time range (None: unknown) misses the timestamp range."""
        ts = self.timestamps_us
        if ts.unbounded:
            return True
        lo, hi = ts.bounds()
        if first_ts_ms is not None and first_ts_ms * 1000 > hi:
            return False
        return not (last_ts_ms is not None and last_ts_ms * 1000 < lo)

    @property
    def timestamp_bounds_ms(self) -> tuple[int | None, int | None]:
        """(lowest, highest) entry timestamp in ms that can match (None: unbounded)."""
        ts = self.timestamps_us
        if ts.unbounded:
            return None, None
        lo, hi = ts.bounds()
        return (None if lo == _MIN else -((-lo) // 1000),  # ceil
                None if hi == _MAX else hi // 1000)

    @property
    def matches_nothing(self) -> bool:
        return (self.logs is not None and not self.logs) or self.ledger_ids.empty or \
            self.entry_ids.empty or self.timestamps_us.empty


def _micros(value: object) -> int | None:
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:  # Spark sends aware datetimes; a naive one is local time
            value = value.astimezone()
        delta = value - _EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return None


def _int(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def _narrow(s: IntSet, f: Filter, convert: object) -> IntSet | None:
    """``s`` narrowed by filter ``f`` (None: ``f`` is not one we answer)."""
    conv = convert  # callable: value -> int | None
    assert callable(conv)
    if isinstance(f, IsNotNull):
        return s
    if isinstance(f, In):
        vals = [conv(v) for v in f.value]
        if any(v is None for v in vals):
            return None
        return s.and_values(v for v in vals if v is not None)
    if not isinstance(f, EqualTo | GreaterThan | GreaterThanOrEqual | LessThan |
                      LessThanOrEqual):
        return None
    v = conv(f.value)
    if v is None:
        return None
    if isinstance(f, EqualTo):
        return s.and_range(v, v)
    if isinstance(f, GreaterThan):
        return s.and_range(v + 1, _MAX)
    if isinstance(f, GreaterThanOrEqual):
        return s.and_range(v, _MAX)
    if isinstance(f, LessThan):
        return s.and_range(_MIN, v - 1)
    return s.and_range(_MIN, v)


def push(filters: list[Filter], c: Constraints, columns: Iterable[str],
         logs_never_null: bool) -> tuple[Constraints, list[Filter]]:
    """Fold the filters we answer into ``c``; returns it and the filters left to Spark.

    ``columns``: the position columns present in the schema. ``logs_never_null``: every
    row comes from a log (its ``log`` and ``timestamp`` are never null); False for ledgers
    read by id, whose ``timestamp`` filters are folded into ``c`` and left to Spark too.
    """
    present = set(columns)
    rejected: list[Filter] = []
    for f in filters:
        attr = getattr(f, "attribute", None)
        col = attr[0] if isinstance(attr, tuple) and len(attr) == 1 else None
        if col not in present:
            rejected.append(f)
            continue
        new = c
        if col == "log":
            if isinstance(f, EqualTo) and isinstance(f.value, str):
                new = replace(c, logs=frozenset([f.value]) if c.logs is None
                              else c.logs & {f.value})
            elif isinstance(f, In) and all(isinstance(v, str) for v in f.value):
                vals = frozenset(f.value)
                new = replace(c, logs=vals if c.logs is None else c.logs & vals)
            elif isinstance(f, IsNotNull) and logs_never_null:
                new = c
            else:
                new = None
        elif col == "ledger_id":
            narrowed = _narrow(c.ledger_ids, f, _int)
            new = None if narrowed is None else replace(c, ledger_ids=narrowed)
        elif col == "entry_id":
            narrowed = _narrow(c.entry_ids, f, _int)
            new = None if narrowed is None else replace(c, entry_ids=narrowed)
        elif col == "timestamp":
            narrowed = _narrow(c.timestamps_us, f, _micros)
            new = None if narrowed is None else replace(c, timestamps_us=narrowed)
            if new is not None and not logs_never_null:
                c = new  # narrows the framed ledgers; Spark drops the null timestamps
                new = None
        if new is None:
            rejected.append(f)
        else:
            c = new
    return c, rejected

