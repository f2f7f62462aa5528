"""Tiered storage decisions (Pulsar's offloader, in one CAS loop): what is due, where a
reader reads a ledger from, when a bookie copy may go. Pure tables, no server."""

from __future__ import annotations

import pytest

from bk_spark.errors import InvalidConfigError, OffloadRecordsFullError
from bk_spark.protocol import offload_rules as rules
from bk_spark.protocol.log_format import LedgerInfo
from bk_spark.protocol.offload_rules import (
    READ_FROM,
    TIER,
    AfterKind,
    OffloadPolicy,
    OffloadState,
    Source,
    Tier,
    backlog,
    bookie_copy_deletable,
    check_records_room,
    due,
    lag_ms,
    offload_file,
    offloaded_prefix,
    parse_after,
    parse_lag_ms,
    policy_of,
    read_from,
    records_limit,
    start_offload,
    states_of,
    target_of,
    tier,
    with_state,
    without_states,
)


def _ledgers(*lasts: int | None) -> list[LedgerInfo]:
    """Ledgers 10, 11, ... at indexes 0, 1, ...; None: still open (not described)."""
    return [LedgerInfo(10 + i, i, 1000 * i) if last is None else
            LedgerInfo(10 + i, i, 1000 * i).described(last, 1000 * i + 500 if last >= 0
                                                      else None)
            for i, last in enumerate(lasts)]


def _done(lid: int) -> OffloadState:
    return OffloadState(f"id{lid}", "file:///t").completed(1, 1, 1, 1, 0)


@pytest.mark.parametrize("text, kind, amount", [
    ("0", AfterKind.LEDGERS, 0), ("5", AfterKind.LEDGERS, 5),
    ("64MiB", AfterKind.BYTES, 64 << 20), ("1kb", AfterKind.BYTES, 1000),
    ("30s", AfterKind.AGE, 30_000), ("2h", AfterKind.AGE, 7_200_000),
    ("500ms", AfterKind.AGE, 500),
])
def test_offload_after_counts_ledgers_bytes_or_age(text, kind, amount):
    assert parse_after(text) == (kind, amount)


@pytest.mark.parametrize("text", ["", "-1", "5 apples", "1.5"])
def test_an_unreadable_offload_after_names_the_option(text):
    with pytest.raises(InvalidConfigError, match="--offload-after"):
        parse_after(text)


def test_deletion_lag_minus_one_keeps_both_copies():
    assert parse_lag_ms("-1") == -1 and parse_lag_ms("4h") == 4 * 3600 * 1000
    with pytest.raises(InvalidConfigError, match="--offload-deletion-lag"):
        parse_lag_ms("soon")


@pytest.mark.parametrize("after, lasts, complete, expected", [
    ("0", [3, 4, None], set(), [10]),           # as soon as closed, first one first
    ("0", [3, 4, None], {10}, [11]),            # in log order
    ("0", [3, 4, None], {10, 11}, []),          # the open ledger never
    ("1", [3, 4, None], set(), [10]),           # the newest closed one stays
    ("2", [3, 4, None], set(), []),
    ("0", [3, 4, 5], {11}, [10]),               # an earlier gap is filled first
    ("0", [-1, 4], set(), [10]),                # an empty ledger too (an empty file)
    ("0", [], set(), []),
])
def test_a_ledger_is_due_in_log_order_once_closed_and_past_the_policy(
        after, lasts, complete, expected):
    states = {lid: _done(lid) for lid in complete}
    got = due(_ledgers(*lasts), states, OffloadPolicy(after=after), now_ms=10**9)
    assert [r.ledger_id for r in got] == expected


def test_an_offloading_ledger_is_due_again_its_stale_attempt_replaced():
    states = {10: OffloadState("crashed", "file:///t")}
    assert [r.ledger_id for r in due(_ledgers(3, None), states, OffloadPolicy(), 0)] == [10]
    new, stale = start_offload(states[10], "again", "file:///t")
    assert stale == states[10] and new.offload_id == "again" and not new.complete
    with pytest.raises(ValueError):
        start_offload(_done(10), "x", "file:///t")


def test_bytes_and_age_policies():
    ledgers = _ledgers(3, 4, 5, None)
    sizes = {10: 100, 11: 100, 12: 100}
    assert [r.ledger_id for r in due(ledgers, {}, OffloadPolicy(after="150b"), 0, sizes)] \
        == [10]
    assert due(ledgers, {}, OffloadPolicy(after="300b"), 0, sizes) == []
    # last entries at 500, 1500, 2500: with an age of 1s at 2000 only 10 and 11 are old
    assert [r.ledger_id for r in due(ledgers, {}, OffloadPolicy(after="1s"), 2000)] == [10]
    assert due(ledgers, {}, OffloadPolicy(after="1s"), 1000) == []
    assert due(ledgers, {}, None, 0) == []  # no policy: never


def test_the_tier_table_covers_every_state_and_readers_use_only_complete_copies():
    assert len(TIER) == 8 and set(READ_FROM) == set(Tier)
    assert tier(None) is Tier.BOOKIES and read_from(None) is Source.BOOKIES
    offloading = OffloadState("x", "file:///t")
    assert tier(offloading) is Tier.OFFLOADING and read_from(offloading) is Source.BOOKIES
    done = _done(1)
    assert tier(done) is Tier.BOTH and read_from(done) is Source.PARQUET
    dropped = OffloadState.from_json(done.to_json() | {"dropped": True})
    assert tier(dropped) is Tier.OFFLOADED and read_from(dropped) is Source.PARQUET


@pytest.mark.parametrize("lag, now, dropped, expected", [
    (-1, 10**9, False, False),   # keep both
    (0, 1, False, True),
    (100, 50, False, False),     # lag not passed
    (100, 101, False, True),
    (0, 1, True, False),         # already deleted
])
def test_a_bookie_copy_is_deletable_only_after_completion_and_the_lag(lag, now, dropped,
                                                                      expected):
    st = OffloadState("x", "t", done_ms=1, dropped=dropped)
    assert bookie_copy_deletable(st, lag, now) is expected
    assert not bookie_copy_deletable(OffloadState("x", "t"), 0, 10**9)


def test_the_offloaded_prefix_stops_at_the_first_ledger_not_complete():
    ledgers = _ledgers(1, 2, 3, None)
    assert [r.ledger_id for r in offloaded_prefix(ledgers, {10: _done(10), 12: _done(12)})] \
        == [10]


def test_states_round_trip_through_the_properties_and_truncation_drops_them():
    props = with_state({"x": 1}, 10, _done(10))
    props = with_state(props, 11, OffloadState("y", "file:///t"))
    assert states_of(props) == {10: _done(10), 11: OffloadState("y", "file:///t")}
    assert states_of(without_states(props, [10, 11])) == {}
    assert without_states(props, [10, 11]) == {"x": 1}
    assert policy_of({}) is None
    pol = OffloadPolicy(after="3", target="s3://b/p", deletion_lag_ms=-1)
    assert policy_of({"bk-spark.offload": pol.to_json()}) == pol


def test_each_attempt_writes_its_own_file():
    a = offload_file("ev", "lid", 7, OffloadState("a", "file:///t/"))
    b = offload_file("ev", "lid", 7, OffloadState("b", "file:///t/"))
    assert a == "file:///t/ev/lid/ledger-0000000000000000007-a.parquet" and a != b


def test_a_target_query_stays_at_the_end_of_the_file_uri():
    f = offload_file("ev", "lid", 7, OffloadState("a", "s3://b/p?endpoint_override=h&x=1"))
    assert f == "s3://b/p/ev/lid/ledger-0000000000000000007-a.parquet?endpoint_override=h&x=1"


def test_the_backlog_is_every_due_ledger_not_complete_and_due_is_its_first():
    ledgers = _ledgers(3, 3, 3, 3, None)  # four closed, one open
    states = {10: _done(10)}
    zero = OffloadPolicy(after="0")
    assert [r.ledger_id for r in backlog(ledgers, states, zero, 10_000)] == [11, 12, 13]
    assert due(ledgers, states, zero, 10_000) == backlog(ledgers, states, zero, 10_000)[:1]
    keep2 = OffloadPolicy(after="2")  # the newest two closed ledgers stay on bookies only
    assert [r.ledger_id for r in backlog(ledgers, states, keep2, 10_000)] == [11]
    assert backlog(ledgers, {i: _done(i) for i in range(10, 14)}, zero, 10_000) == []
    assert backlog(ledgers, states, None, 10_000) == []


def test_the_lag_is_how_long_the_oldest_ledger_of_the_backlog_has_been_due():
    ledgers = _ledgers(3, 3, None)  # ledger 10's last entry at 500 ms, ledger 11's at 1500
    zero = OffloadPolicy(after="0")
    assert lag_ms(backlog(ledgers, {}, zero, 10_000), zero, 10_000) == 9_500
    assert lag_ms(backlog(ledgers, {10: _done(10)}, zero, 10_000), zero, 10_000) == 8_500
    assert lag_ms([], zero, 10_000) == 0
    # an age policy's own wait is no lag: ledger 10 has been due for 10000 - 500 - 2000 ms
    age = OffloadPolicy(after="2s")
    assert lag_ms(backlog(ledgers, {}, age, 10_000), age, 10_000) == 7_500
    assert backlog(ledgers, {}, age, 2_000) == []


def test_offload_records_stop_short_of_zookeepers_znode_limit_with_an_error_saying_what_to_do():
    """The records live in the log's znode: a log holds some 6,000 of them; the one past
    the limit is refused with what to do, before ZooKeeper would refuse the whole znode
    (and with it the writer's next roll)."""
    from bk_spark.protocol.log_format import LogMetadata

    def md_with(n: int) -> LogMetadata:
        state = OffloadState("0123456789abcdef", "file:///var/lib/bk/offload").completed(
            1_764_300_000_000, 4096, 4096, 1_234_567, 2**31)
        props: dict = {}
        for lid in range(10**6, 10**6 + n):
            props = with_state(props, lid, state)
        return LogMetadata(ctime_ms=1, log_id="f" * 32).with_properties(props)

    size_1000 = len(md_with(1000).to_bytes())
    per_record = size_1000 / 1000
    assert 100 < per_record < 200  # the README's "about 150 bytes each"
    limit = records_limit(size_1000, 1000)
    assert 5_000 < limit < 8_000
    check_records_room("events", size_1000, 1000)  # room left: no error
    # halfway into the headroom: refused, while ZooKeeper would still take the znode
    n = 1000 + int((1_000_000 - 32 * 1024 - size_1000) / per_record)
    assert abs(n - limit) < 0.1 * limit  # bk log set's estimate
    full = md_with(n)
    with pytest.raises(OffloadRecordsFullError, match="truncate") as e:
        check_records_room("events", len(full.to_bytes()), n)
    assert "'events'" in str(e.value) and "ZooKeeper" in str(e.value)


def test_the_files_are_where_the_policy_says_else_where_the_records_say():
    """A sandbox log's policy names no target (the offloader's default): offload_path must
    still find the files, through the target its records name (a new user's
    ``offload_path(uri, "events")`` failed with 'names no offload target')."""
    assert target_of({}) is None
    no_target = {"bk-spark.offload": OffloadPolicy(after="0").to_json()}
    assert target_of(no_target) is None
    props = with_state(no_target, 4, OffloadState("a", "file:///sandbox/offload"))
    props = with_state(props, 9, OffloadState("b", "file:///elsewhere"))
    assert target_of(props) == "file:///elsewhere"
    pol = OffloadPolicy(after="0", target="s3://b/p")
    assert target_of(with_state({"bk-spark.offload": pol.to_json()}, 4,
                                OffloadState("a", "file:///x"))) == "s3://b/p"


def test_handoff_the_elected_offloads_what_it_keys_and_a_keyholder_only_waiting_ledgers():
    H = rules.Handoff
    assert rules.handoff(True, True, False) is H.OFFLOAD
    assert rules.handoff(True, False, False) is H.WAIT
    assert rules.handoff(True, False, True) is H.WAIT
    assert rules.handoff(False, True, True) is H.OFFLOAD
    assert rules.handoff(False, True, False) is H.LEAVE   # the elected one's
    assert rules.handoff(False, False, True) is H.LEAVE
    assert len(rules.HANDOFF) == 8
