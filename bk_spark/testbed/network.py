"""The test bed's "hosts": Linux network namespaces on a private bridge, or loopback addresses.

With namespaces (root, ``ip netns``), every host is a namespace ``<prefix>-<host>`` with one
interface ``eth0`` whose veth peer sits on the bridge ``br0`` of a switch namespace
``<prefix>-sw``. Nothing is created in the machine's own namespace: the addresses (a private
/24, :data:`SUBNET`) exist only inside the test bed's namespaces, so they can neither clash with
nor leave this machine, and two test beds can run side by side. A process runs on a host when
started under ``ip netns exec <ns>`` (which execs, so its PID is the process's). Network
faults work per host: a partition pins each side's ARP entry for the other to a MAC address
that no host has, so packets silently vanish; delay and loss are
``tc netem`` on a host's ``eth0`` when the kernel has it.

Without namespaces, every host is a distinct loopback address ``127.0.0.x`` in the machine's
namespace (all of 127/8 routes to ``lo``); processes then share one network and network
faults are skipped (:attr:`Network.faults` is False, with a message saying so).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from dataclasses import dataclass

from bk_spark.errors import TestBedError

log = logging.getLogger(__name__)

#: The private /24 of the namespaced hosts (first three octets).
SUBNET = "10.213.0"
#: A locally administered MAC address no interface of the test bed has (partitions).
NOWHERE_MAC = "02:00:00:00:de:ad"
#: Loopback addresses of the fallback start here: 127.0.0.<LOOPBACK_BASE + i>.
LOOPBACK_BASE = 100


@dataclass(frozen=True)
class Host:
    """One test-bed host: a name, its address, and its namespace (None: loopback mode)."""

    name: str
    address: str
    netns: str | None

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` as run on this host."""
        return ["ip", "netns", "exec", self.netns, *argv] if self.netns else list(argv)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def namespaces_available() -> tuple[bool, str]:
    """Whether network namespaces can be made here, and if not, why (for the message)."""
    if os.geteuid() != 0:
        return False, "not root"
    if shutil.which("ip") is None:
        return False, "iproute2's `ip` is not installed"
    probe = f"bktb-probe-{os.getpid()}"
    res = _ip("netns", "add", probe, check=False)
    if res.returncode != 0:
        return False, f"`ip netns add` failed: {res.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return True, ""


class Network:
    """The hosts of one test bed, made and removed together."""

    def __init__(self, prefix: str, use_namespaces: bool | None = None) -> None:
        self.prefix = prefix
        ok, why = (namespaces_available() if use_namespaces in (None, True)
                   else (False, "namespaces turned off"))
        if use_namespaces and not ok:
            raise TestBedError(f"network namespaces requested but unavailable: {why}")
        self.namespaces = ok
        self.why_not = why
        self.hosts: dict[str, Host] = {}
        self._made: list[str] = []  # namespaces to delete, in creation order
        self._shaped: set[str] = set()
        if self.namespaces:
            try:
                self._netns_add(self.switch)
                _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
                _ip("-n", self.switch, "link", "set", "br0", "up")
            except BaseException:
                self.remove()
                raise
        else:
            log.warning("network namespaces unavailable (%s): hosts are loopback addresses "
                        "127.0.0.x on one network, and network faults are skipped", why)

    @property
    def switch(self) -> str:
        return f"{self.prefix}-sw"

    @property
    def faults(self) -> bool:
        """Whether partitions can be injected (namespaces only)."""
        return self.namespaces

    def _netns_add(self, name: str) -> None:
        _ip("netns", "add", name)
        self._made.append(name)
        _ip("-n", name, "link", "set", "lo", "up")

    def add_host(self, name: str) -> Host:
        """A new host named ``name`` with the next free address."""
        i = len(self.hosts) + 1
        if self.namespaces:
            ns = f"{self.prefix}-{name}"
            self._netns_add(ns)
            port = f"v{i}"
            _ip("link", "add", port, "netns", self.switch, "type", "veth",
                "peer", "name", "eth0", "netns", ns)
            _ip("-n", self.switch, "link", "set", port, "master", "br0")
            _ip("-n", self.switch, "link", "set", port, "up")
            address = f"{SUBNET}.{10 + i}"
            _ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            host = Host(name, address, ns)
        else:
            host = Host(name, f"127.0.0.{LOOPBACK_BASE + i}", None)
        self.hosts[name] = host
        return host

    # -- faults (namespaces only) --------------------------------------------------
    def _need_faults(self) -> None:
        if not self.faults:
            raise TestBedError(f"network faults need namespaces ({self.why_not})")

    def partition(self, a: Host, b: Host) -> None:
        """Cut ``a`` from ``b`` both ways: packets between them silently vanish, as on a cut
        link (connections hang and time out rather than fail fast).

        Each side's neighbour entry for the other is pinned to a MAC address nobody has
        (:data:`NOWHERE_MAC`), so the bridge delivers their frames to no host. This needs
        neither netfilter nor tc classifiers, which this kernel may lack.
        """
        self._need_faults()
        for x, y in ((a, b), (b, a)):
            _ip("-n", x.netns or "", "neigh", "replace", y.address, "lladdr", NOWHERE_MAC,
                "dev", "eth0", "nud", "permanent")

    def heal(self, a: Host, b: Host) -> None:
        """Undo :meth:`partition` (the neighbours are looked up again by ARP)."""
        self._need_faults()
        for x, y in ((a, b), (b, a)):
            _ip("-n", x.netns or "", "neigh", "del", y.address, "dev", "eth0", check=False)

    def netem_available(self) -> bool:
        """Whether ``tc netem`` works here (the kernel needs the sch_netem module)."""
        if not self.namespaces or shutil.which("tc") is None or not self.hosts:
            return False
        host = next(iter(self.hosts.values()))
        ok = subprocess.run(host.wrap(["tc", "qdisc", "add", "dev", "eth0", "root", "netem",
                                       "delay", "1ms"]), capture_output=True).returncode == 0
        if ok:
            subprocess.run(host.wrap(["tc", "qdisc", "del", "dev", "eth0", "root"]),
                           capture_output=True)
        return ok

    def shape(self, host: Host, delay_ms: float = 0.0, loss_pct: float = 0.0) -> None:
        """Delay and/or drop the packets ``host`` sends (``tc netem`` on its ``eth0``)."""
        self._need_faults()
        args = ["tc", "qdisc", "replace", "dev", "eth0", "root", "netem"]
        if delay_ms:
            args += ["delay", f"{delay_ms}ms"]
        if loss_pct:
            args += ["loss", f"{loss_pct}%"]
        res = subprocess.run(host.wrap(args), capture_output=True, text=True)
        if res.returncode != 0:
            raise TestBedError(f"tc netem on {host.name}: {res.stderr.strip()} "
                               f"(does the kernel have sch_netem?)")
        self._shaped.add(host.name)

    def unshape(self, host: Host) -> None:
        subprocess.run(host.wrap(["tc", "qdisc", "del", "dev", "eth0", "root"]),
                       capture_output=True)
        self._shaped.discard(host.name)

    # -- teardown ---------------------------------------------------------------------
    def pids(self) -> list[int]:
        """PIDs of every process still inside this network's namespaces."""
        out: list[int] = []
        for ns in self._made:
            res = _ip("netns", "pids", ns, check=False)
            out += [int(p) for p in res.stdout.split() if p.strip().isdigit()]
        return out

    def remove(self) -> None:
        """Delete every namespace this network made (their veths and the bridge go along)."""
        for ns in reversed(self._made):
            _ip("netns", "del", ns, check=False)
        self._made.clear()
        self.hosts.clear()


def leftover_namespaces(prefix: str = "bktb-") -> list[str]:
    """Test-bed namespaces present on this machine (to check a teardown)."""
    res = _ip("netns", "list", check=False)
    return [line.split()[0] for line in res.stdout.splitlines()
            if line.startswith(prefix)]


def remove_leftovers(prefix: str = "bktb-") -> list[str]:
    """Kill (by PID) what runs in test-bed namespaces left by a killed run, delete them.

    Only for namespaces no running test bed owns: call it by hand
    (``python -m bk_spark.testbed --clean``), never from a test.
    """
    import signal

    removed = leftover_namespaces(prefix)
    for ns in removed:
        res = _ip("netns", "pids", ns, check=False)
        for pid in (int(p) for p in res.stdout.split() if p.isdigit()):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _ip("netns", "del", ns, check=False)
    return removed
