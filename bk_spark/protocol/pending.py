"""In-order acknowledgement of adds (BookKeeper's ``PendingAddOp`` bookkeeping), pure.

The seed ("Writing to ledgers"): "Once Qa bookies from the write quorum acknowledge the
write, the write is acknowledged to the client, but only if all entries with lower entry
ids in the ledger have already been acknowledged to the client." The last entry
acknowledged to the client is the *last-add-confirmed* (``lac``) the writer sends with every
later entry.

Ensemble changes ("If a node fails to acknowledge a write, the writer will create a new
ensemble by replacing the failed node ... starting from the first message that has not been
acknowledged to the client"): the writer calls :meth:`PendingAdds.replace_bookie` with
:meth:`PendingAdds.first_unacknowledged` *before* its metadata compare-and-swap and ignores
the failed bookie's answers from then on: no acknowledgement counts what the replaced bookie
confirmed from that entry on. The new fragment names the replacement for every entry from
there, so the replacement must be sent every one of them its write sets give it: the writer
holds acknowledgements (:meth:`PendingAdds.hold`) while the change is in flight (as BookKeeper's
``LedgerHandle`` holds its add callbacks while ``changingEnsemble``), so those entries stay
unacknowledged, :meth:`PendingAdds.unacknowledged_in_write_set` gives all of them to resend
once the new fragment is in the metadata, and :meth:`PendingAdds.release` acknowledges what
the other bookies confirmed meanwhile. (Acknowledging during the change lost the entries to
resend: fault seed 28001's replacements held none of their fragment's entries, one copy
short of Qw.)

Bookies are named by their index in the ensemble; fragments keep E, so write sets never
change, only which bookie sits at an index.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from bk_spark.protocol.ledger_metadata import validate_quorums
from bk_spark.protocol.schedule import in_write_set

_INITIAL_WINDOW = 1024
#: An answer of at most this many ids (and a window of at most this many unacknowledged
#: entries) is counted in plain Python: below it numpy's fixed cost per call dominates.
SMALL_ANSWER = 16


class PendingAdds:
    """The adds of one ledger writer that are not yet acknowledged to the client.

    Guarantee: :meth:`ack_many` returns an entry id exactly once, in increasing entry-id
    order, when Qa distinct bookies of its write set confirmed it and every lower entry was
    acknowledged; duplicates, bookies outside the entry's write set and confirmations of
    entries already acknowledged are ignored.

    The confirmations live in numpy arrays over the window of unacknowledged entries (one
    row of flags per ensemble index, and the number of distinct confirming bookies per
    entry), so a bookie's answer to a batch of thousands of entries costs a few array
    operations, not a Python step per entry.
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
        # Column c describes entry self._base + c (columns before lac + 1 are stale).
        self._base = last_acked + 1
        self._confirmed = np.zeros((ensemble_size, _INITIAL_WINDOW), dtype=bool)
        self._count = np.zeros(_INITIAL_WINDOW, dtype=np.int32)
        self._holds = 0  # ensemble changes in flight: no acknowledgement meanwhile

    # -- queries ---------------------------------------------------------------------------

    @property
    def last_add_confirmed(self) -> int:
        """The last entry acknowledged to the client (-1: none)."""
        return self._lac

    @property
    def next_entry_id(self) -> int:
        """The id the next :meth:`register` must start at."""
        return self._next_entry_id

    def first_unacknowledged(self) -> int:
        """``last_add_confirmed + 1``: where a new fragment starts on an ensemble change."""
        return self._lac + 1

    def unacknowledged(self) -> list[int]:
        """The added entries not yet acknowledged to the client, ascending."""
        return list(range(self._lac + 1, self._next_entry_id))

    def confirmations(self, entry_id: int) -> frozenset[int]:
        """The bookie indexes that confirmed an unacknowledged entry so far."""
        if not self._lac < entry_id < self._next_entry_id:
            return frozenset()
        column = self._confirmed[:, entry_id - self._base]
        return frozenset(int(i) for i in np.flatnonzero(column))

    def __len__(self) -> int:
        return self._next_entry_id - self._lac - 1

    # -- events ----------------------------------------------------------------------------

    def register(self, entry_id: int, count: int = 1) -> None:
        """Register entries ``entry_id .. entry_id + count - 1`` (the next ones) at once,
        without computing write sets (the writer's hot path registers a whole round)."""
        if entry_id != self._next_entry_id:
            raise ValueError(
                f"entry {entry_id} added out of order: the next entry id is {self._next_entry_id}"
            )
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count}")
        self._next_entry_id += count
        if self._next_entry_id - self._base > self._count.size:
            self._make_room()

    def _make_room(self) -> None:
        """Drop the columns of acknowledged entries; grow the window if still too small."""
        live_from = self._lac + 1 - self._base
        live = self._next_entry_id - self._lac - 1
        size = self._count.size
        while size < 2 * live:
            size *= 2
        confirmed = np.zeros((self.ensemble_size, size), dtype=bool)
        count = np.zeros(size, dtype=np.int32)
        kept = self._count.size - live_from  # columns that held entries, acknowledged or not
        confirmed[:, :kept] = self._confirmed[:, live_from:]
        count[:kept] = self._count[live_from:]
        self._confirmed, self._count, self._base = confirmed, count, self._lac + 1

    def _check_index(self, bookie_index: int) -> None:
        if not 0 <= bookie_index < self.ensemble_size:
            raise ValueError(
                f"bookie index {bookie_index} outside an ensemble of {self.ensemble_size}"
            )

    def ack_many(self, entry_ids: Iterable[int] | np.ndarray, bookie_index: int) -> range:
        """:meth:`ack` for every id of one bookie's answer to a batch, in a few array
        operations; returns the range of entry ids acknowledged by this call.

        An answer of at most :data:`SMALL_ANSWER` ids (a round of one or two entries: a
        thousand ledgers with a couple of adds in flight each) is counted in plain Python
        instead, with the same outcome: numpy's fixed cost per call (~1 us each, a dozen
        calls) was most of the client's CPU per entry there."""
        self._check_index(bookie_index)
        if isinstance(entry_ids, np.ndarray):
            if entry_ids.size <= SMALL_ANSWER:
                return self._ack_small(entry_ids.tolist(), bookie_index)
            ids = entry_ids.astype(np.int64, copy=False)
        else:
            listed = entry_ids if isinstance(entry_ids, list) else list(entry_ids)
            if len(listed) <= SMALL_ANSWER:
                return self._ack_small(listed, bookie_index)
            ids = np.asarray(listed, dtype=np.int64)
        ids = ids[ids > self._lac]
        if ids.size:
            if int(ids.max()) >= self._next_entry_id:
                raise ValueError(f"entry {int(ids.max())} was never added")
            ids = ids[(bookie_index - ids) % self.ensemble_size < self.write_quorum_size]
            columns = ids - self._base
            row = self._confirmed[bookie_index]
            new = columns[~row[columns]]
            row[new] = True
            # a repeated column counts once: fancy-index += adds 1 per distinct index
            self._count[new] += 1
        return self._advance()

    def _ack_small(self, ids: list[int], bookie_index: int) -> range:
        """:meth:`ack_many` of a few ids, one Python step each (the same rules)."""
        lac, nxt = self._lac, self._next_entry_id
        live = [e for e in ids if e > lac]
        if live:
            top = max(live)
            if top >= nxt:
                raise ValueError(f"entry {top} was never added")
            E, Qw, base = self.ensemble_size, self.write_quorum_size, self._base
            row, count = self._confirmed[bookie_index], self._count
            for e in live:
                if in_write_set(e, bookie_index, E, Qw):
                    c = e - base
                    if not row[c]:
                        row[c] = True
                        count[c] += 1
        return self._advance()

    def _advance(self) -> range:
        if self._holds:
            return range(0)
        start = self._lac + 1
        low, high = start - self._base, self._next_entry_id - self._base
        count, qa = self._count, self.ack_quorum_size
        if low >= high or count[low] < qa:
            return range(0)
        if high - low <= SMALL_ANSWER:  # a short window: one step per entry
            k = low + 1
            while k < high and count[k] >= qa:
                k += 1
            k -= low
        else:
            quorate = count[low:high] >= qa
            k = int(quorate.argmin())  # the first entry short of a quorum ...
            if quorate[k]:
                k = high - low  # ... or none is
        self._lac = start + k - 1
        return range(start, start + k)

    # -- ensemble change -------------------------------------------------------------------

    def replace_bookie(self, bookie_index: int, from_entry_id: int) -> list[int]:
        """The bookie at ``bookie_index`` was replaced in a fragment from ``from_entry_id``.

        Forgets that bookie's confirmations of unacknowledged entries >= ``from_entry_id``
        (they now count only once the replacement confirms them) and returns those entries
        whose write set contains ``bookie_index``: they must be resent to the replacement.
        The fragment must start after the last-add-confirmed: acknowledged entries are never
        moved to another bookie.
        """
        self._check_index(bookie_index)
        if from_entry_id <= self._lac:
            raise ValueError(
                f"a new fragment must start after the last-add-confirmed ({self._lac}), "
                f"got {from_entry_id}"
            )
        resend = self.unacknowledged_in_write_set(bookie_index, from_entry_id)
        columns = resend - self._base
        row = self._confirmed[bookie_index]
        had = columns[row[columns]]
        row[had] = False
        self._count[had] -= 1
        return resend.tolist()

    def hold(self) -> None:
        """An ensemble change starts: acknowledge nothing until :meth:`release` (one call
        per change; several changes may be in flight, one per ensemble index)."""
        self._holds += 1

    def release(self, acknowledge: bool = True) -> range:
        """An ensemble change ended (its fragment written, or failed): once no other one is
        in flight, acknowledge what the bookies confirmed meanwhile; returns that range.
        ``acknowledge=False``: the writer failed meanwhile, nothing more is acknowledged."""
        if self._holds < 1:
            raise ValueError("release() without a hold()")
        self._holds -= 1
        return self._advance() if acknowledge else range(0)

    def unacknowledged_in_write_set(self, bookie_index: int, from_entry_id: int) -> np.ndarray:
        """The unacknowledged entries >= ``from_entry_id`` whose write set holds
        ``bookie_index`` (what a replacement at that index must be sent), ascending."""
        ids = np.arange(max(from_entry_id, self._lac + 1), self._next_entry_id, dtype=np.int64)
        return ids[(bookie_index - ids) % self.ensemble_size < self.write_quorum_size]
