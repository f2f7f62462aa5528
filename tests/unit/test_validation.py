"""Request validation, the one home of each check of ids, sizes and keys, from tables: what
a bookie refuses as INVALID_REQUEST (or TOO_LARGE) before anything is stored."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bk_spark.errors import InvalidRequestError, TooLargeError
from bk_spark.protocol.records import ENTRY_HEADER, pack_records, parse_records
from bookie_server.validation import (
    MAX_DIGEST_SIZE,
    MAX_ID,
    MAX_MASTER_KEY_SIZE,
    SMALL_RECORDS,
    check_entries,
    check_entry_ids,
    check_id,
    check_key,
    check_lac,
    check_read_range,
    check_records,
    check_same_ledger,
    refused_records,
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


#: ``check_records``' two paths, forced: plain Python (a RecordList) for any count, numpy
#: (Records) for any count
PATHS = {"python": 1 << 30, "numpy": -1}
PACKED = [(e, x) for e, x in ENTRIES if all(len(t) == 4 and t[2] is not None for t in e)]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("entries, expect", PACKED)
def test_a_packed_add_is_refused_whole_by_the_same_rules(entries, expect, path):
    """The same table as ``check_entries``', as records (a packed add): every rule as
    strict, checked at once, on both of ``check_records``' paths."""
    data, lengths = pack_records([(7, eid, lac, payload, digest)
                                  for eid, lac, payload, digest in entries])
    if isinstance(expect, int):
        recs, nbytes = check_records(7, data, lengths, MAX_SIZE, small=PATHS[path])
        assert nbytes == expect and list(recs.entry_ids) == [e[0] for e in entries]
        assert [data[a:b] for a, b in zip(recs.payload_starts, recs.payload_ends,
                                          strict=True)] == [e[2] for e in entries]
    else:
        with pytest.raises(expect):
            check_records(7, data, lengths, MAX_SIZE, small=PATHS[path])


COLUMNS = ("starts", "ledger_ids", "entry_ids", "lacs", "digest_starts", "payload_starts",
           "payload_ends")


def outcome(data: bytes, lengths: bytes, path: str, max_size: int = MAX_SIZE) -> tuple:
    """What ``check_records`` made of a packed add on ``path``: its columns as lists of ints
    and its payload bytes, or its error's type and message."""
    try:
        recs, nbytes = check_records(7, data, lengths, max_size, small=PATHS[path])
    except (InvalidRequestError, TooLargeError) as exc:
        return type(exc), str(exc)
    return tuple([int(v) for v in getattr(recs, c)] for c in COLUMNS), nbytes


def assert_same_on_both_paths(data: bytes, lengths: bytes, max_size: int = MAX_SIZE) -> None:
    python, numpy = outcome(data, lengths, "python", max_size), \
        outcome(data, lengths, "numpy", max_size)
    assert python == numpy


def test_both_paths_of_check_records_agree_on_the_packed_table_and_garbage():
    """Every row of the packed table and every garbling below, through the plain-Python and
    the numpy path: the same columns and bytes, or the same error type and message."""
    for entries, _ in PACKED:
        assert_same_on_both_paths(*pack_records([(7, eid, lac, payload, digest)
                                                 for eid, lac, payload, digest in entries]))
    for how in GARBLINGS:
        assert_same_on_both_paths(*_garbled(how))
    # one byte short of a header; a digest reaching exactly to, then one past, the end
    header = ENTRY_HEADER.pack(30, 7, 0, -1, 0)
    assert_same_on_both_paths(header[:29], (29).to_bytes(4, "little"))
    for digest_length in (3, 4):
        assert_same_on_both_paths(ENTRY_HEADER.pack(33, 7, 0, -1, digest_length) + b"abc",
                                  (33).to_bytes(4, "little"))
    # which error wins when several rules break: the same one, naming the same entry
    assert_same_on_both_paths(*pack_records([(7, 3, -5, b"x" * 500, b""),
                                             (7, -2, -9, b"y" * 900, b"")]))
    assert_same_on_both_paths(*pack_records([(7, 3, 0, b"x" * 50, b"d" * 2000),
                                             (7, 4, 0, b"y" * 200, b""),
                                             (7, 5, 0, b"z" * 300, b"")]))


small_or_big = st.one_of(st.integers(-4, 6), st.integers(-3, 1 << 62))
record = st.tuples(st.sampled_from([7, 7, 7, 8]), small_or_big, small_or_big,
                   st.one_of(st.binary(max_size=8), st.binary(min_size=95, max_size=110)),
                   st.one_of(st.binary(max_size=8), st.just(b"d" * (MAX_DIGEST_SIZE + 1))))
#: a header field to overwrite: (offset in the header, struct format)
FIELDS = st.sampled_from([(0, "<I"), (28, "<H"), (8, "<q")])


@settings(max_examples=400, deadline=None)
@given(st.lists(record, max_size=SMALL_RECORDS * 2),
       st.one_of(st.none(), st.tuples(st.integers(0, 99), FIELDS, st.integers(-2, 2))),
       st.one_of(st.none(), st.tuples(st.integers(0, 400), st.binary(min_size=1, max_size=4))),
       st.one_of(st.none(), st.tuples(st.integers(0, 99), st.integers(-2, 2))),
       st.booleans())
def test_both_paths_of_check_records_agree_on_random_records(entries, field, junk, relist,
                                                             cut):
    """Random records (some of another ledger, negative ids or lacs, too large, long
    digests), some broken by a header field set near its boundary (a record's length, a
    digest reaching just to or past its record's end, the ledger), by bytes overwritten
    anywhere, by two listed lengths moved by the same bytes, or by lengths cut short: both
    paths give the same outcome."""
    data, lengths = pack_records(entries)
    if field is not None and entries:
        i, (offset, fmt), delta = field
        i %= len(entries)
        start = sum(ENTRY_HEADER.size + len(e[3]) + len(e[4]) for e in entries[:i])
        size = ENTRY_HEADER.size + len(entries[i][3]) + len(entries[i][4])
        value = size + delta if fmt == "<I" else \
            (size - ENTRY_HEADER.size + delta) % (1 << 16) if fmt == "<H" else 7 + delta
        patch = struct.pack(fmt, value % (1 << 32) if fmt == "<I" else value)
        data = data[:start + offset] + patch + data[start + offset + len(patch):]
    if junk is not None and data:
        at, raw = junk
        at %= len(data)
        data = data[:at] + raw + data[at + len(raw):]
    if relist is not None and len(entries) >= 2:
        i, delta = relist
        i %= len(entries) - 1
        lens = list(struct.unpack(f"<{len(entries)}I", lengths))
        lens[i], lens[i + 1] = max(0, lens[i] + delta), max(0, lens[i + 1] - delta)
        lengths = struct.pack(f"<{len(lens)}I", *lens)
    if cut and lengths:
        lengths = lengths[:-1]
    assert_same_on_both_paths(data, lengths)


@settings(max_examples=300, deadline=None)
@given(st.lists(record, min_size=1, max_size=40))
def test_a_units_mask_refuses_a_record_exactly_when_check_records_refuses_it(entries):
    """The mask a unit's parts are checked with (``refused_records``) marks a record just
    when ``check_records`` refuses that record alone (ledger 7 expected of every one)."""
    data, lengths = pack_records(entries)
    mask = refused_records(parse_records(data, lengths), np.full(len(entries), 7), MAX_SIZE)
    for i, entry in enumerate(entries):
        one, one_len = pack_records([entry])
        try:
            check_records(7, one, one_len, MAX_SIZE)
            refused = False
        except (InvalidRequestError, TooLargeError):
            refused = True
        assert bool(mask[i]) == refused, (i, entry)


def _garbled(how: str) -> tuple[bytes, bytes]:
    """A packed add of two good entries of ledger 7, then broken as ``how`` says."""
    data, lengths = pack_records([(7, 0, -1, b"ab", b"d"), (7, 1, 0, b"cd", b"d")])
    n = len(data) // 2
    if how == "lengths not whole u32s":
        return data, lengths + b"\x01"
    if how == "lengths past the data":
        return data[:-1], lengths
    if how == "bytes after the last record":
        return data + b"\x00", lengths
    if how == "lengths but no data":
        return b"", lengths
    if how == "data but no lengths":
        return data, b""
    if how == "record shorter than a header":
        return data[:10], (10).to_bytes(4, "little")
    if how == "header disagrees with its length":
        return (ENTRY_HEADER.pack(n + 1, 7, 0, -1, 1) + data[ENTRY_HEADER.size:]), lengths
    if how == "digest past the record":
        return (ENTRY_HEADER.pack(n, 7, 0, -1, 500) + data[ENTRY_HEADER.size:]), lengths
    if how == "an entry of another ledger":
        return data[:n] + ENTRY_HEADER.pack(n, 8, 1, 0, 1) + data[n + ENTRY_HEADER.size:], \
            lengths
    raise AssertionError(how)


GARBLINGS = ["lengths not whole u32s", "lengths past the data", "bytes after the last record",
             "lengths but no data", "data but no lengths", "record shorter than a header",
             "header disagrees with its length", "digest past the record",
             "an entry of another ledger"]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("how", GARBLINGS)
def test_garbled_packed_records_are_an_invalid_request(how, path):
    data, lengths = _garbled(how)
    with pytest.raises(InvalidRequestError):
        check_records(7, data, lengths, MAX_SIZE, small=PATHS[path])


def test_packed_records_of_many_entries_are_checked_in_numpy():
    """A big add: 10,000 records, the last one over the size or of a negative id."""
    entries = [(7, e, e - 1, b"x" * (e % 90), b"d" * 12) for e in range(10_000)]
    data, lengths = pack_records(entries)
    recs, nbytes = check_records(7, data, lengths, MAX_SIZE)
    assert len(recs) == 10_000 and nbytes == sum(e % 90 for e in range(10_000))
    with pytest.raises(TooLargeError, match="entry 10000 has 101 bytes"):
        check_records(7, *pack_records(entries + [(7, 10_000, 0, b"y" * 101, b"")]), MAX_SIZE)
    with pytest.raises(InvalidRequestError, match="entry id must be >= 0"):
        check_records(7, *pack_records(entries + [(7, -3, 0, b"y", b"")]), MAX_SIZE)


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
