"""Which filters the source answers (:func:`bk_spark.datasource.filters.push`): an accepted
filter is never checked again by Spark, so the source must drop exactly the rows it fails."""

from __future__ import annotations

import datetime as dt

import numpy as np
from pyspark.sql.datasource import GreaterThan, IsNotNull

from bk_spark.datasource.filters import Constraints, push
from bk_spark.datasource.formats import POSITION_COLUMNS

T = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def test_timestamp_filters_of_a_log_read_are_answered_by_the_source():
    filters = [GreaterThan(("timestamp",), T), IsNotNull(("timestamp",))]
    c, rejected = push(filters, Constraints(), POSITION_COLUMNS, logs_never_null=True)
    assert rejected == []
    assert not c.timestamps_us.unbounded


def test_timestamp_filters_of_ledgers_read_by_id_are_left_to_spark_too():
    # A ledger of no log reads with a null timestamp, which neither filter matches; its
    # entries are unframed, so the source cannot drop them by timestamp: Spark must.
    filters = [GreaterThan(("timestamp",), T), IsNotNull(("timestamp",))]
    c, rejected = push(filters, Constraints(), POSITION_COLUMNS, logs_never_null=False)
    assert rejected == filters
    # still used to narrow the framed ledgers' reads (exactly: only failing rows dropped)
    ts_ms = int(T.timestamp() * 1000) + np.array([-1, 0, 1], dtype=np.int64)
    assert c.entry_mask(np.arange(3, dtype=np.int64), ts_ms).tolist() == [False, False, True]
