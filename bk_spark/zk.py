"""ZooKeeper connections (kazoo) shared by bookies and clients."""

from __future__ import annotations

import logging
import os

from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from bk_spark.errors import BKError
from bk_spark.metadata_uri import MetadataServiceUri


class MetadataServiceUnavailableError(BKError):
    """ZooKeeper could not be reached at the metadata service URI."""


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


def connect_zk(msu: MetadataServiceUri, timeout: float = 15.0,
               session_timeout: float = 10.0) -> KazooClient:
    """A started kazoo client for ``msu`` (retrying connection loss forever)."""
    quiet_kazoo_logger()
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
