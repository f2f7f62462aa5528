"""The ZooKeeper configuration the sandbox writes for TLS and SASL, and the hints a client
gets when no session could be made (pure: no server is started here; the real servers are
in tests/integration/test_zk_tls_sasl.py)."""

from __future__ import annotations

import stat
from pathlib import Path

from bk_spark.certs import issue_cert, make_ca
from bk_spark.io.zk import _tls_hint
from bk_spark.sandbox import ZkServerTls, ZooKeeperServer
from bk_spark.security import ZkSecurity


def _cfg(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def test_a_tls_only_zookeeper_has_no_plaintext_port_and_reads_pem_stores(tmp_path: Path
                                                                          ) -> None:
    ca = make_ca(tmp_path / "ca")
    server = issue_cert(ca, tmp_path / "certs", "zookeeper")
    zk = ZooKeeperServer(tmp_path / "zk", port=None,
                         tls=ZkServerTls(22810, server.cert, server.key, ca.cert))
    zk.data_dir.mkdir(parents=True)
    text, jvm = zk._config()
    cfg = _cfg(text)
    assert "clientPort" not in cfg and jvm == []
    assert cfg["secureClientPort"] == "22810" and cfg["secureClientPortAddress"] == "127.0.0.1"
    assert cfg["serverCnxnFactory"].endswith("NettyServerCnxnFactory")
    assert cfg["ssl.keyStore.type"] == cfg["ssl.trustStore.type"] == "PEM"
    assert cfg["ssl.clientAuth"] == "need" and cfg["ssl.trustStore.location"] == str(ca.cert)
    store = Path(cfg["ssl.keyStore.location"])
    assert "PRIVATE KEY" in store.read_text() and "CERTIFICATE" in store.read_text()
    assert stat.S_IMODE(store.stat().st_mode) == 0o600
    assert zk.connect_string == "127.0.0.1:22810"


def test_a_sasl_zookeeper_gets_a_private_jaas_server_section_and_the_sasl_provider(
        tmp_path: Path) -> None:
    zk = ZooKeeperServer(tmp_path / "zk", port=21810, sasl_users={"bk": "s3cret"})
    zk.data_dir.mkdir(parents=True)
    text, jvm = zk._config()
    cfg = _cfg(text)
    assert cfg["clientPort"] == "21810"
    assert cfg["authProvider.1"].endswith("SASLAuthenticationProvider")
    [flag] = jvm
    jaas = Path(flag.removeprefix("-Djava.security.auth.login.config="))
    assert 'user_bk="s3cret"' in jaas.read_text() and "Server {" in jaas.read_text()
    assert stat.S_IMODE(jaas.stat().st_mode) == 0o600


def test_a_failed_zookeeper_connection_says_which_tls_setting_to_check() -> None:
    assert "BK_ZK_TLS_CA" in _tls_hint(ZkSecurity())
    assert "BK_ZK_TLS_CERT" in _tls_hint(ZkSecurity(tls_ca="ca.crt"))
    assert "ca.crt" in _tls_hint(ZkSecurity(tls_ca="ca.crt", tls_cert="c.crt",
                                            tls_key="c.key"))
