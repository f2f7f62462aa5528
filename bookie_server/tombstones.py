"""The ledgers a bookie deleted, remembered so that no add can bring one back (pure).

Why (fencing.txt, and BookKeeper's fix of the same defect): a recoverer fences a ledger and
the application deletes it; the old writer, still running, sends its next add. A bookie
that only knew "ledgers I hold" would take that add for the first add of a new ledger,
create an unfenced state and acknowledge it: the writer is told "stored" for a ledger
nobody will ever read. So a bookie remembers every ledger it deleted (a *tombstone*) and
refuses every add to it, recovery adds included, and every fence (NoSuchLedger).

"Never seen" versus "deleted": a bookie legitimately receives the first add of a ledger it
never saw (a new ledger, or a writer's ensemble change onto this bookie), so an unknown id
alone says nothing. Ledger ids are never reused (the metadata store hands out unique,
increasing ids), so a tombstone may be kept forever; to bound memory the set keeps at most
``max_ids`` ids (8 bytes each, a sorted array) and, when it overflows, forgets its *lowest*
ids and raises a **floor** instead: every id at or below the floor that the bookie does not
hold counts as deleted. The floor is safe (it can only make the bookie refuse more), and
its one cost is that an *open* ledger older than the ``max_ids`` most recent deletions
cannot move onto this bookie by an ensemble change, nor be fenced here if this bookie never
held it (the writer fails, a recovery needs the other bookies' answers; nobody ever gets a
false acknowledgement).

Persistence is the storage's job (bookie_server.storage): a delete is a journal record, a
checkpoint batch lists the ids deleted since the previous one and carries the floor, and a
full index snapshot lists every tombstone; a restart rebuilds this set from them.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterable

DEFAULT_MAX_IDS = 1_000_000


class DeletedLedgers:
    """A bounded set of deleted ledger ids plus a floor (see the module docstring).

    Not thread-safe: the storage changes it under its submit lock.
    """

    __slots__ = ("max_ids", "_ids", "floor")

    def __init__(self, max_ids: int = DEFAULT_MAX_IDS, ids: Iterable[int] = (),
                 floor: int = -1) -> None:
        if max_ids < 1:
            raise ValueError(f"max_ids must be >= 1, got {max_ids}")
        self.max_ids = max_ids
        self._ids = array("q")
        self.floor = -1
        self.raise_floor(floor)
        for ledger_id in ids:
            self.add(ledger_id)

    def __contains__(self, ledger_id: int) -> bool:
        """Whether ``ledger_id`` counts as deleted (listed, or at or below the floor)."""
        if ledger_id <= self.floor:
            return True
        ids = self._ids
        i = bisect_left(ids, ledger_id)
        return i < len(ids) and ids[i] == ledger_id

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, ledger_id: int) -> bool:
        """Remember ``ledger_id`` as deleted; False if it already counted as deleted.

        Past ``max_ids`` ids the lowest are dropped and the floor rises to cover them."""
        if ledger_id in self:
            return False
        ids = self._ids
        if not ids or ids[-1] < ledger_id:
            ids.append(ledger_id)  # the common case: ids increase
        else:
            ids.insert(bisect_left(ids, ledger_id), ledger_id)
        excess = len(ids) - self.max_ids
        if excess > 0:
            self.floor = ids[excess - 1]
            del ids[:excess]
        return True

    def raise_floor(self, floor: int) -> None:
        """Count every id up to ``floor`` as deleted (a floor never goes down)."""
        if floor > self.floor:
            self.floor = floor
            ids = self._ids
            del ids[:bisect_left(ids, floor + 1)]

    def ids(self) -> list[int]:
        """The listed ids, ascending (the floor covers the rest)."""
        return self._ids.tolist()

    def clear(self) -> None:
        self._ids = array("q")
        self.floor = -1
