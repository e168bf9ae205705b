"""The ``kafka`` checkpoint store: offsets in a compacted topic, like Kafka Connect's offsets topic.

Keys are ``["<pipeline>", "<partition id>"]`` (JSON), values the checkpoint (JSON) or a tombstone
after a reset. Compaction keeps the newest value per key, so loading reads the topic to its end
once at start.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from pydantic import Field

from cdcflow.contract import Checkpoint, CheckpointStore, CheckpointStoreConfig
from cdcflow.errors import CheckpointCorruptError, CheckpointUnavailableError
from cdcflow.kafka_client import KafkaClientConfig

__all__ = ["KafkaCheckpointConfig", "KafkaCheckpointStore"]


class KafkaCheckpointConfig(CheckpointStoreConfig):
    bootstrap_servers: str
    kafka: KafkaClientConfig = Field(
        default_factory=KafkaClientConfig, description="security and client settings (SASL, TLS, passthrough)"
    )
    topic: str = Field(default="cdcflow-offsets", description="compacted topic shared by pipelines")
    partitions: int = Field(default=6, ge=1, description="used when the topic is created")
    replication_factor: int = Field(default=1, ge=1, description="used when the topic is created")
    timeout_s: float = Field(default=30.0, gt=0)


class KafkaCheckpointStore(CheckpointStore[KafkaCheckpointConfig]):
    type_name = "kafka"
    config_model = KafkaCheckpointConfig

    _producer: Producer | None = None

    def check_reachable(self, timeout_s: float) -> None:
        self.config.kafka.check_reachable(
            self.config.bootstrap_servers, timeout_s, self.context.field_path or "checkpoint"
        )

    def open(self) -> None:
        settings = self.config.kafka.librdkafka_settings(self.config.bootstrap_servers)
        admin = AdminClient(settings)
        topic = NewTopic(
            self.config.topic,
            num_partitions=self.config.partitions,
            replication_factor=self.config.replication_factor,
            config={"cleanup.policy": "compact"},
        )
        try:
            admin.create_topics([topic])[self.config.topic].result(timeout=self.config.timeout_s)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise CheckpointUnavailableError(f"cannot create offsets topic {self.config.topic}: {exc}") from exc
        except Exception as exc:  # a timeout from the future: the broker is not there
            raise CheckpointUnavailableError(f"cannot create offsets topic {self.config.topic}: {exc}") from exc
        # One request in flight, like the sink: see KafkaSink._settings for the loss it prevents.
        self._producer = Producer(
            {
                **settings,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 0,
                "max.in.flight.requests.per.connection": 1,
            }
        )

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(5.0)
            self._producer = None

    def _key(self, partition_id: str) -> bytes:
        return json.dumps([self.context.pipeline, partition_id], separators=(",", ":")).encode()

    def load(self) -> dict[str, Checkpoint]:
        consumer = Consumer(
            self.config.kafka.librdkafka_settings(
                self.config.bootstrap_servers,
                {"group.id": "cdcflow-offsets-reader", "enable.auto.commit": False, "enable.partition.eof": True},
            )
        )
        try:
            return self._read_to_end(consumer)
        except KafkaException as exc:
            raise CheckpointUnavailableError(f"cannot read offsets topic {self.config.topic}: {exc}") from exc
        finally:
            consumer.close()

    def _read_to_end(self, consumer: Consumer) -> dict[str, Checkpoint]:
        metadata = consumer.list_topics(self.config.topic, timeout=self.config.timeout_s)
        numbers = sorted(metadata.topics[self.config.topic].partitions)
        assignment = []
        for number in numbers:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(self.config.topic, number), timeout=self.config.timeout_s
            )
            if high > low:
                assignment.append(TopicPartition(self.config.topic, number, low))
        latest: dict[str, bytes | None] = {}
        remaining = {tp.partition for tp in assignment}
        consumer.assign(assignment)
        while remaining:
            message = consumer.poll(self.config.timeout_s)
            if message is None:
                raise CheckpointUnavailableError(f"offsets topic {self.config.topic} stopped answering while loading")
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    remaining.discard(message.partition() or 0)
                    continue
                raise CheckpointUnavailableError(f"reading offsets topic failed: {error.str()}")
            try:
                pipeline, partition_id = json.loads(message.key() or b"null")
            except (TypeError, ValueError):
                continue  # not a cdcflow key: someone else's record in a shared topic
            if pipeline == self.context.pipeline:
                latest[partition_id] = message.value()
        checkpoints = {}
        for partition_id, value in latest.items():
            if value is None:
                continue  # a reset
            try:
                checkpoints[partition_id] = Checkpoint.from_json(json.loads(value))
            except (ValueError, KeyError, TypeError) as exc:
                raise CheckpointCorruptError(
                    f"offsets topic {self.config.topic}: checkpoint of {partition_id} cannot be read: {exc}"
                ) from exc
        return checkpoints

    def _send(self, values: Mapping[str, bytes | None]) -> None:
        producer = self._producer
        assert producer is not None, "open() first"
        failures: list[Any] = []

        def on_delivery(error: KafkaError | None, message: Any) -> None:
            if error is not None:
                failures.append(error)

        for partition_id, value in values.items():
            producer.produce(self.config.topic, key=self._key(partition_id), value=value, on_delivery=on_delivery)
        remaining = producer.flush(self.config.timeout_s)
        if remaining or failures:
            raise CheckpointUnavailableError(
                f"offsets topic {self.config.topic}: {len(failures)} failed, {remaining} unconfirmed"
            )

    def commit(self, checkpoints: Mapping[str, Checkpoint]) -> None:
        self._send({pid: json.dumps(c.to_json(), sort_keys=True).encode() for pid, c in checkpoints.items()})

    def reset(self, partition_ids: Sequence[str] | None = None) -> None:
        targets = list(partition_ids) if partition_ids is not None else list(self.load())
        self._send(dict.fromkeys(targets))
