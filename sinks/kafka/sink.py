"""The ``kafka`` sink: an idempotent producer; ``flush`` returns only when every delivery report is in.

A delete is followed by a tombstone (the same key, a null value) unless ``tombstones_on_delete`` is
off, so a compacted topic forgets deleted keys (Debezium's relational connectors do the same).
The tombstone is written once the broker took the delete, never before: a delete it refuses goes
to the dead letters with its tombstone, and the topic keeps the key (:class:`_HeldDelete`).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from pydantic import Field, model_validator

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
from cdcflow.sinks.kafka.exceptions import TombstoneWithheldError

__all__ = ["KafkaSink", "KafkaSinkConfig"]

TOMBSTONE_HEADERS: tuple[tuple[str, str | bytes | None], ...] = ((TOMBSTONE_HEADER, "after-delete"),)

Headers = list[tuple[str, str | bytes | None]]

_TOMBSTONE_HEADER_LIST: Headers = list(TOMBSTONE_HEADERS)  # what produce() takes; never changed

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

    @model_validator(mode="after")
    def _tombstones_need_delivery_reports(self) -> KafkaSinkConfig:
        if self.tombstones_on_delete and str(self.producer.get("delivery.report.only.error", "")).lower() == "true":
            raise ValueError(
                "producer.delivery.report.only.error cannot be true while tombstones_on_delete is on: a "
                "tombstone is written when its delete's delivery report says the broker took it"
            )
        return self

    @classmethod
    def nested_plugin_sections(cls, section: Mapping[str, Any]) -> list[NestedPluginSection]:
        return converter_plugin_sections(cls, section)


@dataclass(slots=True)
class _Outgoing:
    """A message for the producer, and what its dead letter is made of if Kafka refuses it at once:
    the record, or the event ``event`` of a compact batch (built only then)."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: Headers | None
    origin: Record | EventBatch
    event: int
    tombstone_follows: bool

    def record(self) -> Record:
        return self.origin.record(self.event) if isinstance(self.origin, EventBatch) else self.origin


@dataclass(slots=True)
class _HeldDelete:
    """A delete produced and not yet answered. Its tombstone waits for the broker's answer (written
    if it took the delete, a dead letter beside the delete's if it refused it), and so does every
    later message with the same key (``parked``, in order): none may overtake the tombstone, or
    compaction would drop it."""

    topic: str
    key: bytes | None
    answered: deque[_HeldDelete]  # the sink's: where the delivery report puts this delete
    error: KafkaError | None = None
    refused: ChangeEvent | None = None  # what Kafka refused, as a dead letter
    parked: list[_Outgoing] = field(default_factory=list)

    def on_delivery(self, error: KafkaError | None, message: Message) -> None:
        """The delete's delivery report, served by the producer's poll or flush."""
        if error is not None:
            self.error = error
            self.refused = _refused_message(message)
        self.answered.append(self)


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
        # Deletes awaiting their delivery report, by key (one per key: the next waits in ``parked``),
        # and those answered, in the order the answers came, for _release_answered.
        self._held: dict[bytes | None, _HeldDelete] = {}
        self._answered: deque[_HeldDelete] = deque()

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
                # Reports for successes only when a tombstone waits on its delete's (success
                # reports cost 0.1-0.25 us of CPU a message; failures are all the flush needs).
                "delivery.report.only.error": not self.config.tombstones_on_delete,
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
            headers: Headers | None = list(record.headers.items()) if record.headers else None
            tombstone_follows = value is not None and self._wants_tombstone(record)
            if not self._produced_at_once(producer, topic, key, value, headers, tombstone_follows):
                self._send(producer, _Outgoing(topic, key, value, headers, record, -1, tombstone_follows), rejected)
        producer.poll(0)
        self._release_answered(producer, rejected)
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
        produce, produced_at_once, held = producer.produce, self._produced_at_once, self._held
        tables, events, keys, values, headers = encoded
        last = len(values) - 1
        for index, value in enumerate(values):
            if value is None:
                continue  # the tombstone after the delete before it: _release_answered writes it
            topic, key, event_headers = topics[tables[index]], keys[index], headers[index]
            tombstone_follows = index < last and values[index + 1] is None
            if not tombstone_follows and not (held and key in held):
                # Most messages: _produced_at_once's plain case, without a call per message.
                try:
                    produce(topic, value=value, key=key, headers=event_headers)
                    continue
                except (BufferError, KafkaException):
                    pass
            elif produced_at_once(producer, topic, key, value, event_headers, tombstone_follows):
                continue
            message = _Outgoing(topic, key, value, event_headers, batch, events[index], tombstone_follows)
            self._send(producer, message, rejected)
        producer.poll(0)
        self._release_answered(producer, rejected)
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

    def _produced_at_once(
        self,
        producer: Producer,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None,
        tombstone_follows: bool,
    ) -> bool:
        """The common case, kept short: produce a message whose key waits on no delete (holding it
        if it is a delete); False if it must go through :meth:`_send` instead (its key waits, the
        producer's buffer is full, or Kafka refused it at once)."""
        held = self._held
        if held and key in held:
            return False
        try:
            if tombstone_follows:
                delete = _HeldDelete(topic, key, self._answered)
                producer.produce(topic, value=value, key=key, headers=headers, on_delivery=delete.on_delivery)
                held[key] = delete
            else:
                producer.produce(topic, value=value, key=key, headers=headers)
        except (BufferError, KafkaException):
            return False
        return True

    def _send(self, producer: Producer, message: _Outgoing, rejected: list[Rejected]) -> None:
        """Produce ``message``, or park it behind the delete of its key still awaiting an answer; a
        delete is held until its answer (its tombstone waits for it)."""
        waiting = self._held.get(message.key)
        if waiting is not None:
            waiting.parked.append(message)
            return
        delete = _HeldDelete(message.topic, message.key, self._answered) if message.tombstone_follows else None
        on_delivery = None if delete is None else delete.on_delivery
        refusal = self._produce(producer, message.topic, message.key, message.value, message.headers, on_delivery)
        if refusal is not None:
            record = message.record()
            rejected.append(Rejected(record, RecordRejectedError(refusal.str()), "sink"))
            if delete is not None:
                source = record.source if isinstance(record, ChangeEvent) else _kafka_source(message.topic, None)
                rejected.append(_withheld_tombstone(message.topic, message.key, source, refusal))
        elif delete is not None:
            self._held[message.key] = delete

    def _produce(
        self,
        producer: Producer,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None,
        on_delivery: Any = None,
    ) -> KafkaError | None:
        """Hand one message to the producer, waiting while its buffer is full; the error if Kafka
        refused the message at once, for good."""
        while True:
            try:
                # Without ``on_delivery`` the sink's own callback reports it (failures, and
                # successes only while tombstones wait on them).
                producer.produce(topic, value=value, key=key, headers=headers, on_delivery=on_delivery)
                return None
            except BufferError:
                # The producer's buffer is full: wait for deliveries. This is the backpressure
                # that bounds memory while the broker is slow or down.
                producer.poll(0.05)
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if isinstance(error, KafkaError) and error.code() in _RECORD_IS_AT_FAULT:
                    return error
                if isinstance(error, KafkaError) and error.fatal():
                    self._replace_producer()
                raise SinkUnavailableError(f"Kafka refused a record for {topic}: {exc}") from exc

    def _on_delivery(self, error: KafkaError | None, message: Message) -> None:
        if error is None:
            return
        if error.code() in _RECORD_IS_AT_FAULT:
            self._rejected.append(Rejected(_refused_message(message), RecordRejectedError(error.str()), "sink"))
        else:
            self._undelivered.append(error)

    def _release_answered(self, producer: Producer, rejected: list[Rejected]) -> None:
        """For each delete the broker answered: its tombstone if it took the delete, both as dead
        letters if it refused it; then the messages parked behind it, in order (a parked delete is
        held in turn)."""
        while self._answered:
            delete = self._answered.popleft()
            if self._held.get(delete.key) is not delete:
                continue  # a report from a producer since replaced: its deletes are written again
            del self._held[delete.key]
            error = delete.error
            if error is None:
                try:
                    producer.produce(delete.topic, key=delete.key, headers=_TOMBSTONE_HEADER_LIST)
                except (BufferError, KafkaException):
                    refusal = self._produce(producer, delete.topic, delete.key, None, _TOMBSTONE_HEADER_LIST)
                    if refusal is not None:
                        tombstone = _tombstone_dead_letter(delete.topic, delete.key, _kafka_source(delete.topic, None))
                        rejected.append(Rejected(tombstone, RecordRejectedError(refusal.str()), "sink"))
            elif error.code() in _RECORD_IS_AT_FAULT and delete.refused is not None:
                rejected.append(Rejected(delete.refused, RecordRejectedError(error.str()), "sink"))
                rejected.append(_withheld_tombstone(delete.topic, delete.key, delete.refused.source, error))
            else:
                # Not delivered (timed out, fenced...): the flush fails, and everything since the
                # last checkpoint, what was parked behind this delete too, is written again.
                self._undelivered.append(error)
                continue
            parked = delete.parked  # all of this key: once one of them is held, the rest wait on it
            for position, message in enumerate(parked):
                self._send(producer, message, rejected)
                now_waiting = self._held.get(delete.key)
                if now_waiting is not None:
                    now_waiting.parked = parked[position + 1 :]
                    break

    def flush(self) -> list[Rejected]:
        producer = self._producer
        assert producer is not None, "open() first"
        while True:
            while producer.flush(1.0) > 0:
                pass  # librdkafka retries until message.timeout.ms; each report lands in a callback
            # Every delete is answered now: write the tombstones and what waited behind them.
            released = bool(self._answered)
            self._release_answered(producer, self._rejected)
            if self._undelivered:
                count, first = len(self._undelivered), self._undelivered[0]
                if any(e.fatal() for e in self._undelivered):
                    self._replace_producer()
                self._forget_unflushed()  # they will be re-read from the checkpoint and written again
                raise SinkDeliveryError(f"{count} records were not delivered to Kafka (first: {first.str()})")
            if not released:
                break
        if self._held:
            # Only a producer that reports no successes leaves a delete unanswered here (the config
            # refuses that); its tombstone and the messages behind it are written again.
            count = len(self._held)
            self._forget_unflushed()
            raise SinkDeliveryError(f"{count} deletes got no delivery report; their tombstones are not written")
        rejected, self._rejected = self._rejected, []
        return rejected

    def _forget_unflushed(self) -> None:
        self._rejected.clear()
        self._undelivered.clear()
        self._held.clear()
        self._answered.clear()

    def _replace_producer(self) -> None:
        # An idempotent producer that hit a fatal error (a broken sequence) accepts nothing more;
        # a new one starts a new producer id, and the pipeline replays from its checkpoint. The
        # old one's reports never come: the deletes it held are written again too.
        log.warning("Kafka producer hit a fatal error; creating a new one")
        self._held.clear()
        self._answered.clear()
        self._producer = Producer(self._settings())

    def close(self) -> None:
        if self._producer is not None:
            # Whatever is still queued (or parked) was never acknowledged to the pipeline, so it
            # will be replayed; a short flush just avoids needless duplicates.
            self._producer.flush(5.0)
            self._producer = None
            self._forget_unflushed()


def _kafka_source(topic: str, partition: int | None) -> SourceInfo:
    """Where a message Kafka refused was going, as its dead letter's source."""
    return SourceInfo("kafka", topic, "", "", "" if partition is None else str(partition), {}, 0)


def _refused_message(message: Message) -> ChangeEvent:
    """A message the broker refused, as its dead letter: the bytes it refused, since the record
    itself is no longer held."""
    produced = message.headers() or []
    pairs = produced.items() if isinstance(produced, dict) else produced
    headers = {name: v.decode("utf-8", "replace") if isinstance(v, bytes) else v or "" for name, v in pairs}
    topic = message.topic() or ""
    source = _kafka_source(topic, message.partition())
    return raw_bytes_event(message.key(), message.value(), source, message.topic(), headers or None)


def _tombstone_dead_letter(topic: str, key: bytes | None, source: SourceInfo) -> ChangeEvent:
    """A tombstone as a dead letter: the key, a null value, the tombstone header."""
    return raw_bytes_event(key, None, source, topic, {TOMBSTONE_HEADER: "after-delete"})


def _withheld_tombstone(topic: str, key: bytes | None, source: SourceInfo, refusal: KafkaError) -> Rejected:
    """The tombstone of a delete Kafka refused, on its way to the dead letters."""
    error = TombstoneWithheldError(f"not written: Kafka refused the delete it follows ({refusal.str()})")
    return Rejected(_tombstone_dead_letter(topic, key, source), error, "sink")
