"""In-order acknowledgement of adds and the resend set of an ensemble change."""

from __future__ import annotations

import pytest

from bk_spark.errors import InvalidConfigError
from bk_spark.protocol.pending import PendingAdds
from bk_spark.protocol.schedule import write_set


def _add(adds: PendingAdds, entry_id: int) -> list[int]:
    """Register the next entry; its write set (the writer registers whole rounds)."""
    adds.register(entry_id)
    return write_set(entry_id, adds.ensemble_size, adds.write_quorum_size)


def _ack(adds: PendingAdds, entry_id: int, bookie_index: int) -> list[int]:
    """One bookie's confirmation of one entry; the entries acknowledged by it."""
    return list(adds.ack_many([entry_id], bookie_index))


def test_add_returns_the_write_set_of_each_consecutive_entry():
    adds = PendingAdds(4, 3, 2)
    assert [_add(adds, e) for e in range(5)] == [
        [0, 1, 2],
        [1, 2, 3],
        [2, 3, 0],
        [3, 0, 1],
        [0, 1, 2],
    ]
    assert adds.unacknowledged() == [0, 1, 2, 3, 4]
    assert adds.next_entry_id == 5


def test_entry_ids_must_be_strictly_consecutive():
    adds = PendingAdds(3, 2, 2)
    _add(adds, 0)
    with pytest.raises(ValueError):
        _add(adds, 2)
    with pytest.raises(ValueError):
        _add(adds, 0)


def test_entry_is_acknowledged_only_after_ack_quorum_and_all_earlier_entries():
    adds = PendingAdds(4, 3, 2)
    _add(adds, 0)
    _add(adds, 1)
    # Entry 1 (write set [1, 2, 3]) gets its Qa=2 confirmations first: not acknowledged.
    assert _ack(adds, 1, 1) == []
    assert _ack(adds, 1, 2) == []
    assert adds.last_add_confirmed == -1
    # Entry 0 (write set [0, 1, 2]): one confirmation is not a quorum ...
    assert _ack(adds, 0, 0) == []
    # ... the second acknowledges 0 and, with it, the waiting entry 1, in order.
    assert _ack(adds, 0, 2) == [0, 1]
    assert adds.last_add_confirmed == 1
    assert adds.unacknowledged() == []


def test_each_entry_is_acknowledged_exactly_once():
    adds = PendingAdds(3, 3, 2)
    _add(adds, 0)
    assert _ack(adds, 0, 0) == []
    assert _ack(adds, 0, 1) == [0]
    assert _ack(adds, 0, 2) == []  # the third confirmation of an acknowledged entry
    assert _ack(adds, 0, 1) == []


def test_duplicate_confirmations_from_one_bookie_count_once():
    adds = PendingAdds(3, 2, 2)
    _add(adds, 0)
    assert _ack(adds, 0, 0) == []
    assert _ack(adds, 0, 0) == []
    assert adds.last_add_confirmed == -1
    assert _ack(adds, 0, 1) == [0]


def test_confirmations_from_bookies_outside_the_write_set_are_ignored():
    adds = PendingAdds(4, 2, 2)
    _add(adds, 0)  # write set [0, 1]
    assert _ack(adds, 0, 2) == []
    assert _ack(adds, 0, 3) == []
    assert adds.confirmations(0) == frozenset()
    assert _ack(adds, 0, 0) == [] and _ack(adds, 0, 1) == [0]


def test_confirming_an_entry_never_added_is_a_bug():
    adds = PendingAdds(3, 2, 2)
    with pytest.raises(ValueError):
        _ack(adds, 0, 0)
    _add(adds, 0)
    with pytest.raises(ValueError):
        _ack(adds, 0, 7)  # no bookie index 7 in an ensemble of 3


def test_writer_resumes_after_a_known_last_add_confirmed():
    adds = PendingAdds(3, 2, 1, last_acked=41)
    assert adds.first_unacknowledged() == 42
    assert _add(adds, 42) == [0, 1]
    assert _ack(adds, 42, 1) == [42]
    assert adds.last_add_confirmed == 42


def test_invalid_quorums_are_rejected():
    with pytest.raises(InvalidConfigError, match=r"ensemble_size \(2\) must be >= "):
        PendingAdds(2, 3, 2)


def test_ensemble_change_resends_unacknowledged_entries_whose_write_set_holds_the_bookie():
    adds = PendingAdds(4, 3, 2)
    for e in range(6):
        _add(adds, e)
    _ack(adds, 0, 0)
    _ack(adds, 0, 1)  # entry 0 acknowledged; lac = 0
    assert adds.last_add_confirmed == 0
    for e in (1, 2, 3, 4, 5):
        _ack(adds, e, 3)  # bookie 3 confirmed everything it got (entries 1, 2, 3, 5)
    # Bookie 3 then fails (say on entry 4's write); the new fragment starts at lac + 1 = 1.
    start = adds.first_unacknowledged()
    assert start == 1
    resend = adds.replace_bookie(3, start)
    # Write sets holding index 3: 1 [1,2,3], 2 [2,3,0], 3 [3,0,1], 5 [1,2,3]; not 4 [0,1,2].
    assert resend == [1, 2, 3, 5]
    assert all(3 not in adds.confirmations(e) for e in resend)


def test_a_replaced_bookie_counts_again_only_once_the_replacement_confirms():
    adds = PendingAdds(3, 2, 2)
    _add(adds, 0)  # write set [0, 1]
    _ack(adds, 0, 0)
    assert adds.replace_bookie(0, 0) == [0]
    assert _ack(adds, 0, 1) == []  # only one confirmation left (bookie 1)
    assert _ack(adds, 0, 0) == [0]  # the replacement at index 0 confirms


def test_a_new_fragment_never_starts_at_an_acknowledged_entry():
    adds = PendingAdds(3, 2, 1)
    _add(adds, 0)
    _ack(adds, 0, 0)
    with pytest.raises(ValueError):
        adds.replace_bookie(1, 0)


def test_entries_before_the_fragment_start_keep_their_confirmations():
    adds = PendingAdds(3, 3, 3)
    for e in range(3):
        _add(adds, e)
        _ack(adds, e, 2)
    assert adds.replace_bookie(2, 2) == [2]
    assert adds.confirmations(1) == frozenset({2})
    assert adds.confirmations(2) == frozenset()


def test_ack_many_equals_acking_one_by_one_in_any_order() -> None:
    import random

    rng = random.Random(7)
    for _ in range(50):
        one, many = PendingAdds(4, 3, 2), PendingAdds(4, 3, 2)
        for e in range(40):
            _add(one, e)
            _add(many, e)
        answers = [(e, i) for e in range(40) for i in range(4)]
        rng.shuffle(answers)
        got_one: list[int] = []
        got_many: list[int] = []
        for k in range(0, len(answers), 7):
            chunk = answers[k:k + 7]
            for e, i in chunk:
                got_one += _ack(one, e, i)
            for i in range(4):
                got_many += many.ack_many([e for e, j in chunk if j == i], i)
        assert got_one == got_many == list(range(40))
        assert one.last_add_confirmed == many.last_add_confirmed == 39


def test_a_long_run_acknowledges_in_order_through_window_moves() -> None:
    """Thousands of entries in flight, answered in shuffled batches: the confirmation window
    is compacted and grown many times and every entry is acknowledged once, in order, exactly
    when a model that counts distinct confirmations per entry says so."""
    import random

    import numpy as np

    rng = random.Random(11)
    E, Qw, Qa = 5, 3, 2
    adds = PendingAdds(E, Qw, Qa)
    model: dict[int, set[int]] = {}
    model_lac = -1
    acked: list[int] = []
    outstanding: list[tuple[int, int]] = []
    next_id = 0
    while next_id < 20_000 or outstanding:
        if next_id < 20_000:
            n = min(rng.randint(1, 1500), 20_000 - next_id)
            adds.register(next_id, n)
            for e in range(next_id, next_id + n):
                model[e] = set()
                outstanding += [((e % E + j) % E, e) for j in range(Qw)]
                if rng.random() < 0.01:
                    outstanding.append(((e % E + Qw) % E, e))  # a bookie outside the set
                if rng.random() < 0.01:
                    outstanding.append((e % E, e))  # a duplicate confirmation
            next_id += n
        rng.shuffle(outstanding)
        batch, outstanding = outstanding[:4000], outstanding[4000:]
        for index in range(E):
            ids = np.array([e for i, e in batch if i == index], dtype=np.int64)
            got = adds.ack_many(ids, index)
            for e in ids.tolist():
                if e > model_lac and (index - e) % E < Qw:
                    model[e].add(index)
            expected = []
            while model_lac + 1 in model and len(model[model_lac + 1]) >= Qa:
                model_lac += 1
                expected.append(model_lac)
                del model[model_lac]
            assert list(got) == expected
            acked += got
    assert acked == list(range(20_000))
    assert adds.last_add_confirmed == 19_999 and len(adds) == 0


def test_entries_confirmed_during_an_ensemble_change_stay_to_resend_to_the_replacement():
    """E=3, Qw=3, Qa=2 (fault seed 28001): bookie 1 fails at entry 2; while the new
    fragment's CAS is in flight bookies 0 and 2 confirm entries 2..5. None is acknowledged
    before the change ends, so the replacement at index 1 is sent all of them; then they
    are acknowledged at once."""
    adds = PendingAdds(3, 3, 2)
    for e in range(6):
        _add(adds, e)
    for e in range(2):
        assert _ack(adds, e, 0) == [] and _ack(adds, e, 1) == [e]
    first = adds.first_unacknowledged()
    assert first == 2
    adds.replace_bookie(1, first)
    adds.hold()
    assert list(adds.ack_many(range(2, 6), 0)) == []
    assert list(adds.ack_many(range(2, 6), 2)) == []  # Qa reached, held back
    assert adds.last_add_confirmed == 1
    assert adds.unacknowledged_in_write_set(1, first).tolist() == [2, 3, 4, 5]
    assert adds.release() == range(2, 6)
    assert adds.last_add_confirmed == 5


def test_acknowledgements_wait_for_every_ensemble_change_in_flight():
    adds = PendingAdds(4, 3, 2)
    for e in range(4):
        _add(adds, e)
    adds.replace_bookie(1, 0)
    adds.hold()
    adds.replace_bookie(3, 0)
    adds.hold()
    for b in (0, 2):
        adds.ack_many(range(4), b)
    assert adds.release() == range(0)  # the other change is still in flight
    assert adds.release() == range(0, 1)  # entry 1's write set {1, 2, 3} has one confirmation
    with pytest.raises(ValueError):
        adds.release()


def test_a_failed_writer_acknowledges_nothing_when_its_change_ends():
    adds = PendingAdds(3, 3, 2)
    _add(adds, 0)
    adds.replace_bookie(1, 0)
    adds.hold()
    adds.ack_many([0], 0)
    adds.ack_many([0], 2)
    assert adds.release(acknowledge=False) == range(0)
    assert adds.last_add_confirmed == -1


@pytest.mark.parametrize("seed", range(6))
def test_small_answers_counted_in_python_acknowledge_exactly_what_the_array_path_does(
        seed, monkeypatch):
    """Answers of a few ids (a thousand ledgers with a round of one or two entries each)
    take a plain-Python path; the same answers through numpy must acknowledge the same
    entries at the same moments, holds and replaced bookies included."""
    import random

    import numpy as np

    from bk_spark.protocol import pending

    rng = random.Random(seed)
    E, Qw = rng.choice([(3, 2), (4, 3), (5, 3), (3, 3)])
    Qa = rng.randint(1, Qw)
    small, big = PendingAdds(E, Qw, Qa), PendingAdds(E, Qw, Qa)
    out_small: list[list[int]] = []
    out_big: list[list[int]] = []
    nxt = 0
    for _step in range(400):
        op = rng.random()
        if op < 0.3:
            n = rng.randint(1, 40)
            small.register(nxt, n)
            big.register(nxt, n)
            nxt += n
        elif op < 0.95 and nxt:
            idx = rng.randrange(E)
            lo = max(0, small.last_add_confirmed - 2)  # mostly near the first unacknowledged
            ids = [rng.randrange(lo, min(nxt, lo + 12)) for _ in range(rng.randint(1, 24))]
            as_array = rng.random() < 0.5
            arg = np.array(ids, dtype=np.int64) if as_array else ids
            out_small.append(list(small.ack_many(arg, idx)))
            monkeypatch.setattr(pending, "SMALL_ANSWER", 0)
            out_big.append(list(big.ack_many(np.array(ids) if as_array else list(ids), idx)))
            monkeypatch.setattr(pending, "SMALL_ANSWER", 16)
        elif small.last_add_confirmed + 1 < nxt:
            first = small.first_unacknowledged()
            idx = rng.randrange(E)
            assert small.replace_bookie(idx, first) == big.replace_bookie(idx, first)
            small.hold()
            big.hold()
            out_small.append(list(small.release()))
            monkeypatch.setattr(pending, "SMALL_ANSWER", 0)
            out_big.append(list(big.release()))
            monkeypatch.setattr(pending, "SMALL_ANSWER", 16)
        assert small.last_add_confirmed == big.last_add_confirmed
    assert out_small == out_big
    assert sum(map(len, out_small)) > 0


def test_a_small_answer_naming_an_entry_never_added_is_refused_before_counting_any():
    adds = PendingAdds(3, 2, 2)
    adds.register(0, 2)
    with pytest.raises(ValueError, match="never added"):
        adds.ack_many([0, 5], 0)
    assert adds.confirmations(0) == frozenset()
