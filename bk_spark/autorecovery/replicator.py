"""Re-replicating one ledger (BookKeeper's ``LedgerFragmentReplicator``).

For one under-replicated ledger whose lock the caller holds, and each fragment naming a
missing bookie (:func:`~bk_spark.protocol.recovery_plan.affected_fragments`), in the order of
:data:`~bk_spark.protocol.recovery_plan.FRAGMENT_ACTIONS`:

1. Choose a replacement with the placement policy (:mod:`bk_spark.protocol.placement`):
   never a bookie of the fragment's ensemble nor one
   :func:`~bk_spark.protocol.recovery_plan.replacement_exclusions` names (the bookie
   replaced; a live bookie short of another fragment's copies may take this one's).
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

What re-replication copies with (:func:`ledger_secret`): bookies check a ledger's *master
key* on every read and add, and the metadata stores only a digest of the password
(:mod:`bk_spark.protocol.digest`), so the worker learns the key, in this order, from

1. a candidate password whose digest the metadata stores (``--recovery-password``,
   BookKeeper's ``bookieRecoveryPasswd``; the empty password always is one);
2. its own bookie's storage, when the worker runs inside a bookie that holds a copy of the
   ledger (``bk bookie``'s in-process AutoRecovery; nothing crosses the network);
3. a surviving bookie of the ledger, through ``ReadMasterKey``: bookies answer it only to
   a bookie or admin certificate under mutual TLS (``--allow-bookie``), so without mutual
   TLS this step is refused and the ledger waits for a worker of step 2.

With a key but no password, a ``crc32c`` or ``none`` ledger is copied (its digests need no
password: every copy is still verified); a ``mac`` ledger needs its password (step 1).
When no step succeeds the ledger stays marked and :class:`RecoveryKeyUnavailableError` says
why; the worker records that reason where ``bk ledger underreplicated`` shows it.

The key is looked up only by a step that uses it: a copy (step 2 with entries to copy) or
the recovery of an idle open ledger. A fragment that gives the missing bookie no entry (a
ledger closed empty by its writer, which no bookie ever saw, so none holds its key) is
replaced by the metadata change alone, and a fragment its writer still owns is deferred
without one: neither waits for, nor fails for want of, a key nothing needs.

The copy itself, reusable outside AutoRecovery (a bookie's self-repair), is
:func:`copy_entries`: the given entries of a ledger read from its replicas (verified) and
added to one target bookie.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from bk_spark.core.client import BookKeeper
from bk_spark.core.reader import fetch_entries
from bk_spark.core.recovery import recover_ledger
from bk_spark.errors import (
    BKError,
    BKTimeoutError,
    FragmentChangedError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
    RecoveryKeyUnavailableError,
    UnauthorizedError,
)
from bk_spark.io.bookie_client import frame_entry
from bk_spark.io.entry import EntryCodec
from bk_spark.protocol.digest import (
    VERIFIABLE_WITHOUT_PASSWORD,
    DigestManager,
    master_key,
    password_digest,
)
from bk_spark.protocol.ledger_metadata import LedgerMetadata
from bk_spark.protocol.recovery_plan import (
    AffectedFragment,
    FragmentAction,
    affected_fragments,
    bookies_of,
    entries_on_index,
    fragment_action,
    fragment_spans,
    healed_bookies,
    replacement_exclusions,
)

log = logging.getLogger(__name__)

#: Entries read from the survivors and added to the replacement per batch.
COPY_BATCH = 1000


@dataclass
class ReplicationResult:
    """What one pass over a ledger did."""

    ledger_id: int
    replaced: set[str] = field(default_factory=set)   # missing bookies no longer named
    deferred: bool = False                            # an open last fragment waits
    entries: int = 0
    bytes: int = 0


def matching_password(md: LedgerMetadata, passwords: Sequence[bytes]) -> bytes | None:
    """The candidate password whose digest the ledger's metadata stores, or None."""
    for p in passwords:
        if password_digest(p) == md.password_digest:
            return p
    return None


def ledger_password(md: LedgerMetadata, passwords: Sequence[bytes]) -> bytes:
    """The candidate password whose digest the ledger's metadata stores (or raise)."""
    p = matching_password(md, passwords)
    if p is None:
        raise RecoveryKeyUnavailableError(
            f"ledger {md.ledger_id}: none of the {len(passwords)} recovery passwords "
            f"matches: start autorecovery with --recovery-password set to the ledger's "
            f"password")
    return p


#: Reads the master key a local bookie stored with a ledger (NoSuchLedgerError: none).
LocalKeySource = Callable[[int], bytes]


@dataclass(frozen=True)
class LedgerSecret:
    """What re-replication copies a ledger with: the master key bookies check, the password
    when a candidate matched (None: only the key is known), and where it came from."""

    key: bytes = field(repr=False)
    password: bytes | None = field(repr=False)
    source: str  # "password" | "local bookie" | "<bookie id>"

    def codec(self, md: LedgerMetadata) -> EntryCodec:
        """The entry codec verifying the ledger's digests (the key suffices for a digest of
        :data:`VERIFIABLE_WITHOUT_PASSWORD`)."""
        return EntryCodec(md.ledger_id, DigestManager(md.digest_type, self.password or b""))


def ledger_secret(bk: BookKeeper, md: LedgerMetadata, passwords: Sequence[bytes], *,
                  local_key: LocalKeySource | None = None,
                  missing: set[str] | frozenset[str] = frozenset()) -> LedgerSecret:
    """The ledger's master key (and password if known), by the three steps of the module
    docstring; :class:`RecoveryKeyUnavailableError` names what is missing."""
    lid = md.ledger_id
    password = matching_password(md, passwords)
    if password is not None:  # step 1
        return LedgerSecret(master_key(password), password, "password")
    no_password = (f"ledger {lid}: none of the {len(passwords)} recovery passwords matches "
                   f"its password")
    if md.digest_type not in VERIFIABLE_WITHOUT_PASSWORD:
        raise RecoveryKeyUnavailableError(
            f"{no_password}, and its {md.digest_type!r} digests can be verified only with "
            f"it: start autorecovery with --recovery-password set to the ledger's password")
    why: list[str] = []
    if local_key is not None:  # step 2
        try:
            return LedgerSecret(local_key(lid), None, "local bookie")
        except NoSuchLedgerError:
            why.append("this worker's bookie holds no copy")
    for b in sorted(bookies_of(md) - set(missing)):  # step 3
        try:
            return LedgerSecret(bk.bookies.get(b).read_master_key(lid), None, b)
        except UnauthorizedError:
            why.append(f"{b} answers ReadMasterKey to bookie certificates only")
        except BKError as exc:
            why.append(f"{b}: {type(exc).__name__}")
    tried = "; ".join(why) or "no surviving bookie"
    raise RecoveryKeyUnavailableError(
        f"{no_password} and no master key was found ({tried}): a worker inside a bookie "
        f"holding a copy heals it (bk bookie runs one), "
        f"or run the bookies with mutual TLS and this worker's certificate in "
        f"--allow-bookie, or pass --recovery-password")


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
    ``on_copied(entries, bytes)`` feeds the metrics; ``local_key`` reads the master key of
    a ledger the worker's own bookie holds (step 2 of :func:`ledger_secret`).
    """

    def __init__(self, bk: BookKeeper, *, passwords: Sequence[bytes] = (b"",),
                 open_ledger_grace_s: float = 30.0,
                 choose_replacement: Callable[[Sequence[str], int, int, set[str]], str]
                 | None = None,
                 on_copied: Callable[[int, int], None] | None = None,
                 local_key: LocalKeySource | None = None) -> None:
        self.bk = bk
        self.passwords = list(passwords) or [b""]
        self.local_key = local_key
        self.open_ledger_grace_s = open_ledger_grace_s
        self.choose_replacement = choose_replacement or self._placement_replacement
        self.on_copied = on_copied or (lambda n, b: None)
        # ledger id -> (highest entry seen on its last fragment, since when unchanged)
        self._activity: dict[int, tuple[int, float]] = {}

    def _placement_replacement(self, ensemble: Sequence[str], index: int,
                               write_quorum_size: int, exclude: set[str]) -> str:
        return self.bk.topology().replace_bookie(ensemble, index, write_quorum_size,
                                                 exclude=exclude)

    def holds_copy(self, ledger_id: int) -> bool:
        """Whether the worker's own bookie holds a copy of the ledger (so its key: step 2 of
        :func:`ledger_secret`); False for a worker outside a bookie."""
        if self.local_key is None:
            return False
        try:
            self.local_key(ledger_id)
            return True
        except BKError:
            return False

    def watch_metadata(self, ledger_id: int, callback: Callable[[object], None]
                       ) -> Callable[[], None]:
        """Call ``callback`` with the ledger's metadata now and after every change (on
        kazoo's event thread); returns the function that stops it (the worker's early
        retry of a failed ledger)."""
        return self.bk.metadata_store.watch(ledger_id, callback)

    # ------------------------------------------------------------------ placement first
    def check_replaceable(self, md: LedgerMetadata, missing: set[str]) -> None:
        """Raise :class:`NotEnoughBookiesError` naming the placement constraint when some
        fragment of ``md`` naming a bookie of ``missing`` has no possible replacement now
        (step 1 for every fragment, before anything is copied or marked: ``bk recover``
        fails fast and changes nothing)."""
        for af in affected_fragments(md, missing):
            try:
                self.choose_replacement(af.span.ensemble, af.index, md.write_quorum_size,
                                        replacement_exclusions(af))
            except NotEnoughBookiesError as exc:
                raise NotEnoughBookiesError(
                    f"ledger {md.ledger_id}, fragment from entry {af.span.first}: {exc} "
                    f"(placement's constraint: a replacement is a registered writable "
                    f"bookie, not readonly nor decommissioning, outside the fragment's "
                    f"ensemble). Nothing was changed") from None

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

        @functools.cache
        def secret() -> LedgerSecret:
            return ledger_secret(self.bk, md.value, self.passwords, local_key=self.local_key,
                                 missing=missing)

        try:
            self._replicate_rounds(ledger_id, missing, result, secret)
        except NoSuchLedgerError:
            if self.bk.metadata_store.exists(ledger_id):
                raise
            result.replaced = set(missing)  # deleted meanwhile: nothing left to replicate
        return result

    def _replicate_rounds(self, ledger_id: int, missing: set[str], result: ReplicationResult,
                          secret: Callable[[], LedgerSecret]) -> None:
        """The rounds of steps 1-3; ``secret()`` is asked only by a step that needs the key
        (a copy, a recovery): see "What re-replication copies with".

        A live missing bookie may be chosen (registered and writable) as the replacement in
        another fragment (:func:`replacement_exclusions`), where it receives a full copy:
        that fragment is no longer affected by it (``placed``), and a missing bookie named
        only where it was placed is *done* (:func:`healed_bookies`). A fragment
        with no replacement now (:class:`NotEnoughBookiesError`) does not stop the others:
        replacing them may free a candidate for it in the next round (with E + 1 bookies, a
        bookie lacking entries and a wiped bookie in one ensemble: the first one's
        replacement is the only bookie outside it, and only once the first one is done may
        it take the second one's place). It is raised once no round makes progress."""
        done: set[str] = set()
        placed: set[tuple[int, str]] = set()  # (fragment's first entry, bookie put there)
        unplaceable: NotEnoughBookiesError | None = None
        for _round in range(1000):
            m = self.bk.metadata_store.read(ledger_id).value
            done |= healed_bookies(m, missing, placed)
            still = set(missing) - done
            todo = affected_fragments(m, still, placed)
            if not todo:
                unplaceable = None
                break
            progressed = False
            unplaceable = None
            for af in todo:
                action = fragment_action(m.state, af.span.is_last,
                                         af.span.is_last and self._writer_idle(m, missing))
                if action == FragmentAction.DEFER:
                    result.deferred = True
                    continue
                if action == FragmentAction.RECOVER_FIRST:
                    log.info("ledger %d: writer idle for %.0fs, recovering it before "
                             "re-replication", ledger_id, self.open_ledger_grace_s)
                    s = secret()
                    current = self.bk.metadata_store.read(ledger_id)
                    recover_ledger(self.bk, current, s.codec(current.value), s.key)
                    self._activity.pop(ledger_id, None)
                    progressed = True
                    break  # the ledger is CLOSED now: decide again from its metadata
                try:
                    target, n, nbytes = self._replicate_fragment(m, af, secret)
                except FragmentChangedError as exc:
                    log.info("ledger %d: %s; starting the fragment again", ledger_id, exc)
                    progressed = True
                    break
                except NotEnoughBookiesError as exc:
                    unplaceable = exc  # the others first: they may free a candidate
                    continue
                placed.add((af.span.first, target))
                result.entries += n
                result.bytes += nbytes
                progressed = True
            if not progressed:
                break
        final = self.bk.metadata_store.read(ledger_id).value
        result.replaced = done | healed_bookies(final, missing, placed)
        if unplaceable is not None:
            raise unplaceable

    def no_longer_named(self, ledger_id: int, missing: set[str]) -> set[str]:
        """The bookies of ``missing`` no fragment of the ledger names now (all of them once
        it is deleted): what a failed attempt still achieved (the worker clears them)."""
        try:
            return set(missing) - bookies_of(self.bk.metadata_store.read(ledger_id).value)
        except NoSuchLedgerError:
            return set(missing)

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
    def _replicate_fragment(self, md: LedgerMetadata, af: AffectedFragment,
                            secret: Callable[[], LedgerSecret]) -> tuple[str, int, int]:
        """Steps 1-3 for one fragment: ``(the replacement, entries, bytes copied)``."""
        span, index, old = af.span, af.index, af.bookie
        lid = md.ledger_id
        # Step 1: the replacement (placement policy; never one of the ensemble).
        target = self.choose_replacement(span.ensemble, index, md.write_quorum_size,
                                         replacement_exclusions(af))
        # Step 2: copy the entries the missing bookie held (none: no key is needed).
        n = nbytes = 0
        ids: list[int] = []
        if span.last is not None and span.last >= span.first:
            ids = entries_on_index(span.first, span.last, index, md.ensemble_size,
                                   md.write_quorum_size)
        if ids:
            s = secret()
            n, nbytes = self._copy(md, s.codec(md), s.key, ids, target)
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
            if ids:
                self._discard_copy(lid, target, secret().key)
            raise
        log.info("ledger %d: fragment %d: %s replaced by %s (%d entries copied)",
                 lid, span.first, old, target, n)
        return target, n, nbytes

    def _discard_copy(self, ledger_id: int, target: str, key: bytes) -> None:
        try:
            self.bk.bookies.get(target).delete_ledger(ledger_id, key)
        except NoSuchLedgerError:
            pass
        except BKError as exc:
            log.warning("ledger %d was deleted while re-replicated; its copy on %s stays "
                        "(%s)", ledger_id, target, exc)

    def _copy(self, md: LedgerMetadata, codec: EntryCodec, key: bytes, ids: list[int],
              target: str, store: LocalStore | None = None) -> tuple[int, int]:
        n, nbytes = copy_entries(self.bk, md, codec, key, ids, target, store)
        self.on_copied(n, nbytes)
        return n, nbytes


#: Stores a copied batch where it is being copied to, without the network: ``store(ledger_id,
#: master_key, entries, done)`` with entries ``(entry_id, lac, payload, digest)``, recovery
#: adds; ``done(err)`` once they are durable (a bookie's own storage:
#: ``BookieStorage.add_entries_then``, for its self-repair).
LocalStore = Callable[[int, bytes, list[tuple[int, int, bytes, bytes]],
                       Callable[[BKError | None], None]], None]


def copy_entries(bk: BookKeeper, md: LedgerMetadata, codec: EntryCodec, key: bytes,
                 entry_ids: Sequence[int], target: str, store: LocalStore | None = None
                 ) -> tuple[int, int]:
    """Copy ``entry_ids`` of ledger ``md`` to bookie ``target``: read them from their write
    sets (every copy digest-verified by ``codec``, failing over per entry), add them to
    ``target`` in batched recovery adds with master key ``key``, and return once every add
    is stored: ``(entries, payload bytes)``. The metadata is not changed: until the caller
    names ``target`` in it, the copy counts for nothing (step 2 of the module docstring).

    ``store``: ``target`` is the calling process's own bookie (self-repair), and the
    batches go straight into its storage, as the same recovery adds, instead of through its
    own gRPC service (one process, one GIL: the loop back cost a third of the copy)."""
    client = bk.bookies.get(target) if store is None else None
    sink = _CopySink()
    ids = list(entry_ids)
    n = nbytes = 0
    for i in range(0, len(ids), COPY_BATCH):
        chunk = ids[i:i + COPY_BATCH]
        got = fetch_entries(bk, md, codec, chunk, key)
        sink.sent(len(chunk))
        if store is not None:
            entries = [(x.entry_id, x.lac, x.payload, x.digest)
                       for x in map(got.__getitem__, chunk)]
            try:
                store(md.ledger_id, key, entries, lambda err, t=chunk: sink.on_added(t, err))
            except BKError as exc:  # refused before anything was written
                sink.on_added(chunk, exc)
        else:
            assert client is not None
            framed = [frame_entry(got[e].SerializeToString()) for e in chunk]
            client.send_batch(md.ledger_id, key, framed, chunk, sink, recovery=True)
        n += len(chunk)
        nbytes += sum(len(got[e].payload) for e in chunk)
        if sink.error is not None:
            break
    sink.wait(bk.config.client.add_timeout_s + 30)
    return n, nbytes
