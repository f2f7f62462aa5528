"""Shared by the Spark examples: arguments and a local SparkSession."""

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
    """The spark-submit session (or a local[2] one when run with plain python)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.appName(app).master(os.environ.get("SPARK_MASTER",
                                                                     "local[2]"))
             .config("spark.sql.python.filterPushdown.enabled", "true")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.ui.showConsoleProgress", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark
