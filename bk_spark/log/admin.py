"""Administering logs: list, describe, create, change properties, truncate (ledgers-to-logs:
"the log can be truncated by removing ledgers from the start of the list": the list
changes first by CAS, then the dropped ledgers are deleted), delete.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

from bk_spark.errors import (
    BKError,
    LogTruncatedError,
    NoSuchLedgerError,
    UnauthorizedError,
)
from bk_spark.log import pending
from bk_spark.log.store import log_store, update_log
from bk_spark.log.view import LogView, open_log_view
from bk_spark.protocol import log_rules, offload_rules
from bk_spark.protocol.digest import password_bytes
from bk_spark.protocol.log_format import (
    LedgerInfo,
    LogMetadata,
    Position,
    PropertiesUpdate,
    now_ms,
)

if TYPE_CHECKING:
    from bk_spark.core.client import BookKeeper

log = logging.getLogger(__name__)


def delete_ledger_quietly(bk: BookKeeper, ledger_id: int, password: bytes) -> None:
    """Delete a ledger, logging (not raising) a failure, except a wrong password: that one
    the caller can act on, and a run again with the right one finishes the job."""
    try:
        bk.delete_ledger(ledger_id, password)
    except NoSuchLedgerError:
        pass
    except UnauthorizedError:
        raise
    except BKError as exc:
        log.warning("ledger %d: could not delete it: %s", ledger_id, exc)


def list_logs(bk: BookKeeper) -> list[str]:
    """Names of all logs, sorted."""
    return log_store(bk).names()


def log_metadata(bk: BookKeeper, name: str) -> LogMetadata:
    """The main znode of log ``name`` (tail ledgers, segment summaries, properties)."""
    return log_store(bk).read(name).value


def log_incarnation(md: LogMetadata) -> str:
    """Which incarnation of its name a log is: the log id fixed at creation, so a log
    deleted and created again under the same name is told apart from the old one (a
    reader's position in the old log means nothing in the new one). A log created before
    log ids existed is named by its creation time (``ctime-<ms>``), also fixed."""
    return md.log_id or f"ctime-{md.ctime_ms}"


def log_ledgers(bk: BookKeeper, name: str) -> list[LedgerInfo]:
    """Every live ledger of log ``name`` in log order (reads the spilled segments)."""
    return open_log_view(bk, name).ledgers()


def create_log(bk: BookKeeper, name: str, *, properties: dict[str, Any] | None = None,
               quorums: tuple[int, int, int] | None = None) -> LogMetadata:
    """Create an empty log (:class:`LogExistsError` if it exists) with a new random log id
    (:func:`log_incarnation`). ``quorums`` ``(E, Qw, Qa)``: recorded in its properties for
    the writers that give none (:func:`~bk_spark.protocol.log_rules.log_quorums`)."""
    props = dict(properties or {})
    if quorums is not None:
        props.update(log_rules.quorum_properties(quorums))
    md = LogMetadata(ctime_ms=now_ms(), log_id=uuid.uuid4().hex).with_properties(props)
    return log_store(bk).create(name, md).value


def update_log_properties(bk: BookKeeper, name: str, update: PropertiesUpdate
                          ) -> dict[str, Any]:
    """CAS the properties of log ``name`` whoever writes it (a writer that must own the log
    uses :meth:`LogWriter.update_properties`). Returns the properties written."""
    md = update_log(bk, name, needs_change=lambda m: True,
                     make_change=lambda m: m.with_properties(update))
    return dict(md.value.properties)


def truncate_log(bk: BookKeeper, name: str, before: Position, password: bytes | str = b""
                 ) -> list[int]:
    """Drop the whole ledgers entirely before ``before``'s ledger, then delete them
    (``password``: the ledgers', which their bookies check before deleting data).

    The ledger list is changed first (CAS), so no reader is sent to a deleted ledger; then
    each dropped ledger is deleted from its bookies and the metadata store, reclaiming its
    space. A ledger that is not closed yet (and every one after it) is kept. Returns the ids
    of the ledgers dropped.
    """
    password = password_bytes(password)
    view = open_log_view(bk, name)
    md = view.md
    try:
        before_index = view.index_of(before)
    except LogTruncatedError:
        return []  # already truncated past it
    target = md.truncated(before_index).first_index
    if target <= md.first_index:
        return []
    dropped = []
    for index in range(md.first_index, target):
        info = view.at(index)
        assert info is not None
        dropped.append(info.ledger_id)
    offloaded: list[str] = []
    policy: list[offload_rules.OffloadPolicy | None] = [None]
    targets: list[str] = []

    def make_change(m: LogMetadata) -> LogMetadata:
        # The dropped ledgers' offload states go in the same CAS (metadata first); their
        # Parquet files are deleted after it, so no reader is sent to a deleted file.
        states = offload_rules.states_of(m.properties)
        offloaded[:] = [offload_rules.offload_file(name, m.log_id, lid, states[lid])
                        for lid in dropped if lid in states]
        policy[0] = offload_rules.policy_of(m.properties)
        targets[:] = [states[lid].target for lid in dropped if lid in states]
        return m.truncated(target, dropped).with_properties(
            lambda p: offload_rules.without_states(p, dropped))

    update_log(bk, name, needs_change=lambda m: m.first_index < target,
               make_change=make_change)
    for lid in dropped:
        delete_ledger_quietly(bk, lid, password)
    if offloaded:
        expire_from_iceberg(name, policy[0], dropped, targets[0])
    delete_offloaded_files(offloaded)
    log.info("log %r: truncated %d ledgers before ledger #%d", name, len(dropped), target)
    return dropped


def delete_log(bk: BookKeeper, name: str, password: bytes | str = b"") -> list[int]:
    """Delete log ``name`` and all its ledgers (``password``: theirs); returns the ledger ids
    deleted.

    First a CAS marks the log as being deleted (a writer's next CAS fails with
    :class:`LogNotFoundError`), then every ledger is deleted (with the spare ledger a
    writer that died prepared: :func:`~bk_spark.log.pending.sweep_spares`), then the
    znodes. Interrupted, it can be run again.
    """
    password = password_bytes(password)
    store = log_store(bk)
    md = update_log(bk, name, needs_change=lambda m: not m.deleting,
                     make_change=lambda m: m.marked_deleting(), allow_deleting=True).value
    ledgers = [r.ledger_id for r in LogView(store, name, md).ledgers()]
    states = offload_rules.states_of(md.properties)
    for lid in ledgers:
        delete_ledger_quietly(bk, lid, password)
    pending.sweep_spares(bk, name, password)
    store.delete_tree(name)
    # The log's metadata is gone first; then its Parquet files (a reader finds no log),
    # expired from its Iceberg table before they go.
    files = [offload_rules.offload_file(name, md.log_id, lid, st)
             for lid, st in states.items()]
    if files:
        expire_from_iceberg(name, offload_rules.policy_of(md.properties), list(states),
                            next(iter(states.values())).target)
    delete_offloaded_files(files)
    return ledgers


def expire_from_iceberg(name: str, policy: offload_rules.OffloadPolicy | None,
                        ledger_ids: list[int], offloaded_to: str) -> None:
    """Expire dropped ledgers' files from the log's Iceberg table (when its policy names
    a catalog) before the files are deleted, so a reader of the table never meets a
    deleted file (:func:`bk_spark.io.iceberg.expire_ledgers`). A failure is logged:
    the files are deleted all the same (``spark.read.parquet`` of the offload path must
    not read dropped rows) and the offloader's next pass expires them."""
    if policy is None or not policy.iceberg_catalog:
        return
    from bk_spark.io.iceberg import expire_ledgers, warehouse_of

    target = policy.target or offloaded_to  # (the offloader's default target)
    try:
        expire_ledgers(policy.iceberg_catalog, warehouse_of(target), name, ledger_ids)
    except Exception as exc:  # pyiceberg's and the catalog's own errors
        log.warning("log %r: could not expire %d truncated ledgers from its Iceberg table "
                    "(the offloader's next pass does): %s", name, len(ledger_ids), exc)


def delete_offloaded_files(uris: list[str]) -> None:
    """Delete offloaded Parquet files no metadata names any more, logging (not raising)
    a failure: an unreachable target leaves an orphan file, never a wrong read."""
    from bk_spark.io.offload_files import delete, shown_uri

    for uri in uris:
        try:
            delete(uri)
        except (BKError, OSError) as exc:
            log.warning("could not delete offloaded file %s: %s", shown_uri(uri), exc)
