"""The bookie's add path alone (issue 28, §1 and §3): throughput, lone-add latency, CPU.

    python -m bench.bookie_path [--runs 3] [--n 100000] [--spy DIR]

Each run starts a fresh bookie process (no ZooKeeper) and measures, beside same-run
references:

* ``bookie add 1 KiB, 2000 in flight``: :func:`bench.__main__.bookie_add` (the `make bench`
  figure) against the disk's batched append rate (256 records per fdatasync, the better of
  appending and overwriting a preallocated file, as `make bench` compares), the bookie's
  and the client's CPU per entry from ``/proc/<pid>/stat``;
* a lone add: serial ``AddEntries`` of one 1 KiB entry through a bare gRPC stub (no
  BookieClient: the bookie's share of a lone add), p50 / p99, against one raw gRPC unary
  round trip (``bench/echo_server.py``) plus one fdatasync of a 1 KiB overwrite of a
  preallocated file (what a journal sync costs);
* ``--spy DIR``: a py-spy record (``--threads``) of the bookie during the throughput run.
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
from pathlib import Path

import grpc

from bench.__main__ import ROOT, KiB, bookie_add, disk_append_rate, lone_adds, pct


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fdatasync_p50(directory: Path, n: int = 300) -> float:
    """Seconds of one 1 KiB overwrite + fdatasync of a preallocated file (median)."""
    path = directory / "sync.bin"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.pwrite(fd, b"\0" * (4 << 20), 0)
        os.fsync(fd)
        rec = b"r" * KiB
        lat = []
        for i in range(n):
            t = time.perf_counter()
            os.pwrite(fd, rec, (i * KiB) % (4 << 20))
            os.fdatasync(fd)
            lat.append(time.perf_counter() - t)
        return statistics.median(lat)
    finally:
        os.close(fd)
        path.unlink()


def echo_p50(n: int = 1000) -> float:
    """Seconds of one raw unary gRPC round trip with 1 KiB (median), serial."""
    from bk_spark.sandbox import free_port, stop_pid, wait_for_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "echo_server.py"), str(port)])
    try:
        wait_for_port(port, 20, proc)
        ch = grpc.insecure_channel(f"127.0.0.1:{port}")
        echo = ch.unary_unary("/bench.Echo/Echo")
        small = b"x" * KiB
        for _ in range(100):
            echo(small)
        lat = []
        for _ in range(n):
            t = time.perf_counter()
            echo(small)
            lat.append(time.perf_counter() - t)
        ch.close()
        return statistics.median(lat)
    finally:
        stop_pid(proc.pid)
        proc.wait()


def one_run(tmp: Path, n: int, spy: Path | None, rep: int) -> dict:
    from bk_spark.sandbox import BookieProcess, free_port

    b = BookieProcess("zk://127.0.0.1:1/unused", tmp / f"bookie-{rep}", port=free_port(),
                      extra_args=["--no-register"])
    b.start()
    out: dict = {}
    try:
        assert b.pid is not None
        lat = lone_adds(b.bookie_id)
        out["lone_p50"], out["lone_p99"] = pct(lat, 0.5), pct(lat, 0.99)
        spy_proc = None
        if spy is not None:
            spy.mkdir(parents=True, exist_ok=True)
            spy_proc = subprocess.Popen(
                [os.environ.get("PYSPY", "py-spy"), "record", "--threads", "--nonblocking",
                 "-r", "200", "-f", "raw", "-o", str(spy / f"bookie-{rep}.txt"),
                 "--pid", str(b.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.0)
        cpu0, mine0 = proc_cpu_s(b.pid), proc_cpu_s(os.getpid())
        eps, _mbs, p50, p99 = bookie_add(b.bookie_id, n)
        out["cpu_us"] = (proc_cpu_s(b.pid) - cpu0) / n * 1e6
        out["client_us"] = (proc_cpu_s(os.getpid()) - mine0) / n * 1e6
        out["eps"], out["p50"], out["p99"] = eps, p50, p99
        if spy_proc is not None:
            spy_proc.send_signal(2)
            spy_proc.wait(30)
    finally:
        b.stop()
        shutil.rmtree(tmp / f"bookie-{rep}", ignore_errors=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--spy", type=Path)
    args = ap.parse_args()
    from bk_spark.allocator import tune_allocator

    tune_allocator()
    with tempfile.TemporaryDirectory(prefix="bk-bpath-", dir=ROOT) as tmpd:
        tmp = Path(tmpd)
        sync = fdatasync_p50(tmp)
        rt = echo_p50()
        disk = max(disk_append_rate(tmp, 256), disk_append_rate(tmp, 256, preallocated=True))
        print(f"reference: raw gRPC round trip p50 {rt * 1e3:.3f} ms, 1 KiB fdatasync p50 "
              f"{sync * 1e3:.3f} ms, sum {(rt + sync) * 1e3:.3f} ms; disk 1 KiB records "
              f"256/fdatasync {disk:,.0f} rec/s (make bench's reference)", flush=True)
        for rep in range(args.runs):
            r = one_run(tmp, args.n, args.spy, rep)
            print(f"run {rep + 1}: bookie add 1 KiB 2000 in flight {r['eps']:,.0f} e/s "
                  f"= {r['eps'] / disk:.2f}x disk "
                  f"(p50 {r['p50']:.1f} / p99 {r['p99']:.1f} ms), bookie CPU "
                  f"{r['cpu_us']:.2f} us/entry (client {r['client_us']:.2f}); lone add p50 "
                  f"{r['lone_p50'] * 1e3:.3f} / "
                  f"p99 {r['lone_p99'] * 1e3:.3f} ms = {r['lone_p50'] / (rt + sync):.2f}x "
                  f"(round trip + fdatasync)", flush=True)


if __name__ == "__main__":
    main()
