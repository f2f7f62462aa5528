"""What a client and a bookie must agree on, stated once (both import it from here).

``MAX_ENTRY_SIZE``: the largest entry payload (bytes, digest not counted) a bookie stores and
a client sends. A bookie refuses a larger one with ``TooLargeError``
(:func:`bookie_server.validation.check_entries`); a ledger writer refuses it before sending
(:class:`bk_spark.core.ledger.LedgerHandle`) and log and Spark writers split their batches
under it. It is the default of both ``BookieConfig.max_entry_size`` (``bk bookie
--max-entry-size``) and ``BookKeeperConfig.max_entry_size``: change one side only together
with the other (a client allowed more than its bookies gets ``TooLargeError`` per add).
"""

from __future__ import annotations

#: One mebibyte.
MiB = 1024 * 1024

#: The largest entry payload a bookie accepts and a client sends (BookKeeper's
#: ``nettyMaxFrameSizeBytes`` plays this role there, 5 MiB by default too).
MAX_ENTRY_SIZE = 5 * MiB
