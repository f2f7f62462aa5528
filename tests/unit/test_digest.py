"""Entry digests and ledger passwords."""

from __future__ import annotations

import time

import crc32c
import pytest

from bk_spark.errors import DigestMismatchError, InvalidConfigError, UnauthorizedError
from bk_spark.protocol.digest import (
    DigestManager,
    check_password,
    master_key,
    password_digest,
)


@pytest.mark.parametrize("digest_type,length", [("crc32c", 4), ("mac", 32), ("none", 0)])
def test_digest_round_trips_and_has_the_documented_length(digest_type, length):
    dm = DigestManager(digest_type, b"secret")
    digest = dm.compute(5, 12, 11, b"payload")
    assert len(digest) == length == dm.digest_length
    dm.verify(5, 12, 11, b"payload", digest)
    dm.verify(5, 12, 11, memoryview(b"payload"), digest)


@pytest.mark.parametrize("digest_type", ["crc32c", "mac"])
@pytest.mark.parametrize("field", ["ledger", "entry", "lac", "payload"])
def test_a_copy_with_any_field_changed_fails_verification(digest_type, field):
    dm = DigestManager(digest_type, b"secret")
    digest = dm.compute(5, 12, 11, b"payload")
    args = {
        "ledger": (6, 12, 11, b"payload"),
        "entry": (5, 13, 11, b"payload"),
        "lac": (5, 12, 10, b"payload"),
        "payload": (5, 12, 11, b"paylOad"),
    }[field]
    with pytest.raises(DigestMismatchError, match="read it from another bookie"):
        dm.verify(*args, digest)


def test_crc32c_is_castagnoli_over_header_and_payload():
    dm = DigestManager("crc32c")
    header = (
        (1).to_bytes(8, "big")
        + (2).to_bytes(8, "big")
        + (1).to_bytes(8, "big")
        + (3).to_bytes(8, "big")
    )
    assert dm.compute(1, 2, 1, b"abc") == crc32c.crc32c(header + b"abc").to_bytes(4, "big")


def test_mac_digest_depends_on_the_password():
    a = DigestManager("mac", b"one").compute(1, 0, -1, b"x")
    b = DigestManager("mac", b"two").compute(1, 0, -1, b"x")
    assert a != b
    with pytest.raises(DigestMismatchError):
        DigestManager("mac", b"two").verify(1, 0, -1, b"x", a)


def test_unknown_digest_type_names_the_option():
    with pytest.raises(InvalidConfigError, match="digestType 'sha1'"):
        DigestManager("sha1")


def test_master_key_is_sha256_of_ledger_prefix_and_password_and_differs_from_stored_digest():
    import hashlib

    assert master_key(b"pw") == hashlib.sha256(b"ledgerpw").digest()
    assert password_digest(b"pw") != master_key(b"pw").hex()
    check_password(b"pw", password_digest(b"pw"))
    with pytest.raises(UnauthorizedError, match="wrong password for ledger 3"):
        check_password(b"nope", password_digest(b"pw"), ledger_id=3)


def test_digest_of_a_large_entry_is_fast():
    dm = DigestManager("crc32c")
    payload = bytes(4 << 20)
    start = time.perf_counter()
    dm.compute(1, 1, 0, payload)
    assert time.perf_counter() - start < 0.1  # no per-byte Python
