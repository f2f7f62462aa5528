"""What the writer processes told: their stdout lines, parsed (pure).

The checker knows nothing but this: a writer prints a line the moment its client told it
something (an acknowledgement, a fence, a close), flushed at once, so a writer killed with
``kill -9`` has printed every acknowledgement it received before dying (a line may be cut
short by the kill: :func:`parse` ignores lines it cannot parse).

Ledger writer lines (``bk_spark.faults.writers ledger``)::

    zk <session id hex> <password hex>       its ZooKeeper session (for session expiry)
    ledger <ledger id> <E> <Qw> <Qa>         created a ledger
    ack <ledger id> <entry id>               an add was acknowledged
    fenced <ledger id>                       the client said LedgerFenced (or closed by another)
    fail <ledger id> <error type>            another error; the ledger is abandoned
    closed <ledger id> <last entry id>       closed the ledger as its writer
    ok-after-fence <ledger id> <entry id>    an add succeeded after the writer saw the fence
    stale-refused <ledger id> <n>            n adds of a stale handle were all refused
    stale-skipped <ledger id>                the recovery did not close the ledger in time
    stuck <ledger id> <entry id>             an add neither succeeded nor failed in time

Log writer lines (``bk_spark.faults.writers log``)::

    zk <session id hex> <password hex>
    open <session> <ledger id>               became the log's writer (session = 1, 2, ...)
    ack <session> <seq> <ledger id> <entry id> <ledger index>
    roll-cas <session> <new ledger id>       a roll's CAS succeeded (the roll is not over)
    lost <session> <ledger id>               LogOwnershipLost: another writer took the log
    fail <session> <error type>              another error; the writer is reopened
    ok-after-lost <session> <ledger id> <entry id>   a success after the writer lost the log
    stale-refused <ledger id> <n>
    stuck-log <session> <seq>                an append neither succeeded nor failed in time
    closed <session>                         closed the log writer
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class LedgerTold:
    """What one ledger writer process was told about one of its ledgers."""

    ledger_id: int
    quorum: tuple[int, int, int]
    acked: list[int] = field(default_factory=list)
    closed_at: int | None = None
    fenced: bool = False
    failed: str | None = None
    success_after_fence: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class LogAck:
    """One acknowledged log append."""

    session: int
    seq: int
    ledger_id: int
    entry_id: int
    ledger_index: int


@dataclass
class WriterTold:
    """Everything one writer process was told, parsed from its stdout."""

    kind: str  # "ledger" or "log"
    tag: str
    ledgers: dict[int, LedgerTold] = field(default_factory=dict)  # ledger writers
    log: str | None = None
    log_acks: list[LogAck] = field(default_factory=list)  # log writers
    sessions: dict[int, int] = field(default_factory=dict)  # session -> its first ledger
    lost: list[int] = field(default_factory=list)  # sessions that lost the log
    success_after_lost: list[tuple[int, int, int]] = field(default_factory=list)
    stale_refused: int = 0
    zk_session: tuple[int, bytes] | None = None
    roll_cas: int = 0
    stuck: list[str] = field(default_factory=list)  # adds that never completed

    @property
    def acknowledged(self) -> int:
        return len(self.log_acks) + sum(len(t.acked) for t in self.ledgers.values())

    @property
    def fence_violations(self) -> list[str]:
        out = [f"{self.tag}: ledger {t.ledger_id} entry {e} acknowledged after the writer saw "
               f"the fence" for t in self.ledgers.values() for e in t.success_after_fence]
        out += [f"{self.tag}: session {s} got ledger {lid} entry {e} acknowledged after it "
                f"lost the log" for s, lid, e in self.success_after_lost]
        return out


def parse(kind: str, tag: str, lines: list[str], log: str | None = None) -> WriterTold:
    """Parse a writer's stdout lines; unknown or truncated lines are skipped."""
    told = WriterTold(kind=kind, tag=tag, log=log)
    for line in lines:
        try:
            _parse_line(told, line.split())
        except (ValueError, IndexError, KeyError):
            continue  # cut short by kill -9, or noise
    return told


def _parse_line(told: WriterTold, w: list[str]) -> None:
    if not w:
        return
    op = w[0]
    if op == "zk":
        told.zk_session = (int(w[1], 16), bytes.fromhex(w[2]))
    elif op == "stale-refused":
        told.stale_refused += int(w[2])
    elif op in ("stuck", "stuck-log"):
        told.stuck.append(" ".join(w[1:]))
    elif told.kind == "ledger":
        _parse_ledger_line(told, op, w)
    else:
        _parse_log_line(told, op, w)


def _parse_ledger_line(told: WriterTold, op: str, w: list[str]) -> None:
    if op == "ledger":
        lid = int(w[1])
        told.ledgers[lid] = LedgerTold(lid, (int(w[2]), int(w[3]), int(w[4])))
        return
    if op not in ("ack", "fenced", "fail", "closed", "ok-after-fence"):
        return
    t = told.ledgers[int(w[1])]
    if op == "ack":
        t.acked.append(int(w[2]))
    elif op == "fenced":
        t.fenced = True
    elif op == "fail":
        t.failed = w[2]
    elif op == "closed":
        t.closed_at = int(w[2])
    else:
        t.success_after_fence.append(int(w[2]))


def _parse_log_line(told: WriterTold, op: str, w: list[str]) -> None:
    if op == "open":
        told.sessions[int(w[1])] = int(w[2])
    elif op == "ack":
        told.log_acks.append(LogAck(int(w[1]), int(w[2]), int(w[3]), int(w[4]), int(w[5])))
    elif op == "lost":
        told.lost.append(int(w[1]))
    elif op == "ok-after-lost":
        told.success_after_lost.append((int(w[1]), int(w[2]), int(w[3])))
    elif op == "roll-cas":
        told.roll_cas += 1
