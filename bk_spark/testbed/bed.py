"""The multi-host test bed: a ZooKeeper ensemble, bookies on their own hosts, Spark standalone.

Layout (one host each, see :mod:`bk_spark.testbed.network`)::

    zk1 zk2 zk3          QuorumPeerMain from pyspark's jars, client port 2181, -Xmx256m
    bk1 .. bk5           bookies, listening on 0.0.0.0 (namespaces) and registering their
                         host's address (--advertised-address); rack /rack-<1|2|3> when
                         `bk bookie` has --rack
    master               Spark standalone master, port 7077
    worker1 worker2      Spark workers, --cores 1 --memory 1g
    connect              Spark Connect server (started on demand: it holds cores)
    client               where drivers, `bk` commands and checks run

Every process is started in a session of its own and stopped by its PID (its process group:
Spark executors and Python workers are in their worker's group); with namespaces, whatever is
still inside a namespace is killed by PID too, then the namespaces are deleted. :meth:`stop`
runs on context exit, on failure and at interpreter exit (atexit).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from bk_spark.sandbox import BOOKIE_COMMAND, java_executable, pid_alive, zookeeper_classpath
from bk_spark.testbed.network import Host, Network, TestBedError

log = logging.getLogger(__name__)

QUORUM_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
ZK_CLIENT_PORT, ZK_QUORUM_PORT, ZK_ELECTION_PORT = 2181, 2888, 3888
BOOKIE_PORT = 3181
SPARK_MASTER_PORT = 7077
CONNECT_PORT = 15002
#: The checkout (for PYTHONPATH: Spark's Python workers find ``pyspark_bookkeeper`` there).
CHECKOUT = Path(__file__).resolve().parents[2]


@dataclass
class TestBedConfig:
    """What to start. Defaults are the issue's bed: 3 ZooKeepers, 5 bookies, 2 workers."""

    __test__ = False  # not a pytest test class

    zookeepers: int = 3
    bookies: int = 5
    racks: int = 3
    workers: int = 2
    spark: bool = True
    use_namespaces: bool | None = None  # None: namespaces when possible, else loopback
    base_dir: Path | None = None  # logs and data (default: a new temporary directory)
    zk_heap_mb: int = 256
    spark_daemon_memory: str = "256m"
    root: str = "/ledgers"
    #: Namespaces only: a link (:mod:`bk_spark.testbed.link`, a TCP relay that can add delay
    #: and lose connections) in front of every bookie, on the bookie's host and address.
    links: bool = False
    bookie_args: list[str] = field(default_factory=list)  # more `bookie_server` arguments


@dataclass
class Proc:
    """One process of the bed."""

    name: str
    host: Host
    popen: subprocess.Popen
    log_path: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


@dataclass
class TestBed:
    """A running multi-host cluster on this machine; use as a context manager."""

    __test__ = False  # not a pytest test class

    config: TestBedConfig = field(default_factory=TestBedConfig)

    def __post_init__(self) -> None:
        self.base = Path(self.config.base_dir or tempfile.mkdtemp(prefix="bktb-")).resolve()
        self.base.mkdir(parents=True, exist_ok=True)
        (self.base / "logs").mkdir(exist_ok=True)
        self.network: Network | None = None
        self.procs: dict[str, Proc] = {}
        self.rack_flag = False
        self._stopped = False

    # -- hosts and processes ------------------------------------------------------------
    def host(self, name: str) -> Host:
        assert self.network is not None
        return self.network.hosts[name]

    @property
    def client(self) -> Host:
        return self.host("client")

    def _spawn(self, name: str, host: Host, argv: list[str], env: dict[str, str] | None = None
               ) -> Proc:
        log_path = self.base / "logs" / f"{name}.log"
        with open(log_path, "ab") as out:
            popen = subprocess.Popen(host.wrap(argv), stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})},
                                     start_new_session=True, cwd=self.base)
        proc = Proc(name, host, popen, log_path)
        self.procs[name] = proc
        return proc

    def spawn_client(self, name: str, argv: list[str]) -> Proc:
        """Start ``argv`` on the client host in the background (output in its log)."""
        return self._spawn(name, self.client, argv, self.client_env(self.client))

    def run(self, argv: list[str], host: Host | None = None, env: dict[str, str] | None = None,
            timeout: float = 300.0, check: bool = True) -> subprocess.CompletedProcess:
        """Run ``argv`` to completion on ``host`` (default: the client host)."""
        host = host or self.client
        res = subprocess.run(host.wrap(argv), capture_output=True, text=True, timeout=timeout,
                             env={**os.environ, **self.client_env(host), **(env or {})},
                             stdin=subprocess.DEVNULL, cwd=self.base)
        if check and res.returncode != 0:
            raise TestBedError(f"{' '.join(argv[:3])}... on {host.name} exited "
                               f"{res.returncode}:\n{res.stdout[-2000:]}\n{res.stderr[-3000:]}")
        return res

    def listening(self, host: Host, port: int, address: str | None = None) -> bool:
        """Whether something on ``host`` listens on TCP ``port`` (on ``address``, default
        the host's address, or on all)."""
        address = address or host.address
        res = subprocess.run(host.wrap(["ss", "-Hltn", f"sport = :{port}"]),
                             capture_output=True, text=True)
        for line in res.stdout.splitlines():
            parts = line.split()
            if len(parts) >= 4:
                addr = parts[3].rsplit(":", 1)[0]
                if addr in (address, "0.0.0.0", "*", "[::]", f"[::ffff:{address}]"):
                    return True
        return False

    def wait_listening(self, proc: Proc, port: int, timeout: float = 60.0,
                       address: str | None = None) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not proc.alive():
                raise TestBedError(f"{proc.name} exited with {proc.popen.returncode} while "
                                   f"starting:\n{proc.log_tail()}")
            if self.listening(proc.host, port, address):
                return
            time.sleep(0.25)
        raise TestBedError(f"{proc.name} does not listen on {proc.host.address}:{port} after "
                           f"{timeout:.0f}s:\n{proc.log_tail()}")

    # -- ZooKeeper ensemble ---------------------------------------------------------------
    @property
    def zk_hosts(self) -> list[Host]:
        return [self.host(f"zk{i}") for i in range(1, self.config.zookeepers + 1)]

    @property
    def metadata_service_uri(self) -> str:
        hosts = ",".join(f"{h.address}:{ZK_CLIENT_PORT}" for h in self.zk_hosts)
        return f"zk://{hosts}{self.config.root}"

    def _start_zookeeper(self, i: int) -> Proc:
        host = self.host(f"zk{i}")
        data = self.base / f"zk{i}"
        data.mkdir(exist_ok=True)
        (data / "myid").write_text(f"{i}\n")
        servers = "".join(f"server.{j}={h.address}:{ZK_QUORUM_PORT}:{ZK_ELECTION_PORT}\n"
                          for j, h in enumerate(self.zk_hosts, start=1))
        (data / "zoo.cfg").write_text(
            "tickTime=500\ninitLimit=20\nsyncLimit=10\n"
            f"dataDir={data}\nclientPort={ZK_CLIENT_PORT}\nclientPortAddress={host.address}\n"
            "admin.enableServer=false\nmaxClientCnxns=0\n"
            "preAllocSize=1024\nsnapCount=100000\n" + servers)
        argv = [java_executable(), f"-Xmx{self.config.zk_heap_mb}m", "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1", "-Dzookeeper.log.dir=" + str(data),
                "-cp", zookeeper_classpath(), QUORUM_MAIN, str(data / "zoo.cfg")]
        return self._spawn(f"zk{i}", host, argv)

    def zk_leader(self) -> str | None:
        """Name of the ZooKeeper host that leads (only a leader listens on the quorum port)."""
        for h in self.zk_hosts:
            proc = self.procs.get(h.name)
            if proc is not None and proc.alive() and self.listening(h, ZK_QUORUM_PORT):
                return h.name
        return None

    def wait_zk_leader(self, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            leader = self.zk_leader()
            if leader is not None:
                return leader
            time.sleep(0.25)
        tails = "\n".join(f"--- {h.name}\n{self.procs[h.name].log_tail(10)}"
                          for h in self.zk_hosts if h.name in self.procs)
        raise TestBedError(f"no ZooKeeper leader after {timeout:.0f}s\n{tails}")

    def kill(self, name: str) -> None:
        """SIGKILL one process of the bed (a crash), by its PID's process group."""
        proc = self.procs[name]
        _signal_group(proc.pid, signal.SIGKILL)
        proc.popen.wait()

    def restart(self, name: str) -> Proc:
        """Start a stopped or killed ZooKeeper (``zkN``) or bookie (``bkN``) again, same data."""
        old = self.procs.get(name)
        if old is not None and old.alive():
            raise TestBedError(f"{name} is running (pid {old.pid})")
        i = int(name[2:])
        if name.startswith("zk"):
            proc = self._start_zookeeper(i)
            self.wait_listening(proc, ZK_CLIENT_PORT)
        elif name.startswith("bk"):
            proc = self._start_bookie(i)
            self.wait_listening(proc, BOOKIE_PORT, address=self._bookie_listen(proc.host))
        else:
            raise TestBedError(f"cannot restart {name}: only zkN and bkN")
        return proc

    def kill_zk_leader(self) -> str:
        """Kill -9 the current ZooKeeper leader; returns its host name."""
        leader = self.wait_zk_leader()
        self.kill(leader)
        return leader

    # -- bookies --------------------------------------------------------------------------
    def _bookie_supports_rack(self) -> bool:
        res = subprocess.run([*BOOKIE_COMMAND, "--help"],
                             capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
        return "--rack" in res.stdout

    @property
    def linked(self) -> bool:
        """Whether every bookie sits behind a link (:attr:`TestBedConfig.links`)."""
        return self.config.links and self.network is not None and self.network.namespaces

    def _bookie_listen(self, host: Host) -> str:
        return "127.0.0.1" if self.linked else host.address

    def link_control(self, name: str) -> Path:
        """The control file of bookie ``name``'s link."""
        return self.base / "links" / f"{name}.json"

    def set_link(self, name: str, delay_ms: float = 0.0, loss_pct: float = 0.0) -> None:
        """Delay / lose connections on the link in front of bookie ``name`` (0, 0: clean)."""
        from bk_spark.testbed.link import LinkSettings, write_control

        if not self.linked:
            raise TestBedError("links need namespaces and TestBedConfig(links=True)")
        write_control(self.link_control(name), LinkSettings(delay_ms, loss_pct))

    def _start_link(self, i: int) -> Proc:
        host = self.host(f"bk{i}")
        control = self.link_control(host.name)
        control.parent.mkdir(exist_ok=True)
        if not control.exists():
            self.set_link(host.name)
        argv = [sys.executable, "-m", "bk_spark.testbed.link",
                "--listen", f"{host.address}:{BOOKIE_PORT}",
                "--target", f"127.0.0.1:{BOOKIE_PORT}", "--control", str(control)]
        proc = self._spawn(f"link-bk{i}", host, argv)
        self.wait_listening(proc, BOOKIE_PORT)
        return proc

    def _start_bookie(self, i: int) -> Proc:
        host = self.host(f"bk{i}")
        if self.linked:  # behind its link: listen on the host's loopback, register the link
            addr = ["--host", "127.0.0.1", "--advertised-address", host.address]
        elif host.netns:  # its own host: listen everywhere, register the host's address
            addr = ["--host", "0.0.0.0", "--advertised-address", host.address]
        else:  # loopback hosts share one network: listen on the host's address only
            addr = ["--host", host.address]
        argv = [*BOOKIE_COMMAND, *addr, "--port", str(BOOKIE_PORT),
                "--metadata-service-uri", self.metadata_service_uri,
                "--data-dir", str(self.base / f"bk{i}"), "--journal-file-size-mb", "8",
                *self.config.bookie_args]
        if self.rack_flag:
            argv += ["--rack", f"/rack-{(i - 1) % self.config.racks + 1}"]
        return self._spawn(f"bk{i}", host, argv)

    def bookies(self) -> list[dict]:
        """``bk bookies --json`` as seen from the client host."""
        res = self.run([bk_command(), "bookies", "--json", "-m", self.metadata_service_uri],
                       timeout=60)
        return json.loads(res.stdout)

    def wait_bookies(self, n: int, timeout: float = 60.0) -> list[dict]:
        deadline = time.monotonic() + timeout
        seen: list[dict] = []
        while time.monotonic() < deadline:
            seen = [b for b in self.bookies() if b["mode"] == "rw"]
            if len(seen) >= n:
                return seen
            time.sleep(0.5)
        raise TestBedError(f"{len(seen)} of {n} bookies registered after {timeout:.0f}s")

    # -- Spark ----------------------------------------------------------------------------
    @property
    def spark_master_url(self) -> str:
        return f"spark://{self.host('master').address}:{SPARK_MASTER_PORT}"

    def spark_env(self, host: Host) -> dict[str, str]:
        return {"SPARK_LOCAL_IP": host.address, "SPARK_LOCAL_HOSTNAME": host.address,
                "SPARK_DAEMON_MEMORY": self.config.spark_daemon_memory,
                "SPARK_LOG_DIR": str(self.base / "logs"),
                "SPARK_WORKER_DIR": str(self.base / f"{host.name}-work"),
                "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
                "PYTHONPATH": _pythonpath()}

    def client_env(self, host: Host) -> dict[str, str]:
        return self.spark_env(host)

    def _start_master(self) -> Proc:
        host = self.host("master")
        argv = [_spark_bin("spark-class"), "org.apache.spark.deploy.master.Master",
                "--host", host.address, "--port", str(SPARK_MASTER_PORT), "--webui-port", "0"]
        return self._spawn("master", host, argv, self.spark_env(host))

    def _start_worker(self, i: int) -> Proc:
        host = self.host(f"worker{i}")
        argv = [_spark_bin("spark-class"), "org.apache.spark.deploy.worker.Worker",
                self.spark_master_url, "--host", host.address, "--cores", "1",
                "--memory", "1g", "--webui-port", "0",
                "--work-dir", str(self.base / f"{host.name}-work")]
        return self._spawn(f"worker{i}", host, argv, self.spark_env(host))

    def wait_workers(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        for i in range(1, self.config.workers + 1):
            proc = self.procs[f"worker{i}"]
            while "Successfully registered with master" not in proc.log_tail(200):
                if not proc.alive() or time.monotonic() > deadline:
                    raise TestBedError(f"{proc.name} did not register with the master:\n"
                                       f"{proc.log_tail()}")
                time.sleep(0.5)

    def submit_argv(self, script: str | Path, *args: str,
                    conf: dict[str, str] | None = None) -> list[str]:
        """``spark-submit --master spark://...`` of ``script`` (run it with :meth:`run`)."""
        confs = {"spark.executor.memory": "512m", "spark.executor.cores": "1",
                 "spark.cores.max": str(self.config.workers), "spark.ui.enabled": "false",
                 "spark.log.level": "ERROR", **(conf or {})}
        argv = [_spark_bin("spark-submit"), "--master", self.spark_master_url,
                "--driver-memory", "512m"]
        for k, v in confs.items():
            argv += ["--conf", f"{k}={v}"]
        return [*argv, str(script), *args]

    def start_connect(self, timeout: float = 120.0) -> str:
        """Start a Spark Connect server (an app on the master); returns its ``sc://`` URL."""
        host = self.host("connect")
        argv = [_spark_bin("spark-submit"), "--master", self.spark_master_url,
                "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
                "--driver-memory", "768m", "--conf", "spark.executor.memory=512m",
                "--conf", f"spark.cores.max={self.config.workers}",
                "--conf", "spark.ui.enabled=false",
                "--conf", f"spark.connect.grpc.binding.address={host.address}",
                "--conf", f"spark.connect.grpc.binding.port={CONNECT_PORT}",
                "--conf", "spark.sql.python.filterPushdown.enabled=true"]
        # spark-submit gives a server class (Thrift, Connect) SPARK_DAEMON_MEMORY as its
        # driver memory, and a Spark driver needs at least ~450 MiB.
        env = {**self.spark_env(host), "SPARK_DAEMON_MEMORY": "768m"}
        proc = self._spawn("connect", host, argv, env)
        self.wait_listening(proc, CONNECT_PORT, timeout)
        return f"sc://{host.address}:{CONNECT_PORT}"

    def stop_process(self, name: str) -> None:
        """Stop one process (SIGTERM to its group, SIGKILL after 10 s)."""
        proc = self.procs.get(name)
        if proc is not None:
            _stop_group(proc)

    def executor_apps(self) -> dict[str, list[str]]:
        """Per worker, the applications that ran executors there (their work directories)."""
        out: dict[str, list[str]] = {}
        for i in range(1, self.config.workers + 1):
            work = self.base / f"worker{i}-work"
            out[f"worker{i}"] = sorted(p.name for p in work.glob("app-*")) if work.exists() \
                else []
        return out

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> TestBed:
        atexit.register(self.stop)
        cfg = self.config
        try:
            self.network = Network(f"bktb-{uuid.uuid4().hex[:6]}", cfg.use_namespaces)
            names = [f"zk{i}" for i in range(1, cfg.zookeepers + 1)]
            names += [f"bk{i}" for i in range(1, cfg.bookies + 1)]
            if cfg.spark:
                names += ["master"] + [f"worker{i}" for i in range(1, cfg.workers + 1)]
                names += ["connect"]
            names.append("client")
            for name in names:
                self.network.add_host(name)
            zks = [self._start_zookeeper(i) for i in range(1, cfg.zookeepers + 1)]
            if cfg.spark:  # the JVMs start while ZooKeeper elects its leader
                self.wait_listening(self._start_master(), SPARK_MASTER_PORT, 120)
                for i in range(1, cfg.workers + 1):
                    self._start_worker(i)
            for z in zks:
                self.wait_listening(z, ZK_CLIENT_PORT)
            if cfg.zookeepers > 1:  # one server runs standalone: no leader
                self.wait_zk_leader()
            self.rack_flag = self._bookie_supports_rack()
            for i in range(1, cfg.bookies + 1):
                if self.linked:
                    self._start_link(i)
                self._start_bookie(i)
            self.wait_bookies(cfg.bookies, timeout=90)
            if cfg.spark:
                self.wait_workers()
        except BaseException:
            self.stop()
            raise
        return self

    def describe(self) -> str:
        """The hosts and what runs on each (for the demo's output)."""
        assert self.network is not None
        mode = ("network namespaces on a private bridge" if self.network.namespaces else
                f"loopback addresses (no namespaces: {self.network.why_not}; "
                f"network faults skipped)")
        lines = [f"test bed: {len(self.network.hosts)} hosts, {mode}"]
        for h in self.network.hosts.values():
            proc = self.procs.get(h.name)
            what = f"pid {proc.pid}" if proc and proc.alive() else "-"
            lines.append(f"  {h.name:<8} {h.address:<14} {what}")
        lines.append(f"metadata service: {self.metadata_service_uri}")
        if self.config.spark:
            lines.append(f"spark master:     {self.spark_master_url}")
        return "\n".join(lines)

    def stop(self) -> None:
        """Stop every process by PID, kill what is left in the namespaces, delete them."""
        if self._stopped:
            return
        self._stopped = True
        order = ["connect", *(f"worker{i}" for i in range(1, 10)), "master",
                 *(f"bk{i}" for i in range(1, 20)), *(f"link-bk{i}" for i in range(1, 20)),
                 *(f"zk{i}" for i in range(1, 10))]
        for name in sorted(self.procs, key=lambda n: order.index(n) if n in order else -1):
            _stop_group(self.procs[name])
        if self.network is not None:
            me = os.getpid()  # a harness that entered the client host (faults/netcluster)
            for pid in self.network.pids():  # executors, Python workers, anything left
                if pid == me:
                    continue
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + 10
            while set(self.network.pids()) - {me} and time.monotonic() < deadline:
                time.sleep(0.1)
            self.network.remove()
        atexit.unregister(self.stop)

    def __enter__(self) -> TestBed:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)  # each process leads its own session and group
    except ProcessLookupError:
        pass


def _stop_group(proc: Proc, timeout: float = 10.0) -> None:
    if proc.alive():
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            proc.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
    _signal_group(proc.pid, signal.SIGKILL)  # the leader's children (executors, workers)
    proc.popen.wait()
    while pid_alive(proc.pid):
        time.sleep(0.02)


def _spark_bin(name: str) -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / name)


def bk_command() -> str:
    return str(Path(sys.executable).parent / "bk")


def _pythonpath() -> str:
    old = os.environ.get("PYTHONPATH")
    return f"{CHECKOUT}:{old}" if old else str(CHECKOUT)
