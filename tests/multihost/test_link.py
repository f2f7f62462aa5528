"""The test bed's link (bk_spark/testbed/link.py): delay as a pipe, loss as reset connections.

An echo server and a link on loopback ports, in this process (no namespaces needed).
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bk_spark.sandbox import free_port
from bk_spark.testbed.link import Link, LinkSettings, write_control


def _echo_server() -> tuple[socket.socket, int]:
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]

    def serve() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return

            def echo(c: socket.socket = conn) -> None:
                with c:
                    try:
                        while data := c.recv(65536):
                            c.sendall(data)
                    except ConnectionError:  # the lossy link resets it
                        return

            threading.Thread(target=echo, daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return srv, port


@pytest.fixture
def link(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    srv, echo_port = _echo_server()
    control = tmp_path / "link.json"
    write_control(control, LinkSettings())
    port = free_port()
    loop = asyncio.new_event_loop()
    task: list[asyncio.Task] = []

    def run() -> None:
        asyncio.set_event_loop(loop)
        task.append(loop.create_task(
            Link(("127.0.0.1", port), ("127.0.0.1", echo_port), control).run()))
        try:
            loop.run_until_complete(task[0])
        except asyncio.CancelledError:
            pass

    t = threading.Thread(target=run, daemon=True)
    t.start()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.02)
    yield port, control
    loop.call_soon_threadsafe(task[0].cancel)
    t.join(5)
    srv.close()


def _set(control: Path, **kw: float) -> None:
    write_control(control, LinkSettings(**kw))
    time.sleep(0.3)  # the link polls its control file every 0.1 s


def _round_trip(sock: socket.socket, payload: bytes) -> float:
    t0 = time.perf_counter()
    sock.sendall(payload)
    got = b""
    while len(got) < len(payload):
        got += sock.recv(65536)
    assert got == payload
    return time.perf_counter() - t0


def test_a_link_relays_bytes_unchanged_and_adds_its_delay_to_the_round_trip(link):
    port, control = link
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        fast = min(_round_trip(s, b"x" * 1000) for _ in range(5))
        _set(control, delay_ms=50)
        slow = min(_round_trip(s, bytes(range(256)) * 40) for _ in range(3))
    assert fast < 0.04
    assert 0.05 <= slow < 0.5


def test_a_delayed_link_is_a_pipe_so_requests_in_flight_overlap(link):
    port, control = link
    _set(control, delay_ms=100)
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        t0 = time.perf_counter()
        for i in range(20):  # 20 requests sent 10 ms apart, each delayed 100 ms
            s.sendall(b"%03d" % i)
            time.sleep(0.01)
        got = b""
        while len(got) < 60:
            got += s.recv(65536)
        elapsed = time.perf_counter() - t0
    assert got == b"".join(b"%03d" % i for i in range(20))
    assert elapsed < 0.8  # stop-and-wait would take >= 20 x 100 ms


def test_a_lossy_link_resets_connections(link):
    port, control = link
    _set(control, loss_pct=100)
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.settimeout(5)
        s.sendall(b"hello")
        with pytest.raises((ConnectionResetError, ConnectionAbortedError, BrokenPipeError)):
            data = s.recv(100)
            if data == b"":  # an orderly close is not what a lossy path does
                pytest.fail("the link closed the connection instead of resetting it")
            s.sendall(b"more")
            s.recv(100)
