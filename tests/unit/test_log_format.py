"""The formats of a log made of ledgers (log_format.py): pure, no ZooKeeper, no bookies."""

from __future__ import annotations

import dataclasses
import gc
import json
import pickle
import random
import threading
import time
from dataclasses import replace

import pytest

from bk_spark.core.futures import shared_condition
from bk_spark.errors import (
    BKError,
    InvalidConfigError,
    LedgerFencedError,
    LogFormatError,
    MetadataSerializationError,
)
from bk_spark.log.acks import AckSegment, AppendFuture, InOrderAcks
from bk_spark.protocol.log_format import (
    FRAME_HEADER_SIZE,
    LedgerInfo,
    LogLimits,
    LogMetadata,
    Position,
    Segment,
    bisect_timestamp,
    decode_entry,
    encode_entry,
    entry_timestamp,
    first_segment_for_timestamp,
    frame_header,
    validate_log_name,
)

T0 = 1_717_000_000_000


# ------------------------------------------------------------------------------ framing


def test_entry_frame_carries_the_append_timestamp_and_the_payload_unchanged() -> None:
    data = encode_entry(b"payload", T0 + 5)
    assert len(data) == FRAME_HEADER_SIZE + len(b"payload") == 9 + 7
    assert data[0] == 1
    assert decode_entry(data) == (T0 + 5, b"payload")
    assert decode_entry(encode_entry(b"", 0)) == (0, b"")


def test_a_frame_header_and_the_payload_make_the_encoded_entry() -> None:
    for payload in (b"", b"x", b"payload" * 100):
        assert frame_header(T0 + 3) + payload == encode_entry(payload, T0 + 3)


def test_entry_frame_rejects_foreign_or_newer_entries_with_a_clear_error() -> None:
    with pytest.raises(LogFormatError, match="not written by a log writer"):
        decode_entry(b"short")
    with pytest.raises(LogFormatError, match="upgrade"):
        decode_entry(b"\x03" + bytes(8) + b"x")
    with pytest.raises(LogFormatError, match="flags 0x02 .*upgrade"):
        decode_entry(b"\x02" + bytes(8) + b"\x02")
    with pytest.raises(LogFormatError, match="no flags byte"):
        decode_entry(b"\x02" + bytes(8))
    with pytest.raises(LogFormatError, match="flagged null carries 1 payload bytes"):
        decode_entry(b"\x02" + bytes(8) + b"\x01x")


def test_null_value_is_framed_apart_from_an_empty_one_and_keeps_its_timestamp() -> None:
    null, empty = encode_entry(None, T0 + 7), encode_entry(b"", T0 + 7)
    assert null != empty
    assert decode_entry(null) == (T0 + 7, None)
    assert decode_entry(empty) == (T0 + 7, b"")
    assert entry_timestamp(null) == entry_timestamp(empty) == T0 + 7
    # A version-2 frame without the null flag holds an ordinary payload.
    assert decode_entry(b"\x02" + encode_entry(b"", T0)[1:] + b"\x00abc") == (T0, b"abc")


def test_non_null_entries_keep_the_version_1_frame_byte_for_byte() -> None:
    """Logs without nulls stay readable by releases that only know frame version 1."""
    ts = (T0 + 3).to_bytes(8, "big", signed=True)
    assert encode_entry(b"abc", T0 + 3) == b"\x01" + ts + b"abc"
    assert encode_entry(b"", T0 + 3) == b"\x01" + ts
    assert encode_entry(None, T0 + 3) == b"\x02" + ts + b"\x01"


# ------------------------------------------------------------------------------ names


@pytest.mark.parametrize("name", ["events", "a.b-c_D9", "x" * 200])
def test_valid_log_names_are_accepted(name: str) -> None:
    assert validate_log_name(name) == name


@pytest.mark.parametrize("name", ["", "x" * 201, "a/b", "..", ".", "sp ace", "é"])
def test_invalid_log_names_are_refused_naming_the_rule(name: str) -> None:
    with pytest.raises(InvalidConfigError, match="A-Z a-z 0-9"):
        validate_log_name(name)


# ------------------------------------------------------------------------------ positions


def test_positions_are_ordered_by_the_logs_ledger_order_not_by_ledger_id() -> None:
    a = Position(ledger_id=900, entry_id=5, ledger_index=0)
    b = Position(ledger_id=7, entry_id=0, ledger_index=1)  # smaller id, later in the log
    c = Position(ledger_id=7, entry_id=1, ledger_index=1)
    assert a < b < c and c > a and a <= a and sorted([c, b, a]) == [a, b, c]


# ------------------------------------------------------------------------------ metadata


def described(lid: int, index: int, first: int, last: int, last_ts: int | None) -> LedgerInfo:
    return LedgerInfo(lid, index, first).described(last, last_ts)


def log_with(n: int, limits: LogLimits | None = None, open_last: bool = True) -> LogMetadata:
    """A log that has had ``n`` ledgers added the way writers add them."""
    md = LogMetadata(ctime_ms=T0)
    for i in range(n):
        if md.tail:
            last = md.tail[-1]
            md = md.with_ledger_described(last.ledger_id, 999, last.first_ts_ms + 50_000)
        md = md.with_ledger_added(1000 + 3 * i, T0 + 60_000 * i)
        if limits is not None:
            md = md.spilled(limits).without_pending()
    if not open_last and md.tail:
        last = md.tail[-1]
        md = md.with_ledger_described(last.ledger_id, 999, last.first_ts_ms + 50_000)
    return md


def test_metadata_round_trips_every_kind_of_ledger_row_and_properties() -> None:
    md = LogMetadata(ctime_ms=T0, properties={"format": "json", "batch": 7})
    md = md.with_ledger_added(10, T0).with_ledger_described(10, 41, T0 + 900)
    md = md.with_ledger_added(12, T0 + 1000).with_ledger_described(12, -1, None)
    md = md.with_ledger_added(2**40, T0 + 2000)  # open: end unknown
    back = LogMetadata.from_bytes(md.to_bytes())
    assert back == md
    assert [r.is_described for r in back.tail] == [True, True, False]
    assert back.tail[0] == LedgerInfo(10, 0, T0, 41, T0 + 900)
    assert back.tail[1].last_entry_id == -1 and back.tail[1].last_ts_ms is None
    assert dict(back.properties) == {"format": "json", "batch": 7}


def test_metadata_of_a_newer_format_is_refused_with_upgrade_hint() -> None:
    with pytest.raises(MetadataSerializationError, match="upgrade"):
        LogMetadata.from_bytes(b'{"v": 2}')
    with pytest.raises(MetadataSerializationError):
        LogMetadata.from_bytes(b"not json")


def test_a_ledger_row_is_a_few_delta_coded_numbers() -> None:
    md = LogMetadata(ctime_ms=T0).with_ledger_added(2_147_483_700, T0)
    md = md.with_ledger_described(2_147_483_700, 12_345, T0 + 59_000)
    base = len(md.to_bytes())
    md2 = md.with_ledger_added(2_147_483_705, T0 + 60_000)
    md2 = md2.with_ledger_described(2_147_483_705, 12_345, T0 + 119_000)
    assert len(md2.to_bytes()) - base <= 24  # e.g. [5,60000,12345,59000],


def test_properties_merge_delete_and_replace_through_a_function() -> None:
    md = LogMetadata(ctime_ms=T0).with_properties({"a": 1, "b": {"x": [1, 2]}})
    md = md.with_properties({"a": None, "c": "z"})
    assert dict(md.properties) == {"b": {"x": [1, 2]}, "c": "z"}
    md = md.with_properties(lambda p: {**p, "c": p["c"] * 2})
    assert dict(md.properties) == {"b": {"x": [1, 2]}, "c": "zz"}
    with pytest.raises(InvalidConfigError, match="JSON"):
        md.with_properties({"bad": object()})


def test_oversized_properties_fail_before_reaching_zookeeper() -> None:
    md = LogMetadata(ctime_ms=T0).with_properties({"blob": "x" * 1_100_000})
    with pytest.raises(MetadataSerializationError, match="properties small"):
        md.to_bytes()


def test_spill_moves_the_oldest_described_ledgers_into_an_immutable_segment() -> None:
    limits = LogLimits(segment_ledgers=4, tail_max=6)
    md = log_with(6)
    assert md.spilled(limits) == md  # not over the limit yet
    md = md.with_ledger_described(md.tail[-1].ledger_id, 10, md.tail[-1].first_ts_ms + 1)
    md = md.with_ledger_added(5000, T0 + 10**7)
    spilled = md.spilled(limits)
    assert len(spilled.tail) == 3 and spilled.tail_start == 4
    (seg,) = spilled.new_segments
    assert seg.number == 0 and seg.start == 0 and [r.index for r in seg.ledgers] == [0, 1, 2, 3]
    assert Segment.from_bytes(seg.to_bytes()) == seg
    assert spilled.segments[0].count == 4 and spilled.segments[0].end == 4
    assert spilled.end_index == md.end_index == 7
    # stored form: the pending segment is not part of the main znode
    assert LogMetadata.from_bytes(spilled.to_bytes()) == spilled.without_pending()


def test_spill_never_takes_undescribed_ledgers_or_the_last_two() -> None:
    limits = LogLimits(segment_ledgers=4, tail_max=6)
    md = LogMetadata(ctime_ms=T0)
    for i in range(8):
        md = md.with_ledger_added(i, T0 + i)  # nobody recorded any ends
    assert md.spilled(limits) == md
    with pytest.raises(InvalidConfigError, match="segment_ledgers"):
        LogLimits(segment_ledgers=10, tail_max=11)


def test_ledger_indexes_stay_absolute_across_spills_and_truncation() -> None:
    limits = LogLimits(segment_ledgers=4, tail_max=6)
    md = log_with(23, limits)
    assert [s.start for s in md.segments] == [0, 4, 8, 12, 16]
    assert md.tail_start == 20 and md.end_index == 23
    assert md.segment_for(13).number == 3 and md.tail_ledger(21).ledger_id == 1000 + 3 * 21
    t = md.truncated(10)
    assert t.first_index == 10 and t.dropped_segments == (0, 1)  # segment 2 is cut: kept
    assert [s.number for s in t.live_segments] == [2, 3, 4]
    assert t.tail_ledger(21) == md.tail_ledger(21)
    t2 = t.without_pending().truncated(21)
    assert t2.first_index == 21 and t2.segments == () and t2.tail_start == 21
    assert t2.dropped_segments == (2, 3, 4) and t2.tail_ledger(22) == md.tail_ledger(22)
    assert LogMetadata.from_bytes(t2.to_bytes()) == t2.without_pending()


def test_truncation_keeps_ledgers_not_yet_closed_and_everything_after_them() -> None:
    md = log_with(4)  # last ledger open
    assert md.truncated(100).first_index == 3
    md2 = md.with_ledger_added(77, T0 + 10**8)  # two open ledgers (a writer mid-roll)
    assert md2.truncated(5).first_index == 3
    assert md.truncated(0) == md and md.truncated(2).truncated(1).first_index == 2


def test_a_hundred_thousand_ledgers_keep_every_znode_far_below_one_mebibyte() -> None:
    """Sizing: ~26 bytes per spilled ledger in segments, ~0.2 in the main znode."""
    limits = LogLimits()
    rng = random.Random(7)
    md = LogMetadata(ctime_ms=T0, properties={"format": "json", "schema": "x" * 2000,
                                              "last_batch": 123456})
    lid, ts = 2_147_483_648, T0
    segments: list[bytes] = []
    while md.end_index < 100_000:  # closed ledgers added 100 at a time, as if rolled
        rows = []
        for index in range(md.end_index, min(md.end_index + 100, 100_000)):
            lid += rng.randrange(1, 10)
            ts += rng.randrange(60_000, 70_000)
            rows.append(described(lid, index, ts, rng.randrange(1, 100_000),
                                  ts + rng.randrange(1, 60_000)))
        md = replace(md, tail=md.tail + tuple(rows)).spilled(limits)
        segments.extend(seg.to_bytes() for seg in md.new_segments)
        md = md.without_pending()
    main = md.to_bytes()
    assert md.end_index == 100_000 and len(md.segments) == len(segments)
    per_ledger_in_segments = sum(map(len, segments)) / (100_000 - len(md.tail))
    assert per_ledger_in_segments < 32
    assert max(map(len, segments)) < 16 * 1024
    assert len(main) < 64 * 1024  # 390 summaries, a tail of <= 512 rows, the properties
    # the same log without segments would not fit: that is why the tail spills
    assert per_ledger_in_segments * 100_000 > 1024 * 1024
    assert LogMetadata.from_bytes(main) == md


# ------------------------------------------------------------------------------ seeking


def test_timestamp_seek_picks_the_first_segment_whose_last_timestamp_reaches_it() -> None:
    limits = LogLimits(segment_ledgers=4, tail_max=6)
    md = log_with(23, limits)  # ledger i: created T0 + 60s*i, last entry T0 + 60s*i + 50s
    assert first_segment_for_timestamp(md, T0).number == 0
    assert first_segment_for_timestamp(md, T0 + 60_000 * 3 + 50_000).number == 0
    assert first_segment_for_timestamp(md, T0 + 60_000 * 3 + 50_001).number == 1
    assert first_segment_for_timestamp(md, T0 + 60_000 * 7 + 50_001).number == 2
    assert first_segment_for_timestamp(md, T0 + 60_000 * 21) is None  # in the tail
    assert first_segment_for_timestamp(md.truncated(10), T0).number == 2


def test_a_ledger_is_skipped_by_a_seek_only_when_all_its_entries_are_known_older() -> None:
    assert not described(1, 0, T0, 5, T0 + 10).may_hold_timestamp(T0 + 11)
    assert described(1, 0, T0, 5, T0 + 10).may_hold_timestamp(T0 + 10)
    assert not described(1, 0, T0, -1, None).may_hold_timestamp(T0)  # empty
    assert LedgerInfo(1, 0, T0).may_hold_timestamp(T0 + 10**9)  # open: look inside


@pytest.mark.parametrize("target,expected", [(0, 0), (10, 0), (11, 1), (30, 2), (31, 5),
                                             (50, 5), (51, 6)])
def test_bisect_finds_the_first_entry_at_or_after_the_timestamp(target: int, expected: int
                                                                ) -> None:
    stamps = [10, 20, 30, 30, 30, 50]  # equal timestamps happen (same millisecond)
    calls: list[int] = []

    def ts_of(e: int) -> int:
        calls.append(e)
        return stamps[e]

    assert bisect_timestamp(0, len(stamps) - 1, ts_of, target) == expected
    assert len(calls) <= 3


# ------------------------------------------------------------------------------ acks


def _acks() -> tuple[InOrderAcks, list[tuple[BaseException, int]]]:
    seen: list[tuple[BaseException, int]] = []

    def translate(exc: BaseException, lid: int) -> BKError:
        seen.append((exc, lid))
        return BKError(f"lost at ledger {lid}")

    return InOrderAcks(translate), seen


_CONDITION = shared_condition()  # one writer's futures share it


def _futures(n: int, segment: AckSegment) -> list[AppendFuture]:
    return [AppendFuture(_CONDITION, segment) for _ in range(n)]


def test_acknowledgements_cross_a_roll_in_append_order() -> None:
    acks, _ = _acks()
    old_segment = acks.open_segment(1, 0)
    old = _futures(3, old_segment)
    # the roll: appends go to ledger 2 from now on; ledger 1 got 3
    new_segment = acks.open_segment(2, 1, appended_before=3)
    new = _futures(3, new_segment)
    order: list[Position] = []
    for fut in old + new:
        fut.add_done_callback(lambda o: order.append(o.result()))
    new_segment.complete_run(new, 0, None)  # the new ledger confirms first
    assert order == []
    old_segment.complete_run(old[:2], 0, None)
    assert order == [Position(1, 0, 0), Position(1, 1, 0)]
    old_segment.complete_run(old[2:], 2, None)
    assert order == [Position(1, 0, 0), Position(1, 1, 0), Position(1, 2, 0),
                     Position(2, 0, 1), Position(2, 1, 1), Position(2, 2, 1)]


def test_an_acknowledged_append_yields_its_position_with_the_ledger_index() -> None:
    acks, _ = _acks()
    segment = acks.open_segment(7, 4)
    futs = _futures(2, segment)
    segment.complete_run(futs, 10, None)
    pos = futs[1].result(0)
    assert pos == Position(7, 11, 4) and pos.ledger_index == 4


def test_a_position_is_frozen_plain_data() -> None:
    pos = Position(3, 9, 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        pos.entry_id = 1  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(pos)) == pos and pos.without_index() == Position(3, 9)
    assert dataclasses.replace(pos, entry_id=10) == Position(3, 10, 2)
    assert Position(3, 9, 2) < Position(1, 0, 3)  # by ledger index, then entry


def test_a_ledger_without_appends_does_not_hold_the_next_one_back() -> None:
    acks, _ = _acks()
    acks.open_segment(1, 0)
    acks.open_segment(2, 1)  # rolled again before any append to ledger 1
    third = acks.open_segment(3, 2)
    futs = _futures(2, third)
    third.complete_run(futs, 0, None)
    assert [f.result(0) for f in futs] == [Position(3, 0, 2), Position(3, 1, 2)]


def test_after_a_failed_add_no_later_add_is_reported_written() -> None:
    acks, seen = _acks()
    first = acks.open_segment(1, 0)
    second = acks.open_segment(2, 1, appended_before=2)
    outs = _futures(2, first) + _futures(2, second)
    first.complete_run(outs[:1], 0, None)
    second.complete_run(outs[2:], 0, None)  # held back: ledger 1 is not done
    first.complete_run(outs[1:2], 1, LedgerFencedError("fenced"))
    assert outs[0].result() == Position(1, 0, 0)
    for o in outs[1:]:
        with pytest.raises(BKError, match="lost at ledger 1"):
            o.result()
    assert len(seen) == 1 and isinstance(seen[0][0], LedgerFencedError)


def test_acknowledgements_stay_ordered_under_concurrent_completion() -> None:
    """Five ledgers, each delivering its runs in entry order from its own thread, in a
    random interleaving: the futures still complete in append order."""
    acks, _ = _acks()
    rng = random.Random(3)
    order: list[int] = []
    lock = threading.Lock()
    plans = []
    total = 0
    for ledger in range(5):
        segment = acks.open_segment(ledger + 1, ledger, appended_before=400)
        futs = _futures(400, segment)
        for k, fut in enumerate(futs):
            fut.add_done_callback(lambda o, n=total + k: (lock.acquire(), order.append(n),
                                                          lock.release()))
        total += len(futs)
        cuts = sorted(rng.sample(range(1, 400), 9))
        runs = [(futs[a:b], a) for a, b in zip([0, *cuts], [*cuts, 400], strict=True)]
        plans.append((segment, runs, rng.random() * 0.002))

    def deliver(segment, runs, pause) -> None:  # type: ignore[no-untyped-def]
        for futs, first in runs:
            time.sleep(pause)
            segment.complete_run(futs, first, None)

    threads = [threading.Thread(target=deliver, args=plan) for plan in reversed(plans)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert order == list(range(total))


def test_frames_decoded_in_bulk_are_what_decode_entry_makes_of_each():
    import numpy as np

    from bk_spark.protocol.log_format import decode_entry, decode_frames, encode_entry

    values = [b"abc", None, b"", b"x" * 300, None, b"\x02\x01"]
    framed = [b"pad"] + [encode_entry(v, 1_700_000_000_000 + i) for i, v in enumerate(values)]
    data = b"".join(framed)
    ends = np.cumsum([len(f) for f in framed])[1:]
    starts = ends - [len(f) for f in framed[1:]]
    f = decode_frames(data, starts, ends)
    for i in range(len(values)):
        ts, value = decode_entry(data[starts[i]:ends[i]])
        assert f.timestamps_ms[i] == ts
        assert bool(f.nulls[i]) == (value is None)
        if value is not None:
            assert data[f.value_starts[i]:ends[i]] == value


@pytest.mark.parametrize("bad", [b"\x01abc", b"\x07" + bytes(8), b"\x02" + bytes(8),
                                 b"\x02" + bytes(8) + b"\x04", b"\x02" + bytes(8) + b"\x01z"])
def test_frames_decoded_in_bulk_refuse_what_decode_entry_refuses(bad):
    import numpy as np

    from bk_spark.protocol.log_format import decode_entry, decode_frames, encode_entry

    good = encode_entry(b"ok", 1)
    data = good + bad
    with pytest.raises(LogFormatError) as one:
        decode_entry(bad)
    with pytest.raises(LogFormatError) as bulk:
        decode_frames(data, np.array([0, len(good)]), np.array([len(good), len(data)]))
    assert str(bulk.value) == str(one.value)


def test_delivering_a_run_of_appends_makes_no_object_the_gc_tracks_per_append() -> None:
    """A run of hundreds of acknowledgements completes its futures with entry ids; the
    Positions are made when asked for. (One Position per append made on the delivering
    thread set off a young-generation GC every few runs, and full ones with them.)"""
    acks, _ = _acks()
    segment = acks.open_segment(7, 4)
    futs = _futures(1000, segment)
    gc.disable()
    try:
        before = gc.get_count()[0]
        segment.complete_run(futs, 0, None)
        made = gc.get_count()[0] - before
    finally:
        gc.enable()
    assert made < 20, made
    assert [f.result(0) for f in futs[:2]] == [Position(7, 0, 4), Position(7, 1, 4)]
    assert futs[5].result(0) == futs[5].result(0) and futs[5].result(0).ledger_index == 4


def test_truncation_records_the_range_of_removed_ledger_ids_and_it_round_trips() -> None:
    md = log_with(5)  # ledgers 1000, 1003, ..., 1012 (the last open)
    assert md.removed_ledgers is None
    cut = md.truncated(2, [1000, 1003])
    assert cut.first_index == 2 and cut.removed_ledgers == (1000, 1003)
    again = cut.truncated(4, [1006, 1009])
    assert again.removed_ledgers == (1000, 1009)  # grows to cover every removal
    back = LogMetadata.from_bytes(again.to_bytes())
    assert back == again and back.removed_ledgers == (1000, 1009)
    assert md.truncated(0, [1000]) is md  # nothing removed: nothing recorded


def test_log_metadata_without_the_removed_range_still_reads() -> None:
    old = log_with(3).truncated(1)  # what a release before the field wrote
    d = json.loads(old.to_bytes())
    assert "removed" not in d
    back = LogMetadata.from_bytes(json.dumps(d).encode())
    assert back.removed_ledgers is None and back.first_index == 1
    # its next truncation cannot know what the first removed: every lower id may be
    assert back.truncated(2, [1003]).removed_ledgers == (0, 1003)
