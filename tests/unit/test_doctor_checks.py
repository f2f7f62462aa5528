"""The pure checks of ``bk doctor`` (bk_spark.admin.doctor): certificate expiry, clock skew,
bookie states, and when all is well."""

from __future__ import annotations

import datetime

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from bk_spark.admin import doctor, facts


def pem_valid_for(days: float) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "t")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1)
            .not_valid_before(now - datetime.timedelta(days=400))
            .not_valid_after(now + datetime.timedelta(days=days)).sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM)


def test_certificates_expiring_within_the_window_warn_and_expired_ones_fail():
    found = {f.message.split(" ")[0].rstrip(":"): f for f in doctor.check_certificates(
        {"a": pem_valid_for(365), "b": pem_valid_for(10), "c": pem_valid_for(-1),
         "d": b"not a certificate"}, days=30)}
    assert [found[k].status for k in "abcd"] == ["ok", "warn", "fail", "warn"]
    assert "new certificate" in found["b"].remedy


def test_clock_skew_beyond_two_seconds_warns_and_unmeasured_bookies_are_informational():
    now = 1_000_000.0
    views = [facts.BookieView("h:1", facts.RW, True, time_ms=int(now + 500)),
             facts.BookieView("h:2", facts.RW, True, time_ms=int(now - 5000)),
             facts.BookieView("h:3", facts.RW, True)]
    out = doctor.check_clocks(views, now)
    assert [f.status for f in out] == ["ok", "warn", "info"]
    assert "NTP" in out[1].remedy and "-5.0 s" in out[1].message


def test_a_down_bookie_fails_with_its_recovery_command_and_readonly_warns():
    out = doctor.check_bookies([
        facts.BookieView("h:1", facts.DOWN, False, error="unreachable"),
        facts.BookieView("h:2", facts.READONLY, True, disk_used_bytes=9, disk_free_bytes=1),
        facts.BookieView("h:3", facts.RW, True, disk_used_bytes=1, disk_free_bytes=99)])
    assert [f.status for f in out] == ["fail", "warn", "ok"]
    assert "bk recover h:1" in out[0].remedy
    assert not doctor.all_well(out) and doctor.all_well(out[2:])
    assert doctor.check_bookies([])[0].status == "fail"
