"""Shared by the Spark examples: arguments and the SparkSession."""

from __future__ import annotations

import argparse
import os
import sys

from pyspark.sql import SparkSession


def parser(doc: str | None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--metadata-service-uri",
                   default=os.environ.get("BK_METADATA_SERVICE_URI",
                                          "zk://127.0.0.1:2181/ledgers"),
                   help="cluster to use (default: env BK_METADATA_SERVICE_URI or the sandbox)")
    return p


def session(app: str) -> SparkSession:
    """The session of whatever launched the job.

    No master is set here: ``spark-submit --master spark://...`` (or yarn, k8s://...) decides
    where the job runs, and plain ``python`` gets PySpark's default, ``local[*]``. Setting
    ``.master(...)`` in the builder would silently override spark-submit's ``--master``.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.appName(app)
             .config("spark.sql.python.filterPushdown.enabled", "true")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.ui.showConsoleProgress", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark
