"""Client-side TLS to bookies: the options (:class:`TlsOptions`) and the diagnosis of a
refused handshake (:func:`refusal_for`, :func:`tls_refusal`).

gRPC reports a connection its TLS handshake failed as \"Socket closed\" (or its deadline
passing, for a call made ``wait_for_ready``), like a bookie that died. A refusal is not an
unavailable bookie but a setting the user must fix, so :func:`bk_spark.io.bookie_client.unavailable`
(the one place RPC failures are translated) asks :func:`refusal_for` first: it connects once
more with Python's ``ssl`` and the client's files and says which certificate or option is
missing. Callers then fail at once (:class:`~bk_spark.errors.UnauthorizedError`), as on a wrong
password, instead of replacing the bookie.
"""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass
from pathlib import Path

import grpc

from bk_spark.errors import InvalidConfigError


@dataclass(frozen=True)
class TlsOptions:
    """Client-side TLS: trust this CA when talking to bookies and, for bookies started with
    ``--tls-client-auth require`` (mutual TLS), present this certificate and key (PEM files;
    the key is read when a channel opens and kept nowhere else)."""

    ca_cert: Path
    cert: Path | None = None
    key: Path | None = None

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise InvalidConfigError("a client certificate and its key go together "
                                     "(tls cert and tls key)")

    def credentials(self) -> grpc.ChannelCredentials:
        try:
            return grpc.ssl_channel_credentials(
                root_certificates=Path(self.ca_cert).read_bytes(),
                private_key=Path(self.key).read_bytes() if self.key is not None else None,
                certificate_chain=Path(self.cert).read_bytes() if self.cert is not None
                else None)
        except OSError as exc:
            raise InvalidConfigError(f"cannot read a TLS file: {exc.filename}: "
                                     f"{exc.strerror}") from None


#: gRPC's detail text when a connection failed in (or right after) its TLS handshake.
_HANDSHAKE_FAILURES = ("Socket closed", "andshake failed", "CERTIFICATE_VERIFY_FAILED")
_CERT_OPTIONS = "BK_TLS_CERT and BK_TLS_KEY (`bk --tls-cert/--tls-key`, Spark options " \
                "tlsCert/tlsKey)"


def tls_refusal(bookie_id: str, tls: TlsOptions | None, detail: str = "",
                timeout: float = 2.0) -> str | None:
    """Why ``bookie_id`` refuses this client's TLS set-up, or None when it does not (it is
    down, or something else failed): what to do, naming the option to set.

    gRPC reports a refused handshake as \"Socket closed\", like a bookie that died, so this
    connects once more with Python's ``ssl`` and the same files: a bookie that completes the
    handshake and then closes without a word (no HTTP/2 settings) refused the client's
    certificate, or its lack; one that answers a plaintext client's TLS hello serves TLS."""
    if "CERTIFICATE_VERIFY_FAILED" in detail and tls is not None:
        return (f"bookie {bookie_id}'s TLS certificate is not signed by the CA this client "
                f"trusts ({tls.ca_cert}): set BK_TLS_CA (`bk --tls-ca`, Spark option "
                f"tlsCaCert) to the CA of the cluster's bookies")
    host, _, port = bookie_id.rpartition(":")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.set_alpn_protocols(["h2"])
    if tls is None:
        ctx.verify_mode = ssl.CERT_NONE  # only: does the bookie speak TLS at all?
    else:
        try:
            ctx.load_verify_locations(str(tls.ca_cert))
            if tls.cert is not None and tls.key is not None:
                ctx.load_cert_chain(str(tls.cert), str(tls.key))
        except (OSError, ssl.SSLError):
            return None  # unreadable files fail earlier, with their own message
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as raw, \
                ctx.wrap_socket(raw, server_hostname=host.strip("[]")) as conn:
            try:  # gRPC's first words after a handshake it accepts: HTTP/2 settings
                conn.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
                answered = bool(conn.recv(1))
            except OSError:  # an alert or a reset right after the handshake: refused
                answered = False
    except ssl.SSLCertVerificationError:
        return (f"bookie {bookie_id}'s TLS certificate is not signed by the CA this client "
                f"trusts ({tls.ca_cert if tls else None}): set BK_TLS_CA (`bk --tls-ca`, "
                f"Spark option tlsCaCert) to the CA of the cluster's bookies")
    except (OSError, ValueError):  # ssl.SSLError too: not a TLS server, refused, down
        return None
    if tls is None:
        return (f"bookie {bookie_id} serves TLS only and closed this plaintext connection: "
                f"set BK_TLS_CA to the CA of its certificate (`bk --tls-ca`, Spark option "
                f"tlsCaCert) and, if it requires client certificates, {_CERT_OPTIONS}")
    if answered:
        return None
    if tls.cert is None:
        return (f"bookie {bookie_id} refused the TLS handshake: it requires a client "
                f"certificate signed by its CA (mutual TLS) and this client has none; set "
                f"{_CERT_OPTIONS}")
    return (f"bookie {bookie_id} refused this client's certificate {tls.cert} in the TLS "
            f"handshake: it is not signed by a CA the bookie trusts (its --tls-ca); use a "
            f"certificate of the cluster's CA ({_CERT_OPTIONS})")


def refusal_for(bookie_id: str, code: grpc.StatusCode | None, detail: str,
                tls: TlsOptions | None) -> str | None:
    """Why ``bookie_id`` refused this client's TLS set-up, given a failed call's gRPC status
    ``code`` and ``detail``; None when the failure is not a refused handshake (the bookie is
    down, slow, or something else failed). ``tls``: the client's options, None for
    plaintext. A call made ``wait_for_ready`` waits out its deadline on a refused handshake,
    so a TLS client asks then too (1 s at most: a stalled bookie finishes no handshake)."""
    if code == grpc.StatusCode.UNAVAILABLE and any(h in detail for h in _HANDSHAKE_FAILURES):
        return tls_refusal(bookie_id, tls, detail)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED and tls is not None:
        return tls_refusal(bookie_id, tls, detail, timeout=1.0)
    return None
