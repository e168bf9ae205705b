"""Who may use the REST control plane: HTTPS, client certificates, users and tokens with roles.

Kafka Connect's REST server takes HTTPS and basic authentication (its ``listeners.https.*`` and
JAAS ``BasicAuthSecurityRestExtension``); TiKV-CDC takes mutual TLS. A group member here takes
all three, from ``engine.group.rest``:

* ``tls``: HTTPS; with ``client_ca``, a request without a certificate signed by it is refused
  (401); a certificate not signed by it fails the TLS handshake;
* ``auth``: ``Authorization: Basic`` (a user) or ``Authorization: Bearer`` (a token); none, or
  a wrong one, is 401; a ``viewer`` may only read (GET), anything else is 403;
* ``GET /health`` is open to everyone, whatever the settings: load balancers and Kubernetes
  probes ask it without credentials.

Passwords and tokens are compared as SHA-256 digests with :func:`hmac.compare_digest`, so the
time a comparison takes says nothing of how much of a guess was right (nor of its length). No
credential is ever logged.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cdcflow.errors import RestTlsError
from cdcflow.group.config import RestConfig, RestTlsConfig, Role

__all__ = ["ControlPlaneAccess", "Verdict", "access_middleware", "exposure_warnings", "server_ssl_context"]

_READING_METHODS = frozenset({"GET", "HEAD"})
_OPEN_PATHS = frozenset({"/health"})
_CHALLENGE = 'Basic realm="cdcflow", charset="UTF-8", Bearer realm="cdcflow"'


def server_ssl_context(tls: RestTlsConfig) -> ssl.SSLContext:
    """The REST server's TLS settings: its certificate, and the client CAs when ``client_ca`` is set.

    Client certificates are asked for, not required, at the handshake: ``GET /health`` stays
    open to probes without one, and every other request without one is refused by
    :class:`ControlPlaneAccess`. A certificate that is offered must be signed by ``client_ca``.
    """
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        # The key is unencrypted; the callback keeps OpenSSL from asking a terminal for a passphrase.
        context.load_cert_chain(str(tls.certfile), str(tls.keyfile) if tls.keyfile else None, password=_no_passphrase)
    except (OSError, ssl.SSLError) as exc:
        key = tls.keyfile or tls.certfile
        reason = "the key is encrypted: give an unencrypted one" if _encrypted(key) else _reason(exc)
        raise RestTlsError(
            f"rest.tls: cannot use certfile {tls.certfile}"
            + (f" with keyfile {tls.keyfile}" if tls.keyfile else " (which must hold the key too, without keyfile)")
            + f": {reason}"
        ) from exc
    if tls.client_ca is not None:
        try:
            context.load_verify_locations(cafile=str(tls.client_ca))
        except (OSError, ssl.SSLError) as exc:
            raise RestTlsError(f"rest.tls: cannot use client_ca {tls.client_ca}: {_reason(exc)}") from exc
        context.verify_mode = ssl.CERT_OPTIONAL
    return context


def exposure_warnings(rest: RestConfig) -> list[str]:
    """What a member logs at start about settings that leave its control plane exposed."""
    warnings = []
    if rest.auth is not None and rest.tls is None:
        warnings.append("rest.auth without rest.tls: passwords and tokens cross the network in clear text")
    loopback = rest.bind in ("127.0.0.1", "::1", "localhost")
    if not loopback and rest.auth is None and (rest.tls is None or rest.tls.client_ca is None):
        warnings.append(
            f"rest.bind {rest.bind} without rest.auth or rest.tls.client_ca: anyone who reaches port {rest.port} "
            "can pause the group's pipelines and change their offsets"
        )
    return warnings


def _encrypted(key: Path) -> bool:
    try:
        return "ENCRYPTED" in key.read_text(errors="replace")
    except OSError:
        return False


def _no_passphrase() -> bytes:
    return b""


def _reason(exc: OSError | ssl.SSLError) -> str:
    if isinstance(exc, ssl.SSLError):
        return exc.reason or str(exc)
    return exc.strerror or str(exc)


@dataclass(frozen=True)
class Verdict:
    """What to do with a request: ``status`` 200 lets it through; 401 and 403 refuse it with ``reason``."""

    status: int
    reason: str = ""
    who: str | None = None

    @property
    def allowed(self) -> bool:
        return self.status == 200


@dataclass(frozen=True)
class _Credential:
    name: str
    digest: bytes
    role: Role


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8")).digest()


class ControlPlaneAccess:
    """The decision for each request, from ``engine.group.rest``: open, or who is asking and
    whether their role allows it."""

    def __init__(self, rest: RestConfig) -> None:
        self.client_certificates = rest.tls is not None and rest.tls.client_ca is not None
        self.authenticates = rest.auth is not None
        auth = rest.auth
        self._users = {
            name: _Credential(name, _digest(user.password.get_secret_value()), user.role)
            for name, user in (auth.users.items() if auth is not None else ())
        }
        self._tokens = [
            _Credential(name, _digest(token.token.get_secret_value()), token.role)
            for name, token in (auth.tokens.items() if auth is not None else ())
        ]
        # Compared against when a user name is unknown, so that such an answer takes as long as a wrong password.
        self._nobody = _digest("\0no such user\0")

    def decide(self, method: str, path: str, authorization: str | None, client_certified: bool) -> Verdict:
        """The verdict for ``method path`` with this ``Authorization`` header, on a connection
        whose client did (``client_certified``) or did not present a certificate signed by
        ``rest.tls.client_ca``."""
        reading = method.upper() in _READING_METHODS
        if reading and path.rstrip("/") in _OPEN_PATHS:
            return Verdict(200, who="anyone")
        if self.client_certificates and not client_certified:
            return Verdict(401, "a client certificate signed by the group's rest.tls.client_ca is required")
        if not self.authenticates:
            return Verdict(200, who="client certificate" if self.client_certificates else "anyone")
        credential = self._identify(authorization)
        if credential is None:
            how = "no credentials" if not authorization else "wrong credentials"
            return Verdict(401, f"{how}: give a user (HTTP basic) or a token (Authorization: Bearer) of rest.auth")
        if not reading and credential.role != "operator":
            needs = f"{credential.name} is a {credential.role}: {method.upper()} needs the operator role"
            return Verdict(403, needs, credential.name)
        return Verdict(200, who=credential.name)

    def _identify(self, authorization: str | None) -> _Credential | None:
        scheme, _, value = (authorization or "").strip().partition(" ")
        value = value.strip()
        if scheme.lower() == "basic":
            return self._user(value)
        if scheme.lower() == "bearer" and value:
            given = _digest(value)
            found = None
            for token in self._tokens:  # every token compared: how long it takes says nothing of which matched
                if hmac.compare_digest(given, token.digest):
                    found = token
            return found
        return None

    def _user(self, encoded: str) -> _Credential | None:
        try:
            name, separator, password = base64.b64decode(encoded, validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        user = self._users.get(name)
        matches = hmac.compare_digest(_digest(password), user.digest if user is not None else self._nobody)
        return user if matches and separator and user is not None else None


def access_middleware(access: ControlPlaneAccess) -> Callable[..., Awaitable[Any]]:
    """An aiohttp middleware that lets through only what ``access`` allows; it guards every page
    of the server, faust's own included."""
    from aiohttp import web

    @web.middleware
    async def guard(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> Any:
        certified = bool(request.transport.get_extra_info("peercert")) if request.transport is not None else False
        verdict = access.decide(request.method, request.path, request.headers.get("Authorization"), certified)
        if verdict.allowed:
            return await handler(request)
        headers = {"WWW-Authenticate": _CHALLENGE} if verdict.status == 401 and access.authenticates else None
        return web.json_response({"error": verdict.reason}, status=verdict.status, headers=headers)

    return guard
