"""Request validation, the one home of each check of ids, sizes and keys, from tables: what
a bookie refuses as INVALID_REQUEST (or TOO_LARGE) before anything is stored."""

from __future__ import annotations

import pytest

from bk_spark.errors import InvalidRequestError, TooLargeError
from bookie_server.validation import (
    MAX_DIGEST_SIZE,
    MAX_ID,
    MAX_MASTER_KEY_SIZE,
    check_entries,
    check_entry_ids,
    check_id,
    check_key,
    check_lac,
    check_read_range,
    check_same_ledger,
)


@pytest.mark.parametrize("value, ok", [(0, True), (MAX_ID, True), (-1, False),
                                       (MAX_ID + 1, False), ("1", False), (1.0, False)])
def test_ids_are_non_negative_int64(value, ok):
    if ok:
        check_id("ledger id", value)
    else:
        with pytest.raises(InvalidRequestError, match="ledger id"):
            check_id("ledger id", value)


@pytest.mark.parametrize("lac, ok", [(-1, True), (0, True), (MAX_ID, True), (-2, False),
                                     (MAX_ID + 1, False), (None, False)])
def test_an_explicit_lac_is_minus_one_or_an_entry_id(lac, ok):
    if ok:
        check_lac(lac)
    else:
        with pytest.raises(InvalidRequestError):
            check_lac(lac)


@pytest.mark.parametrize("key, ok", [(b"", True), (bytearray(b"k"), True),
                                     (b"k" * MAX_MASTER_KEY_SIZE, True),
                                     (b"k" * (MAX_MASTER_KEY_SIZE + 1), False),
                                     ("text", False), (None, False)])
def test_master_keys_are_bytes_of_bounded_length(key, ok):
    if ok:
        assert check_key(key) == bytes(key)
    else:
        with pytest.raises(InvalidRequestError):
            check_key(key)


MAX_SIZE = 100

# entries of one add -> payload bytes, or the error refusing the whole add
ENTRIES = [
    ([], 0),
    ([(0, -1, b"x" * MAX_SIZE, b"d")], MAX_SIZE),
    ([(0, -1, b"ab", b""), (1, 0, b"cde", b"")], 5),
    ([(0, -1, b"x" * (MAX_SIZE + 1), b"")], TooLargeError),
    ([(0, -1, b"ok", b""), (-5, -1, b"x", b"")], InvalidRequestError),  # any entry refuses
    ([(0, -2, b"x", b"")], InvalidRequestError),
    ([(0, -1, b"x", b"d" * (MAX_DIGEST_SIZE + 1))], InvalidRequestError),
    ([(0, -1, None, b"")], InvalidRequestError),  # malformed: no length
    ([(0, -1, b"x")], InvalidRequestError),  # malformed: three fields
]


@pytest.mark.parametrize("entries, expect", ENTRIES)
def test_an_add_is_refused_whole_for_any_bad_entry(entries, expect):
    if isinstance(expect, int):
        checked, nbytes = check_entries(iter(entries), MAX_SIZE)
        assert list(checked) == entries and nbytes == expect
    else:
        with pytest.raises(expect):
            check_entries(entries, MAX_SIZE)


@pytest.mark.parametrize("ids, ok", [([], True), ([0, 5], True), (range(0, 2**63 - 1), True),
                                     ([-1, 0], False), (range(-3, 2), False)])
def test_read_ids_start_at_zero_or_later(ids, ok):
    if ok:
        check_entry_ids(ids)
    else:
        with pytest.raises(InvalidRequestError):
            check_entry_ids(ids)


def test_wire_only_checks_entries_of_the_request_ledger_and_forward_ranges():
    check_same_ledger(7, [7, 7])
    with pytest.raises(InvalidRequestError, match="another ledger"):
        check_same_ledger(7, [7, 8])
    check_read_range(3, 3)
    with pytest.raises(InvalidRequestError, match="last_entry 2 < first_entry 3"):
        check_read_range(3, 2)
