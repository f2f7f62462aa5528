"""Invalid command lines get one clear error line and a non-zero exit code, never a
traceback: ``python -m bk_spark.cli`` fuzzed with random arguments for ``bookie``,
``bookies``, ``sandbox``, ``ledger`` and ``log``.

Every generated command line carries at least one invalid part (a bad value, an unknown
option, a missing required option, a wrong type) chosen so that it fails before anything
starts: the fuzzer never launches a bookie or a sandbox. As a second safety net the
metadata service URI in the environment is malformed, so nothing reaches a real cluster,
and each process runs in its own session in a scratch directory.
"""

from __future__ import annotations

import os
import re
import signal
import string
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
ERROR_LINE = re.compile(r"^\s*(error|Error):", re.MULTILINE)
CLI_FUZZ = settings(max_examples=int(os.environ.get("BK_CLI_FUZZ_EXAMPLES", "8")),
                    deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])

SAFE = string.ascii_letters + string.digits + "_./=@%:"
words = st.text(alphabet=SAFE, min_size=1, max_size=12)  # never starts with '-'
not_a_number = words.filter(lambda w: not re.fullmatch(r"[0-9]+", w))
unknown_option = st.text(alphabet=string.ascii_lowercase, min_size=2, max_size=10).map(
    lambda s: f"--zz-{s}")
numbers = st.one_of(st.integers(-10**20, 10**20).map(str), st.floats().map(str), words)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Path(tmp_path_factory.mktemp("cli-fuzz"))


def run_cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BK_METADATA_SERVICE_URI": "fuzz://nowhere",
           "BK_SANDBOX_DIR": str(cwd / "sandbox"), "COLUMNS": "200"}
    env.pop("BK_DEBUG", None)
    proc = subprocess.Popen([sys.executable, "-m", "bk_spark.cli", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # its own session: only what it started
        proc.communicate()
        raise AssertionError(f"bk {' '.join(args)} was accepted and kept running") from None
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def assert_one_clear_error(args: list[str], cwd: Path) -> None:
    r = run_cli(args, cwd)
    shown = f"bk {' '.join(args)}\nexit {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}"
    assert r.returncode != 0, shown
    assert "Traceback" not in r.stdout + r.stderr, shown
    assert len(ERROR_LINE.findall(r.stderr)) == 1, shown


def _chunks(draw, chunks: list[list[str]]) -> list[str]:  # type: ignore[no-untyped-def]
    order = draw(st.permutations(chunks))
    return [token for chunk in order for token in chunk]


@st.composite
def bookie_args(draw, data_dir: str) -> list[str]:  # type: ignore[no-untyped-def]
    """``bookie`` with noise options and one poison the config or the parser refuses."""
    poison = draw(st.one_of(
        st.tuples(st.just("--port"), st.one_of(st.integers(65536, 10**12).map(str),
                                               st.integers(-10**6, -1).map(str),
                                               not_a_number)),
        st.tuples(st.just("--max-entry-size"), st.integers(-10**6, 0).map(str)),
        st.tuples(st.just("--journal-file-size-mb"), st.integers(-5, 0).map(str)),
        st.tuples(st.just("--entry-log-size-mb"), st.integers(-5, 0).map(str)),
        st.tuples(st.just("--disk-usage-threshold"),
                  st.one_of(st.floats(max_value=0.0, allow_nan=False),
                            st.floats(min_value=1.001, allow_nan=False),
                            st.just(float("nan"))).map(str)),
        st.tuples(st.just("--tls-cert"), st.just("/nonexistent/cert.pem")),
        st.tuples(st.just("--gc-interval"), not_a_number),
        unknown_option.map(lambda o: (o,)),
        st.just(("--data-dir", "/dev/null/not-a-dir")),
        st.just(()),  # with no --data-dir at all
    ))
    chunks = [list(poison)]
    if poison != () and "--data-dir" not in poison:
        chunks.append(["--data-dir", data_dir])
    noise = draw(st.lists(st.sampled_from(["--metrics-port", "--journal-max-group-wait-ms",
                                           "--checkpoint-interval", "--disk-check-interval",
                                           "--max-disk-bytes"]), max_size=3, unique=True))
    chunks += [[opt, draw(numbers)] for opt in noise]
    if draw(st.booleans()):
        chunks.append(["--no-register"])
    return ["bookie", *_chunks(draw, chunks)]


@st.composite
def bookies_args(draw) -> list[str]:  # type: ignore[no-untyped-def]
    poison = draw(st.one_of(
        unknown_option.map(lambda o: [o]),
        words.filter(lambda w: not w.startswith("zk://")).map(lambda w: ["-m", w]),
        words.map(lambda w: [w]),  # an unexpected argument
    ))
    chunks = [poison] + ([["--json"]] if draw(st.booleans()) else [])
    return ["bookies", *_chunks(draw, chunks)]


@st.composite
def sandbox_args(draw, data_dir: str) -> list[str]:  # type: ignore[no-untyped-def]
    """``sandbox`` (never ``start``: a detached sandbox would outlive the test) refusing a
    negative bookie count, a non-numeric port, an unknown option or subcommand, or
    ``status`` of a directory where no sandbox runs."""
    form = draw(st.sampled_from(["run", "status", "subcommand"]))
    if form == "status":
        extra = draw(st.lists(st.just(["--json"]), max_size=1))
        return ["sandbox", "status", "--data-dir", data_dir, *[t for c in extra for t in c]]
    if form == "subcommand":
        name = draw(words.filter(lambda w: w not in ("start", "stop", "status")))
        return ["sandbox", name]
    poison = draw(st.one_of(
        st.integers(-10**6, -1).map(lambda n: ["--bookies", str(n)]),
        not_a_number.map(lambda w: ["--zk-port", w]),
        not_a_number.map(lambda w: ["--bookie-port", w]),
        unknown_option.map(lambda o: [o]),
    ))
    return ["sandbox", *_chunks(draw, [poison, ["--data-dir", data_dir]])]


SHELL = {
    "ledger": ["list", "show", "read", "recover", "delete"],
    "log": ["create", "list", "show", "append", "read", "tail", "truncate", "delete"],
}
SHELL_OPTIONS = ["--from", "--to", "--limit", "--last", "--count", "--size", "--password",
                 "--timestamp-ms", "--before", "--roll-max-entries", "--timeout"]


@st.composite
def shell_args(draw, group: str) -> list[str]:  # type: ignore[no-untyped-def]
    """``ledger``/``log`` subcommands with a bad id, value or option (and a malformed
    metadata service URI in the environment)."""
    sub = draw(st.sampled_from(SHELL[group] + ["no-such-command"]))
    poison = draw(st.one_of(
        not_a_number.map(lambda w: [w]),  # a non-numeric ledger id / odd name
        st.integers(-10**6, -1).map(lambda n: ["--", str(n)]),  # a negative id
        st.sampled_from(["--from", "--to", "--limit", "--count"]).flatmap(
            lambda o: st.integers(-10**6, -1).map(lambda n: [o, str(n)])),
        unknown_option.map(lambda o: [o]),
    ))
    noise = draw(st.lists(st.sampled_from(SHELL_OPTIONS), max_size=2, unique=True))
    chunks = [poison] + [[opt, draw(numbers)] for opt in noise]
    return [group, sub, *_chunks(draw, chunks)]


@pytest.mark.parametrize("args", [
    ["bookie"],
    ["bookie", "--data-dir", "x", "--port", "99999"],
    ["bookie", "--data-dir", "x", "--no-register", "--disk-usage-threshold", "1.5"],
    ["bookies", "-m", "http://example.org"],
    ["sandbox", "--bookies", "-1"],
    ["ledger", "read", "not-a-number"],
    ["log", "truncate", "events", "--before", "not-a-position"],
])
def test_known_bad_command_lines_get_one_error_line(args: list[str], scratch: Path) -> None:
    assert_one_clear_error(args, scratch)


@CLI_FUZZ
@given(data=st.data())
def test_random_bad_bookie_command_lines_are_refused_cleanly(data, scratch: Path) -> None:  # type: ignore[no-untyped-def]
    assert_one_clear_error(data.draw(bookie_args(str(scratch / "bookie-data"))), scratch)


@CLI_FUZZ
@given(data=st.data())
def test_random_bad_bookies_and_sandbox_command_lines_are_refused_cleanly(  # type: ignore[no-untyped-def]
        data, scratch: Path) -> None:
    empty = scratch / "no-sandbox-here"
    args = data.draw(st.one_of(bookies_args(), sandbox_args(str(empty))))
    assert_one_clear_error(args, scratch)


@CLI_FUZZ
@given(data=st.data())
def test_random_bad_ledger_and_log_command_lines_are_refused_cleanly(  # type: ignore[no-untyped-def]
        data, scratch: Path) -> None:
    args = data.draw(st.one_of(shell_args("ledger"), shell_args("log")))
    assert_one_clear_error(args, scratch)
