"""Bookie memory under a long write, for ``make bench`` (issue 17: memory bounded).

One bookie process takes ``--memory-gb`` GB of 1 KiB entries (pipelined, as a ledger
writer drives it: 2,000 in flight, a new ledger every million entries) while its resident
set (``VmRSS``) is sampled every half second. Figures: the RSS at the end and its peak
against the 512 MiB goal, and its growth over the second half of the run (flat: close to
0) against the RSS at half-way.

What bounds it (bookie_server docstrings): the journal queue (a group is at most
``journal_max_group_bytes``, requests wait while it syncs), the write path holds a group's
bytes until they are in the entry log (no write cache: entry logs are written at apply
time and fsync'd at checkpoints), the index costs 12 bytes per entry
(:class:`bookie_server.index.EntryIndex`), reads hold at most ``max_bytes`` of one request
per call; the client keeps ``max_in_flight`` requests of at most ``max_batch_bytes`` each.

Run alone: ``python -m bench.memory --memory-gb 10`` (about two minutes per GB here).
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from pathlib import Path

KiB = 1024
MiB = 1024 * 1024
GOAL_RSS_MIB = 512
ENTRIES_PER_LEDGER = 1_000_000


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


class RssSampler:
    """(seconds since start, RSS bytes, bytes written so far) every ``period_s``."""

    def __init__(self, pid: int, written: list[int], period_s: float = 0.5) -> None:
        self.samples: list[tuple[float, int, int]] = []
        self._pid, self._written, self._period = pid, written, period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._t0 = time.perf_counter()

    def _run(self) -> None:
        while True:
            self.samples.append((time.perf_counter() - self._t0, rss_bytes(self._pid),
                                 self._written[0]))
            if self._stop.wait(self._period):
                return

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append((time.perf_counter() - self._t0, rss_bytes(self._pid),
                             self._written[0]))


def write_gb(bookie_id: str, nbytes: int, size: int = KiB, in_flight: int = 2000,
             written: list[int] | None = None) -> float:
    """Write ``nbytes`` of ``size``-byte entries to one bookie; returns entries/s."""
    from bk_spark.io.bookie_client import BookieClient, frame_entry
    from bk_spark.proto import bookie_pb2 as pb

    written = written if written is not None else [0]
    client = BookieClient(bookie_id)
    n = nbytes // size
    window = threading.Semaphore(in_flight)
    errors: list = []
    done = threading.Event()
    count = [0]
    lock = threading.Lock()
    data = b"m" * size

    class Sink:
        def on_added(self, tokens: list, err) -> None:  # type: ignore[no-untyped-def]
            window.release(len(tokens))
            with lock:
                if err is not None:
                    errors.append(err)
                count[0] += len(tokens)
                written[0] = count[0] * size
                if count[0] >= n:
                    done.set()

    sink = Sink()
    chunk = 1000  # divides ENTRIES_PER_LEDGER: no request spans two ledgers
    t0 = time.perf_counter()
    try:
        for first in range(0, n, chunk):
            last = min(first + chunk, n)
            for _ in range(last - first):
                window.acquire()
            lid = 1 + first // ENTRIES_PER_LEDGER
            base = (lid - 1) * ENTRIES_PER_LEDGER
            ids = range(first - base, last - base)
            entries = [frame_entry(pb.Entry(ledger_id=lid, entry_id=i, lac=i - 1,
                                            payload=data, digest=b"\0" * 12)
                                   .SerializeToString()) for i in ids]
            client.send_batch(lid, b"k", entries, list(ids), sink)
            if errors:
                raise RuntimeError(f"adds failed: {errors[0]}")
        if not done.wait(600):
            raise RuntimeError(f"only {count[0]} of {n} adds acknowledged")
    finally:
        client.close()
    return n / (time.perf_counter() - t0)


def memory_bench(tmpdir: Path, results, gb: float) -> list[tuple[float, int, int]]:  # type: ignore[no-untyped-def]
    """Record the RSS figures into ``results``; returns the samples (for the chart)."""
    from bk_spark.sandbox import BookieProcess, free_port

    b = BookieProcess("zk://127.0.0.1:1/unused", Path(tmpdir) / "bookie-mem",
                      port=free_port(), extra_args=["--no-register"])
    b.start()
    try:
        assert b.proc is not None
        pid = b.proc.pid
        idle = rss_bytes(pid)
        written = [0]
        with RssSampler(pid, written) as sampler:
            rate = write_gb(b.bookie_id, int(gb * 1e9), written=written)
        samples = sampler.samples
    finally:
        b.stop()
    end = samples[-1][1]
    peak = max(s[1] for s in samples)
    half = min(samples, key=lambda s: abs(s[2] - samples[-1][2] / 2))[1]
    label = f"{gb:g} GB" + ("" if gb >= 10 else " (make bench default; 10 GB: --memory-gb 10)")
    results.add(f"bookie RSS after {label} of 1 KiB entries, end / peak",
                f"{end / MiB:,.0f} / {peak / MiB:,.0f} MiB",
                f"{GOAL_RSS_MIB} MiB goal (idle {idle / MiB:,.0f} MiB)",
                f"{peak / MiB / GOAL_RSS_MIB:.2f}x")
    results.add("bookie RSS growth over the second half of that write",
                f"{(end - half) / MiB:+,.0f} MiB", f"{half / MiB:,.0f} MiB at half-way",
                f"{(end - half) / half:+.2f}x")
    results.add("bookie add rate during that write", f"{rate:,.0f} e/s", "-", "-")
    return samples


class _Print:
    def add(self, what: str, value: str, reference: str, ratio: str) -> None:
        print(f"{what:<55} {value:>26}  ref {reference:>30}  {ratio}", flush=True)


def main() -> None:
    from bk_spark.allocator import tune_allocator

    tune_allocator()
    gb = float(sys.argv[sys.argv.index("--memory-gb") + 1]) if "--memory-gb" in sys.argv \
        else 1.0
    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="bk-mem-", dir=root) as tmp:
        samples = memory_bench(Path(tmp), _Print(), gb)
    if "--charts" in sys.argv:
        from bench.charts import rss_chart

        rss_chart(samples, Path(__file__).resolve().parent / "bookie_rss.png", gb)


if __name__ == "__main__":
    main()
