"""Fault schedules: generated from a seed, pure (no I/O, no clock).

A :class:`Schedule` is everything a run needs to know up front: the workload (ledger writer
processes, log writer processes, dueling log writers, optionally a Spark sink) and the faults,
each with the time it starts (seconds after the workload started), how long it lasts and its
victim. :func:`generate` derives it from one integer seed with :class:`random.Random`, so the
same seed always yields the same schedule: a failing run prints its seed and
``python -m bk_spark.faults --seed <seed>`` replays it (the schedule is identical; process
timing, of course, is not).

The generator keeps the faults inside BookKeeper's fault model, because the invariants only
promise anything there:

* at most one bookie per schedule is *damaged*: it loses its copies (``kill -9`` and never
  restarted during the schedule) or gets a corrupt entry log. With ack quorum Qa >= 2 every
  acknowledged entry keeps an intact copy elsewhere. (Two damaged bookies may hold the only
  two copies of an entry: no replication protocol survives that.)
* at most ``max_unavailable`` bookies are unavailable at any moment (killed, paused,
  readonly): writers need spare bookies to change their ensembles; more only stalls them.
* one fault at a time per bookie, per writer and for ZooKeeper, so every fault can be undone
  by the one action that pairs with it.
* a wiped bookie restarts in self-repair (BP-46, :mod:`bookie_server.self_repair`): its
  ledgers fenced, UNKNOWN (never "no such entry") answered for what it lost until its
  entries are copied back, so a wipe fits every quorum, Qw = Qa included (served as if
  nothing happened, one wiped bookie could end a Qw = Qa ledger early). Two bookies are
  wiped in one schedule only one after the other: the second once the first's repair is
  done, so no acknowledged entry loses every copy.
* a truncated journal tail is a torn *unacknowledged* record (what a crash in the middle of a
  group commit leaves): cutting into a record the bookie acknowledged would be data loss,
  which the journal's fdatasync-before-acknowledging rules out.

The first fault of the schedule of seed ``s`` is kind ``s mod len(kinds)`` (when the workload
allows it), so any run of ``len(FaultKind)`` consecutive seeds injects every kind at least once.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Literal

from bk_spark.compat import StrEnum

Mode = Literal["short", "long"]


class FaultKind(StrEnum):
    """Every fault the harness injects (the value is the name the summary prints)."""

    BOOKIE_KILL = "bookie-kill"  # kill -9, restarted after `duration`
    BOOKIE_KILL_FOREVER = "bookie-kill-forever"  # kill -9, not restarted in the schedule
    BOOKIE_PAUSE = "bookie-pause"  # SIGSTOP, SIGCONT after `duration`
    BOOKIE_DISK_FULL = "bookie-disk-full"  # restarted with a data dir limit it soon exceeds
    ENTRY_LOG_CORRUPTION = "entry-log-corruption"  # bytes flipped in a recent entry log
    JOURNAL_TAIL_TRUNCATION = "journal-tail-truncation"  # kill -9, torn journal tail, restart
    ZK_RESTART = "zk-restart"  # ZooKeeper stopped, started again after `duration`
    ZK_EXPIRE_BOOKIE = "zk-expire-bookie"  # the bookie's ZooKeeper session expired
    ZK_EXPIRE_WRITER = "zk-expire-writer"  # a writer's ZooKeeper session expired
    WRITER_KILL = "writer-kill"  # kill -9 of a writer mid-stream; a new one later
    WRITER_KILL_MID_ROLL = "writer-kill-mid-roll"  # kill -9 of a log writer inside a roll
    WRITER_PAUSE_FENCE = "writer-pause-fence"  # SIGSTOP writer, fence it, SIGCONT
    FENCE = "fence"  # recovery-open a live writer's ledger / take over its log
    # SIGSTOP a ledger writer, recovery-open its ledger and delete it, SIGCONT: the old
    # writer keeps adding to a fenced-then-deleted ledger and must never be acknowledged
    FENCE_DELETE = "fence-delete"
    SPARK_DRIVER_KILL = "spark-driver-kill"  # kill -9 of the Spark driver, restart
    SPARK_LOG_TRUNCATE = "spark-log-truncate"  # truncate the log a query reads, while it runs
    SPARK_LOG_RECREATE = "spark-log-recreate"  # delete that log and create it again
    # AutoRecovery (the healing kinds, drawn apart: see HEALING_KINDS)
    BOOKIE_LOST = "bookie-lost-forever"  # kill -9, its data dir removed, never back
    BOOKIE_WIPED = "bookie-wiped"  # kill -9, data dir emptied, restarted at the same address
    # wiped, then kill -9 again while it repairs, and restarted: the repair resumes
    BOOKIE_WIPED_REPAIR_KILLED = "bookie-wiped-repair-killed"
    # wiped; once its repair is done, another bookie wiped (two in turn)
    BOOKIES_WIPED_IN_TURN = "bookies-wiped-in-turn"
    # Network faults (the test bed, bk_spark.faults.netcluster; `make faults-network`)
    PARTITION_WRITER_BOOKIE = "partition-writer-bookie"  # writers' host | one bookie
    PARTITION_BOOKIE_ZK = "partition-bookie-zk"  # a bookie | every ZooKeeper server
    PARTITION_ZK_LEADER_MINORITY = "partition-zk-leader-minority"  # leader | both followers
    PARTITION_ZK_LEADER_MAJORITY = "partition-zk-leader-majority"  # leader | one follower
    LINK_DELAY = "link-delay"  # what clients send a bookie arrives delay_ms later
    LINK_LOSS = "link-loss"  # a bookie's connections reset with loss_pct per chunk


BOOKIE_KINDS = frozenset({
    FaultKind.BOOKIE_KILL, FaultKind.BOOKIE_KILL_FOREVER, FaultKind.BOOKIE_PAUSE,
    FaultKind.BOOKIE_DISK_FULL, FaultKind.ENTRY_LOG_CORRUPTION,
    FaultKind.JOURNAL_TAIL_TRUNCATION, FaultKind.ZK_EXPIRE_BOOKIE,
    FaultKind.PARTITION_WRITER_BOOKIE, FaultKind.PARTITION_BOOKIE_ZK, FaultKind.LINK_DELAY,
    FaultKind.LINK_LOSS,
})
#: Bookie faults that make the bookie refuse writes while they last.
UNAVAILABLE_KINDS = frozenset({
    FaultKind.BOOKIE_KILL, FaultKind.BOOKIE_KILL_FOREVER, FaultKind.BOOKIE_PAUSE,
    FaultKind.BOOKIE_DISK_FULL, FaultKind.JOURNAL_TAIL_TRUNCATION, FaultKind.BOOKIE_LOST,
    FaultKind.BOOKIE_WIPED, FaultKind.PARTITION_WRITER_BOOKIE, FaultKind.PARTITION_BOOKIE_ZK,
    FaultKind.LINK_LOSS, FaultKind.BOOKIE_WIPED_REPAIR_KILLED, FaultKind.BOOKIES_WIPED_IN_TURN,
})
#: Faults that wipe a bookie (it restarts in self-repair; the runner waits for the repair).
WIPING_KINDS = frozenset({FaultKind.BOOKIE_WIPED, FaultKind.BOOKIE_WIPED_REPAIR_KILLED,
                          FaultKind.BOOKIES_WIPED_IN_TURN})
#: Faults that destroy or corrupt a bookie's copies: only the damaged bookie gets them.
DAMAGING_KINDS = frozenset({FaultKind.BOOKIE_KILL_FOREVER, FaultKind.ENTRY_LOG_CORRUPTION,
                            FaultKind.BOOKIE_LOST, *WIPING_KINDS})
#: Faults after which AutoRecovery must bring every ledger back to full replication
#: within the bound (the runner checks it: ``not_healed`` = 0). Drawn after every other
#: fault of a schedule, from a generator of their own, so that adding them left every
#: other fault of every seed as it was.
HEALING_KINDS = frozenset({FaultKind.BOOKIE_LOST, *WIPING_KINDS})
#: The short-mode seeds that get a healing fault, and which (make test runs these; two
#: bookies wiped in turn only in long mode: ``make test`` is at its time budget).
SHORT_MODE_HEALING = {3: FaultKind.BOOKIE_LOST, 9: FaultKind.BOOKIE_WIPED,
                      13: FaultKind.BOOKIE_WIPED_REPAIR_KILLED}
LONG_ONLY_KINDS = frozenset({FaultKind.BOOKIES_WIPED_IN_TURN})
WRITER_KINDS = frozenset({
    FaultKind.ZK_EXPIRE_WRITER, FaultKind.WRITER_KILL, FaultKind.WRITER_KILL_MID_ROLL,
    FaultKind.WRITER_PAUSE_FENCE, FaultKind.FENCE, FaultKind.FENCE_DELETE,
})
#: Writer faults only a ledger writer can take (a log's ledgers are the log's to delete).
LEDGER_WRITER_KINDS = frozenset({FaultKind.FENCE_DELETE})
#: Faults of the Spark workload: every Spark schedule has one of each.
SPARK_KINDS = frozenset({FaultKind.SPARK_DRIVER_KILL, FaultKind.SPARK_LOG_TRUNCATE,
                         FaultKind.SPARK_LOG_RECREATE})
#: Faults only the multi-host test bed can make (``generate(..., network=True)``).
NETWORK_KINDS: tuple[FaultKind, ...] = (
    FaultKind.PARTITION_WRITER_BOOKIE, FaultKind.PARTITION_BOOKIE_ZK,
    FaultKind.PARTITION_ZK_LEADER_MINORITY, FaultKind.PARTITION_ZK_LEADER_MAJORITY,
    FaultKind.LINK_DELAY, FaultKind.LINK_LOSS)
#: The kinds :func:`generate` draws (the Spark faults only with a Spark workload).
GENERAL_KINDS: tuple[FaultKind, ...] = tuple(
    k for k in FaultKind if k not in SPARK_KINDS | HEALING_KINDS and k not in NETWORK_KINDS)
#: What a network schedule draws: the network faults and the process faults the bed makes
#: (no disk, journal, entry log or single-ZooKeeper faults: those are the default suite's).
NETWORK_SCHEDULE_KINDS: tuple[FaultKind, ...] = (*NETWORK_KINDS, *(
    FaultKind.BOOKIE_KILL, FaultKind.BOOKIE_PAUSE, FaultKind.ZK_EXPIRE_WRITER,
    FaultKind.WRITER_KILL, FaultKind.WRITER_KILL_MID_ROLL, FaultKind.WRITER_PAUSE_FENCE,
    FaultKind.FENCE, FaultKind.FENCE_DELETE))
#: Target of the faults on the log the Spark side query reads (failOnDataLoss=false).
SPARK_SIDE = "spark-side"

ZOOKEEPER = "zookeeper"

#: The seeds ``make test`` runs (tests/faults/test_fault_schedules.py): one short schedule
#: led by each kind of fault (seed ``s`` opens with ``GENERAL_KINDS[s]``), which between
#: them inject every kind, the healing ones included (:data:`SHORT_MODE_HEALING`). The
#: 200 long schedules of ``make faults`` draw the rest.
SHORT_MODE_SEEDS = tuple(range(len(GENERAL_KINDS)))


@dataclass(frozen=True)
class LedgerWriterSpec:
    """A ledger writer process: creates ledgers of (E, Qw, Qa) and closes each after
    ``entries_per_ledger`` entries; replaced by a new process when a fault kills it."""

    name: str
    ensemble: int
    write_quorum: int
    ack_quorum: int
    entries_per_ledger: int


@dataclass(frozen=True)
class LogWriterSpec:
    """A log writer process rolling every ``roll_every`` entries. Writers with the same
    ``log`` duel: each takes the log back (fencing the other) whenever it lost it."""

    name: str
    log: str
    ensemble: int
    write_quorum: int
    ack_quorum: int
    roll_every: int


@dataclass(frozen=True)
class Fault:
    """One fault: injected ``at`` seconds into the schedule, undone ``duration`` seconds
    later (0: instantaneous; ``math.inf``: not within the schedule). ``target`` is
    ``bookie-<i>``, a writer name or ``zookeeper``."""

    kind: FaultKind
    at: float
    duration: float
    target: str
    params: tuple[tuple[str, float | int | str], ...] = ()

    def param(self, key: str, default: float | int | str | None = None
              ) -> float | int | str | None:
        return dict(self.params).get(key, default)

    @property
    def end(self) -> float:
        return self.at + self.duration

    def describe(self) -> str:
        dur = "" if self.duration == 0 else (
            " (forever)" if math.isinf(self.duration) else f" for {self.duration:.1f}s")
        extra = "".join(f" {k}={v}" for k, v in self.params)
        return f"t={self.at:5.2f}s {self.kind.value} {self.target}{dur}{extra}"


@dataclass(frozen=True)
class Schedule:
    """A workload and the faults injected into it; see the module docstring."""

    seed: int
    mode: Mode
    n_bookies: int
    duration: float
    ledger_writers: tuple[LedgerWriterSpec, ...]
    log_writers: tuple[LogWriterSpec, ...]
    faults: tuple[Fault, ...]
    damaged_bookie: int
    spark: bool = False
    network: bool = False

    @property
    def writer_names(self) -> list[str]:
        return [w.name for w in self.ledger_writers] + [w.name for w in self.log_writers]

    @property
    def logs(self) -> list[str]:
        return sorted({w.log for w in self.log_writers})

    def describe(self) -> str:
        lines = [f"schedule seed={self.seed} ({self.mode}, {self.n_bookies} bookies, "
                 + ("network, " if self.network else "") +
                 f"{self.duration:.1f}s, damaged bookie-{self.damaged_bookie})"]
        for w in self.ledger_writers:
            lines.append(f"  ledger writer {w.name}: E={w.ensemble} Qw={w.write_quorum} "
                         f"Qa={w.ack_quorum}, {w.entries_per_ledger} entries per ledger")
        for g in self.log_writers:
            lines.append(f"  log writer {g.name} on log {g.log}: E={g.ensemble} "
                         f"Qw={g.write_quorum} Qa={g.ack_quorum}, roll every {g.roll_every}")
        if self.spark:
            lines.append("  spark sink: input log -> streaming query -> output log")
            lines.append("  spark side query (failOnDataLoss=false): side log, truncated and "
                         "recreated while it runs -> side output log")
        lines.extend(f"  {f.describe()}" for f in self.faults)
        return "\n".join(lines)


# Quorums with Qa >= 2: one damaged bookie never holds the only copy of an acked entry.
QUORUMS = ((3, 3, 2), (3, 2, 2), (4, 3, 2), (4, 2, 2))


@dataclass
class _Occupancy:
    """Which victims are busy when, for the generator's constraints."""

    n_bookies: int
    max_unavailable: int
    busy: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    unavailable: list[tuple[float, float]] = field(default_factory=list)

    def free(self, target: str, start: float, end: float) -> bool:
        return all(end <= a or start >= b for a, b in self.busy.get(target, []))

    def unavailable_ok(self, start: float, end: float) -> bool:
        # The count of overlapping intervals only rises at interval starts.
        points = [start] + [a for a, _b in self.unavailable if start <= a < end]
        for p in points:
            n = sum(1 for a, b in self.unavailable if a <= p < b)
            if n + 1 > self.max_unavailable:
                return False
        return True

    def take(self, target: str, start: float, end: float, unavailable: bool) -> None:
        self.busy.setdefault(target, []).append((start, end))
        if unavailable:
            self.unavailable.append((start, end))


def _workload(rng: random.Random, seed: int, mode: Mode, spark: bool
              ) -> tuple[tuple[LedgerWriterSpec, ...], tuple[LogWriterSpec, ...]]:
    n_ledger = 1 if mode == "short" else rng.randint(1, 2)
    ledgers = tuple(
        LedgerWriterSpec(f"L{i}", *rng.choice(QUORUMS), entries_per_ledger=rng.randint(150, 600))
        for i in range(n_ledger))
    logs: list[LogWriterSpec] = []
    if rng.random() < (0.7 if mode == "short" else 0.9):
        logs.append(LogWriterSpec("G0", f"s{seed}-single", *rng.choice(QUORUMS),
                                  roll_every=rng.randint(25, 90)))
    if rng.random() < (0.35 if mode == "short" else 0.6):
        quorum = rng.choice(QUORUMS)
        for side in "ab":
            logs.append(LogWriterSpec(f"D{side}", f"s{seed}-duel", *quorum,
                                      roll_every=rng.randint(25, 90)))
    if spark and not any(g.name == "G0" for g in logs):  # the Spark sink reads G0's log
        logs.append(LogWriterSpec("G0", f"s{seed}-single", *rng.choice(QUORUMS),
                                  roll_every=rng.randint(25, 90)))
    return ledgers, tuple(logs)


def _duration_for(kind: FaultKind, rng: random.Random, mode: Mode) -> float:
    scale = 1.0 if mode == "short" else 2.0
    if kind in (FaultKind.BOOKIE_KILL_FOREVER, FaultKind.BOOKIE_DISK_FULL,
                FaultKind.BOOKIE_LOST):
        return math.inf
    if kind in WIPING_KINDS:
        return 0.0
    if kind in (FaultKind.ENTRY_LOG_CORRUPTION, FaultKind.ZK_EXPIRE_BOOKIE,
                FaultKind.ZK_EXPIRE_WRITER, FaultKind.FENCE, FaultKind.SPARK_LOG_TRUNCATE,
                FaultKind.SPARK_LOG_RECREATE):
        return 0.0
    if kind == FaultKind.JOURNAL_TAIL_TRUNCATION:
        return round(rng.uniform(0.2, 1.0) * scale, 2)
    if kind == FaultKind.ZK_RESTART:
        return round(rng.uniform(0.3, 2.5) * scale, 2)
    if kind in NETWORK_KINDS:  # a bookie's ZooKeeper session (10 s) may or may not expire
        return round(rng.uniform(1.0, 6.0) * scale, 2)
    if kind in (FaultKind.WRITER_KILL, FaultKind.WRITER_KILL_MID_ROLL,
                FaultKind.SPARK_DRIVER_KILL):
        return round(rng.uniform(0.2, 1.2) * scale, 2)  # until the replacement starts
    return round(rng.uniform(0.4, 2.5) * scale, 2)  # kills, pauses


def _params(kind: FaultKind, rng: random.Random) -> tuple[tuple[str, float | int | str], ...]:
    if kind == FaultKind.BOOKIE_DISK_FULL:
        return (("headroom_kib", rng.randint(0, 1536)),)
    if kind == FaultKind.ENTRY_LOG_CORRUPTION:
        return (("bytes", rng.randint(1, 4)), ("salt", rng.randrange(1 << 30)))
    if kind == FaultKind.JOURNAL_TAIL_TRUNCATION:
        return (("tear", rng.choice(("cut", "torn-record", "garbage"))),
                ("salt", rng.randrange(1 << 30)))
    if kind == FaultKind.LINK_DELAY:
        return (("delay_ms", rng.choice((5, 10, 50, 200))),)
    if kind == FaultKind.LINK_LOSS:
        return (("loss_pct", rng.choice((1, 5, 20))),)
    return ()


def _targets(kind: FaultKind, n_bookies: int, damaged: int, writers: list[str],
             log_writers: list[str]) -> list[str]:
    if kind in LEDGER_WRITER_KINDS:
        return [w for w in writers if w not in log_writers]
    if kind in DAMAGING_KINDS:
        return [f"bookie-{damaged}"]
    if kind in BOOKIE_KINDS:
        return [f"bookie-{i}" for i in range(n_bookies)]
    if kind == FaultKind.WRITER_KILL_MID_ROLL:
        return list(log_writers)
    if kind in WRITER_KINDS:
        return list(writers)
    if kind == FaultKind.SPARK_DRIVER_KILL:
        return ["spark"]
    return [ZOOKEEPER]


def generate(seed: int, mode: Mode = "short", n_bookies: int = 5, spark: bool = False,
             network: bool = False) -> Schedule:
    """The schedule of ``seed`` (deterministic; see the module docstring). With
    ``network``, a schedule for the test bed: its first fault is network kind
    ``seed mod len(NETWORK_KINDS)``, the others are drawn from
    :data:`NETWORK_SCHEDULE_KINDS` (and no Spark workload)."""
    if network and spark:
        raise ValueError("network schedules run no Spark sink")
    if n_bookies < 4:
        raise ValueError("the fault schedules need at least 4 bookies")
    rng = random.Random(seed)
    duration = round(rng.uniform(4.0, 6.0) if mode == "short" else rng.uniform(10.0, 25.0), 2)
    ledgers, logs = _workload(rng, seed, mode, spark)
    writers = [w.name for w in ledgers] + [g.name for g in logs]
    log_writers = [g.name for g in logs]
    damaged = rng.randrange(n_bookies)
    occ = _Occupancy(n_bookies, max_unavailable=2 if n_bookies >= 5 else 1)
    n_faults = rng.randint(2, 4) if mode == "short" else rng.randint(3, 9)
    # network schedules: the network kinds drawn twice as often as the process kinds
    pool = (*NETWORK_KINDS, *NETWORK_SCHEDULE_KINDS) if network else GENERAL_KINDS
    kinds = [k for k in pool
             if (k != FaultKind.WRITER_KILL_MID_ROLL or log_writers)
             and (k not in LEDGER_WRITER_KINDS or ledgers)]
    faults: list[Fault] = []
    if spark:
        at = round(rng.uniform(0.3, duration * 0.6), 2)
        faults.append(Fault(FaultKind.SPARK_DRIVER_KILL, at,
                            _duration_for(FaultKind.SPARK_DRIVER_KILL, rng, mode), "spark",
                            (("after_commit_s", round(rng.uniform(0.0, 2.0), 2)),)))
    first = (NETWORK_KINDS[seed % len(NETWORK_KINDS)] if network
             else GENERAL_KINDS[seed % len(GENERAL_KINDS)])
    for i in range(n_faults):
        for _attempt in range(30):
            kind = first if i == 0 and first in kinds else rng.choice(kinds)
            if i == 0 and _attempt > 0:
                kind = rng.choice(kinds)
            at = round(rng.uniform(0.3, duration * 0.85), 2)
            dur = _duration_for(kind, rng, mode)
            end = at + (dur if dur > 0 else 0.05)
            candidates = _targets(kind, n_bookies, damaged, writers, log_writers)
            rng.shuffle(candidates)
            unavailable = kind in UNAVAILABLE_KINDS
            target = next((t for t in candidates if occ.free(t, at, end)
                           and (not unavailable or occ.unavailable_ok(at, end))), None)
            if target is None:
                continue
            occ.take(target, at, end, unavailable)
            faults.append(Fault(kind, at, dur, target, _params(kind, rng)))
            break
    if spark:  # drawn last: the other faults of a seed stay what they were
        faults.append(Fault(FaultKind.SPARK_LOG_TRUNCATE,
                            round(rng.uniform(0.3, duration * 0.45), 2), 0.0, SPARK_SIDE))
        faults.append(Fault(FaultKind.SPARK_LOG_RECREATE,
                            round(rng.uniform(duration * 0.5, duration * 0.85), 2), 0.0,
                            SPARK_SIDE))
    # network schedules get no healing fault: the test bed's runner does not check healing
    healing = None if network else _healing_fault(seed, mode, duration, damaged, occ,
                                                  (*ledgers, *logs))
    if healing is not None:
        faults.append(healing)
    faults.sort(key=lambda f: (f.at, f.kind.value, f.target))
    return Schedule(seed=seed, mode=mode, n_bookies=n_bookies, duration=duration,
                    ledger_writers=ledgers, log_writers=logs, faults=tuple(faults),
                    damaged_bookie=damaged, spark=spark, network=network)


def _healing_fault(seed: int, mode: Mode, duration: float, damaged: int, occ: _Occupancy,
                   writers: tuple[LedgerWriterSpec | LogWriterSpec, ...]) -> Fault | None:
    """The schedule's healing fault (:data:`HEALING_KINDS`), if it gets one: in short mode
    the seeds of :data:`SHORT_MODE_HEALING`, in long mode one schedule in four. Its own
    generator: the other faults of the seed are what they were before it existed. The
    victim is the damaged bookie, free from then on (two bookies wiped in turn: the
    second is chosen by the runner once the first is repaired)."""
    rng = random.Random(seed * 1_000_003 + 14)
    if mode == "short":
        kind = SHORT_MODE_HEALING.get(seed % 20)
    else:
        kind = rng.choice(sorted(HEALING_KINDS)) if rng.random() < 0.25 else None
    if kind is None:
        return None
    target = f"bookie-{damaged}"
    dur = _duration_for(kind, rng, mode)
    for _attempt in range(30):
        at = round(rng.uniform(0.3, duration * 0.7), 2)
        end = at + (dur if dur > 0 else 0.05)
        if occ.free(target, at, end) and occ.unavailable_ok(at, end):
            occ.take(target, at, end, True)
            return Fault(kind, at, dur, target)
    return None


def bookie_index(target: str) -> int:
    """``bookie-3`` -> 3."""
    if not target.startswith("bookie-"):
        raise ValueError(f"not a bookie target: {target!r}")
    return int(target.removeprefix("bookie-"))
