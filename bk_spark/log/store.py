"""Every change of a log's metadata goes through :func:`update_log`, the one CAS loop
(:func:`~bk_spark.io.metadata_store.metadata_update_loop`) over the log store.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from bk_spark.errors import (
    LogNotFoundError,
)
from bk_spark.io.log_store import LogMetadataStore
from bk_spark.io.metadata_store import DEFAULT_MAX_ATTEMPTS, Versioned, metadata_update_loop
from bk_spark.protocol.log_format import (
    LogMetadata,
)

if TYPE_CHECKING:
    from bk_spark.core.client import BookKeeper


#: Custom metadata key naming the log a ledger was created for (finds orphans).
LEDGER_LOG_KEY = "bk-spark.log"


def log_store(bk: BookKeeper) -> LogMetadataStore:
    return LogMetadataStore(bk.zk, bk.msu.root)


def update_log(bk: BookKeeper, name: str, needs_change: Callable[[LogMetadata], bool],
                make_change: Callable[[LogMetadata], LogMetadata],
                current: Versioned[LogMetadata] | None = None,
                max_attempts: int = DEFAULT_MAX_ATTEMPTS,
                allow_deleting: bool = False,
                also_check: Sequence[tuple[str, int]] = (),
                also_delete: Sequence[str] = ()) -> Versioned[LogMetadata]:
    """Every change of a log's metadata: :func:`metadata_update_loop` over the log store.

    A log being deleted is not found (unless ``allow_deleting``). ``also_check`` /
    ``also_delete``: conditions on and deletes of other znodes, in the transaction of each
    write (:meth:`LogMetadataStore.write`).
    """
    store = log_store(bk)

    def needs(m: LogMetadata) -> bool:
        if m.deleting and not allow_deleting:
            raise LogNotFoundError(f"log {name!r} is being deleted")
        return needs_change(m)

    return metadata_update_loop(
        read=lambda: store.read(name),
        write=lambda md, version: store.write(name, md, version, also_check, also_delete),
        needs_change=needs, make_change=make_change, current=current,
        max_attempts=max_attempts)
