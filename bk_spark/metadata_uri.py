"""Parsing of metadata service URIs such as ``zk://127.0.0.1:2181/ledgers``."""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlsplit

from bk_spark.errors import InvalidConfigError

DEFAULT_METADATA_SERVICE_URI = "zk://127.0.0.1:2181/ledgers"
ENV_METADATA_SERVICE_URI = "BK_METADATA_SERVICE_URI"


@dataclass(frozen=True)
class MetadataServiceUri:
    """A ZooKeeper connect string plus the root znode of one bk-spark cluster."""

    hosts: str  # kazoo connect string: "h1:p1,h2:p2"
    root: str  # e.g. "/ledgers"

    @property
    def uri(self) -> str:
        return f"zk://{self.hosts}{self.root}"

    @property
    def available_path(self) -> str:
        """Where writable bookies register (ephemeral ``<root>/available/<host:port>``)."""
        return f"{self.root}/available"

    @property
    def readonly_path(self) -> str:
        """Where readonly bookies register."""
        return f"{self.root}/available/readonly"

    @property
    def decommissioning_path(self) -> str:
        """Markers of bookies being decommissioned (``<root>/decommissioning/<host:port>``,
        :func:`bk_spark.io.registration.mark_decommissioning`)."""
        return f"{self.root}/decommissioning"

    @property
    def instance_id_path(self) -> str:
        """The cluster's instance id, created once (:mod:`bk_spark.io.cookies`)."""
        return f"{self.root}/INSTANCEID"

    @property
    def cookies_path(self) -> str:
        """Each bookie's cookie (``<root>/cookies/<host:port>``, :mod:`bk_spark.io.cookies`)."""
        return f"{self.root}/cookies"


def parse_metadata_service_uri(uri: str | None) -> MetadataServiceUri:
    """Parse ``zk://host:port[,host:port...]/root``; None means env or sandbox default."""
    if uri is None or uri == "":
        uri = os.environ.get(ENV_METADATA_SERVICE_URI) or DEFAULT_METADATA_SERVICE_URI
    parts = urlsplit(uri)
    if parts.scheme not in ("zk", "zk+hierarchical", "zk+null"):
        raise InvalidConfigError(
            f"metadataServiceUri {uri!r}: expected zk://host:port/root, e.g. "
            f"{DEFAULT_METADATA_SERVICE_URI}"
        )
    hosts = parts.netloc
    if not hosts:
        raise InvalidConfigError(f"metadataServiceUri {uri!r}: no ZooKeeper host given")
    for hp in hosts.split(","):
        host, _, port = hp.rpartition(":")
        if not host or not port.isdigit() or not (0 < int(port) < 65536):
            raise InvalidConfigError(
                f"metadataServiceUri {uri!r}: {hp!r} is not host:port"
            )
    root = parts.path.rstrip("/") or "/ledgers"
    if not root.startswith("/"):
        root = "/" + root
    return MetadataServiceUri(hosts=hosts, root=root)
