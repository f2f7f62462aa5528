"""Tiered storage of a log: which closed ledgers are offloaded to Parquet, where a reader
reads each ledger from, and when a bookie copy may be deleted (pure, no I/O).

Theory of operation (Pulsar's ``LedgerOffloader`` / ``OffloadContext``, in one CAS loop)
-------------------------------------------------------------------------------------
A log's *offload policy* (:class:`OffloadPolicy`, set by ``bk log set NAME
--offload-after ...``) and the *offload state* of each of its ledgers
(:class:`OffloadState`) live in the log's metadata properties, so they change only by
compare-and-swap through :func:`bk_spark.log.store.update_log` together with the ledger
list itself. The elected offloader (:mod:`bk_spark.offload`) takes one ledger at a time,
in log order:

1. it records a new offload id in the ledger's state (CAS): the ledger is *offloading*;
2. it writes the ledger as Parquet to a path named by that id (:func:`offload_file`);
3. it reads the file back and verifies it (row count, checksum of the values);
4. it marks the state *complete* (CAS, only if the id is still the one of step 1).

A crash between 1 and 4 leaves an *offloading* state whose file is never read: the next
attempt deletes that file before recording its own id (step 1 again). A second offload of
a complete ledger changes nothing (:func:`due` skips it). Readers read a ledger from
Parquet only once it is complete (:data:`READ_FROM`), and from the bookies otherwise; the
bookie copy is deleted only after the deletion lag (:func:`bookie_copy_deletable`), the
state recording first (CAS) that the bookies no longer hold it (metadata first, data
after: a reader never follows metadata to deleted data).

Offload happens in log order: a ledger is due only when every live ledger before it is
complete, so the offloaded part of a log is always a prefix of its live ledgers
(:func:`offloaded_prefix`): the boundary ``read_log`` splits a Spark read at.

Properties layout::

    "bk-spark.offload": {"after": "0" | "<n>" | "<size>" | "<duration>",
                         "target": "<pyarrow filesystem URI>" | null,
                         "deletion_lag_ms": <ms> | -1,
                         "iceberg_catalog": "<catalog URI>"}     (optional)
    "bk-spark.offloaded": {"<ledger id>": {"id": "<offload id>", "target": "<URI>",
                           "done_ms": <ms>, "rows": n, "entries": n, "bytes": n,
                           "crc": <crc32 of values>, "dropped": true}}

``done_ms`` is absent while offloading; ``dropped`` is present once the bookie copy is
deleted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from types import MappingProxyType
from typing import Any

from bk_spark.errors import InvalidConfigError, OffloadRecordsFullError
from bk_spark.protocol.ledger_metadata import MAX_METADATA_BYTES
from bk_spark.protocol.log_format import LedgerInfo

#: Log property holding the log's :class:`OffloadPolicy`.
POLICY_PROPERTY = "bk-spark.offload"
#: Log property holding each ledger's :class:`OffloadState`, keyed by ledger id.
STATE_PROPERTY = "bk-spark.offloaded"
#: Pulsar's default deletion lag (4 h).
DEFAULT_DELETION_LAG_MS = 4 * 3600 * 1000


class AfterKind(Enum):
    """What ``--offload-after`` counts."""

    LEDGERS = "ledgers"  #: keep the newest N closed ledgers on bookies only
    BYTES = "bytes"      #: keep the newest N bytes of closed ledgers on bookies only
    AGE = "age"          #: offload a closed ledger once its last entry is this old (ms)


_SIZE = re.compile(r"(\d+)\s*(b|kb|kib|mb|mib|gb|gib|tb|tib)", re.IGNORECASE)
_SIZE_UNITS = {"b": 1, "kb": 10**3, "kib": 2**10, "mb": 10**6, "mib": 2**20, "gb": 10**9,
               "gib": 2**30, "tb": 10**12, "tib": 2**40}
_AGE = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)", re.IGNORECASE)
_AGE_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_after(text: str) -> tuple[AfterKind, int]:
    """``"0"`` (as soon as a ledger closes), ``"5"`` (closed ledgers kept on bookies only),
    ``"64MiB"`` (bytes), ``"2h"`` / ``"30s"`` / ``"500ms"`` (age) -> ``(kind, amount)``."""
    t = str(text).strip()
    if t.isdigit():
        return AfterKind.LEDGERS, int(t)
    m = _SIZE.fullmatch(t)
    if m:
        return AfterKind.BYTES, int(m.group(1)) * _SIZE_UNITS[m.group(2).lower()]
    m = _AGE.fullmatch(t)
    if m:
        return AfterKind.AGE, int(float(m.group(1)) * _AGE_UNITS[m.group(2).lower()])
    raise InvalidConfigError(
        f"--offload-after {text!r}: give a number of closed ledgers (0: as soon as a ledger "
        f"closes), a size (64MiB) or an age (30s, 2h, 1d)")


def parse_lag_ms(text: str) -> int:
    """``--offload-deletion-lag``: ``-1`` (keep the bookie copy), ``0``, ``30s``, ``4h``."""
    t = str(text).strip()
    if t in ("-1", "0"):
        return int(t)
    m = _AGE.fullmatch(t)
    if m is None:
        raise InvalidConfigError(
            f"--offload-deletion-lag {text!r}: give -1 (keep both copies), 0 or an age such "
            f"as 30s, 4h")
    return int(float(m.group(1)) * _AGE_UNITS[m.group(2).lower()])


@dataclass(frozen=True)
class OffloadPolicy:
    """When a log's closed ledgers are offloaded, where to, and when their bookie copy goes.

    ``target``: a pyarrow filesystem URI (``file:///...``, ``s3://bucket/prefix``); None: the
    offloader's default target. ``deletion_lag_ms``: -1 keeps the bookie copy forever.
    """

    after: str = "0"
    target: str | None = None
    deletion_lag_ms: int = DEFAULT_DELETION_LAG_MS
    #: An Iceberg catalog URI (``sqlite:///path/catalog.db``: pyiceberg's SQL catalog on
    #: SQLite) the offloaded files are committed to; None: no Iceberg table.
    iceberg_catalog: str | None = None

    def __post_init__(self) -> None:
        parse_after(self.after)
        if self.deletion_lag_ms < -1:
            raise InvalidConfigError(
                f"offload deletion lag {self.deletion_lag_ms} ms: give -1 (keep) or >= 0")

    @property
    def kind(self) -> AfterKind:
        return parse_after(self.after)[0]

    @property
    def amount(self) -> int:
        return parse_after(self.after)[1]

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"after": self.after, "target": self.target,
                             "deletion_lag_ms": self.deletion_lag_ms}
        if self.iceberg_catalog is not None:
            d["iceberg_catalog"] = self.iceberg_catalog
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> OffloadPolicy:
        return cls(after=str(d.get("after", "0")), target=d.get("target"),
                   deletion_lag_ms=int(d.get("deletion_lag_ms", DEFAULT_DELETION_LAG_MS)),
                   iceberg_catalog=d.get("iceberg_catalog"))


def policy_of(properties: Mapping[str, Any]) -> OffloadPolicy | None:
    """The log's offload policy (None: the log is never offloaded)."""
    d = properties.get(POLICY_PROPERTY)
    return OffloadPolicy.from_json(d) if isinstance(d, Mapping) else None


@dataclass(frozen=True)
class OffloadState:
    """One ledger's offload record (Pulsar's ``OffloadContext``): the id written before the
    copy, what the verified copy holds once complete, and whether the bookies still do."""

    offload_id: str
    target: str
    done_ms: int | None = None
    rows: int = 0
    entries: int = 0
    bytes: int = 0
    crc: int = 0
    dropped: bool = False

    @property
    def complete(self) -> bool:
        return self.done_ms is not None

    def completed(self, done_ms: int, rows: int, entries: int, nbytes: int, crc: int
                  ) -> OffloadState:
        return replace(self, done_ms=done_ms, rows=rows, entries=entries, bytes=nbytes,
                       crc=crc)

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"id": self.offload_id, "target": self.target}
        if self.done_ms is not None:
            d |= {"done_ms": self.done_ms, "rows": self.rows, "entries": self.entries,
                  "bytes": self.bytes, "crc": self.crc}
        if self.dropped:
            d["dropped"] = True
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> OffloadState:
        return cls(offload_id=str(d["id"]), target=str(d["target"]),
                   done_ms=d.get("done_ms"), rows=int(d.get("rows", 0)),
                   entries=int(d.get("entries", 0)), bytes=int(d.get("bytes", 0)),
                   crc=int(d.get("crc", 0)), dropped=bool(d.get("dropped", False)))


def states_of(properties: Mapping[str, Any]) -> dict[int, OffloadState]:
    """Every ledger's offload state recorded in the log's properties."""
    d = properties.get(STATE_PROPERTY)
    if not isinstance(d, Mapping):
        return {}
    return {int(k): OffloadState.from_json(v) for k, v in d.items()}


def target_of(properties: Mapping[str, Any]) -> str | None:
    """Where a log's Parquet files are: its policy's target, else the target of its newest
    offload record (a policy with no target uses the offloader's, which the records name);
    None when neither says."""
    policy = policy_of(properties)
    if policy is not None and policy.target:
        return policy.target
    states = states_of(properties)
    return states[max(states)].target if states else None


def with_state(properties: Mapping[str, Any], ledger_id: int, state: OffloadState | None
               ) -> dict[str, Any]:
    """New properties with ``ledger_id``'s state replaced (None: removed)."""
    props = dict(properties)
    states = dict(props.get(STATE_PROPERTY) or {})
    if state is None:
        states.pop(str(ledger_id), None)
    else:
        states[str(ledger_id)] = state.to_json()
    if states:
        props[STATE_PROPERTY] = states
    else:
        props.pop(STATE_PROPERTY, None)
    return props


def without_states(properties: Mapping[str, Any], ledger_ids: Sequence[int]
                   ) -> dict[str, Any]:
    """New properties without the states of ``ledger_ids`` (truncation removes them in the
    same CAS that drops the ledgers)."""
    props: dict[str, Any] = dict(properties)
    for lid in ledger_ids:
        props = with_state(props, lid, None)
    return props


# ------------------------------------------------------------------------------- tiers


class Tier(Enum):
    """Where a ledger's data is (``bk log show``)."""

    BOOKIES = "bookies"          #: not offloaded
    OFFLOADING = "offloading"    #: an offload id is recorded, the copy is not complete
    BOTH = "both"                #: complete, the bookie copy is kept (deletion lag)
    OFFLOADED = "offloaded"      #: complete, the bookie copy is deleted


class Source(Enum):
    """Where a reader reads a ledger from."""

    BOOKIES = "bookies"
    PARQUET = "parquet"


#: (an offload id recorded, complete, bookie copy dropped) -> the ledger's tier. A dropped
#: copy is recorded only after completion, so (_, False, True) never occurs: such a record
#: is read as OFFLOADING and the reader stays on the bookies (it then sees the loss).
TIER: Mapping[tuple[bool, bool, bool], Tier] = MappingProxyType({
    (False, False, False): Tier.BOOKIES,
    (False, False, True): Tier.BOOKIES,
    (True, False, False): Tier.OFFLOADING,
    (True, False, True): Tier.OFFLOADING,
    (True, True, False): Tier.BOTH,
    (True, True, True): Tier.OFFLOADED,
    (False, True, False): Tier.BOOKIES,   # no id, no record: cannot be complete
    (False, True, True): Tier.BOOKIES,
})

#: Tier -> where a reader reads: the verified copy as soon as it is complete (Pulsar's
#: readers switch to the offloaded ledger as soon as its context is complete).
READ_FROM: Mapping[Tier, Source] = MappingProxyType({
    Tier.BOOKIES: Source.BOOKIES,
    Tier.OFFLOADING: Source.BOOKIES,
    Tier.BOTH: Source.PARQUET,
    Tier.OFFLOADED: Source.PARQUET,
})


def tier(state: OffloadState | None) -> Tier:
    if state is None:
        return Tier.BOOKIES
    return TIER[(True, state.complete, state.dropped)]


def read_from(state: OffloadState | None) -> Source:
    """Where a reader reads a ledger whose offload record is ``state``."""
    return READ_FROM[tier(state)]


# ------------------------------------------------------------------------------- decisions


def _eligible(ledgers: Sequence[LedgerInfo], policy: OffloadPolicy, now_ms: int,
              sizes: Mapping[int, int] | None) -> list[LedgerInfo]:
    """The leading closed ledgers the policy says may be offloaded (see :func:`due`)."""
    closed: list[LedgerInfo] = []
    for info in ledgers:
        if not info.is_described:
            break
        closed.append(info)
    kind, amount = policy.kind, policy.amount
    if kind is AfterKind.LEDGERS:
        return closed[:max(0, len(closed) - amount)]
    if kind is AfterKind.BYTES:
        sizes = sizes or {}
        kept, cut = 0, len(closed)
        while cut > 0 and kept + sizes.get(closed[cut - 1].ledger_id, 0) <= amount and \
                amount > 0:
            kept += sizes.get(closed[cut - 1].ledger_id, 0)
            cut -= 1
        return closed[:cut]
    return [r for r in closed if now_ms - closed_ms(r) >= amount]


def closed_ms(info: LedgerInfo) -> int:
    """When a closed ledger's last entry was appended (an empty ledger: its creation)."""
    return info.last_ts_ms if info.last_ts_ms is not None else info.first_ts_ms


def due(ledgers: Sequence[LedgerInfo], states: Mapping[int, OffloadState],
        policy: OffloadPolicy | None, now_ms: int, sizes: Mapping[int, int] | None = None
        ) -> list[LedgerInfo]:
    """The ledgers to offload now, in log order: closed (described) ledgers not complete,
    each only after every earlier live ledger is complete (offload order), and only those
    the policy says are due:

    * LEDGERS n: all but the newest ``n`` closed ledgers (0: every closed ledger);
    * BYTES n: all but the newest closed ledgers holding ``n`` bytes (``sizes``: bytes per
      ledger id, unknown counts as 0);
    * AGE ms: those whose last entry is at least that old (an empty ledger: its creation).
    """
    if policy is None:
        return []
    eligible_ids = {r.ledger_id for r in _eligible(ledgers, policy, now_ms, sizes)}
    for info in ledgers:  # the first live ledger not complete, if the policy says it is due
        st = states.get(info.ledger_id)
        if st is not None and st.complete:
            continue
        return [info] if info.ledger_id in eligible_ids else []
    return []


def backlog(ledgers: Sequence[LedgerInfo], states: Mapping[int, OffloadState],
            policy: OffloadPolicy | None, now_ms: int, sizes: Mapping[int, int] | None = None
            ) -> list[LedgerInfo]:
    """Every ledger the policy says is due whose offload is not complete, in log order
    (the offloader takes them one by one: :func:`due` is the first of them). What ``bk
    offload status`` counts and the lag is measured from."""
    if policy is None:
        return []
    return [r for r in _eligible(ledgers, policy, now_ms, sizes)
            if not (states.get(r.ledger_id) is not None and states[r.ledger_id].complete)]


def lag_ms(backlog_: Sequence[LedgerInfo], policy: OffloadPolicy | None, now_ms: int
           ) -> int:
    """A log's offload lag: how long the oldest ledger of its backlog has been due (0: no
    backlog): since it closed, or for an AGE policy since it reached that age (the
    policy's own wait is no lag). The offloader's ``offload_log_lag_seconds`` gauge and
    ``bk offload status`` both show this value."""
    if not backlog_:
        return 0
    wait = policy.amount if policy is not None and policy.kind is AfterKind.AGE else 0
    return max(0, now_ms - closed_ms(backlog_[0]) - wait)


def offloaded_prefix(ledgers: Sequence[LedgerInfo], states: Mapping[int, OffloadState]
                     ) -> list[LedgerInfo]:
    """The leading live ledgers whose offload is complete (read from Parquet): the part of
    the log a Spark read hands to Spark's own Parquet scan."""
    out = []
    for info in ledgers:
        st = states.get(info.ledger_id)
        if st is None or not st.complete:
            break
        out.append(info)
    return out


def bookie_copy_deletable(state: OffloadState | None, deletion_lag_ms: int, now_ms: int
                          ) -> bool:
    """May the bookie copy of this ledger be deleted now? Only once complete, not already
    dropped, with a lag that is not -1 (keep both) and has passed since completion."""
    if state is None or not state.complete or state.dropped or deletion_lag_ms < 0:
        return False
    assert state.done_ms is not None
    return now_ms - state.done_ms >= deletion_lag_ms


#: Bytes of the log's main znode never filled by offload records (ZooKeeper's limit is
#: :data:`~bk_spark.protocol.ledger_metadata.MAX_METADATA_BYTES`): the log's writer
#: still rolls and its properties still change when no more records fit.
RECORDS_HEADROOM_BYTES = 64 * 1024
#: About how many bytes one offload record takes in the log's metadata.
RECORD_BYTES = 150


def records_limit(metadata_bytes: int, records: int) -> int:
    """About how many offload records a log can hold in all, given the size of its
    metadata now with ``records`` of them (what ``bk log set`` tells the user)."""
    room = MAX_METADATA_BYTES - RECORDS_HEADROOM_BYTES - metadata_bytes
    return max(records, records + room // RECORD_BYTES)


def check_records_room(log_name: str, metadata_bytes: int, records: int) -> None:
    """Step 1's limit: refuse a new offload record (:class:`OffloadRecordsFullError`)
    when the log's metadata with it (``metadata_bytes``, holding ``records`` records)
    would come within :data:`RECORDS_HEADROOM_BYTES` of ZooKeeper's znode limit. The
    records live in the log's znode, about :data:`RECORD_BYTES` each: some 6,000
    offloaded ledgers per log. Truncating the log removes its dropped ledgers' records."""
    limit = MAX_METADATA_BYTES - RECORDS_HEADROOM_BYTES
    if metadata_bytes > limit:
        raise OffloadRecordsFullError(
            f"log {log_name!r}: another offload record (it would hold {records}) would "
            f"make its metadata {metadata_bytes:,} bytes: over {limit:,} (ZooKeeper's znode "
            f"limit {MAX_METADATA_BYTES:,}, less {RECORDS_HEADROOM_BYTES:,} kept for the "
            f"log's writer). No more ledgers are offloaded until the log is truncated (bk "
            f"log truncate, truncate_log: the dropped ledgers' records go with them); "
            f"larger ledgers (roll less often) offload more data per record")


def start_offload(state: OffloadState | None, new_id: str, target: str
                  ) -> tuple[OffloadState, OffloadState | None]:
    """Step 1: the state to write for a new attempt, and the stale attempt whose file the
    caller deletes first (None: none). A complete state is never restarted."""
    if state is not None and state.complete:
        raise ValueError("a complete offload is never restarted")
    return OffloadState(offload_id=new_id, target=target), state


def offload_dir(target: str, log_name: str, log_id: str) -> str:
    """The directory holding a log's Parquet files under ``target`` (a log recreated under
    the same name gets another directory: its log id differs). A query in ``target``
    (``?endpoint_override=...``: filesystem options) stays at the end."""
    base, sep, query = target.partition("?")
    return f"{base.rstrip('/')}/{log_name}/{log_id or 'log'}{sep}{query}"


def offload_file(log_name: str, log_id: str, ledger_id: int, state: OffloadState) -> str:
    """The file an attempt writes (step 2): named by the ledger and the attempt's id."""
    base, sep, query = offload_dir(state.target, log_name, log_id).partition("?")
    return f"{base}/ledger-{ledger_id:019d}-{state.offload_id}.parquet{sep}{query}"


# ------------------------------------------------------------------------ keyholder handoff


class Handoff(Enum):
    """What an offloader contender does with a log's due ledger (:data:`HANDOFF`)."""

    OFFLOAD = "offload"    #: take the ledger's claim and run the four steps
    WAIT = "wait"          #: the elected one records it as waiting for a keyholder
    LEAVE = "leave"        #: not this contender's: left as it is


#: (elected, this contender can key the ledger, recorded as waiting for a keyholder)
#: -> what it does with the due ledger. The elected offloader offloads what it can key and
#: records the rest as *waiting for a keyholder* (a ledger whose password none of its
#: options matches and whose key its own bookie does not hold: without mutual TLS it learns
#: the key nowhere else). Every other contender offloads exactly the waiting ledgers its own
#: bookie holds a copy of (so holds the key: ``bk bookie --offload``), and nothing else.
#: Whoever offloads holds the ledger's ephemeral *claim* (:mod:`bk_spark.io.offload_status`)
#: for the four steps: one attempt at a time; a claimant killed with -9 loses its claim
#: with its ZooKeeper session, and the next claimant finds its offload id stale (step 1
#: deletes that never-counted file and records its own id by CAS).
HANDOFF: Mapping[tuple[bool, bool, bool], Handoff] = MappingProxyType({
    (True, True, False): Handoff.OFFLOAD,
    (True, True, True): Handoff.OFFLOAD,     # its key came back (a new password, TLS)
    (True, False, False): Handoff.WAIT,
    (True, False, True): Handoff.WAIT,       # still waiting: the record is kept
    (False, True, True): Handoff.OFFLOAD,    # a keyholder takes a waiting ledger
    (False, True, False): Handoff.LEAVE,     # the elected one offloads it
    (False, False, True): Handoff.LEAVE,     # another keyholder's
    (False, False, False): Handoff.LEAVE,
})


def handoff(elected: bool, can_key: bool, waiting: bool) -> Handoff:
    """What a contender does with a due ledger (:data:`HANDOFF`)."""
    return HANDOFF[(elected, can_key, waiting)]
