"""The fault suite on the multi-host test bed: network faults (``make faults-network``).

:class:`NetFaultCluster` offers the runner what :class:`~bk_spark.faults.cluster.FaultCluster`
offers (``uri``, ``slots``, ``kill``/``restart``/``pause``/``resume``, ``heal``,
``wait_writable``, ``expire_session``) on a :class:`~bk_spark.testbed.TestBed` with a
3-server ZooKeeper ensemble, 5 bookies on 5 hosts, each behind a link
(:mod:`bk_spark.testbed.link`), and the network faults the single-host cluster cannot make:

``partition-writer-bookie``
    the writers' host cut from one bookie (two such faults at once cut it from two): adds
    to it hang until the add timeout, the writer changes its ensemble.
``partition-bookie-zk``
    a bookie cut from every ZooKeeper server: its session expires if the cut outlasts it,
    it leaves the bookie list, and registers again once healed.
``partition-zk-leader-minority``
    the ZooKeeper leader cut from both followers: the majority elects a new leader, the
    clients of the old one reconnect elsewhere.
``partition-zk-leader-majority``
    the leader cut from one follower: the leader keeps its quorum, the cut follower drops
    its clients.
``link-delay`` / ``link-loss``
    the link in front of a bookie delays what clients send it (``delay_ms``) or resets
    connections (``loss_pct`` per relayed chunk). This kernel has no ``tc netem``.

Every partition goes through :meth:`bk_spark.testbed.network.Network.partition` (the one
home of partitions). The harness process itself runs on the bed's client host: after the bed
is up, :func:`enter_host` moves the calling thread (the main thread, before any client or
thread exists) into the client's namespace, so its writers, observer and checker reach the
bed's addresses and nothing else.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from kazoo.client import KazooClient

from bk_spark.faults.cluster import BOOKIE_ARGS, FaultInjectionError
from bk_spark.io.registration import list_bookies
from bk_spark.testbed.bed import BOOKIE_PORT, TestBed, TestBedConfig
from bk_spark.testbed.network import Host, namespaces_available

CLONE_NEWNET = 0x40000000


def enter_host(host: Host) -> None:
    """Move the calling thread into ``host``'s network namespace (threads it starts later
    and processes it spawns inherit it). Call it before any thread exists."""
    assert host.netns is not None
    fd = os.open(f"/run/netns/{host.netns}", os.O_RDONLY)
    try:
        setns = getattr(os, "setns", None)
        if setns is not None:  # Python >= 3.12
            setns(fd, CLONE_NEWNET)
        else:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.setns(fd, CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"setns into {host.netns}: {os.strerror(err)}")
    finally:
        os.close(fd)


def network_faults_available() -> tuple[bool, str]:
    """Whether the network fault suite can run here, and if not why (for the message)."""
    return namespaces_available()


@dataclass
class NetBookieSlot:
    """One bookie of the bed and what the faults did to it (the runner's view)."""

    index: int
    bed: TestBed
    state: str = "up"  # up | killed | paused
    limited: bool = False
    forever: bool = False
    restarts: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"bk{self.index + 1}"

    @property
    def process(self) -> SimpleNamespace:
        proc = self.bed.procs[self.name]
        return SimpleNamespace(pid=proc.pid, proc=proc.popen)


class NetFaultCluster:
    """The bed and its faults; see the module docstring."""

    def __init__(self, base: Path, n_bookies: int = 5, root: str = "/faults") -> None:
        self.bed = TestBed(TestBedConfig(
            zookeepers=3, bookies=n_bookies, spark=False, use_namespaces=True,
            base_dir=Path(base), root=root, links=True, bookie_args=list(BOOKIE_ARGS)))
        self.slots = [NetBookieSlot(i, self.bed) for i in range(n_bookies)]
        self.zk_down = False
        self._cuts: set[tuple[str, str]] = set()  # partitions in effect (host names)
        self._linked: set[str] = set()  # bookies whose link delays or loses

    @property
    def uri(self) -> str:
        return self.bed.metadata_service_uri

    @property
    def hosts(self) -> str:
        return self.uri.removeprefix("zk://").split("/", 1)[0]

    def bookie_id(self, i: int) -> str:
        return f"{self.bed.host(self.slots[i].name).address}:{BOOKIE_PORT}"

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> None:
        self.bed.start()
        enter_host(self.bed.client)

    def stop(self) -> None:
        self.bed.stop()

    def pids(self) -> list[int]:
        return [p.pid for p in self.bed.procs.values() if p.alive()]

    def remove_data(self) -> None:
        import shutil

        shutil.rmtree(self.bed.base, ignore_errors=True)

    def running_bookies(self) -> list[int]:
        return [s.index for s in self.slots if s.state == "up"]

    # ---------------------------------------------------------------- process faults
    def _slot(self, i: int, *states: str) -> NetBookieSlot:
        s = self.slots[i]
        if states and s.state not in states:
            raise FaultInjectionError(f"bookie-{i} is {s.state}")
        return s

    def kill(self, i: int, forever: bool = False) -> None:
        s = self._slot(i, "up", "paused")
        self.bed.kill(s.name)
        s.state = "killed"
        s.forever = s.forever or forever

    def restart(self, i: int, max_disk_bytes: int | None = None) -> None:
        if max_disk_bytes is not None:
            raise FaultInjectionError("the network fault suite does not limit disks")
        s = self._slot(i, "killed")
        self.bed.restart(s.name)
        s.state, s.forever = "up", False
        s.restarts += 1

    def pause(self, i: int) -> None:
        s = self._slot(i, "up")
        os.killpg(self.bed.procs[s.name].pid, signal.SIGSTOP)
        s.state = "paused"

    def resume(self, i: int) -> None:
        s = self._slot(i, "paused")
        os.killpg(self.bed.procs[s.name].pid, signal.SIGCONT)
        s.state = "up"

    def expire_session(self, session_id: int, password: bytes) -> None:
        """Expire a ZooKeeper session: join it with a second client, then close that one."""
        zk = KazooClient(hosts=self.hosts, client_id=(session_id, password), timeout=5.0)
        try:
            zk.start(timeout=10)
            zk.stop()
        finally:
            zk.close()

    def _unsupported(self, *_args: object) -> str:
        raise FaultInjectionError("not a fault of the network suite")

    fill_disk = corrupt_entry_log = tear_journal_tail = expire_bookie_session = _unsupported
    stop_zookeeper = start_zookeeper = _unsupported

    # ---------------------------------------------------------------- network faults
    def _cut(self, a: str, b: str) -> None:
        net = self.bed.network
        assert net is not None
        net.partition(self.bed.host(a), self.bed.host(b))
        self._cuts.add((a, b))

    def _uncut(self, a: str, b: str) -> None:
        net = self.bed.network
        assert net is not None
        net.heal(self.bed.host(a), self.bed.host(b))
        self._cuts.discard((a, b))

    def cut_writer_from(self, i: int) -> str:
        """Cut the writers' (client) host from bookie ``i``."""
        self._cut("client", self.slots[i].name)
        return f"client | {self.slots[i].name}"

    def heal_writer_from(self, i: int) -> None:
        self._uncut("client", self.slots[i].name)

    def cut_bookie_from_zk(self, i: int) -> str:
        name = self.slots[i].name
        for z in self.bed.zk_hosts:
            self._cut(name, z.name)
        return f"{name} | {' '.join(z.name for z in self.bed.zk_hosts)}"

    def heal_bookie_from_zk(self, i: int) -> None:
        for z in self.bed.zk_hosts:
            self._uncut(self.slots[i].name, z.name)

    def cut_zk_leader(self, majority: bool) -> str:
        """Cut the ZooKeeper leader from both followers (it is the minority) or, with
        ``majority``, from one follower only (it keeps a quorum)."""
        leader = self.bed.zk_leader()
        if leader is None:
            raise FaultInjectionError("no ZooKeeper leader right now")
        followers = [h.name for h in self.bed.zk_hosts if h.name != leader]
        cut = followers[:1] if majority else followers
        for f in cut:
            self._cut(leader, f)
        side = "majority" if majority else "minority"
        return f"leader {leader} ({side} side) | {' '.join(cut)}"

    def heal_zk(self) -> None:
        for a, b in list(self._cuts):
            if a.startswith("zk") and b.startswith("zk"):
                self._uncut(a, b)

    def set_link(self, i: int, delay_ms: float = 0.0, loss_pct: float = 0.0) -> str:
        name = self.slots[i].name
        self.bed.set_link(name, delay_ms, loss_pct)
        if delay_ms or loss_pct:
            self._linked.add(name)
        else:
            self._linked.discard(name)
        return f"link to {name}: delay {delay_ms:g} ms, loss {loss_pct:g}%"

    # ---------------------------------------------------------------- healing
    def heal(self, keep_forever: bool = False) -> list[str]:
        """Undo every fault still in effect (except bookies killed ``forever`` when
        ``keep_forever``); returns what it did."""
        done = []
        for a, b in sorted(self._cuts):
            self._uncut(a, b)
            done.append(f"healed {a} | {b}")
        for name in sorted(self._linked):
            self.bed.set_link(name)
            done.append(f"link to {name} clean")
        self._linked.clear()
        for s in self.slots:
            if s.state == "paused":
                self.resume(s.index)
                done.append(f"bookie-{s.index} resumed")
            if s.state == "up" and not self.bed.procs[s.name].alive():
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
            except Exception:  # noqa: BLE001 - ZooKeeper electing
                seen = set()
            if want <= seen:
                return
            time.sleep(0.2)
        raise FaultInjectionError(f"bookies not writable after {timeout:.0f}s: "
                                  f"{sorted(want - seen)}")
