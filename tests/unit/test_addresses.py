"""Addresses that work across hosts: listen vs advertised bookie address, multi-host URIs."""

from __future__ import annotations

from pathlib import Path

import pytest

from bk_spark.cli import main
from bk_spark.errors import InvalidConfigError
from bk_spark.metadata_uri import parse_metadata_service_uri
from bookie_server.config import BookieConfig


def test_bookie_registers_its_advertised_address_not_the_listen_address(tmp_path: Path):
    cfg = BookieConfig(data_dir=tmp_path, host="0.0.0.0", port=3181,
                       advertised_address="10.77.0.21")
    assert cfg.bookie_id == "10.77.0.21:3181"
    assert BookieConfig(data_dir=tmp_path, host="127.0.0.5", port=4000).bookie_id == \
        "127.0.0.5:4000"


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_listening_on_every_interface_requires_an_advertised_address(tmp_path: Path, host: str):
    with pytest.raises(InvalidConfigError, match="--advertised-address"):
        BookieConfig(data_dir=tmp_path, host=host)
    with pytest.raises(InvalidConfigError, match="--advertised-address"):
        BookieConfig(data_dir=tmp_path, host="10.0.0.1", advertised_address="0.0.0.0")


def test_bk_bookie_on_every_interface_without_advertised_address_is_a_one_line_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    rc = main(["bookie", "--data-dir", str(tmp_path), "--host", "0.0.0.0", "--no-register"])
    assert rc == 1
    err = capsys.readouterr().err
    assert "--advertised-address" in err and "Traceback" not in err


def test_metadata_uri_with_an_ensemble_and_a_chroot_keeps_every_host_and_the_root():
    msu = parse_metadata_service_uri("zk://h1:2181,h2:2182,10.77.0.13:2181/bk/ledgers")
    assert msu.hosts == "h1:2181,h2:2182,10.77.0.13:2181"  # kazoo's connect string
    assert msu.root == "/bk/ledgers"
    assert msu.available_path == "/bk/ledgers/available"
    assert parse_metadata_service_uri(msu.uri) == msu  # what executors get back from options


@pytest.mark.parametrize("bad", ["zk://h1:2181,h2/ledgers", "zk://h1:2181,:2181/ledgers",
                                 "zk://h1:2181,h2:99999/ledgers"])
def test_metadata_uri_names_the_malformed_host_of_an_ensemble(bad: str):
    with pytest.raises(InvalidConfigError, match="is not host:port"):
        parse_metadata_service_uri(bad)
