"""`bk sandbox` options given before the subcommand are refused, not silently ignored.

A user who typed `bk sandbox --data-dir X start` got a sandbox in the default directory.
"""

from typer.testing import CliRunner

from bk_spark.cli import app


def test_an_option_before_the_subcommand_is_refused_naming_where_it_goes(tmp_path):
    result = CliRunner().invoke(app, ["sandbox", "--data-dir", str(tmp_path), "status"])
    assert result.exit_code == 1
    assert "--data-dir must come after the subcommand" in result.output
    assert "bk sandbox status --data-dir" in result.output


def test_the_same_option_after_the_subcommand_is_used(tmp_path):
    result = CliRunner().invoke(app, ["sandbox", "status", "--data-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert f"no sandbox started from {tmp_path}" in " ".join(result.output.split())
