"""One role per cluster, elected with ZooKeeper's election recipe (kazoo's ``Election`` on
the caller's own session): the Auditor and the offloader contend this way.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kazoo.client import KazooClient

from bk_spark.errors import BKError
from bk_spark.io.zk import ZooKeeperError

log = logging.getLogger(__name__)


def run_elected(zk: KazooClient, path: str, identity: str,
                lead: Callable[[threading.Event], None], stop: threading.Event,
                role: str, before_each: Callable[[], None] | None = None) -> None:
    """Contend for ``role`` at ``path``; run ``lead(stop)`` while elected; contend again when
    it returns or fails (e.g. after a session loss); until ``stop`` is set.
    ``before_each``: runs before each contention (e.g. clears a session-lost flag)."""
    while not stop.is_set():
        election = zk.Election(path, identity)
        canceller = threading.Thread(target=lambda e=election: (stop.wait(), e.cancel()),
                                     daemon=True, name=f"{role}-cancel")
        canceller.start()
        try:
            if before_each is not None:
                before_each()
            election.run(lead, stop)
        except (ZooKeeperError, BKError) as exc:
            log.warning("%s election: %s", role, exc)
            stop.wait(1.0)
        except Exception:  # kazoo raises its own errors on a closed client
            if stop.is_set():
                return
            log.exception("%s election failed", role)
            stop.wait(1.0)


def elected(zk: KazooClient, path: str) -> str | None:
    """The identity holding the role at ``path`` now (None: no contender)."""
    try:
        contenders = zk.Election(path).contenders()
    except Exception:  # no such path yet, or ZooKeeper unreachable
        return None
    return contenders[0] if contenders else None
