"""A log whose newest ledgers live only in Parquet (offloaded, their bookie copies dropped
after the deletion lag) takes a new writer, and a Spark-style commit, as any log does.

Found by the offload speed work: with the last two ledgers dropped from the bookies, every
new owner's step 2 ("fence the last two ledgers") tried to recovery-open ledgers that no
longer exist, and the take-over gave up ("other writers keep taking the log").
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bk_spark.core import BookKeeper
from bk_spark.log import (
    open_log_reader,
    open_log_view,
    open_log_writer,
    update_log_properties,
)
from bk_spark.offload.metrics import OffloadMetrics
from bk_spark.offload.offloader import Offloader, OffloaderConfig
from bk_spark.protocol import offload_rules as rules

PW = b"p"


@pytest.fixture
def bk(module_cluster) -> Iterator[BookKeeper]:
    client = BookKeeper(module_cluster.uri)
    yield client
    client.close()


def _payloads(bk: BookKeeper, name: str) -> list[bytes | None]:
    with open_log_reader(bk, name, password=PW) as r:
        return [x.payload for x in r.read_available()]


def test_a_log_whose_last_ledgers_are_only_in_parquet_takes_a_new_writer(bk, tmp_path):
    name = "off-takeover"
    w = open_log_writer(bk, name, password=PW, roll_max_entries=3)
    for i in range(7):
        w.append(f"r{i}".encode())
    w.close()  # every ledger closed and described: all of them may be offloaded
    update_log_properties(bk, name, {rules.POLICY_PROPERTY: rules.OffloadPolicy(
        after="0", target=tmp_path.as_uri(), deletion_lag_ms=0).to_json()})
    off = Offloader(bk, "test", OffloaderConfig(passwords=(b"", PW)), OffloadMetrics())
    for _ in range(3):
        off.tick()
    view = open_log_view(bk, name)
    states = rules.states_of(view.md.properties)
    assert [states[r.ledger_id].dropped for r in view.ledgers()] == [True] * len(view.ledgers())

    w2 = open_log_writer(bk, name, password=PW)  # before the fix: LogOwnershipLostError
    w2.append(b"after")
    w2.close()
    assert _payloads(bk, name) == [f"r{i}".encode() for i in range(7)] + [b"after"]
