"""Streaming offsets: a position per log, as kept in Spark's checkpoint (JSON).

An offset names, for every log read, the next entry to read::

    {"events": {"index": 3, "ledger": 12, "entry": 5}}

``index`` is the ledger's absolute index in the log (its place in the ledger list, never
renumbered by truncation), ``ledger`` its id (-1: the ledger that will be added at
``index``) and ``entry`` the next entry id. A micro-batch reads ``[start, end)``. The index
orders positions and finds the ledger without searching; the id detects a log that was
deleted and created again (data loss). Offsets are plain dicts; :class:`LogOffset` is the
typed form used while planning.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bk_spark.errors import InvalidConfigError


@dataclass(frozen=True, order=True)
class LogOffset:
    """The next entry to read in one log. Compared by ``(index, entry)`` only: the ledger
    id just confirms which ledger the index holds (-1: not known when recorded)."""

    index: int
    entry: int
    ledger: int = field(default=-1, compare=False)

    def to_json(self) -> dict[str, int]:
        return {"index": self.index, "ledger": self.ledger, "entry": self.entry}

    @classmethod
    def from_json(cls, log: str, d: Any) -> LogOffset:
        try:
            return cls(index=int(d["index"]), entry=int(d["entry"]), ledger=int(d["ledger"]))
        except (KeyError, TypeError, ValueError):
            raise InvalidConfigError(
                f"streaming offset of log {log!r} is malformed: {d!r} (expected "
                f'{{"index": .., "ledger": .., "entry": ..}}); the checkpoint was not written '
                f"by this source") from None


Offsets = dict[str, LogOffset]


def to_json(offsets: Offsets) -> dict[str, dict[str, int]]:
    return {name: off.to_json() for name, off in sorted(offsets.items())}


def from_json(d: dict[str, Any]) -> Offsets:
    if not isinstance(d, dict):
        raise InvalidConfigError(f"streaming offset {d!r} is not a JSON object")
    return {name: LogOffset.from_json(name, v) for name, v in d.items()}
