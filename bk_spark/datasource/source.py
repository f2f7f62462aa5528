"""``BookKeeperDataSource``: the ``bookkeeper`` format, tying options to readers and writers.

Spark creates the data source in a planning worker with the user's options, calls
``schema()`` there, then ``reader()`` / ``streamReader()`` / ``writer()`` /
``streamWriter()`` in other workers, each time on an unpickled copy. Every one of them
parses the options again (:mod:`bk_spark.datasource.options`), so bad options fail before
any task runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from bk_spark.datasource import connections
from bk_spark.datasource.filters import Constraints
from bk_spark.datasource.formats import (
    arrow_schema,
    log_format,
    read_schema,
    stored_schema,
)
from bk_spark.datasource.options import ReadOptions, WriteOptions
from bk_spark.datasource.planning import logs_read
from bk_spark.datasource.reader import reader_for_planner
from bk_spark.datasource.scan import ScanSpec
from bk_spark.errors import InvalidConfigError, LogNotFoundError
from bk_spark.log import log_metadata


@dataclass(frozen=True)
class ReadFormat:
    """What the logs read hold: their entry format, stored schema, and the read schema."""

    entry_format: str
    stored: StructType | None
    schema: StructType


def resolve_read_format(o: ReadOptions) -> ReadFormat:
    """The format and schema of the logs read (all must agree); ledgers read raw."""
    if o.ledger_ids:
        return ReadFormat("raw", None, read_schema("raw", None, False))
    bk = connections.client(o.uri, o.security)
    found: dict[str, tuple[str, str | None]] = {}
    for name in logs_read(o, bk):
        try:
            md = log_metadata(bk, name)
        except LogNotFoundError as exc:
            if o.log_pattern is not None:
                continue  # matched, then deleted
            raise InvalidConfigError(f"bookkeeper data source option 'log': {exc}") from None
        fmt = log_format(md.properties, md.end_index > 0) or "raw"
        found[name] = (fmt, stored_schema(md.properties, name).json() if fmt == "arrow"
                       else None)
    option = "logPattern" if o.log_pattern is not None else "log"
    if not found:  # a pattern nothing matches yet: logs found later must be raw
        return ReadFormat("raw", None, read_schema("raw", None, o.include_positions))
    kinds = set(found.values())
    if len(kinds) > 1:
        desc = ", ".join(f"{n}: {f}" for n, (f, _s) in found.items())
        raise InvalidConfigError(
            f"bookkeeper data source option '{option}': the logs hold different formats or "
            f"schemas ({desc}); read them separately")
    fmt, schema_json = kinds.pop()
    stored = StructType.fromJson(json.loads(schema_json)) if schema_json else None
    return ReadFormat(fmt, stored, read_schema(fmt, stored, o.include_positions))


def scan_spec(o: ReadOptions, rf: ReadFormat) -> ScanSpec:
    return ScanSpec(
        uri=o.uri, password=o.password, security=o.security, entry_format=rf.entry_format,
        schema=arrow_schema(rf.schema),
        stored_schema=arrow_schema(rf.stored) if rf.stored is not None else None,
        include_positions=o.include_positions or rf.entry_format == "raw",
        constraints=Constraints(), fail_on_data_loss=o.fail_on_data_loss)


def _check_schema(given: StructType, rf: ReadFormat) -> None:
    if given.json() != rf.schema.json():
        raise InvalidConfigError(
            f"the bookkeeper data source reads {rf.schema.simpleString()} from these logs, "
            f"not the schema given ({given.simpleString()}): drop .schema(...)")


class BookKeeperDataSource(DataSource):
    """Logs of a bk-spark cluster as DataFrames: batch and streaming reads and writes.

    See :mod:`bk_spark.datasource` for usage and :mod:`bk_spark.datasource.options` for the
    options.
    """

    @classmethod
    def name(cls) -> str:
        return "bookkeeper"

    def schema(self) -> StructType:
        # Called for reads before Spark says whether it is a stream: parse leniently here,
        # reader()/streamReader() check the options strictly.
        return resolve_read_format(ReadOptions.parse(self.options, streaming=None)).schema

    def reader(self, schema: StructType) -> DataSourceReader:
        o = ReadOptions.parse(self.options, streaming=False)
        rf = resolve_read_format(o)
        _check_schema(schema, rf)
        return reader_for_planner(o, scan_spec(o, rf))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from bk_spark.datasource.stream import BookKeeperStreamReader

        o = ReadOptions.parse(self.options, streaming=True)
        rf = resolve_read_format(o)
        _check_schema(schema, rf)
        return BookKeeperStreamReader(o, scan_spec(o, rf), rf.stored)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from bk_spark.datasource.writer import BookKeeperBatchWriter

        return BookKeeperBatchWriter(WriteOptions.parse(self.options, streaming=False),
                                     schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from bk_spark.datasource.writer import BookKeeperStreamWriter

        return BookKeeperStreamWriter(WriteOptions.parse(self.options, streaming=True),
                                      schema, overwrite)
