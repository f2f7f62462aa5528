"""Bookie RPC over TLS: a client trusting the CA works; plaintext or a wrong CA is refused,
with an error naming the option to set."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from bk_spark.core import BookKeeper
from bk_spark.errors import UnauthorizedError
from bk_spark.io.bookie_client import BookieClient, ClientConfig, TlsOptions


def self_signed(directory: Path, name: str) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (it is its own CA)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
                critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / f"{name}.crt", directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def test_tls_bookies_serve_trusting_clients_and_refuse_others(cluster_factory, metadata_uri,
                                                             tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path, "bookie")
    other_ca, _ = self_signed(tmp_path, "stranger")
    c = cluster_factory(3, extra_args=["--tls-cert", str(cert), "--tls-key", str(key)])
    with BookKeeper(metadata_uri, tls_ca_cert=str(cert)) as bk:
        lh = bk.create_ledger(3, 2, 2)
        for i in range(20):
            lh.add_entry(b"secret-%d" % i)
        lh.close()
        rh = bk.open_ledger(lh.id)
        assert [e.payload for e in rh.read_entries(0, 19)] == [b"secret-%d" % i for i in range(20)]
    target = c.bookies[0].bookie_id
    plain = BookieClient(target, ClientConfig(read_timeout_s=3))
    wrong = BookieClient(target, ClientConfig(read_timeout_s=3, tls=TlsOptions(other_ca)))
    try:  # refused in the handshake, and told what to set
        for client, says in ((plain, "serves TLS only.*BK_TLS_CA"),
                             (wrong, "not signed by the CA this client trusts")):
            with pytest.raises(UnauthorizedError, match=says):
                client.info()
    finally:
        plain.close()
        wrong.close()
