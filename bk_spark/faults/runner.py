"""Running schedules against one shared :class:`FaultCluster`, and the run's summary.

One schedule, in order:

1. start the writer processes of its workload and a tailing observer (its own client,
   non-fencing reads only, recording what it read);
2. inject every fault at its time and undo it after its duration (fences and takeovers run
   in threads so a slow recovery does not delay the rest of the timeline); halfway through,
   check that a wrong password can neither open, fence nor add;
3. heal the cluster (bookies killed "forever" stay down), stop the writers with SIGTERM (they
   finish, close and exit) and the observer;
4. check (checker.py) with two fresh clients: A recovers every ledger and log, B reads them
   without fencing;
5. after a bookie lost forever or wiped (:data:`~bk_spark.faults.plan.HEALING_KINDS`):
   wait up to :data:`HEAL_BOUND_S` for every wiped bookie's self-repair to complete
   (``repairs``; ``repair_incomplete`` otherwise) and for AutoRecovery (running in the
   bookies) to bring every ledger back to full replication, and count those it did not
   (``not_healed``). A ledger whose missing copies placement has nowhere to move (no
   writable bookie outside the fragment's ensemble:
   :func:`~bk_spark.protocol.recovery_plan.unplaceable`, e.g. E = 4 with a bookie killed
   for good and 4 left), its copies missing only on bookies a fault took down, is counted
   apart (``heal_unplaceable``): no AutoRecovery can heal it until a bookie joins. Its
   acknowledged entries are checked like every other's (4);
6. restart the bookies killed forever (an empty one for a bookie lost) and delete the
   schedule's ledgers and logs, so the next schedule starts from a healthy cluster.
"""

from __future__ import annotations

import math
import os
import random
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bk_spark.autorecovery.auditor import bookies_lacking_entries
from bk_spark.core.client import BookKeeper, BookKeeperConfig
from bk_spark.core.reader import ReadHandle
from bk_spark.errors import BKError, BKTimeoutError, NoSuchLedgerError, UnauthorizedError
from bk_spark.faults import checker
from bk_spark.faults.checker import FencedLedger, Findings, LogRecordRead
from bk_spark.faults.cluster import Cluster, FaultCluster, FaultInjectionError, signal_pid
from bk_spark.faults.plan import (
    HEALING_KINDS,
    WIPING_KINDS,
    Fault,
    FaultKind,
    LedgerWriterSpec,
    LogWriterSpec,
    Schedule,
    bookie_index,
)
from bk_spark.faults.transcript import WriterTold, parse
from bk_spark.faults.writers import PASSWORD
from bk_spark.io.bookie_client import ClientConfig
from bk_spark.io.registration import list_bookies
from bk_spark.io.underreplication import UnderReplicationManager
from bk_spark.log import delete_log, open_log_reader, open_log_writer
from bk_spark.proto import bookie_pb2 as pb
from bk_spark.protocol.digest import master_key
from bk_spark.protocol.placement import Topology
from bk_spark.protocol.recovery_plan import fragment_duties, unplaceable

if TYPE_CHECKING:
    from bk_spark.faults.netcluster import NetFaultCluster

WRONG_PASSWORD = b"not-the-password"
#: Seconds, from the end of the check, within which every ledger is back to full
#: replication after a healing fault (the cluster's lost-bookie delay is 6 s, its full
#: check every 2 s; copying a short schedule's ledgers takes seconds).
HEAL_BOUND_S = 60.0
WRITER_STOP_TIMEOUT = 40.0  # a writer drains adds (<= 18 s each when stuck) and closes
ROLL_WAIT = 3.0


def replay_command(seed: int, mode: str = "long", spark: bool = False,
                   network: bool = False) -> str:
    """The one command that replays the schedule of ``seed``."""
    extra = ((" --mode short" if mode == "short" else "") + (" --spark" if spark else "")
             + (" --network" if network else ""))
    return f"PYTHONPATH=. python -m bk_spark.faults --seed {seed}{extra}"


def client(uri: str, timeout: float = 3.0) -> BookKeeper:
    return BookKeeper(uri, BookKeeperConfig(client=ClientConfig(add_timeout_s=timeout,
                                                                read_timeout_s=timeout)))


# ================================================================================ writers


class WriterProc:
    """One writer process; a thread collects its stdout lines as they come."""

    def __init__(self, args: list[str], tag: str, log_dir: Path) -> None:
        self.tag = tag
        env = {**os.environ,
               "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parents[2]),
                                                           os.environ.get("PYTHONPATH")]))}
        self.stderr_path = log_dir / f"{tag}.stderr"
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bk_spark.faults.writers", *args],
                stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, text=True,
                env=env)
        self.lines: list[str] = []
        self.out_path = log_dir / f"{tag}.out"
        self.ledgers: list[int] = []  # ledgers it announced, in order
        self.paused = False
        self._cv = threading.Condition()
        self._reader = threading.Thread(target=self._collect, daemon=True,
                                        name=f"writer-{tag}-stdout")
        self._reader.start()

    def _collect(self) -> None:
        assert self.proc.stdout is not None
        with open(self.out_path, "w") as out:
            for line in self.proc.stdout:
                out.write(line)
                self._add_line(line.rstrip("\n"))

    def _add_line(self, line: str) -> None:
        with self._cv:
            self.lines.append(line)
            w = line.split()
            if len(w) >= 3 and w[0] in ("ledger", "open"):
                try:
                    self.ledgers.append(int(w[1] if w[0] == "ledger" else w[2]))
                except ValueError:
                    pass
            self._cv.notify_all()

    def wait_for_line(self, prefix: str, after: int, timeout: float) -> bool:
        with self._cv:
            return self._cv.wait_for(
                lambda: any(x.startswith(prefix) for x in self.lines[after:]), timeout)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: signal.Signals) -> bool:
        return self.alive and signal_pid(self.proc.pid, sig)

    def kill9(self) -> None:
        if self.alive:
            self.proc.kill()
        self.proc.wait()
        self._reader.join(5)

    def stop(self) -> None:
        """SIGCONT (it may be paused), then SIGTERM."""
        self.signal(signal.SIGCONT)
        self.paused = False
        self.signal(signal.SIGTERM)

    def wait(self, timeout: float) -> bool:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        self._reader.join(5)
        return True

    def zk_session(self) -> tuple[int, bytes] | None:
        with self._cv:
            for line in reversed(self.lines):
                w = line.split()
                if len(w) == 3 and w[0] == "zk":
                    try:
                        return int(w[1], 16), bytes.fromhex(w[2])
                    except ValueError:
                        continue
        return None

    def told(self, kind: str, log: str | None) -> WriterTold:
        with self._cv:
            lines = list(self.lines)
        return parse(kind, self.tag, lines, log)


class WriterSlot:
    """A workload writer: the process now running it and the ones before (killed)."""

    def __init__(self, spec: LedgerWriterSpec | LogWriterSpec, uri: str, log_dir: Path) -> None:
        self.spec = spec
        self.uri = uri
        self.log_dir = log_dir
        self.kind = "ledger" if isinstance(spec, LedgerWriterSpec) else "log"
        self.procs: list[WriterProc] = []

    @property
    def current(self) -> WriterProc | None:
        return self.procs[-1] if self.procs else None

    @property
    def log(self) -> str | None:
        return self.spec.log if isinstance(self.spec, LogWriterSpec) else None

    def spawn(self) -> WriterProc:
        s = self.spec
        tag = f"{s.name}-{len(self.procs) + 1}"
        quorum = f"{s.ensemble},{s.write_quorum},{s.ack_quorum}"
        if isinstance(s, LedgerWriterSpec):
            args = ["ledger", self.uri, tag, "--quorum", quorum,
                    "--entries-per-ledger", str(s.entries_per_ledger)]
        else:
            args = ["log", self.uri, tag, s.log, "--quorum", quorum,
                    "--roll-every", str(s.roll_every), "--roll-pause", "0.3"]
        p = WriterProc(args, tag, self.log_dir)
        self.procs.append(p)
        return p

    def all_told(self) -> list[WriterTold]:
        return [p.told(self.kind, self.log) for p in self.procs]


# ================================================================================ observer


class Observer:
    """A tailing reader with its own client: reads every ledger up to its LAC and every log
    with a log reader, without fencing, and keeps what it read (checked against the end)."""

    def __init__(self, uri: str, ledgers: Callable[[], list[int]], logs: list[str]) -> None:
        self.uri = uri
        self._ledgers = ledgers
        self._logs = logs
        self.ledger_reads: dict[int, list[bytes]] = {}
        self.log_reads: dict[str, list[list[LogRecordRead]]] = {name: [] for name in logs}
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="observer")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    def _run(self) -> None:
        try:
            bk = client(self.uri)
        except Exception:  # noqa: BLE001 - ZooKeeper down at the start: nothing observed
            return
        handles: dict[int, ReadHandle] = {}
        readers: dict[str, object] = {}
        try:
            while not self._stop.wait(0.3):
                for lid in self._ledgers():
                    try:
                        self._poll_ledger(bk, handles, lid)
                    except Exception:  # noqa: BLE001 - faults: try again next round
                        handles.pop(lid, None)
                        self.errors += 1
                for name in self._logs:
                    try:
                        self._poll_log(bk, readers, name)
                    except Exception:  # noqa: BLE001
                        readers.pop(name, None)
                        self.errors += 1
        finally:
            threading.Thread(target=bk.close, daemon=True).start()

    def _poll_ledger(self, bk: BookKeeper, handles: dict[int, ReadHandle], lid: int) -> None:
        rh = handles.get(lid)
        if rh is None:
            rh = handles[lid] = bk.open_ledger(lid, PASSWORD, recovery=False)
        seen = self.ledger_reads.setdefault(lid, [])
        lac = rh.read_last_add_confirmed()
        if lac >= len(seen):
            for e in rh.iter_entries(len(seen), min(lac, len(seen) + 999)):
                seen.append(e.payload)

    def _poll_log(self, bk: BookKeeper, readers: dict[str, object], name: str) -> None:
        r = readers.get(name)
        if r is None:
            r = readers[name] = open_log_reader(bk, name, "earliest", password=PASSWORD)
            self.log_reads[name].append([])
        out = self.log_reads[name][-1]
        for n, rec in enumerate(r.read_available()):  # type: ignore[attr-defined]
            out.append((rec.position.ledger_id, rec.position.entry_id, rec.payload))
            if n >= 999 or self._stop.is_set():
                break


# ================================================================================ results


@dataclass
class ScheduleResult:
    schedule: Schedule
    findings: Findings
    injected: Counter
    skipped: Counter
    elapsed: float
    events: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.findings.ok

    def report(self) -> str:
        s = self.schedule
        head = (f"schedule seed={s.seed}: {'ok' if self.ok else 'FAILED'} in "
                f"{self.elapsed:.1f}s, {self.findings.acknowledged} acknowledged")
        if self.ok:
            return head
        lines = [head, s.describe(), "  findings:"]
        lines += [f"    {m}" for m in self.findings.messages]
        lines += ["  events:"] + [f"    {e}" for e in self.events[-60:]]
        lines.append(f"  replay: {replay_command(s.seed, s.mode, s.spark, s.network)}")
        return "\n".join(lines)


@dataclass
class Summary:
    """Totals over a run of schedules (what ``make faults`` and ``make test`` print)."""

    schedules: int = 0
    failed: list[int] = field(default_factory=list)
    replays: list[str] = field(default_factory=list)
    injected: Counter = field(default_factory=Counter)
    skipped: Counter = field(default_factory=Counter)
    findings: Findings = field(default_factory=Findings)
    elapsed: float = 0.0
    wrong_password_refusals: int = 0
    mode: str = "short"

    def add(self, r: ScheduleResult) -> None:
        self.schedules += 1
        if not r.ok:
            self.failed.append(r.schedule.seed)
            s = r.schedule
            self.replays.append(replay_command(s.seed, s.mode, s.spark, s.network))
        self.injected.update(r.injected)
        self.skipped.update(r.skipped)
        self.findings.merge(r.findings)
        self.elapsed += r.elapsed
        self.wrong_password_refusals += r.findings.counts["wrong_password_refused"]

    def render(self) -> str:
        f = self.findings
        c = f.counts
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(self.injected.items()))
        skipped = ", ".join(f"{k} {n}" for k, n in sorted(self.skipped.items())) or "none"
        lines = [
            "=" * 78,
            f"fault schedules run: {self.schedules} ({self.mode} mode, {self.elapsed:.0f}s), "
            f"failed: {len(self.failed)}"
            + (f" (seeds {', '.join(map(str, self.failed))})" if self.failed else ""),
            f"faults injected: {sum(self.injected.values())} ({kinds})",
            f"faults skipped (victim not in a suitable state): {skipped}",
            f"acknowledged entries: {f.acknowledged} (ledger adds {f.ledger_acks}, "
            f"log appends {f.log_acks})",
            f"lost: {c['lost']}   divergent reads: {c['divergent']}   "
            f"duplicates: {c['duplicates']}",
            f"successes after fencing: {c['fence_violations']}   acks to fenced or deleted "
            f"ledgers: {c['fenced_or_deleted_acks']}   interleaved: "
            f"{c['interleaved']}   corrupt: {c['corrupt']}   bookie crashes: "
            f"{c['bookie_crashes']}   stalled writers: {c['stalled_writers']}   harness errors: "
            f"{c['harness_errors']}",
            f"wrong-password operations refused: {self.wrong_password_refusals}, "
            f"accepted: {c['wrong_password']}",
            f"every ledger back to full replication within {HEAL_BOUND_S:.0f}s after a "
            f"bookie lost forever or wiped: {c['heal_ledgers']} ledgers in "
            f"{c['heal_schedules']} schedules, not healed in time: {c['not_healed']}"
            + (f" (mean {c['heal_ms'] / c['heal_schedules'] / 1000:.1f}s to heal)"
               if c["heal_schedules"] else "")
            + (f"; {c['heal_unplaceable']} left short of copies for want of a writable "
               f"bookie outside their ensemble (protocol/recovery_plan.py unplaceable)"
               if c["heal_unplaceable"] else ""),
            f"wiped bookies self-repaired (fenced, UNKNOWN answered, copied back): "
            f"{c['repairs']}, repairs interrupted by kill -9 and resumed: "
            f"{c['repairs_killed']}, not complete in time: {c['repair_incomplete']}",
        ]
        if c["spark_runs"]:
            lines.append(f"spark sink runs: {c['spark_runs']}, driver kills: "
                         f"{c['spark_driver_kills']}, output mismatches: "
                         f"{c['spark_mismatch']}")
            lines.append(f"spark side query (log truncated and recreated while it runs): "
                         f"data-loss warnings {c['spark_data_loss_warnings']}, entries lost "
                         f"with a warning {c['spark_side_lost_with_warning']}, silent skips: "
                         f"{c['silent_skips']}")
        for seed, command in zip(self.failed, self.replays, strict=True):
            lines.append(f"  replay failed seed {seed}: {command}")
        lines.append("=" * 78)
        return "\n".join(lines)


# ================================================================================ runner


class Runner:
    """Runs schedules on one shared cluster (see the module docstring)."""

    def __init__(self, cluster: Cluster, work_dir: Path,
                 log: Callable[[str], None] | None = None) -> None:
        self.cluster = cluster
        self.work_dir = Path(work_dir)
        self.log = log or (lambda _line: None)

    # ---------------------------------------------------------------- one schedule
    def run(self, schedule: Schedule) -> ScheduleResult:
        t_start = time.monotonic()
        run = _ScheduleRun(self, schedule)
        try:
            run.execute()
        except Exception:  # a harness bug fails this schedule, never the whole run
            run.findings.add("harness_errors", [traceback.format_exc(limit=8)])
        finally:
            run.cleanup()
        result = ScheduleResult(schedule, run.findings, run.injected, run.skipped,
                                time.monotonic() - t_start, run.events)
        self.log(result.report())
        return result


class _ScheduleRun:
    """The state of one schedule while it runs."""

    def __init__(self, runner: Runner, schedule: Schedule) -> None:
        self.runner = runner
        self.cluster = runner.cluster
        self.schedule = schedule
        self.findings = Findings()
        self.injected: Counter = Counter()
        self.skipped: Counter = Counter()
        self.events: list[str] = []
        self.t0 = time.monotonic()
        self.log_dir = runner.work_dir / f"seed-{schedule.seed}"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        uri = self.cluster.uri
        self.slots = {spec.name: WriterSlot(spec, uri, self.log_dir)
                      for spec in (*schedule.ledger_writers, *schedule.log_writers)}
        self.threads: list[threading.Thread] = []  # background work, joined at the end
        self.long_threads: list[threading.Thread] = []  # joined after the workload ends
        self.fault_threads: dict[Fault, threading.Thread] = {}  # the thread a fault started
        self.observer: Observer | None = None
        self.spark = None
        self._counted_as: FaultKind | None = None  # the kind a fault really was
        self.fenced: dict[int, FencedLedger] = {}  # ledgers the harness fenced (or deleted)
        self.wiped: list[int] = []  # bookies wiped (each restarts in self-repair)
        self.faulted: set[int] = set()  # bookies a fault was injected into

    def event(self, text: str) -> None:
        self.events.append(f"t={time.monotonic() - self.t0:6.2f}s {text}")

    # ---------------------------------------------------------------- timeline
    def execute(self) -> None:
        s = self.schedule
        self.event("before start: " + (", ".join(self.cluster.heal()) or "healthy"))
        self.cluster.wait_writable()
        if s.spark:
            from bk_spark.faults.spark_sink import SparkSinkWorkload

            self.spark = SparkSinkWorkload(self.cluster.uri, s, self.log_dir)
            bk = client(self.cluster.uri)
            try:
                self.spark.start(bk)
            finally:
                bk.close()
            self.event(f"spark: query running after {time.monotonic() - self.t0:.0f}s")
        for slot in self.slots.values():
            slot.spawn()
        self.observer = Observer(self.cluster.uri, self._all_ledgers, s.logs)
        self.observer.start()
        self.t0 = time.monotonic()
        actions: list[tuple[float, int, str, Fault]] = []
        for i, f in enumerate(s.faults):
            actions.append((f.at, i, "inject", f))
            if 0 < f.duration < math.inf:
                actions.append((f.end, i, "undo", f))
        actions.sort(key=lambda a: (a[0], a[1], a[2] == "inject"))
        wrong_pw_at = s.duration / 2
        for at, _i, phase, fault in actions:
            if wrong_pw_at is not None and wrong_pw_at <= at:
                self._sleep_until(wrong_pw_at)
                self._background("wrong-password", self._wrong_password_live)
                wrong_pw_at = None
            self._sleep_until(at)
            self._act(phase, fault)
        if wrong_pw_at is not None:
            self._sleep_until(wrong_pw_at)
            self._background("wrong-password", self._wrong_password_live)
        self._sleep_until(s.duration)
        for t in self.threads:
            t.join(60)
        self._finish_workload()
        for t in (*self.threads, *self.long_threads):  # a driver kill waits for a committed
            t.join(600)  # batch: minutes
        self._check()
        if any(self.injected[k.value] for k in HEALING_KINDS):
            self._check_healed()

    def _sleep_until(self, at: float) -> None:
        delay = self.t0 + at - time.monotonic()
        if delay > 0:
            time.sleep(delay)

    def _background(self, name: str, fn: Callable[[], None], fault: Fault | None = None,
                    long: bool = False) -> None:
        """Run ``fn`` on a thread of its own; its handle is kept by ``fault`` (what the
        fault's undo waits for) and, with ``long`` (the Spark faults: a driver kill waits
        for a committed batch, minutes), not waited for before the workload ends."""
        def run() -> None:
            try:
                fn()
            except Exception as exc:  # noqa: BLE001 - a failed fence is an event, no more
                self.event(f"{name} failed: {exc!r}")

        t = threading.Thread(target=run, daemon=True, name=name)
        t.start()
        (self.long_threads if long else self.threads).append(t)
        if fault is not None:
            self.fault_threads[fault] = t

    def _all_ledgers(self) -> list[int]:
        return [lid for slot in self.slots.values() if slot.kind == "ledger"
                for p in slot.procs for lid in list(p.ledgers)]

    # ---------------------------------------------------------------- faults
    def _act(self, phase: str, f: Fault) -> None:
        self._counted_as = None
        try:
            detail = (self._inject(f) if phase == "inject" else self._undo(f)) or ""
        except FaultInjectionError as exc:
            if phase == "inject":
                self.skipped[f.kind.value] += 1
            self.event(f"{phase} {f.kind.value} {f.target} skipped: {exc}")
            return
        except Exception as exc:  # noqa: BLE001 - ZooKeeper away etc.: the schedule goes on
            if phase == "inject":
                self.skipped[f.kind.value] += 1
            self.event(f"{phase} {f.kind.value} {f.target} failed: {exc!r}")
            return
        if phase == "inject":
            self.injected[(self._counted_as or f.kind).value] += 1
            if f.target.startswith("bookie-"):
                self.faulted.add(bookie_index(f.target))
        self.event(f"{phase} {f.kind.value} {f.target} {detail}".rstrip())

    def _inject(self, f: Fault) -> str | None:
        inject, _undo = FAULT_ACTIONS[f.kind]
        return inject(self, f)

    def _undo(self, f: Fault) -> str | None:
        _inject, undo = FAULT_ACTIONS[f.kind]
        return undo(self, f) if undo is not None else None

    def _local(self) -> FaultCluster:
        """The cluster, for faults on a local bookie's files or processes."""
        if not isinstance(self.cluster, FaultCluster):
            raise FaultInjectionError("this fault needs the local fault cluster (not --network)")
        return self.cluster

    def _net(self) -> NetFaultCluster:
        from bk_spark.faults.netcluster import NetFaultCluster

        if not isinstance(self.cluster, NetFaultCluster):
            raise FaultInjectionError("network faults need the test bed (--network)")
        return self.cluster

    # -- inject and undo, one pair per kind of fault (FAULT_ACTIONS) ----------------------
    def _kill_bookie(self, f: Fault) -> None:
        self.cluster.kill(bookie_index(f.target), forever=f.kind == FaultKind.BOOKIE_KILL_FOREVER)

    def _restart_killed_bookie(self, f: Fault) -> None:
        i = bookie_index(f.target)
        if self.cluster.slots[i].state == "killed":
            self.cluster.restart(i)

    def _pause_bookie(self, f: Fault) -> None:
        self.cluster.pause(bookie_index(f.target))

    def _resume_bookie(self, f: Fault) -> None:
        i = bookie_index(f.target)
        if self.cluster.slots[i].state == "paused":
            self.cluster.resume(i)

    def _lose_bookie(self, f: Fault) -> str:
        self._local().lose(bookie_index(f.target))
        return "(data dir removed)"

    def _fill_disk(self, f: Fault) -> str:
        limit = self._local().fill_disk(bookie_index(f.target),
                                        int(f.param("headroom_kib", 0)))
        return f"--max-disk-bytes {limit}"

    def _corrupt_entry_log(self, f: Fault) -> str:
        return self._local().corrupt_entry_log(bookie_index(f.target), int(f.param("bytes", 1)),
                                               int(f.param("salt", 0)))

    def _tear_journal_tail(self, f: Fault) -> str:
        return self._local().tear_journal_tail(bookie_index(f.target),
                                               str(f.param("tear", "cut")),
                                               int(f.param("salt", 0)))

    def _stop_zookeeper(self, f: Fault) -> None:
        self._local().stop_zookeeper()

    def _start_zookeeper(self, f: Fault) -> None:
        self._local().start_zookeeper()

    def _expire_bookie_session(self, f: Fault) -> str:
        return self._local().expire_bookie_session(bookie_index(f.target))

    def _expire_writer_session(self, f: Fault) -> str:
        p = self._writer(f.target)
        session = p.zk_session()
        if session is None:
            raise FaultInjectionError(f"{p.tag} printed no ZooKeeper session yet")
        self.cluster.expire_session(*session)
        return f"{p.tag} session {session[0]:x}"

    def _kill_writer(self, f: Fault) -> str:
        p = self._writer(f.target)
        mid_roll = False
        if f.kind == FaultKind.WRITER_KILL_MID_ROLL:
            mid_roll = p.wait_for_line("roll-cas", len(p.lines), ROLL_WAIT)
        p.kill9()
        if f.kind == FaultKind.WRITER_KILL_MID_ROLL and not mid_roll:
            self._counted_as = FaultKind.WRITER_KILL
            return f"{p.tag} (no roll within {ROLL_WAIT}s: killed mid-stream)"
        return p.tag

    def _respawn_writer(self, f: Fault) -> str:
        return self.slots[f.target].spawn().tag

    def _fence_writer(self, f: Fault) -> str:
        """FENCE: fence the writer's ledger or log while it runs; WRITER_PAUSE_FENCE and
        FENCE_DELETE (which also deletes the ledger) stop the writer first (SIGSTOP)."""
        p = self._writer(f.target)
        if f.kind != FaultKind.FENCE:
            p.signal(signal.SIGSTOP)
            p.paused = True
        delete = f.kind == FaultKind.FENCE_DELETE
        self._background(f"fence {f.target}", lambda: self._fence(f.target, p, delete=delete),
                         fault=f)
        return p.tag

    def _resume_fenced_writer(self, f: Fault) -> None:
        t = self.fault_threads.get(f)
        if t is not None:  # let the fence finish while the writer is stopped
            t.join(30)
        p = self.slots[f.target].current
        if p is not None:
            p.signal(signal.SIGCONT)
            p.paused = False

    def _spark(self) -> Any:
        if self.spark is None:
            raise FaultInjectionError("no spark workload")
        return self.spark

    def _kill_spark_driver(self, f: Fault) -> str:
        self._spark()
        self._background("spark-driver-kill", lambda: self._spark_kill(f), fault=f,
                         long=True)
        return "(once the driver committed a batch)"

    def _change_spark_side_log(self, f: Fault) -> str:
        side = self._spark().side
        act = side.truncate if f.kind == FaultKind.SPARK_LOG_TRUNCATE else side.recreate
        self._background(f.kind.value, lambda: self._with_client(act), fault=f, long=True)
        return f"(log {side.name}, read with failOnDataLoss=false)"

    def _cut_writer_from_bookie(self, f: Fault) -> str:
        return self._net().cut_writer_from(bookie_index(f.target))

    def _heal_writer_from_bookie(self, f: Fault) -> None:
        self._net().heal_writer_from(bookie_index(f.target))

    def _cut_bookie_from_zk(self, f: Fault) -> str:
        return self._net().cut_bookie_from_zk(bookie_index(f.target))

    def _heal_bookie_from_zk(self, f: Fault) -> None:
        self._net().heal_bookie_from_zk(bookie_index(f.target))

    def _cut_zk_leader(self, f: Fault) -> str:
        return self._net().cut_zk_leader(
            majority=f.kind == FaultKind.PARTITION_ZK_LEADER_MAJORITY)

    def _heal_zk(self, f: Fault) -> None:
        self._net().heal_zk()

    def _delay_link(self, f: Fault) -> str:
        return self._net().set_link(bookie_index(f.target),
                                    delay_ms=float(f.param("delay_ms", 10)))

    def _lose_on_link(self, f: Fault) -> str:
        return self._net().set_link(bookie_index(f.target),
                                    loss_pct=float(f.param("loss_pct", 1)))

    def _clear_link(self, f: Fault) -> None:
        self._net().set_link(bookie_index(f.target))

    def _wipe(self, f: Fault) -> str:
        """A wiping fault (:data:`~bk_spark.faults.plan.WIPING_KINDS`): the bookie restarts
        in self-repair; killed again while it repairs; or, once its repair is done,
        another bookie wiped (in the background)."""
        c, i = self._local(), bookie_index(f.target)
        c.wipe(i)
        self.wiped.append(i)
        if f.kind == FaultKind.BOOKIE_WIPED_REPAIR_KILLED:
            time.sleep(0.2)
            state = c.repair_state(i)
            c.kill(i)
            c.restart(i)
            self.findings.counts["repairs_killed"] += 1
            return f"(data dir emptied, restarted; killed -9 while {state}, restarted)"
        if f.kind == FaultKind.BOOKIES_WIPED_IN_TURN:
            def second() -> None:
                deadline = time.monotonic() + HEAL_BOUND_S
                while c.repair_state(i) != "done":
                    if time.monotonic() > deadline:
                        raise FaultInjectionError(f"bookie-{i} still repairing")
                    time.sleep(0.2)
                j = next((s.index for s in c.slots if s.state == "up" and s.index != i
                          and not s.limited), None)
                if j is None:
                    raise FaultInjectionError("no other bookie up to wipe")
                c.wipe(j)
                self.wiped.append(j)
                self.event(f"bookies-wiped-in-turn: bookie-{i} repaired, bookie-{j} wiped")

            self._background("second wipe", second)
            return "(data dir emptied, restarted; a second bookie once it is repaired)"
        return "(data dir emptied, restarted)"

    def _with_client(self, act: Callable[[BookKeeper], str]) -> None:
        bk = client(self.cluster.uri)
        try:
            self.event(f"spark: {act(bk)}")
        finally:
            bk.close()

    def _spark_kill(self, f: Fault) -> None:
        """kill -9 the Spark driver once it committed a batch, restart it ``f.duration``
        later from its checkpoint (all in the background: the JVM takes its time)."""
        assert self.spark is not None
        bk = client(self.cluster.uri)
        try:
            delay = float(f.param("after_commit_s", 0.0) or 0.0)
            self.event(f"spark: {self.spark.kill_driver(bk, delay)}")
            time.sleep(f.duration)
            self.event(f"spark: {self.spark.restart_driver()}")
        finally:
            bk.close()

    def _writer(self, name: str) -> WriterProc:
        p = self.slots[name].current
        if p is None or not p.alive:
            raise FaultInjectionError(f"writer {name} is not running")
        return p

    def _fence(self, name: str, p: WriterProc, delete: bool = False) -> None:
        """Fence what writer ``p`` writes: recover its current ledger (and with ``delete``
        delete it), or take over its log (open a writer of our own, which fences the last
        two ledgers, and close it)."""
        slot = self.slots[name]
        bk = client(self.cluster.uri)
        try:
            if slot.kind == "ledger":
                if not p.ledgers:
                    raise FaultInjectionError(f"{p.tag} has no ledger yet")
                lid = p.ledgers[-1]
                rh = checker.retrying(lambda: bk.open_ledger(lid, PASSWORD, recovery=True),
                                      10.0)
                self.fenced[lid] = FencedLedger(lid, rh.last_add_confirmed)
                self.event(f"fenced ledger {lid} of {p.tag}: closed at "
                           f"{rh.last_add_confirmed}")
                if delete:
                    checker.retrying(lambda: bk.delete_ledger(lid, PASSWORD), 10.0)
                    self.fenced[lid] = FencedLedger(lid, rh.last_add_confirmed, deleted=True)
                    self.event(f"deleted ledger {lid} of {p.tag}")
            else:
                log = slot.log
                assert log is not None

                def take_over() -> int:
                    w = open_log_writer(bk, log, create_if_missing=False, password=PASSWORD)
                    lid = w.ledger_id
                    w.close()
                    return lid

                lid = checker.retrying(take_over, 10.0)
                self.event(f"took log {log} over from {p.tag} (harness ledger {lid})")
        finally:
            bk.close()

    # ---------------------------------------------------------------- wrong password
    def _wrong_password_live(self) -> None:
        ledgers = [lid for lid in self._all_ledgers()
                   if lid not in self.fenced or not self.fenced[lid].deleted]
        if not ledgers:
            self.event("wrong-password check: no ledger yet")
            return
        self._wrong_password(ledgers[-1])

    def _wrong_password(self, lid: int) -> None:
        """A client with the wrong password can neither open, fence, read, add nor delete."""
        bk = client(self.cluster.uri)
        refused, accepted = 0, []
        try:
            for recovery in (True, False):
                try:
                    bk.open_ledger(lid, WRONG_PASSWORD, recovery=recovery)
                    accepted.append(f"ledger {lid} opened (recovery={recovery}) with a wrong "
                                    f"password")
                except UnauthorizedError:
                    refused += 1
            wrong = master_key(WRONG_PASSWORD)
            for b in bk.ledger_metadata(lid).last_ensemble:
                bc = bk.bookies.get(b)
                try:
                    bc.read_lac(lid)  # only bookies that hold the ledger already
                except BKError:
                    continue
                attempts: list[tuple[str, Callable[[], object]]] = [
                    ("fence", lambda bc=bc: bc.fence(lid, wrong)),
                    ("fencing read", lambda bc=bc: bc.read_entries(
                        lid, entry_ids=[0], fence=True, master_key=wrong)),
                    ("read", lambda bc=bc: bc.read_entries(
                        lid, entry_ids=[0], master_key=wrong)),
                    ("read without a key", lambda bc=bc: bc.read_entries(
                        lid, entry_ids=[0])),
                    ("add", lambda bc=bc: _add_sync(bc, lid, wrong)),
                    ("delete", lambda bc=bc: bc.delete_ledger(lid, wrong)),
                ]
                for what, op in attempts:
                    try:
                        op()
                        accepted.append(f"bookie {b} accepted a {what} of ledger {lid} with a "
                                        f"wrong master key")
                    except UnauthorizedError:
                        refused += 1
                    except BKError as exc:
                        self.event(f"wrong-password {what} on {b}: {exc!r}")
        finally:
            bk.close()
        self.findings.counts["wrong_password_refused"] += refused
        self.findings.add("wrong_password", accepted)
        self.event(f"wrong-password check on ledger {lid}: {refused} refused, "
                   f"{len(accepted)} accepted")

    # ---------------------------------------------------------------- end of schedule
    def _finish_workload(self) -> None:
        crashed = [f"bookie-{s.index} (pid {s.process.pid}) died on its own"
                   for s in self.cluster.slots
                   if s.state in ("up", "paused") and s.process.proc is not None
                   and s.process.proc.poll() is not None]
        self.findings.add("bookie_crashes", crashed)
        try:
            readonly = [b.bookie_id for b in list_bookies(self.cluster.uri) if b.read_only]
            if readonly:
                self.event(f"readonly before healing: {readonly}")
        except Exception:  # noqa: BLE001 - only a note
            pass
        healed = self.cluster.heal(keep_forever=True)
        self.event("healed: " + (", ".join(healed) or "nothing to heal"))
        try:
            self.cluster.wait_writable(60)
        except FaultInjectionError as exc:
            self.event(f"after healing: {exc}")
        time.sleep(0.5)  # writers make progress on the healed cluster
        procs = [p for slot in self.slots.values() for p in slot.procs if p.alive]
        for p in procs:
            p.stop()
        stalled = []
        deadline = time.monotonic() + WRITER_STOP_TIMEOUT
        for p in procs:
            if not p.wait(max(0.1, deadline - time.monotonic())):
                stalled.append(f"{p.tag} did not finish within {WRITER_STOP_TIMEOUT:.0f}s of "
                               f"SIGTERM (last lines {p.lines[-3:]}); killed")
                p.kill9()
        for slot in self.slots.values():
            for t in slot.all_told():
                stalled += [f"{t.tag}: add {x} neither succeeded nor failed" for x in t.stuck]
        self.findings.add("stalled_writers", stalled)
        if self.observer is not None:
            self.observer.stop()
        self.event(f"writers stopped; observer read {len(self.observer.ledger_reads or {})} "
                   f"ledgers with {self.observer.errors} transient errors"
                   if self.observer else "writers stopped")

    def _check(self) -> None:
        uri = self.cluster.uri
        a, b = client(uri, 5.0), client(uri, 5.0)
        try:
            self._check_with(a, b)
        finally:
            a.close()
            b.close()

    def _check_with(self, a: BookKeeper, b: BookKeeper) -> None:
        obs = self.observer
        closed_ledgers = []
        for slot in self.slots.values():
            if slot.kind != "ledger":
                continue
            for told in slot.all_told():
                for lid in told.ledgers:
                    fenced = self.fenced.get(lid)
                    if fenced is not None:
                        self.findings.merge(checker.check_fenced_ledger(told, fenced))
                        if fenced.deleted:
                            continue
                    ra = checker.read_ledger(a, lid, recovery=True)
                    rb = checker.read_ledger(b, lid, recovery=False)
                    observed = obs.ledger_reads.get(lid, []) if obs else []
                    self.findings.merge(checker.check_ledger(told, lid, ra, rb, observed))
                    if not isinstance(ra, Exception) and ra.last_entry >= 0:
                        closed_ledgers.append(lid)
        for name in self.schedule.logs:
            writers = [t for slot in self.slots.values() if slot.log == name
                       for t in slot.all_told()]
            try:
                checker.recover_log(a, name)
            except Exception as exc:  # noqa: BLE001 - the reads below report it
                self.event(f"log {name}: recovery failed: {exc!r}")
            ra = checker.read_log(a, name)
            rb = checker.read_log(b, name)
            observed = obs.log_reads.get(name, []) if obs else []
            self.findings.merge(checker.check_log(name, writers, ra, rb, observed))
        if closed_ledgers:
            self._wrong_password(random.Random(self.schedule.seed).choice(closed_ledgers))
        if self.spark is not None:
            self.findings.merge(self.spark.check(a))
        n_writers = sum(len(s.procs) for s in self.slots.values())
        self.event(f"checked {n_writers} writer processes: {self.findings.acknowledged} "
                   f"acknowledged, counts {dict(self.findings.counts)}")

    def _check_healed(self) -> None:
        """Invariant: within :data:`HEAL_BOUND_S` every ledger is back to full replication:
        no closed fragment names a bookie lost forever, every bookie of a closed fragment
        holds every entry its write sets give it (asked as the Auditor asks), and no
        ledger is marked under-replicated. Open fragments are their writers' (every
        ledger of the workload was closed or recovered by the check)."""
        started = time.monotonic()
        for i in sorted(set(self.wiped)):  # each wiped bookie's self-repair completes
            if self.cluster.slots[i].state != "up":  # killed for good since: AutoRecovery's
                self.event(f"bookie-{i} wiped, then down for good: its repair ends with it")
                continue
            state = self._local().repair_state(i)
            while state != "done" and time.monotonic() - started < HEAL_BOUND_S:
                time.sleep(0.2)
                state = self._local().repair_state(i)
            if state == "done":
                self.findings.counts["repairs"] += 1
            else:
                self.findings.add("repair_incomplete", [f"bookie-{i}: {state}"])
        bk = client(self.cluster.uri, 5.0)
        urm = UnderReplicationManager(bk.zk, bk.msu.root)
        try:
            while True:
                lost = set(self._local().lost_bookies())
                bookies = list_bookies(bk.msu, zk=bk.zk)
                registered = {b.bookie_id for b in bookies}
                topology = Topology(tuple(sorted(b.bookie_id for b in bookies
                                                 if not b.read_only)))
                faulted = {self.cluster.bookie_id(i) for i in {*self.faulted, *self.wiped}}
                ledgers, not_healed, unplaced = 0, [], []
                for lid in bk.list_ledgers():
                    try:
                        md = bk.ledger_metadata(lid)
                    except NoSuchLedgerError:
                        continue
                    ledgers += 1
                    bad = {d.bookie for d in fragment_duties(md) if d.bookie in lost}
                    bad |= bookies_lacking_entries(bk, md, registered)
                    marked = urm.get(lid)
                    if bad or marked is not None:
                        missing = bad | (set(marked.missing) if marked else set())
                        what = (f"ledger {lid}: copies missing on {sorted(bad)}, marked "
                                f"{sorted(marked.missing) if marked else '-'}")
                        # healable only where placement finds a bookie to move them to;
                        # excused only for bookies a fault took down (a healthy bookie
                        # short of copies is a writer's or a repair's defect: seed 28001)
                        if missing <= unplaceable(md, missing, topology) & faulted:
                            unplaced.append(f"{what}; no writable bookie outside its "
                                            f"ensemble of {md.ensemble_size} "
                                            f"({len(topology.available)} writable)")
                        else:
                            not_healed.append(what)
                took = time.monotonic() - started
                if not not_healed or took > HEAL_BOUND_S:
                    break
                time.sleep(0.5)
        finally:
            bk.close()
        self.findings.add("not_healed", [f"after {took:.0f}s: {m}" for m in not_healed])
        self.findings.counts["heal_schedules"] += 1
        self.findings.counts["heal_ledgers"] += ledgers
        self.findings.counts["heal_ms"] += int(took * 1000)
        self.findings.counts["heal_unplaceable"] += len(unplaced)
        for m in unplaced:
            self.event(f"healing impossible here: {m}")
        self.event(f"healing: {ledgers} ledgers, {len(not_healed)} not back to full "
                   f"replication after {took:.1f}s"
                   + (f", {len(unplaced)} with no bookie to move their missing copies to"
                      if unplaced else ""))

    def cleanup(self) -> None:
        """Stop whatever still runs, heal everything and delete the schedule's data."""
        for slot in self.slots.values():
            for p in slot.procs:
                if p.alive:
                    p.kill9()
        if self.observer is not None:
            self.observer.stop()
        if self.spark is not None:
            self.spark.stop()
        try:
            self.cluster.heal()
            self.cluster.wait_writable(60)
        except Exception as exc:  # noqa: BLE001 - the next schedule heals again
            self.event(f"cleanup: heal failed: {exc!r}")
            return
        try:
            bk = client(self.cluster.uri, 5.0)
        except Exception as exc:  # noqa: BLE001
            self.event(f"cleanup: no client: {exc!r}")
            return
        try:
            logs = list(self.schedule.logs)
            if self.spark is not None:
                logs.extend((self.spark.dst, self.spark.side.name, self.spark.side_dst))
            for name in logs:
                try:
                    delete_log(bk, name, PASSWORD)
                except BKError:
                    pass
            for lid in self._all_ledgers():
                try:
                    bk.delete_ledger(lid, PASSWORD)
                except BKError:
                    pass
        finally:
            bk.close()


def _add_sync(bc, lid: int, key: bytes) -> None:  # type: ignore[no-untyped-def]
    """One add with ``key`` to one bookie; raises the bookie's typed error."""
    done = threading.Event()
    result: list[BKError | None] = []
    entry = pb.Entry(ledger_id=lid, entry_id=10**12, lac=-1, payload=b"intruder", digest=b"")

    def cb(err: BKError | None) -> None:
        result.append(err)
        done.set()

    bc.add_entry(lid, key, entry, cb)
    if not done.wait(10):
        raise BKTimeoutError("add timed out")
    if result[0] is not None:
        raise result[0]


_Action = Callable[[_ScheduleRun, Fault], "str | None"]

#: Each kind of fault -> (inject, undo): what injecting it does (returning the detail for
#: the schedule's event line) and what undoing it does once its duration is over (None:
#: nothing to undo, or undone by the healing between schedules). Every kind has a row
#: (tests/unit/test_fault_actions.py).
FAULT_ACTIONS: dict[FaultKind, tuple[_Action, _Action | None]] = {
    FaultKind.BOOKIE_KILL: (_ScheduleRun._kill_bookie, _ScheduleRun._restart_killed_bookie),
    FaultKind.BOOKIE_KILL_FOREVER: (_ScheduleRun._kill_bookie, None),
    FaultKind.BOOKIE_PAUSE: (_ScheduleRun._pause_bookie, _ScheduleRun._resume_bookie),
    FaultKind.BOOKIE_LOST: (_ScheduleRun._lose_bookie, None),
    **{k: (_ScheduleRun._wipe, None) for k in WIPING_KINDS},
    FaultKind.BOOKIE_DISK_FULL: (_ScheduleRun._fill_disk, None),
    FaultKind.ENTRY_LOG_CORRUPTION: (_ScheduleRun._corrupt_entry_log, None),
    FaultKind.JOURNAL_TAIL_TRUNCATION: (_ScheduleRun._tear_journal_tail,
                                        _ScheduleRun._restart_killed_bookie),
    FaultKind.ZK_RESTART: (_ScheduleRun._stop_zookeeper, _ScheduleRun._start_zookeeper),
    FaultKind.ZK_EXPIRE_BOOKIE: (_ScheduleRun._expire_bookie_session, None),
    FaultKind.ZK_EXPIRE_WRITER: (_ScheduleRun._expire_writer_session, None),
    FaultKind.WRITER_KILL: (_ScheduleRun._kill_writer, _ScheduleRun._respawn_writer),
    FaultKind.WRITER_KILL_MID_ROLL: (_ScheduleRun._kill_writer, _ScheduleRun._respawn_writer),
    FaultKind.WRITER_PAUSE_FENCE: (_ScheduleRun._fence_writer,
                                   _ScheduleRun._resume_fenced_writer),
    FaultKind.FENCE_DELETE: (_ScheduleRun._fence_writer, _ScheduleRun._resume_fenced_writer),
    FaultKind.FENCE: (_ScheduleRun._fence_writer, None),
    FaultKind.SPARK_DRIVER_KILL: (_ScheduleRun._kill_spark_driver, None),
    FaultKind.SPARK_LOG_TRUNCATE: (_ScheduleRun._change_spark_side_log, None),
    FaultKind.SPARK_LOG_RECREATE: (_ScheduleRun._change_spark_side_log, None),
    FaultKind.PARTITION_WRITER_BOOKIE: (_ScheduleRun._cut_writer_from_bookie,
                                        _ScheduleRun._heal_writer_from_bookie),
    FaultKind.PARTITION_BOOKIE_ZK: (_ScheduleRun._cut_bookie_from_zk,
                                    _ScheduleRun._heal_bookie_from_zk),
    FaultKind.PARTITION_ZK_LEADER_MINORITY: (_ScheduleRun._cut_zk_leader,
                                             _ScheduleRun._heal_zk),
    FaultKind.PARTITION_ZK_LEADER_MAJORITY: (_ScheduleRun._cut_zk_leader,
                                             _ScheduleRun._heal_zk),
    FaultKind.LINK_DELAY: (_ScheduleRun._delay_link, _ScheduleRun._clear_link),
    FaultKind.LINK_LOSS: (_ScheduleRun._lose_on_link, _ScheduleRun._clear_link),
}
