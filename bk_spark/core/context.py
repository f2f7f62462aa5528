"""The small client context every ledger operation runs over.

The operations of :mod:`bk_spark.core` (adding and closing: :mod:`.ledger`, ensemble changes:
:mod:`.ensemble_change`, reads and the LAC: :mod:`.reader`, recovery: :mod:`.recovery`) need
four things from a client: its configuration, its pool of bookie connections, its ledger
metadata store (the one CAS loop) and the current placement topology. :class:`ClientContext`
names them, so the operations depend on this interface, not on
:class:`~bk_spark.core.client.BookKeeper` (which builds the context and sits above them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from bk_spark.errors import InvalidConfigError
from bk_spark.io.bookie_client import BookieClientPool, ClientConfig
from bk_spark.io.metadata_store import LedgerMetadataStore
from bk_spark.protocol.placement import Topology


@dataclass(frozen=True)
class BookKeeperConfig:
    """Client options. ``explicit_lac_interval_s``: how soon an idle writer tells
    bookies its last-add-confirmed (so tailing readers see the last entry).
    ``tune_allocator``: raise glibc's mmap and trim thresholds in this process so that
    megabyte-sized batches do not cost page faults each (:mod:`bk_spark.allocator`); off
    by default, since it changes the whole process's malloc: opt in for a process that
    mostly moves data through the client (the benchmarks, Spark's Python workers do).
    ``add_round_max_entries``: most entries a ledger writer ships in one round (one request
    per bookie); ``add_linger_s``: how long a writer with adds in flight waits for a round of
    at least 64 entries before it ships fewer (a lone add on an idle ledger never waits).
    ``min_racks_per_write_quorum``: racks each write quorum should span when bookies
    register several (BookKeeper's ``minNumRacksPerWriteQuorum``, :mod:`.placement`)."""

    max_entry_size: int = 5 * 1024 * 1024
    explicit_lac_interval_s: float = 0.05
    client: ClientConfig = field(default_factory=ClientConfig)
    tune_allocator: bool = False
    add_round_max_entries: int = 1000
    add_linger_s: float = 0.001
    min_racks_per_write_quorum: int = 2

    def __post_init__(self) -> None:
        if self.add_round_max_entries < 1:
            raise InvalidConfigError(
                f"add_round_max_entries must be >= 1, got {self.add_round_max_entries}")
        if not self.add_linger_s >= 0:
            raise InvalidConfigError(f"add_linger_s must be >= 0, got {self.add_linger_s}")


class ClientContext(Protocol):
    """What a ledger operation uses of a client."""

    config: BookKeeperConfig
    bookies: BookieClientPool
    metadata_store: LedgerMetadataStore

    def topology(self) -> Topology:
        """The writable bookies and their racks, as placement decides on them."""
        ...
