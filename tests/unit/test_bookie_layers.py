"""The bookie server sits below the client: no module of ``bookie_server`` (its entry point
included) imports the ``bk`` CLI or AutoRecovery; ``bk bookie`` reaches AutoRecovery only
through the hook the CLI passes in."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import bookie_server

ABOVE = ("bk_spark.cli", "bk_spark.autorecovery", "bk_spark.datasource", "bk_spark.log",
         "bk_spark.core")


def test_no_bookie_server_module_imports_the_cli_or_autorecovery():
    modules = sorted(m.name for m in pkgutil.iter_modules(bookie_server.__path__,
                                                          "bookie_server."))
    assert "bookie_server.__main__" in modules and "bookie_server.main" in modules
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        f"print(sorted(n for n in sys.modules if n.startswith({ABOVE!r})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
