"""Bookie configuration: one dataclass with defaults and validation."""

from __future__ import annotations

import zlib
from dataclasses import MISSING, dataclass, field
from pathlib import Path

from bk_spark.errors import InvalidConfigError
from bk_spark.protocol.limits import MAX_ENTRY_SIZE, MiB
from bk_spark.security import ClientSecurity, ZkSecurity

#: Listen addresses that mean "every interface": never an address to register.
WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", "[::]", ""})

#: The values of ``BookieConfig.on_lost_data`` (``--on-lost-data``).
ON_LOST_DATA = ("repair", "refuse")


@dataclass
class BookieConfig:
    """Everything a bookie process needs to know.

    Group-commit knobs: the journal thread syncs as soon as it has records and
    the previous sync finished; while a sync runs, new adds queue up and share
    the next one. ``journal_max_group_wait_ms`` lets it wait a little longer for
    more records, ``journal_max_group_bytes`` caps one group.
    """

    data_dir: Path
    host: str = "127.0.0.1"  # address the gRPC server listens on
    advertised_address: str | None = None  # address it registers (default: ``host``)
    port: int = 3181
    metadata_service_uri: str | None = None
    metrics_port: int | None = None  # None: no HTTP metrics endpoint; 0: pick a free port
    http_port: int | None = None  # HTTP admin API (bk bookie --http-port); None: off
    max_entry_size: int = MAX_ENTRY_SIZE  # what clients send too (protocol.limits)
    journal_file_size: int = 64 * MiB
    journal_max_group_wait_ms: float = 0.0
    journal_max_group_bytes: int = 4 * MiB
    journal_preallocate: bool = True
    entry_log_size: int = 256 * MiB
    checkpoint_interval_s: float = 10.0
    gc_interval_s: float = 30.0
    gc_compaction_threshold: float = 0.5  # compact entry logs with less live data than this
    disk_usage_threshold: float = 0.95  # fraction of the file system's size
    disk_usage_warn_threshold: float = 0.90
    max_disk_bytes: int | None = None  # readonly when the data dir holds more than this
    disk_check_interval_s: float = 5.0
    grpc_workers: int = 64
    # Add streams (AddStream, one per client) open at once; each holds two threads for its
    # life (the gRPC pool gets that many beyond grpc_workers). Beyond it, and at 0, a
    # client's stream is refused and it sends unary AddEntries.
    max_add_streams: int = 32
    # Deleted ledger ids remembered individually (8 bytes each; older ones fall under a
    # floor): see bookie_server.tombstones.
    deleted_ledgers_max: int = 1_000_000
    tls_cert: Path | None = None
    tls_key: Path | None = None
    rack: str = "/default-region/default-rack"  # registered for rack-aware placement
    tls_ca: Path | None = None  # CA that signs client certificates (mutual TLS)
    tls_client_auth: str = "none"  # "require": refuse peers without a certificate of tls_ca
    allow_clients: tuple[str, ...] = ()  # identities (cert CN or SAN) per role: access.py
    allow_bookies: tuple[str, ...] = ()
    allow_admins: tuple[str, ...] = ()
    # What a bookie whose directory lost its stamp while ZooKeeper holds its cookie (a
    # wiped or replaced disk) does: "repair" itself before serving, or "refuse" to start
    # (BookKeeper's default). See bookie_server.cookie.
    on_lost_data: str = "repair"
    # Tiered storage (bk_spark.offload): run an offloader contender in the bookie's process
    # (`bk bookie --offload`; its ledger passwords: --recovery-password), and the target of
    # the logs whose offload policy names none (file:///dir, s3://bucket/prefix).
    offload: bool = False
    offload_target: str | None = None
    # How the bookie's own clients reach the cluster, as an object: ZooKeeper credentials and
    # TLS (``.zk``: every ZooKeeper session the bookie opens: registration, cookie check,
    # self-repair marks) and the TLS files of its in-process AutoRecovery, HTTP API and
    # self-repair copies. None: from the environment (ClientSecurity.from_env), as any
    # client. `bk bookie` reads the environment and --zk-auth-file once, into this.
    security: ClientSecurity | None = None

    @property
    def zk_security(self) -> ZkSecurity | None:
        """How the bookie authenticates to ZooKeeper (None: from the environment)."""
        return None if self.security is None else self.security.zk

    def __post_init__(self) -> None:
        self.data_dir = Path(self.data_dir)
        if not (0 <= self.port < 65536):
            raise InvalidConfigError(f"--port must be 0..65535, got {self.port}")
        if self.max_entry_size <= 0:
            raise InvalidConfigError("max_entry_size must be positive")
        if self.journal_file_size < 1 * MiB:
            raise InvalidConfigError("journal_file_size must be at least 1 MiB")
        if self.journal_file_size < self.max_entry_size + 4096:
            raise InvalidConfigError("journal_file_size must exceed max_entry_size")
        if self.entry_log_size < 1024:
            raise InvalidConfigError("entry_log_size must be at least 1 KiB")
        if not (0.0 < self.disk_usage_threshold <= 1.0):
            raise InvalidConfigError("disk_usage_threshold must be in (0, 1]")
        if self.max_add_streams < 0:
            raise InvalidConfigError(f"--max-add-streams must be >= 0, got {self.max_add_streams}")
        if self.deleted_ledgers_max < 1:
            raise InvalidConfigError("deleted_ledgers_max must be >= 1")
        if self.host in WILDCARD_HOSTS and not self.advertised_address:
            raise InvalidConfigError(
                f"--host {self.host} listens on every interface: give --advertised-address, "
                f"the address clients on other hosts reach this bookie at")
        if self.advertised_address in WILDCARD_HOSTS:
            raise InvalidConfigError(
                f"--advertised-address {self.advertised_address!r} is not reachable: give "
                f"this host's address or DNS name")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise InvalidConfigError("--tls-cert and --tls-key go together")
        if self.tls_client_auth not in ("none", "require"):
            raise InvalidConfigError(
                f"--tls-client-auth must be none or require, got {self.tls_client_auth!r}")
        if self.tls_client_auth == "require" and (self.tls_cert is None or self.tls_ca is None):
            raise InvalidConfigError(
                "--tls-client-auth require needs --tls-cert, --tls-key and --tls-ca")
        if self.tls_ca is not None and self.tls_client_auth != "require":
            raise InvalidConfigError("--tls-ca is for client certificates: add "
                                     "--tls-client-auth require")
        if self.on_lost_data not in ON_LOST_DATA:
            raise InvalidConfigError(f"--on-lost-data must be one of {', '.join(ON_LOST_DATA)}, "
                                     f"got {self.on_lost_data!r}")
        self.allow_clients, self.allow_bookies, self.allow_admins = (
            tuple(x) for x in (self.allow_clients, self.allow_bookies, self.allow_admins))
        if ((self.allow_clients or self.allow_bookies or self.allow_admins)
                and self.tls_client_auth != "require"):
            raise InvalidConfigError("--allow-client/--allow-bookie/--allow-admin name "
                                     "certificate identities: add --tls-client-auth require")

    @property
    def checkpoint_phase_s(self) -> float:
        """When this bookie's interval checkpoints run: ``phase + k * checkpoint_interval_s``
        after the storage starts, the phase a fraction of the interval fixed by the bookie
        (crc32 of its id and data directory). Bookies started together (a cluster, the
        sandbox) would otherwise checkpoint within milliseconds of each other, their
        entry-log and index syncs landing on the disk at once (bench/profiles.md,
        "Checkpoints invisible to adds")."""
        key = f"{self.bookie_id} {self.data_dir}".encode()
        return self.checkpoint_interval_s * (zlib.crc32(key) / 2**32)

    @property
    def bookie_id(self) -> str:
        """The bookie's identity and address, ``<advertised address or host>:port``.

        This is what the bookie registers and what ledger metadata names in ensembles: every
        client, recovery and Spark executor reaches the bookie there, so it must be routable
        from other hosts (BookKeeper's ``advertisedAddress``). ``host`` is only where the
        server listens (``0.0.0.0`` listens everywhere).
        """
        return f"{self.advertised_address or self.host}:{self.port}"


@dataclass(frozen=True)
class AutoRecoveryConfig:
    """Options of AutoRecovery, its one type: in a bookie's process (``bk bookie``) and
    standalone (``bk autorecovery``), whose options take their defaults from here.
    It lives beside :class:`BookieConfig` because a bookie's command line carries it
    (:mod:`bookie_server.main` passes it to the AutoRecovery hook of ``bk bookie``); the
    service itself is :class:`bk_spark.autorecovery.service.AutoRecoveryService`.

    ``lost_bookie_recovery_delay_s``: how long a bookie may be gone before its ledgers are
    marked (``--lost-bookie-recovery-delay``); ``audit_interval_s``: period of the full
    check that asks bookies what they hold (``--audit-interval``);
    ``open_ledger_grace_s``: how long an open ledger's last fragment must see no add before
    a worker recovers the ledger (``--open-ledger-grace``); ``passwords``: candidate ledger
    passwords (``--recovery-password``, the empty one always included; seldom needed: see
    :func:`~bk_spark.autorecovery.replicator.ledger_secret`);
    ``audit_verify_entries``: how many of the entries a bookie holds in one fragment the
    periodic check has it read back and verify (framing, ids, crc32c checksum; the first,
    the last and the rest at random, at most 8 MiB per fragment; 0: trust the index).
    """

    lost_bookie_recovery_delay_s: float = 60.0
    audit_interval_s: float = 3600.0
    open_ledger_grace_s: float = 30.0
    worker_poll_s: float = 1.0
    auditor_tick_s: float = 1.0
    passwords: tuple[bytes, ...] = field(default=(b"",))
    audit_verify_entries: int = 8
    run_auditor: bool = True
    run_worker: bool = True

    def __post_init__(self) -> None:
        for name in ("lost_bookie_recovery_delay_s", "open_ledger_grace_s",
                     "audit_verify_entries"):
            if not getattr(self, name) >= 0:
                raise InvalidConfigError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in ("audit_interval_s", "worker_poll_s", "auditor_tick_s"):
            if not getattr(self, name) > 0:
                raise InvalidConfigError(f"{name} must be > 0, got {getattr(self, name)}")


def config_default(name: str, cls: type = BookieConfig) -> object:
    """The default of the field ``name`` of the config dataclass ``cls`` (a
    :class:`BookieConfig` unless said): what a command-line option that leaves ``name`` to
    the dataclass shows as its default, so a default is written once, on the field."""
    f = cls.__dataclass_fields__[name]
    return f.default_factory() if f.default_factory is not MISSING else f.default
