"""How deep a ledger writer's rounds pipeline to one bookie (io/bookie_client.py): two
requests at any size, more only for big ones, bounded by the bytes in flight."""

from __future__ import annotations

import pytest

from bk_spark.errors import InvalidConfigError
from bk_spark.io.bookie_client import BookieClient, ClientConfig

KiB, MiB = 1024, 1 << 20


def client(**kw) -> BookieClient:
    # a channel to nowhere: gRPC connects lazily, and nothing here sends
    return BookieClient("127.0.0.1:9", ClientConfig(**kw))


def test_any_request_goes_while_fewer_than_max_in_flight_are_out():
    c = client()
    try:
        c._in_flight, c._in_flight_bytes = 1, 10 * MiB
        assert c._may_send(100)
    finally:
        c.close()


def test_small_requests_wait_for_one_of_the_max_in_flight():
    c = client()
    try:
        c._in_flight, c._in_flight_bytes = 2, 2 * KiB
        assert not c._may_send(8 * KiB)  # moderate load: wait, the next round grows
    finally:
        c.close()


def test_big_requests_pipeline_deeper_until_the_bytes_in_flight_are_bounded():
    c = client(max_in_flight_bytes=8 * MiB)
    try:
        c._in_flight, c._in_flight_bytes = 2, 2 * MiB
        assert c._may_send(MiB)  # a thousand-entry round beyond two in flight: a pipeline
        c._in_flight, c._in_flight_bytes = 9, 7 * MiB + 1
        assert not c._may_send(MiB)  # but never more than max_in_flight_bytes
    finally:
        c.close()


def test_pipelining_beyond_max_in_flight_can_be_turned_off():
    c = client(max_in_flight_bytes=0)
    try:
        c._in_flight = 2
        assert not c._may_send(4 * MiB)
    finally:
        c.close()


def test_config_rejects_a_pipeline_without_requests():
    with pytest.raises(InvalidConfigError):
        ClientConfig(max_in_flight=0)
