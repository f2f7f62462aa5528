"""The one service loop AutoRecovery and the offloader run on (bk_spark/core/service.py)."""

from __future__ import annotations

import logging
import threading

import pytest

from bk_spark.autorecovery.service import AutoRecoveryService
from bk_spark.core.service import BackgroundService
from bk_spark.offload.service import OffloaderService


@pytest.mark.parametrize("cls", [AutoRecoveryService, OffloaderService])
def test_autorecovery_and_the_offloader_share_one_service_loop(cls):
    assert issubclass(cls, BackgroundService)
    for method in ("stop", "serve_forever", "start_in_background", "spawn"):
        assert method not in vars(cls), f"{cls.__name__} restates {method}"


class TwoLoops(BackgroundService):
    role = "test-role"

    def __init__(self) -> None:
        super().__init__()
        self.started = threading.Event()
        self.ran_until_stop = threading.Event()

    def start(self) -> None:
        def steady(stop: threading.Event) -> None:
            self.started.set()
            stop.wait()
            self.ran_until_stop.set()

        def failing(stop: threading.Event) -> None:
            raise RuntimeError("boom")

        self.spawn("steady", steady)
        self.spawn("failing", failing)


def test_a_loop_that_dies_is_logged_and_the_others_run_until_the_service_stops(caplog):
    service, done = TwoLoops(), threading.Event()
    with caplog.at_level(logging.ERROR, logger="bk_spark.core.service"):
        t = threading.Thread(target=service.serve_forever, args=(done,))
        t.start()
        assert service.started.wait(5)
        done.set()
        t.join(5)
    assert not t.is_alive() and service.ran_until_stop.is_set() and service.stopping
    assert "test-role failing died" in caplog.text
    assert not any(th.is_alive() for th in service._threads)


def test_a_start_in_the_background_retries_until_it_starts_and_ends_with_stop(monkeypatch):
    monkeypatch.setattr("bk_spark.core.service.START_RETRY_S", 0.01)
    attempts = []

    class Flaky(BackgroundService):
        def start(self) -> None:
            attempts.append(1)
            if len(attempts) < 3:
                raise OSError("ZooKeeper unreachable")

    service = Flaky()
    service.start_in_background()
    service._threads[0].join(5)
    assert len(attempts) == 3
    service.stop()
