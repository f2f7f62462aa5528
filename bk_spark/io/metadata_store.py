"""The metadata store recipe: versioned reads, compare-and-swap writes, one update loop.

The seed keeps ledger metadata in ZooKeeper "which provides a compare-and-swap (CAS)
operation": every change is a write conditioned on the version that was read, and a lost
race is never an error to guess around but a reason to re-read and decide again. That
decision lives in exactly one place, :func:`metadata_update_loop` (BookKeeper's
``MetadataUpdateLoop``); callers only say whether the value needs a change and how to make
it. :class:`LedgerMetadataStore` is the ZooKeeper adapter for ledger metadata (a recipe in
kazoo's style: its kazoo client is passed in and owned by the caller).

ZooKeeper layout under the metadata service root (``<root>``, e.g. ``/ledgers``)::

    <root>/ledgers/DDD/DDDD/DDDD/DDDD/LDDDD   ledger metadata (JSON), the 19-digit ledger id
                                              split like BookKeeper's long hierarchical
                                              layout: at most 10,000 children per znode
    <root>/idgen/HHHHHHHHHH/ID-SSSSSSSSSS     ledger id generator (transient ephemeral
                                              sequential znodes, deleted after use)

A znode's children list is read in one response (at most ~1 MiB), so a flat directory of
ledgers stops being listable long before 100,000 ledgers; the hierarchy keeps every list
small.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import DataWatch

from bk_spark.errors import (
    MetadataSerializationError,
    MetadataStoreError,
    MetadataVersionError,
    NoSuchLedgerError,
)
from bk_spark.io.zk import delete_if_present
from bk_spark.protocol.ledger_metadata import MAX_LEDGER_ID, LedgerMetadata

log = logging.getLogger(__name__)

T = TypeVar("T")

#: How many conflicting writes :func:`metadata_update_loop` tolerates before giving up.
DEFAULT_MAX_ATTEMPTS = 100


@dataclass(frozen=True)
class Versioned(Generic[T]):
    """A value read from (or written to) the metadata store with its store version."""

    value: T
    version: int


def metadata_update_loop(
    read: Callable[[], Versioned[T]],
    write: Callable[[T, int], Versioned[T]],
    needs_change: Callable[[T], bool],
    make_change: Callable[[T], T],
    current: Versioned[T] | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> Versioned[T]:
    """Change a stored value with compare-and-swap; the one place every CAS goes through.

    The steps (BookKeeper's ``MetadataUpdateLoop``):

    1. Start from ``current`` (the caller's local copy), or ``read()`` it if none.
    2. If ``needs_change(value)`` is false, return the value as it is: nothing is written.
       (After a lost race this is how a caller learns that someone else already made the
       change, e.g. another closer closed the ledger.)
    3. ``new = make_change(value)``: a new value, never a mutation. It may raise to abort
       the update (e.g. the writer sees the ledger IN_RECOVERY and must stop): the
       exception propagates and nothing is written.
    4. ``write(new, version)``: a compare-and-swap against the version of step 1.
    5. On success, return the written value with its new version.
    6. On a version conflict (:class:`MetadataVersionError`), ``read()`` the value again and
       go back to step 2 with it.

    ``needs_change`` and ``make_change`` must decide from the value alone, because they run
    again on every value re-read. After ``max_attempts`` conflicting writes the loop raises
    :class:`MetadataVersionError`. Each conflict means another client's write succeeded, so
    the loop as a whole always makes progress.
    """
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
    if current is None:
        current = read()
    attempts = 0
    while True:
        if not needs_change(current.value):
            return current
        if attempts >= max_attempts:
            raise MetadataVersionError(
                f"metadata update gave up after {attempts} conflicting writes: other clients "
                f"keep changing the same metadata; retry later"
            )
        new_value = make_change(current.value)
        attempts += 1
        try:
            return write(new_value, current.version)
        except MetadataVersionError:
            current = read()


@dataclass(frozen=True)
class IdReservation:
    """A ledger id taken from ZooKeeper's sequence before its ledger is created, and the
    ephemeral sequential znode that holds it (:meth:`LedgerMetadataStore.reserve_id`)."""

    ledger_id: int
    path: str


class ReservedIds:
    """The next ledger id of a caller that creates ledgers one after another (a log
    writer's spare ledgers), reserved by the transaction that created the previous one, so
    that creating a ledger is one ZooKeeper operation. Give an unused one back with
    :meth:`LedgerMetadataStore.release` (else its znode goes with the session)."""

    def __init__(self) -> None:
        self.next: IdReservation | None = None


def ledger_path(root: str, ledger_id: int) -> str:
    """The znode of a ledger's metadata: ``<root>/ledgers/DDD/DDDD/DDDD/DDDD/LDDDD``."""
    if not 0 <= ledger_id <= MAX_LEDGER_ID:
        raise ValueError(f"ledger id {ledger_id} outside [0, 2^63)")
    s = f"{ledger_id:019d}"
    return f"{root}/ledgers/{s[:3]}/{s[3:7]}/{s[7:11]}/{s[11:15]}/L{s[15:]}"


_BUCKET_DIGITS = (3, 4, 4, 4)
_LEAF = re.compile(r"L\d{4}")


class LedgerMetadataStore:
    """Ledger metadata in ZooKeeper: create, versioned read, CAS write, update, list, delete.

    ``zk`` is a started kazoo client owned by the caller; ``root`` the metadata service
    root (``MetadataServiceUri.root``). Reads and writes go through the client's retry
    policy: a CAS retried after a connection loss may report a conflict for its own
    successful write, which :meth:`update` resolves by re-reading (step 2 of the loop).
    """

    #: Low bits of a ledger id taken from a ZooKeeper sequence number (a signed 32-bit
    #: counter); the high bits number the id generation. Must be the same for every client.
    ID_LOW_BITS: ClassVar[int] = 31

    def __init__(self, zk: KazooClient, root: str) -> None:
        self._zk = zk
        self.root = root.rstrip("/")
        self.ledgers_path = f"{self.root}/ledgers"
        self.idgen_path = f"{self.root}/idgen"
        self._generation: int | None = None
        self._generation_lock = threading.Lock()

    def ledger_path(self, ledger_id: int) -> str:
        return ledger_path(self.root, ledger_id)

    # -- ledger ids ------------------------------------------------------------------------

    def _latest_generation(self) -> int:
        try:
            children = self._zk.retry(self._zk.get_children, self.idgen_path)
        except NoNodeError:
            return 0
        return max((int(c) for c in children if c.isdigit()), default=0)

    def _id_prefix(self, generation: int) -> str:
        return f"{self.idgen_path}/{generation:010d}/ID-"

    def _reservation(self, generation: int, path: str) -> IdReservation | None:
        """The id a sequential znode ``path`` of ``generation`` gives (None: the sequence
        left the generation's range, see :meth:`reserve_id`)."""
        sequence = int(path[len(self._id_prefix(generation)):])
        if not 0 <= sequence < 1 << self.ID_LOW_BITS:
            return None
        return IdReservation(generation << self.ID_LOW_BITS | sequence, path)

    def reserve_id(self) -> IdReservation:
        """A new 64-bit ledger id, unique and increasing across all clients, held by an
        ephemeral sequential znode until the ledger is created (:meth:`create` deletes it
        in the transaction that creates the ledger) or :meth:`release`.

        id = generation << ID_LOW_BITS | sequence, where sequence is the number ZooKeeper
        gives an ephemeral sequential znode under ``<root>/idgen/<generation>``. Ids are
        unique and increasing in the order they were reserved, not necessarily consecutive.
        The counter is a signed 32-bit int: once it leaves [0, 2^ID_LOW_BITS) the generation
        is used up and every client moves to the next one (BookKeeper's
        ``LongZkLedgerIdGenerator`` does the same with its high-order-bits znodes).
        """
        with self._generation_lock:
            generation = self._generation
        if generation is None:
            generation = self._latest_generation()
        while True:
            path = self._zk.retry(self._zk.create, self._id_prefix(generation), b"",
                                  ephemeral=True, sequence=True, makepath=True)
            reservation = self._reservation(generation, path)
            if reservation is not None:
                with self._generation_lock:
                    self._generation = max(self._generation or 0, generation)
                return reservation
            self._delete_quietly(path)
            generation = max(generation + 1, self._latest_generation())
            if generation << self.ID_LOW_BITS > MAX_LEDGER_ID:
                raise MetadataStoreError("the ledger id space is exhausted")
            self._zk.retry(self._zk.ensure_path, f"{self.idgen_path}/{generation:010d}")

    def release(self, ids: ReservedIds) -> None:
        """Give back the id ``ids`` holds (its znode deleted; the id is never used)."""
        reservation, ids.next = ids.next, None
        if reservation is not None:
            self._delete_quietly(reservation.path)

    def _delete_quietly(self, path: str) -> None:
        delete_if_present(self._zk, path)

    # -- one ledger ------------------------------------------------------------------------

    def create(self, make: Callable[[int], LedgerMetadata], *,
               also_create: Callable[[int], Sequence[tuple[str, bytes]]] | None = None,
               ids: ReservedIds | None = None) -> Versioned[LedgerMetadata]:
        """Store the metadata ``make(ledger_id)`` of a new ledger under a fresh unique id.

        Two ZooKeeper operations: the id's reservation (:meth:`reserve_id`), then one
        transaction that creates the metadata znode, the znodes ``also_create(ledger_id)``
        names (e.g. a log's pending record of the ledger: both exist or neither) and
        deletes the reservation. With ``ids`` (a caller creating ledgers one after another:
        a log writer's spares) the id is the one ``ids`` holds, and the same transaction
        reserves the next one into it: one operation per ledger after the first.
        """
        reservation = ids.next if ids is not None else None
        if ids is not None:
            ids.next = None
        if reservation is None:
            reservation = self.reserve_id()
        ledger_id = reservation.ledger_id
        metadata = make(ledger_id)
        if metadata.ledger_id != ledger_id:
            raise ValueError(f"make({ledger_id}) returned metadata of ledger {metadata.ledger_id}")
        data = metadata.to_bytes()
        path = self.ledger_path(ledger_id)
        creates = [(path, data), *(also_create(ledger_id) if also_create else ())]
        generation = ledger_id >> self.ID_LOW_BITS
        next_prefix = self._id_prefix(generation) if ids is not None else None

        def commit() -> list[Any]:
            t = self._zk.transaction()
            for p, d in creates:
                t.create(p, d)
            t.delete(reservation.path)
            if next_prefix is not None:
                t.create(next_prefix, b"", ephemeral=True, sequence=True)
            return t.commit()

        made: list[str] = []  # parents created for a first ledger of a bucket
        while True:
            results = self._zk.retry(commit)
            failed = [(i, r) for i, r in enumerate(results)
                      if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
            if not failed:
                break
            i, err = failed[0]
            if isinstance(err, NoNodeError) and i < len(creates) and \
                    creates[i][0] not in made:
                made.append(creates[i][0])  # a new bucket (or directory): make it, again
                self._zk.retry(self._zk.ensure_path, creates[i][0].rsplit("/", 1)[0])
                continue
            if isinstance(err, NodeExistsError) and i == 0:
                # A transaction retried after a connection loss finds its own znode (its
                # first attempt deleted the reservation; the next one it made, if any, is
                # left to the session's end).
                existing, stat = self._zk.retry(self._zk.get, path)
                if existing != data:
                    raise MetadataStoreError(
                        f"ledger id {ledger_id} is already in use: was {self.idgen_path} "
                        f"deleted or reset?") from None
                return Versioned(metadata, stat.version)
            if isinstance(err, NoNodeError) and i == len(creates):
                # the reserved id's znode went with a lost session: take a fresh id
                return self.create(make, also_create=also_create, ids=ids)
            where = creates[i][0] if i < len(creates) else reservation.path
            raise MetadataStoreError(
                f"creating ledger {ledger_id} failed at {where}: {type(err).__name__}")
        if next_prefix is not None and ids is not None:
            ids.next = self._reservation(generation, results[-1])
            if ids.next is None:  # the generation is used up: the next create moves on
                self._delete_quietly(results[-1])
        return Versioned(metadata, 0)

    def _decode(self, ledger_id: int, data: bytes, stat: ZnodeStat) -> Versioned[LedgerMetadata]:
        metadata = LedgerMetadata.from_bytes(data)
        if metadata.ledger_id != ledger_id:
            raise MetadataSerializationError(
                f"znode {self.ledger_path(ledger_id)} holds the metadata of ledger "
                f"{metadata.ledger_id}"
            )
        return Versioned(metadata, stat.version)

    def read(self, ledger_id: int) -> Versioned[LedgerMetadata]:
        """The metadata of ``ledger_id`` with its version (:class:`NoSuchLedgerError`)."""
        try:
            data, stat = self._zk.retry(self._zk.get, self.ledger_path(ledger_id))
        except NoNodeError:
            raise NoSuchLedgerError(f"ledger {ledger_id} does not exist") from None
        return self._decode(ledger_id, data, stat)

    def write(self, metadata: LedgerMetadata, version: int) -> Versioned[LedgerMetadata]:
        """Compare-and-swap: store ``metadata`` if the stored version is still ``version``.

        Raises :class:`MetadataVersionError` if someone else wrote it since (re-read and
        decide again: use :meth:`update`), :class:`NoSuchLedgerError` if it was deleted.
        """
        if version < 0:
            raise ValueError("every metadata write is a compare-and-swap: pass the version read")
        ledger_id = metadata.ledger_id
        try:
            stat = self._zk.retry(
                self._zk.set, self.ledger_path(ledger_id), metadata.to_bytes(), version=version
            )
        except BadVersionError:
            raise MetadataVersionError(
                f"ledger {ledger_id}: metadata changed since version {version} (another "
                f"client wrote it): re-read it and decide again"
            ) from None
        except NoNodeError:
            raise NoSuchLedgerError(f"ledger {ledger_id} does not exist") from None
        return Versioned(metadata, stat.version)

    def update(
        self,
        ledger_id: int,
        needs_change: Callable[[LedgerMetadata], bool],
        make_change: Callable[[LedgerMetadata], LedgerMetadata],
        current: Versioned[LedgerMetadata] | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    ) -> Versioned[LedgerMetadata]:
        """Change the metadata of ``ledger_id`` through :func:`metadata_update_loop`."""
        if current is not None and current.value.ledger_id != ledger_id:
            raise ValueError(f"current holds ledger {current.value.ledger_id}, not {ledger_id}")
        return metadata_update_loop(
            read=lambda: self.read(ledger_id),
            write=self.write,
            needs_change=needs_change,
            make_change=make_change,
            current=current,
            max_attempts=max_attempts,
        )

    def delete(self, ledger_id: int, version: int = -1) -> None:
        """Delete the metadata of ``ledger_id`` (only at ``version`` unless it is -1)."""
        try:
            self._zk.retry(self._zk.delete, self.ledger_path(ledger_id), version=version)
        except BadVersionError:
            raise MetadataVersionError(
                f"ledger {ledger_id}: metadata changed since version {version}: re-read it"
            ) from None
        except NoNodeError:
            raise NoSuchLedgerError(f"ledger {ledger_id} does not exist") from None

    def exists(self, ledger_id: int) -> bool:
        return self._zk.retry(self._zk.exists, self.ledger_path(ledger_id)) is not None

    def watch(
        self, ledger_id: int, callback: Callable[[Versioned[LedgerMetadata] | None], None]
    ) -> Callable[[], None]:
        """Call ``callback`` with the current metadata now and after every change.

        ``callback(None)`` means the ledger does not exist (or was deleted). Runs on kazoo's
        event thread: keep it short. Returns a function that stops the watch (it takes
        effect at the next change).
        """
        stopped = threading.Event()

        def on_change(data: bytes | None, stat: ZnodeStat | None) -> bool | None:
            if stopped.is_set():
                return False
            if stat is None or data is None:
                callback(None)
                return None
            try:
                versioned = self._decode(ledger_id, data, stat)
            except MetadataSerializationError:
                log.exception("ledger %d: undecodable metadata change ignored", ledger_id)
                return None
            callback(versioned)
            return None

        DataWatch(self._zk, self.ledger_path(ledger_id), on_change)
        return stopped.set

    # -- all ledgers -----------------------------------------------------------------------

    def list_ledgers(self) -> Iterator[int]:
        """Every ledger id, ascending (lazily: one bucket at a time)."""
        return list_ledger_ids(self._zk, self.ledgers_path)


def list_ledger_ids(zk: KazooClient, ledgers_path: str) -> Iterator[int]:
    """The ledger ids of a hierarchy laid out like :func:`ledger_path` under
    ``ledgers_path``, ascending (lazily: one bucket at a time)."""

    def children(path: str) -> list[str]:
        try:
            return zk.retry(zk.get_children, path)
        except NoNodeError:
            return []

    def walk(path: str, prefix: str, level: int) -> Iterator[int]:
        if level == len(_BUCKET_DIGITS):
            for leaf in sorted(c for c in children(path) if _LEAF.fullmatch(c)):
                yield int(prefix + leaf[1:])
            return
        digits = _BUCKET_DIGITS[level]
        buckets = sorted(c for c in children(path) if len(c) == digits and c.isdigit())
        for bucket in buckets:
            yield from walk(f"{path}/{bucket}", prefix + bucket, level + 1)

    return walk(ledgers_path, "", 0)
