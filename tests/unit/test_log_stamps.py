"""How a log writer stamps its entries a round at a time (bk_spark.log.writer's
LedgerStamps, each ledger's round framer): timestamps never decrease in log order, across a
roll too, and nulls keep their own frame. No bookies: the framer is called as a ledger's
sender calls it."""

from __future__ import annotations

import time

from bk_spark.log.writer import NULL_PAYLOAD, LedgerStamps, LogClock
from bk_spark.protocol.log_format import decode_entry, encode_entry, frame_header


def entries(stamps: LedgerStamps, payloads: list[bytes]) -> list[bytes]:
    prefix, framed = stamps.frame(payloads)
    return [prefix + p for p in framed]


def stamp(stamps: LedgerStamps) -> int:
    (entry,) = entries(stamps, [b"x"])
    return decode_entry(entry)[0]


def test_a_round_is_stamped_now_but_never_before_the_logs_last_stamp() -> None:
    future = time.time_ns() // 1_000_000 + 60_000  # the fenced ledgers' last stamp
    clock = LogClock(future)
    stamps = LedgerStamps(clock)
    assert stamp(stamps) == future and stamps.last == future
    clock = LogClock(0)
    stamps = LedgerStamps(clock)
    before = time.time_ns() // 1_000_000
    first = stamp(stamps)
    assert first >= before and clock.last == first
    time.sleep(0.002)
    assert stamp(stamps) > first


def test_after_a_roll_the_previous_ledgers_rounds_are_no_later_than_the_next_ones() -> None:
    """The previous ledger may still ship rounds taken before the roll while the next one
    ships its first: sealed, the previous one stamps the log's last stamp at the seal."""
    clock = LogClock(0)
    prev = LedgerStamps(clock)
    early = stamp(prev)
    prev.seal()  # the roll: prev took its last add, the next ledger none yet
    nxt = LedgerStamps(clock)
    time.sleep(0.002)
    first_next = stamp(nxt)
    time.sleep(0.002)
    late = stamp(prev)  # prev's last round, shipped after the next ledger's first
    assert early <= late <= first_next and prev.last == late
    assert stamp(nxt) >= first_next


def test_a_null_gets_the_null_frame_and_an_equal_value_stays_a_value() -> None:
    stamps = LedgerStamps(LogClock(0))
    plain = entries(stamps, [b"a", b""])
    ts = stamps.last
    assert plain == [frame_header(ts) + b"a", frame_header(ts)]
    stamps.nulls = True  # what the writer sets before adding a null
    look_alike = bytes(bytearray(NULL_PAYLOAD))  # equal, another object: a caller's value
    assert look_alike == NULL_PAYLOAD
    got = entries(stamps, [b"a", NULL_PAYLOAD, look_alike, b""])
    ts = stamps.last
    assert got == [encode_entry(b"a", ts), encode_entry(None, ts),
                   encode_entry(look_alike, ts), encode_entry(b"", ts)]
    assert [decode_entry(e)[1] for e in got] == [b"a", None, look_alike, b""]
