"""The log metadata store: a log's compact tail in ``<root>/logs/<name>`` and its
immutable spilled segments under ``<root>/logs/<name>/segments/<n>`` (kazoo), read with
their version and written back with ``version=`` in one transaction (a recipe in the
manner of kazoo's: conflicts surface as :class:`~bk_spark.errors.MetadataVersionError`).
The layout is documented in :mod:`bk_spark.protocol.log_format`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError, RolledBackError
from kazoo.protocol.states import WatchedEvent

from bk_spark.errors import (
    LedgerStateError,
    LogExistsError,
    LogNotFoundError,
    LogTruncatedError,
    MetadataStoreError,
    MetadataVersionError,
)
from bk_spark.io.metadata_store import Versioned
from bk_spark.io.zk import delete_if_present
from bk_spark.protocol.log_format import (
    LogMetadata,
    Segment,
    validate_log_name,
)


class LogMetadataStore:
    """Log metadata in ZooKeeper (a kazoo recipe): versioned read, CAS write, segments.

    A write that spills or drops segments commits the segment znodes and the main znode's
    CAS in one ZooKeeper transaction, so a segment exists iff a stored main znode lists it.
    """

    def __init__(self, zk: KazooClient, root: str) -> None:
        self._zk = zk
        self.logs_path = f"{root.rstrip('/')}/logs"

    def path(self, name: str) -> str:
        return f"{self.logs_path}/{validate_log_name(name)}"

    def segment_path(self, name: str, number: int) -> str:
        return f"{self.path(name)}/segments/{number:010d}"

    def names(self) -> list[str]:
        try:
            return sorted(self._zk.retry(self._zk.get_children, self.logs_path))
        except NoNodeError:
            return []

    def create(self, name: str, md: LogMetadata) -> Versioned[LogMetadata]:
        path = self.path(name)
        data = md.to_bytes()
        self._zk.retry(self._zk.ensure_path, self.logs_path)

        def commit() -> list[Any]:
            t = self._zk.transaction()
            t.create(path, data)
            t.create(f"{path}/segments", b"")
            return t.commit()

        results = self._zk.retry(commit)
        if any(isinstance(r, NodeExistsError) for r in results):
            raise LogExistsError(f"log {name!r} already exists")
        raise_first_error(results)
        return Versioned(md.without_pending(), 0)

    def read(self, name: str, watch: Callable[[WatchedEvent], None] | None = None
             ) -> Versioned[LogMetadata]:
        try:
            data, stat = self._zk.retry(self._zk.get, self.path(name), watch=watch)
        except NoNodeError:
            raise log_not_found(name) from None
        return Versioned(LogMetadata.from_bytes(data), stat.version)

    def write(self, name: str, md: LogMetadata, version: int,
              also_check: Sequence[tuple[str, int]] = (), also_delete: Sequence[str] = ()
              ) -> Versioned[LogMetadata]:
        """Compare-and-swap the main znode (plus its pending segment creates/deletes).

        ``also_check`` ((path, version) pairs) and ``also_delete`` (paths): other znodes
        that must still be at that version / must exist and are deleted, in the same
        transaction (a log writer's roll claims its spare ledger this way: its pending
        record deleted, its metadata unchanged since it was created). They come after the
        CAS, so a main znode changed meanwhile is reported as such
        (:class:`MetadataVersionError`: re-read and decide, e.g. this very write landed
        before a connection loss); when only they fail, nothing is written and
        :class:`LedgerStateError` names the znode.
        """
        path = self.path(name)
        data = md.to_bytes()
        segments = [(self.segment_path(name, s.number), s.to_bytes()) for s in md.new_segments]
        dropped = [self.segment_path(name, n) for n in md.dropped_segments]

        def commit() -> list[Any]:
            t = self._zk.transaction()
            for p, d in segments:
                t.create(p, d)
            for p in dropped:
                t.delete(p)
            t.set_data(path, data, version=version)
            for p, v in also_check:
                t.check(p, v)
            for p in also_delete:
                t.delete(p)
            return t.commit()

        results = self._zk.retry(commit)
        cas = len(segments) + len(dropped) + 1
        failed = [r for r in results[:cas]
                  if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
        if failed:
            if self._zk.retry(self._zk.exists, path) is None:
                raise log_not_found(name)
            # A bad version, or a segment another CAS already created/deleted: both mean
            # the main znode changed since it was read.
            raise MetadataVersionError(
                f"log {name!r}: metadata changed since version {version} (another client "
                f"wrote it): re-read it and decide again")
        others = [*(p for p, _v in also_check), *also_delete]
        for p, r in zip(others, results[cas:], strict=True):
            if isinstance(r, Exception) and not isinstance(r, RolledBackError):
                raise LedgerStateError(
                    f"log {name!r}: {p} changed or is gone ({type(r).__name__}): the log "
                    f"metadata was not written")
        return Versioned(md.without_pending(), results[cas - 1].version)

    def read_segment(self, name: str, number: int) -> Segment:
        try:
            data, _stat = self._zk.retry(self._zk.get, self.segment_path(name, number))
        except NoNodeError:
            raise LogTruncatedError(
                f"log {name!r}: segment {number} was removed by truncation") from None
        return Segment.from_bytes(data)

    def delete_tree(self, name: str) -> None:
        delete_if_present(self._zk, self.path(name), recursive=True)


def raise_first_error(results: list[Any]) -> None:
    for r in results:
        if isinstance(r, Exception) and not isinstance(r, RolledBackError):
            raise MetadataStoreError(f"ZooKeeper transaction failed: {r!r}")


def log_not_found(name: str) -> LogNotFoundError:
    return LogNotFoundError(
        f"log {name!r} does not exist: create it (create_log) or open a writer with "
        f"create_if_missing=True")
