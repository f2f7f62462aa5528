"""The client of ledgers and logs: one object, one style for both.

:class:`BookKeeper` is :class:`bk_spark.core.BookKeeper` (ledgers: ``create_ledger``,
``open_ledger``, ``delete_ledger``, ...) with the same methods for logs, as a user of
pulsar-client (``client.create_producer(topic)``) or confluent-kafka expects: the client
opens things, each handle takes its password once::

    from bk_spark import BookKeeper

    with BookKeeper("zk://127.0.0.1:2181/ledgers") as bk:
        w = bk.open_log_writer("events", password=b"p", roll_max_entries=10_000)
        pos = w.append(b"hello")
        r = bk.open_log_reader("events", "earliest", password=b"p")

It lives above the log layer (the layers point down: ``core`` never imports ``log``), and each
method is the :mod:`bk_spark.log` function of the same name with this client passed on;
those functions stay the log layer's API (the data source and the CLI use them), and code
written as ``open_log_writer(bk, name, ...)`` keeps working with either client.
"""

from __future__ import annotations

from typing import Any

from bk_spark.core.client import BookKeeper as _LedgerClient
from bk_spark.log import admin, reader, takeover
from bk_spark.log.reader import LogReader, Start
from bk_spark.log.writer import LogWriter
from bk_spark.protocol.digest import password_bytes
from bk_spark.protocol.log_format import LedgerInfo, LogLimits, LogMetadata, Position


class BookKeeper(_LedgerClient):
    """A client of ledgers and logs (see the module's docstring); ``BookKeeper(uri, config,
    security=...)`` as :class:`bk_spark.core.BookKeeper`."""

    # ----------------------------------------------------------------- logs
    def create_log(self, name: str, *, properties: dict[str, Any] | None = None,
                   quorums: tuple[int, int, int] | None = None) -> LogMetadata:
        """Create an empty log (:func:`bk_spark.log.create_log`)."""
        return admin.create_log(self, name, properties=properties, quorums=quorums)

    def open_log_writer(self, name: str, *, password: bytes | str = b"",
                        create_if_missing: bool = True, ensemble_size: int | None = None,
                        write_quorum_size: int | None = None,
                        ack_quorum_size: int | None = None,
                        roll_max_entries: int | None = None, roll_max_bytes: int | None = None,
                        roll_max_age_s: float | None = None, digest: str = "crc32c",
                        limits: LogLimits | None = None) -> LogWriter:
        """Become the writer of log ``name``, fencing any previous one
        (:func:`bk_spark.log.open_log_writer`); ``password`` is given once, for every
        ledger the writer creates and for :meth:`LogWriter.truncate`."""
        return takeover.open_log_writer(
            self, name, password=password_bytes(password), create_if_missing=create_if_missing,
            ensemble_size=ensemble_size, write_quorum_size=write_quorum_size,
            ack_quorum_size=ack_quorum_size, roll_max_entries=roll_max_entries,
            roll_max_bytes=roll_max_bytes, roll_max_age_s=roll_max_age_s, digest=digest,
            limits=limits)

    def open_log_reader(self, name: str, start: Start = None, *,
                        timestamp_ms: int | None = None, password: bytes | str = b""
                        ) -> LogReader:
        """A reader of log ``name`` from ``start`` ("earliest", "latest", a
        :class:`Position`) or ``timestamp_ms`` (:func:`bk_spark.log.open_log_reader`);
        ``password`` is given once, for every ledger it opens."""
        return reader.open_log_reader(self, name, start, timestamp_ms=timestamp_ms,
                                      password=password_bytes(password))

    def list_logs(self) -> list[str]:
        """Names of all logs, sorted."""
        return admin.list_logs(self)

    def log_metadata(self, name: str) -> LogMetadata:
        """Log ``name``'s metadata (tail ledgers, segment summaries, properties)."""
        return admin.log_metadata(self, name)

    def log_ledgers(self, name: str) -> list[LedgerInfo]:
        """Every live ledger of log ``name`` in log order."""
        return admin.log_ledgers(self, name)

    def truncate_log(self, name: str, before: Position, *, password: bytes | str = b""
                     ) -> list[int]:
        """Drop log ``name``'s whole ledgers before ``before`` (``password``: theirs); the
        ids dropped (:func:`bk_spark.log.truncate_log`; a writer: :meth:`LogWriter.truncate`)."""
        return admin.truncate_log(self, name, before, password)

    def delete_log(self, name: str, *, password: bytes | str = b"") -> list[int]:
        """Delete log ``name`` and its ledgers (``password``: theirs); their ids."""
        return admin.delete_log(self, name, password)


__all__ = ["BookKeeper"]
