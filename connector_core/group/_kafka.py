"""The ``kafka`` coordinator: a plain confluent-kafka consumer, cooperative-sticky.

The rebalance callbacks run inside ``poll()`` on this coordinator's thread and may block there
(a revoke waits for the delivery loop): librdkafka heartbeats from its own threads meanwhile.
``max.poll.interval.ms`` is what librdkafka sends as the JoinGroup rebalance timeout, so it is
``rebalance_timeout_s``; the poll loop itself never stays away longer than a revoke may take.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from cdcflow.group.config import GroupConfig
from cdcflow.group.coordinator import BucketListener, GroupCoordinator

__all__ = ["KafkaCoordinator"]

log = logging.getLogger("cdcflow.group")


class KafkaCoordinator(GroupCoordinator):
    def __init__(
        self, config: GroupConfig, settings: Callable[[Mapping[str, Any]], dict[str, Any]], client_id: str
    ) -> None:
        self.config = config
        extra: dict[str, Any] = {
            "group.id": config.id,
            "client.id": client_id,  # this member among the group's (cdcflow.group.membership)
            "partition.assignment.strategy": "cooperative-sticky",
            "session.timeout.ms": int(config.session_timeout_s * 1000),
            "heartbeat.interval.ms": int(config.heartbeat_interval_s * 1000),
            "max.poll.interval.ms": int(config.rebalance_timeout_s * 1000),
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "latest",
        }
        if config.instance_id:
            extra["group.instance.id"] = config.instance_id
        self._settings = settings(extra)
        self._owned: frozenset[int] = frozenset()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failed = False

    def start(self, listener: BucketListener) -> None:
        consumer = Consumer(self._settings)
        topic = self.config.bucket_topic

        def buckets(partitions: list[TopicPartition]) -> frozenset[int]:
            return frozenset(tp.partition for tp in partitions if tp.topic == topic)

        def on_assign(_: Consumer, partitions: list[TopicPartition]) -> None:
            got = buckets(partitions)
            self._owned |= got
            if got:
                listener.assign(got)

        def on_revoke(_: Consumer, partitions: list[TopicPartition]) -> None:
            gone = buckets(partitions)
            if gone:
                listener.revoke(gone)
            self._owned -= gone

        def on_lost(_: Consumer, partitions: list[TopicPartition]) -> None:
            gone = buckets(partitions)
            log.warning(
                "group %s: this worker's session expired; buckets %s belong to others now", self.config.id, sorted(gone)
            )
            if gone:
                listener.lose(gone)
            self._owned -= gone

        consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
        self._thread = threading.Thread(target=self._poll, args=(consumer,), name="group-coordinator", daemon=True)
        self._thread.start()

    def _poll(self, consumer: Consumer) -> None:
        try:
            while not self._stop.is_set():
                message = consumer.poll(0.2)  # the assignment topic is empty: this only runs callbacks
                error = message.error() if message is not None else None
                if error is not None:
                    log.warning("group %s: %s", self.config.id, error.str())
        except KafkaException as exc:
            self._failed = True
            log.error("group %s: the coordinator's consumer failed: %s", self.config.id, exc)
        finally:
            # close() revokes whatever is still owned (nothing, after a clean stop) and leaves the
            # group at once, so the others take over without waiting for the session timeout.
            try:
                consumer.close()
            except (KafkaException, RuntimeError) as exc:
                log.warning("group %s: leaving the group: %s", self.config.id, exc)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.config.rebalance_timeout_s)

    def owned(self) -> frozenset[int]:
        return self._owned

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and not self._failed
