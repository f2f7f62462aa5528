"""The data source's options are defined once, in ``OPTIONS`` (bk_spark/datasource/options.py):
the README's option table, the module's docs, the check of names with its "did you mean"
and the scope checks all come from that table, and this file fails when one of them
drifts from it."""

from __future__ import annotations

import pytest

from bk_spark import readme
from bk_spark.datasource import options as opts
from bk_spark.datasource.options import (
    OPTIONS,
    SCOPES,
    ReadOptions,
    WriteOptions,
    markdown_table,
)
from bk_spark.errors import InvalidConfigError

URI = "zk://127.0.0.1:2181/ledgers"


def test_the_readme_option_table_is_the_options_table():
    stale = readme.stale_sections(readme.README.read_text())
    assert stale == [], f"README.md's {stale} table differs from its source: run make readme"
    assert markdown_table() in readme.README.read_text()


def test_a_readme_table_that_differs_from_the_options_table_is_found(monkeypatch):
    text = readme.README.read_text()
    edited = text.replace("| `maxTriggerDelay` | stream read | `15m` |",
                          "| `maxTriggerDelay` | stream read | `10m` |")
    assert edited != text
    assert readme.stale_sections(edited) == ["spark-options"]
    # ... and so does a changed row of the table against the README as it is
    row = next(o for o in OPTIONS if o.name == "maxTriggerDelay")
    changed = tuple(o if o is not row else opts.Option(o.name, o.scope, "10m", o.parse, o.doc)
                    for o in OPTIONS)
    monkeypatch.setattr(opts, "OPTIONS", changed)
    assert readme.stale_sections(text) == ["spark-options"]


def test_every_option_is_documented_in_the_module_docs():
    for o in OPTIONS:
        assert f"``{o.name}``" in opts.__doc__


def test_option_names_are_unique_and_every_row_is_well_formed():
    names = [o.name.lower() for o in OPTIONS]
    assert len(names) == len(set(names))
    for o in OPTIONS:
        assert o.scope in SCOPES, o
        assert o.doc.strip(), o
        if o.default is not None and o.parse is not None:
            o.parse(o.name, o.default)  # a default parses like a given value
    assert set(opts._SECURITY) <= {o.name for o in OPTIONS}


def test_read_options_defaults_come_from_the_table():
    o = ReadOptions.parse({"metadataServiceUri": URI, "log": "a"}, streaming=True)
    assert o.max_trigger_delay_s == 15 * 60.0 == ReadOptions(uri=URI).max_trigger_delay_s
    assert o.fail_on_data_loss is True and o.include_positions is False
    assert o.timestamp_strategy == "error" and o.end_bound("a") == "latest"


_OPERATIONS = {  # operation -> (parse, the smallest valid options of it)
    opts.BATCH_READ: (lambda o: ReadOptions.parse(o, streaming=False), {"log": "a"}),
    opts.STREAM_READ: (lambda o: ReadOptions.parse(o, streaming=True), {"log": "a"}),
    opts.BATCH_WRITE: (lambda o: WriteOptions.parse(o, streaming=False), {"log": "a"}),
    opts.STREAM_WRITE: (lambda o: WriteOptions.parse(o, streaming=True),
                        {"log": "a", "sinkId": "q"}),
}


@pytest.mark.parametrize("option", OPTIONS, ids=lambda o: o.name)
@pytest.mark.parametrize("operation", list(_OPERATIONS))
def test_an_option_is_refused_exactly_where_its_scope_says_it_does_not_apply(option,
                                                                             operation):
    parse, base = _OPERATIONS[operation]
    given = {"metadataServiceUri": URI, **base}
    given.setdefault(option.name, "1")
    try:
        parse(given)
        refused = False
    except InvalidConfigError as exc:
        refused = f"'{option.name}': does not apply to {operation}" in str(exc)
    assert refused == (operation not in SCOPES[option.scope])


@pytest.mark.parametrize("option", OPTIONS, ids=lambda o: o.name)
def test_a_misspelled_option_is_suggested(option):
    wrong = option.name[:-1] + ("x" if option.name[-1] != "x" else "y")
    with pytest.raises(InvalidConfigError) as info:
        ReadOptions.parse({"metadataServiceUri": URI, "log": "a", wrong: "1"}, streaming=None)
    assert f"'{wrong}': unknown option (did you mean '{option.name}'?)" in str(info.value)


# ------------------------------------------------------------------ settings tables
# The README's client settings and `bk bookie` option tables come from the config
# dataclasses (defaults from the fields, meanings from their docstrings) and from the
# command's own options (which take their defaults from those dataclasses).


def test_a_readme_settings_row_that_differs_from_its_source_is_found():
    text = readme.README.read_text()
    for row, edited, section in (
            ("| `--port` | `3181` |", "| `--port` | `3182` |", "bookie-options"),
            ("| `client.add_timeout_s` | `10.0` |", "| `client.add_timeout_s` | `5.0` |",
             "client-config"),
            ("| `--audit-interval` | `3600.0` |", "| `--audit-interval` | `60.0` |",
             "bookie-options autorecovery-options")):  # a row of both
        assert row in text, row
        assert readme.stale_sections(text.replace(row, edited)) == section.split()


def test_a_changed_client_default_changes_the_client_table(monkeypatch):
    from bk_spark.io.bookie_client import ClientConfig

    text = readme.README.read_text()
    monkeypatch.setattr(ClientConfig.__dataclass_fields__["add_timeout_s"], "default", 20.0)
    assert "| `client.add_timeout_s` | `20.0` |" in readme.client_config_table()
    assert readme.stale_sections(text) == ["client-config"]


def test_a_changed_bookie_default_changes_the_option_and_its_row(monkeypatch):
    import typer

    from bookie_server.config import BookieConfig
    from bookie_server.main import make_bookie_app

    monkeypatch.setattr(BookieConfig.__dataclass_fields__["gc_interval_s"], "default", 99.0)
    command = typer.main.get_command(make_bookie_app())
    assert "| `--gc-interval` | `99.0` | entry-log GC period, seconds |" in \
        readme.options_table(command)


def test_a_setting_without_a_docstring_is_named():
    from dataclasses import dataclass

    @dataclass
    class Settings:
        documented: int = 1
        """what it does"""
        bare: int = 2

    with pytest.raises(ValueError, match="Settings.bare has no docstring"):
        readme.config_table(Settings)
    assert readme.field_docs(Settings) == {"documented": "what it does"}
