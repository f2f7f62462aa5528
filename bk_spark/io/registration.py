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

A client keeps all of this in memory under ZooKeeper watches (:class:`RegistrationCache`,
BookKeeper's ``ZKRegistrationClient`` with ``BookieWatcherImpl``): placement, ledger
creation, ensemble changes and the Auditor read no registration znode on their path.
:func:`list_bookies` is the one-shot read for tools and for a cache without live watches.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.protocol.states import EventType, WatchedEvent

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
    """The registered bookies, writable first, each with its readonly flag (one read of
    ZooKeeper, for tools; a client's placement reads its :class:`RegistrationCache`)."""
    msu = uri if isinstance(uri, MetadataServiceUri) else parse_metadata_service_uri(uri)
    own = zk is None
    client = connect_zk(msu) if zk is None else zk
    try:
        try:
            marked = client.get_children(msu.decommissioning_path)
        except NoNodeError:
            marked = []
        markers = {}
        for child in marked:
            try:
                markers[child] = _marker(client, msu, child)
            except NoNodeError:
                continue
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
                out.append(registered_bookie(child, ro, info, markers))
        return out
    finally:
        if own:
            client.stop()
            client.close()


def registered_bookie(bookie_id: str, read_only: bool, info: dict,
                      markers: Mapping[str, str | None]) -> RegisteredBookie:
    """A registration as placement sees it: being decommissioned while a marker names the
    running instance (the module docstring)."""
    leaving = bookie_id in markers and markers[bookie_id] == info.get("instance")
    return RegisteredBookie(bookie_id, read_only, info, leaving)


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


@dataclass(frozen=True)
class RegistrationView:
    """The registered bookies at one moment (writable first) and the child versions of the
    writable and readonly registration znodes they were read at
    (:func:`registrations_version`: equal versions mean no bookie came or went between)."""

    bookies: tuple[RegisteredBookie, ...]
    version: tuple[int, int]


_WRITABLE, _READONLY, _MARKERS = "writable", "readonly", "markers"
_ALL = frozenset((_WRITABLE, _READONLY, _MARKERS))


class RegistrationCache:
    """The registered bookies of one cluster, in memory, kept current by ZooKeeper watches
    (BookKeeper's ``ZKRegistrationClient`` and ``BookieWatcherImpl``).

    Theory of operation.

    * **Watched znodes.** ``<root>/available`` (writable bookies), ``.../readonly`` and
      ``<root>/decommissioning``: a child watch on each (an exists watch while one is not
      created yet), a data watch on each registration read (its deletion invalidates the
      data kept: a bookie restarted at the same address registers a new znode with a new
      instance id) and on each decommissioning marker (``bk bookie decommission`` may
      rewrite one in place). ZooKeeper watches fire once; every re-read re-arms them.
    * **One refresher thread** makes every read: a watch callback only notes what changed
      and wakes it, so kazoo's event thread never waits on ZooKeeper. A re-read reads the
      lists and the data of registrations not known yet, then publishes one new immutable
      :class:`RegistrationView`. There is no timer: nothing is read unless ZooKeeper said
      something changed (or a read failed: it is retried after :data:`RETRY_S`).
    * **A bookie moving between writable and readonly is never absent from both**
      (:class:`BookieRegistration` creates the new znode before deleting the old one, and
      the Auditor would take an absent bookie for a lost one): the lists are read writable
      then readonly, and writable again when a bookie of the previous view is in neither.
    * **Convergence.** ZooKeeper deletes a dead bookie's registration when its session
      expires (after its session timeout; at once for a clean stop) and adds a starting
      one's when it registers; the child watch fires then, and the view follows one
      re-read later: within the bookie's session timeout plus a few round trips.
    * **Sessions.** While the connection is SUSPENDED the view is kept (no ZooKeeper write,
      so no ledger creation, can happen meanwhile; the same session resuming keeps its
      watches). When the session is LOST its watches are gone: the view is *stale* until
      the refresher has read everything again on the new session (it starts at the next
      CONNECTED). A stale cache answers :meth:`view` by reading ZooKeeper
      (:func:`list_bookies`), so nothing is placed on a view no watch kept current.
      (BookKeeper keeps placing on its last view and re-reads after an ``Expired`` event
      with a back-off; a dead bookie placed on then costs an ensemble change.) After any
      reconnection everything is read again.

    Lock: ``_lock`` guards what changed, the published view and the stale flag; no
    ZooKeeper call is made under it.
    """

    #: Seconds before a failed re-read is tried again (ZooKeeper away).
    RETRY_S = 0.5
    #: Longest :meth:`view` waits for a re-read under way (a change ZooKeeper already told
    #: this client about is answered from the view that includes it).
    PENDING_WAIT_S = 1.0

    def __init__(self, zk: KazooClient, msu: MetadataServiceUri) -> None:
        self._zk = zk
        self.msu = msu
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._dirty: set[str] = set()
        self._refreshing = False
        self._invalid: set[str] = set()  # registration paths whose data changed or went
        self._stale = True  # no read on the current session yet
        self._sessions_lost = 0  # sessions lost so far (a read spanning a loss is stale)
        self._stopped = False
        self._view: RegistrationView | None = None
        # refresher-owned: what was read
        self._infos: dict[str, dict] = {}  # registration path -> its data
        self._lists: tuple[list[str], list[str]] = ([], [])
        self._versions = (-1, -1)
        self._markers: dict[str, str | None] = {}
        self._read_in_session = 0  # _sessions_lost at the last read
        #: Re-reads done (each one set off by a watch, a new session or a failed read).
        self.refreshes = 0
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name="bookie-registrations")

    # ------------------------------------------------------------------ public
    def start(self) -> None:
        """Read the registrations (raising if ZooKeeper cannot be read now), arm the
        watches and start the refresher."""
        self._zk.add_listener(self._on_state)
        try:
            self._refresh(set(_ALL))
        except BaseException:
            self._zk.remove_listener(self._on_state)
            raise
        self._thread.start()

    def stop(self) -> None:
        """Stop the refresher (the watches left armed do nothing more)."""
        with self._lock:
            self._stopped = True
            self._wake.notify_all()
        self._zk.remove_listener(self._on_state)
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(5.0)

    @property
    def stale(self) -> bool:
        """True while no watch keeps the view current (before the first read, and from a
        session loss until everything was read again)."""
        with self._lock:
            return self._stale or self._view is None

    def view(self) -> RegistrationView:
        """The registered bookies and their version: from memory, or (stale: see the class
        docstring) read from ZooKeeper now. A change this client's session was told about
        (a watch fired) is in the view returned: a re-read under way is waited for (up to
        :data:`PENDING_WAIT_S`), so a caller that saw a change through this session (ZooKeeper
        sends a watch event before any answer showing its change) sees it here too."""
        with self._lock:
            deadline = time.monotonic() + self.PENDING_WAIT_S
            while (self._dirty or self._refreshing) and not self._stale and \
                    not self._stopped:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._wake.wait(left)
            view = None if self._stale else self._view
        if view is not None:
            return view
        version = registrations_version(self.msu, self._zk)
        return RegistrationView(tuple(list_bookies(self.msu, zk=self._zk)), version)

    def bookies(self) -> list[RegisteredBookie]:
        """The registered bookies, writable first (:meth:`view`)."""
        return list(self.view().bookies)

    # ------------------------------------------------------------------ watches
    def _mark(self, kinds: Iterable[str], invalid: str | None = None) -> None:
        with self._lock:
            if self._stopped:
                return
            self._dirty.update(kinds)
            if invalid is not None:
                self._invalid.add(invalid)
            self._wake.notify_all()

    def _on_list(self, event: WatchedEvent) -> None:
        if event.type != EventType.NONE:  # session events: _on_state
            self._mark((_WRITABLE, _READONLY))

    def _on_registration(self, event: WatchedEvent) -> None:
        if event.type != EventType.NONE:
            self._mark((_WRITABLE, _READONLY), invalid=event.path)

    def _on_markers(self, event: WatchedEvent) -> None:
        if event.type != EventType.NONE:
            self._mark((_MARKERS,))

    def _on_state(self, state: str) -> None:
        if state == KazooState.LOST:
            with self._lock:
                self._stale = True  # the session's watches are gone
                self._sessions_lost += 1
        elif state == KazooState.CONNECTED:
            self._mark(_ALL)  # a new session, or a resumed one: read everything again

    # ------------------------------------------------------------------ refresher
    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._dirty and not self._stopped:
                    self._wake.wait()
                if self._stopped:
                    return
                kinds, self._dirty = self._dirty, set()
                self._refreshing = True
            try:
                self._refresh(kinds)
            except Exception as exc:  # noqa: BLE001 - ZooKeeper away: read again later
                with self._lock:
                    self._refreshing = False
                    self._wake.notify_all()
                if self._zk.client_state == "CLOSED":
                    return
                log.info("bookie registrations: re-read failed (%s); retrying", exc)
                with self._lock:
                    self._dirty |= kinds
                    self._wake.wait(self.RETRY_S)

    def _refresh(self, kinds: set[str]) -> None:
        """Read what ``kinds`` name (re-arming their watches) and publish the view."""
        with self._lock:
            invalid, self._invalid = self._invalid, set()
            lost = self._sessions_lost
        forget, self._read_in_session = lost != self._read_in_session, lost
        if forget:  # a new session: the data watches are gone with the old one
            self._infos.clear()
            kinds = kinds | _ALL
        for path in invalid:
            self._infos.pop(path, None)
        msu = self.msu
        if _MARKERS in kinds:
            markers: dict[str, str | None] = {}
            for child in self._children(msu.decommissioning_path, self._on_markers)[0]:
                data = self._data(f"{msu.decommissioning_path}/{child}", self._on_markers)
                if data is not None:
                    markers[child] = data.decode() or None
            self._markers = markers
        if kinds & {_WRITABLE, _READONLY}:
            before = {b for names in self._lists for b in names}
            writable, wv = self._read_list(msu.available_path)
            readonly, rv = self._read_list(msu.readonly_path)
            if before - set(writable) - set(readonly):
                writable, wv = self._read_list(msu.available_path)
            self._lists, self._versions = (writable, readonly), (wv, rv)
        out: list[RegisteredBookie] = []
        for path, names, ro in ((msu.available_path, self._lists[0], False),
                                (msu.readonly_path, self._lists[1], True)):
            for child in names:
                info = self._infos.get(f"{path}/{child}")
                if info is None:
                    continue
                out.append(registered_bookie(child, ro, info, self._markers))
        with self._lock:
            self.refreshes += 1
            self._refreshing = False
            self._wake.notify_all()
            self._view = RegistrationView(tuple(out), self._versions)
            if kinds >= _ALL and self._sessions_lost == lost:
                self._stale = False  # all read (and watched) on the current session

    def _children(self, path: str, watch: object) -> tuple[list[str], int]:
        """``path``'s children and child version, watched; ``([], -1)`` and an exists watch
        (told when it is created) when it does not exist."""
        while True:
            try:
                children, stat = self._zk.get_children(path, watch=watch, include_data=True)
                return sorted(children), stat.cversion
            except NoNodeError:
                if self._zk.exists(path, watch=watch) is None:
                    return [], -1

    def _data(self, path: str, watch: object) -> bytes | None:
        try:
            data, _ = self._zk.get(path, watch=watch)
        except NoNodeError:
            return None
        return data

    def _read_list(self, path: str) -> tuple[list[str], int]:
        """The bookies registered under ``path`` whose data could be read, and its child
        version; reads the data (watched) of those not known yet."""
        children, version = self._children(path, self._on_list)
        names = []
        for child in children:
            if child == "readonly":
                continue
            key = f"{path}/{child}"
            if key not in self._infos:
                data = self._data(key, self._on_registration)
                if data is None:
                    continue  # gone meanwhile: the child watch fired
                try:
                    self._infos[key] = json.loads(data or b"{}")
                except ValueError:
                    continue
            names.append(child)
        listed = {f"{path}/{c}" for c in children}
        for key in [k for k in self._infos if k.rsplit("/", 1)[0] == path and k not in listed]:
            del self._infos[key]
        return names, version


def _marker(zk: KazooClient, msu: MetadataServiceUri, bookie_id: str) -> str | None:
    """The instance a decommissioning marker names (None: empty); NoNodeError: none."""
    data, _ = zk.get(f"{msu.decommissioning_path}/{bookie_id}")
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
