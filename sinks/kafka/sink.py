"""The ``kafka`` sink: an idempotent producer; ``flush`` returns only when every delivery report is in.

A delete is followed by a tombstone (the same key, a null value) unless ``tombstones_on_delete`` is
off, so a compacted topic forgets deleted keys (Debezium's relational connectors do the same).
The tombstone is written once the broker took the delete, never before: it waits for a flush of
the producer (:class:`_PendingTombstone`), after which every delivery report is in; a delete the
broker refused goes to the dead letters with its tombstone, and the topic keeps the key.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message
from pydantic import Field

from cdcflow.batches import EventBatch
from cdcflow.capabilities import SerializesEventBatches, serializes_event_batches
from cdcflow.contract import Converter, NestedPluginSection, PluginConfig, PluginContext, Rejected, Sink
from cdcflow.converters import SubjectNameStrategy, converter_from_fields, converter_plugin_sections
from cdcflow.errors import (
    ConverterError,
    RecordRejectedError,
    SinkDeliveryError,
    SinkUnavailableError,
    TransactionFencedError,
    TransientError,
)
from cdcflow.events import ChangeEvent, Op, Record, SourceInfo, raw_bytes_event
from cdcflow.kafka_client import TOMBSTONE_HEADER, KafkaClientConfig
from cdcflow.prerequisites import CheckResult, PrerequisiteScope
from cdcflow.record_errors import CONVERT_STAGE, DEAD_LETTER_STAGE_HEADER, SINK_STAGE
from cdcflow.schemas import DecimalHandling
from cdcflow.sinks.kafka.exceptions import RecordRefusedInTransactionError, TombstoneWithheldError
from cdcflow.sinks.kafka.prerequisites import check_sink_topics
from cdcflow.sinks.kafka.producer import KafkaProducer, ProducerFactory, ProducerWrites, confluent_producer
from cdcflow.transactions import Delivery, TransactionDomain

__all__ = ["KafkaSink", "KafkaSinkConfig", "ProducerLane", "kafka_domain"]

TOMBSTONE_HEADERS: tuple[tuple[str, str | bytes | None], ...] = ((TOMBSTONE_HEADER, "after-delete"),)

Headers = list[tuple[str, str | bytes | None]]

_TOMBSTONE_HEADER_LIST: Headers = list(TOMBSTONE_HEADERS)  # what produce() takes; never changed

# What a held message takes besides its bytes: its _Outgoing (88 bytes, sys.getsizeof on CPython
# 3.11) and its slot in the held list; it counts when many small messages are held.
_HELD_MESSAGE_OVERHEAD = 96

# Past this many bytes of held messages, a write ends by writing the pending tombstones (and what
# waits behind them) instead of leaving them to the checkpoint. A held message costs several times
# a plain one (kept alive, produced later from Python), and the longer the wait the more messages
# find their key's tombstone pending: datagen -> kafka (json, 10,000 keys) went from 8.2 to 7.4 us of
# main-thread CPU an event (10% deletes, 1 KB) and from 10.8 to 8.1 (50% deletes, 256 B) with 64 MiB
# -> 256 KiB, the wall time spent in these flushes falling too (docs/kafka-sink.md).
_HELD_BYTES_BEFORE_TOMBSTONES = 256 * 1024

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
    delivery: Delivery = Field(
        default="at_least_once",
        description="exactly_once: each checkpoint interval's records and its checkpoint in one Kafka "
        "transaction (needs checkpoint type kafka on the same cluster; read_committed consumers see each "
        "change once); at_least_once: an idempotent producer, a crash replays what followed the last checkpoint",
    )

    def transaction_domain(self) -> TransactionDomain:
        return kafka_domain(self.bootstrap_servers)

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
class _PendingTombstone:
    """The tombstone of a keyed delete, written once a flush of the producer has served every
    delivery report (at the checkpoint's ``flush``, or at the end of a write once messages wait
    behind pending tombstones): if none came for the delete, the broker took it; if one did, the
    delete and this tombstone go to the dead letters together. Every later message of the same
    topic and key waits in ``held``, in write order, and is produced right after the tombstone:
    none may reach Kafka before it, or compaction would keep the tombstone and drop the key's
    newer value."""

    topic: str
    key: bytes | None
    error: KafkaError | None = None
    refused: ChangeEvent | None = None  # what Kafka refused, as a dead letter
    held: list[_Outgoing] = field(default_factory=list)

    def on_delivery(self, error: KafkaError | None, message: Message) -> None:
        """The delete's own delivery report, served by the producer's poll or flush; with
        ``delivery.report.only.error`` (the default) only for a delete Kafka did not take."""
        if error is not None:
            self.error = error
            self.refused = _refused_message(message)


@dataclass(eq=False)
class ProducerLane:
    """A producer and what its deliveries reported since the last flush: the sink's own, or with
    ``delivery: exactly_once`` one a checkpoint store lends for a transaction unit (a bucket),
    which the store opens, commits and aborts (:mod:`cdcflow.transactions`). Every sink writing
    into a lane (the pipeline's, and a Kafka dead-letter sink) shares what it holds."""

    transactional: bool = False
    producer: ProducerWrites = field(init=False)  # what the sink writes through
    client: KafkaProducer = field(init=False)  # the producer itself (a store's to fence, begin, commit)
    rejected: list[Rejected] = field(default_factory=list)
    undelivered: list[KafkaError] = field(default_factory=list)
    # Tombstones waiting for a flush of the producer, by (topic, key), in the order of their deletes; one per
    # topic and key (a later delete of the key is held behind the first).
    pending: dict[tuple[str, bytes | None], _PendingTombstone] = field(default_factory=dict)
    # What the messages held behind pending tombstones take in memory.
    held_bytes: int = 0
    in_transaction: bool = False  # the store's: a transaction is begun and not yet ended
    refused_in_transaction: KafkaError | None = None

    def on_delivery(self, error: KafkaError | None, message: Message) -> None:
        """The producer's failure reports (``delivery.report.only.error``)."""
        if error is None:
            return
        if error.code() not in _RECORD_IS_AT_FAULT:
            self.undelivered.append(error)
        elif self.transactional:
            # librdkafka fails the whole produce request, and the transaction with it: the
            # record cannot be set aside inside it (see RecordRefusedInTransactionError).
            self.refused_in_transaction = self.refused_in_transaction or error
            self.undelivered.append(error)
        else:
            self.rejected.append(Rejected(_refused_message(message), RecordRejectedError(error.str()), SINK_STAGE))

    def forget(self) -> None:
        self.rejected.clear()
        self.undelivered.clear()
        self.pending.clear()
        self.held_bytes = 0
        self.refused_in_transaction = None


class _FenceAwareProducer:
    """A transactional producer as the sink writes through it: ``poll`` and ``flush`` raise
    :class:`TransactionFencedError` once it is fenced. (confluent-kafka raises a fatal error from
    inside them instead of calling ``error_cb``, and serves the delivery reports that follow with
    that exception set, which turns it into a SystemError: Producer.c and confluent_kafka.c,
    error_cb and dr_msg_cb.)"""

    def __init__(self, client: KafkaProducer) -> None:
        self.client = client
        self.produce = client.produce

    def poll(self, timeout: float = -1) -> int:
        try:
            return self.client.poll(timeout)
        except (KafkaException, SystemError) as exc:
            fenced = _fence_in(exc)
            if fenced is None:
                raise
            raise fenced from exc

    def flush(self, timeout: float = -1) -> int:
        try:
            return self.client.flush(timeout)
        except (KafkaException, SystemError) as exc:
            fenced = _fence_in(exc)
            if fenced is None:
                raise
            raise fenced from exc


def _fence_in(exc: Exception) -> TransactionFencedError | None:
    """The fence a transactional producer's poll or flush raised (its fatal error), if it was one."""
    kafka = exc if isinstance(exc, KafkaException) else exc.__cause__
    error = kafka.args[0] if isinstance(kafka, KafkaException) and kafka.args else None
    if isinstance(error, KafkaError) and error.fatal():
        return TransactionFencedError(f"the transactional producer was fenced: {error.str()}")
    return None


def kafka_domain(bootstrap_servers: str) -> TransactionDomain:
    """A Kafka cluster as a transaction domain: its bootstrap addresses."""
    return TransactionDomain("kafka", frozenset(a.strip() for a in bootstrap_servers.split(",") if a.strip()))


class KafkaSink(Sink[KafkaSinkConfig]):
    """``kafka``: topic ``<cluster>.<keyspace>.<table>`` by default (``route`` renames it), key =
    the primary key, value = the converter's encoding, a tombstone after each delete; delivery is
    idempotent and ``acks=all``."""

    type_name = "kafka"
    config_model = KafkaSinkConfig

    def __init__(
        self, config: KafkaSinkConfig, context: PluginContext, producer_factory: ProducerFactory = confluent_producer
    ) -> None:
        super().__init__(config, context)
        # The seam for unit tests of this sink's logic (cdcflow.sinks.kafka.producer).
        self._producer_factory = producer_factory
        self.converter: Converter[Any] = converter_from_fields(
            config.converter,
            config.schema_registry_url,
            context,
            schema_registry=config.schema_registry,
            subject_name_strategy=config.subject_name_strategy,
            decimal_handling=config.decimal_handling,
        )
        # The producer written into and its delivery state: the sink's own (at least once), or the
        # lane of the transaction unit being written (exactly once; see write_into).
        self._lane: ProducerLane | None = None

    # The lane's state under the names the write path uses.
    @property
    def _producer(self) -> ProducerWrites | None:
        return None if self._lane is None else self._lane.producer

    @property
    def _rejected(self) -> list[Rejected]:
        return self._current_lane().rejected

    @_rejected.setter
    def _rejected(self, value: list[Rejected]) -> None:
        self._current_lane().rejected = value

    @property
    def _undelivered(self) -> list[KafkaError]:
        return self._current_lane().undelivered

    @property
    def _pending(self) -> dict[tuple[str, bytes | None], _PendingTombstone]:
        return self._current_lane().pending

    @_pending.setter
    def _pending(self, value: dict[tuple[str, bytes | None], _PendingTombstone]) -> None:
        self._current_lane().pending = value

    @property
    def _held_bytes(self) -> int:
        return self._current_lane().held_bytes

    @_held_bytes.setter
    def _held_bytes(self, value: int) -> None:
        self._current_lane().held_bytes = value

    def _current_lane(self) -> ProducerLane:
        lane = self._lane
        assert lane is not None, "open() first (with delivery: exactly_once, write_into() first)"
        return lane

    def _settings(self, on_delivery: Any) -> dict[str, Any]:
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
                # producing it, and failures are all the flush and the tombstones need. (This
                # setting is confluent-kafka's own: librdkafka still reports every message to
                # its C callback, which frees the message's state and skips Python for a
                # success, so a delete's own on_delivery costs nothing when it is delivered;
                # confluent-kafka-python src/confluent_kafka/src/confluent_kafka.c,
                # producer_conf_set_special, and Producer.c, dr_msg_cb.)
                "delivery.report.only.error": True,
                "on_delivery": on_delivery,
                **self.config.producer,
            },
        )

    def open(self) -> None:
        if self.config.delivery == "exactly_once":
            return  # it writes into the lanes the checkpoint store lends (write_into)
        self._lane = self._own_lane()

    def _own_lane(self) -> ProducerLane:
        lane = ProducerLane()
        try:
            lane.client = lane.producer = self._producer_factory(self._settings(lane.on_delivery))
        except KafkaException as exc:
            raise SinkUnavailableError(
                f"cannot create a Kafka producer for {self.config.bootstrap_servers}: {exc}"
            ) from exc
        return lane

    # --- exactly once (cdcflow.transactions.TransactionalSink) ----------------------------------

    def new_transaction_lane(self, transactional_id: str, timeout_s: float) -> ProducerLane:
        """A transactional producer with this sink's settings, for a checkpoint store to fence
        with and to run the transactions of one unit in."""
        timeout_ms = int(timeout_s * 1000)
        lane = ProducerLane(transactional=True)
        settings = self._settings(lane.on_delivery)
        settings["transactional.id"] = transactional_id
        settings["transaction.timeout.ms"] = timeout_ms
        # librdkafka refuses a message timeout past the transaction's: a record still undelivered
        # then fails the flush, and the transaction is aborted.
        settings["message.timeout.ms"] = min(int(settings["message.timeout.ms"]), timeout_ms)
        try:
            lane.client = self._producer_factory(settings)
        except KafkaException as exc:
            raise SinkUnavailableError(
                f"cannot create a transactional Kafka producer for {self.config.bootstrap_servers}: {exc}"
            ) from exc
        lane.producer = _FenceAwareProducer(lane.client)
        return lane

    def write_into(self, lane: ProducerLane) -> None:
        self._lane = lane

    def check_reachable(self, timeout_s: float) -> None:
        self.config.kafka.check_reachable(self.config.bootstrap_servers, timeout_s, self.context.field_path or "sink")

    def check_prerequisites(self, scope: PrerequisiteScope) -> Sequence[CheckResult]:
        if not scope.thorough:  # the first write tells soon enough
            return ()
        return [*check_sink_topics(self.config, scope), *self.converter.check_prerequisites(scope)]

    def write(self, records: Sequence[Record]) -> list[Rejected]:
        producer = self._producer
        assert producer is not None, "open() first"
        rejected: list[Rejected] = []
        fixed_topic, pending = self.config.topic, self._pending
        for record in records:
            topic = fixed_topic or record.destination()
            try:
                key = self.converter.serialize_key(record, topic)
                value = self.converter.serialize_value(record, topic)
            except ConverterError as exc:
                if isinstance(exc, TransientError):
                    raise  # the registry is down: retried with the batch, not a bad record
                rejected.append(Rejected(record, exc, CONVERT_STAGE))
                continue
            headers: Headers | None = list(record.headers.items()) if record.headers else None
            tombstone_follows = value is not None and self._wants_tombstone(record)
            waits = bool(pending) and (topic, key) in pending
            if waits or not self._produced_at_once(producer, topic, key, value, headers, tombstone_follows):
                self._send(producer, _Outgoing(topic, key, value, headers, record, -1, tombstone_follows), rejected)
        producer.poll(0)
        self._write_tombstones_early(producer)
        return rejected

    @property
    def takes_event_batches(self) -> bool:
        return serializes_event_batches(self.converter)

    def write_event_batch(self, batch: EventBatch) -> list[Rejected] | None:
        producer = self._producer
        assert producer is not None, "open() first"
        topics = [self.config.topic or table.destination() for table in batch.tables]
        converter = self.converter
        if not isinstance(converter, SerializesEventBatches):
            return None
        encoded = converter.serialize_event_batch(batch, topics, self.config.tombstones_on_delete)
        if encoded is None:
            return None
        rejected: list[Rejected] = []
        produce, produced_at_once, pending = producer.produce, self._produced_at_once, self._pending
        tables, events, keys, values, headers = encoded
        last = len(values) - 1
        for index, value in enumerate(values):
            if value is None:
                continue  # the encoder's tombstone after the delete before it: flush writes it
            topic, key, event_headers = topics[tables[index]], keys[index], headers[index]
            tombstone_follows = index < last and values[index + 1] is None
            if not (pending and (topic, key) in pending):
                if not tombstone_follows:
                    # Most messages: _produced_at_once's plain case, without a call per message,
                    # and by position, which confluent-kafka parses faster than keywords (a call
                    # took 1.5 us against 2.3 with keywords and headers=None, 1.5 KB values).
                    try:
                        if event_headers is None:
                            produce(topic, value, key)
                        else:
                            produce(topic, value, key, headers=event_headers)
                        continue
                    except (BufferError, KafkaException):
                        pass
                elif produced_at_once(producer, topic, key, value, event_headers, tombstone_follows):
                    continue
            message = _Outgoing(topic, key, value, event_headers, batch, events[index], tombstone_follows)
            self._send(producer, message, rejected)
        producer.poll(0)
        self._write_tombstones_early(producer)
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
        producer: ProducerWrites,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None,
        tombstone_follows: bool,
    ) -> bool:
        """The common case, kept short: produce a message whose topic and key have no pending
        tombstone (a delete's pends in turn); False if it must go through :meth:`_send` instead
        (the producer's buffer is full, or Kafka refused it at once)."""
        try:
            if tombstone_follows:
                tombstone = _PendingTombstone(topic, key)
                producer.produce(topic, value, key, headers=headers, on_delivery=tombstone.on_delivery)
                self._pending[(topic, key)] = tombstone
            elif headers is None:
                producer.produce(topic, value, key)  # by position: parsed faster (write_event_batch)
            else:
                producer.produce(topic, value, key, headers=headers)
        except (BufferError, KafkaException):
            return False
        return True

    def _send(self, producer: ProducerWrites, message: _Outgoing, rejected: list[Rejected]) -> None:
        """Produce ``message``, or hold it behind the pending tombstone of its topic and key; a
        delete that Kafka does not refuse at once leaves its tombstone pending."""
        waiting = self._pending.get((message.topic, message.key))
        if waiting is not None:
            waiting.held.append(message)
            self._held_bytes += _held_size(message)
            return
        tombstone = _PendingTombstone(message.topic, message.key) if message.tombstone_follows else None
        on_delivery = None if tombstone is None else tombstone.on_delivery
        refusal = self._produce(producer, message.topic, message.key, message.value, message.headers, on_delivery)
        if refusal is not None:
            record = message.record()
            rejected.append(Rejected(record, RecordRejectedError(refusal.str()), SINK_STAGE))
            if tombstone is not None:
                source = record.source if isinstance(record, ChangeEvent) else _kafka_source(message.topic, None)
                rejected.append(_withheld_tombstone(message.topic, message.key, source, refusal))
        elif tombstone is not None:
            self._pending[(message.topic, message.key)] = tombstone

    def _produce(
        self,
        producer: ProducerWrites,
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
                # Without ``on_delivery`` the sink's own callback hears of a failure.
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

    def _write_tombstones(self, producer: ProducerWrites) -> None:
        """Rounds until no tombstone is pending: flush the producer (every delivery report of what
        was produced is then served, so each pending tombstone's delete is known taken or
        refused), then write the tombstones of deletes Kafka took, send those it refused to the
        dead letters with their tombstones, and produce what was held behind each (a held delete
        leaves a tombstone pending for the next round). Stops with the tombstones unwritten as
        soon as something was not delivered: the flush fails and all of it is written again."""
        while True:
            while producer.flush(1.0) > 0:
                pass  # librdkafka retries until message.timeout.ms; each report lands in a callback
            if self._undelivered:
                return
            if not self._pending:
                self._held_bytes = 0
                return
            if self._deletes_undelivered():
                return
            self._release_pending(producer)

    def _deletes_undelivered(self) -> bool:
        """Whether a pending tombstone's delete failed in a way that fails the flush: not delivered
        in time (or fenced...), so whether the broker has it is not known, and its tombstone is not
        written, nor any other; or refused inside a transaction, which dooms the transaction. (A
        delete's own callback took its report, so the lane's on_delivery did not see it.)"""
        lane = self._current_lane()
        for tombstone in lane.pending.values():
            error = tombstone.error
            if error is None:
                continue
            if error.code() not in _RECORD_IS_AT_FAULT:
                lane.undelivered.append(error)
            elif lane.transactional:
                lane.refused_in_transaction = lane.refused_in_transaction or error
                lane.undelivered.append(error)
        return bool(lane.undelivered)

    def _release_pending(self, producer: ProducerWrites) -> None:
        """One round's writes, in the order of the deletes: each tombstone (or, for a delete Kafka
        refused, the delete's and the tombstone's dead letters), then what was held behind it, up
        to a held delete, whose tombstone pends in turn with the rest held behind it."""
        pending, self._pending = self._pending, {}
        rejected, produce = self._rejected, producer.produce
        for tombstone in pending.values():
            topic, key, error = tombstone.topic, tombstone.key, tombstone.error
            if error is None:
                try:
                    produce(topic, key=key, headers=_TOMBSTONE_HEADER_LIST)
                except (BufferError, KafkaException):
                    refusal = self._produce(producer, topic, key, None, _TOMBSTONE_HEADER_LIST)
                    if refusal is not None:
                        dead_letter = _tombstone_dead_letter(topic, key, _kafka_source(topic, None))
                        rejected.append(Rejected(dead_letter, RecordRejectedError(refusal.str()), SINK_STAGE))
            else:
                assert tombstone.refused is not None
                rejected.append(Rejected(tombstone.refused, RecordRejectedError(error.str()), SINK_STAGE))
                rejected.append(_withheld_tombstone(topic, key, tombstone.refused.source, error))
            held = tombstone.held
            for position, message in enumerate(held):
                if message.tombstone_follows:
                    self._send(producer, message, rejected)
                    next_tombstone = self._pending.get((topic, key))
                    if next_tombstone is not None:
                        next_tombstone.held = held[position + 1 :]
                        break
                    continue
                try:
                    produce(topic, message.value, key, headers=message.headers)
                except (BufferError, KafkaException):
                    self._send(producer, message, rejected)

    def _write_tombstones_early(self, producer: ProducerWrites) -> None:
        """Once the held messages pass _HELD_BYTES_BEFORE_TOMBSTONES, the tombstones are written now
        rather than at the checkpoint: held messages cost CPU, and memory outside the producer's
        buffer, which stays bounded so however long the checkpoint interval."""
        if self._held_bytes > _HELD_BYTES_BEFORE_TOMBSTONES:
            self._write_tombstones(producer)
            self._raise_if_undelivered()

    def _raise_if_undelivered(self) -> None:
        if self._undelivered:
            refused = self._current_lane().refused_in_transaction
            if refused is not None:
                self._forget_unflushed()
                raise RecordRefusedInTransactionError(
                    f"Kafka refused a record inside a transaction ({refused.str()}): librdkafka fails the whole "
                    "produce request and the transaction with it, so with delivery: exactly_once the record cannot go "
                    "to the dead letters; set sink.producer.message.max.bytes no larger than the topic's "
                    "max.message.bytes, so that the producer refuses such a record before sending it (it then goes "
                    "to the dead letters)"
                )
            count, first = len(self._undelivered), self._undelivered[0]
            if any(e.fatal() for e in self._undelivered):
                self._replace_producer()
            self._forget_unflushed()  # they will be re-read from the checkpoint and written again
            raise SinkDeliveryError(f"{count} records were not delivered to Kafka (first: {first.str()})")

    def flush(self) -> list[Rejected]:
        producer = self._producer
        assert producer is not None, "open() first"
        self._write_tombstones(producer)
        self._raise_if_undelivered()
        rejected, self._rejected = self._rejected, []
        return rejected

    def _forget_unflushed(self) -> None:
        # A failed flush commits nothing: pending tombstones and held messages are written again
        # with their deletes when the pipeline replays from its checkpoint.
        self._current_lane().forget()

    def _replace_producer(self) -> None:
        # An idempotent producer that hit a fatal error (a broken sequence) accepts nothing more;
        # a new one starts a new producer id, and the pipeline replays from its checkpoint. The
        # old one's reports never come: its pending tombstones are written again with their deletes.
        lane = self._current_lane()
        lane.forget()
        if lane.transactional:
            # A transactional producer's fatal error is its fence (or as final): the store that
            # lent it claims the unit anew, with a new producer, or another process has it now.
            raise TransactionFencedError(
                f"the transactional producer writing to {self.config.bootstrap_servers} is fenced"
            )
        log.warning("Kafka producer hit a fatal error; creating a new one")
        self._lane = self._own_lane()

    def close(self) -> None:
        lane, self._lane = self._lane, None
        if lane is not None and not lane.transactional:
            # Whatever is still queued, held or pending was never acknowledged to the pipeline,
            # so it will be replayed; a short flush just avoids needless duplicates. (A lane a
            # store lent is the store's to end.)
            lane.producer.flush(5.0)
            lane.forget()


def _held_size(message: _Outgoing) -> int:
    """Roughly what a held message takes in memory: its bytes and the objects around them."""
    return len(message.value or b"") + len(message.key or b"") + _HELD_MESSAGE_OVERHEAD


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
    return Rejected(_tombstone_dead_letter(topic, key, source), error, SINK_STAGE)
