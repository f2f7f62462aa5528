"""Log appends vs ledger adds, A/B on fresh processes (issue 17, point 2).

    flock /tmp/heavy.lock .venv/bin/python -m bench.log_profile --pairs 3 [--spy DIR]

Each pair starts a fresh 3-bookie sandbox and runs ``bench.__main__.ledger_add`` and
``bench.__main__.log_append`` (100k entries of 1 KiB, 2000 in flight, E3 Qw2 Qa2, the log
rolling every 20,000 entries), each in a fresh client process; the order alternates between
pairs (``--base DIR``: each pair also runs the log append of the code in ``DIR``). Each
run prints its rate and the client process's CPU per entry; ``--spy DIR`` also
records each client's measured part with py-spy (raw collapsed stacks, 1000 Hz,
``--nonblocking``, attached by the client to itself) into ``DIR``.

For the measured part each run also prints the CPU per entry of the bookies and ZooKeeper
together (``servers``), how busy the whole machine was (cores, from ``/proc/stat``), and the
add RPCs the client sent (count, entries per RPC): with the client, the bookies and ZooKeeper
on 2 cores, a path's rate is the machine's CPU divided by the CPU per entry of all of them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _ticks(pids: list[int]) -> int:
    """utime + stime of ``pids`` (clock ticks; every thread of each)."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total


def _all_ticks() -> dict[int, tuple[str, int]]:
    """{pid: (command, utime + stime)} of every process now."""
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    head, rest = f.read().rsplit(")", 1)
                fields = rest.split()
                out[int(d)] = (head.split("(", 1)[1], int(fields[11]) + int(fields[12]))
            except (OSError, IndexError):
                pass
    return out


def _others(before: dict[int, tuple[str, int]], after: dict[int, tuple[str, int]],
            mine: set[int], seconds: float) -> str:
    """The other processes that used the most CPU meanwhile (cores), e.g. another bench."""
    hz = os.sysconf("SC_CLK_TCK")
    used = sorted(((t - before.get(pid, (c, 0))[1], c, pid) for pid, (c, t) in after.items()
                   if pid not in mine), reverse=True)
    return ",".join(f"{c}:{pid}:{d / hz / seconds:.2f}" for d, c, pid in used[:3] if d > 0)


def _thread_ticks() -> dict[str, int]:
    """{thread name: utime + stime ticks} of this process's live Python threads."""
    import threading

    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, int] = {}
    for tid, name in names.items():
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[name] = int(fields[11]) + int(fields[12])
    return out


def _machine_iowait() -> int:
    """iowait clock ticks of the whole machine since boot."""
    with open("/proc/stat") as f:
        return int(f.readline().split()[5])


def _zk_received(port: int) -> int:
    """Packets ZooKeeper received so far, from every client (its ``srvr`` command)."""
    import socket

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
            sock.sendall(b"srvr")
            data = b""
            while chunk := sock.recv(4096):
                data += chunk
    except OSError:
        return -1
    for line in data.decode(errors="replace").splitlines():
        if line.startswith("Received:"):
            return int(line.split()[1])
    return -1


def _machine_busy() -> tuple[int, int]:
    """(busy, all) clock ticks of the whole machine since boot."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v) - v[3] - v[4], sum(v)


def _count_rpcs() -> list[int]:
    """Count the add RPCs and the entries they carry (wraps ``BookieClient.send_batch``)."""
    from bk_spark.io import bookie_client

    counts = [0, 0]
    send_batch = bookie_client.BookieClient.send_batch

    def counted(self, ledger_id, master_key, entries, *args, **kwargs):  # type: ignore[no-untyped-def]
        cfg = self.config
        counts[0] += len(bookie_client._chunk_ends(entries, cfg.max_batch_entries,
                                                   cfg.max_batch_bytes))
        counts[1] += len(entries)
        return send_batch(self, ledger_id, master_key, entries, *args, **kwargs)

    bookie_client.BookieClient.send_batch = counted  # type: ignore[method-assign]
    return counts


def ledgers_add(uri: str, n: int, every: int, size: int = 1024, in_flight: int = 2000
                ) -> float:
    """Ledger adds like ``ledger_add``, on a fresh ledger every ``every`` adds (created ahead,
    the previous one closed in the background): the cost of many ledgers without a log."""
    import threading
    from collections import deque

    from bk_spark.core import BookKeeper

    with BookKeeper(uri) as bk:
        def create():  # type: ignore[no-untyped-def]
            return bk.create_ledger(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2)

        lh, nxt = create(), create()
        data = b"l" * size
        window: deque = deque()
        closers = []
        t0 = time.perf_counter()
        for i in range(n):
            if i and i % every == 0:
                prev, lh = lh, nxt
                closer = threading.Thread(target=prev.close)
                closer.start()
                closers.append(closer)
                nxt = create()
            if len(window) >= in_flight:
                window.popleft().result(300)
            window.append(lh.add_entry_async(data))
        for f in window:
            f.result(300)
        dt = time.perf_counter() - t0
        for c in closers:
            c.join()
        return n / dt


def _gc_timer() -> dict[int, list[float]]:
    """{generation: [collections, seconds]} of the cyclic GC from now on."""
    import gc

    stats: dict[int, list[float]] = {0: [0, 0.0], 1: [0, 0.0], 2: [0, 0.0]}
    started = [0.0]

    def callback(phase: str, info: dict) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            s = stats[info["generation"]]
            s[0] += 1
            s[1] += time.perf_counter() - started[0]

    gc.callbacks.append(callback)
    return stats


def _count_zk() -> dict[str, int]:
    """Count the ZooKeeper requests the client sends, by type (wraps kazoo's ``_call``)."""
    import kazoo.client

    counts: dict[str, int] = {}
    call = kazoo.client.KazooClient._call

    def counted(self, request, async_object):  # type: ignore[no-untyped-def]
        name = type(request).__name__
        counts[name] = counts.get(name, 0) + 1
        return call(self, request, async_object)

    kazoo.client.KazooClient._call = counted  # type: ignore[method-assign]
    return counts


def _timeline(server_pids: list[int]) -> tuple[dict, Callable[[], None]]:
    """Sample, every 50 ms, the entries acknowledged so far (the LAC + 1 of every ledger
    the client created) and the servers' CPU ticks; time each roll step of a log writer
    (the spare's creation, the listing CAS, the switch, the previous ledger's close).
    Returns (the record, stop)."""
    import threading

    from bk_spark.core.client import BookKeeper
    from bk_spark.core.ledger import LedgerHandle
    from bk_spark.log.roller import Roller
    from bk_spark.log.writer import LogWriter

    rec: dict = {"samples": [], "steps": [], "t0": time.perf_counter()}
    handles: list = []
    create = BookKeeper.create_ledger

    def created(self, *a, **kw):  # type: ignore[no-untyped-def]
        lh = create(self, *a, **kw)
        handles.append(lh)
        return lh

    BookKeeper.create_ledger = created  # type: ignore[method-assign]

    def timed(cls: type, name: str) -> None:
        f = getattr(cls, name)

        def wrapper(*a, **kw):  # type: ignore[no-untyped-def]
            t = time.perf_counter()
            try:
                return f(*a, **kw)
            finally:
                rec["steps"].append((name, t - rec["t0"], time.perf_counter() - t))

        setattr(cls, name, wrapper)

    from bk_spark.protocol.roll_policy import LedgerAssignment, Placement

    append, switch = LedgerAssignment.append, LedgerAssignment.switch

    def appended(self, size, item):  # type: ignore[no-untyped-def]
        where = append(self, size, item)
        if where is Placement.ROLL_BEFORE and len(self.waiting) == 1:
            rec["steps"].append(("first_waiting", time.perf_counter() - rec["t0"], 0.0))
        return where

    def switched(self):  # type: ignore[no-untyped-def]
        rec["steps"].append((f"switch[{len(self.waiting)}]", time.perf_counter() - rec["t0"],
                             0.0))
        return switch(self)

    LedgerAssignment.append, LedgerAssignment.switch = appended, switched  # type: ignore
    from kazoo.client import KazooClient

    from bk_spark.io.metadata_store import LedgerMetadataStore

    for cls, name in ((Roller, "_prepare_spare"), (LogWriter, "_list_next_locked"),
                      (LogWriter, "_switch_to_listed"), (LedgerHandle, "close"),
                      (LogWriter, "_record_description"), (LogWriter, "_cas_add_ledger"),
                      (LedgerMetadataStore, "reserve_id"), (KazooClient, "ensure_path"),
                      (LogWriter, "_switch_locked")):
        timed(cls, name)
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.05):
            acked = sum(lh.last_add_confirmed + 1 for lh in list(handles))
            rec["samples"].append((time.perf_counter() - rec["t0"], acked,
                                   _ticks(server_pids)))

    threading.Thread(target=sample, daemon=True, name="bench-timeline").start()
    return rec, stop.set


def _print_timeline(rec: dict, n: int) -> None:
    """The rate per 250 ms ($BK_TIMELINE_STEP samples of 50 ms), the servers' cores then,
    and the roll steps (ms)."""
    hz = os.sysconf("SC_CLK_TCK")
    samples = rec["samples"]
    start = next((i for i, s in enumerate(samples) if s[1] > 0), 0)
    rows = []
    if start > 1:  # before the first acknowledgement: opening the client, the writer
        (t0, _, c0), (t1, _, c1) = samples[0], samples[start - 1]
        rows.append(f"pre{t1 - t0:.2f}s:servers{(c1 - c0) / hz / max(t1 - t0, 1e-9):.1f}")
    step = int(os.environ.get("BK_TIMELINE_STEP", "5"))  # samples (50 ms) per row
    for i in range(max(start - 1, 0), len(samples) - step, step):
        (t0, a0, c0), (t1, a1, c1) = samples[i], samples[i + step]
        rows.append(f"{t0:.2f}:{(a1 - a0) / (t1 - t0) / 1e3:.0f}k/{(c1 - c0) / hz / (t1 - t0):.1f}")
        if a1 >= n:
            break
    print("TIMELINE " + " ".join(rows), flush=True)
    print("STEPS " + " ".join(f"{name.strip('_')}@{t:.2f}+{d * 1e3:.0f}ms"
                              for name, t, d in rec["steps"]), flush=True)


def child(kind: str, uri: str, n: int, roll: int, spy: str, server_pids: list[int]) -> None:
    import signal

    zk_port = int(uri.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])

    from bench.__main__ import ledger_add, log_append
    from bk_spark.allocator import tune_allocator

    tune_allocator()
    timeline, stop_timeline = _timeline(server_pids)
    rpcs = _count_rpcs()
    zk = _count_zk()
    recorder = None
    if spy:  # py-spy attached to this process for the measured part only
        recorder = subprocess.Popen(
            [str(Path(sys.executable).parent / "py-spy"), "record", "--nonblocking",
             "--threads", "--format", "raw", "--rate", "1000", "-o", spy,
             "--pid", str(os.getpid())], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
    zk0 = dict(zk)
    received0 = _zk_received(zk_port)
    p0 = _all_ticks()
    gcs = _gc_timer()
    th0 = _thread_ticks()
    z0, w0 = _ticks(server_pids[:1]), _machine_iowait()
    t0, c0, s0, m0 = time.perf_counter(), os.times(), _ticks(server_pids), _machine_busy()
    extra = ""
    if kind in ("ledger", "ledgeragain"):
        rate = ledger_add(uri, n)[0]
    elif kind == "ledgers":
        rate = ledgers_add(uri, n, roll)
    elif kind == "lognoroll":
        rate = log_append(uri, n, 1 << 40)[0]
    elif kind == "logagain":  # the log append again, on a ZooKeeper warmed by a first one
        rate, nledgers, largest = log_append(uri, n, roll)[:3]
        extra = f" ({nledgers} ledgers, largest {largest})"
    else:
        rate, nledgers, largest = log_append(uri, n, roll)[:3]
        extra = f" ({nledgers} ledgers, largest {largest})"
    c1, wall = os.times(), time.perf_counter() - t0
    stop_timeline()
    _print_timeline(timeline, n)
    s1, m1 = _ticks(server_pids), _machine_busy()
    z1, w1 = _ticks(server_pids[:1]), _machine_iowait()
    th1 = _thread_ticks()
    zk_ops = {k: v - zk0.get(k, 0) for k, v in zk.items() if v > zk0.get(k, 0)}
    zk_ops["ZooKeeper received (all clients)"] = _zk_received(zk_port) - received0
    mine = {os.getpid(), *server_pids, *([recorder.pid] if recorder is not None else [])}
    others = _others(p0, _all_ticks(), mine, wall)
    if recorder is not None:
        recorder.send_signal(signal.SIGINT)
        recorder.wait(30)
    cpu = (c1.user - c0.user) + (c1.system - c0.system)
    hz = os.sysconf("SC_CLK_TCK")
    servers = (s1 - s0) / hz
    busy = (m1[0] - m0[0]) / (m1[1] - m0[1]) * (os.cpu_count() or 1)
    print(f"RESULT {kind} {rate:.0f} {cpu / n * 1e6:.1f} {cpu / wall:.2f} "
          f"{servers / n * 1e6:.1f} {busy:.2f} {rpcs[0]} {rpcs[1] / max(1, rpcs[0]):.0f}"
          f"{extra}", flush=True)
    print(f"OTHERS {others}", flush=True)
    iowait = (w1 - w0) / (m1[1] - m0[1]) * (os.cpu_count() or 1)
    print(f"ZKCPU {(z1 - z0) / hz / n * 1e6:.2f} {iowait:.2f}", flush=True)
    print("ZK " + ", ".join(f"{k}:{v}" for k, v in sorted(zk_ops.items())), flush=True)
    hz = os.sysconf("SC_CLK_TCK")
    threads = sorted(((t - th0.get(name, 0), name) for name, t in th1.items()), reverse=True)
    print("THREADS " + " ".join(f"{name.replace(' ', '_')}:{t / hz / n * 1e6:.2f}us"
                                for t, name in threads[:6] if t > 0), flush=True)
    print("GC " + " ".join(f"gen{g}:{c:.0f}/{t * 1e3:.0f}ms" for g, (c, t) in gcs.items()),
          flush=True)


Run = tuple[float, float, float, float, float, int, int]


def run_child(kind: str, uri: str, n: int, roll: int, spy: Path | None, tag: str,
              server_pids: list[int], root: Path = ROOT) -> Run:
    """(entries/s, client us CPU/entry, client cores, servers us CPU/entry, machine busy
    cores, add RPCs, entries per RPC) of one run in a fresh process."""
    out_file = ""
    if spy is not None:
        spy.mkdir(parents=True, exist_ok=True)
        out_file = str(spy / f"{tag}-{kind}.txt")
    cmd = [sys.executable, "-m", "bench.log_profile", "--child", kind, uri, str(n), str(roll),
           out_file, ",".join(map(str, server_pids))]
    env = {**os.environ, "PYTHONPATH": str(root)}  # the code of ``root`` (--base: the old)
    done = subprocess.run(cmd, cwd=root, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{kind} run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    out = done.stdout
    line = next(x for x in out.splitlines() if x.startswith("RESULT"))
    others = next((x for x in out.splitlines() if x.startswith("OTHERS")), "OTHERS")
    gcs = next((x for x in out.splitlines() if x.startswith("GC ")), "")
    threads = next((x for x in out.splitlines() if x.startswith("THREADS ")), "")
    print(f"  ({kind}: {gcs}; live threads' CPU per entry: {threads[8:]})", flush=True)
    for prefix in ("TIMELINE ", "STEPS "):
        got = next((x for x in out.splitlines() if x.startswith(prefix)), "")
        if got:
            print(f"  ({kind}: {got})", flush=True)
    zk = next((x for x in out.splitlines() if x.startswith("ZK ")), "")
    zkcpu = next((x for x in out.splitlines() if x.startswith("ZKCPU ")), "ZKCPU ? ?").split()
    print(f"  ({kind}: ZooKeeper requests: {zk[3:]}; ZooKeeper's CPU {zkcpu[1]} us/entry (in "
          f"servers); iowait {zkcpu[2]} cores)", flush=True)
    if others.split()[1:]:
        print(f"  ({kind}: other processes meanwhile, cores: {others.split()[1]})", flush=True)
    if " (" in line:  # the log's ledgers: how many, and the entries of the largest
        print(f"  ({kind}: {line.split(' (', 1)[1]}", flush=True)
    f = line.split()[2:9]
    return (float(f[0]), float(f[1]), float(f[2]), float(f[3]), float(f[4]), int(f[5]),
            int(f[6]))


def describe(name: str, r: Run) -> str:
    return (f"{name} {r[0]:,.0f} e/s (client {r[1]:.1f} us/entry, {r[2]:.2f} cores; servers "
            f"{r[3]:.1f} us/entry; machine {r[4]:.2f} cores busy; {r[5]} RPCs of {r[6]})")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--roll", type=int, default=20_000)
    p.add_argument("--spy", type=Path, default=None)
    p.add_argument("--child", nargs=6, default=None)
    p.add_argument("--extra", default="",
                   help="more kinds per pair, comma-separated: ledgers (ledger adds on a "
                        "fresh ledger every --roll adds), lognoroll (log appends, no rolling), "
                        "logagain / ledgeragain (the log append / ledger add again, after "
                        "the others)")
    p.add_argument("--base", type=Path, default=None,
                   help="a checkout of the code before (e.g. a worktree of main, with this "
                        "file copied into its bench/): each pair also runs its log append")
    a = p.parse_args()
    if a.child:
        kind, uri, n, roll, spy, pids = a.child
        child(kind, uri, int(n), int(roll), spy, [int(x) for x in pids.split(",") if x])
        return
    from bk_spark.sandbox import Sandbox, free_port

    ratios, base_ratios = [], []
    for rep in range(a.pairs):
        with tempfile.TemporaryDirectory(prefix="bk-logprof-", dir=ROOT) as tmp:
            sb = Sandbox(Path(tmp) / "sandbox", n_bookies=3, zk_port=free_port(),
                         first_bookie_port=0)
            state = sb.start()
            server_pids = [state.zk_pid, *(int(b["pid"]) for b in state.bookies)]
            try:
                order = ("ledger", "log") if rep % 2 == 0 else ("log", "ledger")
                if a.base is not None:
                    order = (*order, "base") if rep % 2 == 0 else ("base", *order)
                extra = tuple(k for k in a.extra.split(",") if k)
                order = (*order, *extra) if rep % 2 == 0 else (*extra[::-1], *order)
                # ...again: after the others, in the same sandbox
                order = (*(k for k in order if not k.endswith("again")),
                         *(k for k in order if k.endswith("again")))
                got = {k: run_child("log" if k == "base" else k, sb.metadata_service_uri,
                                    a.n, a.roll, a.spy, f"pair{rep + 1}-{k}", server_pids,
                                    a.base if k == "base" else ROOT) for k in order}
            finally:
                sb.stop()
                shutil.rmtree(Path(tmp) / "sandbox", ignore_errors=True)
        lr, gr = got["ledger"][0], got["log"][0]
        ratios.append(gr / lr)
        print(f"pair {rep + 1} ({' then '.join(order)}): log / ledger {gr / lr:.2f}x",
              flush=True)
        print("  " + describe("ledger", got["ledger"]))
        print("  " + describe("log", got["log"]))
        if "base" in got:
            br = got["base"][0]
            base_ratios.append(br / lr)
            print("  " + describe(f"base log ({br / lr:.2f}x)", got["base"]), flush=True)
        for k in got:
            if k not in ("ledger", "log", "base"):
                print("  " + describe(f"{k} ({got[k][0] / lr:.2f}x)", got[k]), flush=True)
    print(f"median ratio {statistics.median(ratios):.2f}x "
          f"(runs {' '.join(f'{r:.2f}' for r in ratios)})")
    if base_ratios:
        print(f"base median ratio {statistics.median(base_ratios):.2f}x "
              f"(runs {' '.join(f'{r:.2f}' for r in base_ratios)})")


if __name__ == "__main__":
    main()
