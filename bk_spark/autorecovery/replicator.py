"""Re-replicating one ledger (BookKeeper's ``LedgerFragmentReplicator``).

For one under-replicated ledger whose lock the caller holds, and each fragment naming a
missing bookie (:func:`~bk_spark.protocol.recovery_plan.affected_fragments`), in the order of
:data:`~bk_spark.protocol.recovery_plan.FRAGMENT_ACTIONS`:

1. Choose a replacement with the placement policy (:mod:`bk_spark.protocol.placement`):
   never a bookie of the fragment's ensemble nor a missing one.
2. Copy the entries the missing bookie held (the fragment's entries whose write set names
   its index) in batches: read them from the surviving replicas with the reader's
   failover (:func:`bk_spark.core.reader.fetch_entries`: every copy digest-verified, a
   copy that fails its digest is never used), add them to the replacement in batched
   recovery adds (:meth:`BookieClient.send_batch`), and wait until every add is stored.
3. One CAS through :func:`~bk_spark.io.metadata_store.metadata_update_loop` puts the
   replacement in place of the missing bookie in that fragment. Until it lands, the copy
   on the replacement counts for nothing: no reader or recoverer looks there. If on a
   conflict the re-read metadata shows the fragment changed (or the replacement joined
   its ensemble meanwhile), the fragment starts again from step 1.

The last fragment of a ledger still OPEN is left to its writer; when no add was seen for
the grace period the ledger is recovered (fenced and closed) first.

Entries are verified and re-added with the ledger's password, which the metadata stores
only as a digest: the worker is given candidate passwords (BookKeeper's
``bookieRecoveryPasswd``; by default the empty password every ledger gets unless its
writer sets one) and uses the one whose digest matches.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from bk_spark.core.client import BookKeeper
from bk_spark.core.reader import fetch_entries
from bk_spark.errors import BKError, BKTimeoutError, NoSuchLedgerError, UnauthorizedError
from bk_spark.io.bookie_client import frame_entry
from bk_spark.io.entry import EntryCodec
from bk_spark.protocol.digest import DigestManager, master_key, password_digest
from bk_spark.protocol.ledger_metadata import LedgerMetadata
from bk_spark.protocol.recovery_plan import (
    AffectedFragment,
    FragmentAction,
    affected_fragments,
    entries_on_index,
    fragment_action,
    fragment_spans,
)

log = logging.getLogger(__name__)

#: Entries read from the survivors and added to the replacement per batch.
COPY_BATCH = 1000


class FragmentChangedError(BKError):
    """The fragment being re-replicated changed under the copy: start it again."""


@dataclass
class ReplicationResult:
    """What one pass over a ledger did."""

    ledger_id: int
    replaced: set[str] = field(default_factory=set)   # missing bookies no longer named
    deferred: bool = False                            # an open last fragment waits
    entries: int = 0
    bytes: int = 0


def ledger_password(md: LedgerMetadata, passwords: Sequence[bytes]) -> bytes:
    """The candidate password whose digest the ledger's metadata stores."""
    for p in passwords:
        if password_digest(p) == md.password_digest:
            return p
    raise UnauthorizedError(
        f"ledger {md.ledger_id}: none of the {len(passwords)} recovery passwords matches: "
        f"start autorecovery with --recovery-password set to the ledger's password")


class _CopySink:
    """Counts the replacement's answers to the batched adds of one fragment copy."""

    def __init__(self) -> None:
        self.cv = threading.Condition()
        self.pending = 0
        self.error: BKError | None = None

    def sent(self, n: int) -> None:
        with self.cv:
            self.pending += n

    def on_added(self, tokens: Sequence[object], err: BKError | None) -> None:
        with self.cv:
            self.pending -= len(tokens)
            if err is not None and self.error is None:
                self.error = err
            self.cv.notify_all()

    def wait(self, timeout: float) -> None:
        with self.cv:
            if not self.cv.wait_for(lambda: self.pending <= 0 or self.error is not None,
                                    timeout):
                raise BKTimeoutError(f"re-replication adds still pending after {timeout:.0f}s")
            if self.error is not None:
                raise self.error


class LedgerReplicator:
    """Re-replicates ledgers through one :class:`BookKeeper` client (thread-safe per ledger).

    ``choose_replacement(ensemble, index, write quorum size, exclude)`` is the placement
    decision (default: :meth:`bk_spark.protocol.placement.Topology.replace_bookie` over the
    writable bookies and their racks);
    ``on_copied(entries, bytes)`` feeds the metrics.
    """

    def __init__(self, bk: BookKeeper, *, passwords: Sequence[bytes] = (b"",),
                 open_ledger_grace_s: float = 30.0,
                 choose_replacement: Callable[[Sequence[str], int, int, set[str]], str]
                 | None = None,
                 on_copied: Callable[[int, int], None] | None = None) -> None:
        self.bk = bk
        self.passwords = list(passwords) or [b""]
        self.open_ledger_grace_s = open_ledger_grace_s
        self.choose_replacement = choose_replacement or self._placement_replacement
        self.on_copied = on_copied or (lambda n, b: None)
        # ledger id -> (highest entry seen on its last fragment, since when unchanged)
        self._activity: dict[int, tuple[int, float]] = {}

    def _placement_replacement(self, ensemble: Sequence[str], index: int,
                               write_quorum_size: int, exclude: set[str]) -> str:
        return self.bk.topology().replace_bookie(ensemble, index, write_quorum_size,
                                                 exclude=exclude)

    # ------------------------------------------------------------------ one ledger
    def replicate(self, ledger_id: int, missing: set[str]) -> ReplicationResult:
        """Replace every bookie of ``missing`` in every fragment of ``ledger_id`` that can be
        replaced now; the result says which bookies the ledger no longer names."""
        result = ReplicationResult(ledger_id)
        try:
            md = self.bk.metadata_store.read(ledger_id)
        except NoSuchLedgerError:
            result.replaced = set(missing)  # deleted: nothing left to replicate
            return result
        password = ledger_password(md.value, self.passwords)
        codec = EntryCodec(ledger_id, DigestManager(md.value.digest_type, password))
        key = master_key(password)
        try:
            self._replicate_rounds(ledger_id, missing, result, password, codec, key)
        except NoSuchLedgerError:
            if self.bk.metadata_store.exists(ledger_id):
                raise
            result.replaced = set(missing)  # deleted meanwhile: nothing left to replicate
        return result

    def _replicate_rounds(self, ledger_id: int, missing: set[str], result: ReplicationResult,
                          password: bytes, codec: EntryCodec, key: bytes) -> None:
        for _round in range(1000):
            m = self.bk.metadata_store.read(ledger_id).value
            todo = affected_fragments(m, missing)
            if not todo:
                break
            progressed = False
            for af in todo:
                action = fragment_action(m.state, af.span.is_last,
                                         af.span.is_last and self._writer_idle(m, missing))
                if action == FragmentAction.DEFER:
                    result.deferred = True
                    continue
                if action == FragmentAction.RECOVER_FIRST:
                    log.info("ledger %d: writer idle for %.0fs, recovering it before "
                             "re-replication", ledger_id, self.open_ledger_grace_s)
                    self.bk.open_ledger(ledger_id, password, recovery=True)
                    self._activity.pop(ledger_id, None)
                    progressed = True
                    break  # the ledger is CLOSED now: decide again from its metadata
                try:
                    n, nbytes = self._replicate_fragment(m, af, missing, codec, key)
                except FragmentChangedError as exc:
                    log.info("ledger %d: %s; starting the fragment again", ledger_id, exc)
                    progressed = True
                    break
                result.entries += n
                result.bytes += nbytes
                progressed = True
            if not progressed:
                break
        final = self.bk.metadata_store.read(ledger_id).value
        named = {b for _f, ens in final.ensembles for b in ens}
        result.replaced = set(missing) - named

    def _writer_idle(self, md: LedgerMetadata, missing: set[str]) -> bool:
        """Whether no add reached the last fragment for the grace period (BookKeeper's
        ``openLedgerRereplicationGracePeriod``), as seen from its surviving bookies."""
        lid = md.ledger_id
        highest = -1
        for b in md.last_ensemble:
            if b in missing:
                continue
            try:
                highest = max(highest, self.bk.bookies.get(b).read_lac(lid).last_entry)
            except BKError:
                continue
        now = time.monotonic()
        seen = self._activity.get(lid)
        if seen is None or seen[0] != highest:
            self._activity[lid] = (highest, now)
            return self.open_ledger_grace_s <= 0
        return now - seen[1] >= self.open_ledger_grace_s

    # ------------------------------------------------------------------ one fragment
    def _replicate_fragment(self, md: LedgerMetadata, af: AffectedFragment, missing: set[str],
                            codec: EntryCodec, key: bytes) -> tuple[int, int]:
        span, index, old = af.span, af.index, af.bookie
        lid = md.ledger_id
        # Step 1: the replacement (placement policy; never one of the ensemble).
        target = self.choose_replacement(span.ensemble, index, md.write_quorum_size,
                                         set(missing) | {old})
        # Step 2: copy the entries the missing bookie held.
        n = nbytes = 0
        if span.last is not None and span.last >= span.first:
            ids = entries_on_index(span.first, span.last, index, md.ensemble_size,
                                   md.write_quorum_size)
            n, nbytes = self._copy(md, codec, key, ids, target)
        # Step 3: one CAS replacing the bookie in this fragment.
        first_end = span.last

        def needs_change(m: LedgerMetadata) -> bool:
            now = {s.first: s for s in fragment_spans(m)}
            s = now.get(span.first)
            if s is None or s.last != first_end:
                raise FragmentChangedError(f"fragment {span.first} of ledger {lid} changed")
            if s.ensemble[index] != old:
                return False  # replaced by someone else meanwhile
            if target in s.ensemble:
                raise FragmentChangedError(f"{target} joined fragment {span.first} meanwhile")
            return True

        try:
            self.bk.metadata_store.update(
                lid, needs_change,
                lambda m: m.with_fragment_bookie_replaced(span.first, index, old, target))
        except NoSuchLedgerError:
            # Deleted while we copied: its deleter never knew the replacement, so the copy
            # is deleted here (leaving the bookie's tombstone), not kept forever.
            self._discard_copy(lid, target, key)
            raise
        log.info("ledger %d: fragment %d: %s replaced by %s (%d entries copied)",
                 lid, span.first, old, target, n)
        return n, nbytes

    def _discard_copy(self, ledger_id: int, target: str, key: bytes) -> None:
        try:
            self.bk.bookies.get(target).delete_ledger(ledger_id, key)
        except NoSuchLedgerError:
            pass
        except BKError as exc:
            log.warning("ledger %d was deleted while re-replicated; its copy on %s stays "
                        "(%s)", ledger_id, target, exc)

    def _copy(self, md: LedgerMetadata, codec: EntryCodec, key: bytes, ids: list[int],
              target: str) -> tuple[int, int]:
        """Read ``ids`` from the survivors (verified) and add them to ``target``."""
        client = self.bk.bookies.get(target)
        sink = _CopySink()
        n = nbytes = 0
        for i in range(0, len(ids), COPY_BATCH):
            chunk = ids[i:i + COPY_BATCH]
            got = fetch_entries(self.bk, md, codec, chunk, key)
            framed = [frame_entry(got[e].SerializeToString()) for e in chunk]
            sink.sent(len(chunk))
            client.send_batch(md.ledger_id, key, framed, chunk, sink, recovery=True)
            n += len(chunk)
            nbytes += sum(len(got[e].payload) for e in chunk)
            if sink.error is not None:
                break
        sink.wait(self.bk.config.client.add_timeout_s + 30)
        self.on_copied(n, nbytes)
        return n, nbytes
