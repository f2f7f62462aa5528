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


# ------------------------------------------------------------------ bk bookie / bk autorecovery
import pytest  # noqa: E402
import typer  # noqa: E402

from bk_spark.security import ClientSecurity  # noqa: E402
from bookie_server import main as bookie_main  # noqa: E402
from bookie_server.config import AutoRecoveryConfig, MiB  # noqa: E402


def _is_option(p: object) -> bool:  # typer carries its own copy of click's classes
    return getattr(p, "param_type_name", None) == "option"


def _command(name: str):  # typer's click command
    if name == "bookie":
        return typer.main.get_command(bookie_main.make_bookie_app())
    from bk_spark.cli.autorecovery import autorecovery_app

    return typer.main.get_command(autorecovery_app)


@pytest.mark.parametrize("name", ["bookie", "autorecovery"])
def test_every_valued_option_defaults_to_none_so_the_dataclass_decides(name):
    """No option of `bk bookie` or `bk autorecovery` restates a config default: an option
    not given is None, and the config dataclass fills it in."""
    restated = [f"{p.name}={p.default!r}" for p in _command(name).params
                if _is_option(p) and not p.is_flag and p.default is not None]
    assert restated == []


#: option -> (config dataclass, field, unit of the option)
_FIELDS = {
    "--port": (BookieConfig, "port", 1), "--host": (BookieConfig, "host", 1),
    "--max-entry-size": (BookieConfig, "max_entry_size", 1),
    "--journal-max-group-wait-ms": (BookieConfig, "journal_max_group_wait_ms", 1),
    "--journal-file-size-mb": (BookieConfig, "journal_file_size", MiB),
    "--entry-log-size-mb": (BookieConfig, "entry_log_size", MiB),
    "--gc-interval": (BookieConfig, "gc_interval_s", 1),
    "--checkpoint-interval": (BookieConfig, "checkpoint_interval_s", 1),
    "--disk-usage-threshold": (BookieConfig, "disk_usage_threshold", 1),
    "--disk-check-interval": (BookieConfig, "disk_check_interval_s", 1),
    "--tls-client-auth": (BookieConfig, "tls_client_auth", 1),
    "--rack": (BookieConfig, "rack", 1), "--on-lost-data": (BookieConfig, "on_lost_data", 1),
    "--lost-bookie-recovery-delay": (AutoRecoveryConfig, "lost_bookie_recovery_delay_s", 1),
    "--audit-interval": (AutoRecoveryConfig, "audit_interval_s", 1),
    "--open-ledger-grace": (AutoRecoveryConfig, "open_ledger_grace_s", 1),
}


def test_bk_bookie_help_shows_the_config_dataclass_defaults():
    shown = {opt: p.show_default for p in _command("bookie").params
             if _is_option(p) for opt in p.opts}
    for option, (cls, name, unit) in _FIELDS.items():
        default = cls.__dataclass_fields__[name].default
        assert shown[option] == str(default // unit if unit != 1 else default), option
    from typer.testing import CliRunner

    help_text = CliRunner().invoke(bookie_main.make_bookie_app(), ["--help"],
                                   env={"COLUMNS": "200"}).output
    assert "[default: (3181)]" in help_text and "[default: (repair)]" in help_text


def _bookie_config(monkeypatch, tmp_path, *args: str) -> tuple[BookieConfig, object]:
    """The config (and AutoRecovery config) `bk bookie` starts a bookie with for ``args``
    (the bookie itself is not started: run_bookie is where the command hands over)."""
    seen = {}
    monkeypatch.setattr(bookie_main, "run_bookie", lambda cfg, **kw: seen.update(cfg=cfg, **kw))
    app = bookie_main.make_bookie_app(start_autorecovery=lambda server, config: lambda: None)
    app(args=["--data-dir", str(tmp_path), "--port", "0", *args], standalone_mode=False)
    return seen["cfg"], seen["autorecovery"]


def test_a_bookie_given_no_options_runs_with_the_dataclass_defaults(monkeypatch, tmp_path):
    cfg, recovery = _bookie_config(monkeypatch, tmp_path, "-m", "zk://127.0.0.1:1/x")
    assert cfg == BookieConfig(data_dir=tmp_path, port=0, metadata_service_uri="zk://127.0.0.1:1/x",
                               security=ClientSecurity.from_env())
    assert recovery == AutoRecoveryConfig()


def test_options_given_set_their_fields(monkeypatch, tmp_path):
    cfg, recovery = _bookie_config(
        monkeypatch, tmp_path, "--no-register", "--journal-file-size-mb", "128",
        "--gc-interval", "5", "--rack", "/r/a", "--on-lost-data", "refuse")
    assert (cfg.journal_file_size, cfg.gc_interval_s, cfg.rack, cfg.on_lost_data) == (
        128 * MiB, 5.0, "/r/a", "refuse")
    assert cfg.metadata_service_uri is None and recovery is None  # no ZooKeeper, no recovery
    cfg, recovery = _bookie_config(
        monkeypatch, tmp_path, "-m", "zk://127.0.0.1:1/x", "--lost-bookie-recovery-delay",
        "0", "--recovery-password", "p")
    assert recovery == AutoRecoveryConfig(lost_bookie_recovery_delay_s=0.0, passwords=(b"p",))


# ------------------------------------------------------------------ credentials as objects
_ZK_ENV = ("BK_ZK_AUTH_FILE", "BK_ZK_AUTH", "BK_TLS_CA", "BK_TLS_CERT", "BK_TLS_KEY")


def test_bk_bookie_zk_auth_file_reaches_the_bookie_as_an_object(monkeypatch, tmp_path):
    """`bk bookie --zk-auth-file F`: the credentials are read once and carried by the
    bookie's config (its ZooKeeper sessions and in-process clients take them from there);
    the process environment is left as it was."""
    for name in _ZK_ENV:
        monkeypatch.delenv(name, raising=False)
    creds = tmp_path / "zk-auth"
    creds.write_text("bookie:s3cret\n")
    cfg, _ = _bookie_config(monkeypatch, tmp_path, "--no-register", "--zk-auth-file",
                            str(creds))
    assert cfg.security is not None and cfg.zk_security.digest == "bookie:s3cret"
    assert "s3cret" not in repr(cfg)
    assert [n for n in _ZK_ENV if n in __import__("os").environ] == []


def test_bk_root_security_options_reach_clients_as_an_object(monkeypatch, tmp_path):
    """`bk --zk-auth-file F --tls-ca CA <command>`: every client of the command gets them
    (cli_security), and the environment is left as it was, during and after the command."""
    import os

    from bk_spark.cli import main as bk_main
    from bk_spark.cli.common import SecurityOptions, cli_security
    from bk_spark.errors import InvalidConfigError
    from bk_spark.io import zk as zk_module

    for name in _ZK_ENV:
        monkeypatch.delenv(name, raising=False)
    creds, ca = tmp_path / "zk-auth", tmp_path / "ca.pem"
    creds.write_text("u:p")
    ca.write_text("not read here")
    sec = SecurityOptions(tls_ca=ca, zk_auth_file=creds).security()
    assert (sec.tls_ca, sec.zk.digest) == (str(ca), "u:p")
    seen = []

    def factory(msu, security=None, **kw):  # the kazoo client factory: what it is handed
        seen.append((security, dict(os.environ)))
        raise InvalidConfigError("recorded")

    monkeypatch.setattr(zk_module, "connect_zk", factory)
    assert bk_main(["--zk-auth-file", str(creds), "--tls-ca", str(ca), "zk-acl", "-m",
                    "zk://127.0.0.1:1/x"]) == 1
    (security, env), = seen
    assert security.digest == "u:p"
    assert [n for n in _ZK_ENV if n in env or n in os.environ] == []
    assert cli_security().zk.digest is None  # the options ended with the command


#: The `bk` options that keep a default of their own, not a config dataclass's: each is the
#: command's own choice (a check's size, a UI port, the empty ledger password, ...). Any
#: other valued option defaults to None and leaves its setting to the dataclass (or
#: function) below the CLI, whose default --help shows.
_OWN_DEFAULTS = {
    "bk simpletest --ensemble", "bk simpletest --write-quorum", "bk simpletest --ack-quorum",
    "bk simpletest --entries", "bk simpletest --size", "bk bookie-sanity --entries",
    "bk bookie-sanity --timeout", "bk recover --open-ledger-grace", "bk ui --port",
    "bk ui --host", "bk sandbox --data-dir", "bk sandbox start --data-dir",
    "bk sandbox status --data-dir", "bk sandbox stop --data-dir",
    "bk bookie decommission --timeout", "bk ledger read --from", "bk ledger read --password",
    "bk ledger recover --password", "bk ledger delete --password", "bk log show --password",
    "bk log append --size", "bk log append --password", "bk log read --password",
    "bk log tail --from", "bk log tail --password", "bk log truncate --password",
    "bk log delete --password",
}


def test_bk_options_with_a_default_of_their_own_are_only_the_listed_ones():
    from bk_spark.cli import app

    found = set()

    def walk(command, path: str) -> None:
        for p in command.params:
            if _is_option(p) and not p.is_flag and p.default is not None and not p.hidden:
                found.add(f"{path} {p.opts[0]}")
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, f"{path} {name}")

    walk(typer.main.get_command(app), "bk")
    assert sorted(found - _OWN_DEFAULTS) == []


# ------------------------------------------------------------------ ledger quorums
QUORUM_NAMES = {"ensemble_size", "write_quorum_size", "ack_quorum_size",
                "ensemble", "write_quorum", "ack_quorum"}


def _literal_quorum_defaults() -> list[str]:
    """Every parameter or field named for a quorum whose default is a number written out."""
    found = []
    for top in ("bk_spark", "bookie_server"):
        for path in (ROOT / top).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                pairs: list[tuple[str, ast.expr | None]] = []
                if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                    pairs.append((node.target.id, node.value))
                elif isinstance(node, ast.arguments):
                    pos = node.posonlyargs + node.args
                    pairs += zip([a.arg for a in pos[len(pos) - len(node.defaults):]],
                                 node.defaults, strict=True)
                    pairs += [(a.arg, d) for a, d in zip(node.kwonlyargs, node.kw_defaults,
                                                          strict=True)]
                found += [f"{path.relative_to(ROOT)}:{v.lineno}: {name} = {v.value}"
                          for name, v in pairs if name in QUORUM_NAMES
                          and isinstance(v, ast.Constant) and isinstance(v.value, int)]
    return found


def test_the_default_quorums_3_2_2_have_one_home():
    """create_ledger, LogWriterConfig, write_closed_ledger and bk simpletest take E/Qw/Qa
    from DEFAULT_QUORUMS (protocol/ledger_metadata.py) instead of restating 3/2/2."""
    import inspect

    assert _literal_quorum_defaults() == []
    from bk_spark.core.client import BookKeeper
    from bk_spark.log.commit import write_closed_ledger
    from bk_spark.log.writer import LogWriterConfig
    from bk_spark.protocol.ledger_metadata import DEFAULT_QUORUMS

    c = LogWriterConfig()
    assert (c.ensemble_size, c.write_quorum_size, c.ack_quorum_size) == DEFAULT_QUORUMS
    for fn in (BookKeeper.create_ledger, write_closed_ledger):
        p = inspect.signature(fn).parameters
        assert tuple(p[n].default for n in DEFAULT_QUORUMS._fields) == DEFAULT_QUORUMS
