"""Bookie registration in ZooKeeper (BookKeeper's ``<root>/available`` convention).

A writable bookie holds the ephemeral znode ``<root>/available/<host:port>``, a
readonly one ``<root>/available/readonly/<host:port>``. Ephemeral znodes vanish
with the bookie's ZooKeeper session, so a dead bookie disappears from the list;
after a session loss the bookie registers again.

Decommissioning (``bk bookie decommission``): the persistent marker
``<root>/decommissioning/<host:port>`` holds the ``instance`` id the bookie process put in
its registration (a random id per process start). While the marker names the running
instance the bookie is listed ``decommissioning``: it keeps serving reads and writes of
the ledgers it has, but placement (:meth:`bk_spark.core.client.BookKeeper.topology`)
never picks it for a new ensemble, an ensemble change or re-replication. Once the process
stops, the marker names no running instance and means nothing: a bookie started again on
that address is a full member (the stale marker is removed by the next decommission or
:func:`clear_decommissioning`).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NodeExistsError, NoNodeError

from bk_spark.io.zk import connect_zk
from bk_spark.metadata_uri import MetadataServiceUri, parse_metadata_service_uri
from bk_spark.security import ZkSecurity

log = logging.getLogger(__name__)

#: Debug hook for fault injection (``bk bookie --debug-expose-session`` sets it): a file the
#: registration rewrites with ``<session id hex> <password hex>`` after every registration,
#: so a test can expire the bookie's ZooKeeper session (kazoo's second-client trick).
SESSION_FILE_ENV = "BK_DEBUG_ZK_SESSION_FILE"


@dataclass(frozen=True)
class RegisteredBookie:
    bookie_id: str
    read_only: bool
    info: dict
    decommissioning: bool = False

    @property
    def placeable(self) -> bool:
        """Whether placement may choose it: writable and not being decommissioned."""
        return not self.read_only and not self.decommissioning


def list_bookies(uri: str | MetadataServiceUri, zk: KazooClient | None = None
                 ) -> list[RegisteredBookie]:
    """The registered bookies, writable first, each with its readonly flag."""
    msu = uri if isinstance(uri, MetadataServiceUri) else parse_metadata_service_uri(uri)
    own = zk is None
    client = connect_zk(msu) if zk is None else zk
    try:
        try:
            marked = set(client.get_children(msu.decommissioning_path))
        except NoNodeError:
            marked = set()
        out: list[RegisteredBookie] = []
        for path, ro in ((msu.available_path, False), (msu.readonly_path, True)):
            try:
                children = client.get_children(path)
            except NoNodeError:
                continue
            for child in sorted(children):
                if child == "readonly":
                    continue
                try:
                    data, _ = client.get(f"{path}/{child}")
                    info = json.loads(data or b"{}")
                except (NoNodeError, ValueError):
                    continue
                leaving = child in marked and _marker(client, msu, child) == info.get("instance")
                out.append(RegisteredBookie(child, ro, info, leaving))
        return out
    finally:
        if own:
            client.stop()
            client.close()


def registrations_version(msu: MetadataServiceUri, zk: KazooClient) -> tuple[int, int]:
    """The child versions (``cversion``) of the writable and readonly registration znodes:
    ZooKeeper raises them on every registration created or removed, so two equal answers
    mean no bookie arrived or left in between, however briefly (the Auditor recomputes the
    lost bookies only when this changes). ``-1`` for a znode not created yet."""
    out = []
    for path in (msu.available_path, msu.readonly_path):
        stat = zk.exists(path)
        out.append(-1 if stat is None else stat.cversion)
    return out[0], out[1]


def _marker(zk: KazooClient, msu: MetadataServiceUri, bookie_id: str) -> str | None:
    try:
        data, _ = zk.get(f"{msu.decommissioning_path}/{bookie_id}")
    except NoNodeError:
        return None
    return data.decode() or None


def mark_decommissioning(zk: KazooClient, uri: str | MetadataServiceUri, bookie_id: str
                         ) -> None:
    """Mark the running bookie ``bookie_id`` as being decommissioned (see the module
    docstring): from now until its process stops, placement never picks it. Raises
    :class:`~bk_spark.errors.BookieUnavailableError` when it is not registered."""
    from bk_spark.errors import BookieUnavailableError

    msu = uri if isinstance(uri, MetadataServiceUri) else parse_metadata_service_uri(uri)
    found = {b.bookie_id: b for b in list_bookies(msu, zk=zk)}
    if bookie_id not in found:
        raise BookieUnavailableError(
            f"bookie {bookie_id} is not registered: only a running bookie can be "
            f"decommissioned (for a dead one, `bk recover {bookie_id}`)")
    instance = str(found[bookie_id].info.get("instance") or "")
    path = f"{msu.decommissioning_path}/{bookie_id}"
    try:
        zk.create(path, instance.encode(), makepath=True)
    except NodeExistsError:
        zk.set(path, instance.encode())


def clear_decommissioning(zk: KazooClient, uri: str | MetadataServiceUri, bookie_id: str
                          ) -> None:
    """Remove ``bookie_id``'s decommissioning marker (placement may pick it again)."""
    msu = uri if isinstance(uri, MetadataServiceUri) else parse_metadata_service_uri(uri)
    try:
        zk.delete(f"{msu.decommissioning_path}/{bookie_id}")
    except NoNodeError:
        pass


class BookieRegistration:
    """Keeps one bookie's ephemeral registration alive across session losses."""

    def __init__(self, uri: str, bookie_id: str, info: dict | None = None,
                 security: ZkSecurity | None = None) -> None:
        """``security``: the bookie's ZooKeeper credentials (None: from the environment)."""
        self.msu = parse_metadata_service_uri(uri)
        self.security = security
        self.bookie_id = bookie_id
        self.info = dict(info or {})
        # one id per process start: a decommissioning marker names it (module docstring)
        self.info.setdefault("instance", uuid.uuid4().hex)
        self.read_only = False
        self._lock = threading.Lock()
        self._stopped = False
        self.zk: KazooClient | None = None

    def _path(self, read_only: bool) -> str:
        base = self.msu.readonly_path if read_only else self.msu.available_path
        return f"{base}/{self.bookie_id}"

    def start(self) -> None:
        """Connect and register; if ZooKeeper is unreachable, keep trying in the background
        (a bookie keeps serving while the metadata service is down)."""
        try:
            self._connect()
        except Exception as exc:  # ZooKeeper down or dying right now
            log.warning("cannot register in ZooKeeper yet (%s); retrying in the background",
                        exc)
            threading.Thread(target=self._connect_until_done, daemon=True,
                             name="bookie-registration").start()

    def _connect(self) -> None:
        zk = connect_zk(self.msu, security=self.security)
        with self._lock:
            if self._stopped:
                zk.stop()
                zk.close()
                return
            self.zk = zk
        # Listen before the first registration: if ZooKeeper goes away during it, the next
        # CONNECTED registers again (a transient connection loss must not stop the bookie).
        zk.add_listener(self._on_state)
        self._register()

    def _connect_until_done(self) -> None:
        while not self._stopped:
            try:
                self._connect()
                return
            except Exception as exc:
                log.warning("cannot register in ZooKeeper yet (%s); retrying", exc)
                with self._lock:
                    zk, self.zk = self.zk, None
                if zk is not None:
                    zk.stop()
                    zk.close()
                time.sleep(1.0)

    def _on_state(self, state: str) -> None:
        if state == KazooState.LOST:
            log.warning("ZooKeeper session lost; will register again on reconnect")
        elif state == KazooState.CONNECTED and not self._stopped:
            # Never block the kazoo event thread: register from another thread.
            threading.Thread(target=self._register, daemon=True).start()

    def _register(self) -> None:
        with self._lock:
            if self._stopped or self.zk is None:
                return
            data = json.dumps({**self.info, "read_only": self.read_only}).encode()
            want, other = self._path(self.read_only), self._path(not self.read_only)
            # The new registration is created before the old one is deleted: a bookie moving
            # between writable and readonly is never absent from both, which the Auditor
            # (lost = named by a ledger and registered nowhere) would take for a lost bookie.
            try:
                self.zk.ensure_path(self.msu.readonly_path)
                self.zk.create(want, data, ephemeral=True, makepath=True)
            except NodeExistsError:
                # Ours from this session, or a stale one of a previous session still expiring.
                _, stat = self.zk.get(want)
                if stat.ephemeralOwner != self.zk.client_id[0]:
                    self.zk.delete(want)
                    self.zk.create(want, data, ephemeral=True, makepath=True)
            except Exception:  # connection trouble: the next CONNECTED retries
                log.exception("could not register %s yet", want)
                return
            try:
                self.zk.delete(other)
            except NoNodeError:
                pass
            except Exception:
                log.exception("could not remove %s", other)
                return
            log.info("registered %s", want)
            self._expose_session()

    def _expose_session(self) -> None:
        """Write the session to ``$BK_DEBUG_ZK_SESSION_FILE`` (debug hook, see above)."""
        path = os.environ.get(SESSION_FILE_ENV)
        if not path or self.zk is None:
            return
        session_id, password = self.zk.client_id
        tmp = f"{path}.tmp"
        with open(tmp, "w") as f:
            f.write(f"{session_id:x} {password.hex()}\n")
        os.replace(tmp, path)

    def set_read_only(self, read_only: bool) -> None:
        """Move the registration between ``available/`` and ``available/readonly/``."""
        self.read_only = read_only
        self._register()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            zk, self.zk = self.zk, None
        if zk is not None:
            try:
                for ro in (False, True):
                    try:
                        zk.delete(self._path(ro))
                    except NoNodeError:
                        pass
            finally:
                zk.stop()
                zk.close()
