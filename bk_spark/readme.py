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

import ast
import inspect
import re
import sys
import textwrap
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from bk_spark.datasource.options import markdown_table

MiB = 1024 * 1024


def field_docs(cls: type) -> dict[str, str]:
    """The docstring of each field of the dataclass ``cls``: the string literal right below
    the field (an attribute docstring, as Sphinx reads them), whitespace folded."""
    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body  # type: ignore[attr-defined]
    return {node.target.id: " ".join(after.value.value.split())
            for node, after in zip(body, body[1:], strict=False)
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)}


def _markdown(text: str) -> str:
    """A docstring's reStructuredText roles and literals as Markdown code."""
    return re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text).replace("``", "`").replace("|", "\\|")


def _shown(name: str, value: object) -> str:
    """A default as the table shows it (a size in MiB/KiB when it is a whole number of
    them)."""
    if value is None:
        return "none"
    if (name.endswith(("_bytes", "_size")) and isinstance(value, int)
            and not isinstance(value, bool) and value >= 1024):
        for unit, size in (("MiB", MiB), ("KiB", 1024)):
            if value % size == 0:
                return f"`{value // size} {unit}`"
    return f"`{value}`"


def config_table(cls: type, prefix: str = "", nested: dict[str, type] | None = None) -> str:
    """A Markdown table of the fields of the config dataclass ``cls``: name, default (from
    the field), meaning (its docstring); a field in ``nested`` is a config dataclass whose
    fields are rows of their own (``client.add_timeout_s``). A field without a docstring
    is an error naming it."""
    rows = ["| setting | default | meaning |", "|---|---|---|"] if not prefix else []
    docs = field_docs(cls)
    for f in fields(cls):
        if nested and f.name in nested:
            rows.append(config_table(nested[f.name], f"{prefix}{f.name}.").rstrip("\n"))
            continue
        if f.name not in docs:
            raise ValueError(f"{cls.__name__}.{f.name} has no docstring: write one (a string "
                             f"literal right below the field), it is the README's meaning")
        default = f.default_factory() if callable(f.default_factory) else f.default
        rows.append(f"| `{prefix}{f.name}` | {_shown(f.name, default)} | "
                    f"{_markdown(docs[f.name])} |")
    return "\n".join(rows) + "\n"


def client_config_table() -> str:
    """The client's settings: :class:`~bk_spark.core.context.BookKeeperConfig` and its
    ``client`` (:class:`~bk_spark.io.bookie_client.ClientConfig`)."""
    from bk_spark.core.context import BookKeeperConfig
    from bk_spark.io.bookie_client import ClientConfig

    return config_table(BookKeeperConfig, nested={"client": ClientConfig})


def options_table(command: Any, only: Iterable[str] | None = None,
                  header: str = "option") -> str:
    """A Markdown table of the options of a Typer/click ``command``, as its ``--help``
    shows them: names, the default it shows (for options left to a config dataclass, the
    dataclass's: :func:`bookie_server.main.field_option`), the environment variable, the
    help. ``only``: these options (by first name), in this order."""
    params = [p for p in command.params
              if getattr(p, "param_type_name", None) == "option" and not p.hidden
              and p.name not in ("install_completion", "show_completion")]
    if only is not None:
        by_name = {p.opts[0]: p for p in params}
        params = [by_name[name] for name in only]
    rows = [f"| {header} | default | meaning |", "|---|---|---|"]
    for p in params:
        names = ", ".join(p.opts) + "".join(
            f"/{s}" for s in p.secondary_opts if not s.startswith("--no-no-"))
        if p.is_flag and p.secondary_opts:
            default = "on" if p.default else "off"
        elif p.is_flag:
            default = "off"
        elif isinstance(p.show_default, str):
            default = f"`{p.show_default}`"
        elif p.default is not None and p.show_default is not False:
            default = f"`{p.default}`"
        else:
            default = "none"
        if p.envvar:
            default += f" (env `{p.envvar}`)"
        text = _markdown(" ".join((p.help or "").split()))
        rows.append(f"| `{names}` | {default} | {text} |")
    return "\n".join(rows) + "\n"


def _bookie_command() -> Any:
    import typer

    from bk_spark.cli.bookie import bookie_app

    return typer.main.get_command(bookie_app)


def bookie_options_table() -> str:
    """Every option of ``bk bookie`` (defaults: :class:`bookie_server.config.BookieConfig`
    and :class:`~bookie_server.config.AutoRecoveryConfig`)."""
    return options_table(_bookie_command())


#: The AutoRecovery options of ``bk bookie``, in the README's AutoRecovery section.
AUTORECOVERY_OPTIONS = ("--autorecovery", "--rack", "--lost-bookie-recovery-delay",
                        "--audit-interval", "--open-ledger-grace", "--recovery-password")


def autorecovery_options_table() -> str:
    return options_table(_bookie_command(), AUTORECOVERY_OPTIONS,
                         header="option (`bk bookie`; the last four also `bk autorecovery`)")


#: Section name -> the function writing its Markdown.
SECTIONS: dict[str, Callable[[], str]] = {
    "spark-options": markdown_table,
    "client-config": client_config_table,
    "bookie-options": bookie_options_table,
    "autorecovery-options": autorecovery_options_table,
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
