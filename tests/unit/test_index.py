"""The index file: checkpoint batches that persist ledger states and entry locations."""

from __future__ import annotations

import os

from bookie_server.index import IndexStore, LedgerSnapshot
from bookie_server.location import pack_location


def snap(ledger_id, entries, *, key=b"key", fenced=False, lac=-1, last=None):
    ids = list(entries)
    return LedgerSnapshot(
        ledger_id,
        key,
        fenced,
        lac,
        max(ids, default=-1) if last is None else last,
        ids,
        [entries[e] for e in ids],
    )


def loc(entry_id: int, log_id: int = 1) -> int:
    return pack_location(log_id, 16 + 100 * entry_id, 100)


def test_empty_store_has_no_ledgers_and_no_checkpoint(tmp_path):
    assert IndexStore(tmp_path).load() == ({}, None)


def test_checkpoint_persists_states_and_locations(tmp_path):
    store = IndexStore(tmp_path)
    store.load()
    store.append(
        (3, 4096),
        [],
        [
            snap(1, {e: loc(e) for e in range(100)}, lac=98),
            snap(2, {}, key=b"other", fenced=True, last=-1),
        ],
    )
    store.close()
    ledgers, position = IndexStore(tmp_path).load()
    assert position == (3, 4096)
    one, two = ledgers[1], ledgers[2]
    assert one.index == {e: loc(e) for e in range(100)}
    assert (one.master_key, one.fenced, one.lac, one.last_entry) == (b"key", False, 98, 99)
    assert (two.master_key, two.fenced, two.fence_synced, two.index) == (b"other", True, True, {})


def test_incremental_batches_update_move_and_delete(tmp_path):
    store = IndexStore(tmp_path)
    store.load()
    store.append((1, 0), [], [snap(1, {0: loc(0), 1: loc(1)}), snap(2, {0: loc(0)})])
    store.append((1, 500), [2], [snap(1, {1: loc(1, log_id=9), 2: loc(2)}, lac=1)])
    store.close()
    ledgers, position = IndexStore(tmp_path).load()
    assert position == (1, 500)
    assert set(ledgers) == {1}
    assert ledgers[1].index == {0: loc(0), 1: loc(1, log_id=9), 2: loc(2)}
    assert (ledgers[1].lac, ledgers[1].last_entry) == (1, 2)


def index_file(tmp_path):
    (path,) = tmp_path.glob("index-*.idx")
    return path


def test_torn_checkpoint_batch_is_dropped_and_the_previous_one_stands(tmp_path):
    store = IndexStore(tmp_path)
    store.load()
    store.append((1, 100), [], [snap(1, {0: loc(0)})])
    size = index_file(tmp_path).stat().st_size
    store.append((1, 200), [], [snap(1, {e: loc(e) for e in range(1, 50)})])
    store.close()
    os.truncate(index_file(tmp_path), size + 40)  # crash in the middle of the second batch
    store = IndexStore(tmp_path)
    ledgers, position = store.load()
    assert position == (1, 100)
    assert ledgers[1].index == {0: loc(0)}
    assert index_file(tmp_path).stat().st_size == size  # the torn tail is cut off
    store.append((1, 300), [], [snap(1, {5: loc(5)})])  # and appending goes on from there
    store.close()
    ledgers, position = IndexStore(tmp_path).load()
    assert position == (1, 300) and ledgers[1].index == {0: loc(0), 5: loc(5)}


def test_corrupt_checkpoint_batch_is_dropped(tmp_path):
    store = IndexStore(tmp_path)
    store.load()
    store.append((1, 100), [], [snap(1, {0: loc(0)})])
    size = index_file(tmp_path).stat().st_size
    store.append((1, 200), [], [snap(1, {1: loc(1)})])
    store.close()
    with open(index_file(tmp_path), "r+b") as f:
        f.seek(size + 30)
        f.write(b"\xff")
    ledgers, position = IndexStore(tmp_path).load()
    assert position == (1, 100) and ledgers[1].index == {0: loc(0)}


def test_rewrite_replaces_the_file_with_one_full_snapshot(tmp_path):
    store = IndexStore(tmp_path, min_rewrite_bytes=1000)
    store.load()
    assert store.wants_rewrite  # no file yet
    for i in range(20):
        store.append((1, i), [], [snap(1, {i: loc(i)})])
    assert store.wants_rewrite
    full = {i: loc(i) for i in range(20)}
    store.rewrite((1, 20), [snap(1, full, lac=19)])
    assert not store.wants_rewrite
    store.append((2, 0), [], [snap(3, {0: loc(0)})])
    store.close()
    assert len(list(tmp_path.glob("index-*"))) == 1
    ledgers, position = IndexStore(tmp_path).load()
    assert position == (2, 0)
    assert ledgers[1].index == full and ledgers[1].lac == 19
    assert ledgers[3].index == {0: loc(0)}


def test_full_snapshot_drops_ledgers_it_does_not_name(tmp_path):
    store = IndexStore(tmp_path)
    store.load()
    store.append((1, 0), [], [snap(1, {0: loc(0)}), snap(2, {0: loc(0)})])
    store.rewrite((1, 10), [snap(2, {0: loc(0)})])
    store.close()
    ledgers, _ = IndexStore(tmp_path).load()
    assert set(ledgers) == {2}
