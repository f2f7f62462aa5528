"""Each setting is defined once: one config dataclass per kind of process or handle states
its defaults, the command-line options take them from it, and what a client and a bookie
must agree on is one constant of ``bk_spark/protocol/limits.py``."""

from __future__ import annotations

import ast
from pathlib import Path

from bk_spark.core.context import BookKeeperConfig
from bk_spark.protocol.limits import MAX_ENTRY_SIZE
from bookie_server.config import BookieConfig

ROOT = Path(__file__).resolve().parents[2]


def _field_defaults(name: str) -> list[str]:
    """Every ``name: T = <default>`` class field in the tree, as ``path: default source``."""
    found = []
    for top in ("bk_spark", "bookie_server"):
        for path in (ROOT / top).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                        and node.target.id == name and node.value is not None):
                    found.append(f"{path.relative_to(ROOT)}: {ast.unparse(node.value)}")
    return found


def test_client_and_bookie_take_the_max_entry_size_from_one_constant():
    assert BookieConfig(data_dir=Path("d")).max_entry_size == MAX_ENTRY_SIZE
    assert BookKeeperConfig().max_entry_size == MAX_ENTRY_SIZE
    assert sorted(_field_defaults("max_entry_size")) == [
        "bk_spark/core/context.py: MAX_ENTRY_SIZE", "bookie_server/config.py: MAX_ENTRY_SIZE"]
