"""Spark discovers this module by its name (``pyspark_*``) and registers ``DefaultSource``
for every session: ``spark.read.format("bookkeeper")`` works without a registration call
once bk-spark is installed. See :mod:`bk_spark.datasource`."""

from bk_spark.datasource import BookKeeperDataSource

DefaultSource = BookKeeperDataSource

__all__ = ["DefaultSource"]
