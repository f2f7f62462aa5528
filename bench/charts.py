"""PNG charts of a ``make bench`` run, written beside ``bench/results.md`` (matplotlib, no
display needed). Each chart draws figures measured in the same run; the README shows them.

* ``throughput_vs_window.png``: ledger adds/s against adds in flight;
* ``add_latency_cdf.png``: add latency CDF paced at 20% / 50% / 100% of the measured max,
  with one add alone;
* ``spark_vs_parquet.png``: Spark batch read and write rows/s, bookkeeper vs Parquet (the
  rows of the results table, whichever section measured them);
* ``tail_latency_cdf.png``: append -> seen, by a tailing log reader and by a streaming
  query's rows;
* ``bookie_rss.png``: the bookie's resident set while it takes the memory figure's write.

Each chart is built by a ``*_figure`` function (the PNG writers call them), so that
``tests/unit/test_charts.py`` can render them and check with matplotlib's text extents that
no two labels overlap and every text lies inside the image (:func:`label_problems`).
``python -m bench.charts`` redraws the charts whose figures ``bench/results.md`` keeps (the
Spark comparison and the in-flight window) without running the benchmark.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
import numpy as np  # noqa: E402

MiB = 1024 * 1024


def _cdf(ax, values_s: Sequence[float], label: str) -> None:  # type: ignore[no-untyped-def]
    v = np.sort(np.asarray(values_s, dtype=float)) * 1e3
    if len(v):
        ax.plot(v, np.arange(1, len(v) + 1) / len(v), label=label)


def _save(fig, path: Path) -> None:  # type: ignore[no-untyped-def]
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    print(f"written {path.relative_to(path.parents[1])}")


def window_figure(windows: dict[int, float]):  # type: ignore[no-untyped-def]
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    xs = sorted(windows)
    ax.plot(xs, [windows[x] for x in xs], marker="o")
    ax.set_xscale("log")
    ax.set_xlabel("adds in flight (closed loop)")
    ax.set_ylabel("ledger adds/s\n(1 KiB, E3 Qw2 Qa2)")
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _p: f"{v:,.0f}"))
    ax.set_title("Ledger add throughput vs adds in flight (one client)")
    ax.grid(True, alpha=0.3)
    return fig


def window_chart(windows: dict[int, float], path: Path) -> None:
    _save(window_figure(windows), path)


def add_latency_cdf(loads: dict, serial: Sequence[float], path: Path) -> None:  # type: ignore[type-arg]
    _save(add_latency_figure(loads, serial), path)


def add_latency_figure(loads: dict, serial: Sequence[float]):  # type: ignore[no-untyped-def,type-arg]
    """``loads``: fraction of max -> (latencies s, target rate, achieved rate)."""
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    _cdf(ax, serial, "one add alone")
    for frac, (lat, rate, _achieved) in sorted(loads.items()):
        _cdf(ax, lat, f"{frac:.0%} of max ({rate:,.0f}/s)")
    ax.axvline(5.0, color="grey", linestyle=":", label="goal p99 5 ms at 20%")
    ax.axhline(0.99, color="grey", linestyle="--", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("add latency (ms)")
    ax.set_ylabel("fraction of adds")
    ax.set_title("Ledger add latency CDF: one add alone vs paced load")
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    return fig


def _rate(text: str) -> float | None:
    m = re.search(r"([\d,]+) rows/s", text)
    return float(m.group(1).replace(",", "")) if m else None


def spark_bars(rows: Sequence[tuple[str, str, str, str]]) -> list[tuple[str, float, float]]:
    """``(label, bookkeeper rows/s, Parquet rows/s)`` of every "Spark batch read/write" row
    whose value and reference are rows/s and whose reference is Parquet."""
    bars = []
    for what, value, reference, _ratio in rows:
        if what.startswith("Spark batch") and "parquet" in reference:
            v, r = _rate(value), _rate(reference)
            if v is not None and r is not None:
                bars.append((what.replace("Spark batch ", ""), v, r))
    return bars


def spark_figure(bars: Sequence[tuple[str, float, float]]):  # type: ignore[no-untyped-def]
    """Horizontal bars, one pair per measured row: the row's full name (wrapped) on the
    y axis, where long names cannot collide."""
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.75 * len(bars)))
    y = np.arange(len(bars))[::-1]
    ax.barh(y + 0.2, [b[1] for b in bars], 0.4, label="bk-spark log (Python data source)")
    ax.barh(y - 0.2, [b[2] for b in bars], 0.4, label="Parquet, same run")
    ax.set_yticks(y, [textwrap.fill(b[0], 34) for b in bars], fontsize=8)
    ax.set_xlabel("rows/s")
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(
        lambda v, _p: f"{v / 1e6:g} M"))
    ax.set_title("Spark batch read and write rows/s: bk-spark log vs Parquet")
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(True, axis="x", alpha=0.3)
    return fig


def spark_chart(rows: Sequence[tuple[str, str, str, str]], path: Path) -> bool:
    """The Spark comparison's PNG; False when the run measured no such row."""
    bars = spark_bars(rows)
    if not bars:
        return False
    _save(spark_figure(bars), path)
    return True


def tail_latency_cdf(series: dict[str, Sequence[float]], path: Path) -> None:
    _save(tail_latency_figure(series), path)


def tail_latency_figure(series: dict[str, Sequence[float]]):  # type: ignore[no-untyped-def]
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for label, lat in series.items():
        _cdf(ax, lat, label)
    ax.axhline(0.99, color="grey", linestyle="--", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("append -> seen (ms)")
    ax.set_ylabel("fraction of entries")
    ax.set_title("Append-to-seen latency CDF: tailing reader vs Spark streams")
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    return fig


def rss_chart(samples: Sequence[tuple[float, int, int]], path: Path, gb: float) -> None:
    _save(rss_figure(samples, gb), path)


def rss_figure(samples: Sequence[tuple[float, int, int]], gb: float):  # type: ignore[no-untyped-def]
    """``samples``: (seconds, RSS bytes, bytes written)."""
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    ax.plot([s[2] / 1e9 for s in samples], [s[1] / MiB for s in samples])
    ax.axhline(512, color="grey", linestyle=":", label="goal 512 MiB")
    ax.set_xlabel("GB written (1 KiB entries)")
    ax.set_ylabel("bookie RSS (MiB)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"Bookie resident memory while {gb:g} GB are written, vs the goal")
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    return fig


# --------------------------------------------------------------------------- legibility
def label_problems(fig) -> list[str]:  # type: ignore[no-untyped-def]
    """What makes a chart hard to read, measured with matplotlib's text extents after
    drawing: tick labels of one axis that overlap each other, an axis label or title that
    overlaps tick labels, and any text that leaves the image. Empty: legible."""
    fig.tight_layout()  # as _save lays it out
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    page = fig.bbox
    problems: list[str] = []

    def boxes(texts):  # type: ignore[no-untyped-def]
        return [(t.get_text(), t.get_window_extent(renderer)) for t in texts
                if t.get_visible() and t.get_text().strip()]

    def shown(axis):  # type: ignore[no-untyped-def]
        """The major tick labels inside the axis' view (others are not drawn)."""
        lo, hi = sorted(axis.get_view_interval())
        return [t for t, loc in zip(axis.get_ticklabels(), axis.get_majorticklocs(),
                                    strict=False) if lo <= loc <= hi]

    for ax in fig.axes:
        xt, yt = boxes(shown(ax.xaxis)), boxes(shown(ax.yaxis))
        for ticks in (xt, yt):
            for i, (a, ba) in enumerate(ticks):
                for b, bb in ticks[i + 1:]:
                    if ba.overlaps(bb):
                        problems.append(f"tick labels {a!r} and {b!r} overlap")
        named = boxes([ax.title, ax.xaxis.label, ax.yaxis.label])
        for a, ba in named:
            for b, bb in xt + yt:
                if ba.overlaps(bb):
                    problems.append(f"{a!r} overlaps tick label {b!r}")
        legend = ax.get_legend()
        for a, ba in named + xt + yt + (boxes(legend.get_texts()) if legend else []):
            if not (page.x0 - 1 <= ba.x0 and ba.x1 <= page.x1 + 1 and page.y0 - 1 <= ba.y0
                    and ba.y1 <= page.y1 + 1):
                problems.append(f"{a!r} leaves the image")
    return problems


def results_rows(markdown: str) -> list[tuple[str, str, str, str]]:
    """The rows of ``bench/results.md``'s tables (what, value, reference, ratio)."""
    rows = []
    for line in markdown.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 4 and not set(cells[0]) <= {"-", " "}:
            rows.append((cells[0], cells[1], cells[2], cells[3]))
    return rows


def windows_from_rows(rows: Sequence[tuple[str, str, str, str]]) -> dict[int, float]:
    """The in-flight window rows ("ledger add 1 KiB, closed loop, N in flight")."""
    out = {}
    for what, value, _ref, _ratio in rows:
        m = re.search(r"closed loop, (\d+) in flight", what)
        v = re.search(r"([\d,]+) e/s", value)
        if m and v:
            out[int(m.group(1))] = float(v.group(1).replace(",", ""))
    return out


def main() -> None:
    """Redraw the charts whose figures bench/results.md keeps (no benchmark is run)."""
    here = Path(__file__).resolve().parent
    rows = results_rows((here / "results.md").read_text())
    spark_chart(rows, here / "spark_vs_parquet.png")
    windows = windows_from_rows(rows)
    if windows:
        window_chart(windows, here / "throughput_vs_window.png")


if __name__ == "__main__":
    main()
