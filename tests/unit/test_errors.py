"""Every public error lives in ``bk_spark/errors.py`` under ``BKError``, and what is raised
is typed: a timeout is a ``BKTimeoutError``, a corrupt copy a ``CorruptedEntryError``, and
no code raises the bare root (read from the source with ``ast``)."""

from __future__ import annotations

import ast
from pathlib import Path

from bk_spark import errors

ROOT = Path(__file__).resolve().parents[2]


def _bare_raises() -> list[str]:
    found = []
    for top in ("bk_spark", "bookie_server"):
        for path in (ROOT / top).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)
                        and isinstance(node.exc.func, ast.Name) and node.exc.func.id == "BKError"):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_no_code_raises_the_bare_bkerror():
    assert _bare_raises() == []


def test_errors_named_by_the_client_live_in_errors_py():
    for name in ("RecoveryError", "MetadataServiceUnavailableError", "BKTimeoutError",
                 "CorruptedEntryError", "DigestMismatchError", "MetadataStoreError",
                 "BookieStorageError", "CheckFailedError"):
        cls = getattr(errors, name)
        assert issubclass(cls, errors.BKError) and cls.__module__ == "bk_spark.errors"


def test_the_new_types_travel_as_before():
    """A bookie answers an error without a wire code of its own as INTERNAL, as it did when
    these were raised as the bare root."""
    for cls in (errors.BKTimeoutError, errors.CorruptedEntryError, errors.BookieStorageError,
                errors.MetadataStoreError, errors.CheckFailedError, errors.RecoveryError):
        assert cls.code == errors.BKError.code
