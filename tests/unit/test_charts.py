"""Every chart `make bench` writes is legible: no two tick labels overlap, no axis label or
title overlaps tick labels, no text leaves the image (matplotlib's text extents), and each
title says what is compared. The Spark and window charts are drawn from the committed
bench/results.md; the latency and memory charts from synthetic samples (their raw samples
are not committed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench import charts

ROOT = Path(__file__).resolve().parents[2]
ROWS = charts.results_rows((ROOT / "bench" / "results.md").read_text())
RNG = np.random.default_rng(7)


def _figures():  # type: ignore[no-untyped-def]
    yield "spark_vs_parquet", lambda: charts.spark_figure(charts.spark_bars(ROWS))
    yield "throughput_vs_window", lambda: charts.window_figure(charts.windows_from_rows(ROWS))
    yield "add_latency_cdf", lambda: charts.add_latency_figure(
        {f: (RNG.gamma(2, 0.005 / f, 2000), 52984 * f, 52000 * f) for f in (0.2, 0.5, 1.0)},
        RNG.gamma(2, 0.002, 2000))
    yield "tail_latency_cdf", lambda: charts.tail_latency_figure(
        {"log tailing reader (append every 5 ms)": RNG.gamma(2, 0.02, 500),
         "Spark stream, trigger processingTime=0": RNG.gamma(3, 0.1, 200),
         "Spark stream, trigger availableNow loop": RNG.gamma(3, 0.2, 200)})
    yield "bookie_rss", lambda: charts.rss_figure(
        [(i, (180 + 3 * i) * charts.MiB, i * 10**8) for i in range(60)], 6)


@pytest.mark.parametrize("name,make", list(_figures()), ids=[n for n, _ in _figures()])
def test_every_chart_has_no_overlapping_labels_and_a_title_naming_the_comparison(name, make):
    fig = make()
    assert charts.label_problems(fig) == [], name
    title = fig.axes[0].get_title()
    assert " vs " in title, (name, title)


def test_the_committed_results_hold_the_spark_and_window_figures():
    bars = charts.spark_bars(ROWS)
    assert len(bars) >= 4 and all(v > 0 and r > 0 for _l, v, r in bars)
    assert any(label.startswith("read") for label, _v, _r in bars)
    assert len(charts.windows_from_rows(ROWS)) >= 3


def test_the_check_sees_the_overlap_of_crowded_vertical_labels():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4, 3))
    ax.bar(range(4), [1, 2, 3, 4])
    ax.set_xticks(range(4), ["a long label number one", "another long label", "third one",
                             "and a fourth long one"])
    assert any("overlap" in p for p in charts.label_problems(fig))
    plt.close(fig)
