"""Installing bk-spark where Spark's Python workers find it, and `bk spark-check`.

Real installs into throwaway virtualenvs: the project is copied, built by setuptools' own
PEP 517 hooks (what pip runs for ``pip install .`` and ``pip install -e .``) and installed
by pip into a venv whose other dependencies come from this venv's site-packages (one path
line in a ``.pth`` file; this venv's own ``.pth`` files, which put the project on
``sys.path``, are not processed there). Discovery is checked with Spark's own lookup code
(``pyspark/sql/worker/lookup_data_sources.py``), run in that venv from an empty directory.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SITE = sysconfig.get_paths()["purelib"]

# Spark's discovery, as a worker runs it: the names it would register.
LOOKUP = """
import io
from pyspark.serializers import UTF8Deserializer, read_int
from pyspark.sql.worker import lookup_data_sources
buf = io.BytesIO()
lookup_data_sources._main(None, buf)
buf.seek(0)
names = []
for _ in range(read_int(buf)):
    names.append(UTF8Deserializer().loads(buf))
    buf.read(read_int(buf))  # the pickled DefaultSource
print(names)
"""


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without what would find the project by accident (the Spark tests'
    conftest puts the project on PYTHONPATH, PYSPARK_PYTHON is set for the test session)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env.update(extra)
    return env


def make_venv(path: Path, with_deps: bool) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    python = path / "bin" / "python"
    if with_deps:
        site = subprocess.run([str(python), "-c", "import sysconfig; "
                               "print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
        Path(site, "bk_spark_test_deps.pth").write_text(SITE + "\n")
    return python


def build(tmp: Path, hook: str, pyproject_edit: tuple[str, str] | None = None) -> Path:
    """A copy of the project built by setuptools' PEP 517 ``hook``; the wheel's path."""
    proj = tmp / "project"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for d in ("bk_spark", "bookie_server"):
        shutil.copytree(ROOT / d, proj / d, ignore=ignore)
    for f in ("pyspark_bookkeeper.py", "README.md"):
        shutil.copy(ROOT / f, proj / f)
    text = (ROOT / "pyproject.toml").read_text()
    if pyproject_edit is not None:
        assert pyproject_edit[0] in text
        text = text.replace(*pyproject_edit)
    (proj / "pyproject.toml").write_text(text)
    out = subprocess.run(
        [sys.executable, "-c", f"from setuptools import build_meta; "
                               f"print(build_meta.{hook}({str(tmp / 'dist')!r}))"],
        cwd=proj, capture_output=True, text=True, env=clean_env())
    assert out.returncode == 0, out.stderr[-2000:]
    return tmp / "dist" / out.stdout.strip().splitlines()[-1]


def pip_install(python: Path, wheel: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                        "-q", "--no-deps", "--no-index", str(wheel)],
                       capture_output=True, text=True, env=clean_env())
    assert r.returncode == 0, r.stderr[-2000:]


def spark_lookup(python: Path, cwd: Path) -> list[str]:
    cwd.mkdir(exist_ok=True)
    r = subprocess.run([str(python), "-c", LOOKUP], cwd=cwd, capture_output=True, text=True,
                       env=clean_env())
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1].replace("'", '"'))


def spark_check(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    cwd.mkdir(exist_ok=True)
    return subprocess.run([sys.executable, "-m", "bk_spark.cli", "spark-check", *args],
                          cwd=cwd, capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.parametrize("hook", ["build_wheel", "build_editable"])
def test_wheel_and_default_editable_installs_are_found_by_sparks_lookup(
        tmp_path: Path, hook: str) -> None:
    """`pip install .` and a plain `pip install -e .` (PEP 660, no compat mode) both leave
    pyspark_bookkeeper where pkgutil.iter_modules, hence Spark, lists it."""
    python = make_venv(tmp_path / "venv", with_deps=True)
    pip_install(python, build(tmp_path, hook))
    assert spark_lookup(python, tmp_path / "elsewhere") == ["bookkeeper"]
    r = spark_check("--python", str(python), "--json", cwd=tmp_path / "elsewhere",
                    env=clean_env())
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout)
    assert report["ok"] and report["python"]["source"] == "--python"


def test_spark_check_explains_a_module_hidden_by_an_editable_import_hook(tmp_path: Path
                                                                          ) -> None:
    """An editable install served by an import hook (setuptools' flat-layout default before
    the fix) is importable yet invisible to Spark: the check says so, and how to fix it."""
    python = make_venv(tmp_path / "venv", with_deps=True)
    pip_install(python, build(tmp_path, "build_editable",
                              pyproject_edit=('package-dir = { "" = "." }\n', "")))
    assert spark_lookup(python, tmp_path / "elsewhere") == []
    r = spark_check("--python", str(python), cwd=tmp_path / "elsewhere", env=clean_env())
    assert r.returncode == 1
    assert "ok   imports pyspark_bookkeeper" in r.stdout
    assert "FAIL visible to Spark's lookup (pkgutil.iter_modules)" in r.stdout
    assert "PEP 660 editable install" in r.stderr and "pip install ." in r.stderr


def test_spark_check_passes_when_pyspark_python_has_bk_spark(tmp_path: Path) -> None:
    r = spark_check("--json", cwd=tmp_path / "elsewhere",
                    env=clean_env(PYSPARK_PYTHON=sys.executable))
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout)
    assert report["python"] == {"command": sys.executable, "source": "PYSPARK_PYTHON",
                                "path": sys.executable, "notes": []}
    assert [c["check"] for c in report["checks"] if c["ok"]] == [
        "worker Python", "same Python version as bk's", "imports pyspark", "imports bk_spark",
        "imports pyspark_bookkeeper", "visible to Spark's lookup (pkgutil.iter_modules)",
        "registers format('bookkeeper')"]


def test_spark_check_fails_with_the_fix_when_workers_default_to_another_python(
        tmp_path: Path) -> None:
    """PYSPARK_PYTHON unset: the workers run the first python3 on the PATH, here a bare
    virtualenv without bk-spark; the check names it, fails, and says what to export."""
    bare = make_venv(tmp_path / "bare", with_deps=False)
    env = clean_env(PATH=f"{bare.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    r = spark_check(cwd=tmp_path / "elsewhere", env=env)
    assert r.returncode == 1
    assert f"workers run {bare.parent / 'python3'} (from default (PYSPARK_PYTHON is not " \
           f"set))" in r.stdout
    assert "FAIL imports bk_spark: ModuleNotFoundError" in r.stdout
    assert f"export PYSPARK_PYTHON={sys.executable}" in r.stderr
    assert "Traceback" not in r.stderr
