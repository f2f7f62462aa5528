"""Adding ledgers written and closed elsewhere (one per Spark task) to a log, as its new owner,
in one CAS with a transaction id: the exactly-once commit of the Spark sink
(:func:`commit_ledgers`), and the writing of one such ledger (:func:`write_closed_ledger`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bk_spark.core.futures import (
    InFlightWindow,
)
from bk_spark.core.ledger import LedgerHandle
from bk_spark.errors import (
    InvalidConfigError,
    LogNotFoundError,
    LogOwnershipLostError,
    MetadataVersionError,
)
from bk_spark.io.log_store import LogMetadataStore
from bk_spark.io.metadata_store import Versioned
from bk_spark.log.admin import delete_ledger_quietly
from bk_spark.log.store import LEDGER_LOG_KEY, log_store, update_log
from bk_spark.log.takeover import fence_and_describe, read_attempts
from bk_spark.log.view import LogView
from bk_spark.protocol import log_rules
from bk_spark.protocol.digest import password_bytes
from bk_spark.protocol.ledger_metadata import DEFAULT_QUORUMS
from bk_spark.protocol.log_format import (
    LedgerInfo,
    LogLimits,
    LogMetadata,
    PropertiesUpdate,
    encode_entry,
    now_ms,
    validate_log_name,
)
from bk_spark.protocol.log_rules import TXN_PROPERTY, LogDecision

if TYPE_CHECKING:
    from bk_spark.core.client import BookKeeper

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClosedLedger:
    """A ledger written and closed outside the log, ready to be added to it: its id, last
    entry id and the timestamps of its first and last entries (log entry frames)."""

    ledger_id: int
    last_entry_id: int
    first_ts_ms: int
    last_ts_ms: int


@dataclass(frozen=True)
class CommitResult:
    """What :func:`commit_ledgers` did. ``committed`` is False when the transaction id was
    already committed (nothing was added). ``dropped``: the ledgers a ``replace`` removed
    from the log (and deleted)."""

    committed: bool
    metadata: LogMetadata
    dropped: tuple[int, ...] = ()


@dataclass(frozen=True)
class WrittenLedger:
    """What :func:`write_closed_ledger` wrote: the closed ledger, ready for
    :func:`commit_ledgers`, and how many entries it holds."""

    ledger: ClosedLedger
    entries: int


def write_closed_ledger(bk: BookKeeper, name: str, payloads: Iterable[bytes | None], *,
                        ensemble_size: int = DEFAULT_QUORUMS.ensemble_size,
                        write_quorum_size: int = DEFAULT_QUORUMS.write_quorum_size,
                        ack_quorum_size: int = DEFAULT_QUORUMS.ack_quorum_size,
                        password: bytes = b"", ts_floor: int = 0,
                        custom_metadata: Mapping[str, str] | None = None,
                        on_created: Callable[[int], None] | None = None,
                        max_in_flight_entries: int = 4096,
                        max_in_flight_bytes: int = 64 << 20) -> WrittenLedger | None:
    """Write ``payloads`` (log entries: each framed with its timestamp, never below
    ``ts_floor``) into one NEW ledger created for log ``name``, close it, and return it
    (None: no payload, no ledger created). The ledger is not in the log: add it with
    :func:`commit_ledgers` (one per Spark task, committed together).

    ``on_created(ledger_id)`` runs as soon as the ledger exists, before its first add, so
    the caller can record it for clean-up (a failed or abandoned write leaves a ledger no
    log lists). Adds are pipelined within the in-flight limits (:class:`InFlightWindow`);
    a failed add raises.

    The ledger sends no explicit LAC: no reader opens it before it is closed (it joins a
    log only after :func:`commit_ledgers`, and a recovery of an abandoned one reads
    forward from the bookies), while a writer fed slower than its adds complete (a Spark
    task) went idle after nearly every add, and each idle moment cost every bookie of the
    ensemble one more RPC, journal record and fdatasync (bench/profiles.md).
    """
    lh: LedgerHandle | None = None
    window = InFlightWindow(max_in_flight_entries, max_in_flight_bytes)
    first_ts = last_ts = 0
    entries = 0
    try:
        for payload in payloads:
            if lh is None:
                lh = bk.create_ledger(ensemble_size, write_quorum_size, ack_quorum_size,
                                      password=password,
                                      custom_metadata={LEDGER_LOG_KEY: name,
                                                       **(custom_metadata or {})})
                lh.explicit_lac_interval_s = 0  # see above; set before the first add
                if on_created is not None:
                    on_created(lh.id)
            ts = last_ts = ts_floor = max(now_ms(), ts_floor)
            first_ts = first_ts or ts
            window.push(lh.add_entry_async(encode_entry(payload, ts)),
                        len(payload) if payload is not None else 0)
            entries += 1
        if lh is None:
            return None
        window.drain()
        lh.close()
    except BaseException as exc:
        # A failed add, a failing input (a Spark task's rows) or a failed close: the
        # ledger stays out of every log (the caller's clean-up deletes it); stop its
        # sender and adds in flight here, or they outlive the task in a reused worker.
        if lh is not None and not lh.is_closed:
            lh.abandon(f"the write failed: {exc!r}"[:200])
        raise
    return WrittenLedger(ClosedLedger(lh.id, lh.last_add_confirmed, first_ts, last_ts),
                         entries)


def commit_ledgers(bk: BookKeeper, name: str, ledgers: list[ClosedLedger], *,
                   txn_key: str | None = None, txn_id: int | None = None,
                   properties: PropertiesUpdate | None = None, replace: bool = False,
                   password: bytes = b"", create_if_missing: bool = True,
                   limits: LogLimits | None = None, max_attempts: int = 30) -> CommitResult:
    """Append closed ``ledgers`` to log ``name`` in one CAS with transaction ``txn_id``.

    For writers that fill ledgers elsewhere (e.g. Spark tasks, one ledger each) and add
    them all at once, exactly once. The seed's "Opening a log" with the new ledgers
    created beforehand:

    1. Read the list of ledgers. If ``txn_key`` already committed ``txn_id`` or a later id,
       add nothing: ``CommitResult(committed=False)`` (a replayed or zombie commit).
    2. Fence the last two ledgers in the list (and read the end of any older ledger whose end
       is not recorded): no earlier writer of the log can append after this commit.
    3. (The ledgers were created and closed by the caller.)
    4. Add them, described (last entry, timestamps), to the ledger list, with the
       transaction id and ``properties``; ``replace``: drop every earlier ledger first.
    5. Write the list back with a CAS; when it fails, start again at step 1.

    ``properties`` is applied as in :meth:`LogMetadata.with_properties` (a function may
    raise to refuse the commit). With ``replace`` the dropped ledgers are deleted after the
    CAS. Ledgers must be closed; their order in ``ledgers`` is their order in the log.
    """
    validate_log_name(name)
    if (txn_key is None) != (txn_id is None):
        raise InvalidConfigError("give txn_key and txn_id together (or neither)")
    limits = limits or LogLimits()
    password = password_bytes(password)
    store = log_store(bk)
    for current in read_attempts(bk, name, max_attempts, create_if_missing):
        done = _commit_from(bk, store, name, current, ledgers, txn_key, txn_id, properties,
                            replace, password, limits)
        if done is not None:
            return done
    raise LogOwnershipLostError(
        f"log {name!r}: could not commit ledgers in {max_attempts} attempts: other writers "
        f"keep taking the log")


def _with_closed_ledgers(m: LogMetadata, ledgers: list[ClosedLedger]) -> LogMetadata:
    """``m`` with described rows for ``ledgers`` appended to its tail (in one step: a
    commit may add thousands)."""
    present = {r.ledger_id for r in m.tail}
    rows = []
    for i, c in enumerate(ledgers):
        if c.ledger_id in present:
            raise ValueError(f"ledger {c.ledger_id} is already in the log")
        present.add(c.ledger_id)
        rows.append(LedgerInfo(c.ledger_id, m.end_index + i, c.first_ts_ms).described(
            c.last_entry_id, c.last_ts_ms if c.last_entry_id >= 0 else None))
    return dataclasses.replace(m, tail=m.tail + tuple(rows))


def _commit_from(bk: BookKeeper, store: LogMetadataStore, name: str,
                 current: Versioned[LogMetadata], ledgers: list[ClosedLedger],
                 txn_key: str | None, txn_id: int | None,
                 properties: PropertiesUpdate | None, replace: bool, password: bytes,
                 limits: LogLimits) -> CommitResult | None:
    """Steps 1-5 of :func:`commit_ledgers` from the list read; None: start again."""
    md = current.value
    ids = [c.ledger_id for c in ledgers]

    def check(m: LogMetadata) -> LogDecision:
        decision = log_rules.commit_check(m, ids, txn_key, txn_id)
        if decision is LogDecision.DELETED:
            raise LogNotFoundError(f"log {name!r} is being deleted")
        return decision

    first = check(md)
    if first is not LogDecision.CHANGE:  # DONE: our own CAS landed; COMMITTED: a replay
        return CommitResult(first is LogDecision.DONE, md)
    # Step 2: fence the last two ledgers.
    described = fence_and_describe(bk, md, password)
    if described is None:
        return None  # truncated meanwhile: the list changed
    dropped = tuple(r.ledger_id for r in LogView(store, name, md).ledgers()) if replace else ()

    made: list[LogMetadata] = []

    def make_change(m: LogMetadata) -> LogMetadata:
        # Step 4: add the ledgers, the transaction id and the properties.
        for lid, (last, ts) in described.items():
            m = m.with_ledger_described(lid, last, ts)
        if replace:
            m = m.truncated(m.end_index, dropped)
        m = _with_closed_ledgers(m, ledgers)
        if properties is not None:
            m = m.with_properties(properties)
        if txn_key is not None:
            m = m.with_properties(
                lambda p: {**p, TXN_PROPERTY: {**(p.get(TXN_PROPERTY) or {}), txn_key: txn_id}})
        made.append(m.spilled(limits))
        return made[-1]

    # Step 5: CAS against the version read in step 1; a lost CAS starts again at step 1.
    try:
        written = update_log(bk, name,
                              needs_change=lambda m: check(m) is LogDecision.CHANGE,
                              make_change=make_change, current=current, max_attempts=1)
    except MetadataVersionError:
        log.info("log %r: lost the CAS committing ledgers; starting again", name)
        return None
    if not (made and written.value == made[-1]) and \
            check(written.value) is not LogDecision.DONE:
        return CommitResult(False, written.value)  # another commit of the same txn id won
    for lid in dropped:
        delete_ledger_quietly(bk, lid, password)
    return CommitResult(True, written.value, dropped)
