"""Position (protocol/log_format.py): one key for equality, hashing and order, and the stable
string and bytes forms the CLI, Spark offsets and checkpoints use. Pure."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bk_spark.errors import InvalidConfigError, LogFormatError
from bk_spark.protocol.log_format import Position

ids = st.integers(min_value=0, max_value=2**63 - 1)
positions = st.builds(Position, ids | st.just(-1), ids, ids | st.just(-1)).filter(
    lambda p: p.ledger_id >= 0 or p.ledger_index >= 0)  # -1: the ledger to come at an index


@pytest.mark.parametrize(("a", "b", "relation"), [
    (Position(900, 5, 0), Position(7, 0, 1), "<"),      # by ledger index, not ledger id
    (Position(7, 0, 1), Position(7, 1, 1), "<"),        # then by entry
    (Position(3, 4, 2), Position(3, 4, 2), "=="),
    (Position(3, 4), Position(3, 4), "=="),             # both made by hand
    (Position(3, 4), Position(3, 4, 2), "<"),           # by hand: before every indexed one
    (Position(3, 9), Position(5, 0), "<"),              # by hand: by ledger id, then entry
    (Position(-1, 0, 4), Position(12, 0, 4), "<"),      # the ledger to come, then the one added
])
def test_positions_compare_by_one_key_so_equal_means_neither_is_before_the_other(
        a: Position, b: Position, relation: str) -> None:
    assert (a < b, a == b, a > b) == (relation == "<", relation == "==", False)
    assert (a <= b, b >= a, b > a, a != b) == (True, True, relation == "<", relation == "<")
    assert (hash(a) == hash(b)) is (relation == "==")


@given(positions, positions)
def test_order_and_equality_agree_for_any_two_positions(a: Position, b: Position) -> None:
    assert (a == b) == (not a < b and not b < a)
    assert (a < b) == (b > a) and (a <= b) == (a < b or a == b)
    assert a != b or hash(a) == hash(b)
    assert sorted([a, b]) == sorted([b, a])


@given(positions, positions, positions)
def test_order_is_transitive(a: Position, b: Position, c: Position) -> None:
    x, y, z = sorted([a, b, c])
    assert x <= y <= z and x <= z


@given(positions)
def test_string_and_bytes_forms_read_back_the_same_position(p: Position) -> None:
    assert Position.parse(p.to_string()) == p
    assert Position.from_bytes(p.to_bytes()) == p
    assert len(p.to_bytes()) == 25 and pickle.loads(pickle.dumps(p)) == p


@pytest.mark.parametrize(("p", "text", "data"), [
    (Position(12, 5), "12:5", "01" + f"{12:016x}{5:016x}" + "f" * 16),
    (Position(12, 5, 3), "12:5@3", "01" + f"{12:016x}{5:016x}{3:016x}"),
    (Position(-1, 0, 4), "-1:0@4", "01" + "f" * 16 + f"{0:016x}{4:016x}"),
])
def test_the_stable_forms_are_these_strings_and_bytes(p: Position, text: str, data: str) -> None:
    assert p.to_string() == text and Position.parse(f" {text} ") == p
    assert p.to_bytes().hex() == data and Position.from_bytes(bytes.fromhex(data)) == p


@pytest.mark.parametrize("text", ["", "12", "12:", ":5", "12:5@", "-2:0", "-1:0", "12:-1",
                                  "a:b", "12:5@-1", "12:5:3"])
def test_a_malformed_position_string_is_refused_naming_the_form(text: str) -> None:
    with pytest.raises(InvalidConfigError, match="LEDGER:ENTRY"):
        Position.parse(text)


@pytest.mark.parametrize("data", [b"", b"\x01" * 24, b"\x02" + bytes(24), b"\x01" + bytes(25)])
def test_malformed_position_bytes_are_refused(data: bytes) -> None:
    with pytest.raises(LogFormatError, match="Position.to_bytes"):
        Position.from_bytes(data)
