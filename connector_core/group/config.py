"""``engine.group``: the settings of a worker group, checked when a pipeline file is loaded."""

from __future__ import annotations

import socket
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from cdcflow.kafka_client import KafkaClientConfig

__all__ = ["GroupConfig", "RestConfig"]

_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RestConfig(_Strict):
    """Where this worker serves the REST control plane."""

    port: int = Field(default=8083, ge=0, le=65535, description="one port per worker process on a machine")
    bind: str = Field(
        default="127.0.0.1",
        description="address to listen on; 0.0.0.0 lets other machines in (the API has no authentication: "
        "keep it on a trusted network)",
    )
    advertised_url: str | None = Field(
        default=None, description="how other machines reach this worker; default http://<hostname>:<port>"
    )

    def url(self) -> str:
        return (self.advertised_url or f"http://{socket.gethostname()}:{self.port}").rstrip("/")


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
