"""The ledger core: BookKeeper's replication protocol over bookies and ZooKeeper, one
operation per module (add and close: ledger, ensemble change, read and LAC: reader,
recovery), over the pure rules of :mod:`bk_spark.protocol` and the adapters of
:mod:`bk_spark.io`. Logs of ledgers are the layer above: :mod:`bk_spark.log`."""

from bk_spark.core.client import BookKeeper, BookKeeperConfig
from bk_spark.core.ledger import LedgerHandle
from bk_spark.core.reader import ReadHandle
from bk_spark.io.entry import LedgerEntry
from bk_spark.protocol.log_format import LogRecord, Position

__all__ = ["BookKeeper", "BookKeeperConfig", "LedgerEntry", "LedgerHandle", "LogRecord",
           "Position", "ReadHandle"]
