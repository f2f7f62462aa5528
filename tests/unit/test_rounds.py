"""A round's share per bookie: the distribution schedule applied to consecutive entries."""

from __future__ import annotations

import pytest

from bk_spark.protocol.rounds import round_indexes, round_shares
from bk_spark.protocol.schedule import write_set


@pytest.mark.parametrize(("E", "Qw"), [(3, 2), (4, 3), (3, 3), (5, 2), (1, 1)])
@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 100])
@pytest.mark.parametrize("first", [0, 1, 11])
def test_each_bookie_gets_exactly_the_entries_whose_write_set_holds_it(E, Qw, n, first):
    """Small rounds (fewer entries than bookies: split in Python) and big ones (numpy
    slices) both give every index the entries of its write sets, each once, with their
    own records."""
    wire = [b"rec%d" % (first + k) for k in range(n)]
    shares = round_shares(first, wire, E, Qw)
    want: dict[int, list[int]] = {}
    for e in range(first, first + n):
        for idx in write_set(e, E, Qw):
            want.setdefault(idx, []).append(e)
    assert sorted(idx for idx, _, _ in shares) == sorted(want) == list(
        round_indexes(first, n, E, Qw))
    for idx, ids, recs in shares:
        ids = [int(i) for i in ids]
        assert sorted(ids) == want[idx]
        assert recs == [b"rec%d" % e for e in ids]
