"""The producer the kafka sink and checkpoint store write through: the few confluent-kafka
``Producer`` methods they call, as a protocol, and the factory that makes the real one.

This is a seam for the plugin's own logic (tombstone ordering, delivery reports, flush failures,
transactions and fencing bookkeeping): unit tests hand the sink or store a factory of a producer
that records its calls and fails on demand (tests/unit/sinks/kafka/recording_producer.py). What
Kafka does with the messages is tested against the real broker (tests/integration).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from confluent_kafka import KafkaError, Message, Producer
from confluent_kafka.admin._metadata import ClusterMetadata  # re-exported by .admin without __all__

__all__ = ["KafkaProducer", "ProducerFactory", "ProducerWrites", "confluent_producer"]

Headers = list[tuple[str, str | bytes | None]]


class ProducerWrites(Protocol):
    """What a sink writes through: produce, and serve delivery reports (``poll``, ``flush``).

    ``produce`` takes ``value`` and ``key`` by position too, as confluent-kafka's does (it parses
    them faster so: the event-batch loop passes them by position). It may raise ``BufferError``
    (the buffer is full: poll and try again) or ``KafkaException`` (refused at once); a failed
    delivery is reported later, from ``poll`` or ``flush``, to the message's ``on_delivery`` or else
    the producer's own (its settings' ``on_delivery``), as ``(KafkaError, Message)``. ``flush``
    returns how many messages are still undelivered when it gives up.
    """

    def produce(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        *,
        headers: Headers | None = None,
        on_delivery: Callable[[KafkaError | None, Message], None] | None = None,
    ) -> None: ...

    def poll(self, timeout: float = -1) -> int: ...

    def flush(self, timeout: float = -1) -> int: ...


class KafkaProducer(ProducerWrites, Protocol):
    """A producer with transactions (the store's per-bucket producers), its cluster's metadata
    and an explicit close."""

    def init_transactions(self, timeout: float) -> None: ...

    def begin_transaction(self) -> None: ...

    def commit_transaction(self, timeout: float) -> None: ...

    def abort_transaction(self, timeout: float) -> None: ...

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata: ...

    def close(self) -> bool: ...


ProducerFactory = Callable[[dict[str, Any]], KafkaProducer]
"""Makes a producer from librdkafka settings."""


def confluent_producer(settings: dict[str, Any]) -> KafkaProducer:
    """confluent-kafka's Producer (librdkafka), the one cdcflow runs with."""
    producer: KafkaProducer = Producer(settings)
    return producer
