"""``LedgerRecoveryOp``: closing a ledger as a reader (fencing and recovery).

The seed's steps (bookkeeper-protocol.txt "Closing a ledger as a reader",
fencing.txt "Fencing internals"):

1. CAS the metadata state to IN_RECOVERY, so the writer cannot change the
   ensemble any more (its CAS fails and it sees IN_RECOVERY).
2. Fence the bookies of the last fragment and wait for (Qw - Qa) + 1 answers
   from every write quorum: then no write quorum has Qa bookies that would
   accept the old writer's adds. The answers carry each bookie's LAC.
3. Read forward from the highest LAC, writing every entry found back to its
   whole write quorum with the recovery flag, until an entry is absent from
   (Qw - Qa) + 1 bookies of its write set: it cannot have been acknowledged.
   The LAC entry itself was acknowledged: found absent, its copies were lost
   (a bookie back with an empty disk) and recovery fails rather than close
   the ledger below it.
   A bookie that cannot take the write-back is replaced, as BookKeeper's recovery
   does: a new fragment from the first entry that missed its ack quorum, CASed while
   the ledger is IN_RECOVERY (only a recoverer may still change the ensemble).
4. CAS the state to CLOSED with the last entry found. Concurrent recoverers
   read the same replicated entries and their CASes converge on one last entry.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bk_spark.core.context import ClientContext
from bk_spark.core.ensemble_change import cas_new_fragment
from bk_spark.errors import (
    BKError,
    BookieUnavailableError,
    DigestMismatchError,
    RecoveryError,
    RecoveryTimeoutError,
    UnauthorizedError,
)
from bk_spark.io.bookie_client import BookieCall, frame_entry
from bk_spark.io.entry import EntryCodec
from bk_spark.io.metadata_store import Versioned
from bk_spark.proto import bookie_pb2 as pb
from bk_spark.protocol import ledger_rules
from bk_spark.protocol.answers import NEGATIVE_ANSWERS
from bk_spark.protocol.ledger_metadata import LedgerMetadata, LedgerState
from bk_spark.protocol.ledger_rules import REPLACEABLE_ERRORS
from bk_spark.protocol.schedule import QuorumCoverageSet, RecoveryReadTally, write_set

log = logging.getLogger(__name__)

MAX_BATCH = 1024
#: How long past the add timeout a write-back waits for its bookies' last answers (each
#: add is answered by then, with its own timeout error at the latest).
WRITE_BACK_GRACE_S = 5.0


def recover_ledger(bk: ClientContext, md: Versioned[LedgerMetadata], codec: EntryCodec,
                   master_key: bytes) -> Versioned[LedgerMetadata]:
    """Fence and recover ledger ``md`` and return its CLOSED metadata."""
    lid = md.value.ledger_id
    if md.value.state == LedgerState.CLOSED:
        return md
    # Step 1: IN_RECOVERY (another recoverer may already have done it).
    md = bk.metadata_store.update(
        lid, lambda m: m.state == LedgerState.OPEN,
        lambda m: m.with_state(LedgerState.IN_RECOVERY), current=md)
    if md.value.state == LedgerState.CLOSED:
        return md
    m = md.value
    # Step 2: fence the last fragment.
    max_lac = fence_last_fragment(bk, m, master_key)
    # Step 3: read forward from the highest LAC, writing back what is found.
    last, length = _read_forward(bk, md, codec, master_key, max_lac)
    # Step 4: CLOSED at the last entry found; converge with concurrent recoverers.
    log.info("ledger %d recovered: last entry %d, %d bytes", lid, last, length)
    return bk.metadata_store.update(
        lid, lambda cur: cur.state != LedgerState.CLOSED,
        lambda cur: cur.closed(last, length), current=md)


@dataclass
class FragmentAnswers:
    """What the bookies of a ledger's last fragment answered to one request each.

    ``responses``: ensemble index -> the bookie's response (None for an answer that counts
    without one, e.g. NoSuchLedger to a LAC read); ``errors``: index -> why it gave none;
    ``covered``: the responses cover every write quorum (:class:`QuorumCoverageSet`)."""

    responses: dict[int, Any]
    errors: dict[int, BKError]
    covered: bool

    def describe_errors(self, ensemble: Sequence[str]) -> str:
        """Why each bookie gave no answer that counts: its error, or its silence."""
        return "; ".join(
            f"{b}: {self.errors[i]}" if i in self.errors else f"{b}: no answer in time"
            for i, b in enumerate(ensemble) if i not in self.responses)


def ask_last_fragment(m: LedgerMetadata, ask: Callable[[str], BookieCall[Any]], timeout: float,
                      *, counts_as_answer: tuple[type[BKError], ...] = (),
                      stop_when: Callable[[Any], bool] | None = None,
                      cancel_rest: bool = True,
                      stop_when_coverage_impossible: bool = True) -> FragmentAnswers:
    """Send one request (``ask(bookie)``) to every bookie of the last fragment and gather
    the answers until they cover every write quorum ((Qw - Qa) + 1 bookies of each: the
    seed's rule for fencing and for reading the last-add-confirmed, BookKeeper's
    ``ReadLastConfirmedOp`` over ``RRQuorumCoverageSet``).

    It returns as soon as the answers cover (or, with ``stop_when``, as soon as one
    response satisfies it: a long poll that saw the LAC move), when coverage became
    impossible (Qa bookies of one write quorum failed), when every bookie answered, or
    after ``timeout``; requests still open are then cancelled, unless ``cancel_rest`` is
    False (fences: every bookie that can be fenced should be). Callers send their requests with
    ``wait_for_ready``: a bookie whose connection is being re-established (restarted, slow
    handshake) is waited for within the timeout, and since gathering stops at coverage, a
    dead bookie costs nothing while enough others answer. An UnauthorizedError (wrong
    password) is raised at once. With ``stop_when_coverage_impossible`` False (a best-effort
    LAC read, :mod:`bk_spark.core.lac`) it goes on gathering once coverage became
    impossible, until every bookie answered. Errors of the types in ``counts_as_answer`` count as
    answers with no response. A refused TLS handshake is an UnauthorizedError too (the bookie
    call tells it apart: :func:`bk_spark.io.bookie_client.unavailable`).
    """
    ensemble = m.last_ensemble
    coverage = QuorumCoverageSet(m.ensemble_size, m.write_quorum_size, m.ack_quorum_size)
    cv = threading.Condition()
    responses: dict[int, Any] = {}
    errors: dict[int, BKError] = {}
    stopped = [False]

    def on_done(index: int, call: BookieCall[Any]) -> None:
        resp: Any = None
        err: BKError | None = None
        try:
            resp = call.result()
        except BKError as exc:  # a cancelled call too: no answer
            err = exc
        with cv:
            if err is not None and not isinstance(err, counts_as_answer):
                errors[index] = err
                coverage.error(index)
            else:
                responses[index] = resp if err is None else None
                coverage.add(index)
                if resp is not None and err is None and stop_when is not None \
                        and stop_when(resp):
                    stopped[0] = True
            cv.notify_all()

    calls = []
    for i, b in enumerate(ensemble):
        call = ask(b)
        calls.append(call)
        call.add_done_callback(lambda c, i=i: on_done(i, c))

    def finished() -> bool:
        return (stopped[0] or any(isinstance(e, UnauthorizedError) for e in errors.values())
                or coverage.covered()
                or (stop_when_coverage_impossible and coverage.cannot_cover())
                or len(responses) + len(errors) == len(ensemble))

    with cv:
        cv.wait_for(finished, timeout=timeout)
        result = FragmentAnswers(dict(responses), dict(errors), coverage.covered())
    if cancel_rest:
        for call in calls:
            call.cancel()
    for err in result.errors.values():
        if isinstance(err, UnauthorizedError):
            raise UnauthorizedError(f"ledger {m.ledger_id}: {err}")
    return result


def fence_last_fragment(bk: ClientContext, m: LedgerMetadata, master_key: bytes) -> int:
    """Fence the last fragment's bookies until every write quorum is covered; max LAC."""
    got = ask_last_fragment(
        m, lambda b: bk.bookies.get(b).fence_future(m.ledger_id, master_key,
                                                    wait_for_ready=True),
        timeout=bk.config.client.read_timeout_s + 5, cancel_rest=False)
    if not got.covered:
        raise RecoveryError(
            f"ledger {m.ledger_id}: could not fence a quorum of its last fragment "
            f"({got.describe_errors(m.last_ensemble)}); retry when bookies are back")
    return max((r.lac for r in got.responses.values()), default=-1)


def _read_forward(bk: ClientContext, md: Versioned[LedgerMetadata], codec: EntryCodec,
                  master_key: bytes, max_lac: int) -> tuple[int, int]:
    """Seed step 3; returns (last entry, ledger length).

    Reads go to the fragments as they were when recovery started (``m``); write-backs to
    the fragments as they are now (a write-back may have replaced a bookie)."""
    m = md.value
    E, Qw, Qa = m.ensemble_size, m.write_quorum_size, m.ack_quorum_size
    # Start at the LAC itself (not LAC + 1) so the length of the last entry is known.
    next_id = max(max_lac, 0)
    last, length = -1, 0
    batch = 16
    while True:
        ids = list(range(next_id, next_id + batch))
        tallies = {e: RecoveryReadTally(Qw, Qa) for e in ids}
        found: dict[int, pb.Entry] = {}
        per_bookie: dict[tuple[int, str], list[int]] = defaultdict(list)
        for e in ids:
            ens = m.ensemble_for(e)
            for idx in write_set(e, E, Qw):
                per_bookie[(idx, ens[idx])].append(e)
        calls = bk.bookies.scatter_reads(m.ledger_id, master_key, per_bookie,
                                         bookie=lambda key: key[1])
        for (idx, _bookie), es, call in calls:
            pos_of = {e: write_set(e, E, Qw).index(idx) for e in es}
            try:
                resp = call.result()
            except NEGATIVE_ANSWERS:  # UNKNOWN (a bookie in limbo) is an error, below
                for e in es:
                    tallies[e].missing(pos_of[e])
                continue
            except BKError:
                for e in es:
                    tallies[e].error(pos_of[e])
                continue
            seen = set()
            for ent in resp.entries:
                if ent.entry_id not in tallies:
                    continue
                seen.add(ent.entry_id)
                try:
                    codec.verify(ent)
                except DigestMismatchError:
                    tallies[ent.entry_id].error(pos_of[ent.entry_id])
                    continue
                tallies[ent.entry_id].found()
                found[ent.entry_id] = ent
            for e in resp.missing:
                if e in tallies:
                    seen.add(e)
                    tallies[e].missing(pos_of[e])
            for e in es:  # cut by a size limit: undecided here, treat as error
                if e not in seen:
                    tallies[e].error(pos_of[e])
        to_write: list[pb.Entry] = []
        stop = False
        for e in ids:
            decision = tallies[e].decision()
            if decision == RecoveryReadTally.FOUND:
                to_write.append(found[e])
                last = e
                length = codec.verify(found[e])
            elif decision == RecoveryReadTally.ABSENT:
                if e <= max_lac:
                    # The LAC was acknowledged to the writer, so it has Qa copies: absent
                    # from (Qw - Qa) + 1 bookies means copies were lost (a bookie back with
                    # an empty disk) while the others do not answer. Closing here would
                    # drop every entry up to the LAC: never close below it, wait instead.
                    raise RecoveryError(
                        f"ledger {m.ledger_id}: entry {e}, the last-add-confirmed a fenced "
                        f"bookie reported, was acknowledged but no bookie of its write set "
                        f"returns it ({(Qw - Qa) + 1} say they lack it); the ledger is not "
                        f"closed below it: retry when its bookies are back")
                stop = True
                break
            else:
                raise RecoveryError(
                    f"ledger {m.ledger_id}: cannot tell whether entry {e} exists (too many "
                    f"bookies of its write set unavailable); retry when bookies are back")
        md = write_back(bk, md, master_key, to_write)
        if md.value.is_closed:  # another recoverer finished first: step 4 converges on it
            return md.value.last_entry_id, md.value.length
        if stop:
            return last, length
        next_id += batch
        batch = min(batch * 4, MAX_BATCH)


def write_back(bk: ClientContext, md: Versioned[LedgerMetadata], master_key: bytes,
               entries: list[pb.Entry]) -> Versioned[LedgerMetadata]:
    """Write ``entries`` to their whole write quorums (recovery flag); wait for Qa each.

    Bookies of the last fragment that cannot take them (unavailable, readonly) are replaced
    by a new fragment starting at the first entry that missed its ack quorum, and the
    entries from there are written again to their new write quorums. An entry of an earlier
    fragment (read forward from a LAC below the last fragment) need not reach Qa again: it
    did before its fragment ended. Returns the metadata as it is now (CLOSED if another
    recoverer closed the ledger meanwhile).
    """
    replaced: set[str] = set()
    for _attempt in range(md.value.ensemble_size + 1):
        failed, bad = _write_back_once(bk, md.value, master_key, entries)
        m = md.value
        last_start, last_ensemble = m.ensembles[-1]
        # An entry of an earlier fragment reached Qa bookies before its fragment ended (a
        # writer starts a fragment at its LAC + 1; this write-back at the first entry that
        # missed Qa): its write-back is a courtesy, and a bookie it names that is gone
        # (the one a writer replaced) is AutoRecovery's to replace, not recovery's to wait for.
        failed = [e for e in failed if e >= last_start]
        if not failed:
            return md
        first = min(failed)
        errors = bad[first]
        broken = {i: b for i, b in enumerate(last_ensemble)
                  if any(isinstance(err, REPLACEABLE_ERRORS) for b2, err in errors if b2 == b)}
        if not broken:
            raise BookieUnavailableError(
                f"ledger {m.ledger_id}: could not write back entry {first} to an ack quorum "
                f"({'; '.join(f'{b}: {err}' for b, err in errors)})")
        replaced.update(broken.values())
        log.warning("ledger %d: recovery replaces %s from entry %d", m.ledger_id,
                    sorted(broken.values()), first)
        md = _replace_for_write_back(bk, md, first, broken, replaced)
        if md.value.is_closed:
            return md
        entries = [e for e in entries if e.entry_id >= first]
    raise RecoveryError(f"ledger {md.value.ledger_id}: write-back kept failing after "
                        f"replacing {sorted(replaced)}; retry when bookies are back")


def _write_back_once(bk: ClientContext, m: LedgerMetadata, master_key: bytes,
                     entries: list[pb.Entry]
                     ) -> tuple[list[int], dict[int, list[tuple[str, BKError]]]]:
    """One round of write-backs: the entries that missed Qa, and each entry's errors."""
    E, Qw, Qa = m.ensemble_size, m.write_quorum_size, m.ack_quorum_size
    cv = threading.Condition()
    ok: dict[int, int] = defaultdict(int)
    bad: dict[int, list[tuple[str, BKError]]] = defaultdict(list)

    class Tally:
        """One bookie's answers (an :class:`~bk_spark.io.bookie_client.AddSink`)."""

        def __init__(self, bookie: str) -> None:
            self.bookie = bookie

        def on_added(self, eids: Sequence[int], err: BKError | None) -> None:
            with cv:
                for eid in eids:
                    if err is None:
                        ok[eid] += 1
                    else:
                        bad[eid].append((self.bookie, err))
                cv.notify_all()

    # Each bookie's share of the write-back, in entry order: one batch add to it (the add
    # path a writer's rounds take), with the recovery flag.
    shares: dict[str, tuple[list[bytes], list[int]]] = defaultdict(lambda: ([], []))
    lac = max((ent.lac for ent in entries), default=-1)  # what the entries carry, no more
    for ent in entries:
        ens = m.ensemble_for(ent.entry_id)
        framed = frame_entry(ent.SerializeToString())
        for idx in write_set(ent.entry_id, E, Qw):
            wire, eids = shares[ens[idx]]
            wire.append(framed)
            eids.append(ent.entry_id)
    for b, (wire, eids) in shares.items():
        bk.bookies.get(b).send_batch(m.ledger_id, master_key, wire, eids, Tally(b),
                                     lac=lac, recovery=True)

    def finished() -> bool:
        return all(ok[e.entry_id] >= Qa or len(bad[e.entry_id]) > Qw - Qa for e in entries)

    with cv:
        timeout = bk.config.client.add_timeout_s + WRITE_BACK_GRACE_S
        if not cv.wait_for(finished, timeout=timeout):
            raise RecoveryTimeoutError(
                f"ledger {m.ledger_id}: recovery's write-back got no answer from "
                f"{sorted(shares)} within {timeout:.0f}s (bookies paused or overloaded?); "
                f"open the ledger again to retry the recovery")
        return [e.entry_id for e in entries if ok[e.entry_id] < Qa], dict(bad)


def _replace_for_write_back(bk: ClientContext, md: Versioned[LedgerMetadata], first: int,
                            broken: dict[int, str], exclude: set[str]
                            ) -> Versioned[LedgerMetadata]:
    """CAS a new fragment from ``first`` without the ``broken`` bookies (index -> bookie)
    while the ledger is IN_RECOVERY; a CLOSED ledger is returned as it is."""
    return cas_new_fragment(bk, md, first, broken,
                            lambda m: ledger_rules.recoverer_replacement(m, broken),
                            exclude=exclude)
