"""Mutual TLS to PD and TiKV: the CA, the client certificate and its key, as PEM files.

A TLS cluster requires all three. TiKV serves gRPC with RequestAndRequireClientCertificateAndVerify
and refuses a security config that lacks one ("ca, cert and private key should be all configured",
tikv/tikv ``components/security/src/lib.rs``); PD requires a client certificate whenever it has a
CA (tikv/pd ``server/config/config.go``, ``ClientTLSInfo.ClientCertAuth``). TiKV-CDC takes the same
three (``--ca``, ``--cert``, ``--key``). The files are read whenever a channel opens, so replaced
certificates are used by the next connection, as TiKV reloads its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from cdcflow.config import ResolvedPath
from cdcflow.errors import ConfigError
from cdcflow.sources.tikv_client.exceptions import TiKVClientError

if TYPE_CHECKING:
    import grpc

__all__ = ["TLSConfig", "TLSFileError"]


class TLSFileError(TiKVClientError, ConfigError):
    """A CA, certificate or key file of the ``tls`` setting cannot be read."""


class TLSConfig(BaseModel):
    """``tls: {ca, cert, key}``: PEM files; a relative path is relative to the pipeline file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ca: ResolvedPath = Field(description="the CA certificate(s) that signed the PD and TiKV server certificates")
    cert: ResolvedPath = Field(description="this client's certificate, signed by a CA the cluster trusts")
    key: ResolvedPath = Field(description="the private key of cert")

    def channel_credentials(self) -> grpc.ChannelCredentials:
        import grpc  # cdcflow[tikv]: the config model is read without it (cdcflow.extras)

        material = {}
        for name in ("ca", "cert", "key"):
            path = getattr(self, name)
            try:
                material[name] = path.read_bytes()
            except OSError as exc:
                raise TLSFileError(f"tls.{name}: cannot read {path}: {exc.strerror or exc}") from exc
        return grpc.ssl_channel_credentials(
            root_certificates=material["ca"], private_key=material["key"], certificate_chain=material["cert"]
        )
