"""How the Cassandra and ScyllaDB sources authenticate and encrypt their CQL connections: the
``username``/``password``/``ssl`` fields they share, mapped to cassandra-driver's
``auth_provider`` (PasswordAuthenticator) and ``ssl_context``; and the error for a cluster that
refuses them, which no retry cures."""

from __future__ import annotations

import ssl
from ssl import SSLContext
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from cdcflow.config import ResolvedPath
from cdcflow.errors import ConfigError, SourceError

__all__ = ["CqlAccessRefusedError", "CqlClientSecurity", "CqlSsl", "refusal"]


class CqlAccessRefusedError(SourceError, ConfigError):
    """The cluster refused the credentials or the TLS handshake: fix the config, retrying won't."""


class CqlSsl(BaseModel):
    """Client encryption (Cassandra's ``client_encryption_options``, ScyllaDB's
    ``client_encryption_options``): CQL over TLS, verifying the nodes' certificates."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ca: ResolvedPath | None = Field(
        default=None, description="PEM file of the CA(s) that signed the nodes' certificates; null: the system's CAs"
    )
    cert: ResolvedPath | None = Field(
        default=None, description="PEM client certificate, for nodes that require client authentication"
    )
    key: ResolvedPath | None = Field(default=None, description="PEM private key of cert")
    verify: bool = Field(
        default=True,
        description="check each node's certificate against ca and that it names the node's address; false: "
        "encrypt only (no protection against a man in the middle)",
    )

    @model_validator(mode="after")
    def _files(self) -> CqlSsl:
        if (self.cert is None) != (self.key is None):
            raise ValueError("ssl.cert and ssl.key go together: the client certificate and its private key")
        for name in ("ca", "cert", "key"):
            path = getattr(self, name)
            if path is not None and not path.is_file():
                raise ValueError(f"ssl.{name}: {path} is not a readable file")
        return self

    def context(self) -> SSLContext:
        """An SSLContext for cassandra-driver (TLS 1.2 or newer)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.verify:
            if self.ca is not None:
                context.load_verify_locations(cafile=str(self.ca))
            else:
                context.load_default_certs()
        else:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.cert is not None and self.key is not None:
            context.load_cert_chain(str(self.cert), str(self.key))
        return context


class CqlClientSecurity(BaseModel):
    """The credential and encryption fields of a CQL source's config."""

    username: str | None = Field(default=None, description="for PasswordAuthenticator; null: no authentication")
    password: str | None = Field(default=None, description="use ${ENV_VAR} to keep it out of the file")
    ssl: CqlSsl | None = Field(default=None, description="CQL over TLS; null: plain connections")

    @model_validator(mode="after")
    def _credentials(self) -> CqlClientSecurity:
        if self.password is not None and self.username is None:
            raise ValueError("password is set but username is not")
        return self

    def auth_provider(self) -> Any:
        from cassandra.auth import PlainTextAuthProvider

        if self.username is None:
            return None
        return PlainTextAuthProvider(self.username, self.password or "")

    def ssl_context(self) -> SSLContext | None:
        return self.ssl.context() if self.ssl is not None else None


def refusal(hosts: Any, exc: BaseException) -> CqlAccessRefusedError | None:
    """A :class:`CqlAccessRefusedError` when every host refused the credentials or the TLS
    handshake (cassandra-driver's NoHostAvailable carries each host's error); None otherwise (a
    node that is down or slow: the caller's transient error)."""
    from cassandra import AuthenticationFailed
    from cassandra.cluster import NoHostAvailable

    if isinstance(exc, AuthenticationFailed):
        errors: dict[Any, BaseException] = {"": exc}
    elif isinstance(exc, NoHostAvailable) and exc.errors:
        errors = dict(exc.errors)
    else:
        return None
    reasons = []
    for host, error in errors.items():
        if isinstance(error, AuthenticationFailed):
            reasons.append(f"{host}: authentication failed ({error}); check username and password")
        elif _tls_failure(error) == "verify":
            reasons.append(f"{host}: the node's certificate did not verify ({error}); check ssl.ca")
        elif _tls_failure(error) == "handshake":
            reasons.append(
                f"{host}: the TLS handshake failed ({error}); check ssl.cert, ssl.key and the node's settings"
            )
        else:
            return None  # some host failed otherwise: not (only) a refusal
    return CqlAccessRefusedError(f"{hosts} refused the connection: " + "; ".join(reasons))


def _tls_failure(error: BaseException) -> str | None:
    """ "verify" or "handshake" for a TLS failure, else None. cassandra-driver re-raises a failed
    handshake as a bare socket error with the SSL error's text ("Last error: [SSL: ...]"), so the
    text is all there is to tell it by."""
    if isinstance(error, ssl.SSLCertVerificationError):
        return "verify"
    if isinstance(error, ssl.SSLError):
        return "handshake"
    text = str(error)
    if "CERTIFICATE_VERIFY_FAILED" in text:
        return "verify"
    return "handshake" if "[SSL" in text else None
