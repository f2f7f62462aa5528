"""The embedded sandbox: a real ZooKeeper from pyspark's bundled jars plus bookie processes.

Everything here starts real processes and stops them by the PIDs it recorded,
never by name. ``Sandbox`` is used by ``bk sandbox``, by ``make demo`` (detached
form with a state file) and by the integration-test fixtures.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import bk_spark.io  # noqa: F401 - gRPC's fork support off before grpc: this process starts bookies
from bk_spark.errors import SandboxError
from bookie_server.main import port_is_free

#: How the sandbox and the test bed start a bookie: ``bk bookie``, the bookie with its
#: in-process AutoRecovery (``python -m bookie_server`` is the bare bookie).
BOOKIE_COMMAND = [sys.executable, "-m", "bk_spark.cli", "bookie"]

ZK_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"
STATE_FILE = "sandbox.json"


def zookeeper_classpath() -> str:
    """The classpath of pyspark's bundled ZooKeeper jars (``<pyspark>/jars/*``)."""
    try:
        import pyspark
    except ImportError as exc:  # pragma: no cover - pyspark is a dependency
        raise SandboxError("pyspark is not installed; it ships the ZooKeeper jars") from exc
    jars = Path(pyspark.__file__).parent / "jars"
    if not any(jars.glob("zookeeper-*.jar")):
        raise SandboxError(f"no zookeeper jar under {jars}")
    return f"{jars}/*"


def java_executable() -> str:
    """Path of ``java``, or a clear error telling the user to install Java 17."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise SandboxError(
            "Java was not found: the sandbox runs ZooKeeper on a JVM. Install Java 17 "
            "(e.g. apt-get install openjdk-17-jre-headless) or set JAVA_HOME."
        )
    return java


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, timeout: float, proc: subprocess.Popen | None = None,
                  host: str = "127.0.0.1") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise SandboxError(f"process {proc.pid} exited with {proc.returncode} while starting")
        try:
            with socket.create_connection((host, port), timeout=0.5) as s:
                # A connect to a free port of the ephemeral range can "succeed" by
                # connecting the socket to itself (TCP simultaneous open): not a listener.
                if s.getsockname() != s.getpeername():
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise SandboxError(f"nothing listens on {host}:{port} after {timeout:.0f}s")


def stop_pid(pid: int, timeout: float = 10.0) -> None:
    """SIGTERM the process ``pid``, then SIGKILL it if it outlives ``timeout``."""
    stop_pids([pid], timeout)


def stop_pids(pids: list[int], timeout: float = 10.0) -> None:
    """SIGTERM every process of ``pids`` at once, then SIGKILL those that outlive
    ``timeout``: stopping n processes takes the time of the slowest, not of all of them."""
    live = []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
            live.append(pid)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while live and time.monotonic() < deadline:
        live = [pid for pid in live if pid_alive(pid)]
        if live:
            time.sleep(0.05)
    for pid in live:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
        while pid_alive(pid):
            time.sleep(0.02)


def pid_alive(pid: int) -> bool:
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
        if waited == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie that is not our child still answers kill(0)
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def wait_for_bookie(bookie_id: str, timeout: float, proc: subprocess.Popen | None = None
                    ) -> None:
    """Block until the bookie answers an ``Info`` RPC (its journal is replayed and it serves)."""
    import grpc

    from bk_spark.proto import bookie_pb2 as pb

    deadline = time.monotonic() + max(timeout, 1.0)
    with grpc.insecure_channel(bookie_id) as channel:
        info = channel.unary_unary("/bkspark.v1.Bookie/Info",
                                   request_serializer=pb.InfoRequest.SerializeToString,
                                   response_deserializer=pb.InfoResponse.FromString)
        while True:
            if proc is not None and proc.poll() is not None:
                raise SandboxError(f"bookie {bookie_id} exited with {proc.returncode} "
                                   f"while starting")
            try:
                info(pb.InfoRequest(), timeout=1.0, wait_for_ready=True)
                return
            except grpc.RpcError as exc:
                if time.monotonic() > deadline:
                    raise SandboxError(f"bookie {bookie_id} does not answer: {exc}") from None


@dataclass(frozen=True)
class ZkServerTls:
    """ZooKeeper's TLS port (``secureClientPort``, served by Netty) and its PEM files.

    ``cert``/``key``: the server's certificate and key (ZooKeeper reads both from one PEM
    "key store", written beside its config); ``ca``: the CA whose client certificates it
    accepts (``client_auth="need"``: ZooKeeper's default, a client without one is refused in
    the handshake)."""

    port: int
    cert: Path
    key: Path
    ca: Path
    client_auth: str = "need"


def _write_private(path: Path, text: str) -> None:
    """Write a file only its owner may read (it holds a key or a password)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


class ZooKeeperServer:
    """One standalone ZooKeeper server process on 127.0.0.1.

    ``port``: its plaintext client port (None: none, e.g. a TLS-only server); ``tls``: also
    (or only) its TLS port; ``sasl_users``: ``{user: password}`` it accepts with SASL
    DIGEST-MD5 (a JAAS ``Server`` section and ZooKeeper's ``SASLAuthenticationProvider``,
    so ``sasl:<user>`` ACLs work)."""

    def __init__(self, data_dir: Path, port: int | None = 2181, heap_mb: int = 256,
                 tls: ZkServerTls | None = None,
                 sasl_users: dict[str, str] | None = None) -> None:
        if port is None and tls is None:
            raise SandboxError("ZooKeeper needs a client port, a TLS port or both")
        self.data_dir = Path(data_dir)
        self.port = port
        self.heap_mb = heap_mb
        self.tls = tls
        self.sasl_users = dict(sasl_users or {})
        self.proc: subprocess.Popen | None = None

    @property
    def connect_string(self) -> str:
        """Where clients connect: the plaintext port, else the TLS port."""
        return f"127.0.0.1:{self.port if self.port is not None else self.tls.port}"

    def _config(self) -> tuple[str, list[str]]:
        """zoo.cfg's text and the JVM's extra flags."""
        lines = ["tickTime=500", f"dataDir={self.data_dir / 'data'}",
                 "admin.enableServer=false", "maxClientCnxns=0", "minSessionTimeout=1000",
                 "maxSessionTimeout=60000", "4lw.commands.whitelist=ruok,stat,srvr"]
        if self.port is not None:
            lines += [f"clientPort={self.port}", "clientPortAddress=127.0.0.1"]
        jvm: list[str] = []
        if self.tls is not None:
            t = self.tls
            store = self.data_dir / "zk-keystore.pem"
            _write_private(store, Path(t.key).read_text() + Path(t.cert).read_text())
            lines += [f"secureClientPort={t.port}", "secureClientPortAddress=127.0.0.1",
                      "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
                      f"ssl.keyStore.location={store}", "ssl.keyStore.type=PEM",
                      f"ssl.trustStore.location={t.ca}", "ssl.trustStore.type=PEM",
                      f"ssl.clientAuth={t.client_auth}"]
        if self.sasl_users:
            jaas = self.data_dir / "jaas.conf"
            users = "".join(f'    user_{u}="{p}"\n' for u, p in self.sasl_users.items())
            _write_private(jaas, "Server {\n    org.apache.zookeeper.server.auth."
                                 f"DigestLoginModule required\n{users}    ;\n}};\n")
            lines.append("authProvider.1=org.apache.zookeeper.server.auth."
                         "SASLAuthenticationProvider")
            jvm.append(f"-Djava.security.auth.login.config={jaas}")
        return "\n".join(lines) + "\n", jvm

    def start(self, timeout: float = 30.0, detached: bool = False) -> int:
        java = java_executable()
        for port in (self.port, self.tls.port if self.tls else None):
            if port is not None and not port_is_free(port):
                raise SandboxError(
                    f"port {port} on 127.0.0.1 is taken: is another ZooKeeper or sandbox "
                    f"running? Stop it or choose another port (--zk-port)."
                )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cfg = self.data_dir / "zoo.cfg"
        text, jvm = self._config()
        cfg.write_text(text)
        log = open(self.data_dir / "zookeeper.log", "ab")
        cmd = [java, f"-Xmx{self.heap_mb}m", "-XX:+UseSerialGC",
               f"-Dzookeeper.log.dir={self.data_dir}", *jvm,
               "-cp", zookeeper_classpath(), ZK_MAIN, str(cfg)]
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=detached)
        log.close()
        for port in (self.port, self.tls.port if self.tls else None):
            if port is not None:
                wait_for_port(port, timeout, self.proc)
        return self.proc.pid

    def stop(self) -> None:
        if self.proc is not None:
            stop_pid(self.proc.pid)
            self.proc.wait()
            self.proc = None

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


class BookieProcess:
    """One bookie server process (``bk bookie``: :data:`BOOKIE_COMMAND`)."""

    def __init__(self, metadata_service_uri: str, data_dir: Path, port: int,
                 metrics_port: int | None = None, extra_args: list[str] | None = None,
                 env: dict[str, str] | None = None, http_port: int | None = None) -> None:
        """``env``: variables set for this bookie on top of ours (e.g. ``BK_ZK_TLS_*``);
        ``http_port``: its HTTP admin API and status page (``--http-port``)."""
        self.metadata_service_uri = metadata_service_uri
        self.data_dir = Path(data_dir)
        self.port = port
        self.metrics_port = metrics_port
        self.http_port = http_port
        self.extra_args = list(extra_args or [])
        self.env = dict(env or {})
        self.proc: subprocess.Popen | None = None
        self._log_start = 0

    @property
    def bookie_id(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self, timeout: float = 30.0, detached: bool = False) -> int:
        """Start the bookie; return its PID once it serves (see :func:`start_bookies` for
        several at once)."""
        self.launch(detached)
        self.wait_ready(timeout)
        assert self.proc is not None
        return self.proc.pid

    def launch(self, detached: bool = False) -> None:
        """Start the process and return at once (:meth:`wait_ready` waits until it serves)."""
        if not port_is_free(self.port):
            raise SandboxError(f"port {self.port} on 127.0.0.1 is taken; choose another --port")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.http_port and not port_is_free(self.http_port):
            self.http_port = free_port()  # the HTTP API's usual port is taken: any other
        cmd = [*BOOKIE_COMMAND,
               "--metadata-service-uri", self.metadata_service_uri,
               "--port", str(self.port), "--data-dir", str(self.data_dir)]
        if self.metrics_port is not None:
            cmd += ["--metrics-port", str(self.metrics_port)]
        if self.http_port is not None:
            cmd += ["--http-port", str(self.http_port)]
        cmd += self.extra_args
        log = open(self.data_dir / "bookie.log", "ab")
        self._log_start = log.tell()  # this run's output starts here (last_error)
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=detached,
                                     env={**os.environ, **self.env} if self.env else None)
        log.close()

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Block until the launched bookie listens and answers (its journal replayed)."""
        deadline = time.monotonic() + timeout
        try:
            wait_for_port(self.port, timeout, self.proc)
            if "--tls-cert" not in self.extra_args:
                wait_for_bookie(self.bookie_id, deadline - time.monotonic(), self.proc)
        except SandboxError as exc:
            said = self.last_error()
            if said is None:
                raise
            raise SandboxError(f"bookie {self.bookie_id} did not start: {said}") from exc

    def last_error(self) -> str | None:
        """The last ``error: ...`` line of the bookie's log (why it exited, e.g. a cookie
        refusal with the command that fixes it), None if it printed none."""
        try:
            with open(self.data_dir / "bookie.log", "rb") as f:
                f.seek(self._log_start)
                lines = f.read().decode(errors="replace").splitlines()
        except OSError:
            return None
        said = [x for x in lines if x.startswith("error: ")]
        return said[-1][len("error: "):] if said else None

    def stop(self) -> None:
        if self.proc is not None:
            stop_pid(self.proc.pid)
            self.proc.wait()
            self.proc = None

    def drop_data(self) -> None:
        """Delete the journal and entry logs of this stopped bookie (its log stays)."""
        if self.proc is not None:
            raise SandboxError(f"bookie {self.bookie_id} is running: stop it first")
        for sub in ("journal", "ledgers"):
            shutil.rmtree(self.data_dir / sub, ignore_errors=True)

    def kill(self) -> None:
        """``kill -9``: no shutdown, no final checkpoint."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def pause(self) -> None:
        if self.proc is not None:
            os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc is not None:
            os.kill(self.proc.pid, signal.SIGCONT)


def start_bookies(bookies: list[BookieProcess], timeout: float = 30.0,
                  detached: bool = False) -> None:
    """Start ``bookies`` side by side: every process is launched before the first is
    waited for, so n bookies take about the start-up of one (their imports and journal
    replays overlap), not n times it. If one does not come up, every one of them that was
    launched is stopped before the error is raised."""
    try:
        for b in bookies:
            b.launch(detached)
        deadline = time.monotonic() + timeout
        for b in bookies:
            b.wait_ready(max(deadline - time.monotonic(), 1.0))
    except BaseException:
        stop_bookies(bookies)
        raise


def stop_bookies(bookies: list[BookieProcess]) -> None:
    """Stop every running bookie of ``bookies`` at once (SIGTERM, then SIGKILL after 10 s)."""
    running = [b for b in bookies if b.proc is not None]
    stop_pids([b.proc.pid for b in running if b.proc is not None])
    for b in running:
        if b.proc is not None:
            b.proc.wait()
            b.proc = None


@dataclass
class SandboxState:
    """What a detached sandbox recorded: enough to report on and stop it by PID."""

    metadata_service_uri: str
    zk_pid: int
    zk_port: int
    bookies: list[dict] = field(default_factory=list)  # {"id", "pid", "port", "data_dir"}


#: Journal files of sandbox bookies (a bookie preallocates a few): 16 MiB each keeps a
#: three-bookie sandbox under 200 MiB of journals instead of 768 MiB at the 64 MiB default.
SANDBOX_JOURNAL_FILE_MB = 16


#: A sandbox bookie's HTTP admin API listens on its gRPC port plus this.
HTTP_PORT_OFFSET = 5000

SECURE_DIR = "secure"
CLIENT_ENV = "client.env"
SECURE_IDENTITIES = ("zookeeper", "bookie", "client", "admin")


def make_secure_files(directory: Path) -> dict[str, Path]:
    """What a secure sandbox needs, written to ``directory`` (once; kept on restarts): a CA,
    certificates for ZooKeeper's TLS port (CN ``zookeeper``), the bookies (``bookie``), a
    client (``client``) and an admin (``admin``), ZooKeeper credentials with a random
    password (``zk-auth``, mode 0600) and ``client.env``, the environment a client sources to
    use them (TLS to bookies and to ZooKeeper with the client certificate, the credentials)."""
    import secrets

    from bk_spark.certs import issue_cert, make_ca

    directory.mkdir(parents=True, exist_ok=True)
    files = {"ca": directory / "bk-ca.crt", "zk_auth": directory / "zk-auth",
             "env": directory / CLIENT_ENV}
    for name in SECURE_IDENTITIES:
        files[f"{name}_cert"] = directory / f"{name}.crt"
        files[f"{name}_key"] = directory / f"{name}.key"
    if all(p.exists() for p in files.values()):
        return files
    ca = make_ca(directory)
    for name in SECURE_IDENTITIES:
        issue_cert(ca, directory, name)
    fd = os.open(files["zk_auth"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"bk-sandbox:{secrets.token_urlsafe(24)}\n")
    files["env"].write_text(
        f"export BK_TLS_CA={files['ca']}\nexport BK_TLS_CERT={files['client_cert']}\n"
        f"export BK_TLS_KEY={files['client_key']}\nexport BK_ZK_AUTH_FILE={files['zk_auth']}\n"
        f"export BK_ZK_TLS_CA={files['ca']}\nexport BK_ZK_TLS_CERT={files['client_cert']}\n"
        f"export BK_ZK_TLS_KEY={files['client_key']}\n")
    return files


class Sandbox:
    """ZooKeeper plus ``n_bookies`` bookie processes under one data directory.

    ``secure``: bookies require client certificates of the sandbox's CA (allow-lists:
    ``client``, ``admin``, ``bookie``) and protect the root with ZooKeeper credentials, and
    ZooKeeper serves only TLS (its ``secureClientPort``, on ``zk_port``) to clients with a
    certificate of that CA; the files are in ``<data_dir>/secure``
    (:func:`make_secure_files`)."""

    def __init__(self, data_dir: Path, n_bookies: int = 3, zk_port: int = 2181,
                 first_bookie_port: int = 3181, root: str = "/ledgers",
                 bookie_args: list[str] | None = None, secure: bool = False) -> None:
        if n_bookies < 0:
            raise SandboxError("--bookies must be >= 0")
        self.data_dir = Path(data_dir).resolve()
        self.zk_port = zk_port
        self.root = root
        args = list(bookie_args or [])
        self.secure_files: dict[str, Path] | None = None
        env: dict[str, str] = {}
        if not secure:
            self.zk = ZooKeeperServer(self.data_dir / "zookeeper", port=zk_port)
        else:
            f = self.secure_files = make_secure_files(self.data_dir / SECURE_DIR)
            self.zk = ZooKeeperServer(self.data_dir / "zookeeper", port=None, tls=ZkServerTls(
                zk_port, f["zookeeper_cert"], f["zookeeper_key"], f["ca"]))
            env = {"BK_ZK_TLS_CA": str(f["ca"]), "BK_ZK_TLS_CERT": str(f["bookie_cert"]),
                   "BK_ZK_TLS_KEY": str(f["bookie_key"])}
            args += ["--tls-cert", str(f["bookie_cert"]), "--tls-key", str(f["bookie_key"]),
                     "--tls-ca", str(f["ca"]), "--tls-client-auth", "require",
                     "--allow-client", "client", "--allow-admin", "admin",
                     "--allow-bookie", "bookie", "--zk-auth-file", str(f["zk_auth"])]
        if "--journal-file-size-mb" not in args:  # a laptop sandbox, not a production disk
            args += ["--journal-file-size-mb", str(SANDBOX_JOURNAL_FILE_MB)]
        if "--offload" not in args and "--no-offload" not in args:
            # tiered storage: an offloader contender per bookie, files under the sandbox
            args += ["--offload", "--offload-target", (self.data_dir / "offload").as_uri()]
        # --bookie-port 0: a bookie started before keeps its port (its stamp, else the last
        # state file): at another address its directories would be refused
        state = read_state(self.data_dir)
        before = {Path(b["data_dir"]): int(b["port"]) for b in state.bookies} if state else {}
        self.bookies = [
            BookieProcess(self.metadata_service_uri, self.data_dir / f"bookie-{i}",
                          port=first_bookie_port + i if first_bookie_port else
                          _stamped_port(self.data_dir / f"bookie-{i}")
                          or before.get(self.data_dir / f"bookie-{i}") or free_port(),
                          extra_args=args, env=env,
                          # its HTTP admin API and status page: port + 5000 (8181, 8182, ...
                          # for the default 3181, ...), or any free port
                          http_port=(first_bookie_port + i + HTTP_PORT_OFFSET
                                     if first_bookie_port else free_port()))
            for i in range(n_bookies)
        ]

    @property
    def metadata_service_uri(self) -> str:
        return f"zk://{self.zk.connect_string}{self.root}"

    @property
    def zk_security(self):  # -> ZkSecurity | None
        """The sandbox's own ZooKeeper credentials and TLS files, a client's (None: an
        open sandbox)."""
        f = self.secure_files
        if f is None:
            return None
        from bk_spark.security import ZkSecurity, read_secret_file

        return ZkSecurity(digest=read_secret_file(f["zk_auth"], "ZooKeeper credentials"),
                          tls_ca=str(f["ca"]), tls_cert=str(f["client_cert"]),
                          tls_key=str(f["client_key"]))

    def start(self, detached: bool = False) -> SandboxState:
        self.zk.start(detached=detached)
        try:
            start_bookies(self.bookies, detached=detached)
            wait_for_registrations(self.metadata_service_uri, len(self.bookies),
                                   security=self.zk_security)
        except BaseException:
            self.stop()
            raise
        state = SandboxState(
            metadata_service_uri=self.metadata_service_uri,
            zk_pid=self.zk.proc.pid if self.zk.proc else -1,
            zk_port=self.zk_port,
            bookies=[{"id": b.bookie_id, "pid": b.pid, "port": b.port,
                      "http_port": b.http_port, "data_dir": str(b.data_dir)}
                     for b in self.bookies],
        )
        return state

    def stop(self) -> None:
        stop_bookies(self.bookies)
        self.zk.stop()


def _stamped_port(data_dir: Path) -> int | None:
    """The port of the bookie whose stamp ``data_dir`` carries; None for a directory
    without a stamp."""
    from bookie_server.cookie import data_directories, read_dir_facts

    stamp = read_dir_facts(data_directories(data_dir)[0][0]).stamp
    if stamp is None:
        return None
    port = stamp.bookie_id.rpartition(":")[2]
    return int(port) if port.isdigit() else None


def wait_for_registrations(metadata_service_uri: str, n: int, timeout: float = 30.0,
                           security=None) -> None:  # security: ZkSecurity | None
    """Block until ``n`` writable bookies are registered under ``<root>/available``
    (``security``: ZooKeeper credentials; None: the environment's)."""
    from bk_spark.io.registration import list_bookies
    from bk_spark.io.zk import connect_zk
    from bk_spark.metadata_uri import parse_metadata_service_uri

    deadline = time.monotonic() + timeout
    seen: list = []
    zk = connect_zk(parse_metadata_service_uri(metadata_service_uri), security=security)
    try:
        while time.monotonic() < deadline:
            seen = list_bookies(metadata_service_uri, zk=zk)
            if len([b for b in seen if not b.read_only]) >= n:
                return
            time.sleep(0.1)
    finally:
        zk.stop()
        zk.close()
    writable = [b for b in seen if not b.read_only]
    readonly = len(seen) - len(writable)
    raise SandboxError(
        f"only {len(writable)} of {n} bookies registered as writable after {timeout:.0f}s"
        + (f" ({readonly} registered readonly: is the disk full?)" if readonly else ""))


def write_state(data_dir: Path, state: SandboxState) -> Path:
    path = Path(data_dir) / STATE_FILE
    path.write_text(json.dumps(asdict(state), indent=2))
    return path


def read_state(data_dir: Path) -> SandboxState | None:
    path = Path(data_dir) / STATE_FILE
    if not path.exists():
        return None
    return SandboxState(**json.loads(path.read_text()))


def stop_detached(data_dir: Path) -> SandboxState | None:
    """Stop a detached sandbox by the PIDs in its state file; returns what was stopped."""
    state = read_state(data_dir)
    if state is None:
        return None
    stop_pids([int(b["pid"]) for b in state.bookies])
    stop_pid(state.zk_pid)
    (Path(data_dir) / STATE_FILE).unlink(missing_ok=True)
    return state
