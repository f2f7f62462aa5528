"""The floor of a Spark read from a Python data source: ``bench_memory`` yields the bench's
rows as Arrow batches it keeps in memory (made once per worker process), so a read of it
costs only what Spark adds to any Python data source (the batches' trip to the JVM, its
conversion of every row). ``bench.read_profile`` compares it with Parquet and the arrow log.

In a module of its own (not ``__main__``) so that Spark's workers import the class by
name and keep its batches between tasks.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

#: Batches of the in-memory source, per worker process: (rows, partition) -> batches.
_MEMORY: dict[tuple[int, int], list[Any]] = {}


def _memory_schema() -> Any:
    from pyspark.sql.types import (
        DoubleType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    return StructType([StructField("id", LongType(), False),
                       StructField("user", LongType(), True),
                       StructField("amount", DoubleType(), False),
                       StructField("name", StringType(), False),
                       StructField("ts", TimestampType(), False)])


class MemoryReader(DataSourceReader):
    def __init__(self, rows: int) -> None:
        self.rows = rows

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(0), InputPartition(1)]

    def read(self, partition: InputPartition) -> Any:
        if (self.rows, partition.value) not in _MEMORY:  # made at the warm-up
            from bench.read_tasks import arrow_rows
            from bk_spark.datasource.formats import arrow_schema

            half, step = self.rows // 2, 21_000  # about one arrow entry's rows
            target = arrow_schema(_memory_schema())
            for part in (0, 1):  # both: a worker may be handed either partition later
                _MEMORY[(self.rows, part)] = [
                    arrow_rows(min(step, half - lo), part * half + lo).cast(target)
                    for lo in range(0, half, step)]
        yield from _MEMORY[(self.rows, partition.value)]


class MemorySource(DataSource):
    """A Python data source yielding the bench's rows as Arrow batches it keeps in memory:
    what any Python data source costs Spark beyond its own work (Spark's per-row conversion
    of a Python source's batches, their trip to the JVM), the floor of the arrow log read."""

    @classmethod
    def name(cls) -> str:
        return "bench_memory"

    def schema(self) -> Any:
        return _memory_schema()

    def reader(self, schema: Any) -> DataSourceReader:
        return MemoryReader(int(self.options["rows"]))
