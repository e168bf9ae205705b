"""The ``kafka`` source: reads cdcflow envelopes back from topics.

Each topic-partition is a cdcflow partition; offsets are ``{"next": n}`` (every record below ``n``
is done). Reads seek to exact offsets, so a replay re-reads the same records (Kafka's log is
immutable). The consumer group's committed offsets move only in :meth:`commit`, which the
pipeline calls after the sink flushed and the checkpoint is durable: Kafka-to-anything pipelines
are at-least-once too.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from confluent_kafka import OFFSET_INVALID, Consumer, KafkaError, KafkaException, Message, TopicPartition
from pydantic import Field

from cdcflow.contract import (
    Converter,
    NestedPluginSection,
    Offset,
    Partition,
    PluginConfig,
    PluginContext,
    Rejected,
    Source,
)
from cdcflow.converters import JsonConverter, converter_from_fields, converter_plugin_sections
from cdcflow.errors import ConverterError, SourceDataError, SourceUnavailableError, TransientError
from cdcflow.events import ChangeEvent, Op, Record, SourceInfo, raw_bytes_event
from cdcflow.kafka_admin import view_of
from cdcflow.kafka_client import TOMBSTONE_HEADER, KafkaClientConfig
from cdcflow.native import native_module
from cdcflow.prerequisites import CheckResult, PrerequisiteScope
from cdcflow.record_errors import SOURCE_STAGE
from cdcflow.schemas import UNTYPED_NULL
from cdcflow.spark_rows import RowTyping, stream_arrow_batch

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["KafkaSource", "KafkaSourceConfig"]


class KafkaSourceConfig(PluginConfig):
    bootstrap_servers: str
    kafka: KafkaClientConfig = Field(
        default_factory=KafkaClientConfig, description="security and client settings (SASL, TLS, passthrough)"
    )
    topics: list[str] = Field(min_length=1)
    group_id: str | None = Field(default=None, description="consumer group; default cdcflow-<pipeline>")
    converter: str | dict[str, Any] = Field(default="json", description="how the values were written")
    schema_registry_url: str | None = None
    schema_registry: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="confluent-kafka SchemaRegistryClient settings, for avro"
    )
    start: Literal["earliest", "latest"] = Field(
        default="earliest", description="where a partition with no committed offset starts"
    )
    poll_timeout_ms: int = Field(default=1000, ge=10)
    max_records_per_batch: int | None = Field(
        default=None,
        ge=1,
        description="spark engine: records one micro-batch takes over all its topic-partitions (Spark's "
        "maxOffsetsPerTrigger, split between partitions by backlog; Spark cannot bound each one); "
        "default engine.max_records_per_read for each topic-partition",
    )
    consumer: dict[str, str | int | float | bool] = Field(
        default_factory=dict,
        description="extra librdkafka consumer settings (worker engine); Spark's connector takes kafka.java",
    )

    @classmethod
    def nested_plugin_sections(cls, section: Mapping[str, Any]) -> list[NestedPluginSection]:
        return converter_plugin_sections(cls, section)


class KafkaSource(Source[KafkaSourceConfig]):
    """``kafka``: topics of cdcflow change events (json or avro) as a change source."""

    type_name = "kafka"
    config_model = KafkaSourceConfig

    def __init__(self, config: KafkaSourceConfig, context: PluginContext) -> None:
        super().__init__(config, context)
        self.converter: Converter[Any] = converter_from_fields(
            config.converter, config.schema_registry_url, context, schema_registry=config.schema_registry
        )
        self.group_id = config.group_id or f"cdcflow-{context.pipeline}"
        self._consumer: Consumer | None = None
        # partition id -> (offset read up to, timestamp of the last record before it), for watermarks
        self._read_up_to: dict[str, tuple[int, int]] = {}

    def open(self) -> None:
        settings = self.config.kafka.librdkafka_settings(
            self.config.bootstrap_servers,
            {
                "group.id": self.group_id,
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "auto.offset.reset": self.config.start,
                **self.config.consumer,
            },
        )
        try:
            self._consumer = Consumer(settings)
        except KafkaException as exc:
            raise SourceUnavailableError(f"cannot create a Kafka consumer: {exc}") from exc

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def check_reachable(self, timeout_s: float) -> None:
        self.config.kafka.check_reachable(self.config.bootstrap_servers, timeout_s, self.context.field_path or "source")

    def check_prerequisites(self, scope: PrerequisiteScope) -> Sequence[CheckResult]:
        """Each topic exists (a consumer subscribed to a missing one waits without a word), and the
        converter's registry answers."""
        if not scope.thorough:
            return ()
        view = view_of(self.config.kafka, self.config.bootstrap_servers, self.config.topics, scope.timeout_s)
        results = []
        for topic, found in view.topics.items():
            if found is None:
                results.append(
                    CheckResult.fail(f"topic {topic}", "no such topic", f"create {topic}, or correct source.topics")
                )
            else:
                results.append(CheckResult.ok(f"topic {topic}", f"{found.partitions} partition(s)"))
        return [*results, *self.converter.check_prerequisites(scope)]

    @property
    def consumer(self) -> Consumer:
        assert self._consumer is not None, "open() first"
        return self._consumer

    def _timeout(self) -> float:
        return self.config.poll_timeout_ms / 1000

    def partitions(self) -> Sequence[Partition]:
        try:
            metadata = self.consumer.list_topics(timeout=10)
        except KafkaException as exc:
            raise SourceUnavailableError(f"cannot list topics on {self.config.bootstrap_servers}: {exc}") from exc
        found = []
        for topic in self.config.topics:
            described = metadata.topics.get(topic)
            if described is None or described.error is not None:
                continue  # not created yet: it joins at the next partition refresh
            found += [Partition(f"{topic}:{p}", {"topic": topic, "partition": p}) for p in sorted(described.partitions)]
        return found

    def _bounds(self, partition: Partition) -> tuple[int, int]:
        try:
            low, high = self.consumer.get_watermark_offsets(
                TopicPartition(partition.info["topic"], partition.info["partition"]), timeout=10
            )
        except KafkaException as exc:
            raise SourceUnavailableError(f"cannot read offsets of {partition.id}: {exc}") from exc
        return int(low), int(high)

    def initial_offset(self, partition: Partition) -> Offset:
        topic_partition = TopicPartition(partition.info["topic"], partition.info["partition"])
        try:
            committed = self.consumer.committed([topic_partition], timeout=10)[0].offset
        except KafkaException as exc:
            raise SourceUnavailableError(f"cannot read the committed offset of {partition.id}: {exc}") from exc
        if committed != OFFSET_INVALID and committed >= 0:
            return {"next": int(committed)}
        low, high = self._bounds(partition)
        return {"next": low if self.config.start == "earliest" else high}

    def latest_offset(self, partition: Partition, start: Offset, max_records: int | None) -> Offset:
        _, high = self._bounds(partition)
        end = high if max_records is None else min(high, start["next"] + max_records)
        return {"next": max(end, start["next"])}

    def read(self, partition: Partition, start: Offset, end: Offset) -> Iterator[Record | Rejected]:
        topic, number = partition.info["topic"], partition.info["partition"]
        consumer = self.consumer
        consumer.assign([TopicPartition(topic, number, start["next"])])
        try:
            position = start["next"]
            while position < end["next"]:
                message = consumer.poll(self._timeout())
                if message is None:
                    continue
                error = message.error()
                offset = message.offset() or 0
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        # Compaction or transaction markers can leave no record at end - 1.
                        if offset >= end["next"]:
                            break
                        continue
                    raise SourceUnavailableError(f"reading {partition.id} failed: {error.str()}")
                if offset >= end["next"]:
                    break
                position = offset + 1
                self._read_up_to[partition.id] = (position, message.timestamp()[1] * 1000)
                if message.value() is None and _is_cdcflow_tombstone(message.headers()):
                    continue  # the tombstone after a delete this source read already
                yield self._decode(partition, message)
        finally:
            consumer.unassign()

    def _decode(self, partition: Partition, message: Message) -> Record | Rejected:
        topic, offset, ts_ms = partition.info["topic"], message.offset() or 0, message.timestamp()[1]
        try:
            return self.decode(topic, partition.id, message.key(), message.value(), offset, ts_ms)
        except SourceDataError as exc:
            # A record no converter can read would stop its partition for good: it goes to the
            # dead letters, bytes and all, and the partition goes on (errors.tolerance permitting).
            source = SourceInfo(
                "kafka",
                topic,
                "",
                "",
                partition.id,
                {"offset": offset},
                ts_ms * 1000,
                extra={"kafka": _read_at(topic, partition.info["partition"], offset)},
            )
            return Rejected(raw_bytes_event(message.key(), message.value(), source, topic), exc, SOURCE_STAGE)

    def decode(
        self, topic: str, partition_id: str, raw_key: bytes | None, raw_value: bytes | None, offset: int, ts_ms: int
    ) -> Record:
        """One Kafka record as a cdcflow record: a cdcflow envelope becomes the change it describes;
        a bare row or a tombstone becomes the row state itself. Also used by the spark engine,
        which reads Kafka with Spark's own connector. A record that is neither raises
        :class:`SourceDataError` saying what is wrong with it (which part, which field)."""
        where = f"{topic} partition {_partition_number(partition_id)} offset {offset}"
        key = self._deserialize(topic, raw_key, f"{where}: key") if raw_key is not None else {}
        value = self._deserialize(topic, raw_value, f"{where}: value") if raw_value is not None else None
        position = {"offset": offset}
        read_at = {"kafka": _read_at(topic, _partition_number(partition_id), offset)}
        if value is not None and "op" in value and "source" in value:
            return _event_from_envelope(key, value, partition_id, position, topic, read_at, where)
        return ChangeEvent(
            op=Op.DELETE if value is None else Op.CREATE,
            key=key,
            before=None,
            after=value,
            source=SourceInfo("kafka", topic, "", "", partition_id, position, ts_ms * 1000, extra=read_at),
            ts_ms=int(time.time() * 1000),
            topic=topic,
            envelope=False,
        )

    def _deserialize(self, topic: str, data: bytes, what: str) -> dict[str, Any]:
        try:
            return self.converter.deserialize(topic, data)
        except ConverterError as exc:
            if isinstance(exc, TransientError):
                raise  # the registry is unreachable: read again later, nothing is wrong with the record
            raise SourceDataError(f"{what}: {exc}") from exc

    def spark_native_stream(self, session: SparkSession, max_records_per_read: int) -> DataFrame:
        # Spark's connector bounds a whole micro-batch, not each partition: max_records_per_batch.
        per_batch = self.config.max_records_per_batch or max_records_per_read * max(1, len(self.partitions()))
        options = {
            **self.config.kafka.spark_options(self.config.bootstrap_servers),
            "subscribe": ",".join(self.config.topics),
            "startingOffsets": self.config.start,
            "maxOffsetsPerTrigger": str(per_batch),
        }
        reader = session.readStream.format("kafka")
        for name, value in options.items():
            reader = reader.option(name, value)
        return (
            reader.option("includeHeaders", "true")
            .load()
            .selectExpr("topic", "partition", "offset", "timestamp", "key", "value", "headers")
        )

    def decode_spark_row(self, row: Mapping[str, Any]) -> Record | None:
        if row["value"] is None and _is_cdcflow_tombstone(row.get("headers")):
            return None
        topic, number = row["topic"], row["partition"]
        timestamp = row["timestamp"]
        ts_ms = int(timestamp.timestamp() * 1000) if timestamp is not None else 0
        return self.decode(topic, f"{topic}:{number}", row["key"], row["value"], row["offset"], ts_ms)

    def decode_spark_batch(self, batch: Any) -> Any | None:
        compiled = self._compiled_spark_inputs(batch)
        if compiled is None:
            return None
        native, inputs = compiled
        built = native.json_envelope_rows(batch.num_rows, inputs, UNTYPED_NULL)
        return None if built is None else stream_arrow_batch(built)

    def decode_typed_spark_batch(self, batch: Any, typing: RowTyping) -> Any | None:
        compiled = self._compiled_spark_inputs(batch)
        if compiled is None:
            return None
        native, inputs = compiled
        built = native.json_envelope_typed_rows(
            batch.num_rows, inputs, UNTYPED_NULL, typing.destination, list(typing.row_schemas), list(typing.columns)
        )
        return None if built is None else typing.arrow_batch(built)

    def _compiled_spark_inputs(self, batch: Any) -> tuple[Any, tuple[Any, ...]] | None:
        """The compiled core and what it reads of a batch of Spark's Kafka rows: the topic,
        partition, offset, key and value columns as Arrow buffers, and a skip flag per row; None
        where it cannot read them (no compiled core, values that are not schemaless JSON)."""
        native = native_module()
        converter = self.converter
        # Schemaless JSON envelopes only: values typed by a Connect schema or Avro go row by row.
        if native is None or not isinstance(converter, JsonConverter) or converter.config.schemas_enable:
            return None
        import pyarrow as pa

        wanted = {
            "topic": pa.string(),
            "partition": pa.int32(),
            "offset": pa.int64(),
            "key": pa.binary(),
            "value": pa.binary(),
        }
        arrays = []
        for name, kind in wanted.items():
            array = batch.column(name)
            if array.type != kind:
                return None  # another Arrow layout (large offsets): row by row
            # Unsigned byte views of Arrow's buffers (no copy), as the compiled core reads them.
            views = [None if b is None else memoryview(b).cast("B") for b in array.buffers()]
            arrays.append((views[0], views[1], views[2] if len(views) > 2 else None, array.offset))
        # A null value is a tombstone cdcflow wrote after a delete when its headers say so.
        nulls = batch.column("value").is_null().to_pylist() if batch.column("value").null_count else None
        skip = bytearray(batch.num_rows)
        if nulls is not None:
            headers = batch.column("headers")
            for row, null in enumerate(nulls):
                if null and _is_cdcflow_tombstone(headers[row].as_py()):
                    skip[row] = 1
        return native, (*arrays, bytes(skip))

    def spark_native_offsets(self, logged: Mapping[str, Any]) -> dict[str, Offset]:
        # Spark's Kafka connector logs {"topic": {"partition number": next offset}}.
        return {
            f"{topic}:{number}": {"next": int(offset)}
            for topic, numbers in logged.items()
            for number, offset in numbers.items()
        }

    def spark_native_log(self, offsets: Mapping[str, Offset]) -> dict[str, Any]:
        logged: dict[str, dict[str, int]] = {}
        for partition_id, offset in offsets.items():
            topic, _, number = partition_id.rpartition(":")
            logged.setdefault(topic, {})[number] = int(offset["next"])
        return logged

    def watermark(self, partition: Partition, offset: Offset) -> int | None:
        read_up_to = self._read_up_to.get(partition.id)
        return read_up_to[1] if read_up_to is not None and read_up_to[0] == offset["next"] else None

    def forget(self, partition_ids: Sequence[str]) -> None:
        # initial_offset prefers the group's committed offset: move it to where `start` begins.
        starts = []
        for partition_id in partition_ids:
            topic, _, number = partition_id.rpartition(":")
            low, high = self._bounds(Partition(partition_id, {"topic": topic, "partition": int(number)}))
            starts.append(TopicPartition(topic, int(number), low if self.config.start == "earliest" else high))
        try:
            self.consumer.commit(offsets=starts, asynchronous=False)
        except KafkaException as exc:
            raise SourceUnavailableError(f"cannot reset the offsets of consumer group {self.group_id}: {exc}") from exc

    def commit(self, offsets: Mapping[str, Offset]) -> None:
        topic_partitions = []
        for partition_id, offset in offsets.items():
            topic, _, number = partition_id.rpartition(":")
            topic_partitions.append(TopicPartition(topic, int(number), int(offset["next"])))
        try:
            self.consumer.commit(offsets=topic_partitions, asynchronous=False)
        except KafkaException as exc:
            # The checkpoint store already holds these offsets; the group catches up at the next commit.
            self.context.logger.warning("committing offsets to group %s failed: %s", self.group_id, exc)


def _is_cdcflow_tombstone(headers: Any) -> bool:
    """A null value the kafka sink wrote after a delete (``cdcflow.tombstone``): nothing new."""
    for header in headers or ():
        name = header[0] if isinstance(header, tuple | list) else header["key"]
        if name == TOMBSTONE_HEADER:
            return True
    return False


def _read_at(topic: str, partition: int | str, offset: int) -> dict[str, Any]:
    """Where a record was read in Kafka (dead letters name it in headers of their own)."""
    return {"topic": topic, "partition": partition, "offset": offset}


def _partition_number(partition_id: str) -> int | str:
    """``<topic>:<n>`` (this source's partition ids) -> n."""
    number = partition_id.rpartition(":")[2]
    return int(number) if number.isdigit() else partition_id


_OPS = {op.value for op in Op}


def _event_from_envelope(
    key: dict[str, Any],
    value: dict[str, Any],
    partition_id: str,
    position: dict[str, Any],
    topic: str,
    read_at: dict[str, Any],
    where: str,
) -> ChangeEvent:
    # The event keeps the topic it was read from as its destination (as a Kafka Connect record
    # does), so `route` renames relative to it; its `source` still names the original table.
    source = _envelope_field(value, "source", dict, where)
    if value["op"] not in _OPS:
        raise SourceDataError(
            f"{where}: value is a change envelope whose op is {value['op']!r}; "
            f"expected one of {', '.join(sorted(_OPS))}"
        )
    before = _envelope_field(value, "before", dict | None, where)
    after = _envelope_field(value, "after", dict | None, where)
    original_position = source.get("position")
    try:
        decoded_position = json.loads(original_position) if isinstance(original_position, str) else position
        ts_us = int(source.get("ts_us", 0))
        ts_ms = int(value.get("ts_ms") or time.time() * 1000)
    except (ValueError, TypeError) as exc:
        raise SourceDataError(
            f"{where}: value is a change envelope with a bad source.position, ts_us or ts_ms: {exc}"
        ) from exc
    return ChangeEvent(
        op=Op(value["op"]),
        key=key,
        before=before,
        after=after,
        source=SourceInfo(
            system=source.get("connector", "kafka"),
            cluster=source.get("name", ""),
            keyspace=source.get("keyspace", ""),
            table=source.get("table", ""),
            partition=source.get("partition", partition_id),
            position=decoded_position,
            ts_us=ts_us,
            snapshot=bool(source.get("snapshot", False)),
            version=source.get("version", ""),
            extra={"kafka": {"partition": partition_id, **position}, **read_at},
        ),
        ts_ms=ts_ms,
        topic=topic,
    )


def _envelope_field(value: dict[str, Any], name: str, expected: Any, where: str) -> Any:
    found = value.get(name)
    if not isinstance(found, expected):
        kinds = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
        raise SourceDataError(
            f"{where}: value is a change envelope whose {name} is {kinds.get(type(found), type(found).__name__)}; "
            f"expected {'an object' if expected is dict else 'an object or null'}"
        )
    return found
