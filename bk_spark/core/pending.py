"""In-order acknowledgement of adds (BookKeeper's ``PendingAddOp`` bookkeeping), pure.

The seed ("Writing to ledgers"): "Once Qa bookies from the write quorum acknowledge the
write, the write is acknowledged to the client, but only if all entries with lower entry
ids in the ledger have already been acknowledged to the client." The last entry
acknowledged to the client is the *last-add-confirmed* (``lac``) the writer sends with every
later entry.

Ensemble changes ("If a node fails to acknowledge a write, the writer will create a new
ensemble by replacing the failed node ... starting from the first message that has not been
acknowledged to the client") go through three calls, in BookKeeper's order:

1. :meth:`PendingAdds.begin_ensemble_change` holds acknowledgements back (BookKeeper: "Ensemble
   change is in progress, don't send success callbacks"), so the last-add-confirmed, and with
   it the new fragment's first entry :meth:`PendingAdds.first_unacknowledged`, cannot move
   while the metadata compare-and-swap is in flight;
2. once the new fragment is in the metadata, :meth:`PendingAdds.replace_bookie` forgets what
   the replaced bookie confirmed from that entry on (the metadata now says the replacement
   holds those entries) and returns the entries to resend to the replacement;
3. :meth:`PendingAdds.end_ensemble_change` lets acknowledgements through again and returns
   the entries that became acknowledged meanwhile.

(Calling :meth:`PendingAdds.replace_bookie` before the compare-and-swap instead, and ignoring
the failed bookie's answers from then on, is equally safe: no acknowledgement then counts the
replaced bookie, so none needs holding back.)

Bookies are named by their index in the ensemble; fragments keep E, so write sets never
change, only which bookie sits at an index.
"""

from __future__ import annotations

from collections.abc import Iterable

from bk_spark.core.metadata import validate_quorums
from bk_spark.core.schedule import in_write_set, write_set


class PendingAdds:
    """The adds of one ledger writer that are not yet acknowledged to the client.

    Guarantee: :meth:`ack` returns an entry id exactly once, in increasing entry-id order,
    when Qa distinct bookies of its write set confirmed it and every lower entry was
    acknowledged (and no ensemble change is in progress).
    """

    def __init__(
        self, ensemble_size: int, write_quorum_size: int, ack_quorum_size: int, last_acked: int = -1
    ) -> None:
        validate_quorums(ensemble_size, write_quorum_size, ack_quorum_size)
        if last_acked < -1:
            raise ValueError(f"last_acked must be >= -1, got {last_acked}")
        self.ensemble_size = ensemble_size
        self.write_quorum_size = write_quorum_size
        self.ack_quorum_size = ack_quorum_size
        self._lac = last_acked
        self._next_entry_id = last_acked + 1
        # entry id -> indexes of the bookies that confirmed it; ascending (insertion order)
        self._confirmed: dict[int, set[int]] = {}
        self._changing_ensemble = False

    # -- queries ---------------------------------------------------------------------------

    @property
    def last_add_confirmed(self) -> int:
        """The last entry acknowledged to the client (-1: none)."""
        return self._lac

    @property
    def next_entry_id(self) -> int:
        """The id the next :meth:`add` must register."""
        return self._next_entry_id

    @property
    def changing_ensemble(self) -> bool:
        return self._changing_ensemble

    def first_unacknowledged(self) -> int:
        """``last_add_confirmed + 1``: where a new fragment starts on an ensemble change."""
        return self._lac + 1

    def unacknowledged(self) -> list[int]:
        """The added entries not yet acknowledged to the client, ascending."""
        return list(self._confirmed)

    def confirmations(self, entry_id: int) -> frozenset[int]:
        """The bookie indexes that confirmed an unacknowledged entry so far."""
        return frozenset(self._confirmed.get(entry_id, ()))

    def __len__(self) -> int:
        return len(self._confirmed)

    # -- events ----------------------------------------------------------------------------

    def add(self, entry_id: int) -> list[int]:
        """Register the next entry (ids strictly consecutive); return its write set."""
        self.register(entry_id)
        return write_set(entry_id, self.ensemble_size, self.write_quorum_size)

    def register(self, entry_id: int) -> None:
        """:meth:`add` without computing the write set (the writer's hot path)."""
        if entry_id != self._next_entry_id:
            raise ValueError(
                f"entry {entry_id} added out of order: the next entry id is {self._next_entry_id}"
            )
        self._confirmed[entry_id] = set()
        self._next_entry_id += 1

    def ack(self, entry_id: int, bookie_index: int) -> list[int]:
        """Record that the bookie at ``bookie_index`` confirmed ``entry_id``.

        Duplicates, bookies outside the entry's write set and confirmations of entries
        already acknowledged are ignored. Returns the entry ids acknowledged to the client
        by this call, ascending (often none, sometimes several).
        """
        if not 0 <= bookie_index < self.ensemble_size:
            raise ValueError(
                f"bookie index {bookie_index} outside an ensemble of {self.ensemble_size}"
            )
        if entry_id <= self._lac:
            return []
        confirmed = self._confirmed.get(entry_id)
        if confirmed is None:
            raise ValueError(f"entry {entry_id} was never added")
        if not in_write_set(entry_id, bookie_index, self.ensemble_size, self.write_quorum_size):
            return []
        confirmed.add(bookie_index)
        if entry_id != self._lac + 1 or self._changing_ensemble:
            return []
        return self._advance()

    def ack_many(self, entry_ids: Iterable[int], bookie_index: int) -> list[int]:
        """:meth:`ack` for every id of one bookie's answer to a batch, at the cost of one."""
        if not 0 <= bookie_index < self.ensemble_size:
            raise ValueError(
                f"bookie index {bookie_index} outside an ensemble of {self.ensemble_size}"
            )
        E, Qw, lac = self.ensemble_size, self.write_quorum_size, self._lac
        confirmed = self._confirmed
        for entry_id in entry_ids:
            if entry_id <= lac:
                continue
            bookies = confirmed.get(entry_id)
            if bookies is None:
                raise ValueError(f"entry {entry_id} was never added")
            if (bookie_index - entry_id) % E < Qw:  # bookie_index is in the write set
                bookies.add(bookie_index)
        if self._changing_ensemble:
            return []
        return self._advance()

    def _advance(self) -> list[int]:
        acknowledged: list[int] = []
        confirmed = self._confirmed
        while True:
            bookies = confirmed.get(self._lac + 1)
            if bookies is None or len(bookies) < self.ack_quorum_size:
                return acknowledged
            self._lac += 1
            del confirmed[self._lac]
            acknowledged.append(self._lac)

    # -- ensemble change -------------------------------------------------------------------

    def begin_ensemble_change(self) -> None:
        """Hold acknowledgements back until :meth:`end_ensemble_change` (idempotent)."""
        self._changing_ensemble = True

    def end_ensemble_change(self) -> list[int]:
        """Let acknowledgements through again; return the entries acknowledged now."""
        self._changing_ensemble = False
        return self._advance()

    def replace_bookie(self, bookie_index: int, from_entry_id: int) -> list[int]:
        """The bookie at ``bookie_index`` was replaced in a fragment from ``from_entry_id``.

        Forgets that bookie's confirmations of unacknowledged entries >= ``from_entry_id``
        (they now count only once the replacement confirms them) and returns those entries
        whose write set contains ``bookie_index``: they must be resent to the replacement.
        The fragment must start after the last-add-confirmed: acknowledged entries are never
        moved to another bookie.
        """
        if not 0 <= bookie_index < self.ensemble_size:
            raise ValueError(
                f"bookie index {bookie_index} outside an ensemble of {self.ensemble_size}"
            )
        if from_entry_id <= self._lac:
            raise ValueError(
                f"a new fragment must start after the last-add-confirmed ({self._lac}), "
                f"got {from_entry_id}"
            )
        resend: list[int] = []
        for entry_id, bookies in self._confirmed.items():
            if entry_id >= from_entry_id and in_write_set(
                entry_id, bookie_index, self.ensemble_size, self.write_quorum_size
            ):
                bookies.discard(bookie_index)
                resend.append(entry_id)
        return resend
