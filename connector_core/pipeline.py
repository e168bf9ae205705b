"""The delivery loop: at-least-once from any source to any sink, by construction.

For each owned partition: ``end = latest_offset``, ``read(start, end]``, transform, ``sink.write``.
At each checkpoint: ``sink.flush()``, then (and only then) commit the offsets, then tell the source.
A crash anywhere replays from the last committed offsets; a transient failure does the same in
process after a backoff. Duplicates are possible, losses are not.
"""

from __future__ import annotations

import logging
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Protocol

from cdcflow.config import PipelineSpec
from cdcflow.contract import (
    Checkpoint,
    CheckpointStore,
    Offset,
    Partition,
    PluginContext,
    Rejected,
    Sink,
    Source,
    Transform,
    offset_key,
)
from cdcflow.errors import (
    CdcflowError,
    EngineUnsupportedError,
    RecordRejectedError,
    SinkError,
    TransientError,
)
from cdcflow.events import ChangeEvent, Record
from cdcflow.metrics import PipelineMetrics
from cdcflow.retry import Backoff

__all__ = [
    "DEAD_LETTER_STAGE_HEADER",
    "AllPartitions",
    "HashAssignment",
    "PartitionAssignment",
    "PipelineRunner",
    "RecordFailedError",
    "apply_transforms",
    "dead_letter_record",
]

log = logging.getLogger("cdcflow.pipeline")


class PartitionAssignment(Protocol):
    """Which source partitions this process owns. Exactly one process owns each partition.

    The assignment is explicit and separate from the loop so that a coordinator (Kafka's group
    protocol, Spark) can hand partitions out instead of this static split.
    """

    def owns(self, partition_id: str) -> bool: ...


@dataclass(frozen=True)
class AllPartitions:
    def owns(self, partition_id: str) -> bool:
        return True


@dataclass(frozen=True)
class HashAssignment:
    """Worker ``index`` of ``count`` owns the partitions whose id hashes to it (stable across runs)."""

    index: int
    count: int

    def owns(self, partition_id: str) -> bool:
        return zlib.crc32(partition_id.encode()) % self.count == self.index


class _StopRequestedError(Exception):
    """Stop was requested while waiting to retry."""


class RecordFailedError(CdcflowError):
    """A record failed and ``errors.tolerance`` is ``none``: the pipeline stops before committing it."""

    def __init__(self, pipeline: str, rejected: Rejected) -> None:
        self.rejected = rejected
        super().__init__(
            f"pipeline {pipeline}: a record failed at {rejected.stage} ({type(rejected.error).__name__}: "
            f"{rejected.error}) and errors.tolerance is none; set errors.tolerance: all and "
            f"errors.dead_letter to route such records aside"
        )


def apply_transforms(
    transforms: Sequence[Transform[Any]], batch: Iterable[Record | Rejected]
) -> tuple[list[Record], list[Rejected]]:
    """Run each record through the chain: what comes out, and what the source or a transform
    rejected."""
    output: list[Record] = []
    rejected: list[Rejected] = []
    for record in batch:
        if isinstance(record, Rejected):
            rejected.append(record)
            continue
        current: Record | None = record
        for transform in transforms:
            try:
                if isinstance(current, ChangeEvent):
                    current = transform.transform_event(current)
                elif current is not None:
                    current = transform.apply_schema_change(current)
            except Exception as exc:
                rejected.append(Rejected(record, exc, f"transform:{transform.type_name}"))
                current = None
                break
            if current is None:
                break
        if current is not None:
            output.append(current)
    return output, rejected


DEAD_LETTER_STAGE_HEADER = "cdcflow.error.stage"
"""Where a dead letter failed (``source``, ``transform:<type>``, ``convert``, ``sink``); every dead letter has it."""


def dead_letter_record(rejected: Rejected, pipeline: str) -> Record:
    """The rejected record, carrying Kafka Connect-style error headers."""
    headers = dict(rejected.record.headers or {})
    headers.update(
        {
            "cdcflow.error.pipeline": pipeline,
            DEAD_LETTER_STAGE_HEADER: rejected.stage,
            "cdcflow.error.class": type(rejected.error).__name__,
            "cdcflow.error.message": str(rejected.error)[:2000],
            "cdcflow.error.original_topic": rejected.record.destination(),
        }
    )
    return rejected.record.with_changes(headers=headers, topic=None)


@dataclass
class _PartitionState:
    partition: Partition
    position: Offset
    committed: Checkpoint | None
    watermark_us: int | None = None
    finished: bool = False

    @property
    def dirty(self) -> bool:
        return self.committed is None or offset_key(self.committed.offset) != offset_key(self.position)


@dataclass
class PipelineRunner:
    """Runs one pipeline's owned partitions in the calling thread until the source is drained or
    ``stop`` is set. A graceful stop finishes the read cycle in progress, flushes and commits."""

    spec: PipelineSpec
    source: Source[Any]
    transforms: Sequence[Transform[Any]]
    sink: Sink[Any]
    store: CheckpointStore[Any]
    dead_letter: Sink[Any] | None = None
    assignment: PartitionAssignment = field(default_factory=AllPartitions)
    stop: threading.Event = field(default_factory=threading.Event)
    clock: Callable[[], float] = time.time
    metrics: PipelineMetrics = field(init=False)

    def __post_init__(self) -> None:
        self.metrics = PipelineMetrics(self.spec.name)
        self._states: dict[str, _PartitionState] = {}
        self._committed: dict[str, Checkpoint] = {}
        self._last_checkpoint_at = self.clock()
        self._last_refresh_at = float("-inf")
        self._backoff = Backoff(self.spec.errors.retry)

    # --- lifecycle -----------------------------------------------------------------------------

    def run(self) -> None:
        """Deliver until the bounded source is drained (then return) or ``stop`` is set."""
        plugins = self._plugins()
        try:
            for plugin in plugins:  # one at a time, so a retry does not reopen what is already open
                self._with_retries(f"open {type(plugin).__name__}", plugin.open)
            self._committed = self._with_retries("load checkpoints", self.store.load)
            log.info("pipeline %s running: %d committed partition checkpoints", self.spec.name, len(self._committed))
            self._with_retries("deliver", self._deliver_until_done)
        except _StopRequestedError:
            log.info("pipeline %s stopped while waiting to retry; the last checkpoint stands", self.spec.name)
        finally:
            for plugin in reversed(plugins):
                try:
                    plugin.close()
                except Exception:
                    log.exception("closing %s failed", type(plugin).__name__)

    def _plugins(self) -> list[Any]:
        plugins: list[Any] = [self.store, self.source, *self.transforms, self.sink]
        return plugins + ([self.dead_letter] if self.dead_letter is not None else [])

    def _with_retries(self, operation: str, action: Callable[[], Any]) -> Any:
        """Run ``action``; on a transient failure, wait (interruptibly), rewind, and run it again."""
        while True:
            try:
                result = action()
            except TransientError as exc:
                self.metrics.error(type(exc).__name__)
                delay = self._backoff.next_delay(f"pipeline {self.spec.name}: {operation}", exc)
                log.warning("%s failed (%s: %s); retrying in %.2fs", operation, type(exc).__name__, exc, delay)
                self._rewind_to_committed()
                if self.stop.wait(delay):
                    raise _StopRequestedError from exc
                continue
            self._backoff.succeeded()
            return result

    def _rewind_to_committed(self) -> None:
        # What was written since the last commit may be lost downstream: read it again.
        self._states.clear()
        self._last_refresh_at = float("-inf")

    # --- the loop ------------------------------------------------------------------------------

    def _deliver_until_done(self) -> None:
        """One uninterrupted run of the loop, until the source is drained or ``stop`` is set."""
        while True:
            self._refresh_partitions_if_due()
            progressed = self._read_cycle()
            drained = self.source.bounded and all(s.finished for s in self._states.values())
            stopping = self.stop.is_set()
            if drained or stopping or self.clock() - self._last_checkpoint_at >= self.store.interval_ms / 1000:
                self._checkpoint()
            if drained or stopping:
                return
            if not progressed:
                self.stop.wait(self.spec.engine.poll_interval_ms / 1000)

    def _refresh_partitions_if_due(self) -> None:
        now = self.clock()
        if now - self._last_refresh_at < self.spec.engine.partition_refresh_ms / 1000:
            return
        self._last_refresh_at = now
        current = {p.id: p for p in self.source.partitions() if self.assignment.owns(p.id)}
        for partition_id, partition in current.items():
            if partition_id not in self._states:
                self._states[partition_id] = _PartitionState(
                    partition, self._start_of(partition), self._committed.get(partition_id)
                )
        self.metrics.partitions_owned.set(len(current))

    def _start_of(self, partition: Partition) -> Offset:
        committed = self._committed.get(partition.id)
        return dict(committed.offset) if committed is not None else self.source.initial_offset(partition)

    def _read_cycle(self) -> bool:
        progressed = False
        for state in list(self._states.values()):
            if state.finished:
                continue
            if self.stop.is_set():
                break
            start = state.position
            end = self.source.latest_offset(state.partition, start, self.spec.engine.max_records_per_read)
            if offset_key(end) != offset_key(start):
                self._deliver(self.source.read(state.partition, start, end))
                state.position = end
                progressed = True
            state.watermark_us = self.source.watermark(state.partition, state.position)
            state.finished = self.source.is_finished(state.partition, state.position)
        return progressed

    def _deliver(self, records: Iterator[Record | Rejected]) -> None:
        batch_size = self.spec.engine.batch_size
        while batch := list(islice(records, batch_size)):
            self.metrics.events_in.inc(len(batch))
            transformed = self._transform(batch)
            if transformed:
                self._handle_rejected(self.sink.write(transformed))
                self.metrics.events_out.inc(len(transformed))
                self.metrics.batches.inc()

    def _transform(self, batch: list[Record | Rejected]) -> list[Record]:
        output, rejected = apply_transforms(self.transforms, batch)
        self._handle_rejected(rejected)
        return output

    def _handle_rejected(self, rejected: Iterable[Rejected]) -> None:
        rejected = list(rejected)
        if not rejected:
            return
        self.metrics.error("record_rejected")
        if self.spec.errors.tolerance == "none":
            raise RecordFailedError(self.spec.name, rejected[0])
        first = rejected[0]
        # One line per batch, not per record: a poison table must not flood the log.
        log.warning(
            "%d record(s) rejected; first at %s: %s: %s",
            len(rejected),
            first.stage,
            type(first.error).__name__,
            first.error,
            extra={"pipeline": self.spec.name, "destination": first.record.destination()},
        )
        if self.dead_letter is None:
            return
        refused = self.dead_letter.write([dead_letter_record(r, self.spec.name) for r in rejected])
        self.metrics.dead_letters.inc(len(rejected) - len(refused))
        if refused:
            raise SinkError(
                f"the dead-letter destination refused {len(refused)} records: {refused[0].error}"
            ) from refused[0].error

    # --- checkpoints ---------------------------------------------------------------------------

    def _pipeline_watermark(self) -> int | None:
        """The minimum over partitions still running; a finished partition no longer holds it back,
        and once all are finished the pipeline is complete up to the last of them."""
        running = [s.watermark_us for s in self._states.values() if not s.finished and s.watermark_us is not None]
        if running:
            return min(running)
        finished = [s.watermark_us for s in self._states.values() if s.watermark_us is not None]
        return max(finished) if finished else None

    def _checkpoint(self) -> None:
        pipeline_watermark = self._pipeline_watermark()
        if pipeline_watermark is not None:
            self.sink.on_watermark(pipeline_watermark)
        self._handle_rejected(self.sink.flush())
        if self.dead_letter is not None:
            refused = self.dead_letter.flush()
            if refused:
                raise RecordRejectedError(f"the dead-letter destination refused a record: {refused[0].error}")
        now_us = int(self.clock() * 1_000_000)
        changed = {
            pid: Checkpoint(dict(s.position), s.watermark_us, now_us) for pid, s in self._states.items() if s.dirty
        }
        if changed:
            self.store.commit(changed)
            self._committed.update(changed)
            for pid, checkpoint in changed.items():
                self._states[pid].committed = checkpoint
            self.source.commit({pid: c.offset for pid, c in changed.items()})
            self.metrics.committed(pipeline_watermark)
            log.debug("committed %d partitions, watermark %s", len(changed), pipeline_watermark)
        # A checkpoint made it through: whatever failed before has passed, so the next failure
        # starts a fresh retry budget instead of inheriting an old one.
        self._backoff.succeeded()
        self._last_checkpoint_at = self.clock()


def build_runner(
    spec: PipelineSpec,
    factory: Any,
    assignment: PartitionAssignment | None = None,
    stop: threading.Event | None = None,
    worker_id: str = "0",
) -> PipelineRunner:
    """Instantiate a pipeline's plugins through the registry (``factory``) and wire the loop."""
    if "worker" not in spec.sink.cls.engines:
        raise EngineUnsupportedError(
            f"{spec.file}: sink type {spec.sink.config.type!r} runs on the spark engine only; "
            "set engine: {type: spark}"
        )
    base = PluginContext(
        pipeline=spec.name,
        pipeline_file=spec.file,
        worker_id=worker_id,
        logger=logging.getLogger(f"cdcflow.{spec.name}"),
    )
    return PipelineRunner(
        spec=spec,
        source=factory.create(spec.source, base),
        transforms=[factory.create(t, base) for t in spec.transforms],
        sink=factory.create(spec.sink, base),
        store=factory.create(spec.checkpoint, base),
        dead_letter=factory.create(spec.dead_letter, base) if spec.dead_letter is not None else None,
        assignment=assignment or AllPartitions(),
        stop=stop or threading.Event(),
    )
