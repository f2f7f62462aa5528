"""Ledger metadata and the ledger state machine (OPEN -> IN_RECOVERY -> CLOSED).

Theory of operation (the seed, "Ledger metadata"): a ledger's metadata holds its 64-bit id,
the ensemble size E, write quorum size Qw and ack quorum size Qa (E >= Qw >= Qa), its
current state (OPEN, IN_RECOVERY or CLOSED), its last entry (meaningful once CLOSED), and
one or more *fragments*: the first entry id of the fragment and the ensemble (bookie ids)
storing the entries from there on. "Changes in the ensemble involve a new fragment being
added to the ledger."

Every state change of a ledger is listed in :data:`ALLOWED_TRANSITIONS` and checked by
:func:`check_transition`; nothing else in bk-spark changes a ledger's state:

* OPEN -> CLOSED: the writer closes the ledger ("Closing a ledger as a writer").
* OPEN -> IN_RECOVERY: a reader starts recovery, which also stops the writer's ensemble
  changes ("To recover a ledger, we first update the state in the metadata to IN_RECOVERY").
* IN_RECOVERY -> IN_RECOVERY: another recoverer takes over ("Multiple readers can try to
  recover a ledger at the same time").
* IN_RECOVERY -> CLOSED: the recoverer closes the ledger at the last entry it found.
* CLOSED is final: "Ledgers cannot be reopened for writing once they have been
  closed/recovered."

:class:`LedgerMetadata` is immutable; every change returns a new value that the caller
writes back with a compare-and-swap through
:func:`bk_spark.io.metadata_store.metadata_update_loop`. The module is pure (no I/O).
"""

from __future__ import annotations

import json
import time
from bisect import bisect_right
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, NamedTuple

from bk_spark.compat import StrEnum
from bk_spark.errors import InvalidConfigError, LedgerStateError, MetadataSerializationError
from bk_spark.protocol.digest import DIGEST_TYPES

#: Version of the serialized form written by :meth:`LedgerMetadata.to_bytes`.
METADATA_FORMAT_VERSION = 1

#: Largest serialized metadata accepted (ZooKeeper's default jute.maxbuffer is 1 MiB - 1,
#: and a request carries its path and headers too).
MAX_METADATA_BYTES = 1_000_000

MAX_LEDGER_ID = (1 << 63) - 1


class LedgerState(StrEnum):
    """The state of a ledger in its metadata."""

    OPEN = "OPEN"
    IN_RECOVERY = "IN_RECOVERY"
    CLOSED = "CLOSED"


#: The ledger state machine: old state -> the states it may change to.
ALLOWED_TRANSITIONS: Mapping[LedgerState, frozenset[LedgerState]] = MappingProxyType(
    {
        LedgerState.OPEN: frozenset({LedgerState.IN_RECOVERY, LedgerState.CLOSED}),
        LedgerState.IN_RECOVERY: frozenset({LedgerState.IN_RECOVERY, LedgerState.CLOSED}),
        LedgerState.CLOSED: frozenset(),
    }
)


def check_transition(old: LedgerState, new: LedgerState, ledger_id: int | None = None) -> None:
    """Raise :class:`LedgerStateError` unless ``old -> new`` is in the state machine."""
    old, new = LedgerState(old), LedgerState(new)
    if new in ALLOWED_TRANSITIONS[old]:
        return
    what = f"ledger {ledger_id}" if ledger_id is not None else "ledger"
    if old == LedgerState.CLOSED:
        hint = "a closed ledger is final: create a new ledger to write more"
    else:
        hint = "allowed: " + ", ".join(
            f"{old.value} -> {s.value}" for s in sorted(ALLOWED_TRANSITIONS[old])
        )
    raise LedgerStateError(f"{what}: cannot change state {old.value} -> {new.value} ({hint})")


class Quorums(NamedTuple):
    """A ledger's ensemble size, write quorum and ack quorum (E >= Qw >= Qa >= 1)."""

    ensemble_size: int
    write_quorum_size: int
    ack_quorum_size: int


#: The quorums of a ledger created with none given (BookKeeper's client defaults): E=3,
#: Qw=2, Qa=2. The one home of these numbers: ``create_ledger``, :class:`LogWriterConfig`,
#: ``write_closed_ledger``, a log that records none and ``bk simpletest`` take them here.
DEFAULT_QUORUMS = Quorums(3, 2, 2)


def validate_quorums(ensemble_size: int, write_quorum_size: int, ack_quorum_size: int) -> None:
    """Raise :class:`InvalidConfigError` unless E >= Qw >= Qa >= 1 (the seed's invariant)."""
    for name, value in (
        ("ensemble_size", ensemble_size),
        ("write_quorum_size", write_quorum_size),
        ("ack_quorum_size", ack_quorum_size),
    ):
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidConfigError(f"{name} must be an integer, got {value!r}")
    if ack_quorum_size < 1:
        raise InvalidConfigError(f"ack_quorum_size ({ack_quorum_size}) must be >= 1")
    if ensemble_size < write_quorum_size:
        raise InvalidConfigError(
            f"ensemble_size ({ensemble_size}) must be >= write_quorum_size ({write_quorum_size})"
        )
    if write_quorum_size < ack_quorum_size:
        raise InvalidConfigError(
            f"write_quorum_size ({write_quorum_size}) must be >= ack_quorum_size "
            f"({ack_quorum_size})"
        )


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


Fragment = tuple[int, tuple[str, ...]]


@dataclass(frozen=True, kw_only=True)
class LedgerMetadata:
    """The metadata of one ledger (immutable; changes return new values).

    ``ensembles`` lists the fragments as ``(first_entry_id, (bookie_id, ...))`` in ascending
    order of first entry, the first one starting at entry 0; each ensemble has
    ``ensemble_size`` distinct bookie ids ("host:port"). ``last_entry_id`` (-1: no entry)
    and ``length`` (bytes) are meaningful once the ledger is CLOSED. ``custom_metadata`` is
    stored as sorted ``(key, value)`` pairs (use ``dict(md.custom_metadata)``); a mapping is
    accepted and converted.
    """

    ledger_id: int
    ensemble_size: int
    write_quorum_size: int
    ack_quorum_size: int
    ensembles: tuple[Fragment, ...]
    state: LedgerState = LedgerState.OPEN
    last_entry_id: int = -1
    length: int = 0
    digest_type: str = "crc32c"
    password_digest: str = ""
    custom_metadata: tuple[tuple[str, str], ...] = ()
    ctime_ms: int = field(default_factory=_now_ms)

    validate_quorums = staticmethod(validate_quorums)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        if not 0 <= self.ledger_id <= MAX_LEDGER_ID:
            raise InvalidConfigError(f"ledger id {self.ledger_id} outside [0, 2^63)")
        validate_quorums(self.ensemble_size, self.write_quorum_size, self.ack_quorum_size)
        set_(self, "state", LedgerState(self.state))
        if self.digest_type not in DIGEST_TYPES:
            raise InvalidConfigError(
                f"digest_type {self.digest_type!r}: expected one of {', '.join(DIGEST_TYPES)}"
            )
        if self.last_entry_id < -1 or self.length < 0:
            raise InvalidConfigError(
                f"ledger {self.ledger_id}: last_entry_id ({self.last_entry_id}) must be >= -1 "
                f"and length ({self.length}) >= 0"
            )
        fragments = tuple((int(first), tuple(ens)) for first, ens in self.ensembles)
        if not fragments or fragments[0][0] != 0:
            raise InvalidConfigError(
                f"ledger {self.ledger_id}: the first fragment must start at entry 0"
            )
        for (prev, _), (first, _) in zip(fragments, fragments[1:], strict=False):
            if first <= prev:
                raise InvalidConfigError(
                    f"ledger {self.ledger_id}: fragments must start at ascending entry ids, "
                    f"got {prev} then {first}"
                )
        for _, ensemble in fragments:
            _check_ensemble(self.ledger_id, self.ensemble_size, ensemble)
        set_(self, "ensembles", fragments)
        custom = self.custom_metadata
        pairs = custom.items() if isinstance(custom, Mapping) else custom
        set_(self, "custom_metadata", tuple(sorted((str(k), str(v)) for k, v in pairs)))

    @classmethod
    def new(
        cls,
        ledger_id: int,
        ensemble: Iterable[str],
        *,
        write_quorum_size: int,
        ack_quorum_size: int,
        digest_type: str = "crc32c",
        password_digest: str = "",
        custom_metadata: Mapping[str, str] | None = None,
        ctime_ms: int | None = None,
    ) -> LedgerMetadata:
        """The metadata of a new OPEN ledger whose first fragment is ``ensemble``."""
        ensemble = tuple(ensemble)
        return cls(
            ledger_id=ledger_id,
            ensemble_size=len(ensemble),
            write_quorum_size=write_quorum_size,
            ack_quorum_size=ack_quorum_size,
            ensembles=((0, ensemble),),
            digest_type=digest_type,
            password_digest=password_digest,
            custom_metadata=tuple((custom_metadata or {}).items()),
            ctime_ms=_now_ms() if ctime_ms is None else ctime_ms,
        )

    # -- queries ---------------------------------------------------------------------------

    @property
    def is_closed(self) -> bool:
        return self.state == LedgerState.CLOSED

    @property
    def last_ensemble(self) -> tuple[str, ...]:
        """The ensemble of the last fragment (where new entries go)."""
        return self.ensembles[-1][1]

    def ensemble_for(self, entry_id: int) -> tuple[str, ...]:
        """The ensemble of the fragment holding ``entry_id``."""
        if entry_id < 0:
            raise ValueError(f"entry id must be >= 0, got {entry_id}")
        i = bisect_right(self.ensembles, entry_id, key=lambda fragment: fragment[0])
        return self.ensembles[i - 1][1]

    # -- changes (each returns a new LedgerMetadata) ---------------------------------------

    def with_state(self, new: LedgerState) -> LedgerMetadata:
        """This metadata in state ``new``; :class:`LedgerStateError` if not allowed."""
        check_transition(self.state, new, self.ledger_id)
        return replace(self, state=new)

    def closed(self, last_entry_id: int, length: int) -> LedgerMetadata:
        """This ledger CLOSED at ``last_entry_id`` (-1: empty) with ``length`` bytes."""
        check_transition(self.state, LedgerState.CLOSED, self.ledger_id)
        return replace(self, state=LedgerState.CLOSED, last_entry_id=last_entry_id, length=length)

    def with_ensemble_change(self, first_entry_id: int, ensemble: Iterable[str]) -> LedgerMetadata:
        """This metadata with a new fragment ``ensemble`` starting at ``first_entry_id``.

        The seed: "It creates a new fragment with this ensemble, starting from the first
        message that has not been acknowledged to the client." If the last fragment already
        starts at ``first_entry_id`` (an earlier replacement of this same change, none of its
        entries acknowledged), it is replaced instead of leaving an empty fragment behind.
        A CLOSED ledger takes no ensemble change (whether the writer may change the ensemble
        of a ledger IN_RECOVERY is the caller's decision: the writer must not, a recoverer
        writing entries back may).
        """
        if self.is_closed:
            raise LedgerStateError(f"ledger {self.ledger_id} is CLOSED: its ensemble cannot change")
        ensemble = tuple(ensemble)
        _check_ensemble(self.ledger_id, self.ensemble_size, ensemble)
        last_first, last_ensemble = self.ensembles[-1]
        if first_entry_id < last_first:
            raise ValueError(
                f"ledger {self.ledger_id}: a new fragment must start at or after entry "
                f"{last_first} (the last fragment's first entry), got {first_entry_id}"
            )
        if first_entry_id == last_first:
            fragments = self.ensembles[:-1] + ((first_entry_id, ensemble),)
        elif ensemble == last_ensemble:
            return self
        else:
            fragments = self.ensembles + ((first_entry_id, ensemble),)
        return replace(self, ensembles=fragments)

    def with_fragment_bookie_replaced(self, first_entry_id: int, index: int, old: str,
                                      new: str) -> LedgerMetadata:
        """This metadata with ``new`` in place of ``old`` at ``index`` of the fragment that
        starts at ``first_entry_id`` (re-replication: the caller copied that fragment's
        entries to ``new`` first). Allowed in any state, since a closed fragment's entries
        never change; :class:`ValueError` if the fragment does not name ``old`` there."""
        fragments = list(self.ensembles)
        for i, (first, ensemble) in enumerate(fragments):
            if first == first_entry_id:
                if not 0 <= index < len(ensemble) or ensemble[index] != old:
                    raise ValueError(f"ledger {self.ledger_id}: fragment {first_entry_id} "
                                     f"does not name {old} at index {index}")
                fragments[i] = (first, ensemble[:index] + (new,) + ensemble[index + 1:])
                return replace(self, ensembles=tuple(fragments))
        raise ValueError(f"ledger {self.ledger_id} has no fragment starting at {first_entry_id}")

    def with_custom_metadata(self, custom_metadata: Mapping[str, str]) -> LedgerMetadata:
        """This metadata with ``custom_metadata`` replacing the custom key/values."""
        return replace(self, custom_metadata=tuple(custom_metadata.items()))

    # -- serialized form -------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "format_version": METADATA_FORMAT_VERSION,
            "ledger_id": self.ledger_id,
            "ensemble_size": self.ensemble_size,
            "write_quorum_size": self.write_quorum_size,
            "ack_quorum_size": self.ack_quorum_size,
            "state": self.state.value,
            "last_entry_id": self.last_entry_id,
            "length": self.length,
            "ensembles": [[first, list(ensemble)] for first, ensemble in self.ensembles],
            "digest_type": self.digest_type,
            "password_digest": self.password_digest,
            "custom_metadata": dict(self.custom_metadata),
            "ctime_ms": self.ctime_ms,
        }

    def to_bytes(self) -> bytes:
        """Compact JSON with a format version; at most :data:`MAX_METADATA_BYTES`."""
        data = json.dumps(self.to_dict(), separators=(",", ":"), sort_keys=True).encode()
        if len(data) > MAX_METADATA_BYTES:
            raise MetadataSerializationError(
                f"ledger {self.ledger_id}: metadata is {len(data)} bytes, more than "
                f"{MAX_METADATA_BYTES}: too many fragments or too much custom metadata"
            )
        return data

    @classmethod
    def from_bytes(cls, data: bytes) -> LedgerMetadata:
        """Decode :meth:`to_bytes`; :class:`MetadataSerializationError` if it cannot."""
        if len(data) > MAX_METADATA_BYTES:
            raise MetadataSerializationError(
                f"ledger metadata of {len(data)} bytes exceeds {MAX_METADATA_BYTES}"
            )
        try:
            d = json.loads(data)
            version = d["format_version"]
        except (ValueError, TypeError, KeyError) as exc:
            raise MetadataSerializationError(f"undecodable ledger metadata: {exc}") from exc
        if version != METADATA_FORMAT_VERSION:
            raise MetadataSerializationError(
                f"ledger metadata format version {version!r} is not supported (this bk-spark "
                f"reads version {METADATA_FORMAT_VERSION}): upgrade bk-spark"
            )
        try:
            return cls(
                ledger_id=d["ledger_id"],
                ensemble_size=d["ensemble_size"],
                write_quorum_size=d["write_quorum_size"],
                ack_quorum_size=d["ack_quorum_size"],
                state=LedgerState(d["state"]),
                last_entry_id=d["last_entry_id"],
                length=d["length"],
                ensembles=tuple((first, tuple(ens)) for first, ens in d["ensembles"]),
                digest_type=d["digest_type"],
                password_digest=d["password_digest"],
                custom_metadata=tuple(d.get("custom_metadata", {}).items()),
                ctime_ms=d["ctime_ms"],
            )
        except (InvalidConfigError, ValueError, TypeError, KeyError, AttributeError) as exc:
            raise MetadataSerializationError(f"invalid ledger metadata: {exc!r}") from exc


def _check_ensemble(ledger_id: int, ensemble_size: int, ensemble: tuple[str, ...]) -> None:
    if len(ensemble) != ensemble_size:
        raise InvalidConfigError(
            f"ledger {ledger_id}: an ensemble needs ensemble_size={ensemble_size} bookies, "
            f"got {len(ensemble)}: {list(ensemble)}"
        )
    if len(set(ensemble)) != len(ensemble):
        raise InvalidConfigError(
            f"ledger {ledger_id}: an ensemble never holds the same bookie twice: {list(ensemble)}"
        )
