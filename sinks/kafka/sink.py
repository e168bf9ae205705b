"""The ``kafka`` sink: an idempotent producer; ``flush`` returns only when every delivery report is in.

A delete is followed by a tombstone (the same key, a null value) unless ``tombstones_on_delete`` is
off, so a compacted topic forgets deleted keys (Debezium's relational connectors do the same).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from pydantic import Field

from cdcflow.batches import EventBatch
from cdcflow.contract import Converter, NestedPluginSection, PluginConfig, PluginContext, Rejected, Sink
from cdcflow.converters import SubjectNameStrategy, converter_from_fields, converter_plugin_sections
from cdcflow.errors import (
    ConverterError,
    RecordRejectedError,
    SinkDeliveryError,
    SinkUnavailableError,
    TransientError,
)
from cdcflow.events import ChangeEvent, Op, Record, SourceInfo, raw_bytes_event
from cdcflow.kafka_client import TOMBSTONE_HEADER, KafkaClientConfig
from cdcflow.pipeline import DEAD_LETTER_STAGE_HEADER
from cdcflow.schemas import DecimalHandling

__all__ = ["KafkaSink", "KafkaSinkConfig"]

TOMBSTONE_HEADERS: tuple[tuple[str, str | bytes | None], ...] = ((TOMBSTONE_HEADER, "after-delete"),)

log = logging.getLogger("cdcflow.sinks.kafka")

# Errors that no retry will cure for this record: it goes to the dead letters instead of being replayed.
_RECORD_IS_AT_FAULT = {
    KafkaError.MSG_SIZE_TOO_LARGE,
    KafkaError.INVALID_RECORD,
    KafkaError.RECORD_LIST_TOO_LARGE,
    KafkaError.INVALID_MSG,
    KafkaError.INVALID_MSG_SIZE,
}


class KafkaSinkConfig(PluginConfig):
    bootstrap_servers: str = Field(description="host:port[,host:port...]")
    kafka: KafkaClientConfig = Field(
        default_factory=KafkaClientConfig, description="security and client settings (SASL, TLS, passthrough)"
    )
    converter: str | dict[str, Any] = Field(default="json", description="json, avro, or {type: ..., ...}")
    schema_registry_url: str | None = Field(default=None, description="for the avro converter")
    schema_registry: dict[str, str | int | float | bool] = Field(
        default_factory=dict,
        description="for the avro converter: confluent-kafka SchemaRegistryClient settings (url, "
        "basic.auth.user.info, bearer.auth.*, ssl.*, timeout...); secrets as ${ENV}",
    )
    subject_name_strategy: SubjectNameStrategy | None = Field(
        default=None, description="for the avro converter: topic (default), record or topic_record"
    )
    decimal_handling: DecimalHandling | None = Field(
        default=None, description="precise (default), double or string: how decimals are written"
    )
    tombstones_on_delete: bool = Field(
        default=True, description="follow each delete with a tombstone (same key, null value) for log compaction"
    )
    topic: str | None = Field(default=None, description="write every record here instead of its own topic")
    compression: str = Field(default="lz4", pattern="^(none|gzip|snappy|lz4|zstd)$")
    linger_ms: int = Field(default=5, ge=0)
    buffer_max_kbytes: int = Field(default=65536, ge=1024, description="producer memory bound; writes block past it")
    delivery_timeout_ms: int = Field(
        default=300_000, ge=1000, description="how long the producer retries a record before the flush fails"
    )
    producer: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="extra librdkafka producer settings (worker engine and Spark tasks)"
    )

    @classmethod
    def nested_plugin_sections(cls, section: Mapping[str, Any]) -> list[NestedPluginSection]:
        return converter_plugin_sections(cls, section)


class KafkaSink(Sink[KafkaSinkConfig]):
    """``kafka``: topic ``<cluster>.<keyspace>.<table>`` by default (``route`` renames it), key =
    the primary key, value = the converter's encoding, a tombstone after each delete; delivery is
    idempotent and ``acks=all``."""

    type_name = "kafka"
    config_model = KafkaSinkConfig

    def __init__(self, config: KafkaSinkConfig, context: PluginContext) -> None:
        super().__init__(config, context)
        self.converter: Converter[Any] = converter_from_fields(
            config.converter,
            config.schema_registry_url,
            context,
            schema_registry=config.schema_registry,
            subject_name_strategy=config.subject_name_strategy,
            decimal_handling=config.decimal_handling,
        )
        self._producer: Producer | None = None
        self._rejected: list[Rejected] = []
        self._undelivered: list[KafkaError] = []

    def _settings(self) -> dict[str, Any]:
        return self.config.kafka.librdkafka_settings(
            self.config.bootstrap_servers,
            {
                "enable.idempotence": True,
                "acks": "all",
                # With several requests in flight, a first batch to a new partition that fails with
                # NOT_LEADER can be "implicitly acked" by the next batch's success and silently lost
                # (librdkafka; confluent-kafka-go#921). One request in flight closes that window.
                "max.in.flight.requests.per.connection": 1,
                "compression.type": self.config.compression,
                "linger.ms": self.config.linger_ms,
                "queue.buffering.max.kbytes": self.config.buffer_max_kbytes,
                "message.timeout.ms": self.config.delivery_timeout_ms,
                # Reports only for failures: a report per delivered record costs more than
                # producing it, and failures are all the flush needs to know about.
                "delivery.report.only.error": True,
                "on_delivery": self._on_delivery,
                **self.config.producer,
            },
        )

    def open(self) -> None:
        try:
            self._producer = Producer(self._settings())
        except KafkaException as exc:
            raise SinkUnavailableError(
                f"cannot create a Kafka producer for {self.config.bootstrap_servers}: {exc}"
            ) from exc

    def check_reachable(self, timeout_s: float) -> None:
        self.config.kafka.check_reachable(self.config.bootstrap_servers, timeout_s, self.context.field_path or "sink")

    def write(self, records: Sequence[Record]) -> list[Rejected]:
        producer = self._producer
        assert producer is not None, "open() first"
        rejected: list[Rejected] = []
        fixed_topic = self.config.topic
        for record in records:
            topic = fixed_topic or record.destination()
            try:
                key = self.converter.serialize_key(record, topic)
                value = self.converter.serialize_value(record, topic)
            except ConverterError as exc:
                if isinstance(exc, TransientError):
                    raise  # the registry is down: retried with the batch, not a bad record
                rejected.append(Rejected(record, exc, "convert"))
                continue
            headers: list[tuple[str, str | bytes | None]] | None = (
                list(record.headers.items()) if record.headers else None
            )
            self._produce(producer, topic, key, value, headers, record, rejected)
            if value is not None and self._wants_tombstone(record):
                self._produce(producer, topic, key, None, list(TOMBSTONE_HEADERS), record, rejected)
        producer.poll(0)
        return rejected

    @property
    def takes_event_batches(self) -> bool:
        return self.converter.serializes_event_batches

    def write_event_batch(self, batch: EventBatch) -> list[Rejected] | None:
        producer = self._producer
        assert producer is not None, "open() first"
        topics = [self.config.topic or table.destination() for table in batch.tables]
        encoded = self.converter.serialize_event_batch(batch, topics, self.config.tombstones_on_delete)
        if encoded is None:
            return None
        rejected: list[Rejected] = []
        produce = producer.produce
        for table, event, key, value, event_headers in zip(*encoded, strict=True):
            headers = event_headers if value is not None else list(TOMBSTONE_HEADERS)
            try:
                produce(topics[table], value=value, key=key, headers=headers)
            except (BufferError, KafkaException):
                # Backpressure or a refusal: the per-record path, with the event built for it.
                self._produce(producer, topics[table], key, value, headers, batch.record(event), rejected)
        producer.poll(0)
        return rejected

    def _wants_tombstone(self, record: Record) -> bool:
        return (
            self.config.tombstones_on_delete
            and isinstance(record, ChangeEvent)
            and record.op is Op.DELETE
            and bool(record.key)
            # A dead letter (this sink as errors.dead_letter) is a record that failed, not a delete.
            and not (record.headers and DEAD_LETTER_STAGE_HEADER in record.headers)
        )

    def _produce(
        self,
        producer: Producer,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, str | bytes | None]] | None,
        record: Record,
        rejected: list[Rejected],
    ) -> None:
        while True:
            try:
                # No per-record callback: with failure-only reports librdkafka never calls it for a
                # delivered record, and confluent-kafka would then keep it (and the record) forever.
                producer.produce(topic, value=value, key=key, headers=headers)
                return
            except BufferError:
                # The producer's buffer is full: wait for deliveries. This is the backpressure
                # that bounds memory while the broker is slow or down.
                producer.poll(0.05)
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if isinstance(error, KafkaError) and error.code() in _RECORD_IS_AT_FAULT:
                    rejected.append(Rejected(record, RecordRejectedError(error.str()), "sink"))
                    return
                if isinstance(error, KafkaError) and error.fatal():
                    self._replace_producer()
                raise SinkUnavailableError(f"Kafka refused a record for {topic}: {exc}") from exc

    def _on_delivery(self, error: KafkaError | None, message: Message) -> None:
        if error is None:
            return
        if error.code() in _RECORD_IS_AT_FAULT:
            # The broker refused this record for good; what reaches the dead letters is the bytes
            # it refused, since the record itself is no longer held.
            produced = message.headers() or []
            pairs = produced.items() if isinstance(produced, dict) else produced
            headers = {name: v.decode("utf-8", "replace") if isinstance(v, bytes) else v or "" for name, v in pairs}
            source = SourceInfo("kafka", message.topic() or "", "", "", str(message.partition()), {}, 0)
            raw = raw_bytes_event(message.key(), message.value(), source, message.topic(), headers or None)
            self._rejected.append(Rejected(raw, RecordRejectedError(error.str()), "sink"))
        else:
            self._undelivered.append(error)

    def flush(self) -> list[Rejected]:
        producer = self._producer
        assert producer is not None, "open() first"
        while producer.flush(1.0) > 0:
            pass  # librdkafka retries until message.timeout.ms; each report lands in _on_delivery
        if self._undelivered:
            count, first = len(self._undelivered), self._undelivered[0]
            if any(e.fatal() for e in self._undelivered):
                self._replace_producer()
            self._undelivered.clear()
            self._rejected.clear()  # they will be re-read from the checkpoint and rejected again
            raise SinkDeliveryError(f"{count} records were not delivered to Kafka (first: {first.str()})")
        rejected, self._rejected = self._rejected, []
        return rejected

    def _replace_producer(self) -> None:
        # An idempotent producer that hit a fatal error (a broken sequence) accepts nothing more;
        # a new one starts a new producer id, and the pipeline replays from its checkpoint.
        log.warning("Kafka producer hit a fatal error; creating a new one")
        self._producer = Producer(self._settings())

    def close(self) -> None:
        if self._producer is not None:
            # Whatever is still queued was never acknowledged to the pipeline, so it will be
            # replayed; a short flush just avoids needless duplicates.
            self._producer.flush(5.0)
            self._producer = None
