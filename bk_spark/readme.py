"""The README's generated tables: each is written from the one definition it documents.

A generated section of README.md sits between ``<!-- generated: NAME -->`` and
``<!-- end generated: NAME -->``; :data:`SECTIONS` maps each NAME to the function that
writes it. ``make readme`` (``python -m bk_spark.readme``) rewrites them in place;
``python -m bk_spark.readme --check`` exits 1 naming the sections that differ, and
``tests/unit/test_readme_tables.py`` fails the same way, so a table never drifts from its
source.

The README's Python blocks run as written in the tests (``tests/integration/test_readme.py``,
``tests/spark/test_readme_spark.py``): :func:`python_blocks` reads them, with the needs a block
states in a comment line ``# readme-test: spark`` (it uses a SparkSession ``spark``) or
``# readme-test: secure`` (its cluster requires client certificates ``ca.crt``,
``client.crt``, ``client.key`` and ZooKeeper credentials ``zk-auth`` in the current
directory), and :func:`for_cluster` points a block at a test cluster: every
``zk://...`` URI literal in it is replaced by that cluster's URI, the one change made.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bk_spark.datasource.options import markdown_table

#: Section name -> the function writing its Markdown.
SECTIONS: dict[str, Callable[[], str]] = {
    "spark-options": markdown_table,
}

README = Path(__file__).resolve().parents[1] / "README.md"


def _section(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- generated: {re.escape(name)} -->\n)(.*?)"
                      rf"(<!-- end generated: {re.escape(name)} -->)", re.DOTALL)


def render(text: str) -> str:
    """``text`` with every generated section written afresh. A section missing from
    ``text`` is an error: the README lost its markers."""
    for name, write in SECTIONS.items():
        pattern = _section(name)
        if not pattern.search(text):
            raise ValueError(f"README has no generated section {name!r} "
                             f"(<!-- generated: {name} --> ... <!-- end generated: {name} -->)")
        text = pattern.sub(lambda m, w=write: m.group(1) + w() + m.group(3), text)
    return text


def stale_sections(text: str) -> list[str]:
    """Names of the generated sections whose text differs from their source."""
    fresh = render(text)
    return [name for name in SECTIONS
            if _section(name).search(text).group(2)  # type: ignore[union-attr]
            != _section(name).search(fresh).group(2)]  # type: ignore[union-attr]


@dataclass(frozen=True)
class CodeBlock:
    """A fenced Python block of the README: its first line's number, its code and the
    needs its ``# readme-test:`` comment states."""

    line: int
    code: str
    needs: frozenset[str]


_FENCE = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)
_NEEDS = re.compile(r"^\s*# readme-test: (.+)$", re.MULTILINE)
#: What a ``# readme-test:`` comment may say.
NEEDS = frozenset({"spark", "secure"})


def python_blocks(text: str) -> list[CodeBlock]:
    """Every ```` ```python ```` block of ``text``, in order."""
    out = []
    for m in _FENCE.finditer(text):
        needs = frozenset(n.strip() for found in _NEEDS.findall(m.group(1))
                          for n in found.split(","))
        unknown = needs - NEEDS
        if unknown:
            raise ValueError(f"README line {text.count(chr(10), 0, m.start()) + 1}: unknown "
                             f"readme-test need(s) {sorted(unknown)} (known: {sorted(NEEDS)})")
        out.append(CodeBlock(text.count("\n", 0, m.start()) + 2, m.group(1), needs))
    return out


_ZK_URI = re.compile(r"zk://[^\s\"']+")


def for_cluster(code: str, uri: str) -> str:
    """``code`` with every ``zk://...`` literal replaced by ``uri``."""
    return _ZK_URI.sub(uri, code)


def main(argv: list[str]) -> int:
    text = README.read_text()
    if "--check" in argv:
        stale = stale_sections(text)
        for name in stale:
            print(f"README.md: generated section {name!r} is stale: run make readme")
        return 1 if stale else 0
    fresh = render(text)
    if fresh != text:
        README.write_text(fresh)
        print("README.md: generated sections rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
