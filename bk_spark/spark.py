"""Reading a log in Spark at Parquet speed: :func:`read_log` hands Spark the offloaded part
of a log as Spark's own Parquet scan (columnar, not bound by the Python data source's
row-by-row conversion) and the rest through the ``bookkeeper`` source, unioned.

Exact at the boundary: the offloaded part is a prefix of the log's live ledgers
(offload happens in log order, :func:`~bk_spark.protocol.offload_rules.offloaded_prefix`),
read from one snapshot of the log's metadata; the ``bookkeeper`` source starts at entry 0
of the first ledger after that prefix (``startingOffsets``), so every row is read once:
no duplicate, no gap. A ledger of the prefix truncated before Spark reads its file fails
the read (Spark's file-not-found: data loss), never a wrong row.

Usage::

    from bk_spark.spark import read_log
    df = read_log(spark, "events", uri="zk://127.0.0.1:2181/ledgers", password="p")

``spark.read.parquet(offload_path(...))`` reads only the table (the offloaded ledgers).
"""

from __future__ import annotations

import json
from typing import Any

from bk_spark.core.client import BookKeeper
from bk_spark.log import open_log_view
from bk_spark.protocol import offload_rules


def _spark_path(uri: str) -> str:
    """A pyarrow filesystem URI as Hadoop's filesystems name it (``s3://`` -> ``s3a://``;
    the query, which may hold credentials, is dropped: give them to Hadoop's config)."""
    uri = uri.split("?", 1)[0]
    return "s3a://" + uri[len("s3://"):] if uri.startswith("s3://") else uri


def offloaded_files(bk: BookKeeper, name: str) -> tuple[list[str], dict[str, Any] | None]:
    """The Parquet files of the offloaded prefix of log ``name`` (log order) and the
    position the rest starts at (None: every live ledger is offloaded)."""
    view = open_log_view(bk, name)
    ledgers = view.ledgers()
    states = offload_rules.states_of(view.md.properties)
    prefix = offload_rules.offloaded_prefix(ledgers, states)
    files = [offload_rules.offload_file(name, view.md.log_id, r.ledger_id,
                                        states[r.ledger_id]) for r in prefix]
    rest = ledgers[len(prefix)] if len(prefix) < len(ledgers) else None
    start = None if rest is None else {"ledger": rest.ledger_id, "entry": 0,
                                       "index": rest.index}
    if rest is None and not ledgers:
        start = {"ledger": -1, "entry": 0, "index": view.md.end_index}
    return files, start


def offload_path(uri: str, name: str, target: str | None = None) -> str:
    """The directory of log ``name``'s Parquet files (``spark.read.parquet`` of it reads
    the offloaded table on its own). Where the log's policy names no target (it uses the
    offloader's default, as the sandbox's logs do), the target its offload records name;
    ``target`` when there is neither."""
    with BookKeeper(uri) as bk:
        view = open_log_view(bk, name)
        base = offload_rules.target_of(view.md.properties) or target
        if base is None:
            raise ValueError(f"log {name!r} has no offloaded ledger and its policy names no "
                             f"offload target: pass target=")
        return _spark_path(offload_rules.offload_dir(base, name, view.md.log_id))


def read_log(spark: Any, name: str, uri: str | None = None, password: str = "",
             **options: str) -> Any:
    """A DataFrame of log ``name``: Spark's Parquet scan of its offloaded ledgers unioned
    with the ``bookkeeper`` source from the first ledger after them (same schema and
    rows as ``spark.read.format("bookkeeper")`` alone). ``options``: more options of the
    ``bookkeeper`` source (``includePositions``, ...; not ``startingOffsets``)."""
    from bk_spark.metadata_uri import parse_metadata_service_uri

    uri = parse_metadata_service_uri(uri).uri
    with BookKeeper(uri) as bk:
        files, start = offloaded_files(bk, name)
    reader = (spark.read.format("bookkeeper").option("metadataServiceUri", uri)
              .option("log", name))
    if password:
        reader = reader.option("password", password)
    for k, v in options.items():
        reader = reader.option(k, v)
    live = reader.option("startingOffsets", json.dumps({name: start})) \
        if start is not None else None
    if not files:
        return reader.load()
    from pyspark.sql import functions as F

    schema = (live if live is not None else reader).load().schema
    table = spark.read.parquet(*[_spark_path(f) for f in files])
    have = set(table.columns)
    offloaded = table.select([
        (F.col(f.name) if f.name in have else F.lit(None)).cast(f.dataType).alias(f.name)
        for f in schema.fields])
    if live is None:
        return offloaded
    return offloaded.unionByName(live.load())
