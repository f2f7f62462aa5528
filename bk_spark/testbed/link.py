"""A link: a userspace TCP relay in front of a bookie that adds delay and loses connections.

This kernel has no ``sch_netem`` (``tc qdisc ... netem`` fails with "Specified qdisc kind is
unknown"), no netfilter and no tc classifiers, so delay and loss cannot be put on a
namespace's interface. The test bed puts a link on the bookie's own host instead: the
bookie listens on that host's ``127.0.0.1:<port>`` and registers ``<host address>:<port>``
(``--host`` vs ``--advertised-address``), and the link listens on ``<host address>:<port>``
and relays every connection to the bookie. Every client (writers, readers, recovery, other
bookies) reaches the bookie by its registered address, so through the link; partitions
(:meth:`~bk_spark.testbed.network.Network.partition`) still act on the host's address.

What a link does, read from its control file (JSON, polled every 0.1 s, so a fault can be
set and lifted while connections are open):

``delay_ms``
    every byte a client sends reaches the bookie ``delay_ms`` later (the round trip grows by
    ``delay_ms``, as ``tc netem delay`` on the client's interface would make it). Bytes are
    stamped on arrival and released at arrival + delay by a separate task, so the delay is
    a pipe, not a stop-and-wait: a client with many requests in flight keeps its throughput.
``loss_pct``
    each chunk relayed (either way) has this chance of losing its connection: both sides are
    reset (RST), as a connection dies when a lossy path drops its packets for too long.
    Byte-level loss cannot be mimicked above TCP without corrupting the stream; what the
    client sees of packet loss is stalls (the delay) and dead connections (this).

Run as ``python -m bk_spark.testbed.link --listen H:P --target H:P --control FILE``; it runs
until SIGTERM/SIGKILL. :func:`write_control` changes a running link.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import socket
import struct
import time
from dataclasses import asdict, dataclass
from pathlib import Path

CHUNK = 256 * 1024
POLL_S = 0.1


@dataclass
class LinkSettings:
    """What a link does now (see the module docstring)."""

    delay_ms: float = 0.0
    loss_pct: float = 0.0


def write_control(path: Path, settings: LinkSettings) -> None:
    """Set a running link's delay and loss (atomically: the link never reads half a file)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(settings)))
    tmp.replace(path)


def read_control(path: Path) -> LinkSettings:
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError):
        return LinkSettings()
    return LinkSettings(float(raw.get("delay_ms", 0.0)), float(raw.get("loss_pct", 0.0)))


def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:  # SO_LINGER 0: close sends RST, as a dead path ends a connection
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.close()


class Link:
    """The relay (one asyncio loop; see the module docstring)."""

    def __init__(self, listen: tuple[str, int], target: tuple[str, int], control: Path) -> None:
        self.listen, self.target, self.control = listen, target, control
        self.settings = read_control(control)
        self._rng = random.Random()
        self._conns: set[asyncio.Task] = set()

    async def _poll(self) -> None:
        while True:
            self.settings = read_control(self.control)
            await asyncio.sleep(POLL_S)

    def _lose(self) -> bool:
        p = self.settings.loss_pct
        return p > 0 and self._rng.random() * 100 < p

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter,
                    delayed: bool, peers: tuple[asyncio.StreamWriter, asyncio.StreamWriter]
                    ) -> None:
        """Copy ``src`` to ``dst``; with ``delayed``, each chunk leaves ``delay_ms`` after it
        arrived (a reader task stamps, this task releases: the pipe stays full)."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def read() -> None:
            while True:
                try:
                    data = await src.read(CHUNK)
                except (ConnectionError, OSError):
                    data = b""
                due = time.monotonic() + (self.settings.delay_ms / 1000.0 if delayed else 0.0)
                await queue.put((due, data))
                if not data:
                    return

        reader = asyncio.create_task(read())
        try:
            while True:
                due, data = await queue.get()
                if not data:
                    break
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                if self._lose():
                    for w in peers:
                        _reset(w)
                    return
                dst.write(data)
                await dst.drain()
            with contextlib.suppress(OSError):
                dst.write_eof()
        except (ConnectionError, OSError):
            for w in peers:
                _reset(w)
        finally:
            reader.cancel()

    async def _serve(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter
                     ) -> None:
        me = asyncio.current_task()
        if me is not None:
            self._conns.add(me)
            me.add_done_callback(self._conns.discard)
        try:
            b_reader, b_writer = await asyncio.open_connection(*self.target)
        except OSError:
            _reset(c_writer)
            return
        for w in (c_writer, b_writer):
            sock = w.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peers = (c_writer, b_writer)
        await asyncio.gather(self._pipe(c_reader, b_writer, True, peers),
                             self._pipe(b_reader, c_writer, False, peers),
                             return_exceptions=True)
        for w in peers:
            w.close()

    async def run(self) -> None:
        server = await asyncio.start_server(self._serve, *self.listen, reuse_address=True)
        poll = asyncio.create_task(self._poll())
        try:
            async with server:
                await server.serve_forever()
        finally:
            poll.cancel()
            for t in list(self._conns):
                t.cancel()
            await asyncio.gather(poll, *self._conns, return_exceptions=True)


def _addr(text: str) -> tuple[str, int]:
    host, port = text.rsplit(":", 1)
    return host, int(port)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bk_spark.testbed.link", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--listen", type=_addr, required=True, help="HOST:PORT to accept on")
    p.add_argument("--target", type=_addr, required=True, help="HOST:PORT to relay to")
    p.add_argument("--control", type=Path, required=True, help="JSON file: delay_ms, loss_pct")
    args = p.parse_args(argv)
    asyncio.run(Link(args.listen, args.target, args.control).run())


if __name__ == "__main__":
    main()
