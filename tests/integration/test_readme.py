"""The README's Python blocks run as written, against real ZooKeeper and bookie processes.

:func:`bk_spark.readme.python_blocks` reads them; :func:`bk_spark.readme.for_cluster` makes
the one change: every ``zk://...`` URI in a block becomes the test cluster's. Each block
runs in a fresh namespace, in a directory of its own, in README order (a later block may
use what an earlier one wrote, as a reader following the README would). Blocks that need a
SparkSession (``# readme-test: spark``) run in ``tests/spark/test_readme_spark.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from bk_spark import readme
from bk_spark.certs import issue_cert, make_ca
from bk_spark.sandbox import BookieProcess, free_port, wait_for_registrations

BLOCKS = readme.python_blocks(readme.README.read_text())


def _run(block: readme.CodeBlock, uri: str) -> None:
    code = compile(readme.for_cluster(block.code, uri), f"README.md:{block.line}", "exec")
    exec(code, {"__name__": f"readme_block_{block.line}"})  # noqa: S102 - the README's own code


def test_every_readme_python_block_is_run_by_a_test():
    """No block escapes: each is run here or, needing Spark, in tests/spark/test_readme_spark.py."""
    assert len(BLOCKS) >= 4
    assert all(b.needs <= readme.NEEDS for b in BLOCKS)
    assert [b for b in BLOCKS if not b.needs], "the ledger and log API blocks run here"


def test_the_readme_ledger_and_log_blocks_run_as_written(cluster, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    monkeypatch.chdir(tmp_path)
    for block in [b for b in BLOCKS if not b.needs]:
        _run(block, cluster.uri)
    out = capsys.readouterr().out
    assert "b'payload'" in out and "b'hello'" in out  # what the blocks print


def test_the_readme_security_block_runs_against_a_secure_cluster(
        metadata_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bookies requiring client certificates of ``ca.crt`` and ZooKeeper digest auth, with
    the block's files (``ca.crt``, ``client.crt``, ``client.key``) in its directory."""
    secure = [b for b in BLOCKS if b.needs == {"secure"}]
    assert secure, "the Security section's client block"
    ca = make_ca(tmp_path / "ca")
    server, app = issue_cert(ca, tmp_path, "bookie"), issue_cert(ca, tmp_path, "client")
    creds = tmp_path / "zk-auth"
    creds.write_text("user:password\n")  # the block's ZkSecurity(digest="user:password")
    args = ["--journal-file-size-mb", "8", "--tls-cert", str(server.cert), "--tls-key",
            str(server.key), "--tls-ca", str(ca.cert), "--tls-client-auth", "require",
            "--zk-auth-file", str(creds)]
    bookies = [BookieProcess(metadata_uri, tmp_path / f"bookie-{i}", port=free_port(),
                             extra_args=args) for i in range(3)]
    work = tmp_path / "work"
    work.mkdir()
    for src, name in ((ca.cert, "ca.crt"), (app.cert, "client.crt"), (app.key, "client.key")):
        (work / name).write_bytes(Path(src).read_bytes())
    try:
        with monkeypatch.context() as mp:
            mp.setenv("BK_ZK_AUTH_FILE", str(creds))  # to watch the registrations only
            for b in bookies:
                b.start()
            wait_for_registrations(metadata_uri, 3)
        monkeypatch.chdir(work)
        for block in secure:
            _run(block, metadata_uri)
    finally:
        for b in bookies:
            b.stop()
            b.drop_data()
