"""The independent checker: what clients were told against what readers read.

It knows only the writers' transcripts (transcript.py), what a tailing observer read during
the schedule, and what two fresh clients read after it. The invariants, each counted in
:class:`Findings` (every list must stay empty):

``lost``
    Every entry acknowledged to any client is readable after recovery, with its exact bytes
    (payloads.py derives them from the id), at the position the client was told; and a
    closed ledger's last entry is >= every acknowledged entry of it.
``divergent``
    All readers see one and the same sequence of every ledger and every log: client A
    (recovery open / log takeover) and client B (a separate client, non-fencing open) read
    identical sequences; everything the observer read while the schedule ran is a prefix of
    them; a ledger the writer closed itself ends where the writer was told it ends.
``duplicates``
    No log holds the same append twice.
``fence_violations``
    After it saw LedgerFenced / LogOwnershipLost, a writer never got a success.
``fenced_or_deleted_acks``
    No add is acknowledged to a ledger after it was fenced (or fenced and deleted): once
    a recovery closed it at entry L, no entry past L is ever acknowledged to its old writer,
    even when the ledger was deleted meanwhile (a deleted ledger's acknowledged entries up
    to L are not "lost": the harness deleted them on purpose).
``interleaved``
    A log never interleaves writers: each writer session's entries form one contiguous run
    (a session never reappears after another took over), every ledger holds one session's
    entries, and each writer's appends appear in the order it made them.
``corrupt``
    Every entry of every ledger and log read has the bytes its header says (no garbage, not
    even in entries nobody acknowledged).

The comparisons are pure functions over plain data (unit-tested with hand-made cases in
``tests/faults/test_checker.py``); :func:`read_ledger` and friends do the reading.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from bk_spark.core.client import BookKeeper
from bk_spark.errors import LogNotFoundError, NoSuchLedgerError
from bk_spark.faults.payloads import ledger_payload, log_payload, parse_log_payload
from bk_spark.faults.transcript import WriterTold
from bk_spark.faults.writers import PASSWORD
from bk_spark.log import open_log_reader, open_log_writer

T = TypeVar("T")

MAX_EXAMPLES = 5  # messages kept per invariant and ledger/log (the counts stay exact)


@dataclass
class Findings:
    """Violations found in one schedule (``counts``) with a few example messages each."""

    acknowledged: int = 0
    ledger_acks: int = 0
    log_acks: int = 0
    counts: Counter = field(default_factory=Counter)
    messages: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    INVARIANTS = ("lost", "divergent", "duplicates", "fence_violations",
                  "fenced_or_deleted_acks", "interleaved",
                  "corrupt", "bookie_crashes", "stalled_writers", "wrong_password",
                  "spark_mismatch", "silent_skips", "harness_errors", "not_healed",
                  "repair_incomplete")

    def add(self, invariant: str, messages: Iterable[str], count: int | None = None) -> None:
        msgs = list(messages)
        n = len(msgs) if count is None else count
        if n:
            self.counts[invariant] += n
            self.messages.extend(f"{invariant}: {m}" for m in msgs[:MAX_EXAMPLES])

    def merge(self, other: Findings) -> None:
        self.acknowledged += other.acknowledged
        self.ledger_acks += other.ledger_acks
        self.log_acks += other.log_acks
        self.counts.update(other.counts)
        self.messages.extend(other.messages)
        self.notes.extend(other.notes)

    @property
    def ok(self) -> bool:
        return not any(self.counts[k] for k in self.INVARIANTS)


# ================================================================================ ledgers


@dataclass(frozen=True)
class LedgerRead:
    """A ledger as one client read it after recovery: its last entry and every payload."""

    ledger_id: int
    last_entry: int
    payloads: tuple[bytes, ...]


@dataclass(frozen=True)
class FencedLedger:
    """A ledger the harness fenced: recovered (closed) at ``last_entry``, then deleted or
    not."""

    ledger_id: int
    last_entry: int
    deleted: bool = False


def check_fenced_ledger(told: WriterTold, fenced: FencedLedger) -> Findings:
    """``fenced_or_deleted_acks`` for one ledger the harness fenced; for a deleted one also
    the writer-side invariants (there is nothing left to read)."""
    f = Findings()
    t = told.ledgers[fenced.ledger_id]
    late = sorted({e for e in (*t.acked, *t.success_after_fence) if e > fenced.last_entry})
    what = "fenced and deleted" if fenced.deleted else "fenced"
    f.add("fenced_or_deleted_acks",
          [f"{told.tag}: ledger {fenced.ledger_id} was {what} (recovered at entry "
           f"{fenced.last_entry}) and its old writer got entry {e} acknowledged" for e in late])
    if fenced.deleted:
        f.acknowledged = f.ledger_acks = len(t.acked)
        f.add("fence_violations", _after_fence(told, fenced.ledger_id))
    return f


def _after_fence(told: WriterTold, ledger_id: int) -> list[str]:
    return [f"{told.tag}: ledger {ledger_id} entry {e} acknowledged after the writer saw the "
            f"fence" for e in told.ledgers[ledger_id].success_after_fence]


def check_ledger(told: WriterTold, ledger_id: int, a: LedgerRead | Exception,
                 b: LedgerRead | Exception, observed: list[bytes]) -> Findings:
    """The ledger invariants (module docstring) for one ledger of one ledger writer."""
    f = Findings()
    t = told.ledgers[ledger_id]
    f.acknowledged = f.ledger_acks = len(t.acked)
    f.add("fence_violations", _after_fence(told, ledger_id))
    if isinstance(a, Exception):
        f.add("lost", [f"ledger {ledger_id} ({told.tag}) unreadable after recovery: {a!r}"],
              count=len(t.acked))
        return f
    lost = []
    for e in t.acked:
        if e > a.last_entry:
            lost.append(f"ledger {ledger_id}: entry {e} was acknowledged to {told.tag} but "
                        f"the ledger is closed at {a.last_entry}")
        elif a.payloads[e] != ledger_payload(ledger_id, e):
            lost.append(f"ledger {ledger_id}: acknowledged entry {e} reads back as "
                        f"{a.payloads[e][:40]!r}")
    f.add("lost", lost)
    acked = set(t.acked)
    f.add("corrupt", [f"ledger {ledger_id}: entry {e} holds {p[:40]!r}"
                      for e, p in enumerate(a.payloads)
                      if e not in acked and p != ledger_payload(ledger_id, e)])
    divergent = []
    if t.closed_at is not None and t.closed_at != a.last_entry:
        divergent.append(f"ledger {ledger_id}: {told.tag} closed it at entry {t.closed_at}, "
                         f"the metadata says {a.last_entry}")
    if isinstance(b, Exception):
        divergent.append(f"ledger {ledger_id}: the second client could not read it: {b!r}")
    elif (b.last_entry, b.payloads) != (a.last_entry, a.payloads):
        divergent.append(f"ledger {ledger_id}: client A read {a.last_entry + 1} entries, "
                         f"client B {b.last_entry + 1}, first difference at entry "
                         f"{_first_difference(a.payloads, b.payloads)}")
    if list(a.payloads[:len(observed)]) != observed:
        divergent.append(f"ledger {ledger_id}: the observer read {len(observed)} entries "
                         f"during the schedule, first difference with the final read at entry "
                         f"{_first_difference(a.payloads, observed)}")
    f.add("divergent", divergent)
    return f


def _first_difference(a: Iterable, b: Iterable) -> int:
    la, lb = list(a), list(b)
    for i, (x, y) in enumerate(zip(la, lb, strict=False)):
        if x != y:
            return i
    return min(len(la), len(lb))


# ================================================================================ logs

#: One record of a log as read: (ledger id, entry id, payload).
LogRecordRead = tuple[int, int, bytes]


def check_log(name: str, writers: list[WriterTold], a: list[LogRecordRead] | Exception,
              b: list[LogRecordRead] | Exception, observed: list[list[LogRecordRead]]
              ) -> Findings:
    """The log invariants (module docstring) for log ``name`` written by ``writers``."""
    f = Findings()
    acks = [(w.tag, ack) for w in writers for ack in w.log_acks]
    f.acknowledged = f.log_acks = len(acks)
    f.add("fence_violations", [v for w in writers for v in w.fence_violations])
    if isinstance(a, Exception):
        f.add("lost", [f"log {name}: unreadable after recovery: {a!r}"], count=len(acks))
        return f
    at = {(lid, eid): payload for lid, eid, payload in a}
    lost = []
    for tag, ack in acks:
        want = log_payload(tag, ack.session, ack.seq)
        got = at.get((ack.ledger_id, ack.entry_id))
        if got != want:
            lost.append(f"log {name}: {tag} session {ack.session} seq {ack.seq} acknowledged "
                        f"at ({ack.ledger_id}, {ack.entry_id}) but the log holds "
                        f"{got[:40] if got is not None else None!r} there")
    f.add("lost", lost)
    ids = []
    corrupt = []
    for lid, eid, payload in a:
        pid = parse_log_payload(payload)
        if pid is None:
            corrupt.append(f"log {name}: entry ({lid}, {eid}) holds {payload[:40]!r}")
        ids.append(pid)
    f.add("corrupt", corrupt)
    seen = Counter((p.tag, p.seq) for p in ids if p is not None)
    f.add("duplicates", [f"log {name}: append {tag} seq {seq} appears {n} times"
                         for (tag, seq), n in seen.items() if n > 1])
    f.add("interleaved", interleavings(name, a))
    divergent = []
    if isinstance(b, Exception):
        divergent.append(f"log {name}: the second client could not read it: {b!r}")
    elif b != a:
        divergent.append(f"log {name}: client A read {len(a)} records, client B {len(b)}, "
                         f"first difference at record {_first_difference(a, b)}")
    for i, obs in enumerate(observed):
        if a[:len(obs)] != obs:
            divergent.append(f"log {name}: observer reading #{i} saw {len(obs)} records, "
                             f"not a prefix of the final log (first difference at record "
                             f"{_first_difference(a, obs)})")
    f.add("divergent", divergent)
    return f


def interleavings(name: str, records: list[LogRecordRead]) -> list[str]:
    """Violations of "a log never holds interleaved entries of two writers"."""
    out = []
    finished: set[str] = set()
    current: str | None = None
    last_seq: dict[str, int] = {}
    session_of_ledger: dict[int, str] = {}
    for lid, eid, payload in records:
        pid = parse_log_payload(payload)
        if pid is None:
            continue
        s = pid.writer_session
        if s != current:
            if s in finished:
                out.append(f"log {name}: writer session {s} appears again at ({lid}, {eid}) "
                           f"after {current} took over")
            if current is not None:
                finished.add(current)
            current = s
        if pid.seq <= last_seq.get(pid.tag, -1):
            out.append(f"log {name}: {pid.tag} seq {pid.seq} at ({lid}, {eid}) after seq "
                       f"{last_seq[pid.tag]}")
        last_seq[pid.tag] = max(pid.seq, last_seq.get(pid.tag, -1))
        other = session_of_ledger.setdefault(lid, s)
        if other != s:
            out.append(f"log {name}: ledger {lid} holds entries of {other} and {s}")
    return out


# ================================================================================ reading


def retrying(fn: Callable[[], T], timeout: float, pause: float = 0.5) -> T:
    """``fn()``, retried on any error until ``timeout`` (bookies may still be restarting)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except (NoSuchLedgerError, LogNotFoundError):
            raise
        except Exception:
            if time.monotonic() >= deadline:
                raise
            time.sleep(pause)


def read_ledger(bk: BookKeeper, ledger_id: int, recovery: bool, timeout: float = 30.0
                ) -> LedgerRead | Exception:
    """Open (recovering when ``recovery``) and read a whole ledger; the error if it cannot."""

    def read() -> LedgerRead:
        rh = bk.open_ledger(ledger_id, PASSWORD, recovery=recovery)
        if not rh.is_closed:
            raise RuntimeError(f"ledger {ledger_id} is not closed after recovery")
        last = rh.last_add_confirmed
        payloads = tuple(e.payload for e in rh.iter_entries(0, last)) if last >= 0 else ()
        return LedgerRead(ledger_id, last, payloads)

    try:
        return retrying(read, timeout)
    except Exception as exc:  # noqa: BLE001 - reported as a finding
        return exc


def recover_log(bk: BookKeeper, name: str, timeout: float = 30.0) -> None:
    """Recover a log as its next owner would: open a writer (which fences and recovers the
    last two ledgers of the list) and close it."""

    def take_over() -> None:
        w = open_log_writer(bk, name, create_if_missing=False, password=PASSWORD)
        w.close()

    retrying(take_over, timeout)


def read_log(bk: BookKeeper, name: str, timeout: float = 30.0
             ) -> list[LogRecordRead] | Exception:
    """Every record of log ``name`` from the earliest, or the error if it cannot."""

    def read() -> list[LogRecordRead]:
        r = open_log_reader(bk, name, "earliest", password=PASSWORD)
        return [(rec.position.ledger_id, rec.position.entry_id, rec.payload)
                for rec in r.read_available()]

    try:
        return retrying(read, timeout)
    except Exception as exc:  # noqa: BLE001 - reported as a finding
        return exc
