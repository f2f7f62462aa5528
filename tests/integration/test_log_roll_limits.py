"""A log's rolling limits hold however many appends are in flight (issue 31): real
ZooKeeper and bookie processes, writers with passwords, the README's ``append_async``."""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bk_spark.core import BookKeeper
from bk_spark.log import (
    LogRecord,
    Position,
    log_ledgers,
    open_log_reader,
    open_log_writer,
    pending,
)
from bk_spark.log.testing import after_roll_cas, hold_roller

PW = b"pw"


@pytest.fixture
def bk(cluster, metadata_uri: str) -> Iterator[BookKeeper]:
    client = BookKeeper(metadata_uri)
    yield client
    client.close()


def read_all(bk: BookKeeper, name: str) -> list[LogRecord]:
    return list(open_log_reader(bk, name, password=PW).read_available())


def ledger_sizes(bk: BookKeeper, name: str) -> list[int]:
    """Entries of each ledger of the log, from the metadata (``last_entry_id``)."""
    infos = log_ledgers(bk, name)
    assert all(i.last_entry_id is not None for i in infos), infos  # all closed
    return [i.last_entry_id + 1 for i in infos]  # type: ignore[operator]


def append_all(w, values: list[bytes | None], in_flight: int | None = None
               ) -> list[Position]:
    """``append_async`` every value, at most ``in_flight`` outstanding (None: all at once);
    the positions acknowledged, in append order."""
    window: deque[Future[Position]] = deque()
    got: list[Position] = []
    for v in values:
        if in_flight is not None and len(window) >= in_flight:
            got.append(window.popleft().result(120))
        window.append(w.append_async(v))
    got.extend(f.result(120) for f in window)
    return got


def test_50000_pipelined_appends_with_roll_max_entries_10000_fill_5_ledgers_of_10000(
        bk: BookKeeper) -> None:
    """The issue's scenario: every append in flight at once. Before the fix the first
    ledger took all 50,000 (the roll happened only between acknowledged chunks)."""
    w = open_log_writer(bk, "pipelined", password=PW, roll_max_entries=10_000)
    positions = append_all(w, [b"x" * 100] * 50_000)
    w.close()
    sizes = ledger_sizes(bk, "pipelined")
    assert sizes[:5] == [10_000] * 5, sizes
    assert all(s == 0 for s in sizes[5:]), sizes  # (rolled once full: maybe one empty)
    assert positions == sorted(positions)
    assert [p.ledger_id for p in positions[::10_000]] == [i.ledger_id for i in
                                                          log_ledgers(bk, "pipelined")[:5]]


def test_pipelined_appends_with_roll_max_bytes_fill_ledgers_up_to_the_byte_limit(
        bk: BookKeeper) -> None:
    w = open_log_writer(bk, "pipelined-bytes", password=PW, roll_max_bytes=100_000)
    append_all(w, [b"y" * 100] * 5_000)
    w.close()
    sizes = ledger_sizes(bk, "pipelined-bytes")
    assert sizes[:5] == [1_000] * 5, sizes  # 1,000 payloads of 100 bytes each
    assert all(s == 0 for s in sizes[5:]), sizes


def check_limits(records: list[LogRecord], max_entries: int | None, max_bytes: int | None
                 ) -> None:
    for _, group in itertools.groupby(records, key=lambda r: r.position.ledger_id):
        ledger = list(group)
        if max_entries is not None:
            assert len(ledger) <= max_entries
        size = sum(len(r.payload or b"") for r in ledger)
        if max_bytes is not None and size > max_bytes:
            assert len(ledger) == 1, (size, len(ledger))  # one entry above the limit, alone


def test_pipelined_appends_of_mixed_sizes_keep_both_limits_and_a_large_entry_alone(
        bk: BookKeeper) -> None:
    """Sizes 0 to 3 KiB, nulls, and entries above ``roll_max_bytes`` (each in a ledger of
    its own), 2,000 in flight; the log reads back in append order."""
    values: list[bytes | None] = []
    for i in range(1_000):
        if i % 301 == 7:
            values.append(bytes([i % 251]) * 60_000)   # larger than roll_max_bytes
        elif i % 97 == 3:
            values.append(None)
        else:
            values.append(bytes([i % 251]) * ((i * 37) % 3_000))
    w = open_log_writer(bk, "pipelined-mix", password=PW, roll_max_entries=40,
                        roll_max_bytes=50_000)
    positions = append_all(w, values, in_flight=2_000)
    w.close()
    records = read_all(bk, "pipelined-mix")
    assert [r.payload for r in records] == values
    assert [r.position for r in records] == positions
    check_limits(records, 40, 50_000)
    big = [r for r in records if r.payload is not None and len(r.payload) == 60_000]
    sizes = dict(zip([i.ledger_id for i in log_ledgers(bk, "pipelined-mix")],
                     ledger_sizes(bk, "pipelined-mix"), strict=True))
    assert big and all(sizes[r.position.ledger_id] == 1 for r in big)


_names = itertools.count()


@settings(max_examples=4, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(max_entries=st.one_of(st.none(), st.integers(5, 60)),
       max_bytes=st.one_of(st.none(), st.integers(500, 5_000)),
       sizes=st.lists(st.integers(0, 1_000), min_size=1, max_size=250),
       in_flight=st.integers(1, 300))
def test_property_no_ledger_exceeds_a_limit_and_the_log_reads_back_in_append_order(
        bk: BookKeeper, max_entries: int | None, max_bytes: int | None, sizes: list[int],
        in_flight: int) -> None:
    name = f"roll-prop-{next(_names)}"
    if max_entries is None and max_bytes is None:
        max_entries = 25
    values = [bytes([i % 256]) * s for i, s in enumerate(sizes)]
    w = open_log_writer(bk, name, password=PW, roll_max_entries=max_entries,
                        roll_max_bytes=max_bytes)
    positions = append_all(w, values, in_flight=in_flight)
    w.close()
    records = read_all(bk, name)
    assert [r.payload for r in records] == values
    assert [r.position for r in records] == positions
    check_limits(records, max_entries, max_bytes)


def test_close_puts_every_append_waiting_for_a_ledger_into_one_before_it_returns(
        bk: BookKeeper) -> None:
    """Closing right after 1,000 appends with ``roll_max_entries=100``: most of them still
    wait for a ledger; close rolls until each has one, and every future completes."""
    w = open_log_writer(bk, "close-waiting", password=PW, roll_max_entries=100)
    futures = [w.append_async(None if i % 50 == 1 else f"{i}".encode()) for i in range(1_000)]
    w.close()
    positions = [f.result(0) for f in futures]  # all done by close
    assert positions == sorted(positions)
    sizes = ledger_sizes(bk, "close-waiting")
    assert sizes[:10] == [100] * 10 and not any(sizes[10:]), sizes
    assert [r.payload for r in read_all(bk, "close-waiting")] == [
        None if i % 50 == 1 else f"{i}".encode() for i in range(1_000)]



def test_the_roller_of_a_writer_left_open_ends_when_its_client_is_closed(
        cluster, metadata_uri: str) -> None:
    """A writer left open (never closed) whose client is closed: its roller thread ends at
    the next roll it attempts (here the age limit's), and the writer is stopped with an
    error saying why. On the merge of issue 31 the roller retried the roll every second,
    with a warning each time, for the life of the process."""
    import threading
    import time

    from bk_spark.errors import BKError

    client = BookKeeper(metadata_uri)
    w = open_log_writer(client, "closed-under", password=PW, roll_max_age_s=0.2)
    w.append(b"acknowledged")  # nothing in flight: no add notices the client closing
    client.close()
    deadline = time.monotonic() + 5
    while any(t.name == "log-roller-closed-under" for t in threading.enumerate()):
        assert time.monotonic() < deadline, "the roller outlived its client"
        time.sleep(0.05)
    # BookKeeper.close() closes the writers its caller left open (issue 25): a later append
    # says the writer is closed (a roller stopped by the closed client would say "client")
    with pytest.raises(BKError, match="closed"):
        w.append_async(b"after")


def test_a_log_filling_fast_lists_its_next_ledger_while_appends_still_fill_the_current_one(
        bk: BookKeeper) -> None:
    """Issue 28: the roller runs a roll's CAS ahead, once the current ledger would be full
    within LIST_AHEAD_S at its rate, so the roll due when it is full is only the switch.
    Before, the CAS started only once the ledger was full, and every append waited for it
    at each roll. The ledgers still fill to the limit, in append order."""
    appended = [0]
    at_cas: list[int] = []  # appends made when each roll's CAS landed
    w = after_roll_cas(open_log_writer(bk, "list-ahead", password=PW, roll_max_entries=5_000),
                       lambda _new: at_cas.append(appended[0]))
    window: deque[Future[Position]] = deque()
    got: list[Position] = []
    for i in range(30_000):
        if len(window) >= 1_000:
            got.append(window.popleft().result(120))
        window.append(w.append_async(b"z" * 100))
        appended[0] = i + 1
    got.extend(f.result(120) for f in window)
    w.close()
    sizes = ledger_sizes(bk, "list-ahead")
    assert sizes[:6] == [5_000] * 6 and all(s == 0 for s in sizes[6:]), sizes
    assert got == sorted(got)
    ahead = [k for k, n in enumerate(at_cas[:5]) if n < (k + 1) * 5_000]
    assert ahead, at_cas  # ledger k + 1 listed before the appends filled ledger k


def test_the_append_that_finds_its_ledger_full_switches_to_the_one_listed_ahead_itself(
        bk: BookKeeper) -> None:
    """Issue 28: with the next ledger listed ahead, the append that finds the current one
    full switches to it on its own thread; the roller thread only closes the previous
    ledger afterwards. Before, every append past the limit waited for the roller thread to
    be scheduled and switch (in the bench, 400-1,600 of the 2,000 in flight queued at a
    roll while the bookies' pipeline drained): with the roller held, they never
    completed."""
    name = "switch-by-append"
    listed = threading.Event()
    w = after_roll_cas(open_log_writer(bk, name, password=PW, roll_max_entries=1_000),
                       lambda _new: listed.set())
    first = append_all(w, [b"a" * 100] * 600)  # half-way: the roller prepares the spare
    deadline = time.monotonic() + 30
    while not pending.registered(bk, name):
        assert time.monotonic() < deadline, "no spare ledger was prepared"
        time.sleep(0.01)
    first += append_all(w, [b"b" * 100] * 398)  # 998: full within LIST_AHEAD_S at its rate
    assert listed.wait(30), "the next ledger was not listed ahead"
    with hold_roller(w):
        window = [w.append_async(b"c" * 100) for _ in range(500)]
        later = [f.result(10) for f in window]  # before: TimeoutError (no switch)
        infos = log_ledgers(bk, name)
        assert [i.last_entry_id for i in infos] == [None, None]  # both open: no step 4 yet
    got = first + later
    assert got == sorted(got)
    assert [p.ledger_id for p in got[:1_000]] == [infos[0].ledger_id] * 1_000
    assert [p.ledger_id for p in got[1_000:]] == [infos[1].ledger_id] * 498
    deadline = time.monotonic() + 30
    while log_ledgers(bk, name)[0].last_entry_id is None:  # the roller closes the first
        assert time.monotonic() < deadline, "the roller did not close the previous ledger"
        time.sleep(0.01)
    assert log_ledgers(bk, name)[0].last_entry_id == 999
    w.close()
    assert ledger_sizes(bk, name) == [1_000, 498]
    assert [r.position for r in read_all(bk, name)] == got
