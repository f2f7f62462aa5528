"""The offloaded Parquet files of a log committed to an Apache Iceberg table (pyiceberg, an
adapter like :mod:`bk_spark.io.offload_files`, below the log layer that truncates),
for engines other than Spark: the same files, no copy.

The elected offloader keeps the table in step with the log's metadata after each pass
(:func:`sync_table`): the files of the offloaded prefix not in the table yet are added one
commit per ledger, in log order (offload order); files of ledgers the log no longer lists
(truncated) are expired with a metadata-only delete (their ``ledger_id`` statistics match
whole files). ``truncate_log`` and ``delete_log`` expire the dropped ledgers' files
themselves (:func:`expire_ledgers`), between the log metadata's CAS and the files'
deletion, so a reader of the table never meets a deleted file (before, that waited for
the offloader's next pass: in between, a scan failed on a missing file). The log
metadata stays the one source of truth: an interrupted sync is finished by the next pass.
A catalog URI ``sqlite:///path`` is pyiceberg's SQL catalog on SQLite (the embedded
default); any other is passed to ``load_catalog`` as its ``uri``.
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


def warehouse_of(target: str) -> str:
    """Where new table metadata goes: ``_iceberg`` under the log's offload target."""
    return f"{target.split('?', 1)[0].rstrip('/')}/_iceberg"


def _ledger_of(file_path: str) -> int:
    return int(file_path.rsplit("ledger-", 1)[1][:19])


def _expire(table, ledger_ids: set[int]) -> int:  # type: ignore[no-untyped-def]
    """A metadata-only delete of the files of ``ledger_ids`` (a file holds one ledger, so
    its ``ledger_id`` statistics match it whole: no file is rewritten). Returns the
    commits made (0 or 1)."""
    from pyiceberg.expressions import In

    if not ledger_ids:
        return 0
    table.delete(In("ledger_id", sorted(ledger_ids)))
    return 1


def sync_table(catalog_uri: str, warehouse: str, log_name: str,
               files: Sequence[tuple[int, str]]) -> int:
    """Make the Iceberg table of ``log_name`` hold exactly ``files`` (``(ledger_id, file
    URI)`` of the offloaded prefix, in log order): add the missing ones in order, expire
    the others (every file when the prefix is empty: the log truncated past it). Returns
    how many commits were made."""
    import pyarrow.parquet as pq

    from bk_spark.io.offload_files import filesystem

    cat = catalog(catalog_uri, warehouse)
    ident = table_name(log_name)
    if files:
        fs, path = filesystem(files[0][1])
        schema = pq.read_schema(path, filesystem=fs)
        table = cat.create_table_if_not_exists(ident, schema=schema)
    elif cat.table_exists(ident):
        table = cat.load_table(ident)
    else:
        return 0
    present = {r["file_path"] for r in table.inspect.files().to_pylist()}
    wanted = {f.split("?", 1)[0] for _lid, f in files}
    live = {lid for lid, _f in files}
    commits = _expire(table, {_ledger_of(p) for p in present - wanted} - live)
    for _lid, f in files:
        plain = f.split("?", 1)[0]
        if plain not in present:
            table.add_files([plain])
            commits += 1
    return commits


def expire_ledgers(catalog_uri: str, warehouse: str, log_name: str,
                   ledger_ids: Sequence[int]) -> int:
    """Expire the files of ``ledger_ids`` from the log's table (``truncate_log`` and
    ``delete_log``, after the log metadata dropped them and before their files are
    deleted: an Iceberg reader never meets a file that is gone). Returns the commits made
    (0: no table, or none of them in it)."""
    cat = catalog(catalog_uri, warehouse)
    ident = table_name(log_name)
    if not cat.table_exists(ident):
        return 0
    table = cat.load_table(ident)
    present = {_ledger_of(r["file_path"]) for r in table.inspect.files().to_pylist()}
    return _expire(table, present & set(ledger_ids))
