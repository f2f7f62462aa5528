"""A raw read's columns are built in bulk (no object per entry): values cut out of the
fetched records with one mask, constraints applied as array masks. Both must say exactly
what the entry-by-entry code said."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from bk_spark.datasource.filters import Constraints, IntSet
from bk_spark.io.entry_batches import binary_column


@pytest.mark.parametrize("seed", range(5))
def test_binary_column_holds_each_range_of_the_buffer_and_its_nulls(seed):
    rng = random.Random(seed)
    data = rng.randbytes(5000)
    starts, ends, nulls, pos = [], [], [], rng.randrange(0, 30)
    while pos < 4900:  # ascending, disjoint ranges with gaps (and empty ones)
        n = rng.choice([0, 1, 7, 100])
        starts.append(pos)
        ends.append(pos + n)
        nulls.append(n == 0 and rng.random() < 0.5)
        pos += n + rng.choice([0, 0, 3, 42])
    col = binary_column(data, np.asarray(starts), np.asarray(ends), np.asarray(nulls))
    assert col.type == pa.binary()
    assert col.to_pylist() == [None if z else data[a:b]
                               for a, b, z in zip(starts, ends, nulls, strict=True)]
    assert col.null_count == sum(nulls)


def test_constraint_masks_agree_with_allows_entry():
    ids = np.arange(0, 200, dtype=np.int64)
    ts = 1_700_000_000_000 + ids * 10
    cases = [Constraints(),
             Constraints(entry_ids=IntSet(5, 150, frozenset({1, 7, 9, 149, 151}))),
             Constraints(timestamps_us=IntSet((1_700_000_000_000 + 333) * 1000,
                                              (1_700_000_000_000 + 1500) * 1000)),
             Constraints(entry_ids=IntSet(10, 120),
                         timestamps_us=IntSet(only=frozenset({(1_700_000_000_000 + 500) * 1000,
                                                              7})))]
    for c in cases:
        for stamps in (ts, None):
            m = c.entry_mask(ids, stamps)
            want = [c.allows_entry(int(e), None if stamps is None else int(t))
                    for e, t in zip(ids, ts, strict=True)]
            assert m.tolist() == want
