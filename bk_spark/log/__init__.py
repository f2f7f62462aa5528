"""A replicated log made of ledgers (ledgers-to-logs.txt, bookkeeper-protocol.txt).

"A log in BookKeeper is built from some number of ledgers, with a fixed order. A ledger
represents a single segment of the log. [...] there can only ever be one leader that adds
entries to a single ledger." The ordered ledger list lives in ZooKeeper and changes only by
compare-and-swap (CAS), through :func:`bk_spark.log.store.update_log`; its layout (a compact
tail in ``<root>/logs/<name>`` plus immutable spilled segments, ~22 bytes per ledger) and
the entry framing (a 9-byte timestamp header; 10 bytes for a null value) are documented in
:mod:`bk_spark.protocol.log_format`; what a writer, new owner or committer decides from the
list it reads is :mod:`bk_spark.protocol.log_rules`.

One protocol step, one module:

* :mod:`~bk_spark.log.takeover`: "Opening a log" (five steps), :func:`open_log_writer`.
* :mod:`~bk_spark.log.writer`: appends and "Rolling ledgers" (four steps).
* :mod:`~bk_spark.log.acks`: acknowledgements in append order across ledgers.
* :mod:`~bk_spark.log.reader`: reading and tailing without disturbing the writer.
* :mod:`~bk_spark.log.view`: the ledger list as read (ledger at an index, readable ends).
* :mod:`~bk_spark.log.admin`: create, list, properties, truncate, delete.
* :mod:`~bk_spark.log.commit`: ledgers written elsewhere added in one CAS with a
  transaction id (the Spark sink's exactly-once commit).

Applications reach logs from the client, like ledgers (:mod:`bk_spark.client`)::

    with bk_spark.BookKeeper(uri) as bk:
        w = bk.open_log_writer("events", password=b"p", roll_max_entries=10_000)
        pos = w.append(b"hello")                       # Position(ledger_id, entry_id)
        w.close()
        r = bk.open_log_reader("events", start="earliest", password=b"p")
        for record in r.read_available():
            print(record.position, record.timestamp_ms, record.payload)  # None: null

The functions here take the client first (``open_log_writer(bk, "events", ...)``): the log
layer's API, used by the client's methods, the data source and the CLI. For applications
they are the older style (deprecated: prefer the client's methods); they keep working.
"""

from bk_spark.log.admin import (
    create_log,
    delete_log,
    list_logs,
    log_incarnation,
    log_ledgers,
    log_metadata,
    truncate_log,
    update_log_properties,
)
from bk_spark.log.commit import (
    ClosedLedger,
    CommitResult,
    WrittenLedger,
    commit_ledgers,
    write_closed_ledger,
)
from bk_spark.log.reader import LogReader, Start, open_log_reader
from bk_spark.log.store import LEDGER_LOG_KEY
from bk_spark.log.takeover import open_log_writer
from bk_spark.log.view import LogView, ledger_end, open_log_view, unlisted_ledgers, watch_log
from bk_spark.log.writer import LogWriter, LogWriterConfig
from bk_spark.protocol.log_format import LedgerInfo, LogLimits, LogMetadata, LogRecord, Position
from bk_spark.protocol.log_rules import TXN_PROPERTY, committed_txn

__all__ = [
    "LEDGER_LOG_KEY", "TXN_PROPERTY", "ClosedLedger", "CommitResult", "LedgerInfo",
    "LogLimits", "LogMetadata", "LogReader", "LogRecord", "LogView", "LogWriter",
    "LogWriterConfig", "Position", "Start", "WrittenLedger", "commit_ledgers",
    "committed_txn", "create_log", "delete_log", "ledger_end", "list_logs",
    "log_incarnation", "log_ledgers", "log_metadata", "open_log_reader", "open_log_view",
    "open_log_writer", "truncate_log", "unlisted_ledgers", "update_log_properties",
    "watch_log", "write_closed_ledger",
]
