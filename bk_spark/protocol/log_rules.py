"""What a log's writer, a new owner and a committer decide from the ledger list they read.

Theory of operation (ledgers-to-logs.txt, "Opening a log" and "Rolling ledgers"): the
ordered ledger list changes only by compare-and-swap; after reading it (step 1) and after
every lost CAS the caller decides again from the list it finds. Those decisions are pure
functions of :class:`~bk_spark.protocol.log_format.LogMetadata`, here, tested with tables in
``tests/unit/test_log_rules.py``; :mod:`bk_spark.log` does the I/O.

* :func:`ledgers_to_fence`: step 2 of opening a log, "Fence the last two ledgers in the
  list. Two ledgers are fenced because the writer may be writing to the second-to-last
  ledger while adding the last ledger to the list", plus the older live ledgers whose end
  was never recorded (they are closed, so their recovery open only reads their end).
  Truncated ledgers are never fenced: they are gone.
* :func:`roll` (:data:`ROLL`): a writer adding its next ledger. It may change the list
  only while the last ledger is still its own; a list that already names the new ledger
  means its own CAS landed (the answer was lost); a log being deleted is gone.
* :func:`commit_check`: a committer of ledgers written elsewhere (one per Spark task) adds
  nothing when its last ledger is already listed (its own CAS landed) or the transaction
  id, or a later one, is already committed (a replayed or zombie commit).
* :func:`outside_position` (:data:`OUTSIDE`): a position (ledger, entry) given without its
  index, in a ledger the list does not hold: removed by truncation (data loss, as Kafka's
  connector treats an offset below the earliest), or never part of this log (an option
  error), told from the range of removed ledger ids the log keeps and what the ledger's own
  metadata still says.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import Enum
from types import MappingProxyType

from bk_spark.protocol import offload_rules
from bk_spark.protocol.ledger_metadata import DEFAULT_QUORUMS, validate_quorums
from bk_spark.protocol.log_format import LedgerInfo, LogMetadata

#: Log property holding, per transaction key, the last transaction id committed:
#: ``{"bk-spark.txn": {"<txn key>": <txn id>}}``.
TXN_PROPERTY = "bk-spark.txn"


def ledgers_to_fence(md: LogMetadata) -> list[LedgerInfo]:
    """The ledgers a new owner recovery-opens before its CAS, in list order: the last two
    live ledgers, and every older live ledger whose end is not recorded yet.

    Not a ledger whose bookie copy was dropped after its offload (tiered storage): no bookie
    holds it to fence, and nothing needs fencing, since only a closed ledger whose end is
    recorded is ever offloaded (:func:`~bk_spark.protocol.offload_rules.due`)."""
    dropped = {lid for lid, st in offload_rules.states_of(md.properties).items() if st.dropped}
    live = [r for r in md.tail if r.index >= md.first_index and r.ledger_id not in dropped]
    last_two = {r.ledger_id for r in md.tail[-2:]}
    return [r for r in live if r.ledger_id in last_two or not r.is_described]


def owns(md: LogMetadata, ledger_id: int) -> bool:
    """A writer still owns the log while the last ledger of the list is its own."""
    last = md.last_ledger
    return last is not None and last.ledger_id == ledger_id


class LogDecision(Enum):
    """What a log writer or committer does with the list it found."""

    CHANGE = "change"        #: write its change with a CAS
    DONE = "done"            #: its change is already in the list: success, no write
    LOST = "lost"            #: fail: another writer took the log over
    DELETED = "deleted"      #: fail: the log is being deleted
    COMMITTED = "committed"  #: add nothing: the transaction was already committed


#: A writer rolling to ``new`` while it wrote ``current``: (deleting, new already listed,
#: still owns the log through ``current``) -> decision. Its own landed CAS makes ``new``
#: the last ledger, so (listed, not owning through current) is DONE, not LOST.
ROLL: Mapping[tuple[bool, bool, bool], LogDecision] = MappingProxyType({
    (True, False, False): LogDecision.DELETED,
    (True, False, True): LogDecision.DELETED,
    (True, True, False): LogDecision.DELETED,
    (True, True, True): LogDecision.DELETED,
    (False, True, False): LogDecision.DONE,
    (False, True, True): LogDecision.DONE,
    (False, False, True): LogDecision.CHANGE,
    (False, False, False): LogDecision.LOST,
})


def roll(md: LogMetadata, current: int, new: int) -> LogDecision:
    """The decision of a writer of ledger ``current`` adding ledger ``new``."""
    return ROLL[(md.deleting, md.find_in_tail(new) is not None, owns(md, current))]


def committed_txn(md: LogMetadata, txn_key: str) -> int | None:
    """The last transaction id committed under ``txn_key`` (None: none yet)."""
    value = (md.properties.get(TXN_PROPERTY) or {}).get(txn_key)
    return value if isinstance(value, int) else None


def commit_check(md: LogMetadata, ledger_ids: Sequence[int], txn_key: str | None,
                 txn_id: int | None) -> LogDecision:
    """A commit of ``ledger_ids`` with transaction ``(txn_key, txn_id)`` given list ``md``:
    DELETED for a log being deleted, DONE when its last ledger is listed (its own CAS
    landed), COMMITTED when ``txn_id`` or a later id is committed under ``txn_key``, else
    CHANGE."""
    if md.deleting:
        return LogDecision.DELETED
    if ledger_ids and md.find_in_tail(ledger_ids[-1]) is not None:
        return LogDecision.DONE
    if txn_key is not None and txn_id is not None:
        last = committed_txn(md, txn_key)
        if last is not None and last >= txn_id:
            return LogDecision.COMMITTED
    return LogDecision.CHANGE


#: Log properties holding the quorums of the ledgers a log's writers create
#: (``bk log create -E/-Qw/-Qa``, :func:`~bk_spark.log.create_log`'s quorums).
QUORUM_PROPERTIES = ("bk-spark.ensemble_size", "bk-spark.write_quorum_size",
                     "bk-spark.ack_quorum_size")


def resolve_quorums(properties: Mapping[str, object],
                    given: tuple[int | None, int | None, int | None] = (None, None, None)
                    ) -> tuple[int, int, int]:
    """The ``(E, Qw, Qa)`` a writer of a log creates its ledgers with: each one ``given``,
    else the log's recorded one (:data:`QUORUM_PROPERTIES`), else the default
    (:data:`~bk_spark.protocol.ledger_metadata.DEFAULT_QUORUMS`). One policy
    for the Python writer, the shell and Spark writes; not checked (see :func:`log_quorums`).
    """
    out = []
    for value, key, default in zip(given, QUORUM_PROPERTIES, DEFAULT_QUORUMS, strict=True):
        if value is None:
            recorded = properties.get(key)
            value = int(recorded) if isinstance(recorded, int | str) else default
        out.append(value)
    e, qw, qa = out
    return e, qw, qa


def log_quorums(properties: Mapping[str, object],
                given: tuple[int | None, int | None, int | None] = (None, None, None)
                ) -> tuple[int, int, int]:
    """:func:`resolve_quorums`, checked: E >= Qw >= Qa >= 1 (:class:`InvalidConfigError`)."""
    e, qw, qa = resolve_quorums(properties, given)
    validate_quorums(e, qw, qa)
    return e, qw, qa


def quorum_properties(quorums: tuple[int, int, int]) -> dict[str, int]:
    """The log properties recording ``quorums`` (:data:`QUORUM_PROPERTIES`)."""
    validate_quorums(*quorums)
    return dict(zip(QUORUM_PROPERTIES, quorums, strict=True))


class Outside(Enum):
    """What a position in a ledger the log does not list is."""

    TRUNCATED = "truncated"  #: removed by truncation: data loss (failOnDataLoss decides)
    FOREIGN = "foreign"      #: never part of this log: an option error
    UNKNOWN = "unknown"      #: truncated before the log kept removed ids: cannot tell


class LedgerNow(Enum):
    """The ledger of such a position, as its own metadata says now."""

    GONE = "gone"            #: no such ledger (deleted, or never created)
    THIS_LOG = "this log"    #: exists, created for this log (never listed, or not deleted yet)
    ELSEWHERE = "elsewhere"  #: exists, created for another log or for none


class Removed(Enum):
    """Where the ledger id lies against the log's :attr:`LogMetadata.removed_ledgers`."""

    NONE = "none"              #: the log was never truncated (``first_index`` 0)
    IN_RANGE = "in range"      #: within the lowest..highest removed id
    OUT_OF_RANGE = "out"       #: outside it
    UNRECORDED = "unrecorded"  #: truncated before the range was kept (older metadata)


#: (the ledger now, its id against the removed range) -> what the position is. A ledger that
#: still exists for another log (or none) was never part of this one; a removed range covers
#: ledgers of other logs between this log's, so a deleted one in range counts as truncated
#: (the only place a position can be taken for data loss it is not).
OUTSIDE: Mapping[tuple[LedgerNow, Removed], Outside] = MappingProxyType({
    (LedgerNow.ELSEWHERE, Removed.NONE): Outside.FOREIGN,
    (LedgerNow.ELSEWHERE, Removed.IN_RANGE): Outside.FOREIGN,
    (LedgerNow.ELSEWHERE, Removed.OUT_OF_RANGE): Outside.FOREIGN,
    (LedgerNow.ELSEWHERE, Removed.UNRECORDED): Outside.FOREIGN,
    (LedgerNow.THIS_LOG, Removed.NONE): Outside.FOREIGN,       # a spare never listed
    (LedgerNow.THIS_LOG, Removed.IN_RANGE): Outside.TRUNCATED,  # its deletion still to come
    (LedgerNow.THIS_LOG, Removed.OUT_OF_RANGE): Outside.FOREIGN,
    (LedgerNow.THIS_LOG, Removed.UNRECORDED): Outside.UNKNOWN,
    (LedgerNow.GONE, Removed.NONE): Outside.FOREIGN,
    (LedgerNow.GONE, Removed.IN_RANGE): Outside.TRUNCATED,
    (LedgerNow.GONE, Removed.OUT_OF_RANGE): Outside.FOREIGN,
    (LedgerNow.GONE, Removed.UNRECORDED): Outside.UNKNOWN,
})


def removed_range(md: LogMetadata, ledger_id: int) -> Removed:
    """Where ``ledger_id`` lies against the ledgers truncation removed from ``md``."""
    if md.removed_ledgers is None:
        return Removed.NONE if md.first_index == 0 else Removed.UNRECORDED
    lo, hi = md.removed_ledgers
    return Removed.IN_RANGE if lo <= ledger_id <= hi else Removed.OUT_OF_RANGE


def outside_position(md: LogMetadata, ledger_id: int, ledger_now: LedgerNow) -> Outside:
    """What a position in ledger ``ledger_id``, which ``md`` does not list, is."""
    return OUTSIDE[(ledger_now, removed_range(md, ledger_id))]
