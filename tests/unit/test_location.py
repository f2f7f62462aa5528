"""An entry's location: one packing of (log id, offset, record length), used by the journal's
ADD batches, the index in memory and on disk, reads and compaction alike."""

from __future__ import annotations

import pytest

from bookie_server.location import (
    high_of,
    join_location,
    length_of,
    location_base,
    log_of,
    offset_of,
    pack_location,
    pack_span,
    unpack_location,
)

EDGES = [(0, 0, 0), (1, 16, 1054), ((1 << 24) - 1, (1 << 40) - 1, (1 << 32) - 1),
         (7, 3 << 30, 5)]


@pytest.mark.parametrize("log_id, offset, length", EDGES)
def test_location_packs_and_unpacks(log_id, offset, length):
    assert unpack_location(pack_location(log_id, offset, length)) == (log_id, offset, length)


@pytest.mark.parametrize("log_id, offset, length", EDGES)
def test_each_field_reads_back_alone_and_the_two_columns_rejoin(log_id, offset, length):
    loc = pack_location(log_id, offset, length)
    assert (log_of(loc), offset_of(loc), length_of(loc)) == (log_id, offset, length)
    assert join_location(high_of(loc), length_of(loc)) == loc
    assert high_of(loc) < 1 << 64 and length_of(loc) < 1 << 32  # the u64 and u32 columns


@pytest.mark.parametrize(
    "log_id, batch_offset, rel_offset, length",
    [(1, 16, 0, 1054), (3, 1 << 30, 2108, 77), ((1 << 24) - 1, 16, (1 << 20), 1)],
)
def test_a_batch_location_plus_an_entry_span_is_the_entry_location(
    log_id, batch_offset, rel_offset, length
):
    assert location_base(log_id, batch_offset) + pack_span(rel_offset, length) == pack_location(
        log_id, batch_offset + rel_offset, length
    )
