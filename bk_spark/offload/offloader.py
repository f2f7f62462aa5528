"""The offloader: the protocol's four steps for one ledger (:func:`offload_ledger`), the
deletion lag (:func:`drop_bookie_copy`), and the elected :class:`Offloader` that applies
every log's policy (one per cluster, elected like the Auditor).

Theory of operation: see :mod:`bk_spark.protocol.offload_rules`. Every change of a ledger's
offload state is a CAS of the log's metadata through :func:`bk_spark.log.store.update_log`
(the one update loop); each ``needs_change`` re-checks, on every value re-read, that the
ledger is still listed and its state is still the one this step started from, so a
truncation, a deletion or another offloader's attempt in between makes the step stop
(and remove what it wrote) instead of overwriting.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa

from bk_spark.autorecovery.replicator import (
    VERIFIABLE_WITHOUT_PASSWORD,
    LedgerSecret,
    LocalKeySource,
    ledger_secret,
)
from bk_spark.core.reader import ReadHandle
from bk_spark.errors import (
    BKError,
    InvalidConfigError,
    LogNotFoundError,
    MetadataSerializationError,
    NoSuchLedgerError,
    RecoveryKeyUnavailableError,
)
from bk_spark.io import offload_files as files
from bk_spark.io import offload_status as claims
from bk_spark.io.election import run_elected
from bk_spark.io.entry_batches import ledger_batches
from bk_spark.io.offload_status import write_failing
from bk_spark.log.admin import list_logs
from bk_spark.log.store import log_store, update_log
from bk_spark.log.view import LogView
from bk_spark.offload.metrics import OffloadMetrics
from bk_spark.protocol import offload_rules as rules
from bk_spark.protocol.digest import master_key
from bk_spark.protocol.ledger_metadata import MAX_METADATA_BYTES, LedgerState
from bk_spark.protocol.log_format import LedgerInfo, LogMetadata, now_ms
from bk_spark.protocol.replication_retry import warn_of_failure

if TYPE_CHECKING:
    from bk_spark.core.client import BookKeeper

log = logging.getLogger(__name__)
T = TypeVar("T")

#: A log still failing is warned of again once its failures reach this many seconds
#: (then at debug level: ``bk offload status`` shows the reason).
_WARN_AGAIN_S = 300.0


def election_path(root: str) -> str:
    return f"{root.rstrip('/')}/offloader/election"


def _listed(view_md: LogMetadata, store_view: LogView, ledger_id: int) -> bool:
    return store_view.refreshed(view_md).index_of_ledger(ledger_id) is not None


def offload_secret(bk: BookKeeper, ledger_id: int, passwords: Sequence[bytes],
                   local_key: LocalKeySource | None = None) -> LedgerSecret:
    """What the offloader reads and deletes a closed ledger with, learnt as AutoRecovery
    learns it (:func:`~bk_spark.autorecovery.replicator.ledger_secret`, its one home): a
    candidate password (``bk offloader --password``, ``bk bookie --recovery-password``),
    the key the offloader's own bookie stored with the ledger (``bk bookie --offload``), or
    a bookie's ``ReadMasterKey`` under mutual TLS. A ledger closed empty needs none (no
    bookie holds it, so none holds its key): its placeholder key only deletes nothing.
    :class:`RecoveryKeyUnavailableError` names what to set."""
    md = bk.ledger_metadata(ledger_id)
    if md.state == LedgerState.CLOSED and md.last_entry_id < 0:
        return LedgerSecret(master_key(b""), None, "empty ledger")
    try:
        return ledger_secret(bk, md, passwords, local_key=local_key)
    except RecoveryKeyUnavailableError as exc:
        raise RecoveryKeyUnavailableError(
            f"{exc} (the offloader's passwords: bk offloader --password, bk bookie "
            f"--recovery-password)") from None


def open_closed_ledger(bk: BookKeeper, ledger_id: int, secret: LedgerSecret) -> ReadHandle:
    """A closed ledger opened for reading with ``secret`` (its password, or only its key:
    a ``crc32c``/``none`` ledger's digests are still verified)."""
    md = bk.metadata_store.read(ledger_id)
    return ReadHandle(bk, md, secret.codec(md.value), secret.key)


def ledger_rows(bk: BookKeeper, name: str, md: LogMetadata, info: LedgerInfo,
                secret: LedgerSecret) -> tuple[pa.Schema, Iterator[pa.RecordBatch], int]:
    """The schema, rows and entry count of one closed ledger as stored in Parquet: the
    ``bookkeeper`` source's rows of the ledger with the position columns
    (:func:`bk_spark.io.entry_batches.ledger_batches`: packed fetches decoded in bulk, an
    arrow entry's record batch as it is, no row-by-row Python), streamed as fetched.
    ``secret``: what it is read with (:func:`offload_secret`)."""
    from bk_spark.datasource import formats  # pyspark types: only for the schemas

    fmt = formats.log_format(md.properties, True)
    last = info.last_entry_id if info.last_entry_id is not None else -1
    if fmt != "arrow":
        schema, stored = files.RAW_SCHEMA, None
    else:
        stored = formats.arrow_schema(formats.stored_schema(md.properties, name))
        schema = pa.schema(list(stored) + files.POSITION_FIELDS)

    def rows() -> Iterator[pa.RecordBatch]:
        if last < 0:
            return
        rh = open_closed_ledger(bk, info.ledger_id, secret)
        yield from ledger_batches(rh, name, info.ledger_id, 0, last, fmt or "raw", schema,
                                  stored)
    return schema, rows(), last + 1


def offload_ledger(bk: BookKeeper, name: str, ledger_id: int, passwords: Sequence[bytes],
                   default_target: str | None, metrics: OffloadMetrics | None = None, *,
                   local_key: LocalKeySource | None = None) -> rules.OffloadState | None:
    """Offload one closed ledger of log ``name`` (the protocol's four steps); returns its
    complete state, or None when the ledger left the log (or another attempt took over)
    meanwhile. Offloading a complete ledger again changes nothing. ``local_key``: the
    keys the offloader's own bookie stored (:func:`offload_secret`)."""
    store = log_store(bk)
    current = store.read(name)
    md = current.value
    view = LogView(store, name, md)
    index = view.index_of_ledger(ledger_id)
    if index is None:
        return None
    info = view.at(index)
    assert info is not None
    if not info.is_described:
        raise InvalidConfigError(f"log {name!r}: ledger {ledger_id} is not closed yet")
    old = rules.states_of(md.properties).get(ledger_id)
    if old is not None and old.complete:
        return old
    policy = rules.policy_of(md.properties)
    target = (policy.target if policy is not None else None) or default_target
    if not target:
        raise InvalidConfigError(
            f"log {name!r} has no offload target: set one (bk log set {name} "
            f"--offload-target URI) or start the offloader with --offload-target")
    try:
        secret = offload_secret(bk, ledger_id, passwords, local_key)
    except NoSuchLedgerError:
        if _listed(store.read(name).value, view, ledger_id):
            raise
        return None  # truncated meanwhile: not a failure

    # 1. A new offload id, recorded before any byte is written (a stale attempt's file
    #    is removed first: it was never counted).
    new, stale = rules.start_offload(old, uuid.uuid4().hex[:16], target)
    if stale is not None:
        try:
            files.delete(rules.offload_file(name, md.log_id, ledger_id, stale))
        except files.OffloadTargetError as exc:
            if stale.target == target:
                raise  # the new attempt would fail on it too: retried next pass
            # an old target unreachable: its file never counted; left as an orphan
            log.warning("log %r: ledger %d: stale offload file left behind: %s", name,
                        ledger_id, exc)

    def still(m: LogMetadata, expect: rules.OffloadState | None) -> bool:
        if not _listed(m, view, ledger_id):
            return False
        return rules.states_of(m.properties).get(ledger_id) == expect

    def record(m: LogMetadata) -> LogMetadata:
        out = m.with_properties(lambda p: rules.with_state(p, ledger_id, new))
        try:
            size = len(out.to_bytes())
        except MetadataSerializationError:
            size = MAX_METADATA_BYTES + 1
        rules.check_records_room(name, size, len(rules.states_of(out.properties)))
        return out

    done = update_log(bk, name, needs_change=lambda m: still(m, old), make_change=record,
                      current=current)
    if rules.states_of(done.value.properties).get(ledger_id) != new:
        return None
    uri = rules.offload_file(name, md.log_id, ledger_id, new)
    started = time.monotonic()
    try:
        # 2. Write to the path named by the id.
        schema, batches, entries = ledger_rows(bk, name, md, info, secret)
        wrote = files.write_ledger(uri, schema, batches)
        # 3. Verify: the file's rows hold every entry, and the checksum of its values
        #    read back equals the one of the values read from the bookies.
        written = files.verify(uri, entries, wrote.crc)
    except NoSuchLedgerError:
        files.delete(uri)
        return None
    # 4. Complete (CAS), only while our id is still the recorded one.
    complete = new.completed(now_ms(), written.rows, written.entries, written.bytes,
                             written.crc)
    try:
        done = update_log(bk, name, needs_change=lambda m: still(m, new),
                          make_change=lambda m: m.with_properties(
                              lambda p: rules.with_state(p, ledger_id, complete)))
    except LogNotFoundError:  # deleted meanwhile
        files.delete(uri)
        return None
    if rules.states_of(done.value.properties).get(ledger_id) != complete:
        files.delete(uri)  # truncated or taken over meanwhile: ours is not counted
        return None
    if metrics is not None:
        metrics.offloaded(written.bytes, time.monotonic() - started)
    log.info("log %r: ledger %d offloaded to %s (%d rows, %d bytes)", name, ledger_id,
             files.shown_uri(uri), written.rows, written.bytes)
    return complete


def drop_bookie_copy(bk: BookKeeper, name: str, ledger_id: int, passwords: Sequence[bytes],
                     lag_ms: int, now: int, *, local_key: LocalKeySource | None = None
                     ) -> bool:
    """The deletion lag: once a complete ledger's lag has passed, record (CAS) that the
    bookies no longer hold it, then delete it from them (metadata first, data after: a
    reader sent to the bookies before the CAS retries on Parquet when the ledger is gone).
    """
    store = log_store(bk)
    view = LogView(store, name, store.read(name).value)

    def needs(m: LogMetadata) -> bool:
        st = rules.states_of(m.properties).get(ledger_id)
        return _listed(m, view, ledger_id) and rules.bookie_copy_deletable(st, lag_ms, now)

    def change(m: LogMetadata) -> LogMetadata:
        st = rules.states_of(m.properties)[ledger_id]
        return m.with_properties(lambda p: rules.with_state(
            p, ledger_id, rules.OffloadState.from_json(st.to_json() | {"dropped": True})))

    try:
        secret = offload_secret(bk, ledger_id, passwords, local_key)
    except NoSuchLedgerError:
        return False  # deleted meanwhile (truncated)
    if not needs(view.md):
        return False
    done = update_log(bk, name, needs_change=needs, make_change=change)
    st = rules.states_of(done.value.properties).get(ledger_id)
    if st is None or not st.dropped:
        return False
    try:
        if secret.password is not None:
            bk.delete_ledger(ledger_id, secret.password)
        else:
            bk.delete_ledger(ledger_id, key=secret.key)
    except NoSuchLedgerError:
        pass
    return True


@dataclass(frozen=True)
class OffloaderConfig:
    """Options of the offloader (each a ``bk offloader`` / ``bk bookie --offload`` flag).

    ``passwords``: candidate ledger passwords (``--password``, the empty one always
    included); ``default_target``: the target of logs whose policy names none
    (``--offload-target``); ``tick_s``: how often the elected offloader looks for due
    ledgers.
    """

    passwords: tuple[bytes, ...] = (b"",)
    default_target: str | None = None
    tick_s: float = 1.0

    def __post_init__(self) -> None:
        if not self.tick_s > 0:
            raise InvalidConfigError(f"offloader tick must be > 0, got {self.tick_s}")


def ledger_sizes(bk: BookKeeper, ledgers: Sequence[LedgerInfo],
                 states: Mapping[int, rules.OffloadState], policy: rules.OffloadPolicy
                 ) -> dict[int, int] | None:
    """The bytes of each closed ledger not offloaded yet, for a BYTES policy (None for the
    others: they need none)."""
    if policy.kind is not rules.AfterKind.BYTES:
        return None
    return {r.ledger_id: bk.ledger_metadata(r.ledger_id).length
            for r in ledgers if r.is_described and r.ledger_id not in states}


def log_backlog(bk: BookKeeper, name: str
                ) -> tuple[rules.OffloadPolicy, list[LedgerInfo]] | None:
    """A log's policy and its backlog (:func:`~bk_spark.protocol.offload_rules.backlog`:
    closed ledgers due, not complete), what the offloader's per-log gauges and ``bk
    offload status`` show; None: the log has no policy (or is being deleted)."""
    store = log_store(bk)
    md = store.read(name).value
    policy = rules.policy_of(md.properties)
    if policy is None or md.deleting:
        return None
    ledgers = LogView(store, name, md).ledgers()
    states = rules.states_of(md.properties)
    return policy, rules.backlog(ledgers, states, policy, now_ms(),
                                 ledger_sizes(bk, ledgers, states, policy))


class Offloader:
    """Contends for the offloader role; while elected, applies every log's policy each
    tick: offload the due ledgers in log order, drop bookie copies past the deletion lag.

    One thread (the election's); no locks. A failure on one log is counted, retried next
    tick, and recorded where ``bk offload status`` shows it (the failing logs' record,
    :mod:`bk_spark.io.offload_status`, written when it changes); it is logged as a warning
    only when new, when its reason changes, and once more when it persists
    (:func:`~bk_spark.protocol.replication_retry.warn_of_failure`, AutoRecovery's rule),
    not every tick. Readers keep reading the bookies' copy meanwhile.
    """

    def __init__(self, bk: BookKeeper, identity: str, config: OffloaderConfig,
                 metrics: OffloadMetrics, *, local_key: LocalKeySource | None = None
                 ) -> None:
        self.bk = bk
        self.identity = identity
        self.config = config
        self.metrics = metrics
        #: the keys the offloader's own bookie stored (``bk bookie --offload``)
        self.local_key = local_key
        #: log -> {"reason", "since_ms", "passes"} of the logs whose last pass failed
        self.failing: dict[str, dict[str, Any]] = {}
        self._recorded: dict[str, str] | None = None  # log -> reason, as in ZooKeeper
        #: this process's contender is the elected one (its keyholder loop then rests)
        self.elected = False
        self._due_now: set[int] = set()  # each log's due ledger, this pass

    def run(self, stop: threading.Event) -> None:
        run_elected(self.bk.zk, election_path(self.bk.msu.root), self.identity, self._lead,
                    stop, "offloader")

    def _lead(self, stop: threading.Event) -> None:
        log.info("offloader %s elected", self.identity)
        self.metrics.elected.set(1)
        self.elected = True
        self._recorded = None  # rewrite the failing logs' record at the first pass
        try:
            while not stop.is_set():
                self.tick()
                stop.wait(self.config.tick_s)
        finally:
            self.elected = False
            self.metrics.elected.set(0)
            self.metrics.keep_logs(())  # the per-log series are the elected one's

    def tick(self) -> None:
        """One pass over every log with a policy; then the per-log gauges and the failing
        logs' record."""
        lag_ms = 0
        seen: list[str] = []
        self._due_now = set()
        for name in list_logs(self.bk):
            failure: BaseException | None = None
            try:
                self.apply(name)
            except LogNotFoundError:
                continue
            except (BKError, OSError) as exc:
                failure = exc
            try:
                facts = log_backlog(self.bk, name)
            except LogNotFoundError:
                continue
            except (BKError, OSError) as exc:
                failure = failure or exc
                facts = None
            if facts is None and failure is None:
                continue  # no policy
            backlog = facts[1] if facts is not None else []
            log_lag = rules.lag_ms(backlog, facts[0] if facts else None, now_ms())
            lag_ms = max(lag_ms, log_lag)
            seen.append(name)
            self.metrics.log_pass(name, log_lag / 1000, len(backlog), failure is not None)
            if failure is None:
                self.failing.pop(name, None)
            else:
                self._failed(name, failure)
        self.metrics.lag.set(lag_ms / 1000)
        self.metrics.keep_logs(seen)
        for name in set(self.failing) - set(seen):
            del self.failing[name]
        self._record_failing()
        self._drop_waiting_not_due()

    def _failed(self, name: str, exc: BaseException) -> None:
        self.metrics.failures.inc()
        reason = f"{type(exc).__name__}: {exc}"
        old = self.failing.get(name)
        passes = (old["passes"] + 1) if old else 1
        self.failing[name] = {"reason": reason, "passes": passes,
                              "since_ms": old["since_ms"] if old else now_ms()}
        changed = old is None or old["reason"] != reason
        level = logging.WARNING if warn_of_failure(
            passes, changed, self.config.tick_s, _WARN_AGAIN_S) else logging.DEBUG
        log.log(level, "offloader: log %r: %s (pass %d; bk offload status shows it)", name,
                reason, passes)

    def _record_failing(self) -> None:
        """Write the failing logs' record when a log or a reason changed."""
        now = {n: f["reason"] for n, f in self.failing.items()}
        if now == self._recorded:
            return
        try:
            write_failing(self.bk.zk, self.bk.msu.root, self.failing)
            self._recorded = now
        except Exception as exc:  # ZooKeeper away: written at a later pass
            log.debug("offloader: cannot record the failing logs (%s)", exc)

    def apply(self, name: str) -> float:
        """Offload log ``name``'s due ledgers and drop bookie copies past the lag; returns
        the lag (seconds since the oldest ledger still due closed)."""
        cfg = self.config
        store = log_store(self.bk)
        while True:
            md = store.read(name).value
            policy = rules.policy_of(md.properties)
            if policy is None or md.deleting:
                return 0.0
            ledgers = LogView(store, name, md).ledgers()
            states = rules.states_of(md.properties)
            todo = rules.due(ledgers, states, policy, now_ms(),
                             ledger_sizes(self.bk, ledgers, states, policy))
            if not todo:
                break
            if not self._offload_claimed(name, todo[0].ledger_id, cfg.default_target,
                                         elected=True):
                break
        if policy.iceberg_catalog:
            self.sync_iceberg(name, policy)
        now = now_ms()
        lag_s = rules.lag_ms(todo, policy, now) / 1000
        for lid, st in rules.states_of(md.properties).items():
            if rules.bookie_copy_deletable(st, policy.deletion_lag_ms, now):
                self._drop_claimed(name, lid, policy.deletion_lag_ms, now, elected=True)
        return lag_s

    def _offload_claimed(self, name: str, ledger_id: int, target: str | None, *,
                         elected: bool) -> bool:
        """The four steps on ``ledger_id`` under its claim (:meth:`_claimed`); True when it
        is complete."""
        done = self._claimed(name, ledger_id, target, elected, lambda: offload_ledger(
            self.bk, name, ledger_id, self.config.passwords, target, self.metrics,
            local_key=self.local_key))
        return done is not None

    def _drop_claimed(self, name: str, ledger_id: int, lag_ms: int, now: int, *,
                      elected: bool) -> bool:
        """The deletion lag's step under the ledger's claim (:meth:`_claimed`)."""
        return bool(self._claimed(name, ledger_id, None, elected, lambda: drop_bookie_copy(
            self.bk, name, ledger_id, self.config.passwords, lag_ms, now,
            local_key=self.local_key)))

    def _claimed(self, name: str, ledger_id: int, target: str | None, elected: bool,
                 step: Callable[[], T]) -> T | None:
        """Run one step on ``ledger_id`` under its claim (one contender at a time), as
        :data:`~bk_spark.protocol.offload_rules.HANDOFF` says: None when another contender
        holds the claim, or when the elected offloader cannot key the ledger and records it
        as waiting for a keyholder (a ``mac`` ledger, which only its password reads, fails as
        before)."""
        zk, root = self.bk.zk, self.bk.msu.root
        if elected:
            self._due_now.add(ledger_id)
        if not claims.try_claim(zk, root, ledger_id, self.identity):
            return None  # another contender is on it: left to its claim
        try:
            return step()
        except RecoveryKeyUnavailableError:
            md = self.bk.ledger_metadata(ledger_id)
            if md.digest_type not in VERIFIABLE_WITHOUT_PASSWORD or \
                    rules.handoff(elected, False, True) is not rules.Handoff.WAIT:
                raise
            if ledger_id not in claims.waiting(zk, root):
                claims.record_waiting(zk, root, ledger_id, name, target, now_ms())
                log.info("log %r: ledger %d waits for a keyholder: the offloader contender "
                         "of a bookie holding a copy offloads it", name, ledger_id)
            return None
        finally:
            claims.release_claim(zk, root, ledger_id)

    def serve_waiting(self, stop: threading.Event) -> None:
        """A contender not elected: offload each ledger waiting for a keyholder that its
        own bookie holds a copy of (:data:`~bk_spark.protocol.offload_rules.HANDOFF`),
        every tick, while it is still its log's due ledger."""
        seen: dict[int, str] = {}
        while not stop.wait(self.config.tick_s):
            if self.elected or self.local_key is None:
                continue
            try:
                recs = claims.waiting(self.bk.zk, self.bk.msu.root)
            except Exception as exc:  # ZooKeeper away: next tick
                log.debug("offloader: cannot list the waiting ledgers (%s)", exc)
                continue
            for lid, rec in sorted(recs.items()):
                name = str(rec.get("log", ""))
                try:
                    self.local_key(lid)
                    can_key = True
                except NoSuchLedgerError:
                    can_key = False
                if rules.handoff(False, can_key, True) is not rules.Handoff.OFFLOAD:
                    continue
                try:
                    md = log_store(self.bk).read(name).value
                    st = rules.states_of(md.properties).get(lid)
                    policy = rules.policy_of(md.properties)
                    if st is not None and st.complete and policy is not None:
                        now = now_ms()  # its bookie copy waits for a keyholder
                        if not rules.bookie_copy_deletable(st, policy.deletion_lag_ms, now) \
                                or self._drop_claimed(name, lid, policy.deletion_lag_ms, now,
                                                      elected=False):
                            claims.drop_waiting(self.bk.zk, self.bk.msu.root, lid)
                        continue
                    facts = log_backlog(self.bk, name)
                    if facts is None or not facts[1] or facts[1][0].ledger_id != lid:
                        continue  # no longer due: the elected one drops the record
                    if self._offload_claimed(name, lid, rec.get("target"), elected=False):
                        claims.drop_waiting(self.bk.zk, self.bk.msu.root, lid)
                        seen.pop(lid, None)
                except (BKError, OSError) as exc:
                    reason = f"{type(exc).__name__}: {exc}"
                    level = logging.WARNING if seen.get(lid) != reason else logging.DEBUG
                    seen[lid] = reason
                    log.log(level, "offloader %s: log %r: waiting ledger %d: %s",
                            self.identity, name, lid, reason)

    def _drop_waiting_not_due(self) -> None:
        """The elected one's pass end: a waiting record whose ledger is no longer its
        log's due ledger (complete, truncated, the policy off) goes."""
        zk, root = self.bk.zk, self.bk.msu.root
        try:
            for lid in set(claims.waiting(zk, root)) - self._due_now:
                claims.drop_waiting(zk, root, lid)
        except Exception as exc:  # ZooKeeper away: at a later pass
            log.debug("offloader: cannot drop the waiting records (%s)", exc)

    def sync_iceberg(self, name: str, policy: rules.OffloadPolicy) -> None:
        """Commit the log's offloaded prefix to its Iceberg table, in log order; expire the
        files of truncated ledgers (:func:`bk_spark.io.iceberg.sync_table`)."""
        from bk_spark.io.iceberg import sync_table, warehouse_of

        store = log_store(self.bk)
        md = store.read(name).value
        ledgers = LogView(store, name, md).ledgers()
        states = rules.states_of(md.properties)
        prefix = rules.offloaded_prefix(ledgers, states)
        files = [(r.ledger_id, rules.offload_file(name, md.log_id, r.ledger_id,
                                                   states[r.ledger_id])) for r in prefix]
        target = policy.target or self.config.default_target or ""
        sync_table(policy.iceberg_catalog or "", warehouse_of(target), name, files)
