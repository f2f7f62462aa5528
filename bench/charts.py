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
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
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


def window_chart(windows: dict[int, float], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 3.6))
    xs = sorted(windows)
    ax.plot(xs, [windows[x] for x in xs], marker="o")
    ax.set_xscale("log")
    ax.set_xlabel("adds in flight (closed loop)")
    ax.set_ylabel("ledger adds/s (1 KiB, E3 Qw2 Qa2)")
    ax.set_title("Throughput vs in-flight window")
    ax.grid(True, alpha=0.3)
    _save(fig, path)


def add_latency_cdf(loads: dict, serial: Sequence[float], path: Path) -> None:  # type: ignore[type-arg]
    """``loads``: fraction of max -> (latencies s, target rate, achieved rate)."""
    fig, ax = plt.subplots(figsize=(6, 3.6))
    _cdf(ax, serial, "one add alone")
    for frac, (lat, rate, _achieved) in sorted(loads.items()):
        _cdf(ax, lat, f"{frac:.0%} of max ({rate:,.0f}/s)")
    ax.axvline(5.0, color="grey", linestyle=":", label="goal p99 5 ms at 20%")
    ax.axhline(0.99, color="grey", linestyle="--", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("add latency (ms)")
    ax.set_ylabel("fraction of adds")
    ax.set_title("Ledger add latency CDF (paced, open loop)")
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    _save(fig, path)


def _rate(text: str) -> float | None:
    m = re.search(r"([\d,]+) rows/s", text)
    return float(m.group(1).replace(",", "")) if m else None


def spark_chart(rows: Sequence[tuple[str, str, str, str]], path: Path) -> bool:
    """Bars of every "Spark batch read/write" row whose value and reference are rows/s and
    whose reference is Parquet; False when the run had none."""
    bars = []
    for what, value, reference, _ratio in rows:
        if what.startswith("Spark batch") and "parquet" in reference:
            v, r = _rate(value), _rate(reference)
            if v is not None and r is not None:
                bars.append((what.replace("Spark batch ", "").split(" (")[0], v, r))
    if not bars:
        return False
    fig, ax = plt.subplots(figsize=(6, 3.6))
    x = np.arange(len(bars))
    ax.bar(x - 0.2, [b[1] for b in bars], 0.4, label="bookkeeper")
    ax.bar(x + 0.2, [b[2] for b in bars], 0.4, label="Parquet (same run)")
    ax.set_xticks(x, [b[0] for b in bars], fontsize=8)
    ax.set_ylabel("rows/s")
    ax.set_title("Spark batch read / write vs Parquet")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    _save(fig, path)
    return True


def tail_latency_cdf(series: dict[str, Sequence[float]], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for label, lat in series.items():
        _cdf(ax, lat, label)
    ax.axhline(0.99, color="grey", linestyle="--", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("append -> seen (ms)")
    ax.set_ylabel("fraction of entries")
    ax.set_title("Tail latency CDF")
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    _save(fig, path)


def rss_chart(samples: Sequence[tuple[float, int, int]], path: Path, gb: float) -> None:
    """``samples``: (seconds, RSS bytes, bytes written)."""
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.plot([s[2] / 1e9 for s in samples], [s[1] / MiB for s in samples])
    ax.axhline(512, color="grey", linestyle=":", label="goal 512 MiB")
    ax.set_xlabel("GB written (1 KiB entries)")
    ax.set_ylabel("bookie RSS (MiB)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"Bookie RSS while {gb:g} GB are written")
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    _save(fig, path)
