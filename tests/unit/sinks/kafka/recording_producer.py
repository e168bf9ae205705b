"""A producer for unit tests of the kafka sink's and checkpoint store's own logic: it records every
call and fails on demand. It is a seam (cdcflow.sinks.kafka.producer), not a fake Kafka: it keeps no
partitions or offsets and delivers nothing; what a broker does is tested against the real one.

Delivery reports follow confluent-kafka with ``delivery.report.only.error``: a message's failure is
reported at the next ``poll`` or ``flush``, to the message's ``on_delivery`` or else the settings'.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, Message


@dataclass
class Produced:
    topic: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, str | bytes | None]] | None
    on_delivery: Callable[[KafkaError | None, Message], None] | None


@dataclass
class _ClusterMetadata:
    cluster_id: str


@dataclass
class RecordingProducer:
    settings: dict[str, Any]
    cluster_id: str = "recording-cluster"
    calls: list[str] = field(default_factory=list)  # method names, in order
    produced: list[Produced] = field(default_factory=list)
    # method name -> exceptions its next calls raise, one each, in order
    failures: dict[str, list[BaseException]] = field(default_factory=dict)
    # the delivery report a produced message gets (None: delivered)
    delivery_error: Callable[[Produced], KafkaError | None] = lambda message: None
    _unreported: list[Produced] = field(default_factory=list)

    def fail_next(self, method: str, *errors: BaseException) -> None:
        self.failures.setdefault(method, []).extend(errors)

    def _call(self, method: str) -> None:
        self.calls.append(method)
        queued = self.failures.get(method)
        if queued:
            raise queued.pop(0)

    def produce(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        *,
        headers: list[tuple[str, str | bytes | None]] | None = None,
        on_delivery: Callable[[KafkaError | None, Message], None] | None = None,
    ) -> None:
        self._call("produce")
        message = Produced(topic, key, value, headers, on_delivery)
        self.produced.append(message)
        self._unreported.append(message)

    def _report(self) -> None:
        unreported, self._unreported = self._unreported, []
        for message in unreported:
            error = self.delivery_error(message)
            if error is None:
                continue
            callback = message.on_delivery or self.settings["on_delivery"]
            callback(error, Message(topic=message.topic, key=message.key, value=message.value, headers=message.headers))

    def poll(self, timeout: float = -1) -> int:
        self._call("poll")
        self._report()
        return 0

    def flush(self, timeout: float = -1) -> int:
        self._call("flush")
        self._report()
        return 0

    def init_transactions(self, timeout: float = -1) -> None:
        self._call("init_transactions")

    def begin_transaction(self) -> None:
        self._call("begin_transaction")

    def commit_transaction(self, timeout: float = -1) -> None:
        self._call("commit_transaction")

    def abort_transaction(self, timeout: float = -1) -> None:
        self._call("abort_transaction")

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        self._call("list_topics")
        return _ClusterMetadata(self.cluster_id)

    def close(self) -> bool:
        self._call("close")
        return True


@dataclass
class RecordingProducers:
    """A producer factory (cdcflow.sinks.kafka.producer.ProducerFactory) keeping what it made."""

    made: list[RecordingProducer] = field(default_factory=list)
    prepare: Callable[[RecordingProducer], None] = lambda producer: None

    def __call__(self, settings: dict[str, Any]) -> RecordingProducer:
        producer = RecordingProducer(settings)
        self.prepare(producer)
        self.made.append(producer)
        return producer
