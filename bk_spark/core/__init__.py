"""The ledger core: BookKeeper's replication protocol over bookies and ZooKeeper."""

from bk_spark.core.client import BookKeeper, BookKeeperConfig
from bk_spark.core.ledger import LedgerHandle
from bk_spark.core.log import LogReader, LogWriter
from bk_spark.core.reader import ReadHandle
from bk_spark.io.entry import LedgerEntry
from bk_spark.protocol.log_format import LogRecord, Position

__all__ = ["BookKeeper", "BookKeeperConfig", "LedgerEntry", "LedgerHandle", "LogReader",
           "LogRecord", "LogWriter", "Position", "ReadHandle"]
