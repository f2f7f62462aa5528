"""The add stream's pure decisions (bk_spark/protocol/add_stream.py): the window shared with
the unary path, how many gathered requests one message carries, what a refusal means."""

from __future__ import annotations

import numpy as np

from bk_spark.io.add_stream import encode_message
from bk_spark.proto import bookie_pb2 as pb
from bk_spark.protocol.add_stream import (
    REFUSALS,
    Refusal,
    failing_parts,
    message_size,
    message_take,
    refusal,
    unit_parts,
    window_open,
)

LIMITS = dict(max_in_flight=2, max_in_flight_bytes=1000, pipeline_min_bytes=100)


def test_requests_go_while_fewer_than_max_in_flight_are_out_and_gather_beyond() -> None:
    assert window_open(0, 0, 10, **LIMITS)
    assert window_open(1, 500, 10, **LIMITS)
    assert not window_open(2, 20, 10, **LIMITS)  # small ones gather behind the two out


def test_big_requests_pipeline_beyond_max_in_flight_while_the_bytes_in_flight_allow() -> None:
    assert window_open(2, 500, 100, **LIMITS)
    assert window_open(5, 900, 100, **LIMITS)
    assert not window_open(5, 901, 100, **LIMITS)  # over max_in_flight_bytes
    assert not window_open(2, 0, 99, **LIMITS)  # under pipeline_min_bytes


def test_a_message_carries_the_oldest_requests_up_to_the_byte_bound_and_at_least_one() -> None:
    assert message_size([], 100) == 0
    assert message_size([10, 20, 30], 100) == 3
    assert message_size([40, 40, 40], 100) == 2
    assert message_size([40, 60, 1], 100) == 2
    assert message_size([500, 1], 100) == 1  # a request bigger than the bound goes alone


def test_only_a_stream_refused_before_any_answer_falls_back_to_unary() -> None:
    assert refusal("UNIMPLEMENTED", answered=False) is Refusal.UNARY_FOR_GOOD
    assert refusal("PERMISSION_DENIED", answered=False) is Refusal.UNARY_FOR_GOOD
    assert refusal("RESOURCE_EXHAUSTED", answered=False) is Refusal.UNARY_FOR_A_WHILE
    for code in REFUSALS:  # once served, any end is a broken stream: its requests fail
        assert refusal(code, answered=True) is None
    for code in ("UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED", "INTERNAL", ""):
        assert refusal(code, answered=False) is None


def test_a_stream_message_wraps_add_requests_byte_for_byte() -> None:
    reqs = [pb.AddRequest(ledger_id=lid, master_key=b"k", lac=lid,
                          entries=[pb.Entry(ledger_id=lid, entry_id=0, payload=b"x" * lid)])
            for lid in (1, 300)]
    raw = encode_message(2**40, [r.SerializeToString() for r in reqs])
    msg = pb.AddStreamRequest.FromString(raw)
    assert msg.request_id == 2**40 and list(msg.requests) == reqs


def test_a_unit_goes_alone_and_a_message_of_requests_stops_before_the_next_unit() -> None:
    """Queue order is kept: requests before a unit leave first (at most ``max_bytes`` of
    them), the unit then alone, the requests after it in the next message."""
    sizes = [10, 10, 500, 10, 10]
    units = [False, False, True, False, False]
    assert message_take(sizes, units, 1000) == 2
    assert message_take(sizes[2:], units[2:], 1000) == 1  # the unit alone
    assert message_take(sizes[3:], units[3:], 1000) == 2
    assert message_take(sizes[3:], units[3:], 15) == 1  # max_bytes still bounds requests
    assert message_take([], [], 1000) == 0
    assert message_take([5000], [True], 1000) == 1  # a unit is never cut


def test_a_units_records_belong_to_its_parts_by_count_and_a_bad_record_fails_only_its_part(
        ) -> None:
    """Part i of a unit is ``counts[i]`` records in part order (a part of 0 records: an
    explicit LAC); counts that do not add up to the records break the whole unit; a record
    failing a check names its own part, no other."""
    parts = unit_parts([2, 0, 1, 3], 6)
    assert parts is not None and parts.tolist() == [0, 0, 2, 3, 3, 3]
    assert unit_parts([2, 1], 4) is None and unit_parts([3, -1], 2) is None
    assert unit_parts([0, 0], 0) is not None and unit_parts([], 0).tolist() == []
    bad = np.array([False, True, False, False, True, True])
    assert failing_parts(parts, bad) == [0, 3]
    assert failing_parts(parts, np.zeros(6, dtype=bool)) == []
