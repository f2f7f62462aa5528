"""The offloaded Parquet files of a log committed to an Apache Iceberg table (pyiceberg),
for engines other than Spark: the same files, no copy.

The elected offloader keeps the table in step with the log's metadata after each pass
(:func:`sync_table`): the files of the offloaded prefix not in the table yet are added one
commit per ledger, in log order (offload order); files of ledgers the log no longer lists
(truncated) are expired with a metadata-only delete (their ``ledger_id`` statistics match
whole files). The log metadata stays the one source of truth: an interrupted sync is
finished by the next pass. A catalog URI ``sqlite:///path`` is pyiceberg's SQL catalog on
SQLite (the embedded default); any other is passed to ``load_catalog`` as its ``uri``.
"""

from __future__ import annotations

from collections.abc import Sequence

#: The Iceberg namespace of the log tables.
NAMESPACE = "bk"


def catalog(catalog_uri: str, warehouse: str):  # type: ignore[no-untyped-def]
    from pyiceberg.catalog import load_catalog
    from pyiceberg.catalog.sql import SqlCatalog

    if catalog_uri.startswith("sqlite:"):
        cat = SqlCatalog(NAMESPACE, uri=catalog_uri, warehouse=warehouse)
    else:
        cat = load_catalog(NAMESPACE, uri=catalog_uri, warehouse=warehouse)
    cat.create_namespace_if_not_exists(NAMESPACE)
    return cat


def table_name(log_name: str) -> tuple[str, str]:
    return NAMESPACE, log_name.replace(".", "_")


def sync_table(catalog_uri: str, warehouse: str, log_name: str,
               files: Sequence[tuple[int, str]]) -> int:
    """Make the Iceberg table of ``log_name`` hold exactly ``files`` (``(ledger_id, file
    URI)`` of the offloaded prefix, in log order): add the missing ones in order, expire
    the others. Returns how many commits were made."""
    import pyarrow.parquet as pq
    from pyiceberg.expressions import In

    from bk_spark.io.offload_files import filesystem

    if not files:
        return 0
    cat = catalog(catalog_uri, warehouse)
    fs, path = filesystem(files[0][1])
    schema = pq.read_schema(path, filesystem=fs)
    table = cat.create_table_if_not_exists(table_name(log_name), schema=schema)
    present = {r["file_path"] for r in table.inspect.files().to_pylist()}
    wanted = {f.split("?", 1)[0] for _lid, f in files}
    commits = 0
    stale = [p for p in present if p not in wanted]
    if stale:
        live = {lid for lid, _f in files}
        gone = sorted({int(p.rsplit("ledger-", 1)[1][:19]) for p in stale} - live)
        if gone:
            table.delete(In("ledger_id", gone))
            commits += 1
    for _lid, f in files:
        plain = f.split("?", 1)[0]
        if plain not in present:
            table.add_files([plain])
            commits += 1
    return commits
