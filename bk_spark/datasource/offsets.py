"""Streaming offsets: a position per log, as kept in Spark's checkpoint (JSON).

An offset names, for every log read, the next entry to read, in :class:`Position`'s stable
string form ``LEDGER:ENTRY@INDEX``::

    {"events": {"position": "12:5@3", "log_id": "6f1c..."}}

``INDEX`` is the ledger's absolute index in the log (its place in the ledger list, never
renumbered by truncation), ``LEDGER`` its id (-1: the ledger that will be added at
``INDEX``, not there yet) and ``ENTRY`` the next entry id. ``log_id`` names the incarnation
of the log (:func:`bk_spark.log.log_incarnation`): a log deleted and created again
under the same name has another, so an offset of the old log is never taken for a place in
the new one (data loss). A micro-batch reads ``[start, end)``. The index orders positions
and finds the ledger without searching.

Older checkpoints stay readable: offsets written before the string form, as
``{"index": 3, "ledger": 12, "entry": 5, "log_id": "6f1c..."}``, and before ``log_id``
existed (no ``log_id``: such an offset is taken to be in the log's current incarnation,
only its ledger id is checked, and every offset after it carries the log id). Offsets are
plain dicts; :class:`LogOffset` is the typed form used while planning.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bk_spark.errors import InvalidConfigError
from bk_spark.protocol.log_format import Position


@dataclass(frozen=True, order=True)
class LogOffset:
    """The next entry to read in one log. Compared by ``(index, entry)`` only: the ledger
    id just confirms which ledger the index holds (-1: not known when recorded), ``log_id``
    which incarnation of the log it is in ("": not recorded)."""

    index: int
    entry: int
    ledger: int = field(default=-1, compare=False)
    log_id: str = field(default="", compare=False)

    @property
    def position(self) -> Position:
        """The offset as a :class:`Position` (with its ledger index)."""
        return Position(self.ledger, self.entry, self.index)

    def to_json(self) -> dict[str, Any]:
        """The checkpoint form: ``{"position": "LEDGER:ENTRY@INDEX"[, "log_id": ..]}``."""
        d: dict[str, Any] = {"position": self.position.to_string()}
        if self.log_id:
            d["log_id"] = self.log_id
        return d

    def fields(self) -> dict[str, Any]:
        """``index``, ``ledger``, ``entry`` (and ``log_id`` when known) as separate numbers
        (for reports; also the checkpoint form before :meth:`to_json`'s)."""
        d: dict[str, Any] = {"index": self.index, "ledger": self.ledger, "entry": self.entry}
        if self.log_id:
            d["log_id"] = self.log_id
        return d

    def describe(self) -> str:
        """The position in words, for messages: real ledgers only."""
        if self.ledger >= 0:
            return f"entry {self.entry} of ledger {self.ledger} (#{self.index} in the log)"
        return f"entry {self.entry} of the log's ledger #{self.index} (not added then)"

    @classmethod
    def from_json(cls, log: str, d: Any) -> LogOffset:
        """Either form: :meth:`to_json`'s, or the older :meth:`fields` form."""
        try:
            log_id = str(d.get("log_id", ""))
            if "position" in d:
                p = Position.parse(d["position"])
                if p.ledger_index < 0:
                    raise ValueError("no ledger index")
                return cls(index=p.ledger_index, entry=p.entry_id, ledger=p.ledger_id,
                           log_id=log_id)
            return cls(index=int(d["index"]), entry=int(d["entry"]), ledger=int(d["ledger"]),
                       log_id=log_id)
        except (KeyError, TypeError, ValueError, AttributeError):
            raise InvalidConfigError(
                f"streaming offset of log {log!r} is malformed: {d!r} (expected "
                f'{{"position": "LEDGER:ENTRY@INDEX"}} or, from older checkpoints, '
                f'{{"index": .., "ledger": .., "entry": ..}}); the checkpoint was not '
                f"written by this source") from None


Offsets = dict[str, LogOffset]


def to_json(offsets: Offsets) -> dict[str, dict[str, Any]]:
    return {name: off.to_json() for name, off in sorted(offsets.items())}


def from_json(d: dict[str, Any]) -> Offsets:
    if not isinstance(d, dict):
        raise InvalidConfigError(f"streaming offset {d!r} is not a JSON object")
    return {name: LogOffset.from_json(name, v) for name, v in d.items()}


def checkpoint_offsets(checkpoint: str | Path) -> tuple[int, Offsets]:
    """``(batch id, offsets)`` of the last batch a Spark streaming query reading this
    source committed, from its checkpoint directory.

    Spark writes ``offsets/<batch id>`` (a version line, a metadata line, then one line per
    source: its end offset as JSON, ``-`` for none) before the batch runs and
    ``commits/<batch id>`` after it; the source's line is the one in this module's format.
    """
    root = Path(checkpoint)
    commits = root / "commits"
    try:
        done = sorted((int(p.name) for p in commits.iterdir() if p.name.isdigit()),
                      reverse=True)
    except OSError as exc:
        raise InvalidConfigError(f"checkpoint {str(root)!r}: no {commits.name}/ directory "
                                 f"({exc.strerror}): is it a streaming query's "
                                 f"checkpointLocation?") from None
    for batch in done:
        try:
            lines = (root / "offsets" / str(batch)).read_text().splitlines()
        except OSError:
            continue
        for line in lines[2:]:
            try:
                d = json.loads(line)
                return batch, from_json(d)
            except (ValueError, InvalidConfigError):
                continue  # another source's offset
    raise InvalidConfigError(f"checkpoint {str(root)!r}: no committed batch read a "
                             f"bookkeeper log yet")
