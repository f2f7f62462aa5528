"""The cluster's instance id and the bookies' cookies in ZooKeeper (a kazoo recipe).

Layout under the metadata service root (BookKeeper's)::

    <root>/INSTANCEID              the cluster's instance id (a random uuid), created once,
                                   when the root is first initialised (by the first bookie
                                   that starts on it: :func:`ensure_instance_id`)
    <root>/cookies/<bookie id>     each bookie's cookie, a JSON document
                                   (:class:`~bk_spark.protocol.cookie_rules.Cookie`)

Creating the instance id is a plain ``create`` (ZooKeeper's own atomic "create if absent":
two first bookies racing both end up with the winner's id). Every change of an existing
cookie is a compare-and-swap through :func:`~bk_spark.io.metadata_store.metadata_update_loop`
(:meth:`CookieStore.update`); a new cookie is created only where none exists.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from bk_spark.errors import (
    CookieNotFoundError,
    MetadataSerializationError,
    MetadataStoreError,
    MetadataVersionError,
)
from bk_spark.io.metadata_store import Versioned, metadata_update_loop
from bk_spark.metadata_uri import MetadataServiceUri
from bk_spark.protocol.cookie_rules import Cookie, CookieFormatError


def read_instance_id(zk: KazooClient, msu: MetadataServiceUri) -> str | None:
    """The cluster's instance id, None if the root was never initialised."""
    try:
        data, _ = zk.retry(zk.get, msu.instance_id_path)
    except NoNodeError:
        return None
    return data.decode().strip() or None


def ensure_instance_id(zk: KazooClient, msu: MetadataServiceUri) -> str:
    """The cluster's instance id, created now (a random uuid) if the root has none."""
    try:
        zk.retry(zk.create, msu.instance_id_path, uuid.uuid4().hex.encode(), makepath=True)
    except NodeExistsError:
        pass  # created before (or by a racing first bookie): theirs is the cluster's
    found = read_instance_id(zk, msu)
    if found is None:  # pragma: no cover - an empty INSTANCEID written by hand
        raise MetadataStoreError(
            f"{msu.instance_id_path} is empty: delete it so a bookie creates one")
    return found


class CookieStore:
    """The bookies' cookies under ``<root>/cookies`` (``zk`` is owned by the caller)."""

    def __init__(self, zk: KazooClient, msu: MetadataServiceUri) -> None:
        self._zk = zk
        self.msu = msu

    def path(self, bookie_id: str) -> str:
        return f"{self.msu.cookies_path}/{bookie_id}"

    def read(self, bookie_id: str) -> Versioned[Cookie]:
        """The cookie of ``bookie_id`` with its version (:class:`CookieNotFoundError`)."""
        try:
            data, stat = self._zk.retry(self._zk.get, self.path(bookie_id))
        except NoNodeError:
            raise CookieNotFoundError(
                f"no cookie for bookie {bookie_id} under {self.msu.cookies_path}") from None
        try:
            return Versioned(Cookie.from_bytes(data), stat.version)
        except CookieFormatError as exc:
            raise MetadataSerializationError(
                f"{self.path(bookie_id)} holds no cookie ({exc}): delete it with "
                f"`bk cookie delete {bookie_id} --yes`") from None

    def find(self, bookie_id: str) -> Versioned[Cookie] | None:
        """Like :meth:`read`, None when there is none."""
        try:
            return self.read(bookie_id)
        except CookieNotFoundError:
            return None

    def create(self, cookie: Cookie) -> Versioned[Cookie]:
        """Store the cookie of a new bookie; :class:`MetadataVersionError` if one exists
        (another process with the same bookie id stamped it meanwhile)."""
        try:
            self._zk.retry(self._zk.create, self.path(cookie.bookie_id), cookie.to_bytes(),
                           makepath=True)
        except NodeExistsError:
            current = self.read(cookie.bookie_id)
            if current.value == cookie:  # our own create, retried after a connection loss
                return current
            raise MetadataVersionError(
                f"bookie {cookie.bookie_id} got a cookie meanwhile: is another bookie "
                f"starting with the same address?") from None
        return Versioned(cookie, 0)

    def write(self, cookie: Cookie, version: int) -> Versioned[Cookie]:
        """Compare-and-swap the cookie of ``cookie.bookie_id`` at ``version``."""
        try:
            stat = self._zk.retry(self._zk.set, self.path(cookie.bookie_id),
                                  cookie.to_bytes(), version=version)
        except BadVersionError:
            raise MetadataVersionError(
                f"the cookie of {cookie.bookie_id} changed since version {version}") from None
        except NoNodeError:
            raise CookieNotFoundError(
                f"the cookie of {cookie.bookie_id} was deleted meanwhile") from None
        return Versioned(cookie, stat.version)

    def update(self, bookie_id: str, needs_change: Callable[[Cookie], bool],
               make_change: Callable[[Cookie], Cookie]) -> Versioned[Cookie]:
        """Change the cookie of ``bookie_id`` through :func:`metadata_update_loop`."""
        return metadata_update_loop(read=lambda: self.read(bookie_id), write=self.write,
                                    needs_change=needs_change, make_change=make_change)

    def delete(self, bookie_id: str, version: int = -1) -> None:
        """Delete the cookie of ``bookie_id`` (only at ``version`` unless -1)."""
        try:
            self._zk.retry(self._zk.delete, self.path(bookie_id), version=version)
        except NoNodeError:
            raise CookieNotFoundError(f"no cookie for bookie {bookie_id}") from None
        except BadVersionError:
            raise MetadataVersionError(
                f"the cookie of {bookie_id} changed since version {version}") from None

    def bookie_ids(self) -> list[str]:
        """Every bookie id with a cookie, sorted."""
        try:
            return sorted(self._zk.retry(self._zk.get_children, self.msu.cookies_path))
        except NoNodeError:
            return []
