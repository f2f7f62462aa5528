"""``BookKeeper``: the client entry point (create, open, delete, list ledgers)."""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from bk_spark.allocator import tune_allocator
from bk_spark.core.backpressure import AddBudget
from bk_spark.core.client_threads import ClientThreads
from bk_spark.core.context import BookKeeperConfig
from bk_spark.core.ledger import LedgerHandle
from bk_spark.core.reader import ReadHandle
from bk_spark.core.recovery import recover_ledger
from bk_spark.errors import (
    BKError,
    InvalidConfigError,
    NoSuchLedgerError,
    UnauthorizedError,
)
from bk_spark.io.bookie_client import BookieClientPool, TlsOptions
from bk_spark.io.entry import EntryCodec
from bk_spark.io.metadata_store import (
    LedgerMetadataStore,
    ReservedIds,
    Versioned,
    metadata_update_loop,
)
from bk_spark.io.registration import RegisteredBookie, RegistrationCache, RegistrationView
from bk_spark.io.zk import connect_zk
from bk_spark.metadata_uri import parse_metadata_service_uri
from bk_spark.protocol.digest import (
    DigestManager,
    check_password,
    master_key,
    password_bytes,
    password_digest,
)
from bk_spark.protocol.ledger_metadata import DEFAULT_QUORUMS, LedgerMetadata, LedgerState
from bk_spark.protocol.placement import DEFAULT_RACK, Topology
from bk_spark.security import ClientSecurity

log = logging.getLogger(__name__)

DIGEST_TYPES = ("crc32c", "mac", "none")

#: How long :meth:`BookKeeper.close` waits for the adds in flight of each ledger handle
#: left open before it gives up closing it (and sends its final LAC instead).
CLOSE_LEDGER_TIMEOUT_S = 30.0


class Closeable(Protocol):
    """A writer :meth:`BookKeeper.close` closes before its ledgers (a log writer)."""

    @property
    def is_closed(self) -> bool: ...

    def close(self) -> None: ...


class BookKeeper:
    """A connection to one bk-spark cluster (ZooKeeper metadata + bookies).

    >>> with BookKeeper("zk://127.0.0.1:2181/ledgers") as bk:   # doctest: +SKIP
    ...     lh = bk.create_ledger(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2)
    ...     lh.add_entry(b"hello")
    ...     lh.close()
    """

    def __init__(self, metadata_service_uri: str | None = None,
                 config: BookKeeperConfig | None = None, *,
                 tls_ca_cert: str | None = None,
                 security: ClientSecurity | None = None) -> None:
        """``security``: TLS files for bookies and ZooKeeper credentials (default: from the
        environment, :meth:`ClientSecurity.from_env`); ``tls_ca_cert`` overrides its CA.
        A ``config.client.tls`` given explicitly wins over both."""
        self.config = config or BookKeeperConfig()
        security = ClientSecurity.from_env() if security is None else security
        if tls_ca_cert is not None:
            security = replace(security, tls_ca=tls_ca_cert)
        if self.config.client.tls is None and security.tls_ca is not None:
            self.config = replace(self.config, client=replace(
                self.config.client, tls=TlsOptions(
                    Path(security.tls_ca),
                    Path(security.tls_cert) if security.tls_cert else None,
                    Path(security.tls_key) if security.tls_key else None)))
        self.security = security
        if self.config.tune_allocator:
            tune_allocator()
        self.msu = parse_metadata_service_uri(metadata_service_uri)
        self.zk = connect_zk(self.msu, security=security.zk)
        self.metadata_store = LedgerMetadataStore(self.zk, self.msu.root)
        self.bookies = BookieClientPool(self.config.client)
        # The registered bookies under ZooKeeper watches, started at the first placement
        # (a client that only reads never watches them).
        self._registrations: RegistrationCache | None = None
        self._registrations_lock = threading.Lock()
        # The client's own threads, however many ledgers are open (core/client_threads.py),
        # and its bound on the bytes of adds in flight (core/backpressure.py).
        self.threads = ClientThreads()
        self.add_budget = AddBudget(self.config.client.adds_in_flight_max_bytes,
                                    self.config.client.adds_block_when_full)
        self._closed = False
        self._closing = False
        # What close() closes first: the writers (log writers) and the ledger handles
        # opened through this client. Weak: a handle nobody holds has nothing in flight
        # (the callbacks of its requests in flight hold it while it does).
        self._open_lock = threading.Lock()
        self._open_writers: weakref.WeakSet[Closeable] = weakref.WeakSet()
        self._open_ledgers: weakref.WeakSet[LedgerHandle] = weakref.WeakSet()

    # ---------------------------------------------------------------- bookies
    def registration_view(self) -> RegistrationView:
        """The registered bookies (writable and readonly) and their version, from the
        client's registration cache (:class:`RegistrationCache`: kept by ZooKeeper
        watches, no ZooKeeper read while they keep it current)."""
        with self._registrations_lock:
            cache = self._registrations
            if cache is None:
                cache = RegistrationCache(self.zk, self.msu)
                if not self._closed:  # (closed: one read, as the cache is stale)
                    cache.start()
                    self._registrations = cache
        return cache.view()

    def registered_bookies(self) -> list[RegisteredBookie]:
        """The registered bookies, writable first (:meth:`registration_view`)."""
        return list(self.registration_view().bookies)

    def writable_bookies(self) -> list[str]:
        """Registered writable bookies (``<root>/available``) that placement may pick (not
        being decommissioned)."""
        return [b.bookie_id for b in self.registered_bookies() if b.placeable]

    def topology(self) -> Topology:
        """The writable bookies with the racks they registered: what placement decides on.
        A bookie being decommissioned is left out (:mod:`bk_spark.io.registration`). From
        the registration cache: placement reads no registration znode."""
        found = [b for b in self.registered_bookies() if b.placeable]
        return Topology(tuple(b.bookie_id for b in found),
                        {b.bookie_id: str(b.info.get("rack") or DEFAULT_RACK) for b in found},
                        self.config.min_racks_per_write_quorum)

    # ---------------------------------------------------------------- ledgers
    def create_ledger(self, ensemble_size: int = DEFAULT_QUORUMS.ensemble_size,
                      write_quorum_size: int = DEFAULT_QUORUMS.write_quorum_size,
                      ack_quorum_size: int = DEFAULT_QUORUMS.ack_quorum_size,
                      digest: str = "crc32c", password: bytes = b"",
                      custom_metadata: Mapping[str, str] | None = None, *,
                      also_create: Callable[[int], Sequence[tuple[str, bytes]]] | None = None,
                      ids: ReservedIds | None = None) -> LedgerHandle:
        """Create a ledger on ``ensemble_size`` writable bookies and open it for writing.

        Placement reads the registration cache (no ZooKeeper read); the metadata takes two
        ZooKeeper operations, one with ``ids`` (:meth:`LedgerMetadataStore.create`, which
        also creates the znodes ``also_create(ledger_id)`` names in the same transaction).
        """
        LedgerMetadata.validate_quorums(ensemble_size, write_quorum_size, ack_quorum_size)
        if digest not in DIGEST_TYPES:
            raise InvalidConfigError(f"digest must be one of {', '.join(DIGEST_TYPES)}, "
                                     f"got {digest!r}")
        password = password_bytes(password)
        ensemble = tuple(self.topology().choose_ensemble(ensemble_size, write_quorum_size))
        custom = {str(k): str(v) for k, v in (custom_metadata or {}).items()}
        now = int(time.time() * 1000)

        def make(lid: int) -> LedgerMetadata:
            return LedgerMetadata(
                ledger_id=lid, ensemble_size=ensemble_size,
                write_quorum_size=write_quorum_size, ack_quorum_size=ack_quorum_size,
                state=LedgerState.OPEN, last_entry_id=-1, length=0,
                ensembles=((0, ensemble),), digest_type=digest,
                password_digest=password_digest(password), custom_metadata=custom,
                ctime_ms=now)

        md = self.metadata_store.create(make, also_create=also_create, ids=ids)
        lh = LedgerHandle(self, md, password, self._codec(md.value, password),
                          master_key(password))
        with self._open_lock:
            self._open_ledgers.add(lh)
        return lh

    def open_ledger(self, ledger_id: int, password: bytes = b"", recovery: bool = True, *,
                    best_effort_lac: bool = False, confirmed: int = -1,
                    metadata: Versioned[LedgerMetadata] | None = None) -> ReadHandle:
        """Open a ledger for reading.

        ``recovery=True`` (the default, BookKeeper's ``openLedger``) fences a live
        writer and recovers the ledger to CLOSED first; ``recovery=False``
        (``openLedgerNoRecovery``) disturbs no writer and reads up to the LAC, read with
        quorum coverage (:meth:`ReadHandle.read_last_add_confirmed`), or with
        ``best_effort_lac`` from whatever bookies answer
        (:meth:`ReadHandle.try_read_last_add_confirmed`: possibly stale, for tailing).
        ``confirmed`` (with ``recovery=False``): an entry the caller knows is confirmed (a
        planner read a LAC at least this); then no LAC is read
        (:meth:`ReadHandle.confirmed_up_to`): a Spark task reads the slice its planner
        found readable without asking the bookies again. ``metadata`` (with
        ``recovery=False``): the ledger's metadata read already (a planner's, carried in
        a Spark slice), used instead of reading it from ZooKeeper; the password is checked
        against it all the same.
        """
        password = password_bytes(password)
        if metadata is not None and (recovery or metadata.value.ledger_id != ledger_id):
            raise ValueError("metadata: only the same ledger's, opened without recovery")
        md = metadata if metadata is not None else self.metadata_store.read(ledger_id)
        check_password(password, md.value.password_digest, ledger_id)
        codec = self._codec(md.value, password)
        key = master_key(password)
        if recovery:
            md = recover_ledger(self, md, codec, key)
            return ReadHandle(self, md, codec, key)
        rh = ReadHandle(self, md, codec, key)
        if not rh.is_closed:
            if confirmed >= 0:
                rh.confirmed_up_to(confirmed)
            elif best_effort_lac:
                rh.try_read_last_add_confirmed()
            else:
                rh.read_last_add_confirmed()
        return rh

    def recover_ledger(self, ledger_id: int, password: bytes = b"") -> LedgerMetadata:
        """Fence and recover (close) a ledger; returns its CLOSED metadata."""
        return self.open_ledger(ledger_id, password, recovery=True).metadata

    def ledger_metadata(self, ledger_id: int) -> LedgerMetadata:
        return self.metadata_store.read(ledger_id).value

    def list_ledgers(self) -> Iterator[int]:
        """Ids of all ledgers, ascending."""
        return iter(self.metadata_store.list_ledgers())

    def delete_ledger(self, ledger_id: int, password: bytes = b"", *,
                      key: bytes | None = None) -> None:
        """Delete a ledger: its data on every bookie its metadata names, then the metadata
        at the version those bookies were read from (again for bookies named meanwhile).

        ``password`` must be the ledger's: each bookie checks the master key derived from it
        (or an admin certificate) before deleting, and this client checks it first. ``key``:
        the master key itself instead (the offloader's, learnt without the password as
        AutoRecovery learns it): only the bookies check it."""
        md = self.metadata_store.read(ledger_id)
        if key is None:
            password = password_bytes(password)
            check_password(password, md.value.password_digest, ledger_id)
            key = master_key(password)
        done: set[str] = set()

        def delete_data(m: LedgerMetadata) -> LedgerMetadata:
            for b in sorted({b for _first, ens in m.ensembles for b in ens} - done):
                done.add(b)
                try:
                    self.bookies.get(b).delete_ledger(ledger_id, key)
                except NoSuchLedgerError:
                    pass
                except UnauthorizedError:
                    raise  # the bookie holds another key (or refuses this identity): keep all
                except BKError as exc:  # a down bookie's copy is orphaned; its GC cannot know
                    log.warning("ledger %d: could not delete its data on %s: %s", ledger_id,
                                b, exc)
            return m

        def delete_metadata(m: LedgerMetadata, version: int) -> Versioned[LedgerMetadata]:
            self.metadata_store.delete(ledger_id, version)
            return Versioned(m, version)

        # The metadata is deleted at the version whose bookies were emptied (a CAS, through
        # the one update loop): a bookie named meanwhile (a re-replication's replacement,
        # an ensemble change) changes the version, and the loop deletes its copy too
        # instead of orphaning it under metadata that no longer exists.
        metadata_update_loop(read=lambda: self.metadata_store.read(ledger_id),
                             write=delete_metadata, needs_change=lambda m: True,
                             make_change=delete_data, current=md)

    def _codec(self, md: LedgerMetadata, password: bytes) -> EntryCodec:
        return EntryCodec(md.ledger_id, DigestManager(md.digest_type, password))

    # ---------------------------------------------------------------- lifecycle
    @property
    def is_closed(self) -> bool:
        """True once :meth:`close` ran (a cached client must then be made anew)."""
        return self._closed

    def close_with_client(self, writer: Closeable) -> None:
        """Have :meth:`close` close ``writer`` (a log writer opened through this client)
        if it is still open then, before the ledger handles."""
        with self._open_lock:
            self._open_writers.add(writer)

    def close(self) -> None:
        """Close the client, as Pulsar's and Kafka's clients close their producers: no
        acknowledged entry is left unreadable.

        1. Every log writer opened through this client and still open is closed
           (:meth:`LogWriter.close`: it waits for its appends in flight, closes its
           ledger and records its end in the log metadata), so a new reader reads every
           acknowledged append without recovering the log.
        2. Every ledger handle it created and left open is closed as a writer, after
           waiting up to :data:`CLOSE_LEDGER_TIMEOUT_S` for its adds in flight
           (:meth:`LedgerHandle.close_on_client_close`); one that cannot be closed
           (ZooKeeper lost, bookies away) gets its final explicit LAC sent instead, so a
           non-fencing reader still sees its last acknowledged entry. A handle that failed
           or was abandoned is left OPEN (what a crashed writer leaves).
        3. The client's threads are joined (:meth:`ClientThreads.close`: what they had
           scheduled runs first), then the bookie connections and the ZooKeeper session
           are closed.

        Failures of steps 1 and 2 are logged, not raised: the client closes anyway.
        A writer meant to look crashed is abandoned first (:meth:`LedgerHandle.abandon`).
        """
        with self._open_lock:
            if self._closed or self._closing:
                return
            self._closing = True
            writers = [w for w in self._open_writers if not w.is_closed]
            ledgers = [lh for lh in self._open_ledgers if not lh.is_closed]
            self._open_writers.clear()
            self._open_ledgers.clear()
        for w in writers:
            try:
                w.close()
            except Exception as exc:  # noqa: BLE001 - the client closes anyway
                log.warning("closing the client: could not close writer %r: %s",
                            getattr(w, "name", w), exc)
        for lh in sorted(ledgers, key=lambda h: h.id):
            try:
                lh.close_on_client_close(CLOSE_LEDGER_TIMEOUT_S)
            except NoSuchLedgerError:
                pass  # deleted meanwhile (a log writer's unused spare): nothing to close
            except Exception as exc:  # noqa: BLE001 - the client closes anyway
                log.warning("closing the client: could not close ledger %d (its final LAC "
                            "was sent instead): %s", lh.id, exc)
        self._closed = True
        with self._registrations_lock:
            cache, self._registrations = self._registrations, None
        if cache is not None:
            cache.stop()
        self.add_budget.close()
        self.threads.close()
        self.bookies.close()
        self.zk.stop()
        self.zk.close()

    def __enter__(self) -> BookKeeper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


