"""TLS and authentication settings, fuzzed: a bookie's TLS/allow-list configuration, the
client's environment (``BK_TLS_*``, ``BK_ZK_*``) and the data source's security options are
accepted or refused with one :class:`InvalidConfigError` line, never another exception, and
no message ever quotes a secret given to it."""

from __future__ import annotations

import os
import string
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from bk_spark.datasource.options import _SECURITY, ReadOptions
from bk_spark.errors import InvalidConfigError
from bk_spark.io.zk import kazoo_kwargs, zk_acl
from bk_spark.security import ClientSecurity
from bookie_server.access import ADMIN, BOOKIE, CLIENT, AccessPolicy
from bookie_server.config import BookieConfig

FUZZ = settings(max_examples=int(os.environ.get("BK_OPTIONS_FUZZ_EXAMPLES", "400")),
                deadline=None, database=None)

paths = st.one_of(st.none(), st.just(""), st.text(max_size=12),
                  st.sampled_from(["/nonexistent/x.pem", "/", "/dev/null", "a\x00b", "\n"]))
#: Secrets long and odd enough that finding one in a message is no accident.
secrets = st.text(alphabet=string.ascii_letters + string.digits + ":!#",
                  min_size=12, max_size=24).map(lambda s: "S3CR3T" + s)
identities = st.lists(st.text(max_size=8), max_size=3)


def one_line(exc: BaseException, *hidden: str) -> str:
    assert isinstance(exc, InvalidConfigError), repr(exc)
    text = str(exc)
    assert text and "\n" not in text, text
    for secret in hidden:
        assert secret not in text, f"a secret in the message: {text!r}"
    return text


@FUZZ
@given(cert=paths, key=paths, ca=paths, auth=st.one_of(st.sampled_from(["none", "require"]),
                                                        st.text(max_size=8)),
       clients=identities, bookies=identities, admins=identities)
def test_bookie_tls_and_allow_list_settings_are_accepted_or_named(
        cert, key, ca, auth, clients, bookies, admins) -> None:  # type: ignore[no-untyped-def]
    try:
        cfg = BookieConfig(data_dir=Path("/tmp/x"), tls_cert=cert and Path(cert),
                           tls_key=key and Path(key), tls_ca=ca and Path(ca),
                           tls_client_auth=auth, allow_clients=tuple(clients),
                           allow_bookies=tuple(bookies), allow_admins=tuple(admins))
    except Exception as exc:  # noqa: BLE001 - the property is about what was raised
        assert any(flag in one_line(exc) for flag in ("--tls", "--allow")), exc
        return
    if clients or bookies or admins:  # allow-lists only with verified client certificates
        assert cfg.tls_client_auth == "require" and cfg.tls_ca is not None
    policy = AccessPolicy.of(cfg.allow_clients, cfg.allow_bookies, cfg.allow_admins)
    for names in (frozenset(), frozenset(clients), frozenset(admins)):
        role = policy.role(names)
        assert role in (None, CLIENT, BOOKIE, ADMIN)
        if policy.restricted and not names & (policy.clients | policy.bookies | policy.admins):
            assert role is None  # nobody outside every allow-list gets in


@FUZZ
@given(env=st.dictionaries(
    st.sampled_from(["BK_TLS_CA", "BK_TLS_CERT", "BK_TLS_KEY", "BK_ZK_AUTH",
                     "BK_ZK_AUTH_FILE", "BK_ZK_TLS_CA", "BK_ZK_TLS_CERT", "BK_ZK_TLS_KEY",
                     "BK_ZK_SASL"]),
    st.one_of(paths.filter(lambda p: p is not None), secrets), max_size=5))
def test_client_security_from_the_environment_never_shows_a_secret(env) -> None:  # type: ignore[no-untyped-def]
    secret_values = [v for k, v in env.items() if k == "BK_ZK_AUTH" and v.startswith("S3CR3T")
                     and v not in {p for n, p in env.items() if n != "BK_ZK_AUTH"}]
    try:
        sec = ClientSecurity.from_env(env)
    except Exception as exc:  # noqa: BLE001
        one_line(exc, *secret_values)
        return
    for v in secret_values:
        assert v not in repr(sec)  # logs and exceptions print reprs
    if sec.zk.digest is not None:
        assert zk_acl(sec.zk) and kazoo_kwargs(sec.zk)["default_acl"] == zk_acl(sec.zk)


@FUZZ
@given(opts=st.dictionaries(st.sampled_from(_SECURITY + ("password",)),
                            st.one_of(paths.filter(lambda p: p is not None), secrets),
                            max_size=5))
def test_data_source_security_options_never_quote_a_secret(opts) -> None:  # type: ignore[no-untyped-def]
    options = {"log": "events", **opts}
    paths_given = {v for k, v in opts.items() if k not in ("zkAuthSecret", "password")}
    hidden = [v for k, v in opts.items() if k in ("zkAuthSecret", "password")
              and v.startswith("S3CR3T") and v not in paths_given]
    try:
        parsed = ReadOptions.parse(options, streaming=False)
    except Exception as exc:  # noqa: BLE001
        text = one_line(exc, *hidden)
        assert text.startswith("bookkeeper data source option '")
        return
    for v in hidden:
        assert v not in repr(parsed)
