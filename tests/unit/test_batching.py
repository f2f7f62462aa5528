"""The one batching rule (writer linger, bookie group commit): wait only for a batch the
observed arrival rate says comes within the limit."""

from __future__ import annotations

import pytest

from bk_spark.protocol.batching import ArrivalRate, batch_wait


@pytest.mark.parametrize(
    "queued, target, rate, max_wait, expected",
    [
        (10, 64, 100_000.0, 0.001, 54 / 100_000),  # high load: the round fills in 0.54 ms
        (10, 64, 10_000.0, 0.001, 0.0),  # 20% load: 5.4 ms > 1 ms, ship now
        (1, 64, 0.0, 0.001, 0.0),  # nothing seen arriving: never wait
        (64, 64, 100_000.0, 0.001, 0.0),  # the batch is there
        (0, 1, 2_000.0, 0.001, 0.0005),  # journal: next record due in 0.5 ms
        (0, 1, 500.0, 0.001, 0.0),  # journal: next record due in 2 ms, after the limit
        (3, 64, 1e9, 0.0, 0.0),  # no waiting configured
    ],
)
def test_batch_wait_is_the_expected_time_for_the_missing_items_within_the_limit(
        queued, target, rate, max_wait, expected):
    assert batch_wait(queued, target, rate, max_wait) == pytest.approx(expected)


def test_arrival_rate_converges_to_a_steady_rate():
    est = ArrivalRate()
    t = 0.0
    for _ in range(200):  # 20,000 per second, two at a time
        t += 1e-4
        est.observe(t, 2)
    assert est.rate(t) == pytest.approx(20_000, rel=0.01)


def test_a_lone_arrival_predicts_no_other():
    est = ArrivalRate()
    est.observe(5.0, 1)
    assert est.rate(5.0) == 0.0
    assert batch_wait(1, 2, est.rate(5.0), 3600.0) == 0.0


def test_arrival_rate_drops_as_soon_as_arrivals_stop():
    est = ArrivalRate()
    for i in range(1000):
        est.observe(i * 1e-4, 10)  # 100,000 per second
    assert est.rate(0.0999) == pytest.approx(100_000, rel=0.01)
    assert est.rate(0.6) == pytest.approx(1 / (0.6 - 0.0999))  # idle for 0.5 s
    est.observe(0.6, 500)  # a burst after the pause raises it again
    assert est.rate(0.6) > 1 / 0.5


def test_arrival_rate_ignores_a_clock_that_goes_backwards():
    est = ArrivalRate()
    est.observe(1.0, 1)
    est.observe(1.001, 1)
    est.observe(0.5, 1)  # another thread's older timestamp: a zero interval, no crash
    assert est.rate(1.001) > 1_000


def test_arrival_rate_needs_a_weight_in_range():
    with pytest.raises(ValueError):
        ArrivalRate(alpha=0)
