"""DeletedLedgers: a bookie's bounded memory of the ledgers it deleted."""

from __future__ import annotations

import pytest

from bookie_server.index import IndexStore
from bookie_server.tombstones import DeletedLedgers


def test_deleted_ids_count_as_deleted_and_others_do_not():
    d = DeletedLedgers(10, [5, 3, 9])
    assert [i in d for i in range(11)] == [i in (3, 5, 9) for i in range(11)]
    assert d.add(7) and not d.add(7)
    assert d.ids() == [3, 5, 7, 9] and d.floor == -1


def test_overflow_forgets_the_lowest_ids_under_a_floor_that_still_refuses_them():
    d = DeletedLedgers(3)
    for i in (100, 40, 70, 10, 90):
        d.add(i)
    assert d.ids() == [70, 90, 100] and d.floor == 40
    assert all(i in d for i in (0, 10, 39, 40, 70, 90, 100))
    assert not any(i in d for i in (41, 69, 71, 101))
    assert not d.add(20)  # already under the floor: nothing to remember
    d.raise_floor(80)
    assert d.ids() == [90, 100] and 75 in d
    d.raise_floor(5)  # a floor never goes down
    assert d.floor == 80


def test_limit_must_be_positive():
    with pytest.raises(ValueError):
        DeletedLedgers(0)


def test_tombstones_and_floor_survive_incremental_and_full_index_batches(tmp_path):
    store = IndexStore(tmp_path)
    store.load()
    store.append((1, 0), [4, 2], [], tombstone_floor=-1)
    store.append((1, 10), [9], [], tombstone_floor=1)
    store.close()
    d = DeletedLedgers(10)
    IndexStore(tmp_path).load(d)
    assert d.ids() == [2, 4, 9] and d.floor == 1
    store = IndexStore(tmp_path)
    store.load()
    store.rewrite((2, 0), [], [4, 9], tombstone_floor=3)
    store.close()
    d = DeletedLedgers(10, [77])
    ledgers, position = IndexStore(tmp_path).load(d)
    assert (ledgers, position) == ({}, (2, 0))
    assert d.ids() == [4, 9] and d.floor == 3
