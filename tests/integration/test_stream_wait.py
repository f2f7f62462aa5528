"""The streaming source's wait for news (``latestOffset`` with nothing new): it watches the
open ledger's LAC or the log's metadata instead of polling, and answers once data is there."""

from __future__ import annotations

import threading
import time

from bk_spark.core import BookKeeper
from bk_spark.datasource.planning import LogView, log_end
from bk_spark.datasource.stream import wait_for_more
from bk_spark.log import open_log_writer


def _ends(bk: BookKeeper, name: str) -> tuple[dict, dict]:
    view = LogView(bk, name)
    return {name: view}, {name: log_end(view, b"")}


def _later(fn) -> threading.Thread:  # type: ignore[no-untyped-def]
    def run() -> None:
        time.sleep(0.3)
        fn()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_wait_for_more_returns_when_an_entry_of_the_open_ledger_becomes_readable(
        module_cluster):
    with BookKeeper(module_cluster.uri) as bk:
        w = open_log_writer(bk, "wait-open")
        w.append(b"first")
        views, ends = _ends(bk, "wait-open")
        t = _later(lambda: w.append(b"second"))
        assert wait_for_more(bk, views, ends, b"", timeout=30.0)
        t.join()
        views2, ends2 = _ends(bk, "wait-open")
        assert ends2["wait-open"] > ends["wait-open"]
        w.close()


def test_wait_for_more_returns_when_a_log_past_its_last_ledger_gets_a_new_one(
        module_cluster):
    with BookKeeper(module_cluster.uri) as bk:
        w = open_log_writer(bk, "wait-closed")
        w.append(b"a")
        w.close()
        views, ends = _ends(bk, "wait-closed")
        assert views["wait-closed"].at(ends["wait-closed"].index) is None  # past the last

        def reopen_and_append() -> None:
            w2 = open_log_writer(bk, "wait-closed")
            w2.append(b"b")
            w2.close()

        t = _later(reopen_and_append)
        assert wait_for_more(bk, views, ends, b"", timeout=30.0)
        t.join()


def test_wait_for_more_gives_up_after_its_timeout_when_nothing_comes(module_cluster):
    with BookKeeper(module_cluster.uri) as bk:
        w = open_log_writer(bk, "wait-idle")
        w.append(b"only")
        deadline = time.monotonic() + 10
        views, ends = _ends(bk, "wait-idle")
        while ends["wait-idle"].entry < 1 and time.monotonic() < deadline:
            time.sleep(0.05)  # the writer's explicit LAC makes the entry readable
            views, ends = _ends(bk, "wait-idle")
        assert ends["wait-idle"].entry == 1
        assert not wait_for_more(bk, views, ends, b"", timeout=0.3)
        w.close()


def test_wait_for_more_long_polls_the_live_bookie_while_two_of_three_are_down(
        module_cluster):
    """E3/Qw1/Qa1 with two bookies down (issue 25, 3): the stream's wait reads the LAC best
    effort, so news on the live bookie ends it (it raised: no quorum coverage)."""
    from bk_spark.core.client import BookKeeperConfig
    from bk_spark.io.bookie_client import ClientConfig
    from bk_spark.sandbox import start_bookies, wait_for_registrations

    with BookKeeper(module_cluster.uri) as bk, BookKeeper(module_cluster.uri, BookKeeperConfig(
            client=ClientConfig(read_timeout_s=2.0))) as reader:
        w = open_log_writer(bk, "wait-down", ensemble_size=3, write_quorum_size=1,
                            ack_quorum_size=1)
        for i in range(3):
            w.append(b"%d" % i)  # entry i on bookie i; entry 3 goes to bookie 0
        time.sleep(0.2)  # the explicit LAC
        views, ends = _ends(reader, "wait-down")
        assert ends["wait-down"].entry == 3
        ensemble = bk.ledger_metadata(w.ledger_id).last_ensemble
        down = [b for b in module_cluster.bookies if b.bookie_id in ensemble[1:]]
        for b in down:
            b.kill()
        try:
            started = time.monotonic()
            assert not wait_for_more(reader, views, ends, b"", timeout=0.5)  # no news, no error
            assert time.monotonic() - started < 2
            t = _later(lambda: w.append(b"3"))
            assert wait_for_more(reader, views, ends, b"", timeout=20.0)
            assert time.monotonic() - started < 6
            t.join()
        finally:
            start_bookies(down)
            wait_for_registrations(module_cluster.uri, len(module_cluster.bookies))
        w.close()
