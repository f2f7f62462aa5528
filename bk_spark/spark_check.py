"""Can Spark's Python workers find the ``bookkeeper`` data source? (``bk spark-check``)

Spark does not run a Python data source in the driver's interpreter but in Python *worker*
processes it starts itself, and finds the source there:

1. **Which Python.** The JVM looks sources up in a worker running ``PYSPARK_PYTHON``,
   else ``PYSPARK_DRIVER_PYTHON``, else ``python3`` found on its ``PATH``, all read from
   the JVM's environment (``pyspark/sql/worker/lookup_data_sources.py`` is started by
   ``PythonUtils.createPythonFunction``). A driver in a virtualenv with ``PYSPARK_PYTHON``
   unset therefore runs the lookup on whatever ``python3`` comes first on the ``PATH``,
   often not the virtualenv's; ``spark.pyspark.python`` alone does not change it.
2. **Its path.** Spark puts its own ``python/lib/pyspark.zip`` and py4j zip before the
   inherited ``PYTHONPATH``; workers run in the driver's current directory in local mode,
   elsewhere on a cluster.
3. **Discovery.** On the first data source lookup a worker runs
   ``pyspark/sql/worker/lookup_data_sources.py``: every top-level module that
   ``pkgutil.iter_modules()`` lists with a name starting ``pyspark_`` is imported and its
   ``DefaultSource`` registered under ``DefaultSource.name()``. ``iter_modules`` only lists
   modules that are files in a ``sys.path`` directory (or zip): a module served by an
   import hook (a PEP 660 editable install's meta path finder) is importable but not
   listed, and Spark answers ``DATA_SOURCE_NOT_FOUND``.

:func:`worker_python` decides step 1 as Spark does; :func:`run_checks` runs a probe in that
Python, from an empty directory, with Spark's path (step 2), and checks step 3. Every failed
check carries the fix.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

#: The top-level module Spark's lookup must list (pyproject.toml ``py-modules``).
SOURCE_MODULE = "pyspark_bookkeeper"
#: What ``DefaultSource.name()`` must answer: ``format("bookkeeper")``.
SOURCE_NAME = "bookkeeper"

_MARK = "BK-SPARK-CHECK "
# Runs in the worker Python: imports, then what Spark's lookup_data_sources.py sees.
_PROBE = r"""
import importlib, json, pkgutil, sys
out = {"executable": sys.executable, "version": list(sys.version_info[:3])}
def attempt(name):
    try:
        m = importlib.import_module(name)
        return {"ok": True, "file": getattr(m, "__file__", None)}
    except BaseException as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
for name in ("pyspark", "bk_spark", "pyspark_bookkeeper"):
    out[name] = attempt(name)
out["listed"] = sorted(m.name for m in pkgutil.iter_modules() if m.name.startswith("pyspark_"))
out["source_name"] = None
try:
    from pyspark.sql.datasource import DataSource
    ds = getattr(sys.modules.get("pyspark_bookkeeper"), "DefaultSource", None)
    if isinstance(ds, type) and issubclass(ds, DataSource):
        out["source_name"] = ds.name()
except BaseException:
    pass
print(sys.argv[1] + json.dumps(out))
"""


@dataclass(frozen=True)
class WorkerPython:
    """The Python Spark's workers will run: as configured, where it came from, and the
    executable it resolves to on the ``PATH`` (None: not found)."""

    command: str
    source: str
    path: str | None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Check:
    """One step of finding the source: passed or not, what was seen, how to fix it."""

    name: str
    ok: bool
    detail: str
    fix: str | None = None


@dataclass(frozen=True)
class Report:
    python: WorkerPython
    checks: tuple[Check, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def fixes(self) -> list[tuple[list[str], str]]:
        """Each distinct fix once, with the failed checks it repairs, in check order."""
        out: dict[str, list[str]] = {}
        for c in self.checks:
            if not c.ok:
                out.setdefault(c.fix or "", []).append(c.name)
        return [(names, fix) for fix, names in out.items()]

    def to_json(self) -> dict[str, object]:
        return {"ok": self.ok,
                "python": {"command": self.python.command, "source": self.python.source,
                           "path": self.python.path, "notes": list(self.python.notes)},
                "checks": [{"check": c.name, "ok": c.ok, "detail": c.detail, "fix": c.fix}
                           for c in self.checks]}


def spark_home(env: Mapping[str, str] = os.environ) -> Path | None:
    """``SPARK_HOME``, else the installed pyspark package (pip's pyspark is a Spark home)."""
    if env.get("SPARK_HOME"):
        return Path(env["SPARK_HOME"])
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _spark_defaults_python(env: Mapping[str, str]) -> tuple[str, Path] | None:
    """``spark.pyspark.python`` from ``spark-defaults.conf`` (``SPARK_CONF_DIR`` or
    ``SPARK_HOME/conf``), with the file it came from."""
    home = spark_home(env)
    conf_dir = Path(env["SPARK_CONF_DIR"]) if env.get("SPARK_CONF_DIR") else \
        (home / "conf" if home is not None else None)
    if conf_dir is None or not (conf_dir / "spark-defaults.conf").is_file():
        return None
    path = conf_dir / "spark-defaults.conf"
    for line in path.read_text(errors="replace").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.replace("=", " ", 1).partition(" ")
        if key == "spark.pyspark.python" and value.strip():
            return value.strip(), path
    return None


def worker_python(explicit: str | None = None, env: Mapping[str, str] = os.environ
                  ) -> WorkerPython:
    """The Python Spark's workers will use to find the source (module docstring, step 1).

    ``explicit`` (``bk spark-check --python``) wins; then what the JVM's own lookup reads
    from its environment: ``PYSPARK_PYTHON``, ``PYSPARK_DRIVER_PYTHON``, ``python3`` on the
    ``PATH``. ``spark.pyspark.python`` (``spark-defaults.conf``) is only noted: measured
    with ``spark-submit --conf spark.pyspark.python=P``, sources registered by the job run
    on ``P`` but the lookup of ``format("bookkeeper")`` still runs the environment's choice.
    """
    notes: list[str] = []
    if explicit:
        command, source = explicit, "--python"
    elif env.get("PYSPARK_PYTHON"):
        command, source = env["PYSPARK_PYTHON"], "PYSPARK_PYTHON"
    elif env.get("PYSPARK_DRIVER_PYTHON"):
        command, source = env["PYSPARK_DRIVER_PYTHON"], "PYSPARK_DRIVER_PYTHON"
    else:
        command, source = "python3", "default (PYSPARK_PYTHON is not set)"
    conf = _spark_defaults_python(env)
    if conf is not None and conf[0] != command and source != "--python":
        notes.append(f"spark.pyspark.python in {conf[1]} is {conf[0]}: spark-submit runs "
                     f"UDFs and registered sources there, but Spark's lookup of "
                     f"format('bookkeeper') runs {command}; export PYSPARK_PYTHON={conf[0]}")
    found = shutil.which(command, path=env.get("PATH"))
    path = os.path.abspath(found) if found is not None else None
    if path is not None and source != "--python" and \
            os.path.realpath(path) != os.path.realpath(sys.executable):
        notes.append(f"this is not the Python running bk ({sys.executable})")
    return WorkerPython(command, source, path, tuple(notes))


def _probe_env(env: Mapping[str, str]) -> dict[str, str]:
    """The worker's environment as Spark builds it: Spark's zips first on PYTHONPATH."""
    out = dict(env)
    home = spark_home(env)
    paths = []
    if home is not None:
        lib = home / "python" / "lib"
        paths = [str(p) for p in sorted(lib.glob("pyspark*.zip")) + sorted(lib.glob("py4j*.zip"))]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    if paths:
        out["PYTHONPATH"] = os.pathsep.join(paths)
    return out


def _probe(python: str, env: Mapping[str, str], timeout_s: float
           ) -> tuple[dict | None, str]:
    """Run the probe in ``python`` from an empty directory; ``(answer, error)``."""
    with tempfile.TemporaryDirectory(prefix="bk-spark-check-") as cwd:
        try:
            r = subprocess.run([python, "-c", _PROBE, _MARK], cwd=cwd, env=_probe_env(env),
                               capture_output=True, text=True, timeout=timeout_s)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return None, f"{type(exc).__name__}: {exc}"
    for line in reversed(r.stdout.splitlines()):
        if line.startswith(_MARK):
            return json.loads(line[len(_MARK):]), ""
    tail = (r.stderr.strip().splitlines() or [f"exit code {r.returncode}"])[-1]
    return None, tail


def run_checks(python: WorkerPython, env: Mapping[str, str] = os.environ,
               timeout_s: float = 120.0) -> Report:
    """Probe ``python`` as Spark would run it (module docstring, steps 2 and 3)."""
    use_me = f"export PYSPARK_PYTHON={sys.executable}"
    here = Path.cwd() / f"{SOURCE_MODULE}.py"
    only_here = (f" (local-mode workers start in the current directory, {here.parent}, "
                 f"which holds {here.name}: there format('bookkeeper') may work by "
                 f"accident, anywhere else it fails)") if here.is_file() else ""
    checks: list[Check] = []
    if python.path is None:
        checks.append(Check(
            "worker Python", False, f"{python.command!r} ({python.source}) is not an "
            f"executable on the PATH",
            f"point PYSPARK_PYTHON at a Python with bk-spark installed, e.g. `{use_me}`"))
        return Report(python, tuple(checks))
    answer, error = _probe(python.path, env, timeout_s)
    if answer is None:
        checks.append(Check("worker Python", False, f"{python.path} did not run: {error}",
                            f"point PYSPARK_PYTHON at a working Python, e.g. `{use_me}`"))
        return Report(python, tuple(checks))
    version = ".".join(map(str, answer["version"]))
    checks.append(Check("worker Python", True, f"{answer['executable']} (Python {version})"))

    mine = sys.version_info[:2]
    theirs = tuple(answer["version"][:2])
    checks.append(Check(
        "same Python version as bk's", theirs == mine,
        f"workers {theirs[0]}.{theirs[1]}, this Python {mine[0]}.{mine[1]}",
        None if theirs == mine else
        f"Spark refuses workers on another minor version (PYTHON_VERSION_MISMATCH): "
        f"`{use_me}`"))

    install_fix = (f"install bk-spark into that Python (`{python.path} -m pip install "
                   f"<bk-spark wheel or project>`) or use one that has it: `{use_me}`")
    for name in ("pyspark", "bk_spark", SOURCE_MODULE):
        got = answer[name]
        checks.append(Check(
            f"imports {name}", got["ok"], got.get("file") or got.get("error") or "",
            None if got["ok"] else install_fix + only_here))
    imported = answer[SOURCE_MODULE]["ok"]
    listed = SOURCE_MODULE in answer["listed"]
    checks.append(Check(
        "visible to Spark's lookup (pkgutil.iter_modules)", listed,
        f"pyspark_* modules listed: {', '.join(answer['listed']) or 'none'}",
        None if listed else
        (f"{SOURCE_MODULE} is importable but not a file on sys.path: it was installed by "
         f"a PEP 660 editable install through an import hook (an older bk-spark's "
         f"pyproject), which Spark's lookup cannot see. Reinstall: `pip install .`, or "
         f"`pip install -e .` from this bk-spark, or `pip install -e . --config-settings "
         f"editable_mode=compat`" if imported else install_fix + only_here)))
    name = answer["source_name"]
    checks.append(Check(
        f"registers format({SOURCE_NAME!r})", name == SOURCE_NAME,
        f"DefaultSource.name() = {name!r}",
        None if name == SOURCE_NAME else
        f"{SOURCE_MODULE} has no bookkeeper DefaultSource: reinstall bk-spark" if imported
        else install_fix + only_here))
    return Report(python, tuple(checks))
