"""The layers of the tree (README, "Layout"): no import cycle anywhere in ``bk_spark`` and
``bookie_server``, no module importing a layer above its own, and gRPC, protobuf and
kazoo imported only by the I/O adapters. Every import counts, lazy and TYPE_CHECKING ones
included, read from the source with ``ast`` (nothing is executed)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Module prefix -> layer; a module may import only its own layer or lower ones.
LAYERS = [
    ("bk_spark.errors", 0), ("bk_spark.compat", 0), ("bk_spark.proto", 0),
    ("bk_spark.protocol", 1), ("bk_spark.metadata_uri", 1), ("bk_spark.allocator", 1),
    ("bk_spark.certs", 1), ("bk_spark.security", 1),
    ("bk_spark.io", 2), ("bookie_server", 2),
    ("bk_spark.core", 3),
    ("bk_spark.log", 4),
    ("bk_spark.autorecovery", 5), ("bk_spark.offload", 5), ("bk_spark.datasource", 5),
    ("bk_spark.sandbox", 5),
    ("bk_spark.spark_check", 5), ("bk_spark.testbed", 6), ("bk_spark.admin", 6),
    ("bk_spark.faults", 6),
    ("bk_spark.cli", 7),
    ("bk_spark", 8),
]
#: Third-party I/O libraries and who may import them: the adapters, the bookie, and (as
#: tools that start, probe and break real processes) the sandbox, the fault harness and
#: the test bed.
IO_LIBRARIES = ("grpc", "google.protobuf", "kazoo")
IO_IMPORTERS = ("bk_spark.io", "bk_spark.proto", "bookie_server", "bk_spark.sandbox",
                "bk_spark.faults", "bk_spark.testbed")


def _modules() -> dict[str, Path]:
    out = {}
    for top in ("bk_spark", "bookie_server"):
        for p in (ROOT / top).rglob("*.py"):
            parts = p.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = p
    return out


MODULES = _modules()


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = [f"{node.module}.{a.name}" for a in node.names
                    if f"{node.module}.{a.name}" in MODULES]
            found.update(subs)
            if len(subs) < len(node.names):
                found.add(node.module)
    return found


GRAPH = {m: {t for t in _imports(p) if t in MODULES and t != m} for m, p in MODULES.items()}


def _layer(module: str) -> int:
    for prefix, layer in LAYERS:
        if module == prefix or module.startswith(prefix + "."):
            return layer
    raise AssertionError(f"{module} is in no layer of the README's layout table")


def test_every_module_has_a_layer():
    for m in MODULES:
        _layer(m)


def test_there_is_no_import_cycle():
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    assert cycles == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_imports_a_layer_above_its_own(module):
    above = sorted(t for t in GRAPH[module] if _layer(t) > _layer(module))
    assert above == [], f"{module} (layer {_layer(module)}) imports {above}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES
                                          if not m.startswith(IO_IMPORTERS)))
def test_only_the_io_adapters_import_grpc_protobuf_or_kazoo(module):
    libs = sorted(i for i in _imports(MODULES[module]) if i.startswith(IO_LIBRARIES))
    assert libs == [], f"{module} imports {libs}: that belongs in bk_spark/io"


def test_the_offloader_decodes_ledgers_with_the_io_decoder_not_the_data_sources_read_path():
    """The data source sits on the offloader (it reads what the offloader wrote): both decode
    entries with ``bk_spark/io/entry_batches.py``; the offloader reaches none of the
    source's scan or planning (only its schema helpers, for the Parquet schema)."""
    reach = sorted(t for m in MODULES if m.startswith("bk_spark.offload")
                   for t in GRAPH[m]
                   if t in ("bk_spark.datasource.scan", "bk_spark.datasource.planning"))
    assert reach == []
