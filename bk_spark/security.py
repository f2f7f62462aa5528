"""Client security settings and where their secrets come from (files and environment only).

One :class:`ClientSecurity` says how a client reaches a secured cluster: the TLS files it uses
with bookies (a CA to trust, and for mutual TLS its own certificate and key) and how it
authenticates to ZooKeeper (:class:`ZkSecurity`: digest credentials, optionally ZooKeeper's
TLS port). Secrets never need a command line: every one can come from a file or an
environment variable, and none is ever shown (``repr`` hides it, messages never quote it).

======================  ============================================================
environment variable    meaning
======================  ============================================================
``BK_TLS_CA``           PEM CA that signed the bookies' certificates (turns TLS on)
``BK_TLS_CERT``         PEM client certificate (bookies with ``--tls-client-auth require``)
``BK_TLS_KEY``          its PEM private key (a file: the key itself is never passed)
``BK_ZK_AUTH``          ZooKeeper digest credentials ``user:password``
``BK_ZK_AUTH_FILE``     a file holding ``user:password`` (preferred over ``BK_ZK_AUTH``)
``BK_ZK_TLS_CA``        PEM CA of ZooKeeper's ``secureClientPort`` (turns ZK TLS on)
``BK_ZK_TLS_CERT``      PEM client certificate for ZooKeeper's TLS port
``BK_ZK_TLS_KEY``       its private key
``BK_ZK_SASL``          ``1``/``true``: authenticate with SASL DIGEST-MD5 (same credentials)
======================  ============================================================
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from bk_spark.errors import InvalidConfigError

ENV_TLS_CA, ENV_TLS_CERT, ENV_TLS_KEY = "BK_TLS_CA", "BK_TLS_CERT", "BK_TLS_KEY"
ENV_ZK_AUTH, ENV_ZK_AUTH_FILE = "BK_ZK_AUTH", "BK_ZK_AUTH_FILE"
ENV_ZK_TLS_CA, ENV_ZK_TLS_CERT, ENV_ZK_TLS_KEY = "BK_ZK_TLS_CA", "BK_ZK_TLS_CERT", "BK_ZK_TLS_KEY"
ENV_ZK_SASL = "BK_ZK_SASL"


def read_secret_file(path: str | os.PathLike[str], what: str) -> str:
    """The secret held in a file (surrounding whitespace dropped); the error names the file
    and what it should hold, never its content."""
    try:
        text = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path, not UTF-8
        reason = exc.strerror if isinstance(exc, OSError) else "not a readable text file"
        raise InvalidConfigError(f"cannot read {what} from {str(path)!r}: {reason}") from None
    if not text:
        raise InvalidConfigError(f"{str(path)!r} is empty: it should hold {what}")
    return text


def _check_pair(cert: str | None, key: str | None, what: str) -> None:
    if (cert is None) != (key is None):
        raise InvalidConfigError(f"{what}: a client certificate and its key go together")


@dataclass(frozen=True)
class ZkSecurity:
    """How to authenticate to ZooKeeper and which ACL new znodes get.

    ``digest`` (``user:password``, hidden from ``repr``) authenticates the session with
    ZooKeeper's digest scheme, and every znode this client creates gets the ACL "all rights
    to that user, none to anyone else" (:meth:`acl`), so an unauthenticated client can
    neither read nor change the cluster's metadata. ``sasl`` uses SASL (``DIGEST-MD5`` with
    the same credentials) for ensembles that require it; znodes then get ``sasl:user``.
    ``tls_ca`` turns on TLS to ZooKeeper's ``secureClientPort`` (``tls_cert``/``tls_key``:
    a client certificate when ZooKeeper asks for one).
    """

    digest: str | None = field(default=None, repr=False)
    sasl: bool = False
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None

    def __post_init__(self) -> None:
        if self.digest is not None:
            user, sep, password = self.digest.partition(":")
            if not sep or not user or not password:
                raise InvalidConfigError(
                    "ZooKeeper credentials must look like user:password (the value is not "
                    "shown)")
        elif self.sasl:
            raise InvalidConfigError("ZooKeeper SASL needs credentials (user:password)")
        _check_pair(self.tls_cert, self.tls_key, "ZooKeeper TLS")
        if self.tls_cert is not None and self.tls_ca is None:
            raise InvalidConfigError("ZooKeeper TLS: a client certificate needs the CA too")

    @property
    def user(self) -> str | None:
        return None if self.digest is None else self.digest.partition(":")[0]

    @property
    def enabled(self) -> bool:
        return self.digest is not None or self.tls_ca is not None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ZkSecurity:
        """From ``BK_ZK_AUTH_FILE`` / ``BK_ZK_AUTH`` and ``BK_ZK_TLS_*`` (all optional)."""
        env = os.environ if env is None else env
        digest = None
        if env.get(ENV_ZK_AUTH_FILE):
            digest = read_secret_file(env[ENV_ZK_AUTH_FILE], "ZooKeeper credentials "
                                                             "user:password")
        elif env.get(ENV_ZK_AUTH):
            digest = env[ENV_ZK_AUTH]
        return cls(digest=digest, sasl=env.get(ENV_ZK_SASL, "") in ("1", "true"),
                   tls_ca=env.get(ENV_ZK_TLS_CA) or None,
                   tls_cert=env.get(ENV_ZK_TLS_CERT) or None,
                   tls_key=env.get(ENV_ZK_TLS_KEY) or None)


@dataclass(frozen=True)
class ClientSecurity:
    """Everything a client needs to reach a secured cluster (paths and hidden secrets only:
    picklable, hashable, safe to log)."""

    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    zk: ZkSecurity = field(default_factory=ZkSecurity)

    def __post_init__(self) -> None:
        _check_pair(self.tls_cert, self.tls_key, "bookie TLS")
        if self.tls_cert is not None and self.tls_ca is None:
            raise InvalidConfigError("bookie TLS: a client certificate needs the CA too "
                                     "(tls CA)")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ClientSecurity:
        env = os.environ if env is None else env
        return cls(tls_ca=env.get(ENV_TLS_CA) or None, tls_cert=env.get(ENV_TLS_CERT) or None,
                   tls_key=env.get(ENV_TLS_KEY) or None, zk=ZkSecurity.from_env(env))
