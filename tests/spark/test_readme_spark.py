"""The README's Spark blocks (``# readme-test: spark``) run as written in the tests' Spark
session, against its cluster: :func:`bk_spark.readme.for_cluster` replaces every ``zk://``
URI in a block by the cluster's, the one change made; the block gets ``spark`` (a
SparkSession, as the README assumes) and a directory of its own. The block needing a
secure cluster as well runs in ``tests/spark/test_spark_security.py``; the other blocks in
``tests/integration/test_readme.py``."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from bk_spark import readme

BLOCKS = [b for b in readme.python_blocks(readme.README.read_text()) if b.needs == {"spark"}]


def test_the_readme_spark_block_runs_as_written(spark, uri: str, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    assert BLOCKS, "the Spark section's block"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # its checkpoint: pytest's to clean
    for block in BLOCKS:
        code = compile(readme.for_cluster(block.code, uri), f"README.md:{block.line}", "exec")
        exec(code, {"__name__": f"readme_block_{block.line}", "spark": spark})  # noqa: S102
    assert not spark.streams.active  # the block stops its query
    read = spark.read.format("bookkeeper").option("metadataServiceUri", uri)
    assert read.option("log", "copy").load().count() == 1000  # the copy, exactly once
    assert read.option("log", "events").load().count() == 1000
