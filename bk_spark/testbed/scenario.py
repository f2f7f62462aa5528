"""Scenarios on the test bed, shared by ``make cluster-demo`` and ``tests/multihost``.

Each scenario drives real processes from the bed's client host, checks what it promises and
raises :class:`ScenarioError` naming the broken promise; it returns what it saw so the demo
can print it and a test can assert on it.
"""

from __future__ import annotations

import json
import re
import signal
import sys
import textwrap
import time
from dataclasses import dataclass, field

from bk_spark.errors import ScenarioError
from bk_spark.testbed.bed import CHECKOUT, Proc, TestBed, bk_command

EXAMPLES = CHECKOUT / "examples"

#: kazoo's reconnect warning: must not reach job output while a ZooKeeper leader is down.
KAZOO_NOISE = "Connection dropped"


@dataclass
class ExamplesRun:
    """What :func:`examples_through_standalone_master` saw."""

    outputs: dict[str, str] = field(default_factory=dict)  # example -> its stdout
    killed_leader: str = ""
    new_leader: str = ""
    killed_bookie: str = ""
    executor_apps: dict[str, list[str]] = field(default_factory=dict)
    seconds: float = 0.0


def _bk_json(bed: TestBed, *args: str) -> dict:
    res = bed.run([bk_command(), *args, "--json", "-m", bed.metadata_service_uri], timeout=60)
    return json.loads(res.stdout)


def bookie_holding(bed: TestBed, log_name: str) -> str:
    """A bookie (host name) in the ensemble of the log's last ledger: killing it matters."""
    ledgers = _bk_json(bed, "log", "show", log_name)["ledgers"]
    last = ledgers[-1]["ledger_id"]
    ensemble = _bk_json(bed, "ledger", "show", str(last))["fragments"][-1]["ensemble"]
    address = ensemble[0].rsplit(":", 1)[0]
    for name in bed.procs:
        if name.startswith("bk") and bed.host(name).address == address:
            return name
    raise ScenarioError(f"bookie {ensemble[0]} of ledger {last} is not one of the bed's")


def log_ensembles(bed: TestBed, log_name: str) -> list[str]:
    """Per ledger of the log: its fragments' ensembles (``bk log show`` / ``bk ledger show``
    from the client host), for the demo's output."""
    out = []
    for info in _bk_json(bed, "log", "show", log_name)["ledgers"]:
        lid = info["ledger_id"]
        frags = _bk_json(bed, "ledger", "show", str(lid))["fragments"]
        out.append(f"ledger {lid}: " + "; ".join(
            f"from entry {f['first_entry']}: {' '.join(f['ensemble'])}" for f in frags))
    return out


def _wait_for_line(proc: Proc, pattern: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not re.search(pattern, proc.log_path.read_text(errors="replace")):
        if not proc.alive():
            raise ScenarioError(f"{proc.name} exited {proc.popen.returncode} before printing "
                                f"{pattern!r}:\n{proc.log_tail(40)}")
        if time.monotonic() > deadline:
            raise ScenarioError(f"{proc.name} printed no {pattern!r} in {timeout:.0f}s")
        time.sleep(0.2)


def _finish(proc: Proc, timeout: float) -> str:
    try:
        rc = proc.popen.wait(timeout)
    except Exception as exc:
        raise ScenarioError(f"{proc.name} did not finish in {timeout:.0f}s:\n"
                            f"{proc.log_tail(40)}") from exc
    out = proc.log_path.read_text(errors="replace")
    if rc != 0:
        raise ScenarioError(f"{proc.name} exited {rc}:\n{proc.log_tail(60)}")
    if KAZOO_NOISE in out:
        raise ScenarioError(f"kazoo's {KAZOO_NOISE!r} warnings leaked into {proc.name}'s "
                            f"output")
    return out


def examples_through_standalone_master(bed: TestBed, rows: int = 2000, batches: int = 3,
                                       all_examples: bool = True,
                                       timeout: float = 240.0) -> ExamplesRun:
    """The examples, unchanged, as apps of the standalone master (executors on the workers).

    ``produce_events.py`` runs; after its first batch the ZooKeeper leader and a bookie of
    the log's last ledger are killed (-9). The job must finish with every row of every batch
    in the log, with no kazoo reconnect noise in its output, and both workers must have run
    executors of it. With ``all_examples``, ``stream_aggregate.py`` and ``export_parquet.py``
    then run against the degraded cluster (2 of 3 ZooKeepers, 4 of 5 bookies).
    """
    t0 = time.monotonic()
    seen = ExamplesRun()
    uri = bed.metadata_service_uri
    before = {w: set(apps) for w, apps in bed.executor_apps().items()}
    produce = bed.spawn_client("produce_events", bed.submit_argv(
        EXAMPLES / "produce_events.py", "--metadata-service-uri", uri, "--log", "events",
        "--rows", str(rows), "--batches", str(batches)))
    _wait_for_line(produce, r"batch 0: appended", timeout)
    seen.killed_bookie = bookie_holding(bed, "events")
    seen.killed_leader = bed.kill_zk_leader()
    bed.kill(seen.killed_bookie)
    out = _finish(produce, timeout)
    seen.new_leader = bed.wait_zk_leader()
    want = f"{rows * batches} events"
    if want not in out:
        raise ScenarioError(f"produce_events.py did not count {want}:\n{out[-3000:]}")
    seen.outputs["produce_events.py"] = _stdout_lines(out)
    seen.executor_apps = {w: sorted(set(apps) - before.get(w, set()))
                          for w, apps in bed.executor_apps().items()}
    idle = [w for w, apps in seen.executor_apps.items() if not apps]
    if idle:
        raise ScenarioError(f"no executor of the job ran on {', '.join(idle)}: did the job "
                            f"run in local mode?")
    if all_examples:
        ckpt = bed.base / "checkpoints" / "stream-aggregate"
        agg = bed.spawn_client("stream_aggregate", bed.submit_argv(
            EXAMPLES / "stream_aggregate.py", "--metadata-service-uri", uri,
            "--source", "events", "--sink", "user_totals", "--checkpoint", str(ckpt)))
        seen.outputs["stream_aggregate.py"] = _stdout_lines(_finish(agg, timeout))
        export = bed.spawn_client("export_parquet", bed.submit_argv(
            EXAMPLES / "export_parquet.py", "--metadata-service-uri", uri,
            "--log", "events", "--out", str(bed.base / "events.parquet")))
        out = _finish(export, timeout)
        if "Parquet copy equals the log: OK" not in out or f": {rows * batches} rows" not in out:
            raise ScenarioError(f"export_parquet.py did not copy the log:\n{out[-3000:]}")
        seen.outputs["export_parquet.py"] = _stdout_lines(out)
    seen.seconds = time.monotonic() - t0
    return seen


def _stdout_lines(out: str) -> str:
    """The job's own lines (Spark's and Java's log lines removed)."""
    keep = [line for line in out.splitlines()
            if line.strip() and not re.match(r"^(\d\d/\d\d/\d\d|WARNING:|\s+at |SLF4J|Using )",
                                              line)]
    return "\n".join(keep)


CONNECT_CLIENT = textwrap.dedent("""
    import sys
    from pyspark.sql import SparkSession

    url, uri, log = sys.argv[1:4]
    spark = SparkSession.builder.remote(url).getOrCreate()
    df = (spark.read.format("bookkeeper").option("metadataServiceUri", uri)
          .option("log", log).load())
    n = df.count()
    kinds = sorted((r["kind"], r["count"]) for r in df.groupBy("kind").count().collect())
    print(f"Spark Connect read of log {log!r}: {n} rows; by kind: {kinds}")
    spark.stop()
""")


def connect_batch_read(bed: TestBed, log_name: str, expect_rows: int,
                       timeout: float = 180.0) -> str:
    """A batch read of ``log_name`` through a Spark Connect server on the master.

    The client has only pyspark's Connect client; the data source runs in the server's
    Python workers on the Spark workers, which import it from their own installation.
    """
    url = bed.start_connect()
    script = bed.base / "connect_client.py"
    script.write_text(CONNECT_CLIENT)
    try:
        res = bed.run([sys.executable, str(script), url, bed.metadata_service_uri, log_name],
                      timeout=timeout)
    finally:
        bed.stop_process("connect")
    line = next((ln for ln in res.stdout.splitlines() if ln.startswith("Spark Connect")), "")
    if f": {expect_rows} rows" not in line:
        raise ScenarioError(f"Spark Connect read {line or 'nothing'}; expected {expect_rows} "
                            f"rows\n{res.stderr[-3000:]}")
    return line


def simpletest(bed: TestBed, entries: int = 1000) -> str:
    """``bk simpletest`` from the client host: write, read back, verify (else it fails)."""
    t0 = time.monotonic()
    res = bed.run([bk_command(), "simpletest", "-m", bed.metadata_service_uri, "-n", str(entries)],
                  timeout=180, check=False)
    if res.returncode != 0 or "simpletest OK" not in res.stdout:
        raise ScenarioError(f"bk simpletest failed:\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")
    return f"simpletest OK ({entries} entries written, read back, verified) in " \
           f"{time.monotonic() - t0:.1f}s"


@dataclass
class CutWriterRun:
    """What :func:`writer_cut_from_most_bookies` saw."""

    cut: list[str]
    seconds: float
    returncode: int
    output: str


def writer_cut_from_most_bookies(bed: TestBed, n_cut: int = 3, timeout: float = 150.0
                                 ) -> CutWriterRun:
    """``bk simpletest`` (E=3, Qw=Qa=2) from a writer silently cut from ``n_cut`` of the
    bookies: with fewer reachable bookies than the ensemble size it must end (with
    NotEnoughBookiesError) within a bounded time, not swap cut bookies in and out of its
    ensemble forever. Cut by a partition on namespaces, by SIGSTOP on loopback hosts (both
    leave the bookies registered and their connections hanging). Undone before returning.
    """
    net = bed.network
    assert net is not None
    live = [n for n in bed.procs if n.startswith("bk") and bed.procs[n].alive()]
    cut = live[:n_cut]
    for n in cut:
        if net.faults:
            net.partition(bed.client, bed.host(n))
        else:
            bed.procs[n].popen.send_signal(signal.SIGSTOP)
    t0 = time.monotonic()
    try:
        res = bed.run([bk_command(), "simpletest", "-m", bed.metadata_service_uri,
                       "-n", "200"], timeout=timeout, check=False)
    finally:
        for n in cut:
            if net.faults:
                net.heal(bed.client, bed.host(n))
            else:
                bed.procs[n].popen.send_signal(signal.SIGCONT)
    return CutWriterRun(cut, time.monotonic() - t0, res.returncode,
                        (res.stdout + res.stderr).strip())


@dataclass
class StreamingRun:
    """What :func:`streaming_through_leader_kill_and_rolling_restart` saw."""

    killed_leader: str = ""
    new_leader: str = ""
    restarted: list[str] = field(default_factory=list)
    driver_runs: int = 0
    counts: dict = field(default_factory=dict)
    seconds: float = 0.0


def streaming_through_leader_kill_and_rolling_restart(bed: TestBed, rate: float = 40.0,
                                                      timeout: float = 300.0) -> StreamingRun:
    """A live streaming query on the standalone cluster through a ZooKeeper leader killed
    mid-stream and a rolling restart of every bookie, with exactly-once output.

    1. ``bk_spark.faults.spark_driver --cluster`` (spark-submit to the master) copies log
       ``stream-in`` into ``stream-out`` through the bookkeeper sink (trigger: as fast as it
       can, 200 entries per batch, a checkpoint directory);
    2. a producer on the client host appends to ``stream-in`` at ``rate`` rows/s;
    3. once the query committed a batch: kill -9 the ZooKeeper leader, wait for a new one,
       start the old one again; then every bookie in turn stopped (SIGTERM) and started
       again, waiting until it registered before the next;
    4. the producer stops; the query must catch up. If the driver exits, it is started
       again from its checkpoint (counted in ``driver_runs``);
    5. ``stream-out`` must hold every row of ``stream-in`` exactly once (multisets).
    """
    t0 = time.monotonic()
    seen = StreamingRun()
    uri = bed.metadata_service_uri
    ckpt = bed.base / "checkpoints" / "stream-copy"
    stop = bed.base / "stream-produce.stop"
    stop.unlink(missing_ok=True)
    driver_py = CHECKOUT / "bk_spark" / "faults" / "spark_driver.py"
    # the input log exists before the query plans its first batch
    producer = bed.spawn_client("stream_produce", [
        sys.executable, "-m", "bk_spark.testbed.streaming", "produce", uri, "stream-in",
        str(stop), "--rate", str(rate)])

    def start_driver() -> Proc:
        seen.driver_runs += 1
        return bed.spawn_client(f"stream_driver{seen.driver_runs}", bed.submit_argv(
            driver_py, uri, "stream-in", "stream-out", str(ckpt), "--max-entries", "200",
            "--cluster"))

    def counts() -> dict:
        res = bed.run([sys.executable, "-m", "bk_spark.testbed.streaming", "compare", uri,
                       "stream-in", "stream-out"], timeout=120)
        return json.loads(res.stdout.strip().splitlines()[-1])

    def keep_driver(driver: Proc) -> Proc:
        return driver if driver.alive() else start_driver()

    time.sleep(2.0)
    driver = start_driver()
    try:
        _wait_for_line(driver, r"(?m)^started", 180)
        _wait("the query's first output", lambda: counts()["output"] > 0, 180)
        seen.killed_leader = bed.kill_zk_leader()
        seen.new_leader = bed.wait_zk_leader()
        time.sleep(2.0)
        bed.restart(seen.killed_leader)
        bed.wait_zk_leader()
        for i in range(1, bed.config.bookies + 1):
            name = f"bk{i}"
            driver = keep_driver(driver)
            bed.stop_process(name)
            bed.restart(name)
            bed.wait_bookies(bed.config.bookies)
            seen.restarted.append(name)
        stop.touch()
        if producer.popen.wait(120) != 0:
            raise ScenarioError(f"the producer failed:\n{producer.log_tail(20)}")
        deadline = time.monotonic() + timeout
        while True:
            driver = keep_driver(driver)
            seen.counts = counts()
            if seen.counts["output"] >= seen.counts["input"] or time.monotonic() > deadline:
                break
            time.sleep(2.0)
        time.sleep(3.0)  # a batch being committed lands; then nothing more may come
        seen.counts = counts()
    finally:
        stop.touch()
        bed.stop_process(driver.name)
        bed.stop_process(producer.name)
    c = seen.counts
    if c["missing"] or c["duplicates"] or c["input"] == 0:
        raise ScenarioError(f"streaming output is not the input exactly once: {c}")
    seen.seconds = time.monotonic() - t0
    return seen


def _wait(what: str, cond, timeout: float) -> float:
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise ScenarioError(f"{what}: not after {timeout:.0f}s")
        time.sleep(0.5)
    return time.monotonic() - t0


def network_faults(bed: TestBed) -> list[str]:
    """Partitions between hosts (namespaces only), each followed by a verified simpletest.

    1. the writer (client host) cut from two bookies: adds to them time out (10 s) and the
       writer replaces them in the ensemble; 2. a bookie cut from every ZooKeeper: its
       session expires, it leaves the bookie list, and it registers again once healed;
    3. the ZooKeeper leader cut from its followers: the majority side elects a new leader
       and serves, the old leader rejoins as a follower once healed; 4. delay and
       connection loss through the bookies' links (:mod:`bk_spark.testbed.link`) when the
       bed has them, else ``tc netem`` when the kernel has it. Every process must be up:
       restart what earlier scenarios killed first.
    """
    net = bed.network
    assert net is not None
    if not net.faults:
        return [f"network faults skipped: {net.why_not} (hosts are loopback addresses)"]
    out: list[str] = []
    client = bed.client
    live = [n for n in bed.procs if n.startswith("bk") and bed.procs[n].alive()]
    # 1. writer <-> two of the five bookies (an ensemble of 3 holds one of them 9 times in 10)
    cut = [bed.host(n) for n in live[:2]]
    for h in cut:
        net.partition(client, h)
    try:
        out.append(f"partition writer | {' '.join(h.name for h in cut)}: {simpletest(bed)}")
    finally:
        for h in cut:
            net.heal(client, h)
    # 2. bookie <-> ZooKeeper
    victim = bed.host(live[-1])
    vid = f"{victim.address}:3181"
    for z in bed.zk_hosts:
        net.partition(victim, z)
    try:
        gone = _wait(f"{victim.name} cut from ZooKeeper leaves the bookie list",
                     lambda: vid not in {b["bookie"] for b in bed.bookies()}, 60)
        line = f"partition {victim.name} | ZooKeeper: unregistered after {gone:.1f}s, " \
               f"{simpletest(bed)}"
    finally:
        for z in bed.zk_hosts:
            net.heal(victim, z)
    back = _wait(f"{victim.name} registers again once healed",
                 lambda: vid in {b["bookie"] for b in bed.bookies()}, 60)
    out.append(f"{line}; registered again {back:.1f}s after healing")
    # 3. ZooKeeper leader <-> followers
    leader = bed.wait_zk_leader()
    followers = [h for h in bed.zk_hosts if h.name != leader]
    for f in followers:
        net.partition(bed.host(leader), f)
    try:
        elected = _wait("the followers elect a new leader",
                        lambda: any(bed.listening(f, 2888) for f in followers), 60)
        new = next(f.name for f in followers if bed.listening(f, 2888))
        line = f"partition ZooKeeper leader {leader} | followers: {new} elected in " \
               f"{elected:.1f}s on the majority side, {simpletest(bed)}"
    finally:
        for f in followers:
            net.heal(bed.host(leader), f)
    _wait("the old leader rejoins", lambda: bed.zk_leader() is not None, 60)
    out.append(line)
    # 4. delay and loss
    if bed.linked:  # the links in front of the bookies (this kernel has no netem)
        slow, lossy = live[1], live[2]
        bed.set_link(slow, delay_ms=10)
        bed.set_link(lossy, loss_pct=1)
        try:
            out.append(f"link faults: 10 ms delay to {slow}, 1% connection loss to "
                       f"{lossy}: {simpletest(bed)}")
        finally:
            bed.set_link(slow)
            bed.set_link(lossy)
    elif net.netem_available():
        for h in (client, bed.host(live[1])):
            net.shape(h, delay_ms=10, loss_pct=1)
        try:
            out.append(f"netem 10 ms delay + 1% loss on writer and {live[1]}: "
                       f"{simpletest(bed)}")
        finally:
            for h in (client, bed.host(live[1])):
                net.unshape(h)
    else:
        out.append("delay/loss skipped: this kernel has no sch_netem qdisc and the bed has "
                   "no links (TestBedConfig(links=True))")
    return out
