"""``bk ui``: the status page (and the cluster-wide HTTP admin API) served from this machine,
for a cluster whose bookies run without ``--http-port`` or from outside the cluster.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Annotated

import typer

from bk_spark.cli.common import UriOpt, cli_security, console, setup_logging


def ui(
    metadata_service_uri: UriOpt = None,
    port: Annotated[int, typer.Option("--port", help="HTTP port (0: any free port)")] = 8080,
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    checkpoint: Annotated[list[Path] | None, typer.Option(
        "--checkpoint", help="checkpointLocation of a Spark streaming query reading a log: "
                             "the page shows its lag (repeatable)")] = None,
) -> None:
    """Serve the status page: bookies, AutoRecovery, logs, streaming lag (Ctrl-C stops)."""
    from bk_spark.admin.http import AdminContext, AdminHttpServer, is_loopback
    from bk_spark.metadata_uri import parse_metadata_service_uri

    setup_logging()
    uri = parse_metadata_service_uri(metadata_service_uri).uri
    ctx = AdminContext(uri, loopback=is_loopback(host), security=cli_security(),
                       checkpoints=tuple(p.resolve() for p in checkpoint or ()))
    server = AdminHttpServer(ctx, host, port)
    bound = server.start()
    console.print(f"status page of {uri}: http://{host}:{bound}/  (Ctrl-C stops)",
                  highlight=False, soft_wrap=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    try:
        while not done.wait(1.0):
            pass
    finally:
        server.stop()
