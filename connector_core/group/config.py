"""``engine.group``: the settings of a worker group, checked when a pipeline file is loaded."""

from __future__ import annotations

import socket
from collections.abc import Mapping
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationInfo, field_validator, model_validator

from cdcflow._config_fields import ResolvedPath
from cdcflow.errors import RestTlsError
from cdcflow.kafka_client import KafkaClientConfig

__all__ = ["GroupConfig", "RestAuthConfig", "RestConfig", "RestTlsConfig", "RestToken", "RestUser", "Role"]

_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


Role = Literal["viewer", "operator"]
"""viewer: every GET; operator: GET, pause, resume and offset changes too."""


class RestTlsConfig(_Strict):
    """HTTPS for the REST control plane, and optionally client certificates (mutual TLS)."""

    certfile: ResolvedPath = Field(description="PEM file of this worker's certificate (and its chain)")
    keyfile: ResolvedPath | None = Field(
        default=None, description="PEM file of the certificate's private key, unencrypted; default: in certfile"
    )
    client_ca: ResolvedPath | None = Field(
        default=None,
        description="PEM file of the CAs whose client certificates are accepted: every request but GET /health "
        "then needs one (mutual TLS)",
    )

    @model_validator(mode="after")
    def _loadable(self) -> Self:
        from cdcflow.group.access import server_ssl_context  # here: access imports this module

        try:
            server_ssl_context(self)
        except RestTlsError as exc:
            raise ValueError(str(exc)) from exc
        return self


_SHORTEST_TOKEN = 16


class RestUser(_Strict):
    password: SecretStr = Field(description="compared as given (in constant time); use ${file:...}")
    role: Role = Field(default="viewer", description="viewer: GET; operator: pause, resume and offsets too")

    @field_validator("password")
    @classmethod
    def _not_empty(cls, password: SecretStr) -> SecretStr:
        if not password.get_secret_value():
            raise ValueError("a password is not empty")
        return password


class RestToken(_Strict):
    token: SecretStr = Field(description="sent as 'Authorization: Bearer <token>'; use ${file:...}")
    role: Role = Field(default="viewer", description="viewer: GET; operator: pause, resume and offsets too")

    @field_validator("token")
    @classmethod
    def _long_enough(cls, token: SecretStr) -> SecretStr:
        if len(token.get_secret_value()) < _SHORTEST_TOKEN:
            raise ValueError(f"a token has at least {_SHORTEST_TOKEN} characters (a short one is soon guessed)")
        return token


class RestAuthConfig(_Strict):
    """Who may use the REST control plane: users (HTTP basic authentication) and bearer tokens,
    each with a role. ``GET /health`` stays open, for load balancers and probes."""

    users: dict[str, RestUser] = Field(default_factory=dict, description="by user name")
    tokens: dict[str, RestToken] = Field(default_factory=dict, description="by a name for the token's holder")

    @model_validator(mode="after")
    def _someone(self) -> Self:
        if not self.users and not self.tokens:
            raise ValueError("auth lets no one in: give users, tokens or both (or leave auth out)")
        if any(":" in name or not name for name in self.users):
            raise ValueError("a user name is not empty and has no ':' (HTTP basic authentication separates at ':')")
        return self


class RestConfig(_Strict):
    """Where this worker serves the REST control plane, and to whom."""

    port: int = Field(default=8083, ge=0, le=65535, description="one port per worker process on a machine")
    bind: str = Field(
        default="127.0.0.1",
        description="address to listen on; 0.0.0.0 lets other machines in (give it tls and auth, or keep it "
        "on a trusted network)",
    )
    advertised_url: str | None = Field(
        default=None, description="how other machines reach this worker; default http(s)://<hostname>:<port>"
    )
    tls: RestTlsConfig | None = Field(default=None, description="serve HTTPS (and ask for client certificates)")
    auth: RestAuthConfig | None = Field(
        default=None, description="users and tokens with roles; none: anyone who reaches the port is an operator"
    )

    def url(self) -> str:
        scheme = "https" if self.tls is not None else "http"
        return (self.advertised_url or f"{scheme}://{socket.gethostname()}:{self.port}").rstrip("/")


class GroupConfig(_Strict):
    """Identical worker processes, on any machines, that share a pipeline's partitions through a
    Kafka consumer group (Kafka Connect's distributed mode)."""

    coordinator: Literal["faust", "kafka"] = Field(
        default="faust",
        description="faust: faust-streaming's consumer (eager rebalances); kafka: a confluent-kafka consumer "
        "with cooperative-sticky rebalances (only moved buckets stop)",
    )
    bootstrap_servers: str
    kafka: KafkaClientConfig = Field(
        default_factory=KafkaClientConfig,
        description="security and client settings of the group's own Kafka clients: the coordinator (faust's "
        "aiokafka, or confluent-kafka) and the control topic's",
    )
    id: str = Field(pattern=_NAME, max_length=200, description="the consumer group; default cdcflow-<pipeline>")
    buckets: int = Field(
        default=32,
        ge=1,
        le=1000,
        description="partitions of the group's assignment topic; a source partition belongs to one bucket. "
        "At least 4 x the most workers you will run; fixed once the group exists",
    )
    session_timeout_s: float = Field(
        default=10.0, ge=1, le=1800, description="a worker silent this long is dead: its buckets move"
    )
    heartbeat_interval_s: float = Field(
        default=1.0, gt=0, description="how often members learn of a rebalance; bounds handover time"
    )
    rebalance_timeout_s: float = Field(
        default=60.0, gt=0, description="a revoke (stop, flush, checkpoint) must finish within it, or the worker exits"
    )
    instance_id: str | None = Field(
        default=None,
        description="static membership (KIP-345): a worker restarted within session_timeout_s gets its buckets "
        "back without a rebalance; a stopped one is noticed only after session_timeout_s",
    )
    replication_factor: int = Field(default=1, ge=1, description="of the assignment and control topics")
    status_interval_s: float = Field(default=2.0, gt=0, description="how often a worker publishes its status")
    rest: RestConfig = RestConfig()

    @model_validator(mode="before")
    @classmethod
    def _named_after_the_pipeline(cls, data: Any, info: ValidationInfo) -> Any:
        """A group with no ``id`` is named after the pipeline it is loaded with (validation context ``pipeline``)."""
        pipeline = (info.context or {}).get("pipeline")
        if isinstance(data, Mapping) and "id" not in data and pipeline is not None:
            return {"id": f"cdcflow-{pipeline}", **data}
        return data

    @field_validator("instance_id")
    @classmethod
    def _empty_is_none(cls, value: str | None) -> str | None:
        return value or None  # `instance_id: ${HOSTNAME:-}` with HOSTNAME unset

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.coordinator == "faust" and self.kafka.sasl_mechanism in ("GSSAPI", "OAUTHBEARER"):
            raise ValueError(
                f"coordinator faust takes PLAIN and SCRAM credentials from the kafka block, not "
                f"{self.kafka.sasl_mechanism} (whose settings are librdkafka passthrough): use coordinator: kafka"
            )
        if self.heartbeat_interval_s * 3 > self.session_timeout_s:
            raise ValueError(
                "heartbeat_interval_s must be at most a third of session_timeout_s, so that a member "
                "misses several heartbeats before it is declared dead"
            )
        return self

    @property
    def bucket_topic(self) -> str:
        """The group's assignment topic: one partition per bucket, never written to."""
        return f"{self.id}.buckets"

    @property
    def control_topic(self) -> str:
        """Compacted: pause flags, worker status, offset commands and their answers."""
        return f"{self.id}.control"
