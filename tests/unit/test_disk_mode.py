"""Readonly mode's decision, from tables: the disk counts as full above the file-system
threshold or the data directory's byte limit, and stops counting as full only well below
both (hysteresis). No bookie, no disk."""

from __future__ import annotations

import pytest

from bookie_server.disk import disk_full, used_fraction

THRESHOLD = 0.95  # the default disk_usage_threshold
LIMIT = 1000  # a max_disk_bytes

# fraction of the file system used, bytes under the data dir, max_disk_bytes, full before
# the check -> full after it
DECISIONS = [
    # writable: turns readonly only above a limit
    (0.50, 0, None, False, False),
    (0.95, 0, None, False, False),  # at the threshold: not above it
    (0.96, 0, None, False, True),
    (0.50, 1000, LIMIT, False, False),  # at the byte limit: not above it
    (0.50, 1001, LIMIT, False, True),
    (0.99, 10, LIMIT, False, True),  # either limit is enough
    # readonly: stays so until below threshold - 0.05 and 90% of the byte limit
    (0.94, 0, None, True, True),  # below the threshold, not below threshold - 0.05
    (0.91, 0, None, True, True),
    (0.89, 0, None, True, False),
    (0.50, 950, LIMIT, True, True),  # below the limit, above 90% of it
    (0.50, 900, LIMIT, True, False),
    (0.89, 950, LIMIT, True, True),  # both must be below
    (0.92, 100, LIMIT, True, True),
    (0.89, 100, LIMIT, True, False),
]


@pytest.mark.parametrize("fraction, used, limit, was_full, full", DECISIONS)
def test_disk_is_full_above_either_limit_and_stays_full_until_well_below_both(
    fraction, used, limit, was_full, full
):
    assert disk_full(fraction, used, THRESHOLD, limit, was_full) is full


def test_a_disk_filling_and_draining_turns_readonly_once_and_writable_once():
    # bytes under the data dir, check after check, against LIMIT: no flapping at the limit
    trace = [500, 990, 1001, 995, 1002, 950, 910, 899, 950, 1000, 1001]
    full, modes = False, []
    for used in trace:
        full = disk_full(0.5, used, THRESHOLD, LIMIT, full)
        modes.append(full)
    assert modes == [False, False, True, True, True, True, True, False, False, False, True]


@pytest.mark.parametrize(
    "fs_used, free, fraction", [(0, 0, 0.0), (0, 100, 0.0), (95, 5, 0.95), (100, 0, 1.0)]
)
def test_used_fraction_counts_only_the_space_available_to_the_bookie(fs_used, free, fraction):
    assert used_fraction(fs_used, free) == pytest.approx(fraction)
