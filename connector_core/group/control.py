"""The group's control topic: what every member must agree on, kept in Kafka.

One compacted topic, ``<group id>.control``, that every worker reads from its beginning and
follows (no consumer group: each reads all of it) and that any worker writes to. Keys are JSON
arrays naming what a record is about:

=================================  =========================================================
``["pause", pipeline]``            ``{"paused": bool, "by": worker, "at": s}``: every member
                                   stops or resumes reading that pipeline
``["worker", worker]``             the worker's status (buckets, partitions, offsets, lag);
                                   a tombstone when it leaves
``["partitions", pipeline]``       the leader's list of the source's partitions: members
                                   re-list when it changes (a new generation, a split)
``["offsets", pipeline, id]``      an offsets change (set or reset) for the partitions' owners
``["snapshot", pipeline, id]``     a live snapshot request (:mod:`cdcflow.live_snapshots`) for
                                   the owners of the partitions carrying its table
``["ack", id, worker]``            an owner's answer to either
=================================  =========================================================

Pause flags live here, not in a faust ``GlobalTable``: a GlobalTable's changes do not reach the
other instances (faust-streaming#283).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from cdcflow.errors import GroupUnavailableError
from cdcflow.group.config import GroupConfig
from cdcflow.group.topics import ensure_topic

__all__ = ["ControlChannel", "OffsetsCommand", "SnapshotCommand"]

log = logging.getLogger("cdcflow.group")

# Every worker writes its status every few seconds and a starting worker reads the whole topic:
# small segments that the cleaner compacts soon keep both the topic and a start short.
_TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.ms": str(10 * 60 * 1000),
    "segment.bytes": str(16 * 1024 * 1024),
    "min.cleanable.dirty.ratio": "0.1",
    "delete.retention.ms": str(10 * 60 * 1000),
}

COMMAND_LIFETIME_S = 60.0
"""A command older than this is history, not an order: a worker that starts later, or reads the
topic again, never applies it (a snapshot request an owner applied is in its partitions' offsets)."""


@dataclass(frozen=True)
class OffsetsCommand:
    """Set partitions to an offset (a mapping) or back to their start (``None``)."""

    kind: ClassVar[str] = "offsets"

    id: str
    pipeline: str
    partitions: Mapping[str, dict[str, Any] | None]
    at: float

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "pipeline": self.pipeline, "partitions": dict(self.partitions), "at": self.at}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> OffsetsCommand:
        return cls(str(data["id"]), str(data["pipeline"]), dict(data["partitions"]), float(data["at"]))


@dataclass(frozen=True)
class SnapshotCommand:
    """Queue a live snapshot (``request``: :meth:`cdcflow.live_snapshots.SnapshotRequest.to_json`)
    in every owned partition that carries its table."""

    kind: ClassVar[str] = "snapshot"

    id: str
    pipeline: str
    request: Mapping[str, Any]
    at: float

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "pipeline": self.pipeline, "request": dict(self.request), "at": self.at}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SnapshotCommand:
        return cls(str(data["id"]), str(data["pipeline"]), dict(data["request"]), float(data["at"]))


@dataclass
class _State:
    paused: dict[str, bool] = field(default_factory=dict)
    workers: dict[str, dict[str, Any]] = field(default_factory=dict)
    partitions: dict[str, list[str]] = field(default_factory=dict)
    acks: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)


class ControlChannel:
    """Reads the control topic into memory (a thread) and writes to it. Thread-safe."""

    def __init__(self, config: GroupConfig, settings: Callable[[Mapping[str, Any]], dict[str, Any]]) -> None:
        self.config = config
        self.topic = config.control_topic
        self._settings = settings
        self._state = _State()
        self._lock = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._producer: Producer | None = None
        self._read_up_to: dict[int, int] = {}  # partition -> next offset this reader has applied
        self._caught_up = False
        self.on_command: Callable[[OffsetsCommand], None] = lambda command: None
        self.on_snapshot: Callable[[SnapshotCommand], None] = lambda command: None
        self.on_partitions: Callable[[str, list[str]], None] = lambda pipeline, ids: None
        self.on_pause: Callable[[str], None] = lambda pipeline: None

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self, timeout_s: float = 60.0) -> None:
        """Create the topic if needed, then read it to its end before returning: a worker knows
        every pause flag before its first read. Can be called again after it failed."""
        if self._thread is None:
            try:
                self._thread = self._start_reader(timeout_s)
            except KafkaException as exc:
                raise GroupUnavailableError(f"group {self.config.id}: control topic {self.topic}: {exc}") from exc
        with self._lock:
            if not self._lock.wait_for(lambda: self._caught_up or self._stop.is_set(), timeout_s):
                raise GroupUnavailableError(f"group {self.config.id}: cannot read control topic {self.topic}")

    def _start_reader(self, timeout_s: float) -> threading.Thread:
        partitions = ensure_topic(
            self._settings({}), self.topic, 1, self.config.replication_factor, exact=False, config=_TOPIC_CONFIG
        )
        if self._producer is None:
            self._producer = Producer(self._settings({"enable.idempotence": True, "acks": "all", "linger.ms": 0}))
        consumer = Consumer(
            self._settings(
                {
                    "group.id": f"{self.config.id}-control-reader",
                    "enable.auto.commit": False,
                    "enable.partition.eof": True,
                }
            )
        )
        ends = {}
        try:
            for number in range(partitions):
                _, high = consumer.get_watermark_offsets(TopicPartition(self.topic, number), timeout=timeout_s)
                ends[number] = high
        except KafkaException:
            consumer.close()
            raise
        consumer.assign([TopicPartition(self.topic, n, OFFSET_BEGINNING) for n in range(partitions)])
        thread = threading.Thread(target=self._follow, args=(consumer, ends), name="group-control", daemon=True)
        thread.start()
        return thread

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        if self._producer is not None:
            self._producer.flush(5)

    # --- reading -------------------------------------------------------------------------------

    def _follow(self, consumer: Consumer, ends: dict[int, int]) -> None:
        remaining = {n for n, end in ends.items() if end > 0}
        if not remaining:
            self._mark_caught_up()
        try:
            while not self._stop.is_set():
                message = consumer.poll(0.2)
                if message is None:
                    continue
                error = message.error()
                number, offset = message.partition() or 0, message.offset() or 0
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        remaining.discard(number)
                        if not remaining:
                            self._mark_caught_up()
                    else:
                        log.warning("control topic %s: %s", self.topic, error.str())
                    continue
                try:
                    self._apply(json.loads(message.key() or b"null"), message.value())
                except (TypeError, ValueError, KeyError) as exc:
                    log.warning("control topic %s: skipping an unreadable record at %d: %s", self.topic, offset, exc)
                with self._lock:
                    self._read_up_to[number] = offset + 1
                    self._lock.notify_all()
        except KafkaException as exc:  # the consumer is broken beyond librdkafka's own retries
            log.error("control topic %s: reader stopped: %s", self.topic, exc)
        finally:
            consumer.close()

    def _mark_caught_up(self) -> None:
        with self._lock:
            self._caught_up = True
            self._lock.notify_all()

    def _apply(self, key: Any, raw: bytes | None) -> None:
        value = json.loads(raw) if raw is not None else None
        kind = key[0]
        commands: list[OffsetsCommand] = []
        snapshots: list[SnapshotCommand] = []
        announced: tuple[str, list[str]] | None = None
        pause_changed = False
        with self._lock:
            state = self._state
            if kind == "pause":
                state.paused[key[1]] = bool(value and value["paused"])
                pause_changed = True
            elif kind == "worker":
                if value is None:
                    state.workers.pop(key[1], None)
                else:
                    state.workers[key[1]] = value
            elif kind == "partitions" and value is not None:
                state.partitions[key[1]] = list(value["ids"])
                announced = (key[1], state.partitions[key[1]])
            elif kind == "ack":
                if value is None:
                    state.acks.get(key[1], {}).pop(key[2], None)
                else:
                    state.acks.setdefault(key[1], {})[key[2]] = value
            elif kind == "offsets" and value is not None and self._caught_up:
                command = OffsetsCommand.from_json(value)
                if time.time() - command.at < COMMAND_LIFETIME_S:
                    commands.append(command)
            elif kind == "snapshot" and value is not None and self._caught_up:
                snapshot = SnapshotCommand.from_json(value)
                if time.time() - snapshot.at < COMMAND_LIFETIME_S:
                    snapshots.append(snapshot)
        if pause_changed:
            self.on_pause(key[1])
        for command in commands:
            self.on_command(command)
        for snapshot in snapshots:
            self.on_snapshot(snapshot)
        if announced is not None and self._caught_up:
            self.on_partitions(*announced)

    # --- what is known -------------------------------------------------------------------------

    def paused(self, pipeline: str) -> bool:
        return self._state.paused.get(pipeline, False)

    def workers(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return dict(self._state.workers)

    def live_workers(self) -> dict[str, dict[str, Any]]:
        """Workers whose last status is recent: a worker killed without a goodbye drops out once
        its status is older than the session timeout plus two status intervals."""
        horizon = time.time() - self.config.session_timeout_s - 2 * self.config.status_interval_s
        return {w: s for w, s in self.workers().items() if s.get("at", 0) >= horizon}

    def announced_partitions(self, pipeline: str) -> list[str] | None:
        return self._state.partitions.get(pipeline)

    def acks(self, command_id: str) -> dict[str, dict[str, Any]]:
        with self._lock:
            return dict(self._state.acks.get(command_id, {}))

    # --- writing -------------------------------------------------------------------------------

    def _write(self, key: list[str], value: Mapping[str, Any] | None, wait_seen_s: float | None = None) -> None:
        """Write one record; with ``wait_seen_s``, return once this worker's reader has applied it."""
        producer = self._producer
        assert producer is not None, "start() first"
        where: list[tuple[int, int]] = []
        failures: list[KafkaError] = []

        def delivered(error: KafkaError | None, message: Any) -> None:
            if error is not None:
                failures.append(error)
            else:
                where.append((message.partition(), message.offset()))

        payload = None if value is None else json.dumps(value, sort_keys=True, default=str).encode()
        producer.produce(self.topic, key=json.dumps(key).encode(), value=payload, on_delivery=delivered)
        producer.flush(10)
        if failures or not where:
            raise GroupUnavailableError(
                f"group {self.config.id}: cannot write to control topic {self.topic}: "
                f"{failures[0].str() if failures else 'no answer'}"
            )
        if wait_seen_s is not None:
            number, offset = where[0]
            with self._lock:
                self._lock.wait_for(lambda: self._read_up_to.get(number, 0) > offset, wait_seen_s)

    def set_paused(self, pipeline: str, paused: bool, by: str) -> None:
        self._write(["pause", pipeline], {"paused": paused, "by": by, "at": time.time()}, wait_seen_s=10)

    def publish_status(self, worker: str, status: Mapping[str, Any] | None) -> None:
        self._write(["worker", worker], status)

    def announce_partitions(self, pipeline: str, ids: list[str]) -> None:
        self._write(["partitions", pipeline], {"ids": ids, "at": time.time()})

    def send_offsets_command(self, pipeline: str, partitions: Mapping[str, dict[str, Any] | None]) -> OffsetsCommand:
        command = OffsetsCommand(uuid.uuid4().hex, pipeline, dict(partitions), time.time())
        self._write(["offsets", pipeline, command.id], command.to_json())
        return command

    def send_snapshot_command(self, pipeline: str, request: Mapping[str, Any]) -> SnapshotCommand:
        command = SnapshotCommand(uuid.uuid4().hex, pipeline, dict(request), time.time())
        self._write([SnapshotCommand.kind, pipeline, command.id], command.to_json())
        return command

    def acknowledge(self, command: OffsetsCommand | SnapshotCommand, worker: str, answer: Mapping[str, Any]) -> None:
        self._write(["ack", command.id, worker], {**answer, "at": time.time()})

    def forget_command(self, command: OffsetsCommand | SnapshotCommand) -> None:
        """Tombstones for a finished command and its answers, so compaction removes them."""
        for worker in self.acks(command.id):
            self._write(["ack", command.id, worker], None)
        self._write([command.kind, command.pipeline, command.id], None)
        with self._lock:
            self._state.acks.pop(command.id, None)

    def wait_for_acks(
        self,
        command: OffsetsCommand | SnapshotCommand,
        done: Callable[[dict[str, dict[str, Any]]], bool],
        timeout_s: float,
    ) -> dict[str, dict[str, Any]]:
        """The answers to ``command`` once ``done(answers)`` holds, or whatever came within ``timeout_s``."""
        with self._lock:
            self._lock.wait_for(lambda: done(dict(self._state.acks.get(command.id, {}))), timeout_s)
            return dict(self._state.acks.get(command.id, {}))
