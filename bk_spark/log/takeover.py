"""Opening a log as its writer: the seed's "Opening a log", five steps, in
:func:`take_over`; no write is served before step 5 succeeds. Which ledgers step 2 fences
is :func:`bk_spark.protocol.log_rules.ledgers_to_fence`.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from bk_spark.core.ledger import LedgerHandle
from bk_spark.errors import (
    LogExistsError,
    LogNotFoundError,
    LogOwnershipLostError,
    MetadataVersionError,
    NoSuchLedgerError,
)
from bk_spark.io.metadata_store import ReservedIds, Versioned
from bk_spark.log import pending
from bk_spark.log.admin import create_log, delete_ledger_quietly
from bk_spark.log.store import log_store, update_log
from bk_spark.log.writer import LogWriter, LogWriterConfig, create_log_ledger
from bk_spark.protocol import log_rules
from bk_spark.protocol.log_format import (
    LogLimits,
    LogMetadata,
    entry_timestamp,
    now_ms,
    validate_log_name,
)

if TYPE_CHECKING:
    from bk_spark.core.client import BookKeeper

log = logging.getLogger(__name__)


def read_attempts(bk: BookKeeper, name: str, attempts: int, create_if_missing: bool
                   ) -> Iterator[Versioned[LogMetadata]]:
    """Step 1 of the read-modify-CAS protocols of logs (take over, commit): read the list
    of ledgers, up to ``attempts`` times with a growing random pause between attempts (the
    caller goes on to the next attempt when its CAS lost). A missing log is created first
    when ``create_if_missing`` (a log created concurrently by another client is fine)."""
    store = log_store(bk)
    attempt = 0
    while attempt < attempts:
        if attempt:
            time.sleep(random.uniform(0, min(0.5, 0.02 * attempt)))
        attempt += 1
        try:
            current = store.read(name)
        except LogNotFoundError:
            if not create_if_missing:
                raise
            try:
                create_log(bk, name)
            except LogExistsError:
                pass
            continue
        yield current


def describe_ledger(bk: BookKeeper, ledger_id: int, password: bytes
                     ) -> tuple[int, int | None]:
    """Fence (recovery-open) a ledger; its ``(last entry id, last entry's timestamp)``.

    For a ledger already CLOSED the recovery open changes nothing and only reads.
    """
    rh = bk.open_ledger(ledger_id, password, recovery=True)
    last = rh.last_add_confirmed
    if last < 0:
        return -1, None
    (entry,) = rh.read_entries(last, last)
    return last, entry_timestamp(entry.payload)


def fence_and_describe(bk: BookKeeper, md: LogMetadata, password: bytes
                        ) -> dict[int, tuple[int, int | None]] | None:
    """Step 2 of opening a log, for every new owner (writer take-over, commit): recovery-open
    :func:`~bk_spark.protocol.log_rules.ledgers_to_fence` and return each one's ``(last
    entry, last timestamp)``; None when one was deleted meanwhile (the list changed: the
    caller starts again at step 1)."""
    try:
        return {info.ledger_id: describe_ledger(bk, info.ledger_id, password)
                for info in log_rules.ledgers_to_fence(md)}
    except NoSuchLedgerError:
        return None


def take_over(bk: BookKeeper, name: str, config: LogWriterConfig, create_if_missing: bool,
              ids: ReservedIds | None = None
              ) -> tuple[LedgerHandle, Versioned[LogMetadata], int]:
    """Opening a log as its writer, exactly the seed's steps ("Opening a log"):

    1. Read the list of ledgers for the log
    2. Fence the last two ledgers in the list. "Two ledgers are fenced because the writer
       may be writing to the second-to-last ledger while adding the last ledger to the list."
    3. Create a new ledger
    4. Add the new ledger to the ledger list
    5. Write the new ledger back to the datastore using a CAS operation

    "The CAS operation will fail if the list of ledgers has changed between reading it and
    writing back the new list. When the CAS operation fails, the leader must start at step 1
    again" (deleting the ledger it created); "the node must not serve any writes until step
    5 completes successfully": the writer exists only after it.

    The CAS of step 5 also records the last entry and timestamp of the fenced ledgers.
    Returns the new ledger, the metadata written and the timestamp floor for its entries.
    ``ids`` (a writer that rolls): step 3's transaction also reserves the id of the
    writer's first spare into it (:meth:`BookKeeper.create_ledger`), so that spare is one
    ZooKeeper operation like every later one.
    """
    for current in read_attempts(bk, name, config.max_open_attempts, create_if_missing):
        taken = _take_over_from(bk, name, config, current, ids)
        if taken is not None:
            return taken
    raise LogOwnershipLostError(
        f"log {name!r}: could not take over the log in {config.max_open_attempts} attempts: "
        f"other writers keep taking it. Make sure only one node thinks it is the leader.")


def _take_over_from(bk: BookKeeper, name: str, config: LogWriterConfig,
                    current: Versioned[LogMetadata], ids: ReservedIds | None = None
                    ) -> tuple[LedgerHandle, Versioned[LogMetadata], int] | None:
    """Steps 2-5 of :func:`take_over` from the list read in step 1; None: start again."""
    md = current.value
    if md.deleting:
        raise LogNotFoundError(f"log {name!r} is being deleted")
    # Step 2: fence the last two ledgers (and read the end of any older ledger whose end
    # was never recorded: those are closed already, so their recovery open fences nothing).
    described = fence_and_describe(bk, md, config.password)
    if described is None:
        return None  # truncated meanwhile: the list changed
    # Step 3: create a new ledger.
    lh = create_log_ledger(bk, name, config, ids=ids)
    first_ts = [0]

    def make_change(m: LogMetadata) -> LogMetadata:
        # Step 4: add the new ledger to the ledger list.
        for lid, (last, ts) in described.items():
            m = m.with_ledger_described(lid, last, ts)
        first_ts[0] = max(now_ms(), m.max_known_ts_ms)
        return m.with_ledger_added(lh.id, first_ts[0]).spilled(config.limits)

    # Step 5: write it back with a CAS; a lost CAS deletes the ledger and restarts at 1.
    try:
        written = update_log(bk, name, needs_change=lambda m: m.find_in_tail(lh.id) is None,
                              make_change=make_change, current=current, max_attempts=1)
    except MetadataVersionError:
        log.info("log %r: lost the CAS taking over the log; starting again", name)
        delete_ledger_quietly(bk, lh.id, config.password)
        return None
    except LogNotFoundError:
        delete_ledger_quietly(bk, lh.id, config.password)
        raise
    return lh, written, first_ts[0] or max(now_ms(), written.value.max_known_ts_ms)


def open_log_writer(bk: BookKeeper, name: str, *, create_if_missing: bool = True,
                    ensemble_size: int | None = None, write_quorum_size: int | None = None,
                    ack_quorum_size: int | None = None, password: bytes = b"",
                    roll_max_entries: int | None = None, roll_max_bytes: int | None = None,
                    roll_max_age_s: float | None = None, digest: str = "crc32c",
                    limits: LogLimits | None = None) -> LogWriter:
    """Become the writer of log ``name`` (fencing any previous writer); see :func:`take_over`.

    ``create_if_missing``: create the log if it does not exist (else
    :class:`LogNotFoundError`). Quorums and ``password`` apply to the ledgers this writer
    creates; a quorum not given is the log's (recorded by :func:`create_log`), else 3/2/2
    (:func:`~bk_spark.protocol.log_rules.log_quorums`). ``roll_max_*``: automatic rolling
    (:class:`LogWriterConfig`).
    """
    validate_log_name(name)
    given = (ensemble_size, write_quorum_size, ack_quorum_size)
    properties: Mapping[str, Any] = {}
    if None in given:
        try:
            properties = log_store(bk).read(name).value.properties
        except LogNotFoundError:
            pass
    e, qw, qa = log_rules.log_quorums(properties, given)
    config = LogWriterConfig(
        ensemble_size=e, write_quorum_size=qw,
        ack_quorum_size=qa, password=password, digest=digest,
        roll_max_entries=roll_max_entries, roll_max_bytes=roll_max_bytes,
        roll_max_age_s=roll_max_age_s, limits=limits or LogLimits())
    ids = ReservedIds() if config.rolls else None  # the first spare's id (the roller's)
    lh, md, ts_floor = take_over(bk, name, config, create_if_missing, ids)
    # The previous writers' unused spare ledgers (a writer that died leaves its own): this
    # writer owns the log now, so they can never be listed.
    swept: list[int] | None = []  # None: the log has no directory of pending ledgers
    try:
        swept = pending.sweep_spares(bk, name, password)
    except Exception as exc:  # kept pending: the next writer or delete_log sweeps them
        log.warning("log %r: could not delete the spare ledgers of earlier writers: %s",
                    name, exc)
    else:
        if swept:
            log.info("log %r: deleted the unused spare ledgers %s of earlier writers", name,
                     swept)
    if swept is None and config.rolls:
        # no directory of pending records: make it now, not in the first spare's
        # transaction (issue 28: the first roll costs what every other roll costs)
        try:
            pending.make_directory(bk, name)
        except Exception as exc:  # noqa: BLE001 - the first spare makes it then
            log.debug("log %r: directory of pending ledgers not made: %s", name, exc)
    writer = LogWriter(bk, name, config, lh, md, ts_floor, ids=ids)
    bk.close_with_client(writer)  # closing the client closes it (its last appends readable)
    return writer
