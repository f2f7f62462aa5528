"""Ledger metadata, the ledger state machine, and the metadata update loop (pure)."""

from __future__ import annotations

import json
import pickle

import pytest

from bk_spark.errors import (
    InvalidConfigError,
    LedgerClosedError,
    LedgerStateError,
    MetadataSerializationError,
    MetadataVersionError,
)
from bk_spark.io.metadata_store import Versioned, metadata_update_loop
from bk_spark.protocol.ledger_metadata import (
    ALLOWED_TRANSITIONS,
    MAX_METADATA_BYTES,
    LedgerMetadata,
    LedgerState,
    check_transition,
    validate_quorums,
)

OPEN, IN_RECOVERY, CLOSED = LedgerState.OPEN, LedgerState.IN_RECOVERY, LedgerState.CLOSED
B = ("b1:3181", "b2:3181", "b3:3181")


def ledger(**kw) -> LedgerMetadata:
    return LedgerMetadata.new(
        kw.pop("ledger_id", 7),
        kw.pop("ensemble", B),
        write_quorum_size=kw.pop("write_quorum_size", 2),
        ack_quorum_size=kw.pop("ack_quorum_size", 2),
        ctime_ms=1_700_000_000_000,
        **kw,
    )


# -- state machine --------------------------------------------------------------------------

TRANSITIONS = [
    (OPEN, IN_RECOVERY, True),
    (OPEN, CLOSED, True),
    (OPEN, OPEN, False),
    (IN_RECOVERY, IN_RECOVERY, True),  # another recoverer
    (IN_RECOVERY, CLOSED, True),
    (IN_RECOVERY, OPEN, False),
    (CLOSED, OPEN, False),
    (CLOSED, IN_RECOVERY, False),
    (CLOSED, CLOSED, False),
]


@pytest.mark.parametrize("old,new,allowed", TRANSITIONS)
def test_ledger_state_transitions_follow_the_table(old, new, allowed):
    assert (new in ALLOWED_TRANSITIONS[old]) == allowed
    if allowed:
        check_transition(old, new)
    else:
        with pytest.raises(LedgerStateError, match=f"{old.value} -> {new.value}"):
            check_transition(old, new)


def test_closed_is_final_and_the_error_says_what_to_do():
    with pytest.raises(LedgerStateError, match="ledger 7: .*create a new ledger"):
        ledger().closed(3, 30).with_state(IN_RECOVERY)


def test_the_state_table_covers_every_state():
    assert set(ALLOWED_TRANSITIONS) == set(LedgerState)


# -- quorums --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "e,qw,qa,message",
    [
        (2, 3, 2, r"ensemble_size \(2\) must be >= write_quorum_size \(3\)"),
        (3, 2, 3, r"write_quorum_size \(2\) must be >= ack_quorum_size \(3\)"),
        (3, 2, 0, r"ack_quorum_size \(0\) must be >= 1"),
    ],
)
def test_quorums_must_satisfy_e_ge_qw_ge_qa_ge_1(e, qw, qa, message):
    with pytest.raises(InvalidConfigError, match=message):
        validate_quorums(e, qw, qa)
    with pytest.raises(InvalidConfigError, match=message):
        LedgerMetadata.validate_quorums(e, qw, qa)


def test_valid_quorums_pass():
    for e, qw, qa in ((1, 1, 1), (3, 2, 2), (4, 3, 2), (5, 5, 1)):
        validate_quorums(e, qw, qa)


def test_an_ensemble_never_holds_the_same_bookie_twice():
    with pytest.raises(InvalidConfigError, match="same bookie twice"):
        ledger(ensemble=("a:1", "a:1", "b:1"))


# -- fragments ------------------------------------------------------------------------------


def test_each_entry_belongs_to_the_fragment_that_starts_at_or_before_it():
    # The seed's example: E=3, fragments at 0 (B1, B2, B3) and 12 (B4, B2, B3).
    md = ledger(ensemble=("B1:1", "B2:1", "B3:1")).with_ensemble_change(
        12, ("B4:1", "B2:1", "B3:1")
    )
    assert md.ensemble_for(0) == md.ensemble_for(11) == ("B1:1", "B2:1", "B3:1")
    assert md.ensemble_for(12) == md.ensemble_for(10**9) == ("B4:1", "B2:1", "B3:1")
    assert md.last_ensemble == ("B4:1", "B2:1", "B3:1")
    assert [first for first, _ in md.ensembles] == [0, 12]


def test_a_second_replacement_in_the_same_change_replaces_the_fragment_instead_of_adding_one():
    md = ledger().with_ensemble_change(5, ("b4:1", "b2:3181", "b3:3181"))
    md = md.with_ensemble_change(5, ("b4:1", "b5:1", "b3:3181"))
    assert md.ensembles == ((0, B), (5, ("b4:1", "b5:1", "b3:3181")))


def test_a_fragment_never_starts_before_the_last_one():
    md = ledger().with_ensemble_change(5, ("b4:1", "b2:3181", "b3:3181"))
    with pytest.raises(ValueError):
        md.with_ensemble_change(4, B)


def test_a_closed_ledger_takes_no_ensemble_change():
    with pytest.raises(LedgerStateError):
        ledger().closed(3, 30).with_ensemble_change(4, ("x:1", "y:1", "z:1"))


def test_an_ensemble_change_keeps_the_ensemble_size():
    with pytest.raises(InvalidConfigError, match="ensemble_size=3"):
        ledger().with_ensemble_change(4, ("x:1", "y:1"))


# -- state changes --------------------------------------------------------------------------


def test_closing_records_the_last_entry_and_length():
    md = ledger().with_state(IN_RECOVERY).closed(12, 1300)
    assert md.is_closed and md.last_entry_id == 12 and md.length == 1300
    assert md.state == CLOSED


def test_changes_return_new_values_and_leave_the_original_untouched():
    md = ledger()
    md.closed(1, 2)
    assert md.state == OPEN and md.last_entry_id == -1


# -- serialized form ------------------------------------------------------------------------


def test_metadata_round_trips_through_bytes():
    md = ledger(
        custom_metadata={"log": "orders", "k": "v"}, digest_type="mac", password_digest="ab" * 32
    )
    md = md.with_ensemble_change(9, ("b9:1", "b2:3181", "b3:3181")).with_state(IN_RECOVERY)
    again = LedgerMetadata.from_bytes(md.to_bytes())
    assert again == md
    assert dict(again.custom_metadata) == {"log": "orders", "k": "v"}
    assert json.loads(md.to_bytes())["format_version"] == 1


def test_metadata_is_hashable_and_picklable():
    md = ledger(custom_metadata={"a": "b"})
    assert pickle.loads(pickle.dumps(md)) == md
    assert hash(md) == hash(LedgerMetadata.from_bytes(md.to_bytes()))


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b"[1, 2]",
        b'{"format_version": 1}',
        json.dumps({**ledger().to_dict(), "ensemble_size": 2}).encode(),
    ],
)
def test_corrupt_metadata_is_rejected_as_a_serialization_error(data):
    with pytest.raises(MetadataSerializationError):
        LedgerMetadata.from_bytes(data)


def test_metadata_of_a_newer_format_asks_for_an_upgrade():
    data = json.dumps({**ledger().to_dict(), "format_version": 2}).encode()
    with pytest.raises(MetadataSerializationError, match="upgrade bk-spark"):
        LedgerMetadata.from_bytes(data)


def test_metadata_size_is_bounded():
    md = ledger(custom_metadata={"big": "x" * MAX_METADATA_BYTES})
    with pytest.raises(MetadataSerializationError, match="too much custom metadata"):
        md.to_bytes()
    with pytest.raises(MetadataSerializationError):
        LedgerMetadata.from_bytes(b" " * (MAX_METADATA_BYTES + 1))


def test_unknown_digest_type_is_rejected():
    with pytest.raises(InvalidConfigError, match="digest_type 'md5'"):
        ledger(digest_type="md5")


# -- the metadata update loop (MetadataUpdateLoop), against an in-memory store --------------


class MemoryStore:
    """A compare-and-swap register, plus a hook to interleave another client's write."""

    def __init__(self, value):
        self.value, self.version = value, 0
        self.writes = 0
        self.before_write = None

    def read(self):
        return Versioned(self.value, self.version)

    def write(self, value, version):
        if self.before_write is not None:
            hook, self.before_write = self.before_write, None
            hook()
        if version != self.version:
            raise MetadataVersionError("conflict")
        self.value, self.version = value, self.version + 1
        self.writes += 1
        return Versioned(value, self.version)


def test_update_loop_writes_nothing_when_no_change_is_needed():
    store = MemoryStore(ledger())
    result = metadata_update_loop(
        store.read,
        store.write,
        lambda md: False,
        lambda md: pytest.fail("make_change must not run"),
    )
    assert store.writes == 0 and result == Versioned(store.value, 0)


def test_update_loop_aborts_without_writing_when_make_change_raises():
    store = MemoryStore(ledger())

    def refuse(md):
        raise LedgerClosedError("no")

    with pytest.raises(LedgerClosedError):
        metadata_update_loop(store.read, store.write, lambda md: True, refuse)
    assert store.writes == 0


def test_update_loop_rereads_after_a_conflict_and_decides_again():
    store = MemoryStore(ledger())
    stale = store.read()
    # Another closer closes the ledger at entry 12 just before our write.
    store.before_write = lambda: store.write(store.value.closed(12, 100), store.version)
    result = metadata_update_loop(
        store.read,
        store.write,
        needs_change=lambda md: not md.is_closed,
        make_change=lambda md: md.closed(12, 100),
        current=stale,
    )
    assert result.value.last_entry_id == 12 and result.version == 1
    assert store.writes == 1  # only the other closer wrote


def test_update_loop_retries_its_change_on_the_fresh_value():
    store = MemoryStore(ledger())
    store.before_write = lambda: store.write(
        store.value.with_custom_metadata({"other": "1"}), store.version
    )
    result = metadata_update_loop(
        store.read, store.write, lambda md: md.state == OPEN, lambda md: md.with_state(IN_RECOVERY)
    )
    assert result.version == 2 and result.value.state == IN_RECOVERY
    assert dict(result.value.custom_metadata) == {"other": "1"}  # the other change survives


def test_update_loop_gives_up_after_max_attempts():
    store = MemoryStore(0)

    def always_conflict(value, version):
        store.version += 1
        raise MetadataVersionError("conflict")

    with pytest.raises(MetadataVersionError, match="after 3 conflicting writes"):
        metadata_update_loop(
            store.read, always_conflict, lambda v: True, lambda v: v + 1, max_attempts=3
        )
