"""ZooKeeper connections (kazoo) shared by bookies and clients."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter

from kazoo.client import KazooClient
from kazoo.exceptions import (
    AuthFailedError,
    ConnectionLoss,
    KazooException,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState, KeeperState
from kazoo.retry import KazooRetry
from kazoo.security import ACL, Id, Permissions, make_digest_acl

from bk_spark.errors import MetadataServiceUnavailableError, UnauthorizedError
from bk_spark.metadata_uri import MetadataServiceUri
from bk_spark.security import ZkSecurity

#: What a ZooKeeper operation raises besides :class:`BKError` (kazoo's own root): a
#: long-running service above the adapters (AutoRecovery) catches these without importing
#: kazoo.
ZooKeeperError = KazooException


def session_interrupted(state: str) -> bool:
    """Whether a session state reported to a ``client.add_listener`` callback means the
    session is suspended (connection lost, may come back) or lost (ephemeral znodes gone)."""
    return state in (KazooState.LOST, KazooState.SUSPENDED)


class CountingKazooClient(KazooClient):
    """A kazoo client that counts the ZooKeeper operations it sends, by request type.

    The one place the project talks to ZooKeeper is a client made by :func:`connect_zk`, and
    every operation a kazoo client sends (a read, a write, a ``multi`` transaction: one
    operation however many it holds) goes through its ``_call``: counting there counts what
    the server is asked to do, retries included. Read with :func:`zk_operations` (the bench
    prints operations per log roll from it; a test asserts the roll's budget).
    """

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self._ops_lock = threading.Lock()
        self._ops: Counter[str] = Counter()

    def _call(self, request: object, async_object: object) -> object:
        with self._ops_lock:
            self._ops[type(request).__name__] += 1
        return super()._call(request, async_object)

    def operations(self) -> Counter[str]:
        """A copy of the counts so far, by request type (``GetChildren``, ``Transaction``,
        ``SetData``, ...)."""
        with self._ops_lock:
            return Counter(self._ops)


def zk_operations(client: KazooClient) -> Counter[str]:
    """The ZooKeeper operations ``client`` sent so far, by request type (empty for a client
    not made by :func:`connect_zk`). Subtract two readings to count a span of work."""
    if isinstance(client, CountingKazooClient):
        return client.operations()
    return Counter()


#: Level of kazoo's own logger (``kazoo.client``) unless the application configured it.
KAZOO_LOG_LEVEL_ENV = "BK_KAZOO_LOG_LEVEL"


def quiet_kazoo_logger() -> None:
    """Keep kazoo's routine reconnect warnings out of job output.

    While a ZooKeeper ensemble elects a new leader, every client logs ``Connection dropped``
    and retries on its own (``connection_retry`` below): an expected event, not one a user
    can act on, and one that would otherwise land in every Spark task's stderr. Session
    loss is still reported by the code that cares (bookie registration). kazoo's logger
    level is set to ``$BK_KAZOO_LOG_LEVEL`` (default ``ERROR``) only when nobody set it.
    """
    kazoo_log = logging.getLogger("kazoo.client")
    if kazoo_log.level == logging.NOTSET:
        kazoo_log.setLevel(os.environ.get(KAZOO_LOG_LEVEL_ENV, "ERROR").upper())


def zk_acl(security: ZkSecurity) -> list | None:
    """The ACL of every znode a client with ``security`` creates: all rights to its user
    (digest or SASL), none to anyone else; None: ZooKeeper's open default."""
    if security.digest is None:
        return None
    user, _, password = security.digest.partition(":")
    if security.sasl:
        return [ACL(Permissions.ALL, Id("sasl", user))]
    return [make_digest_acl(user, password, all=True)]


def kazoo_kwargs(security: ZkSecurity) -> dict:
    """Keyword arguments of ``KazooClient`` for ``security`` (empty when off)."""
    kw: dict = {}
    if security.digest is not None:
        if security.sasl:
            user, _, password = security.digest.partition(":")
            kw["sasl_options"] = {"mechanism": "DIGEST-MD5", "username": user,
                                  "password": password}
        else:
            kw["auth_data"] = [("digest", security.digest)]
        kw["default_acl"] = zk_acl(security)
    if security.tls_ca is not None:
        kw.update(use_ssl=True, ca=security.tls_ca, verify_certs=True,
                  certfile=security.tls_cert, keyfile=security.tls_key)
    return kw


#: The ZooKeeper session timeout of every client and bookie (seconds): how long after a
#: bookie dies (kill -9) ZooKeeper removes its registration, and so how long a client's
#: registration cache (:class:`~bk_spark.io.registration.RegistrationCache`) may still list
#: it.
SESSION_TIMEOUT_S = 10.0

#: Connection attempts before a SASL refusal is believed (see :func:`connect_zk`).
SASL_ATTEMPTS = 3


def connect_zk(msu: MetadataServiceUri, timeout: float = 15.0,
               session_timeout: float = SESSION_TIMEOUT_S, security: ZkSecurity | None = None
               ) -> KazooClient:
    """A started kazoo client for ``msu`` (retrying connection loss forever).

    The one place ZooKeeper clients are made: ``security`` (default: from the environment,
    :meth:`ZkSecurity.from_env`) authenticates the session and becomes the client's
    ``default_acl``, so every znode any part of bk-spark creates is protected alike. A root
    this client may not read fails here, with what to do."""
    security = ZkSecurity.from_env() if security is None else security
    quiet_kazoo_logger()
    # kazoo reports a session CONNECTED before its SASL exchange, and takes an exchange cut
    # by a slow server (a loaded machine) for a refusal: with SASL, a refusal is believed
    # only when it repeats.
    sasl = security.sasl and security.digest is not None
    attempts = SASL_ATTEMPTS if sasl else 1
    for attempt in range(1, attempts + 1):
        client = CountingKazooClient(
            hosts=msu.hosts,
            timeout=session_timeout,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0),
            command_retry=KazooRetry(max_tries=5, delay=0.1, max_delay=1.0),
            **kazoo_kwargs(security),
        )
        # The session's states: kazoo reports CONNECTED before the SASL exchange, and LOST
        # once a refused exchange closed the session (its state is then CLOSED, not
        # AUTH_FAILED, and kazoo connects no more)
        states: list[KazooState] = []
        client.add_listener(states.append)
        refused = False
        try:
            client.start_async()
            deadline = time.monotonic() + timeout
            while not client.connected and time.monotonic() < deadline and \
                    not (sasl and KazooState.LOST in states):
                time.sleep(0.02)
            if (sasl and KazooState.LOST in states) or \
                    client.client_state == KeeperState.AUTH_FAILED:
                raise AuthFailedError()
            if not client.connected:
                raise KazooTimeoutError("Connection time-out")
            if client.exists(msu.root):
                client.get_children(msu.root)
            return client
        except KazooTimeoutError as exc:
            client.stop()
            client.close()
            raise MetadataServiceUnavailableError(
                f"cannot reach ZooKeeper at {msu.hosts} (metadata service {msu.uri}) within "
                f"{timeout:.0f}s: is it running? `bk sandbox start` runs one locally. "
                + _tls_hint(security)) from exc
        except (NoAuthError, AuthFailedError):
            refused = True
        except ConnectionLoss:
            if not sasl:  # a plain session lost at once: as any lost connection
                raise
            refused = True  # ZooKeeper drops a session whose SASL exchange it refused
        if refused:
            client.stop()
            client.close()
            if attempt < attempts:
                time.sleep(0.5 * attempt)
                continue
            who = f"as user {security.user!r}" if security.user else "without credentials"
            raise UnauthorizedError(
                f"ZooKeeper refuses access to {msu.root} {who}: give the cluster's ZooKeeper "
                f"credentials (user:password) in the file named by BK_ZK_AUTH_FILE "
                f"(or BK_ZK_AUTH)") from None
    raise AssertionError("unreachable")  # pragma: no cover


def _tls_hint(security: ZkSecurity) -> str:
    """What to check when a session could not be made: TLS is the usual cause besides a
    ZooKeeper that is down (its TLS port silently drops a plaintext client, and a TLS
    client it refuses, so kazoo only sees a timeout)."""
    if security.tls_ca is None:
        return ("If that is ZooKeeper's TLS port (secureClientPort), set BK_ZK_TLS_CA (and "
                "BK_ZK_TLS_CERT/BK_ZK_TLS_KEY; Spark: zkTlsCaCert, zkTlsCert, zkTlsKey).")
    if security.tls_cert is None:
        return ("TLS was used without a client certificate: a ZooKeeper that requires one "
                "(ssl.clientAuth=need, its default) refuses the handshake; set "
                "BK_ZK_TLS_CERT and BK_ZK_TLS_KEY (Spark: zkTlsCert, zkTlsKey).")
    return (f"TLS was used (CA {security.tls_ca}): check that the port is ZooKeeper's TLS "
            f"port and that the CA signed its certificate and ZooKeeper trusts "
            f"{security.tls_cert}.")


def apply_acls(client: KazooClient, root: str, acl: list) -> int:
    """Give ``root`` and every znode under it ``acl`` (parents first, so a znode created
    meanwhile under a changed parent inherits nothing open); returns how many were set.

    For a root made before its cluster used ZooKeeper credentials: new znodes get the ACL
    from :func:`connect_zk`'s ``default_acl``, old ones from here."""
    count = 0
    stack = [root]
    while stack:
        path = stack.pop()
        try:
            client.retry(client.set_acls, path, acl)
            children = client.retry(client.get_children, path)
        except NoNodeError:
            continue  # deleted meanwhile (an ephemeral registration, a deleted ledger)
        count += 1
        stack.extend(f"{path.rstrip('/')}/{c}" for c in sorted(children))
    return count


# -- ephemeral locks: one recipe for the Replication Workers' ledger locks and the offloaders'
#    ledger claims --------------------------------------------------------------------------


def try_ephemeral_lock(zk: KazooClient, path: str, owner: str) -> bool:
    """Take the ephemeral lock znode ``path`` for ``owner``; False if another session holds it.

    The lock lives as long as the taker's ZooKeeper session, so a holder killed with -9 loses
    it when its session expires. A create retried after a connection loss that finds the
    znode already there checks whether this session made it.
    """
    try:
        zk.retry(zk.create, path, owner.encode(), ephemeral=True, makepath=True)
        return True
    except NodeExistsError:
        try:
            _, stat = zk.retry(zk.get, path)
        except NoNodeError:
            return False
        return bool(stat.ephemeralOwner == zk.client_id[0])


def delete_if_present(zk: KazooClient, path: str, *, recursive: bool = False) -> bool:
    """Delete the znode ``path`` (with its children if ``recursive``), retried over connection
    losses; True if this call deleted it, False if it was gone already (ZooKeeper lets one of
    several deleters win, so "gone" is the answer every loser needs)."""
    try:
        zk.retry(zk.delete, path, recursive=recursive)
    except NoNodeError:
        return False
    return True


def release_ephemeral_lock(zk: KazooClient, path: str) -> None:
    """Delete the lock znode ``path`` (gone already is fine)."""
    delete_if_present(zk, path)


def ephemeral_lock_holder(zk: KazooClient, path: str) -> str | None:
    """The owner named in the lock znode ``path``, or None when nobody holds it."""
    try:
        data, _ = zk.retry(zk.get, path)
    except NoNodeError:
        return None
    return bytes(data).decode(errors="replace")
