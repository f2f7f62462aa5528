"""ZooKeeper connections (kazoo) shared by bookies and clients."""

from __future__ import annotations

from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from bk_spark.errors import BKError
from bk_spark.metadata_uri import MetadataServiceUri


class MetadataServiceUnavailableError(BKError):
    """ZooKeeper could not be reached at the metadata service URI."""


def connect_zk(msu: MetadataServiceUri, timeout: float = 15.0,
               session_timeout: float = 10.0) -> KazooClient:
    """A started kazoo client for ``msu`` (retrying connection loss forever)."""
    client = KazooClient(
        hosts=msu.hosts,
        timeout=session_timeout,
        connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0),
        command_retry=KazooRetry(max_tries=5, delay=0.1, max_delay=1.0),
    )
    try:
        client.start(timeout=timeout)
    except KazooTimeoutError as exc:
        client.close()
        raise MetadataServiceUnavailableError(
            f"cannot reach ZooKeeper at {msu.hosts} (metadata service {msu.uri}) within "
            f"{timeout:.0f}s: is it running? `bk sandbox start` runs one locally."
        ) from exc
    return client
