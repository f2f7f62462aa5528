"""The bookie's compact entry index: the same answers as a dict, in 12 bytes per entry."""

from __future__ import annotations

import random

import pytest

from bookie_server.index import DENSE_MAX_GAP, SMALL_BATCH, EntryIndex
from bookie_server.location import pack_location


def loc(entry_id: int, log_id: int = 3) -> int:
    return pack_location(log_id, 16 + 1100 * entry_id, 1100 + entry_id % 7)


def test_entry_index_answers_like_a_dict_for_any_order_of_sets():
    """Dense writes, holes (a bookie of E=3 Qw=2 stores 2 of every 3 ids), overwrites (a
    recovery writing entries back), ids before the first and far past the end."""
    rng = random.Random(17)
    ids = [i for i in range(0, 3000) if i % 3 != 1]
    ids += [5, 8, 2999, 10**9, 10**9 + 3, 0]
    rng.shuffle(ids)
    index, model = EntryIndex(), {}
    for n, eid in enumerate(ids):
        index[eid] = model[eid] = loc(eid, log_id=1 + n % 5)
    assert index == model and len(index) == len(model)
    assert dict(zip(index.keys(), index.values(), strict=True)) == model
    assert dict(index.items()) == model and sorted(index) == sorted(model)
    for eid in (1, 4, 3001, -1, 10**9 + 1):
        assert eid not in index and index.get(eid) is None
    with pytest.raises(KeyError):
        index[1]


def test_entry_index_update_of_a_batch_matches_single_sets():
    index, model = EntryIndex(), {}
    for start in range(0, 900, 300):  # batches of new adds, with this bookie's holes
        batch = [(e, loc(e)) for e in range(start, start + 300) if e % 3 != 2]
        index.update(batch)
        model.update(batch)
    index.update([(4, loc(4, log_id=9)), (0, loc(0, log_id=9))])  # overwrites
    model.update([(4, loc(4, log_id=9)), (0, loc(0, log_id=9))])
    far = DENSE_MAX_GAP * 3
    index.update([(far, loc(far))])
    model[far] = loc(far)
    assert index == model and len(index) == len(model)


def test_entry_index_costs_twelve_bytes_per_dense_entry():
    index = EntryIndex()
    index.update((e, loc(e)) for e in range(100_000))
    assert index.nbytes() == 12 * 100_000


def test_entry_index_refuses_an_empty_record_length():
    with pytest.raises(ValueError):
        EntryIndex()[0] = pack_location(1, 16, 0)


def test_a_full_snapshot_of_entry_index_columns_reloads_the_same_locations(tmp_path):
    """A full checkpoint writes every ledger's index from its arrays (streamed, body then
    header) and loading it gives the same ids and locations, sparse ones included."""
    from bookie_server.index import IndexStore, LedgerSnapshot, LedgerState

    state = LedgerState(7, b"key")
    model = {e: loc(e) for e in range(0, 5000) if e % 3}
    model[10**9] = loc(12)
    state.index.update(model.items())
    state.last_entry, state.lac = 10**9, 4998
    snap = LedgerSnapshot.whole(state)
    state.index[1] = loc(1, log_id=8)  # later changes do not leak into the snapshot
    store = IndexStore(tmp_path)
    store.load()
    store.rewrite((3, 40), [snap])
    store.close()
    ledgers, position = IndexStore(tmp_path).load()
    assert position == (3, 40)
    assert ledgers[7].index == model and ledgers[7].lac == 4998


def test_put_batch_sets_the_same_locations_as_single_sets():
    """A journaled batch's locations (its base plus each entry's span), in numpy for
    ascending ids, one by one for the rest (an id twice, ids before the dense part)."""
    base_high = (5 << 40) | 4096
    batches = [
        [e for e in range(0, 300) if e % 3],  # a bookie's share: holes
        [301, 302, 304],  # a lone add's few: one by one (SMALL_BATCH)
        list(range(310, 310 + 2 * SMALL_BATCH, 2)),  # just past SMALL_BATCH: numpy
        [400, 399],  # descending: one by one
        [500, 500],  # twice in one batch: the later wins, as in a dict
        # a ledger's share for one bookie (E=3, Qw=2): two ascending runs, in numpy
        [e for e in range(600, 660, 3)] + [e for e in range(602, 660, 3)],
        [700 + e for e in range(20)] + [710],  # unsorted with an id twice: one by one
        [DENSE_MAX_GAP * 4],  # far past the end: sparse
        [7, 8],  # overwrites
    ]
    index, model = EntryIndex(), {}
    for b, ids in enumerate(batches):
        spans = [((k * 1100) << 32) | (1000 + b) for k in range(len(ids))]
        index.put_batch(ids, base_high + b, spans)
        for eid, span in zip(ids, spans, strict=True):
            model[eid] = ((base_high + b + (span >> 32)) << 32) | (span & 0xFFFFFFFF)
    assert index == model and len(index) == len(model)


def test_looking_up_many_ids_at_once_answers_like_get_one_by_one():
    """A read's lookups in numpy (get_many) find what get finds, dense part, holes, ids
    before the first, sparse ones far past the end and absent ones alike."""
    import numpy as np

    from bookie_server.location import high_of, length_of

    index = EntryIndex()
    for eid in [i for i in range(100, 400) if i % 3 != 1] + [10**9, 10**9 + 7]:
        index[eid] = loc(eid, log_id=2)
    asked = np.asarray([0, 99, 100, 101, 102, 250, 399, 400, 10**9, 10**9 + 1, 10**9 + 7],
                       dtype=np.int64)
    highs, lens = index.get_many(asked)
    for eid, h, n in zip(asked.tolist(), highs.tolist(), lens.tolist(), strict=True):
        got = index.get(eid)
        assert (n == 0) == (got is None)
        if got is not None:
            assert (h, n) == (high_of(got), length_of(got))
    index[400] = loc(400, log_id=2)  # the arrays may still grow after a lookup
    assert index.get(400) is not None
    assert EntryIndex().get_many(asked)[1].tolist() == [0] * len(asked)


@pytest.mark.parametrize("how", ["set", "update", "put_batch"])
def test_an_id_kept_sparse_is_still_found_once_the_dense_part_grows_over_it(how):
    """An id far past the dense end is kept aside (re-replication can write a later
    fragment's entries first); when the dense part later grows over it (the entries in
    between arrive), get / in / len / items still find it exactly once. (It used to sit
    behind an empty dense slot: a read found it, get and compaction did not.)"""
    far = DENSE_MAX_GAP + 500
    index, model = EntryIndex(), {}
    for eid in range(10):
        index[eid] = model[eid] = loc(eid)
    index[far] = model[far] = loc(far)
    for start in range(10, far + 100, 4096):
        ids = [e for e in range(start, min(start + 4096, far + 100)) if e != far]
        if how == "set":
            for e in ids:
                index[e] = loc(e)
        elif how == "update":
            index.update([(e, loc(e)) for e in ids])
        else:
            spans = [(0 << 32) | (loc(e) & 0xFFFFFFFF) for e in ids]
            index.put_batch(ids, loc(0) >> 32, spans)
        model.update((e, index.get(e)) for e in ids)
    assert far in index and index.get(far) == loc(far)
    assert len(index) == len(model) and sorted(index.keys()) == sorted(model)
    assert dict(index.items()) == model


def test_a_bookies_share_of_a_ledger_round_is_indexed_in_numpy(monkeypatch):
    """E=3, Qw=2: a bookie's share of a round is two ascending runs of ids (one per write
    set it is in), not one: still one numpy step, not a Python call per entry."""
    import numpy as np

    index = EntryIndex()
    calls: list[int] = []
    real = EntryIndex.__setitem__
    monkeypatch.setattr(EntryIndex, "__setitem__",
                        lambda self, e, loc: (calls.append(e), real(self, e, loc)))
    ids = np.concatenate([np.arange(0, 3000, 3), np.arange(1, 3000, 3)])
    spans = (np.arange(len(ids), dtype=np.uint64) << np.uint64(32)) | np.uint64(50)
    index.put_batch(ids, 7 << 40, spans)
    assert calls == [] and len(index) == 2000
    assert index.get(1) == ((7 << 40) + 1000) << 32 | 50 and index.get(2) is None
