"""How deep a ledger writer's rounds pipeline to one bookie (io/bookie_client.py): two
requests of the ledger at any size, more only for big ones, bounded by the bytes in flight;
other ledgers' requests (and a recovery's write-backs) do not count against a writer's."""

from __future__ import annotations

import pytest

from bk_spark.errors import InvalidConfigError
from bk_spark.io.bookie_client import BookieClient, ClientConfig

KiB, MiB = 1024, 1 << 20
L = (7, False)  # ledger 7's adds (not a recovery's write-backs)


def client(**kw) -> BookieClient:
    # a channel to nowhere: gRPC connects lazily, and nothing here sends
    return BookieClient("127.0.0.1:9", ClientConfig(**kw))


def test_any_request_goes_while_fewer_than_max_in_flight_are_out():
    c = client()
    try:
        c._in_flight, c._in_flight_bytes = {L: 1}, 10 * MiB
        assert c._may_send(100, *L)
    finally:
        c.close()


def test_small_requests_wait_for_one_of_the_max_in_flight():
    c = client()
    try:
        c._in_flight, c._in_flight_bytes = {L: 2}, 2 * KiB
        assert not c._may_send(8 * KiB, *L)  # moderate load: wait, the next round grows
    finally:
        c.close()


def test_big_requests_pipeline_deeper_until_the_bytes_in_flight_are_bounded():
    c = client(max_in_flight_bytes=8 * MiB)
    try:
        c._in_flight, c._in_flight_bytes = {L: 2}, 2 * MiB
        assert c._may_send(MiB, *L)  # a thousand-entry round beyond two in flight: a pipeline
        c._in_flight, c._in_flight_bytes = {L: 9}, 7 * MiB + 1
        assert not c._may_send(MiB, *L)  # but never more than max_in_flight_bytes
    finally:
        c.close()


def test_pipelining_beyond_max_in_flight_can_be_turned_off():
    c = client(max_in_flight_bytes=0)
    try:
        c._in_flight = {L: 2}
        assert not c._may_send(4 * MiB, *L)
    finally:
        c.close()


def test_other_ledgers_and_a_recoverys_write_backs_have_windows_of_their_own():
    c = client()
    try:
        c._in_flight, c._in_flight_bytes = {L: 2}, 2 * KiB
        assert not c._may_send(8 * KiB, *L)
        assert c._may_send(8 * KiB, 8, False)  # another writer sharing the bookie
        assert c._may_send(8 * KiB, 7, True)  # a recovery writing back the same ledger
    finally:
        c.close()


def test_config_rejects_a_pipeline_without_requests():
    with pytest.raises(InvalidConfigError):
        ClientConfig(max_in_flight=0)
