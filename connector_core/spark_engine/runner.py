"""Running a pipeline as a Spark Structured Streaming query.

The source side is :mod:`cdcflow.spark_engine.datasource`; this module is the driver: it
starts the query with the pipeline's file checkpoint folder as Spark's checkpoint location, hands
each micro-batch to the sink, and stops the query once a bounded source is drained or a stop is
asked for. Delivery stays at-least-once (exactly-once for sinks that are idempotent per batch):
a sink finishes (flushes) a batch inside ``foreachBatch``, before Spark writes the batch's commit.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from py4j.protocol import Py4JError, Py4JJavaError  # type: ignore[import-untyped]
from pyspark.errors import PySparkException

from cdcflow.capabilities import SparkBatchWriter, SparkNativeSource, is_finished, watermark_of
from cdcflow.chunks import chunked
from cdcflow.config import PipelineSpec, ResolvedPlugin
from cdcflow.contract import Offset, Partition, PluginContext, Sink, Source
from cdcflow.errors import (
    EngineError,
    EngineUnavailableError,
    TransientError,
)
from cdcflow.offsets import pipeline_running
from cdcflow.prerequisites import PrerequisiteScope, refuse_unmet_prerequisites
from cdcflow.processes import run_in_threads
from cdcflow.record_errors import task_rejections
from cdcflow.retry import Backoff
from cdcflow.spark_engine.datasource import (
    DATA_SOURCE_NAME,
    CdcflowDataSource,
    SourceJob,
    build_plugin,
    decode_native_batches,
)
from cdcflow.spark_engine.offsets import batch_end_offsets, checkpoint_location, last_committed_batch
from cdcflow.spark_engine.session import spark_session
from cdcflow.spark_rows import DecodedBatch, StreamBatch, record_from_row
from cdcflow.watermarks import COMPLETE_WATERMARK_US, pipeline_watermark

if TYPE_CHECKING:
    from cdcflow.plugins import PluginRegistry

__all__ = ["checkpoint_location", "run_spark", "run_spark_pipeline"]

log = logging.getLogger("cdcflow.spark")


@dataclass
class _DriverView:
    """The driver's own source instance: for watermarks and for noticing the end of a bounded source."""

    source: Source[Any]

    def partitions(self) -> dict[str, Partition]:
        return {p.id: p for p in self.source.partitions()}

    def watermark(self, end: dict[str, Offset]) -> int | None:
        """The pipeline watermark at a micro-batch's end offsets (:func:`cdcflow.watermarks.pipeline_watermark`)."""
        known = self.partitions()
        return pipeline_watermark(
            (watermark_of(self.source, known[pid], offset), is_finished(self.source, known[pid], offset))
            for pid, offset in end.items()
            if pid in known
        )

    def drained(self, end: dict[str, Offset]) -> bool:
        if not self.source.bounded:
            return False
        known = self.partitions()
        return all(pid in end and is_finished(self.source, p, end[pid]) for pid, p in known.items())


def run_spark(specs: Sequence[PipelineSpec], factory: PluginRegistry) -> int:
    """Run pipelines as Spark queries (one shared session) until drained or signalled."""

    def run_one(spec: PipelineSpec, stop: threading.Event) -> None:
        with pipeline_running(spec):  # `cdcflow offsets reset` refuses to change a running pipeline
            run_spark_pipeline(spec, factory, stop)

    return run_in_threads(specs, run_one)


def run_spark_pipeline(spec: PipelineSpec, registry: PluginRegistry, stop: threading.Event) -> None:
    """Run ``spec`` on Spark until its bounded source is drained or ``stop`` is set."""
    engine = spec.spark_engine
    location = checkpoint_location(spec)  # refuses what the spark engine cannot run
    context = PluginContext(spec.name, spec.file, factory=registry, logger=logging.getLogger(f"cdcflow.{spec.name}"))
    sink: Sink[Any] = registry.create(spec.sink, context)
    view = _DriverView(registry.create(spec.source, context))
    # Sinks run in Spark's tasks; the driver checks they can be reached before a query starts.
    dead_letter: Sink[Any] | None = registry.create(spec.dead_letter, context) if spec.dead_letter else None
    for plugin in (view.source, sink, dead_letter):
        if plugin is not None:
            plugin.check_reachable(spec.engine.startup_timeout_s)
    view.source.open()
    try:
        scope = PrerequisiteScope(thorough=False, timeout_s=spec.engine.startup_timeout_s)
        refuse_unmet_prerequisites(spec.name, [p for p in (view.source, sink, dead_letter) if p is not None], scope)
        done = last_committed_batch(location)
        if done is not None and view.drained(done[1]):
            log.info("pipeline %s: the bounded source was already drained (batch %d)", spec.name, done[0])
            return
        needed = sink.spark_session_conf() if isinstance(sink, SparkBatchWriter) else {}
        session = spark_session(
            f"cdcflow-{spec.name}",
            engine.master,
            {**needed, **engine.conf},
            python=engine.python,
            executor_timeout_s=engine.executor_timeout_s,
        )
        _run_query(session, spec, sink, view, location, stop)
    finally:
        view.source.close()


def _run_query(
    session: Any, spec: PipelineSpec, sink: Sink[Any], view: _DriverView, location: Path, stop: threading.Event
) -> None:
    batch_writer = sink if isinstance(sink, SparkBatchWriter) else None
    job = SourceJob.of(spec, with_record=batch_writer is None)
    native = _native_stream(session, view.source, spec)
    if native is not None:
        stream = native  # Spark's own rows, decoded batch by batch in write_batch
        decode = functools.partial(decode_native_batches, job)
    else:
        session.dataSource.register(CdcflowDataSource)
        stream = session.readStream.format(DATA_SOURCE_NAME).option("job", job.encode()).load()
    drained_at: list[int] = []
    if batch_writer is not None:
        sink.open()

    def write_batch(batch: Any, batch_id: int) -> None:
        if native is None:
            end = batch_end_offsets(location, batch_id)
            drained = view.drained(end)
            # A drained bounded source will never add anything: every time partition is complete.
            watermark = COMPLETE_WATERMARK_US if drained else view.watermark(end)
        else:  # Spark's connector owns these offsets; it has no cdcflow watermark and no end
            drained, watermark = False, None
        rows = DecodedBatch(batch, decode) if native is not None else StreamBatch(batch)
        if batch_writer is not None:
            batch_writer.write_batch(rows, batch_id, watermark)
        else:
            _write_through_sink(rows.rows(), spec)
        if drained:
            drained_at.append(batch_id)

    location.mkdir(parents=True, exist_ok=True)
    query = (
        stream.writeStream.queryName(spec.name)
        .foreachBatch(write_batch)
        .option("checkpointLocation", str(location))
        .trigger(processingTime=f"{spec.spark_engine.trigger_interval_ms} milliseconds")
        .start()
    )
    try:
        reported = -1
        while not _terminated(query, stop):
            progress = query.lastProgress
            if progress is not None and progress["batchId"] > reported and progress["numInputRows"] > 0:
                reported = progress["batchId"]
                log.info(
                    "pipeline %s: batch %d: %d events in %d ms",
                    spec.name,
                    reported,
                    progress["numInputRows"],
                    progress["durationMs"].get("triggerExecution", 0),
                    extra={"batch": reported, "events": progress["numInputRows"]},
                )
                log.debug("pipeline %s: batch %d: Spark's phases (ms): %s", spec.name, reported, progress["durationMs"])
            if drained_at and progress is not None and progress["batchId"] >= drained_at[-1]:
                log.info("pipeline %s: the bounded source is drained; stopping", spec.name)
                break
            if stop.is_set():
                log.info("pipeline %s: stopping; Spark re-runs any unfinished batch on restart", spec.name)
                break
    finally:
        spark_gone = _stop_query(query, spec, stop)
        if batch_writer is not None:
            sink.close()
    if not spark_gone:
        raise_query_failure(query, spec.name, stop)


def raise_query_failure(query: Any, pipeline: str, stop: threading.Event) -> None:
    """Raise the failure ``query`` ended with, unless a stop was requested: a signal to the whole
    process group reaches Spark's JVM too, which can end the running batch with a failure before
    or while the query is stopped. That is a requested stop all the same, and nothing is lost:
    Spark re-runs the unfinished batch from its checkpoint at the next start (and a real failure
    of that batch shows there)."""
    try:
        failure = query.exception()
    except Exception:
        if not stop.is_set():
            raise
        failure = None  # the JVM is gone: whatever the query ended with is re-run at the next start
    if failure is None:
        return
    if stop.is_set():
        log.warning(
            "pipeline %s: the Spark query ended with the stop signal (%s); any unfinished batch re-runs "
            "at the next start",
            pipeline,
            str(failure).splitlines()[0][:300],
        )
        return
    raise EngineError(f"pipeline {pipeline}: the Spark query failed: {failure}")


def _terminated(query: Any, stop: threading.Event) -> bool:
    try:
        return bool(query.awaitTermination(0.2))
    except Exception:
        # A signal to the whole process group can shut the JVM down before this process's own
        # handler has set ``stop``: give it a moment to arrive.
        if stop.wait(1.0):
            return True  # Spark shut down with the signal; _stop_query says so
        raise


def _stop_query(query: Any, spec: PipelineSpec, stop: threading.Event) -> bool:
    """Stop ``query``; True if Spark was already gone because the stop signal reached its JVM too
    (a process group or a systemd unit is signalled as a whole): a requested stop all the same,
    and Spark re-runs any unfinished batch from its checkpoint at the next start."""
    try:
        query.stop()
    except Exception as exc:
        if not stop.is_set():
            raise
        # Only the exception's type: its text would be fetched from the JVM, which is gone.
        log.warning(
            "pipeline %s: Spark had already shut down (its JVM got the stop signal too: %s); "
            "any unfinished batch re-runs at the next start",
            spec.name,
            type(exc).__name__,
        )
        return True
    return False


_CONNECTOR_NOT_FOUND = frozenset({"DATA_SOURCE_NOT_FOUND", "_LEGACY_ERROR_TEMP_1139", "_LEGACY_ERROR_TEMP_1140"})
"""Spark's error conditions for a ``readStream.format`` no installed connector provides: any
format, ``avro``, ``kafka`` (``DataSource.lookupDataSource``; the messages are in Spark's
``error/error-conditions.json``, spark-common-utils)."""


def _spark_error_condition(exc: PySparkException | Py4JJavaError) -> str | None:
    """A Spark failure's error condition (``SparkThrowable.getCondition``), whether pyspark
    converted the JVM's exception (AnalysisException...) or passed it through as it was (the
    SparkClassNotFoundException of an unknown format)."""
    if isinstance(exc, PySparkException):
        return exc.getCondition()
    try:
        condition = exc.java_exception.getCondition()
    except Py4JError:  # not a SparkThrowable: no condition
        return None
    return str(condition) if condition is not None else None


def _native_stream(session: Any, source: Source[Any], spec: PipelineSpec) -> Any | None:
    if not isinstance(source, SparkNativeSource):
        return None
    try:
        return source.spark_native_stream(session, spec.engine.max_records_per_read)
    except (PySparkException, Py4JJavaError) as exc:
        # Spark's error condition, not its message, whose wording differs by connector and release.
        if _spark_error_condition(exc) in _CONNECTOR_NOT_FOUND:
            raise EngineUnavailableError(
                f"pipeline {spec.name}: Spark's connector for source type {spec.source.config.type!r} is not "
                f"installed: run scripts/spark_jars.sh install (it resolves it from Maven Central): {exc}"
            ) from exc
        raise


def _write_through_sink(batch: Any, spec: PipelineSpec) -> None:
    """A generic cdcflow sink inside Spark's tasks: each task writes its rows and flushes before
    it succeeds, so the batch commits only after everything in it is durable downstream."""
    sink_plugin, dead_plugin = spec.sink, spec.dead_letter
    name, file, tolerance = spec.name, spec.file, spec.errors.tolerance
    retry, batch_size = spec.errors.retry, spec.engine.batch_size

    def write_partition(rows: Iterable[Any]) -> None:
        records = [record_from_row(row[0]) for row in rows if row[0] is not None]
        if not records:
            return
        backoff = Backoff(retry)
        while True:
            try:
                _deliver(records, name, file, sink_plugin, dead_plugin, tolerance, batch_size)
                return
            except TransientError as exc:
                # Re-delivering the whole task's rows is at-least-once: duplicates, never loss.
                time.sleep(backoff.next_delay(f"pipeline {name}: spark task delivery", exc))

    batch.select("record").foreachPartition(write_partition)


def _deliver(
    records: list[Any],
    pipeline: str,
    file: Path,
    sink_plugin: ResolvedPlugin,
    dead_plugin: ResolvedPlugin | None,
    tolerance: str,
    batch_size: int,
) -> None:
    sink: Sink[Any] = build_plugin(pipeline, file, sink_plugin)
    build_dead_letter = None if dead_plugin is None else lambda: build_plugin(pipeline, file, dead_plugin)
    try:
        sink.open()
        with task_rejections(pipeline, tolerance, build_dead_letter) as rejected_records:
            for chunk in chunked(records, batch_size):
                rejected_records.route(sink.write(chunk))
            rejected_records.route(sink.flush())
    finally:
        sink.close()
