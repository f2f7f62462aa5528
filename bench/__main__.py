"""`make bench`: each figure beside a reference measured in the same run, as a ratio.

References: the data disk's fdatasync'd append rate (same record size and group size),
raw gRPC round trips between two Python processes, and (for the ledger) one bookie's
own add rate. Results go to stdout and bench/results.md.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path

import grpc

from bk_spark.log import open_log_reader, open_log_writer

ROOT = Path(__file__).resolve().parents[1]
KiB = 1024


class Results:
    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str, str]] = []

    def add(self, what: str, value: str, reference: str, ratio: str) -> None:
        self.rows.append((what, value, reference, ratio))
        print(f"{what:<55} {value:>26}  ref {reference:>26}  {ratio}", flush=True)

    def markdown(self) -> str:
        out = ["| figure | value | reference (same run) | ratio |", "|---|---|---|---|"]
        out += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in self.rows]
        return "\n".join(out) + "\n"


#: Throughput figures that are ratios' terms run this many times, each on fresh processes,
#: and report the median run (this 2-core machine's rates drift by 10-20% between runs).
REPEATS = 3


def median_run(runs: list[tuple]) -> tuple:
    """The run whose first field (the rate) is the median."""
    return sorted(runs, key=lambda r: r[0])[len(runs) // 2]


def spread(runs: list[tuple]) -> str:
    return " / ".join(f"{r[0]:,.0f}" for r in sorted(runs, key=lambda r: r[0]))


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


# ----------------------------------------------------------------------------- references
def disk_append_rate(directory: Path, group: int, record: int = KiB, seconds: float = 1.5,
                     preallocated: bool = False) -> float:
    """Records/s appended (or overwritten in a preallocated file) and fdatasync'd per group."""
    path = directory / f"disk-{group}-{preallocated}.bin"
    size = 256 * 1024 * 1024
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        if preallocated:
            zero = b"\0" * (4 * 1024 * 1024)
            for off in range(0, size, len(zero)):
                os.pwrite(fd, zero, off)
            os.fsync(fd)
        buf = b"r" * (record * group)
        n = 0
        off = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds and off + len(buf) < size:
            os.pwrite(fd, buf, off)
            os.fdatasync(fd)
            off += len(buf)
            n += group
        return n / (time.perf_counter() - t0)
    finally:
        os.close(fd)
        path.unlink()


def grpc_round_trips(seconds: float = 1.5) -> tuple[float, float]:
    """(unary calls/s serial with 1 KiB, MB/s of 1 MiB unary messages) to a trivial server."""
    from bk_spark.sandbox import free_port, stop_pid, wait_for_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "echo_server.py"), str(port)])
    try:
        wait_for_port(port, 20, proc)
        ch = grpc.insecure_channel(f"127.0.0.1:{port}",
                                   [("grpc.max_send_message_length", 64 << 20)])
        echo = ch.unary_unary("/bench.Echo/Echo")
        small, big = b"x" * KiB, b"y" * (1024 * KiB)
        for _ in range(50):
            echo(small)
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            echo(small)
            n += 1
        calls = n / (time.perf_counter() - t0)
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            echo(big)
            n += 1
        mbs = n * len(big) / (time.perf_counter() - t0) / 1e6
        ch.close()
        return calls, mbs
    finally:
        stop_pid(proc.pid)
        proc.wait()


# ----------------------------------------------------------------------------- bookie
class _AddTally:
    """Completions of ``n`` pipelined adds: a window of ``in_flight`` permits, latencies and
    errors (shared by the bookie add figures)."""

    def __init__(self, n: int, in_flight: int) -> None:
        self.n = n
        self.window = threading.Semaphore(in_flight)
        self.lat: list[float] = []
        self.errors: list = []
        self.count = 0
        self.done = threading.Event()
        self._lock = threading.Lock()

    def record(self, entries: int, err, started: float) -> None:  # type: ignore[no-untyped-def]
        now = time.perf_counter()
        self.window.release(entries)
        with self._lock:
            if err is not None:
                self.errors.append(err)
            self.lat.append(now - started)
            self.count += entries
            if self.count >= self.n:
                self.done.set()

    def finish(self) -> None:
        self.done.wait(300)
        if self.errors:
            raise RuntimeError(f"{len(self.errors)} adds failed: {self.errors[0]}")


def bookie_add(bookie_id: str, n: int, size: int = KiB, in_flight: int = 2000
               ) -> tuple[float, float, float, float]:
    """(entries/s, MB/s, p50 ms, p99 ms) of pipelined adds to one bookie.

    The client drives the bookie the way a ledger writer does (entries serialized once,
    shipped with ``send_batch``, two requests of ``in_flight / 2`` in flight), so the figure
    is the bookie's rate, not a slow client's: the reference the ledger figure is compared
    with.
    """
    from bk_spark.io.bookie_client import BookieClient
    from bk_spark.io.entry import EntryCodec
    from bk_spark.protocol.digest import DigestManager

    client = BookieClient(bookie_id)
    codec = EntryCodec(1, DigestManager("crc32c", b""))  # records, as a writer makes them
    tally = _AddTally(n, in_flight)
    data = b"p" * size
    chunk = max(in_flight // 2, 1)

    class Sink:
        def __init__(self, t: float) -> None:
            self.t = t

        def on_added(self, tokens: list, err) -> None:  # type: ignore[no-untyped-def]
            tally.record(len(tokens), err, self.t)

    t0 = time.perf_counter()
    try:
        for first in range(0, n, chunk):
            ids = range(first, min(first + chunk, n))
            for _ in ids:
                tally.window.acquire()
            entries, _ends = codec.frame_run(first, first - 1, 0, [data] * len(ids))
            client.send_batch(1, b"k", entries, list(ids), Sink(time.perf_counter()))
        tally.finish()
    finally:
        client.close()
    dt = time.perf_counter() - t0
    return n / dt, n * size / dt / 1e6, pct(tally.lat, 0.5) * 1e3, pct(tally.lat, 0.99) * 1e3


def lone_adds(bookie_id: str, n: int = 1000) -> list[float]:
    """Seconds of each of ``n`` serial one-entry AddEntries through a bare stub."""
    from bk_spark.proto import bookie_pb2 as pb

    ch = grpc.insecure_channel(bookie_id)
    add = ch.unary_unary("/bkspark.v1.Bookie/AddEntries", request_serializer=None,
                         response_deserializer=pb.AddResponse.FromString)
    payload = b"p" * KiB
    lat = []
    try:
        for i in range(n + 100):
            req = pb.AddRequest(ledger_id=7, master_key=b"k", entries=[pb.Entry(
                ledger_id=7, entry_id=i, lac=i - 1, payload=payload, digest=b"\0" * 12)]
            ).SerializeToString()
            t = time.perf_counter()
            resp = add(req)
            dt = time.perf_counter() - t
            if resp.status != pb.OK:
                raise RuntimeError(resp.message)
            if i >= 100:
                lat.append(dt)
    finally:
        ch.close()
    return lat


def bookie_reads(bookie_id: str, n_entries: int, seconds: float = 1.5) -> tuple[float, float]:
    """(single-entry reads entries/s, batched range reads entries/s) from one bookie."""
    from bk_spark.io.bookie_client import BookieClient

    client = BookieClient(bookie_id)
    try:
        i, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            client.read_entries(1, first_entry=i % n_entries, last_entry=i % n_entries,
                                master_key=b"k")
            i += 1
        single = i / (time.perf_counter() - t0)
        got, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            first = got % (n_entries - 1000)
            resp = client.read_entries(1, first_entry=first, last_entry=first + 999,
                                       master_key=b"k")
            got += len(resp.entries)
        batched = got / (time.perf_counter() - t0)
        return single, batched
    finally:
        client.close()


def ensemble_reads(uri: str, log: str, password: bytes = b"", in_flight: int = 2,
                   packed: bool = False) -> float:
    """Entries/s at which one client process reads every entry of log ``log`` with batched
    ``ReadEntries`` requests striped over each ledger's ensemble, all its bookies in
    parallel: entry ``e`` is asked of the first bookie of its write set (bookie ``e % E``
    of its fragment's ensemble, so each bookie serves a share), :data:`READ_BATCH` ids per
    request, ``in_flight`` requests outstanding per bookie (one thread each). No digest
    check and no decoding: the ensemble's own batched read rate, as :func:`bookie_reads`'
    batched figure is one bookie's (the reference of the Spark raw read). ``packed``: packed
    reads (the stored records at once, ``PACKED_READ_BATCH`` ids per request) instead of
    one ``Entry`` message per entry."""
    from bk_spark.core import BookKeeper
    from bk_spark.datasource.planning import LogView, log_end, walk
    from bk_spark.io import bookie_client
    from bk_spark.protocol.digest import master_key
    from bk_spark.protocol.schedule import write_set

    key = master_key(password)
    with BookKeeper(uri) as bk:
        view = LogView(bk, log)
        queues: dict[str, deque] = {}
        expected = 0
        for _info, s in walk(view, view.earliest(), log_end(view, password), password):
            md = bk.ledger_metadata(s.ledger_id)
            per: dict[str, list[int]] = {}
            for e in range(s.first_entry, s.last_entry + 1):
                b = md.ensemble_for(e)[write_set(e, md.ensemble_size, md.write_quorum_size)[0]]
                per.setdefault(b, []).append(e)
            step = bookie_client.PACKED_READ_BATCH if packed else bookie_client.READ_BATCH
            for b, ids in per.items():
                q = queues.setdefault(b, deque())
                for i in range(0, len(ids), step):
                    q.append((s.ledger_id, ids[i:i + step]))
            expected += s.entries
        clients = {b: bk.bookies.get(b) for b in queues}
        for b, q in queues.items():  # connect every channel before the clock starts
            lid, ids = q[0]
            clients[b].read_entries_future(lid, ids[:1], key).result()
        got: dict[str, int] = {}

        def drain(b: str) -> None:
            client, q, pending, n = clients[b], queues[b], deque(), 0
            read = client.read_records_future if packed else client.read_entries_future
            while q or pending:
                while q and len(pending) < in_flight:
                    lid, ids = q.popleft()
                    pending.append(read(lid, ids, key))
                answer = pending.popleft().result()
                n += len(answer.records) if packed else len(answer.entries)
            got[b] = n

        threads = [threading.Thread(target=drain, args=(b,)) for b in queues]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        dt = time.perf_counter() - t0
    n = sum(got.values())
    assert n == expected, (n, expected)
    return n / dt


# ----------------------------------------------------------------------------- ledger
def ledger_add(uri: str, n: int, size: int = KiB, in_flight: int = 2000, security=None
               ) -> tuple[float, float, float, float, int]:
    """``security``: a ClientSecurity (None: the environment's)."""
    from bk_spark.core import BookKeeper

    with BookKeeper(uri, security=security) as bk:
        lh = bk.create_ledger(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2)
        lat: list[float] = []
        data = b"l" * size
        window: deque = deque()
        t0 = time.perf_counter()
        for i in range(n):
            if len(window) >= in_flight:
                window.popleft().result(300)
            f = lh.add_entry_async(data)
            if i % 64 == 0:  # sample latency without a callback per entry
                t = time.perf_counter()
                f.add_done_callback(lambda _f, t=t: lat.append(time.perf_counter() - t))
            window.append(f)
        for f in window:
            f.result(300)
        dt = time.perf_counter() - t0
        lid = lh.id
        # leave the ledger open: the recovery figure recovers it as after a writer crash
        return n / dt, n * size / dt / 1e6, pct(lat, 0.5) * 1e3, pct(lat, 0.99) * 1e3, lid


#: ZooKeeper operations per log roll on main before issue 28's registration cache (3324f59,
#: counted by the same counter, tests/integration/test_registration_cache.py's roll).
ZK_OPS_PER_ROLL_BEFORE = 13


def log_append(uri: str, n: int, roll_entries: int, size: int = KiB, in_flight: int = 2000
               ) -> tuple[float, int, int, float]:
    """(entries/s, ledgers used, entries of the largest, ZooKeeper operations per roll)
    appending to a log that rolls every ``roll_entries`` (issue 31: the largest must not
    exceed ``roll_entries``). Operations per roll: the client's ZooKeeper operations
    between consecutive rolls' CAS (the spare, the CAS, the close, the end recorded:
    :func:`bk_spark.io.zk.zk_operations`), the median over the rolls."""
    from bk_spark.core import BookKeeper
    from bk_spark.io.zk import zk_operations
    from bk_spark.log.testing import after_roll_cas

    with BookKeeper(uri) as bk:
        name = f"bench-log-{os.getpid()}"  # its own log (runs may share a sandbox)
        at_cas: list[int] = []
        w = after_roll_cas(
            open_log_writer(bk, name, roll_max_entries=roll_entries, password=b"p"),
            lambda _id: at_cas.append(zk_operations(bk.zk).total()))
        data = b"g" * size
        window: deque = deque()
        t0 = time.perf_counter()
        for _ in range(n):
            if len(window) >= in_flight:
                window.popleft().result(300)
            window.append(w.append_async(data))
        last = None
        for f in window:
            last = f.result(300)
        dt = time.perf_counter() - t0
        w.close()
        assert last is not None
        from bk_spark.log import log_ledgers

        ledgers = log_ledgers(bk, name)
        largest = max((i.last_entry_id + 1 for i in ledgers if i.last_entry_id is not None),
                      default=0)
        per_roll = [b - a for a, b in zip(at_cas, at_cas[1:], strict=False)]
        ops = statistics.median(per_roll) if per_roll else float("nan")
        return n / dt, len(ledgers), largest, ops


def tail_latency(uri: str, n: int = 400, interval_s: float = 0.005
                 ) -> tuple[float, float, list[float]]:
    """(p50 ms, p99 ms, every latency in s) from append to the entry seen by a tailing
    reader."""
    from bk_spark.core import BookKeeper

    with BookKeeper(uri) as wbk, BookKeeper(uri) as rbk:
        w = open_log_writer(wbk, "bench-tail")
        w.append(b"0" * 8)
        reader = open_log_reader(rbk, "bench-tail", "earliest")
        lat: list[float] = []

        def consume() -> None:
            seen = 0
            for rec in reader.tail(timeout=10.0):
                if rec.payload != b"0" * 8:
                    lat.append(time.perf_counter() - float(rec.payload.decode()))
                    seen += 1
                if seen >= n:
                    return

        t = threading.Thread(target=consume, daemon=True)
        t.start()
        for _ in range(n):
            w.append_async(repr(time.perf_counter()).encode())
            time.sleep(interval_s)
        t.join(60)
        w.close()
        return pct(lat, 0.5) * 1e3, pct(lat, 0.99) * 1e3, lat


def ledger_recovery(uri: str, ledger_id: int) -> float:
    from bk_spark.core import BookKeeper

    with BookKeeper(uri) as bk:
        t0 = time.perf_counter()
        rh = bk.open_ledger(ledger_id)
        dt = time.perf_counter() - t0
        assert rh.last_add_confirmed >= 0
        return dt


def main() -> None:
    from bk_spark.allocator import tune_allocator
    from bk_spark.sandbox import BookieProcess, Sandbox, free_port

    # Every client of this run, the references' included, with the allocator tuned as a
    # BookKeeper client tunes it (bk_spark/allocator.py).
    tune_allocator()
    quick = "--quick" in sys.argv
    n_adds = 20_000 if quick else 100_000
    # The memory figure's write; the 10 GB take ~2 minutes per GB here: run it
    # alone (python -m bench.memory --memory-gb 10) or pass --memory-gb 10.
    memory_gb = float(sys.argv[sys.argv.index("--memory-gb") + 1]) \
        if "--memory-gb" in sys.argv else (0.3 if quick else 1.0)
    stream_lat: dict[str, list[float]] = {}
    res = Results()
    with tempfile.TemporaryDirectory(prefix="bk-bench-", dir=ROOT) as tmp:
        tmpd = Path(tmp)
        print("== references (this machine, this run)")
        disk = {g: disk_append_rate(tmpd, g) for g in (1, 16, 256)}
        disk_pre = disk_append_rate(tmpd, 256, preallocated=True)
        for g, r in disk.items():
            res.add(f"disk: 1 KiB appends, fdatasync per {g}", f"{r:,.0f} rec/s", "-", "-")
        res.add("disk: 1 KiB overwrites of preallocated file, per 256", f"{disk_pre:,.0f} rec/s",
                f"{disk[256]:,.0f} rec/s (append)", f"{disk_pre / disk[256]:.2f}x")
        calls, mbs = grpc_round_trips()
        res.add("gRPC: raw unary round trips (1 KiB, serial)", f"{calls:,.0f} calls/s", "-", "-")
        res.add("gRPC: raw unary 1 MiB messages", f"{mbs:,.0f} MB/s", "-", "-")

        # The ledger's ratio is to one bookie's own add rate. This machine's rates drift by
        # 10-20% over minutes, so the two are measured in alternation, each run on fresh
        # processes: bookie, ledger, bookie, ledger, ... and the ratio is the median of the
        # pairs' ratios. Nothing else runs meanwhile: each sandbox is stopped before the next
        # reference bookie starts. The last sandbox stays up for the recovery and log figures.
        print(f"== bookie add and ledger add, alternating, {REPEATS} pairs on fresh processes")
        runs: list[tuple] = []
        lruns: list[tuple] = []
        sb = None
        try:
            for rep in range(REPEATS):
                if sb is not None:  # the previous sandbox's bookies would compete (their
                    sb.stop()       # checkpoints and journal preallocation) with this one
                    shutil.rmtree(tmpd / "sandbox", ignore_errors=True)
                    sb = None
                rb = BookieProcess("zk://127.0.0.1:1/unused", tmpd / f"bookie-ref-{rep}",
                                   port=free_port(), extra_args=["--no-register"])
                rb.start()
                try:
                    runs.append(bookie_add(rb.bookie_id, n_adds))
                finally:
                    rb.stop()
                    shutil.rmtree(tmpd / f"bookie-ref-{rep}", ignore_errors=True)
                # --no-offload: the tiered-storage figures run their own offloader (two
                # offloading one ledger at once would take it over from each other)
                sb = Sandbox(tmpd / "sandbox", n_bookies=3, zk_port=free_port(),
                             first_bookie_port=0, bookie_args=["--no-offload"])
                sb.start()
                lruns.append(ledger_add(sb.metadata_service_uri, n_adds))
                bookie_rate, ledger_rate = runs[-1][0], lruns[-1][0]
                print(f"   pair {rep + 1}: bookie {bookie_rate:,.0f} e/s, ledger "
                      f"{ledger_rate:,.0f} e/s, {ledger_rate / bookie_rate:.2f}x", flush=True)
        except BaseException:  # stop what this loop started
            if sb is not None:
                sb.stop()
            raise
        assert sb is not None
        eps, bmbs, p50, p99 = median_run(runs)
        leps, lmbs, lp50, lp99, _ = median_run(lruns)
        lid = lruns[-1][4]  # left open in the sandbox that is still up: recovered below
        ratio = statistics.median(lr[0] / br[0] for lr, br in zip(lruns, runs, strict=True))
        try:
            print("== bookie (one process, fsync on)")
            ceiling = max(disk[256], disk_pre)
            res.add(f"bookie add 1 KiB, 2000 in flight, one client (median of {REPEATS})",
                    f"{eps:,.0f} e/s {bmbs:,.1f} MB/s", f"{ceiling:,.0f} rec/s disk (256/sync)",
                    f"{eps / ceiling:.2f}x")
            res.add("bookie add, the runs (e/s)", spread(runs), "-", "-")
            res.add("bookie add latency p50 / p99", f"{p50:.1f} / {p99:.1f} ms", "-", "-")
            b = BookieProcess("zk://127.0.0.1:1/unused", tmpd / "bookie", port=free_port(),
                              extra_args=["--no-register"])
            b.start()
            try:
                lone = lone_adds(b.bookie_id, 500)
                ref_ms = 1e3 / calls + 1e3 / disk[1]
                res.add("bookie lone add (1 KiB, one at a time, bare stub) p50 / p99",
                        f"{pct(lone, 0.5) * 1e3:.2f} / {pct(lone, 0.99) * 1e3:.2f} ms",
                        f"{ref_ms:.2f} ms raw gRPC round trip + one fdatasync",
                        f"p50 {pct(lone, 0.5) * 1e3 / ref_ms:.2f}x")
                bookie_add(b.bookie_id, n_adds)  # entries for the read figures
                single, batched = bookie_reads(b.bookie_id, n_adds)
                res.add("bookie single-entry reads", f"{single:,.0f} e/s",
                        f"{calls:,.0f} raw gRPC calls/s", f"{single / calls:.2f}x")
                res.add("bookie batched range reads (1000/request)", f"{batched:,.0f} e/s",
                        f"{single:,.0f} e/s single", f"{batched / single:.1f}x")
            finally:
                b.stop()

            print("== ledger (3 sandbox bookies, E=3 Qw=2 Qa=2)")
            res.add(f"ledger add 1 KiB, E3 Qw2 Qa2, 2000 in flight (median of {REPEATS})",
                    f"{leps:,.0f} e/s {lmbs:,.1f} MB/s", f"{eps:,.0f} e/s one bookie",
                    f"{ratio:.2f}x (median of the pairs' ratios)")
            res.add("ledger add, the runs (e/s)", spread(lruns), "-", "-")
            res.add("ledger add latency p50 / p99", f"{lp50:.1f} / {lp99:.1f} ms", "-", "-")
            rec = ledger_recovery(sb.metadata_service_uri, lid)
            res.add(f"recovery open of a {n_adds:,}-entry ledger (writer gone)",
                    f"{rec * 1e3:,.0f} ms", "-", "-")
            print("== log (same sandbox)")
            roll = max(n_adds // 5, 1000)
            geps, nledgers, largest, zk_ops = log_append(sb.metadata_service_uri, n_adds, roll)
            res.add(f"log append 1 KiB, rolling every {roll:,} entries",
                    f"{geps:,.0f} e/s ({nledgers} ledgers, largest {largest:,} entries)",
                    f"{leps:,.0f} e/s one ledger",
                    f"{geps / leps:.2f}x")
            res.add("ZooKeeper operations per log roll (goal <= 4)", f"{zk_ops:g}",
                    f"{ZK_OPS_PER_ROLL_BEFORE} before the registration cache",
                    f"{zk_ops / ZK_OPS_PER_ROLL_BEFORE:.2f}x")
            t50, t99, tail_lat = tail_latency(sb.metadata_service_uri)
            res.add("log tail latency (append -> seen by tailing reader) p50 / p99",
                    f"{t50:.1f} / {t99:.1f} ms", "-", "-")
            print("== ledger add latency under load (same sandbox)")
            from bench.latency import latency_bench

            lat_data = latency_bench(sb.metadata_service_uri, res, 2.0 if quick else 4.0)
            if "--no-spark" not in sys.argv:
                print("== Spark (local[2], same sandbox)")
                from bench.spark_bench import spark_bench

                try:
                    stream_lat = spark_bench(sb.metadata_service_uri, tmpd / "spark", res,
                                             rows=500_000 if quick else 2_000_000,
                                             raw_rows=50_000 if quick else 200_000)
                    print("== tiered storage (offload to Parquet, same sandbox)")
                    from bench.offload_bench import offload_bench

                    offload_bench(sb.metadata_service_uri, tmpd / "offload", res,
                                  rows=500_000 if quick else 2_000_000)
                finally:  # stop Spark's workers (and their clients) before the sandbox
                    from pyspark.sql import SparkSession

                    active = SparkSession.getActiveSession()
                    if active is not None:
                        active.stop()
        finally:
            sb.stop()
        print(f"== bookie memory, {memory_gb:g} GB written to one bookie")
        from bench.memory import memory_bench

        rss_samples = memory_bench(tmpd, res, memory_gb)
        print("== re-replication (AutoRecovery), fresh ZooKeeper + 5 bookies")
        from bench.rereplication import rereplication_bench

        rr = rereplication_bench(20_000 if quick else 100_000, gb=0.2 if quick else 1.0)
        res.add("re-replication of a lost bookie's fragments (1 KiB)",
                f"{rr['rerep_entries_per_s']:,.0f} e/s {rr['rerep_mb_per_s']:,.1f} MB/s",
                f"{rr['add_entries_per_s']:,.0f} e/s ledger add", f"{rr['ratio']:.2f}x")
        res.add("bookie stopped -> zero under-replicated ledgers (delay 0)",
                f"{rr['death_to_zero_s']:.1f} s", "-", "-")
        res.add(f"bookie with {rr['gb_on_bookie']:.2f} GB stopped -> zero under-replicated "
                f"ledgers (delay 0)", f"{rr['gb_death_to_zero_s']:.1f} s",
                f"{rr['gb_mb_per_s']:.0f} MB/s", "-")
        print("== self-repair of a wiped bookie, fresh ZooKeeper + 4 bookies")
        from bench.self_repair_bench import self_repair_bench

        sr = self_repair_bench(2_000 if quick else 10_000, 20_000 if quick else 50_000)
        res.add(f"wiped bookie holding {2_000 if quick else 10_000:,} ledgers back in "
                f"service, limbo marking done (goal <= 5 s)",
                f"{sr['wiped_back_in_service_s']:.2f} s", "5 s",
                f"{sr['wiped_back_in_service_s'] / 5:.2f}x")
        res.add("self-repair copy rate of a wiped bookie (1 KiB) vs re-replication, same "
                "ledger (goal >= 0.8x)", f"{sr['repair_entries_per_s']:,.0f} e/s",
                f"{sr['rerep_entries_per_s']:,.0f} e/s re-replication",
                f"{sr['repair_ratio']:.2f}x")
        if "--no-cluster" not in sys.argv:  # namespaces only; says so otherwise
            print("== beyond one machine: the multi-host test bed (bench/cluster_bench.py)")
            from bench.cluster_bench import cluster_bench

            cluster_bench(res, quick=quick)
        if "--no-tls" not in sys.argv:  # after the sandbox above stopped: nothing competes
            print("== mutual TLS (secure sandbox vs plain sandbox, alternating)")
            from bench.tls_bench import tls_bench

            tls_bench(tmpd / "tls", res, n_adds=n_adds // 2,
                      rows=200_000 if quick else 1_000_000, spark="--no-spark" not in sys.argv)
    md = "# bench results\n\n" + time.strftime("%Y-%m-%d %H:%M") + "\n\n" + res.markdown()
    (ROOT / "bench" / "results.md").write_text(md)
    print("\nwritten bench/results.md")
    from bench import charts

    out = ROOT / "bench"
    charts.window_chart(lat_data["windows"], out / "throughput_vs_window.png")
    charts.add_latency_cdf(lat_data["loads"], lat_data["serial"], out / "add_latency_cdf.png")
    charts.spark_chart(res.rows, out / "spark_vs_parquet.png")
    charts.tail_latency_cdf({"log tailing reader (append every 5 ms)": tail_lat,
                             **{f"Spark stream, {k}": v for k, v in stream_lat.items()}},
                            out / "tail_latency_cdf.png")
    charts.rss_chart(rss_samples, out / "bookie_rss.png", memory_gb)


if __name__ == "__main__":
    main()
