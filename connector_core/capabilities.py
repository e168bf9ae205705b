"""What only some plugins can do, each an optional capability beside the contract
(:mod:`cdcflow.contract`): a protocol a plugin meets by having its methods, without inheriting
anything. The engines look for a capability with ``isinstance(plugin, Protocol)`` and use the
plugin's plain contract where it is absent, so a plugin implements only what it can do.

Source capabilities: :class:`ReadsEventBatches`, :class:`ReportsWatermarks`,
:class:`FinitePartitions`, :class:`ReportsCaughtUp`, :class:`ReportsDataLossHeadroom`,
:class:`ForgetsPartitions`, :class:`SparkNativeSource` (and :class:`DecodesSparkBatches` beside it).
Sink capabilities: :class:`WritesEventBatches` (with :class:`SinkEventBatchSwitch`),
:class:`WatermarkAwareSink`, :class:`SparkBatchWriter`. Converter: :class:`SerializesEventBatches`
(with :class:`ConverterEventBatchSwitch`). Transform:
:class:`TransformsEventBatches`. docs/plugins.md has the table of who uses and who implements each.

Importing this module imports no engine and no pyspark (Spark's types are named for type checkers
only).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

from cdcflow.batches import EncodedMessages, EventBatch
from cdcflow.contract import DataLossHeadroom, Offset, Partition, Rejected
from cdcflow.events import Record

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from cdcflow.spark_rows import RowTyping, StreamBatch

__all__ = [
    "ConverterEventBatchSwitch",
    "DecodesSparkBatches",
    "FinitePartitions",
    "ForgetsPartitions",
    "ReadsEventBatches",
    "ReportsCaughtUp",
    "ReportsDataLossHeadroom",
    "ReportsWatermarks",
    "SerializesEventBatches",
    "SinkEventBatchSwitch",
    "SparkBatchWriter",
    "SparkNativeSource",
    "TransformsEventBatches",
    "WatermarkAwareSink",
    "WritesEventBatches",
    "caught_up_of",
    "forget_partitions",
    "is_finished",
    "serializes_event_batches",
    "takes_event_batches",
    "watermark_of",
]


# --- sources -----------------------------------------------------------------------------------


@runtime_checkable
class ReadsEventBatches(Protocol):
    """A source that can hand a range over as compact batches (:mod:`cdcflow.batches`), which the
    compiled core serialises without a Python object per event."""

    def read_event_batches(
        self, partition: Partition, start: Offset, end: Offset, batch_size: int
    ) -> Iterator[EventBatch] | None:
        """``read(partition, start, end)`` as compact batches of at most ``batch_size`` events, or
        None when it cannot give one for this range (the worker engine then calls ``read``). The
        events, in order, must be exactly what ``read`` yields for the range: the same delivery
        rules hold. The runtime asks only when every stage after the source takes batches."""


@runtime_checkable
class ReportsWatermarks(Protocol):
    """A source that knows the event time up to which a partition is complete."""

    def watermark(self, partition: Partition, offset: Offset) -> int | None:
        """Event time (µs since the epoch) below which ``partition`` is complete at ``offset``: no
        record with an earlier event time can still appear past it. None where it cannot tell."""


@runtime_checkable
class FinitePartitions(Protocol):
    """A source whose partitions (some or all) end: a bounded source (``Source.bounded``), a
    snapshot, a closed CDC generation."""

    def is_finished(self, partition: Partition, offset: Offset) -> bool:
        """True when ``partition`` has nothing beyond ``offset``, ever. A finished partition's
        successors (``Partition.succeeds``) may then be read, and a bounded pipeline ends once
        every partition it owns is finished."""


@runtime_checkable
class ReportsCaughtUp(Protocol):
    """A source that says itself when a partition has nothing more to give now."""

    def caught_up(self, partition: Partition, offset: Offset) -> bool | None:
        """True when ``offset`` holds everything the partition has to give now: nothing waits
        beyond it. The pipeline reports a caught-up partition's lag as 0 (see
        :mod:`cdcflow.metrics`). None lets the pipeline decide, as it does for a source without
        this capability: caught up when ``latest_offset`` had nothing beyond the position. A
        source whose offsets move with time even when nothing happens (a change log read up to now
        minus a window) says it here."""


@runtime_checkable
class ReportsDataLossHeadroom(Protocol):
    """A source that keeps something that can expire (cdc_raw space, a log's TTL, TiKV's GC)."""

    def data_loss_headroom(self, partition: Partition, committed: Offset) -> DataLossHeadroom | None:
        """How long until changes after ``committed`` (the partition's committed offset, where a
        restart resumes) may be lost if nothing moves it on: the cdc_raw space a Cassandra node
        has left at its current write rate, a ScyllaDB log's TTL less the partition's lag, TiKV's
        GC TTL less the checkpoint's age. None where nothing limits it now. The delivery loop asks
        every few seconds, from its own thread, and publishes the answer as
        ``cdcflow_data_loss_headroom_seconds{pipeline, partition, reason}``, counted down between
        two asks (:mod:`cdcflow.metrics`); a cheap answer is expected (no full scan)."""


@runtime_checkable
class ForgetsPartitions(Protocol):
    """A source that keeps its own bookmark of where partitions start (a Kafka consumer group)."""

    def forget(self, partition_ids: Sequence[str]) -> None:
        """Forget the source's own bookmark of these partitions, so that ``initial_offset`` starts
        them from their beginning again: ``cdcflow offsets reset`` calls it after removing their
        checkpoints. A source whose ``initial_offset`` reads a bookmark (the ``kafka`` source reads
        its consumer group's offsets) must have it, or a reset would change nothing."""


@runtime_checkable
class SparkNativeSource(Protocol):
    """A source the spark engine reads with a native Spark connector instead of the contract's
    ``partitions``/``read`` (the ``kafka`` source reads with ``spark-sql-kafka``). Spark's
    connector then owns the offsets, in the query's checkpoint."""

    def spark_native_stream(self, session: SparkSession, max_records_per_read: int) -> DataFrame:
        """The streaming DataFrame Spark's connector reads. Called on the driver, after ``open``;
        each row it yields is passed to :meth:`decode_spark_row` in Spark's tasks.
        ``max_records_per_read`` is ``engine.max_records_per_read`` (per partition and
        micro-batch); a connector that cannot bound each partition says in its own settings what
        it bounds instead."""

    def decode_spark_row(self, row: Mapping[str, Any]) -> Record | None:
        """One row of :meth:`spark_native_stream` as a cdcflow record, or None for a row that
        carries no change (the tombstone cdcflow's kafka sink writes after a delete)."""

    def spark_native_offsets(self, logged: Mapping[str, Any]) -> dict[str, Offset]:
        """The offsets Spark's connector logged for :meth:`spark_native_stream`, as cdcflow
        offsets by partition id (what ``cdcflow offsets show`` prints)."""

    def spark_native_log(self, offsets: Mapping[str, Offset]) -> dict[str, Any]:
        """The inverse of :meth:`spark_native_offsets`: what Spark's connector reads back."""


@runtime_checkable
class DecodesSparkBatches(Protocol):
    """A :class:`SparkNativeSource` that can decode a whole Arrow batch of Spark's rows at once
    (in the compiled core). The engine asks only when no transform runs and the sink takes the
    stream rows themselves (a :class:`SparkBatchWriter` such as ``parquet``)."""

    def decode_spark_batch(self, batch: Any) -> Any | None:
        """The ``pyarrow.RecordBatch`` of :meth:`SparkNativeSource.spark_native_stream` rows
        ``batch`` in the stream shape (:func:`cdcflow.spark_rows.stream_arrow_batch`), exactly as
        :meth:`~SparkNativeSource.decode_spark_row` would give row by row, or None for a batch it
        cannot decode so (the engine then decodes it row by row)."""

    def decode_typed_spark_batch(self, batch: Any, typing: RowTyping) -> Any | None:
        """What ``typing`` makes of :meth:`decode_spark_batch`'s rows, built without the stream
        rows (``typing.arrow_batch``), or None whenever unsure (the engine then decodes and types
        it the reference way)."""


# --- sinks, converters, transforms --------------------------------------------------------------


@runtime_checkable
class WritesEventBatches(Protocol):
    """A sink that takes compact batches (:mod:`cdcflow.batches`) as well as records."""

    def write_event_batch(self, batch: EventBatch) -> list[Rejected] | None:
        """``write`` for a compact batch, or None to decline it: the runtime then writes the
        batch's :meth:`~cdcflow.batches.EventBatch.records`. Same guarantees as ``write`` (may
        buffer; ``flush`` makes it durable); a record refused for good comes back as
        ``batch.record(i)``."""


@runtime_checkable
class SinkEventBatchSwitch(Protocol):
    """A :class:`WritesEventBatches` sink whose config decides whether it takes batches at all
    (the ``kafka`` sink can when its converter serialises batches). Without it, a sink that has
    ``write_event_batch`` takes them."""

    @property
    def takes_event_batches(self) -> bool:
        """Whether ``write_event_batch`` can take batches at all (the runtime then reads them)."""


@runtime_checkable
class WatermarkAwareSink(Protocol):
    """A sink that orders writes or closes time partitions by event time (``tikv``)."""

    def on_watermark(self, watermark_us: int) -> None:
        """Every record with an event time below ``watermark_us`` has been written (the pipeline's
        watermark: the minimum over its partitions)."""


@runtime_checkable
class SparkBatchWriter(Protocol):
    """A sink that writes a Spark micro-batch as a whole, with Spark's own writers (``parquet``,
    ``delta``); the spark engine then hands it each batch instead of calling ``write``/``flush``
    in Spark's tasks. Such a sink builds its DataFrames with :mod:`cdcflow.spark_rows`."""

    def write_batch(self, batch: StreamBatch, batch_id: int, watermark_us: int | None) -> None:
        """Write the micro-batch ``batch`` (its :meth:`~cdcflow.spark_rows.StreamBatch.rows` are in
        the stream shape, :data:`cdcflow.spark_rows.STREAM_COLUMNS`).

        Must be idempotent per ``batch_id``: Spark re-runs a batch whose commit a crash prevented,
        with the same rows, and the output must then be as if it ran once. ``watermark_us`` is the
        pipeline's watermark at the batch's end (the minimum over partitions), if the source has
        one."""

    def spark_session_conf(self) -> Mapping[str, str]:
        """Spark settings the sink needs from the session's start (SQL extensions, catalogs: what
        cannot be set once it runs). The pipeline's ``engine.conf`` overrides them. A sink that
        subclasses this protocol inherits this default: none."""
        return {}


@runtime_checkable
class SerializesEventBatches(Protocol):
    """A converter the compiled core can serialise compact batches through."""

    def serialize_event_batch(
        self, batch: EventBatch, destinations: Sequence[str], tombstones: bool
    ) -> EncodedMessages | None:
        """A compact batch as Kafka messages (``destinations[i]`` is where ``batch.tables[i]``
        goes; with ``tombstones`` a keyed delete is followed by its tombstone), exactly the bytes
        ``serialize_key``/``serialize_value`` give per record, or None when it cannot encode it
        without Python objects (also when an event does not fit its schema, so that the caller's
        per-record path rejects just that one)."""


@runtime_checkable
class ConverterEventBatchSwitch(Protocol):
    """A :class:`SerializesEventBatches` converter that says whether it can encode batches at all
    (``json`` and ``avro``: only with the compiled core). Without it, a converter that has
    ``serialize_event_batch`` can."""

    @property
    def serializes_event_batches(self) -> bool:
        """Whether ``serialize_event_batch`` can encode batches at all."""


@runtime_checkable
class TransformsEventBatches(Protocol):
    """A transform that applies to a compact batch without building its events (``route``)."""

    def apply_to_event_batch(self, batch: EventBatch) -> EventBatch | None:
        """``apply`` over a compact batch, or None to decline it: the runtime then builds the
        events and calls ``apply`` per event. Only where the result is exactly what ``apply``
        gives for every event and no event is dropped."""


# --- how the engines ask -----------------------------------------------------------------------

# isinstance against a runtime-checkable protocol walks its members (7-20 µs on Python 3.11), and
# the delivery loop asks for every partition on every cycle: the answer is kept per class.
_has_capability: dict[tuple[type, type], bool] = {}


def _has(plugin: object, capability: type) -> bool:
    """``isinstance(plugin, capability)``, asked once per plugin class."""
    key = (type(plugin), capability)
    found = _has_capability.get(key)
    if found is None:
        found = _has_capability[key] = isinstance(plugin, capability)
    return found


def watermark_of(source: object, partition: Partition, offset: Offset) -> int | None:
    """``source``'s watermark of ``partition`` at ``offset``; None for a source without
    :class:`ReportsWatermarks`."""
    return cast(ReportsWatermarks, source).watermark(partition, offset) if _has(source, ReportsWatermarks) else None


def is_finished(source: object, partition: Partition, offset: Offset) -> bool:
    """Whether ``partition`` of ``source`` has nothing beyond ``offset``, ever; never for a source
    without :class:`FinitePartitions`."""
    return _has(source, FinitePartitions) and cast(FinitePartitions, source).is_finished(partition, offset)


def caught_up_of(source: object, partition: Partition, offset: Offset) -> bool | None:
    """``source``'s own word on whether ``partition`` is caught up at ``offset``; None (the
    pipeline decides) for a source without :class:`ReportsCaughtUp`."""
    return cast(ReportsCaughtUp, source).caught_up(partition, offset) if _has(source, ReportsCaughtUp) else None


def takes_event_batches(sink: object) -> bool:
    """Whether ``sink`` takes compact batches: it has :class:`WritesEventBatches`, and its
    :class:`SinkEventBatchSwitch`, if it has one, is on."""
    if not isinstance(sink, WritesEventBatches):
        return False
    return sink.takes_event_batches if isinstance(sink, SinkEventBatchSwitch) else True


def serializes_event_batches(converter: object) -> bool:
    """Whether ``converter`` encodes compact batches: it has :class:`SerializesEventBatches`, and
    its :class:`ConverterEventBatchSwitch`, if it has one, is on."""
    if not isinstance(converter, SerializesEventBatches):
        return False
    return converter.serializes_event_batches if isinstance(converter, ConverterEventBatchSwitch) else True


def forget_partitions(source: object, partition_ids: Sequence[str]) -> None:
    """Have ``source`` forget its own bookmark of these partitions; nothing for a source without
    :class:`ForgetsPartitions` (it keeps none)."""
    if isinstance(source, ForgetsPartitions):
        source.forget(partition_ids)
