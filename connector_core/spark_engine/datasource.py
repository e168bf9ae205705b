"""Any cdcflow source as a PySpark streaming data source.

The contract maps one to one: ``initialOffset``/``latestOffset`` are the source's
``initial_offset``/``latest_offset`` per partition (a Spark offset is ``{partition id: offset}``),
``partitions(start, end)`` gives one Spark task per cdcflow partition with news, ``read`` is the
source's deterministic ``read(start, end]`` followed by the pipeline's transforms, and ``commit``
is the source's ``commit`` once Spark has made the batch durable. Spark keeps the offsets in its
checkpoint directory, so a batch re-planned after a crash reads exactly the same events. A
partition that replaces others (``Partition.succeeds``) is planned no further than its start until
they are complete at the offsets the batch starts from (:mod:`cdcflow.succession`): their last reads
are then in a completed batch, written before this one. A
``read_where_planned`` source (a change feed whose rows exist where it was followed) is read in
``partitions``, in the process that ran ``latestOffset``, and its records travel with the task.
"""

from __future__ import annotations

import base64
import logging
import pickle
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit
from pyspark.sql.types import StructType

from cdcflow.capabilities import DecodesSparkBatches, SparkNativeSource
from cdcflow.chunks import chunked
from cdcflow.config import ErrorsConfig, PipelineSpec, ResolvedPlugin
from cdcflow.contract import Offset, Partition, PluginContext, Rejected, Source, Transform, offset_key
from cdcflow.errors import EngineUnsupportedError
from cdcflow.events import ChangeEvent, Record
from cdcflow.pipeline import apply_transforms
from cdcflow.processes import tune_garbage_collector
from cdcflow.record_errors import task_rejections
from cdcflow.schemas import infer_row_schema
from cdcflow.spark_rows import STREAM_SCHEMA_DDL, RowTyping, record_to_row, stream_arrow_schema
from cdcflow.succession import SuccessionGate

if TYPE_CHECKING:
    from cdcflow.plugins import PluginRegistry

__all__ = ["DATA_SOURCE_NAME", "CdcflowDataSource", "SourceJob", "build_plugin", "decode_native_batches"]

DATA_SOURCE_NAME = "cdcflow"
log = logging.getLogger("cdcflow.spark")


@dataclass(frozen=True)
class SourceJob:
    """What Spark's Python processes need to rebuild a pipeline's source side."""

    pipeline: str
    pipeline_file: Path
    source: ResolvedPlugin
    transforms: tuple[ResolvedPlugin, ...]
    errors: ErrorsConfig
    dead_letter: ResolvedPlugin | None
    max_records_per_read: int
    partition_refresh_ms: int
    batch_size: int  # records per chunk: transformed, and their rejections routed, together
    with_record: bool  # fill the ``record`` column: a generic sink runs downstream

    @classmethod
    def of(cls, spec: PipelineSpec, with_record: bool) -> SourceJob:
        """The source side of pipeline ``spec``."""
        return cls(
            pipeline=spec.name,
            pipeline_file=spec.file,
            source=spec.source,
            transforms=spec.transforms,
            errors=spec.errors,
            dead_letter=spec.dead_letter,
            max_records_per_read=spec.engine.max_records_per_read,
            partition_refresh_ms=spec.engine.partition_refresh_ms,
            batch_size=spec.engine.batch_size,
            with_record=with_record,
        )

    def encode(self) -> str:
        return base64.b64encode(pickle.dumps(self)).decode()

    @staticmethod
    def decode(text: str) -> SourceJob:
        job: SourceJob = pickle.loads(base64.b64decode(text))
        return job


_registry: PluginRegistry | None = None


def build_plugin(
    job_pipeline: str,
    pipeline_file: Path,
    resolved: ResolvedPlugin,
    committed_offsets: Callable[[], Mapping[str, Offset]] | None = None,
) -> Any:
    """A plugin instance in whichever Spark process asks, built through the process's registry."""
    global _registry  # noqa: PLW0603 - one registry per Python worker process, built on first use
    if _registry is None:
        from cdcflow.plugins import PluginRegistry

        _registry = PluginRegistry.from_entry_points()
    context = PluginContext(
        job_pipeline,
        pipeline_file,
        logger=logging.getLogger(f"cdcflow.{job_pipeline}"),
        committed_offsets=committed_offsets,
    )
    return _registry.create(resolved, context)


class SourceSlice(InputPartition):
    """One cdcflow partition's ``(start, end]`` in one micro-batch, with its records when the
    source is read where the batch is planned (``Source.read_where_planned``)."""

    def __init__(
        self,
        partition_id: str,
        info: Mapping[str, Any],
        start: Offset,
        end: Offset,
        records: list[Record | Rejected] | None = None,
    ) -> None:
        super().__init__(partition_id)
        self.partition_id, self.info, self.start, self.end = partition_id, info, start, end
        self.records = records


class CdcflowStreamReader(DataSourceStreamReader):
    def __init__(self, job: SourceJob) -> None:
        self.job = job
        self._source: Source[Any] | None = None
        self._partitions: dict[str, Partition] = {}
        self._listed_at = float("-inf")
        # What the batch being planned starts from: the ends of the last completed batch, which
        # Spark's offset and commit logs hold. The source's view of the pipeline's committed offsets.
        self._planned_from: dict[str, Offset] = {}
        self._succession: SuccessionGate | None = None

    def _opened_source(self) -> Source[Any]:
        if self._source is None:
            source: Source[Any] = build_plugin(
                self.job.pipeline, self.job.pipeline_file, self.job.source, lambda: self._planned_from
            )
            source.open()
            self._source = source
        return self._source

    def _current_partitions(self) -> dict[str, Partition]:
        now = time.monotonic()
        if now - self._listed_at >= self.job.partition_refresh_ms / 1000:
            self._partitions = {p.id: p for p in self._opened_source().partitions()}
            self._listed_at = now
        return self._partitions

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 - Spark's name
        source = self._opened_source()
        return {pid: source.initial_offset(p) for pid, p in self._current_partitions().items()}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802
        self._planned_from = dict(start)
        source = self._opened_source()
        if self._succession is None:
            # The offsets a batch starts from are those the last completed batch made durable.
            self._succession = SuccessionGate(source, lambda: self._planned_from, refresh_s=0.0)
        partitions = self._current_partitions()
        self._succession.listed(partitions.values())
        end: dict[str, Any] = {}
        for pid, partition in partitions.items():
            if pid not in start:
                # A partition that appeared since the last batch starts with an empty batch, so
                # its start offset is in Spark's log before anything is read from it: a re-planned
                # batch then never depends on when initial_offset happened to be called.
                end[pid] = source.initial_offset(partition)
            elif not self._succession.may_read(partition):
                end[pid] = start[pid]  # its predecessors' last reads are not in a completed batch yet
            else:
                end[pid] = source.latest_offset(partition, start[pid], self.job.max_records_per_read)
        for pid, offset in start.items():
            end.setdefault(pid, offset)  # a partition that vanished keeps its last position
        return end

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        known = self._current_partitions()
        slices = []
        for pid, end_offset in sorted(end.items()):
            start_offset = start.get(pid)
            if start_offset is None or offset_key(start_offset) == offset_key(end_offset):
                continue
            info = known[pid].info if pid in known else {}
            records = None
            if self._opened_source().read_where_planned:
                records = list(self._opened_source().read(Partition(pid, info), start_offset, end_offset))
            slices.append(SourceSlice(pid, dict(info), start_offset, end_offset, records))
        return slices

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, SourceSlice)
        return _as_arrow_batches(_read_slice(self.job, partition))

    def commit(self, end: dict[str, Any]) -> None:
        self._opened_source().commit(end)

    def stop(self) -> None:
        if self._source is not None:
            self._source.close()
            self._source = None


_open_sources: dict[str, tuple[Source[Any], list[Transform[Any]]]] = {}


def _source_side(job: SourceJob, open_source: bool = True) -> tuple[Source[Any], list[Transform[Any]]]:
    """The source and transforms for ``job``, kept open across the tasks a reused worker runs."""
    key = offset_key({"pipeline": job.pipeline, "source": job.source.config.model_dump(mode="json")})
    if key not in _open_sources:
        if not _open_sources:
            tune_garbage_collector()  # a Spark Python worker now runs cdcflow's loop: same reasoning
        source: Source[Any] = build_plugin(job.pipeline, job.pipeline_file, job.source)
        if open_source:
            source.open()
        transforms = [build_plugin(job.pipeline, job.pipeline_file, t) for t in job.transforms]
        for transform in transforms:
            transform.open()
        _open_sources[key] = (source, transforms)
    return _open_sources[key]


def _read_slice(job: SourceJob, piece: SourceSlice) -> Iterator[tuple[Any, ...]]:
    if piece.records is not None:
        _, transforms = _source_side(job, open_source=False)
        return _transformed_rows(job, transforms, iter(piece.records))
    source, transforms = _source_side(job)
    records = source.read(Partition(piece.partition_id, piece.info), piece.start, piece.end)
    return _transformed_rows(job, transforms, records)


def _as_arrow_batches(rows: Iterator[tuple[Any, ...]], size: int = 4096) -> Iterator[Any]:
    """Rows as Arrow record batches: Spark takes those without converting row by row."""
    import pyarrow as pa

    schema = stream_arrow_schema()
    for chunk in chunked(rows, size):
        columns = list(zip(*chunk, strict=True))
        yield pa.RecordBatch.from_arrays(
            [pa.array(column, type=field.type) for column, field in zip(columns, schema, strict=True)], schema=schema
        )


def decode_native_batches(job: SourceJob, batches: Iterator[Any], typing: RowTyping | None = None) -> Iterator[Any]:
    """``mapInArrow`` body for a source's native Spark stream: its rows, decoded by the source,
    transformed, in the stream shape; with ``typing``, typed as it asks (``typed_change_rows``)."""
    source, transforms = _source_side(job, open_source=False)
    if not isinstance(source, SparkNativeSource):
        raise EngineUnsupportedError(f"pipeline {job.pipeline}: source {source.type_name!r} has no native Spark stream")
    whole_batches = not transforms and not job.with_record and isinstance(source, DecodesSparkBatches)
    for batch in batches:
        if whole_batches and typing is not None and isinstance(source, DecodesSparkBatches):
            typed = source.decode_typed_spark_batch(batch, typing)
            if typed is not None:  # built by the compiled core without the stream rows
                if typed.num_rows:
                    yield typed
                continue
        rows = _stream_batches(job, source, transforms, batch, whole_batches)
        yield from (rows if typing is None else typing(rows))


def _stream_batches(
    job: SourceJob, source: SparkNativeSource, transforms: list[Transform[Any]], batch: Any, whole_batch: bool
) -> Iterator[Any]:
    if whole_batch and isinstance(source, DecodesSparkBatches):
        rows = source.decode_spark_batch(batch)
        if rows is not None:  # decoded by the compiled core, exactly as row by row
            if rows.num_rows:
                yield rows
            return
    decoded = (source.decode_spark_row(row) for row in batch.to_pylist())
    records = (record for record in decoded if record is not None)
    # Column by column: building Arrow arrays from the row tuples' columns costs less than
    # Arrow building them from a dict per row.
    yield from _as_arrow_batches(_transformed_rows(job, transforms, records), size=max(batch.num_rows, 1))


def _transformed_rows(
    job: SourceJob, transforms: list[Transform[Any]], records: Iterator[Record | Rejected]
) -> Iterator[tuple[Any, ...]]:
    dead_letter = job.dead_letter
    build_dead_letter = (
        None if dead_letter is None else lambda: build_plugin(job.pipeline, job.pipeline_file, dead_letter)
    )
    with task_rejections(job.pipeline, job.errors.tolerance, build_dead_letter) as rejected_records:
        for batch in chunked(records, job.batch_size):
            output, rejected = apply_transforms(transforms, batch)
            rejected_records.route(rejected)
            for record in output:
                if isinstance(record, ChangeEvent) and record.schema is None:
                    # Records read back from Kafka (or from a source that knows no table metadata)
                    # carry values only; typed Parquet columns need a schema, so read one off them.
                    yield record_to_row(record.with_changes(schema=infer_row_schema(record)), job.with_record)
                else:
                    yield record_to_row(record, job.with_record)


class CdcflowDataSource(DataSource):
    """``spark.readStream.format("cdcflow").option("job", SourceJob.encode()).load()``."""

    @classmethod
    def name(cls) -> str:
        return DATA_SOURCE_NAME

    def schema(self) -> StructType | str:
        return STREAM_SCHEMA_DDL

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 - Spark's name
        return CdcflowStreamReader(SourceJob.decode(self.options["job"]))
