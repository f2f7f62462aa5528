"""Which Python Spark's workers run (spark_check.worker_python): pure, no Spark started."""

from __future__ import annotations

import sys
from pathlib import Path

from bk_spark.spark_check import Check, Report, WorkerPython, worker_python

PY = sys.executable


def test_pyspark_python_wins_and_a_different_spark_defaults_python_is_noted(tmp_path: Path
                                                                             ) -> None:
    (tmp_path / "spark-defaults.conf").write_text(
        "# comment\nspark.master local[2]\nspark.pyspark.python   /opt/other/python\n")
    wp = worker_python(env={"PYSPARK_PYTHON": PY, "SPARK_CONF_DIR": str(tmp_path),
                            "PYSPARK_DRIVER_PYTHON": "/nowhere/python"})
    assert (wp.command, wp.source, wp.path) == (PY, "PYSPARK_PYTHON", PY)
    assert wp.notes == (f"spark.pyspark.python in {tmp_path / 'spark-defaults.conf'} is "
                        f"/opt/other/python: spark-submit runs UDFs and registered sources "
                        f"there, but Spark's lookup of format('bookkeeper') runs {PY}; "
                        f"export PYSPARK_PYTHON=/opt/other/python",)


def test_driver_python_then_python3_on_the_path(tmp_path: Path) -> None:
    wp = worker_python(env={"PYSPARK_DRIVER_PYTHON": PY, "SPARK_CONF_DIR": str(tmp_path)})
    assert (wp.command, wp.source, wp.notes) == (PY, "PYSPARK_DRIVER_PYTHON", ())
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python3"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    (tmp_path / "spark-defaults.conf").write_text(f"spark.pyspark.python={PY}\n")
    wp = worker_python(env={"PATH": str(bin_dir), "SPARK_CONF_DIR": str(tmp_path)})
    assert (wp.command, wp.path) == ("python3", str(fake))
    assert wp.source == "default (PYSPARK_PYTHON is not set)"
    assert wp.notes[0].endswith(f"runs python3; export PYSPARK_PYTHON={PY}")
    assert wp.notes[1] == f"this is not the Python running bk ({PY})"
    assert worker_python(env={"PATH": str(tmp_path / "none"),
                              "SPARK_CONF_DIR": str(tmp_path)}).path is None


def test_report_fails_if_any_check_fails_and_lists_each_fix_once() -> None:
    wp = WorkerPython("python3", "default", "/usr/bin/python3")
    r = Report(wp, (Check("a", True, ""), Check("b", False, "", "fix 1"),
                    Check("c", False, "", "fix 1"), Check("d", False, "", "fix 2")))
    assert not r.ok and Report(wp, (Check("a", True, ""),)).ok
    assert r.fixes() == [(["b", "c"], "fix 1"), (["d"], "fix 2")]
