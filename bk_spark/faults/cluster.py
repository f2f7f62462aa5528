"""The fault suite's cluster: its own ZooKeeper plus bookie processes, and the faults.

Every fault is one method here, acting on real processes and real files; every process is
signalled by the PID this object recorded, never by name. The cluster is shared by many
schedules: :meth:`FaultCluster.heal` restarts only what a fault killed, resumes what it
paused and lifts what it limited.

Bookies run with small files so that faults meet rotations and collections often: 1 MiB
journal files, 1 MiB entry logs, a checkpoint every second and a GC every 3 seconds. Each
runs AutoRecovery (the default) with a lost-bookie delay of :data:`LOST_BOOKIE_DELAY_S`
(longer than the bookie kills the schedules undo, so that those are not re-replicated
every time) and a full check every :data:`AUDIT_INTERVAL_S`: a bookie lost forever or
wiped is healed within the runner's bound.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from kazoo.client import KazooClient

from bk_spark.io.registration import list_bookies
from bk_spark.sandbox import (
    BookieProcess,
    SandboxError,
    ZooKeeperServer,
    free_port,
    pid_alive,
    start_bookies,
    stop_bookies,
    wait_for_registrations,
)
from bookie_server.cookie import UNSAFE_SERVE_LOST_DATA_ENV
from bookie_server.journal import JOURNAL_SUFFIX, SPARE_PREFIX, RecordType, iter_file_records

LOST_BOOKIE_DELAY_S = 6.0
AUDIT_INTERVAL_S = 2.0
BOOKIE_ARGS = ("--journal-file-size-mb", "1", "--entry-log-size-mb", "1",
               "--max-entry-size", "262144", "--checkpoint-interval", "1",
               "--gc-interval", "3", "--disk-check-interval", "0.25",
               "--debug-expose-session",
               "--lost-bookie-recovery-delay", str(LOST_BOOKIE_DELAY_S),
               "--audit-interval", str(AUDIT_INTERVAL_S), "--open-ledger-grace", "10")
# No --recovery-password: every ledger the schedules write has a password (PASSWORD), and
# AutoRecovery must heal them, closed or left open, as it heals users' (issue 25); a wiped
# bookie's self-repair hands them to AutoRecovery (issue 26's no-password path).
ENTRY_LOG_HEADER = 16


class FaultInjectionError(Exception):
    """A fault could not be injected (its victim is not in a state that allows it)."""


@dataclass
class BookieSlot:
    """One bookie and what the faults did to it."""

    index: int
    process: BookieProcess
    state: str = "up"  # up | killed | paused
    limited: bool = False  # running with --max-disk-bytes
    forever: bool = False  # killed until the end of the schedule
    lost: bool = False  # lost forever: its data dir is gone (healed: an empty bookie)
    restarts: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def data_dir(self) -> Path:
        return self.process.data_dir


def dir_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (what a bookie's disk check counts)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                continue
    return total


class Slot(Protocol):
    """What the runner reads of one bookie of a cluster."""

    index: int
    state: str  # up | killed | paused
    limited: bool  # running with --max-disk-bytes
    forever: bool  # killed until the end of the schedule


class Cluster(Protocol):
    """What the fault runner needs of a cluster, local (:class:`FaultCluster`, one host) or
    networked (:class:`~bk_spark.faults.netcluster.NetFaultCluster`, the test bed): its
    bookies' lifecycle, ZooKeeper sessions and healing between schedules. Faults only one
    kind can inject (files of a local bookie, network cuts) need that class."""

    zk_down: bool

    @property
    def slots(self) -> Sequence[Slot]: ...

    @property
    def uri(self) -> str: ...

    @property
    def hosts(self) -> str: ...

    def bookie_id(self, i: int) -> str: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def pids(self) -> list[int]: ...

    def remove_data(self) -> None: ...

    def running_bookies(self) -> list[int]: ...

    def kill(self, i: int, forever: bool = False) -> None: ...

    def restart(self, i: int, max_disk_bytes: int | None = None) -> None: ...

    def pause(self, i: int) -> None: ...

    def resume(self, i: int) -> None: ...

    def expire_session(self, session_id: int, password: bytes) -> None: ...

    def heal(self, keep_forever: bool = False) -> list[str]: ...

    def wait_writable(self, timeout: float = 60.0) -> None: ...


class FaultCluster:
    """ZooKeeper + ``n_bookies`` bookies under ``base``; see the module docstring."""

    def __init__(self, base: Path, n_bookies: int = 5, root: str = "/faults") -> None:
        self.base = Path(base)
        self.zk = ZooKeeperServer(self.base / "zookeeper", port=free_port())
        self.root = root
        self.slots = [
            BookieSlot(i, BookieProcess(self.uri, self.base / f"bookie-{i}", port=free_port(),
                                        extra_args=list(BOOKIE_ARGS)))
            for i in range(n_bookies)
        ]
        self.zk_down = False
        self._starting: set[int] = set()  # launched while ZooKeeper was down (restart)

    @property
    def uri(self) -> str:
        return f"zk://127.0.0.1:{self.zk.port}{self.root}"

    @property
    def hosts(self) -> str:
        return self.zk.connect_string

    def bookie_id(self, i: int) -> str:
        return self.slots[i].process.bookie_id

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> None:
        self.zk.start(timeout=60)
        try:
            start_bookies([s.process for s in self.slots], timeout=60)
            wait_for_registrations(self.uri, len(self.slots), timeout=60)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for s in self.slots:
            if s.state == "paused":
                s.process.resume()
            s.state = "killed"
        stop_bookies([s.process for s in self.slots])
        self.zk.stop()

    def pids(self) -> list[int]:
        out = [s.process.pid for s in self.slots if s.process.pid is not None]
        if self.zk.proc is not None:
            out.append(self.zk.proc.pid)
        return out

    # ---------------------------------------------------------------- bookie faults
    def _slot(self, i: int, *states: str) -> BookieSlot:
        s = self.slots[i]
        if states and s.state not in states:
            raise FaultInjectionError(f"bookie-{i} is {s.state}")
        return s

    def kill(self, i: int, forever: bool = False) -> None:
        """``kill -9`` bookie ``i`` (no shutdown, no final checkpoint)."""
        s = self._slot(i, "up", "paused")
        s.process.kill()  # SIGKILL also ends a stopped process
        s.state = "killed"
        self._starting.discard(i)
        s.forever = s.forever or forever

    def lose(self, i: int) -> None:
        """Bookie lost forever: ``kill -9`` and remove its data directory (journal and
        entry logs; its own log file stays for the post-mortem). Never restarted within
        the schedule; :meth:`heal` brings an empty bookie back at its address."""
        self.kill(i, forever=True)
        s = self.slots[i]
        s.process.drop_data()
        s.lost = True

    def wipe(self, i: int) -> None:
        """Bookie wiped: ``kill -9``, empty its data directory, start it again at the same
        address: its directories lost their stamps while ZooKeeper keeps its cookie, so it
        enters self-repair (marks its ledgers, copies them back) before it serves."""
        self.kill(i)
        self.slots[i].process.drop_data()
        self.slots[i].process.env.pop(UNSAFE_SERVE_LOST_DATA_ENV, None)
        self.restart(i)

    def repair_state(self, i: int) -> str:
        """Bookie ``i``'s self-repair state (``none``, ``repairing``, ``done``), asked over
        ``Info``; ``unreachable`` when it does not answer."""
        from bk_spark.io.bookie_client import BookieClient, ClientConfig

        client = BookieClient(self.bookie_id(i), ClientConfig(read_timeout_s=2.0))
        try:
            return client.info().repair_state or "none"
        except Exception:  # noqa: BLE001 - down, paused, restarting
            return "unreachable"
        finally:
            client.close()

    def restart(self, i: int, max_disk_bytes: int | None = None) -> None:
        """Start a killed bookie again (optionally with a data directory size limit).

        A bookie checks its cookie in ZooKeeper before it listens (bookie_server/cookie.py),
        so with ZooKeeper down it cannot serve until ZooKeeper is back. Waiting for it here
        would hold the schedule's timeline, and with it the ZooKeeper restart the timeline
        brings, for three start-up timeouts (long seed 21: ZooKeeper down 185 s instead of
        0.8 s, writers stalled). So with ZooKeeper down the bookie is only launched, and
        :meth:`start_zookeeper` waits for it to serve."""
        s = self._slot(i, "killed")
        args = list(BOOKIE_ARGS)
        if max_disk_bytes is not None:
            args += ["--max-disk-bytes", str(max_disk_bytes)]
        s.process.extra_args = args
        s.limited = max_disk_bytes is not None
        if self.zk_down:
            for attempt in range(3):
                try:
                    s.process.launch()
                    break
                except SandboxError as exc:  # e.g. the port still held for a moment
                    if attempt == 2:
                        raise FaultInjectionError(f"bookie-{i} did not restart: {exc}") \
                            from exc
                    time.sleep(0.5)
            self._starting.add(i)
            s.state, s.forever, s.lost = "up", False, False
            s.restarts += 1
            return
        self._start(s)

    def _start(self, s: BookieSlot) -> None:
        """Start ``s``'s process and wait until it serves (three attempts)."""
        i = s.index
        last: Exception | None = None
        for _attempt in range(3):
            try:
                s.process.start(timeout=60)
                break
            except SandboxError as exc:  # e.g. the port still held for a moment
                last = exc
                if s.process.proc is not None:
                    s.process.kill()
                time.sleep(0.5)
        else:
            s.state = "killed"
            raise FaultInjectionError(f"bookie-{i} did not restart: {last}")
        s.state, s.forever, s.lost = "up", False, False
        s.restarts += 1

    def _wait_started(self) -> None:
        """Once ZooKeeper is back: wait for the bookies launched while it was down to serve
        (a launch that failed, e.g. its port still held, is started again)."""
        starting, self._starting = sorted(self._starting), set()
        for i in starting:
            s = self.slots[i]
            if s.state != "up" or s.process.proc is None:
                continue  # killed again meanwhile
            try:
                s.process.wait_ready(60)
            except SandboxError:
                s.process.kill()
                self._start(s)

    def pause(self, i: int) -> None:
        """SIGSTOP: the bookie stops answering, its connections stay open."""
        s = self._slot(i, "up")
        s.process.pause()
        s.state = "paused"

    def resume(self, i: int) -> None:
        s = self._slot(i, "paused")
        s.process.resume()
        s.state = "up"

    def fill_disk(self, i: int, headroom_kib: int) -> int:
        """Restart bookie ``i`` with ``--max-disk-bytes`` at its current size plus
        ``headroom_kib``: it turns readonly as soon as its data directory outgrows that."""
        s = self._slot(i, "up")
        s.process.kill()
        s.state = "killed"
        limit = dir_bytes(s.data_dir) + headroom_kib * 1024
        self.restart(i, max_disk_bytes=limit)
        return limit

    def corrupt_entry_log(self, i: int, n_bytes: int, salt: int) -> str:
        """Flip ``n_bytes`` bytes among the last 64 KiB of the bookie's newest entry log
        (recent entries: the copies the running schedule wrote)."""
        s = self.slots[i]
        logs = sorted((s.data_dir / "ledgers" / "logs").glob("*.log"))
        logs = [p for p in logs if p.stat().st_size > ENTRY_LOG_HEADER + 64]
        if not logs:
            raise FaultInjectionError(f"bookie-{i} has no entry log with entries yet")
        path = logs[-1]
        rng = random.Random(salt)
        fd = os.open(path, os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            lo = max(ENTRY_LOG_HEADER, size - 65536)
            offsets = sorted(rng.randrange(lo, size) for _ in range(n_bytes))
            for off in offsets:
                (byte,) = os.pread(fd, 1, off)
                os.pwrite(fd, bytes([byte ^ rng.randrange(1, 256)]), off)
        finally:
            os.close(fd)
        return f"{path.name} at {offsets}"

    def tear_journal_tail(self, i: int, tear: str, salt: int) -> str:
        """``kill -9`` the bookie, then tear its journal after the last valid record: cut
        the file there (``cut``), end it with a torn copy of that record
        (``torn-record``) or with a few garbage bytes (``garbage``). The bookie is left
        down; :meth:`restart` it. Acknowledged records are never touched."""
        self.kill(i)
        s = self.slots[i]
        rng = random.Random(salt)
        jdir = s.data_dir / "journal"
        files = sorted((p for p in jdir.glob(f"*{JOURNAL_SUFFIX}")
                        if not p.name.startswith(SPARE_PREFIX)),
                       key=lambda p: int(p.name[:-len(JOURNAL_SUFFIX)], 16))
        for path in reversed(files):
            seq = int(path.name[:-len(JOURNAL_SUFFIX)], 16)
            data = path.read_bytes()
            records = list(iter_file_records(memoryview(data), seq, 0))
            if records:
                break
        else:
            return "no journal records yet: nothing to tear"
        rtype, _body, end = records[-1]
        if rtype == RecordType.ROLL:
            return f"{path.name} ends with a roll: nothing to tear"
        start = records[-2][2] if len(records) > 1 else 0
        last = data[start:end]
        if tear == "cut":
            tail = b""
        elif tear == "torn-record":
            tail = last[:rng.randrange(1, len(last))]
        else:
            tail = rng.randbytes(rng.randint(1, 64))
        with open(path, "r+b") as f:
            f.seek(end)
            f.write(tail)
            f.truncate(end + len(tail))
            f.flush()
            os.fsync(f.fileno())
        return f"{path.name}: {tear} after offset {end} ({len(tail)} bytes)"

    def expire_bookie_session(self, i: int) -> str:
        s = self._slot(i, "up")
        try:
            sid_hex, pwd_hex = (s.data_dir / "zk-session").read_text().split()
        except (OSError, ValueError) as exc:
            raise FaultInjectionError(f"bookie-{i} exposed no ZooKeeper session") from exc
        self.expire_session(int(sid_hex, 16), bytes.fromhex(pwd_hex))
        return f"session {sid_hex}"

    # ---------------------------------------------------------------- ZooKeeper faults
    def expire_session(self, session_id: int, password: bytes) -> None:
        """Expire a ZooKeeper session: join it with a second client, then close that one."""
        if self.zk_down:
            raise FaultInjectionError("ZooKeeper is down")
        zk = KazooClient(hosts=self.hosts, client_id=(session_id, password), timeout=5.0)
        try:
            zk.start(timeout=10)
            zk.stop()
        finally:
            zk.close()

    def stop_zookeeper(self) -> None:
        """``kill -9`` ZooKeeper (it fsyncs its transaction log: nothing committed is lost)."""
        if self.zk_down:
            raise FaultInjectionError("ZooKeeper is already down")
        self.zk.kill()
        self.zk_down = True

    def start_zookeeper(self) -> None:
        if not self.zk_down:
            return
        for _attempt in range(3):
            try:
                self.zk.start(timeout=60)
                break
            except SandboxError:
                if self.zk.proc is not None:
                    self.zk.kill()
                time.sleep(0.5)
        else:
            raise FaultInjectionError("ZooKeeper did not restart")
        self.zk_down = False
        self._wait_started()

    # ---------------------------------------------------------------- healing
    def heal(self, keep_forever: bool = False) -> list[str]:
        """Undo every fault still in effect (except bookies killed ``forever`` when
        ``keep_forever``); returns what it did."""
        done = []
        if self.zk_down:
            self.start_zookeeper()
            done.append("zookeeper started")
        for s in self.slots:
            if s.state == "paused":
                self.resume(s.index)
                done.append(f"bookie-{s.index} resumed")
            if s.state == "up" and (s.limited or not pid_alive(s.process.pid or -1)):
                s.process.kill()
                s.state = "killed"
            if s.state == "killed" and not (keep_forever and s.forever):
                self.restart(s.index)
                done.append(f"bookie-{s.index} restarted")
        return done

    def wait_writable(self, timeout: float = 60.0) -> None:
        """Wait until every running bookie is registered writable."""
        want = {self.bookie_id(s.index) for s in self.slots if s.state == "up"}
        deadline = time.monotonic() + timeout
        seen: set[str] = set()
        while time.monotonic() < deadline:
            try:
                seen = {b.bookie_id for b in list_bookies(self.uri) if not b.read_only}
            except Exception:  # noqa: BLE001 - ZooKeeper still starting
                seen = set()
            if want <= seen:
                return
            time.sleep(0.2)
        raise FaultInjectionError(f"bookies not writable after {timeout:.0f}s: "
                                  f"{sorted(want - seen)}")

    def lost_bookies(self) -> list[str]:
        """Ids of the bookies lost forever (down, data gone) right now."""
        return [self.bookie_id(s.index) for s in self.slots if s.lost]

    def running_bookies(self) -> list[int]:
        return [s.index for s in self.slots if s.state == "up"]

    def remove_data(self) -> None:
        shutil.rmtree(self.base, ignore_errors=True)


def signal_pid(pid: int, sig: signal.Signals) -> bool:
    """Send ``sig`` to ``pid`` if it is alive; False if it is gone."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True
