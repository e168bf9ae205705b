"""The ``kafka`` checkpoint store: offsets in a compacted topic, like Kafka Connect's offsets topic.

Keys are ``["<pipeline>", "<partition id>"]`` (JSON), values the checkpoint (JSON) or a tombstone
after a reset. Compaction keeps the newest value per key, so loading reads the topic to its end.

A worker group (``engine.group``) commits each bucket's checkpoints in a transaction of that
bucket's own producer, ``transactional.id = cdcflow-<pipeline>-b<bucket>``. Claiming a bucket
initialises that transactional id, which is Kafka's fence: the previous owner's producer is dead
from then on (its next commit fails with ``_FENCED``), and a transaction it left open is aborted
before the new owner reads the checkpoints. Every load reads ``read_committed``.

With a ``kafka`` sink's ``delivery: exactly_once`` (:mod:`cdcflow.transactions`), each bucket's
producer is built by the sink (its settings, the same transactional id) and lent to it: the
bucket's records and its checkpoints are one transaction, begun at the bucket's first write of an
interval and committed here. A pipeline without a group is one bucket (``-b<worker index>``).
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._listoffsets import OffsetSpec
from confluent_kafka.cimpl import NewTopic
from pydantic import Field

from cdcflow.config import RetryConfig
from cdcflow.contract import Checkpoint, CheckpointStoreConfig, FencingCheckpointStore, PluginContext
from cdcflow.errors import (
    CheckpointCorruptError,
    CheckpointUnavailableError,
    ConfigError,
    RetriesExhaustedError,
    TransactionFencedError,
)
from cdcflow.kafka_client import KafkaClientConfig
from cdcflow.prerequisites import CheckResult, PrerequisiteScope
from cdcflow.retry import Backoff
from cdcflow.sinks.kafka.prerequisites import check_checkpoint_topic
from cdcflow.sinks.kafka.producer import KafkaProducer, ProducerFactory, confluent_producer
from cdcflow.sinks.kafka.sink import ProducerLane, kafka_domain
from cdcflow.transactions import TransactionDomain

__all__ = ["KafkaCheckpointConfig", "KafkaCheckpointStore"]

# What librdkafka and the broker answer a producer whose transactional id a newer producer took.
_FENCED_CODES = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
# The broker aborts a dead producer's transaction only at its next timeout sweep, up to this long
# after the transaction timed out (transaction.abort.timed.out.transaction.cleanup.interval.ms).
_ABORT_SWEEP_S = 10.0
# Errors of a partition whose leadership is being set up or moved: they pass once it settles.
_LEADERSHIP_MOVING = frozenset(
    {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.UNKNOWN_TOPIC_OR_PART}
)
# How long a release waits for its abort: a broker that does not answer aborts the transaction
# itself (transaction_timeout_s), and so does the bucket's next claim.
_ABORT_TIMEOUT_S = 3.0


class KafkaCheckpointConfig(CheckpointStoreConfig):
    bootstrap_servers: str
    kafka: KafkaClientConfig = Field(
        default_factory=KafkaClientConfig, description="security and client settings (SASL, TLS, passthrough)"
    )
    topic: str = Field(default="cdcflow-offsets", description="compacted topic shared by pipelines")
    partitions: int = Field(default=6, ge=1, description="used when the topic is created")
    replication_factor: int = Field(default=1, ge=1, description="used when the topic is created")
    timeout_s: float = Field(default=30.0, gt=0)
    transaction_timeout_s: float = Field(
        default=30.0,
        ge=1,
        le=900,
        description="worker groups and exactly_once: the broker aborts a transaction left open this long (a worker "
        "that died mid-commit); until then it hides later checkpoints in its partition of the topic",
    )

    def transaction_domain(self) -> TransactionDomain:
        return kafka_domain(self.bootstrap_servers)


@dataclass
class _Claim:
    """A bucket this store holds: its transactional producer (a sink's lane with exactly_once),
    and whether a failed commit left a transaction to abort before the next one."""

    producer: KafkaProducer
    lane: ProducerLane | None = None
    needs_abort: bool = False

    @property
    def in_transaction(self) -> bool:
        return self.lane is not None and self.lane.in_transaction


class KafkaCheckpointStore(FencingCheckpointStore[KafkaCheckpointConfig]):
    type_name = "kafka"
    config_model = KafkaCheckpointConfig

    _producer: KafkaProducer | None = None
    _admin: AdminClient | None = None
    _lane_factory: Callable[[str, float], ProducerLane] | None = None
    _cluster_checked = False

    def __init__(
        self,
        config: KafkaCheckpointConfig,
        context: PluginContext,
        producer_factory: ProducerFactory = confluent_producer,
    ) -> None:
        super().__init__(config, context)
        # The seam for unit tests of the store's bookkeeping (cdcflow.sinks.kafka.producer).
        self._producer_factory = producer_factory
        self._claims: dict[int, _Claim] = {}

    def _settings(self, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return self.config.kafka.librdkafka_settings(self.config.bootstrap_servers, extra)

    def check_reachable(self, timeout_s: float) -> None:
        self.config.kafka.check_reachable(
            self.config.bootstrap_servers, timeout_s, self.context.field_path or "checkpoint"
        )

    def check_prerequisites(self, scope: PrerequisiteScope) -> Sequence[CheckResult]:
        # At start, open() has created the topic compacted if it was missing; the rest is doctor's.
        return check_checkpoint_topic(self.config, self.context.pipeline, scope) if scope.thorough else ()

    def open(self) -> None:
        self._claims = {}
        self._admin = AdminClient(self._settings())
        topic = NewTopic(
            self.config.topic,
            num_partitions=self.config.partitions,
            replication_factor=self.config.replication_factor,
            config={"cleanup.policy": "compact"},
        )
        try:
            self._admin.create_topics([topic])[self.config.topic].result(timeout=self.config.timeout_s)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise CheckpointUnavailableError(f"cannot create offsets topic {self.config.topic}: {exc}") from exc
        except Exception as exc:  # a timeout from the future: the broker is not there
            raise CheckpointUnavailableError(f"cannot create offsets topic {self.config.topic}: {exc}") from exc
        # One request in flight, like the sink: see KafkaSink._settings for the loss it prevents.
        self._producer = self._producer_factory(
            self._settings(
                {
                    "enable.idempotence": True,
                    "acks": "all",
                    "linger.ms": 0,
                    "max.in.flight.requests.per.connection": 1,
                }
            )
        )

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(5.0)
            self._producer = None
        self.release(list(getattr(self, "_claims", {})))

    def _key(self, partition_id: str) -> bytes:
        return json.dumps([self.context.pipeline, partition_id], separators=(",", ":")).encode()

    @staticmethod
    def _value(checkpoint: Checkpoint | None) -> bytes | None:
        return None if checkpoint is None else json.dumps(checkpoint.to_json(), sort_keys=True).encode()

    # --- loading -------------------------------------------------------------------------------

    def load(self) -> dict[str, Checkpoint]:
        return self._load(lambda partition_id: True)

    def load_settled(self) -> dict[str, Checkpoint]:
        # Up to each partition's last stable offset: what follows an open transaction is left for a
        # later look.
        return self._load(lambda partition_id: True, past_open_transactions=False)

    def _load(self, wanted: Callable[[str], bool], past_open_transactions: bool = True) -> dict[str, Checkpoint]:
        consumer = Consumer(
            self._settings(
                {
                    "group.id": "cdcflow-offsets-reader",
                    "enable.auto.commit": False,
                    "enable.partition.eof": True,
                    "isolation.level": "read_committed",
                    # The read stops at the end: a fetch there need not wait for more (4x faster loads).
                    "fetch.wait.max.ms": 10,
                }
            )
        )
        try:
            latest = self._read_to_end_retrying(consumer, wanted, past_open_transactions)
        finally:
            consumer.close()
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

    def _read_to_end_retrying(
        self, consumer: Consumer, wanted: Callable[[str], bool], past_open_transactions: bool
    ) -> dict[str, bytes | None]:
        """:meth:`_read_to_end`, tried again with backoff for up to ``timeout_s`` while the broker
        answers with a transient error: a topic created a moment ago (by this open() or another
        worker's) has partitions whose leader is not serving them yet (NOT_LEADER_FOR_PARTITION)."""
        backoff = Backoff(RetryConfig(initial_backoff_ms=100, max_backoff_ms=2000, max_elapsed_s=self.config.timeout_s))
        while True:
            try:
                return self._read_to_end(consumer, wanted, past_open_transactions)
            except KafkaException as exc:
                error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
                if error is None or not (error.retriable() or error.code() in _LEADERSHIP_MOVING):
                    raise CheckpointUnavailableError(f"cannot read offsets topic {self.config.topic}: {exc}") from exc
                try:
                    delay = backoff.next_delay(f"reading offsets topic {self.config.topic}", exc)
                except RetriesExhaustedError as exhausted:
                    raise CheckpointUnavailableError(
                        f"cannot read offsets topic {self.config.topic}: {exc} (for {self.config.timeout_s:g} s)"
                    ) from exhausted
                time.sleep(delay)

    def _high_watermarks(self, numbers: Sequence[int]) -> dict[int, int]:
        """Each partition's end, open transactions included (a read_committed consumer sees only up
        to the first open transaction, the last stable offset)."""
        assert self._admin is not None, "open() first"
        latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        request = {TopicPartition(self.config.topic, n): latest for n in numbers}
        futures = self._admin.list_offsets(
            request, isolation_level=IsolationLevel.READ_UNCOMMITTED, request_timeout=self.config.timeout_s
        )
        return {tp.partition: future.result().offset for tp, future in futures.items()}

    def _read_to_end(
        self, consumer: Consumer, wanted: Callable[[str], bool], past_open_transactions: bool
    ) -> dict[str, bytes | None]:
        metadata = consumer.list_topics(self.config.topic, timeout=self.config.timeout_s)
        numbers = sorted(metadata.topics[self.config.topic].partitions)
        ends = self._high_watermarks(numbers)
        assignment, remaining = [], set()
        for number in numbers:
            low, _ = consumer.get_watermark_offsets(
                TopicPartition(self.config.topic, number), timeout=self.config.timeout_s
            )
            if ends[number] > low:
                assignment.append(TopicPartition(self.config.topic, number, low))
                remaining.add(number)
        latest: dict[str, bytes | None] = {}
        consumer.assign(assignment)
        # A read_committed read stops at the first open transaction (a worker mid-commit, or one
        # that died mid-commit): reading on until the end seen above is what makes a load see
        # every checkpoint committed before it began. The broker aborts a dead producer's
        # transaction after transaction_timeout_s, so the wait is bounded.
        deadline = time.monotonic() + self.config.transaction_timeout_s + _ABORT_SWEEP_S + self.config.timeout_s
        blocked_at: dict[int, int] = {}
        while remaining:
            if time.monotonic() > deadline:
                raise CheckpointUnavailableError(
                    f"offsets topic {self.config.topic}: open transactions hide checkpoints in partitions "
                    f"{sorted(remaining)} (stuck at offsets {blocked_at}); the broker aborts them "
                    f"transaction_timeout_s ({self.config.transaction_timeout_s:g} s) after they began"
                )
            message = consumer.poll(min(self.config.timeout_s, 1.0))
            if message is None:
                continue
            number = message.partition() or 0
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    if (message.offset() or 0) >= ends[number] or not past_open_transactions:
                        remaining.discard(number)
                    else:
                        blocked_at[number] = message.offset() or 0
                    continue
                raise CheckpointUnavailableError(f"reading offsets topic failed: {error.str()}")
            if (message.offset() or 0) + 1 >= ends[number]:
                remaining.discard(number)
            try:
                pipeline, partition_id = json.loads(message.key() or b"null")
            except (TypeError, ValueError):
                continue  # not a cdcflow key: someone else's record in a shared topic
            if pipeline == self.context.pipeline and wanted(partition_id):
                latest[partition_id] = message.value()
        return latest

    # --- one process (no group) ----------------------------------------------------------------

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
        self._send({pid: self._value(c) for pid, c in checkpoints.items()})

    def reset(self, partition_ids: Sequence[str] | None = None) -> None:
        targets = list(partition_ids) if partition_ids is not None else list(self.load())
        self._send(dict.fromkeys(targets))

    # --- a worker group: one transactional producer per claimed bucket ------------------------

    def transactional_id(self, bucket: int) -> str:
        return f"cdcflow-{self.context.pipeline}-b{bucket}"

    def claimed(self) -> frozenset[int]:
        return frozenset(self._claims)

    def make_lanes_with(self, factory: Callable[[str, float], ProducerLane]) -> None:
        """Exactly once: each claimed bucket's producer is ``factory``'s (a sink's lane), and
        :meth:`commit_claimed` commits the records written into it with the checkpoints."""
        self._lane_factory = factory

    def transaction_lane(self, unit: int) -> ProducerLane:
        claim = self._claims.get(unit)
        if claim is None or claim.lane is None:
            raise ValueError(f"transaction_lane({unit}): the bucket is not claimed with a lane")
        if not claim.lane.in_transaction:
            try:
                if claim.needs_abort:
                    claim.producer.abort_transaction(self.config.timeout_s)
                    claim.needs_abort = False
                claim.producer.begin_transaction()
            except KafkaException as exc:
                raise self._transaction_failure(unit, exc) from exc
            claim.lane.in_transaction = True
        return claim.lane

    def _transaction_failure(self, bucket: int, exc: KafkaException) -> Exception:
        error: KafkaError = exc.args[0]
        if error.code() in _FENCED_CODES or error.fatal():
            self.release([bucket])
            return TransactionFencedError(f"bucket {bucket}: {error.str()}: another process claimed it")
        return CheckpointUnavailableError(f"offsets topic {self.config.topic}: bucket {bucket}: {error.str()}")

    def claim(self, buckets: Collection[int], bucket_of: Callable[[str], int]) -> dict[str, Checkpoint]:
        self._fence_new(buckets)
        wanted = set(buckets)
        return self._load(lambda partition_id: bucket_of(partition_id) in wanted)

    def _fence_new(self, buckets: Collection[int]) -> None:
        """Fence the buckets of ``buckets`` not claimed yet, in parallel; each one fenced is claimed."""
        new = sorted(set(buckets) - set(self._claims))
        if not new:
            return
        with ThreadPoolExecutor(max_workers=min(16, len(new)), thread_name_prefix="claim") as pool:
            results = list(pool.map(self._fence, new))
        failures = [r for r in results if isinstance(r, BaseException)]
        for bucket, result in zip(new, results, strict=True):
            if isinstance(result, _Claim):
                self._claims[bucket] = result
        mismatch = next((f for f in failures if isinstance(f, ConfigError)), None)
        if mismatch is not None:
            raise mismatch
        if failures:
            raise CheckpointUnavailableError(
                f"offsets topic {self.config.topic}: cannot claim {len(failures)} bucket(s): {failures[0]}"
            ) from failures[0]

    def _fence(self, bucket: int) -> _Claim | BaseException:
        """The bucket's transactional producer, initialised: from now on the previous one is fenced,
        and its open transaction, if any, is aborted."""
        lane = None
        try:
            if self._lane_factory is not None:
                lane = self._lane_factory(self.transactional_id(bucket), self.config.transaction_timeout_s)
                producer = lane.client
                self._check_same_cluster(producer)
            else:
                producer = self._producer_factory(
                    self._settings(
                        {
                            "transactional.id": self.transactional_id(bucket),
                            "transaction.timeout.ms": int(self.config.transaction_timeout_s * 1000),
                            "acks": "all",
                            "linger.ms": 0,
                        }
                    )
                )
            producer.init_transactions(self.config.timeout_s)
        except Exception as exc:  # Kafka's, or a sink's lane that cannot be built: the caller raises
            return exc
        return _Claim(producer, lane)

    def _check_same_cluster(self, producer: KafkaProducer) -> None:
        """A lane writes the checkpoints to the sink's cluster, and loading reads this store's: one
        cluster, or a restart would not find them."""
        if self._cluster_checked:
            return
        assert self._admin is not None, "open() first"
        try:
            ours = self._admin.list_topics(timeout=self.config.timeout_s).cluster_id
            theirs = producer.list_topics(timeout=self.config.timeout_s).cluster_id
        except KafkaException as exc:
            raise CheckpointUnavailableError(f"cannot read the Kafka cluster's id: {exc}") from exc
        if ours != theirs:
            raise ConfigError(
                f"{self.context.pipeline_file}: checkpoint.bootstrap_servers ({self.config.bootstrap_servers}, "
                f"cluster {ours}) and sink.bootstrap_servers (cluster {theirs}) are different Kafka clusters: "
                "delivery: exactly_once commits the records and their checkpoint in one transaction, on one cluster"
            )
        self._cluster_checked = True

    def commit_claimed(self, checkpoints: Mapping[int, Mapping[str, Checkpoint | None]]) -> frozenset[int]:
        unclaimed = set(checkpoints) - set(self._claims)
        if unclaimed:
            raise ValueError(f"commit_claimed for buckets {sorted(unclaimed)} that are not claimed")
        work = [(b, values) for b, values in checkpoints.items() if values or self._claims[b].in_transaction]
        if not work:
            return frozenset()
        with ThreadPoolExecutor(max_workers=min(16, len(work)), thread_name_prefix="commit") as pool:
            outcomes = list(pool.map(lambda item: self._commit_bucket(*item), work))
        fenced = frozenset(bucket for (bucket, _), outcome in zip(work, outcomes, strict=True) if outcome == "fenced")
        self.release(fenced)
        failures = [o for o in outcomes if isinstance(o, CheckpointUnavailableError)]
        if failures:
            raise failures[0]
        return fenced

    def _commit_bucket(self, bucket: int, values: Mapping[str, Checkpoint | None]) -> str | CheckpointUnavailableError:
        claim = self._claims[bucket]
        producer = claim.producer
        try:
            if not claim.in_transaction:
                if claim.needs_abort:
                    producer.abort_transaction(self.config.timeout_s)
                    claim.needs_abort = False
                producer.begin_transaction()
            for partition_id, checkpoint in values.items():
                producer.produce(self.config.topic, key=self._key(partition_id), value=self._value(checkpoint))
            self._commit_transaction(producer)
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if error.code() in _FENCED_CODES or error.fatal():
                self.context.logger.warning(
                    "bucket %d: checkpoint commit fenced (%s): another worker owns it now", bucket, error.str()
                )
                return "fenced"
            # The transaction may still be open: abort it before the next one begins.
            claim.needs_abort = True
            return CheckpointUnavailableError(f"offsets topic {self.config.topic}: bucket {bucket}: {error.str()}")
        finally:
            if claim.lane is not None:
                claim.lane.in_transaction = False
        return "committed"

    def _commit_transaction(self, producer: KafkaProducer) -> None:
        """Commit, calling again while librdkafka says the commit may still go through: a timed
        out commit's outcome is unknown until a retry returns (librdkafka's commit_transaction)."""
        deadline = time.monotonic() + self.config.transaction_timeout_s
        while True:
            try:
                producer.commit_transaction(self.config.timeout_s)
                return
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                if not error.retriable() or error.txn_requires_abort() or time.monotonic() > deadline:
                    raise

    def release(self, buckets: Collection[int]) -> None:
        for bucket in buckets:
            claim = getattr(self, "_claims", {}).pop(bucket, None)
            if claim is not None:
                if claim.in_transaction:
                    self._abort_open_transaction(bucket, claim)
                try:
                    with warnings.catch_warnings():  # a fenced producer warns that it cannot abort
                        warnings.simplefilter("ignore", RuntimeWarning)
                        claim.producer.close()
                except Exception as exc:  # it is dropped either way
                    self.context.logger.debug("closing the producer of bucket %d: %s", bucket, exc)

    def _abort_open_transaction(self, bucket: int, claim: _Claim) -> None:
        """End a bucket's open transaction before its claim goes: nothing written in it becomes
        visible. A zombie's abort is refused as fenced: the new owner's claim aborted it already."""
        assert claim.lane is not None
        claim.lane.in_transaction = False
        claim.lane.forget()
        try:
            claim.producer.abort_transaction(min(self.config.timeout_s, _ABORT_TIMEOUT_S))
            self.context.logger.info("bucket %d: open transaction aborted", bucket)
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if error.code() in _FENCED_CODES or error.fatal():
                self.context.logger.warning(
                    "bucket %d: its open transaction was fenced (%s): another process claimed the bucket and "
                    "aborted it",
                    bucket,
                    error.str(),
                )
            else:  # the broker aborts it transaction_timeout_s after it began, or the next claim does
                self.context.logger.warning("bucket %d: aborting its open transaction failed: %s", bucket, error.str())
