"""What re-replication must do, decided from ledger metadata alone (pure, no I/O).

Theory of operation (BookKeeper's AutoRecovery; the seed's fragments and write sets):

* A ledger's metadata lists fragments ``(first entry, ensemble)``; a fragment ends where
  the next one starts, and the last fragment ends at the ledger's last entry once the
  ledger is CLOSED. While the ledger is OPEN (or IN_RECOVERY) its last fragment has no
  known end: entries may still be in flight to it.
* Entry ``e`` of a fragment is stored by the bookies of its write set
  (:func:`bk_spark.protocol.schedule.write_set`), so the bookie at ensemble index ``i`` holds
  exactly the entries of its fragment with ``i`` in their write set: those are the entries
  a replacement of that bookie must receive before it may be named in the fragment.
* A fragment *is affected* by a missing bookie when its ensemble names it. Replacing the
  bookie in a fragment whose entries were all copied is one metadata change
  (:meth:`LedgerMetadata.with_fragment_bookie_replaced`), written by CAS.
* A replacement is a writable bookie outside the fragment's ensemble other than the bookie
  it replaces (:func:`replacement_exclusions`, as BookKeeper's ``replicateLedgerFragment``):
  a live bookie short of copies of *another* fragment may take this one's. Where
  re-replication put a bookie, the fragment holds its full copy (``placed``): not affected
  by it, and a missing bookie named only in such fragments is healed
  (:func:`healed_bookies`).
* What a worker does with an affected fragment is a table, :data:`FRAGMENT_ACTIONS`,
  keyed by the ledger's state and whether the fragment is the ledger's last one; the
  last fragment of a ledger still OPEN belongs to its writer (who replaces failed bookies
  by an ensemble change) until no add was seen for a grace period: then the ledger is
  recovered (fenced and closed) first, as BookKeeper's ReplicationWorker does.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from types import MappingProxyType

from bk_spark.errors import NotEnoughBookiesError
from bk_spark.protocol.ledger_metadata import LedgerMetadata, LedgerState
from bk_spark.protocol.placement import Topology, write_quorum_racks
from bk_spark.protocol.schedule import in_write_set


@dataclass(frozen=True)
class FragmentSpan:
    """One fragment of a ledger: entries ``first..last`` stored on ``ensemble``.

    ``last`` is None for the last fragment of a ledger that is not CLOSED (open-ended);
    ``last < first`` for a fragment that holds no entry (e.g. a ledger closed empty).
    """

    first: int
    last: int | None
    ensemble: tuple[str, ...]
    is_last: bool

    @property
    def is_open(self) -> bool:
        return self.last is None


def fragment_spans(md: LedgerMetadata) -> list[FragmentSpan]:
    """The fragments of ``md`` with their entry ranges, in order."""
    out: list[FragmentSpan] = []
    frags = md.ensembles
    for i, (first, ensemble) in enumerate(frags):
        is_last = i == len(frags) - 1
        if not is_last:
            last: int | None = frags[i + 1][0] - 1
        elif md.state == LedgerState.CLOSED:
            last = md.last_entry_id
        else:
            last = None
        out.append(FragmentSpan(first, last, ensemble, is_last))
    return out


def entries_on_index(first: int, last: int, index: int, ensemble_size: int,
                     write_quorum_size: int) -> list[int]:
    """The entries of fragment ``first..last`` that the bookie at ``index`` stores.

    E=4, Qw=3, entries 0..7: index 0 stores [0, 2, 3, 4, 6, 7] (every entry but those
    starting at index 1, whose write set is [1, 2, 3]).
    """
    return [e for e in range(first, last + 1)
            if in_write_set(e, index, ensemble_size, write_quorum_size)]


@dataclass(frozen=True)
class AffectedFragment:
    """A fragment naming a missing bookie: which one, at which ensemble index."""

    span: FragmentSpan
    index: int
    bookie: str


def affected_fragments(md: LedgerMetadata, missing: Collection[str],
                       placed: Collection[tuple[int, str]] = ()) -> list[AffectedFragment]:
    """Every (fragment, index) whose ensemble names a bookie of ``missing``, in order;
    ``placed`` lists ``(fragment first entry, bookie)`` pairs where re-replication itself
    put that bookie with a full copy (:func:`replacement_exclusions`): not affected."""
    gone = set(missing)
    fresh = set(placed)
    return [AffectedFragment(span, i, b)
            for span in fragment_spans(md)
            for i, b in enumerate(span.ensemble)
            if b in gone and (span.first, b) not in fresh]


def replacement_exclusions(af: AffectedFragment) -> set[str]:
    """The bookies that may not receive the copies of ``af``'s fragment, besides its
    ensemble (which placement never picks: :meth:`Topology.replace_bookie`).

    BookKeeper's ``BookKeeperAdmin.replicateLedgerFragment`` (what its ReplicationWorker
    calls per under-replicated fragment) excludes only the bookies of *that* fragment being
    re-replicated, and placement only picks writable bookies outside the ensemble. So a
    live, writable bookie that lacks copies of *another* fragment of the ledger is a valid
    target here: it receives a full copy of this fragment, and where it is short stays
    affected on its own. (``recoverBookieData``, decommissioning named bookies, excludes
    them all; ``bk recover`` names one bookie, the one replaced.) Excluding every missing
    bookie of the ledger left fault seed 35's ledger 583 unhealed: its two live bookies
    short of copies, F1 = [A, C, D] short on A and F2 = [B, C, D] short on B, were each
    the other's only candidate.
    """
    return {af.bookie}


def healed_bookies(md: LedgerMetadata, missing: Collection[str],
                   placed: Collection[tuple[int, str]] = ()) -> set[str]:
    """The bookies of ``missing`` no longer short of any copy of ``md``: every fragment
    still naming one is a fragment re-replication put it in with a full copy (``placed``,
    as in :func:`affected_fragments`); a bookie no fragment names is healed too. The
    worker clears them from the ledger's record."""
    return {b for b in missing
            if all((span.first, b) in placed
                   for span in fragment_spans(md) if b in span.ensemble)}


def bookies_of(md: LedgerMetadata) -> set[str]:
    """Every bookie any fragment of ``md`` names."""
    return {b for _first, ensemble in md.ensembles for b in ensemble}


@dataclass(frozen=True)
class FragmentDuty:
    """What one bookie of a *closed* fragment must store: the entries of ``first..last``
    with its ensemble ``index`` in their write set."""

    bookie: str
    index: int
    first: int
    last: int


def fragment_duties(md: LedgerMetadata) -> list[FragmentDuty]:
    """For each bookie of each *closed* fragment of ``md``, the range it must hold.

    The periodic check asks the bookie which entries of ``first..last`` it holds
    (``HeldEntries``) and compares with :func:`first_missing`. Open-ended fragments are
    left out (their entries may still be in flight), and so are fragments with no entry
    and bookies that store no entry of their fragment.
    """
    E, Qw = md.ensemble_size, md.write_quorum_size
    out: list[FragmentDuty] = []
    for span in fragment_spans(md):
        if span.last is None or span.last < span.first:
            continue
        for index, bookie in enumerate(span.ensemble):
            if any(in_write_set(e, index, E, Qw)
                   for e in range(span.first, min(span.last, span.first + E - 1) + 1)):
                out.append(FragmentDuty(bookie, index, span.first, span.last))
    return out


def first_missing(duty: FragmentDuty, ensemble_size: int, write_quorum_size: int,
                  held: Sequence[tuple[int, int]]) -> int | None:
    """The first entry ``duty`` asks for that the ascending disjoint ``held`` ranges do
    not cover, or None when the bookie holds all of them.

    E=3, Qw=2, fragment 0..9 at index 0 must hold 0, 2, 3, 5, 6, 8, 9; held
    ``[(0, 3), (6, 9)]`` misses entry 5 (a gap in the middle, not only at the end).
    """
    E, Qw = ensemble_size, write_quorum_size
    ranges = iter(held)
    current = next(ranges, None)
    for e in range(duty.first, duty.last + 1):
        if not in_write_set(e, duty.index, E, Qw):
            continue
        while current is not None and current[1] < e:
            current = next(ranges, None)
        if current is None or current[0] > e:
            return e
    return None


def placement_misfits(md: LedgerMetadata, topology: Topology) -> set[str]:
    """Bookies to move so that closed fragments meet the placement policy.

    A closed fragment whose write quorums span fewer racks than the policy asks
    (``min(minNumRacksPerWriteQuorum, Qw, racks of the writable bookies)``) names one bookie
    whose replacement by the policy's own choice would raise the fragment's score (the sum
    over its write quorums of their racks, each counted up to that minimum); a fragment no
    single replacement improves names none. The score only grows and is bounded, so
    re-replication for placement always ends. Open-ended fragments are their writer's.
    """
    racks_available = len({topology.rack(b) for b in topology.available})
    out: set[str] = set()
    for span in fragment_spans(md):
        if span.last is None:
            continue
        Qw = md.write_quorum_size
        target = min(topology.min_racks_per_write_quorum, Qw, racks_available)
        counts = write_quorum_racks(span.ensemble, Qw, topology.racks)
        if min(counts) >= target:
            continue
        score = sum(min(c, target) for c in counts)
        for i, bookie in enumerate(span.ensemble):
            try:
                new = topology.replace_bookie(span.ensemble, i, Qw)
            except NotEnoughBookiesError:
                break
            trial = list(span.ensemble)
            trial[i] = new
            if sum(min(c, target) for c in write_quorum_racks(trial, Qw, topology.racks)) > score:
                out.add(bookie)
                break
    return out


def unplaceable(md: LedgerMetadata, missing: Collection[str], topology: Topology) -> set[str]:
    """The bookies of ``missing`` that re-replication cannot move out of some fragment of
    ``md`` naming them now: placement finds no replacement (:meth:`Topology.replace_bookie`:
    a writable bookie outside the fragment's ensemble), so their copies come back only once
    another bookie joins or comes back. A writable bookie that is itself missing copies of
    another fragment still counts as a place: it can take this fragment's copies
    (:func:`replacement_exclusions`; fault seed 35: two live bookies short of copies, each
    the other's only candidate, heal each other).

    Re-replication always moves a copy to another bookie, as BookKeeper's does, so with E
    writable bookies left, a ledger of ensemble size E whose fragment lacks copies on one of
    them cannot be healed (fault seed 28001: one bookie killed for good, E = 4 of 4 left).
    The fault runner expects full replication only of the ledgers this leaves empty.
    """
    gone = set(missing)
    out: set[str] = set()
    for af in affected_fragments(md, gone):
        try:
            topology.replace_bookie(af.span.ensemble, af.index, md.write_quorum_size,
                                    exclude=replacement_exclusions(af))
        except NotEnoughBookiesError:
            out.add(af.bookie)
    return out


class FragmentAction(StrEnum):
    """What a replication worker does with one affected fragment."""

    COPY = "COPY"                      # copy its entries, then CAS the replacement
    DEFER = "DEFER"                    # the writer still owns it: leave it marked, retry later
    RECOVER_FIRST = "RECOVER_FIRST"    # fence and close the ledger, then decide again


#: (ledger state, is the ledger's last fragment, writer idle for the grace period) -> action.
FRAGMENT_ACTIONS: Mapping[tuple[LedgerState, bool, bool], FragmentAction] = MappingProxyType({
    (LedgerState.CLOSED, False, False): FragmentAction.COPY,
    (LedgerState.CLOSED, False, True): FragmentAction.COPY,
    (LedgerState.CLOSED, True, False): FragmentAction.COPY,
    (LedgerState.CLOSED, True, True): FragmentAction.COPY,
    (LedgerState.OPEN, False, False): FragmentAction.COPY,
    (LedgerState.OPEN, False, True): FragmentAction.COPY,
    (LedgerState.OPEN, True, False): FragmentAction.DEFER,
    (LedgerState.OPEN, True, True): FragmentAction.RECOVER_FIRST,
    (LedgerState.IN_RECOVERY, False, False): FragmentAction.COPY,
    (LedgerState.IN_RECOVERY, False, True): FragmentAction.COPY,
    (LedgerState.IN_RECOVERY, True, False): FragmentAction.DEFER,
    (LedgerState.IN_RECOVERY, True, True): FragmentAction.RECOVER_FIRST,
})


def fragment_action(state: LedgerState, is_last: bool, writer_idle: bool) -> FragmentAction:
    """Look up :data:`FRAGMENT_ACTIONS`."""
    return FRAGMENT_ACTIONS[(LedgerState(state), is_last, writer_idle)]


# -- the under-replication record -----------------------------------------------------------

@dataclass(frozen=True)
class UnderReplicated:
    """The record of one under-replicated ledger: the bookies its fragments miss, and why
    the last re-replication attempt failed (``reason``, "" when none failed since a pass
    made progress): what ``bk ledger underreplicated`` shows operators."""

    ledger_id: int
    missing: frozenset[str]
    marked_ms: int = 0
    reason: str = ""

    def with_missing(self, bookies: Iterable[str]) -> UnderReplicated:
        return replace(self, missing=self.missing | frozenset(bookies))

    def without(self, bookies: Iterable[str]) -> UnderReplicated:
        return replace(self, missing=self.missing - frozenset(bookies))

    def with_reason(self, reason: str) -> UnderReplicated:
        return replace(self, reason=reason)

    def to_bytes(self) -> bytes:
        d: dict[str, object] = {"ledger_id": self.ledger_id, "missing": sorted(self.missing),
                                "marked_ms": self.marked_ms}
        if self.reason:
            d["reason"] = self.reason
        return json.dumps(d, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, ledger_id: int, data: bytes) -> UnderReplicated:
        try:
            d = json.loads(data or b"{}")
            return cls(ledger_id, frozenset(d.get("missing", ())), int(d.get("marked_ms", 0)),
                       str(d.get("reason", "")))
        except (ValueError, TypeError, AttributeError):
            return cls(ledger_id, frozenset())


# -- self-repair of a bookie that lost its data (BP-46) ----------------------------------------

class RepairMark(StrEnum):
    """What a bookie that lost its data does with a ledger until it is repaired
    (BookKeeper's ``DataIntegrityCheckImpl``; :mod:`bookie_server.limbo` persists them)."""

    LIMBO = "L"    # fenced, and UNKNOWN answered for what it does not hold; recovered first
    FENCED = "F"   # plain adds refused (an old writer must not reach Qa with its help)
    COPY = "C"     # its entries are copied back, nothing else


#: (ledger CLOSED, the last ensemble names the bookie) -> mark, for a ledger some ensemble
#: of which names the bookie. A ledger not closed whose last ensemble names it may have had
#: entries or a fence acknowledged by it: limbo (and fenced). A closed one: fenced only (a
#: writer fenced by a recovery whose fence the bookie forgot would otherwise find its ack
#: quorum again with Qw = Qa). A bookie named only in earlier fragments took no add of
#: them since the ensemble change that replaced it: copy only.
REPAIR_MARKS: Mapping[tuple[bool, bool], RepairMark] = MappingProxyType({
    (False, True): RepairMark.LIMBO,
    (True, True): RepairMark.FENCED,
    (False, False): RepairMark.COPY,
    (True, False): RepairMark.COPY,
})


def repair_mark(md: LedgerMetadata, bookie: str) -> RepairMark | None:
    """The mark :data:`REPAIR_MARKS` gives ``md`` on ``bookie``; None when no ensemble of
    the ledger names the bookie (nothing of it to repair there)."""
    if bookie not in bookies_of(md):
        return None
    return REPAIR_MARKS[(md.state == LedgerState.CLOSED, bookie in md.last_ensemble)]


#: (repair mark, ledger state) -> whether the bookie keeps refusing the ledger's plain
#: (non-recovery) adds once no fragment names it any more (AutoRecovery replaced it after a
#: hand-over: the mark is retired, the entries are no longer its duty). A LIMBO or FENCED
#: mark stands for a fence the bookie may have given a recovery and forgotten with its disk.
#: A recovery began if the ledger is IN_RECOVERY or CLOSED, and an old writer whose stale
#: ensemble still names this bookie could reach its ack quorum with it and with bookies the
#: recovery did not need to fence (BP-46's first counterexample): it keeps refusing. A
#: ledger still OPEN was never fenced (a recoverer moves it to IN_RECOVERY first, and it
#: never returns to OPEN), and its writer may pick this bookie again in an ensemble change:
#: it is served as any other. A COPY mark was never on the last ensemble: nothing to keep.
RETIRED_MARK_REFUSES_PLAIN_ADDS: Mapping[tuple[RepairMark, LedgerState], bool] = \
    MappingProxyType({
        (RepairMark.LIMBO, LedgerState.OPEN): False,
        (RepairMark.LIMBO, LedgerState.IN_RECOVERY): True,
        (RepairMark.LIMBO, LedgerState.CLOSED): True,
        (RepairMark.FENCED, LedgerState.OPEN): False,
        (RepairMark.FENCED, LedgerState.IN_RECOVERY): True,
        (RepairMark.FENCED, LedgerState.CLOSED): True,
        (RepairMark.COPY, LedgerState.OPEN): False,
        (RepairMark.COPY, LedgerState.IN_RECOVERY): False,
        (RepairMark.COPY, LedgerState.CLOSED): False,
    })


def retired_mark_refuses_plain_adds(mark: RepairMark, state: LedgerState) -> bool:
    """Look up :data:`RETIRED_MARK_REFUSES_PLAIN_ADDS`."""
    return RETIRED_MARK_REFUSES_PLAIN_ADDS[(RepairMark(mark), LedgerState(state))]


def repair_duties(md: LedgerMetadata, bookie: str) -> list[FragmentDuty]:
    """What ``bookie`` must hold of ``md``'s closed fragments (:func:`fragment_duties`):
    what its self-repair copies back (after recovering a ledger in limbo, every fragment
    naming it is closed)."""
    return [d for d in fragment_duties(md) if d.bookie == bookie]
