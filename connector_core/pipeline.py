"""The delivery loop: at-least-once from any source to any sink, by construction.

For each owned partition: ``end = latest_offset``, ``read(start, end]``, transform, ``sink.write``.
At each checkpoint: ``sink.flush()``, then (and only then) commit the offsets, then tell the source.
A crash anywhere replays from the last committed offsets; a transient failure does the same in
process after a backoff. Duplicates are possible, losses are not, unless the sink and the store
share transactions (``delivery: exactly_once``, :mod:`cdcflow.transactions`): then an interval's
records are committed with its checkpoint, and a replay's duplicates never become visible.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from cdcflow.batches import EventBatch
from cdcflow.capabilities import (
    ReadsEventBatches,
    ReportsDataLossHeadroom,
    TransformsEventBatches,
    WatermarkAwareSink,
    WritesEventBatches,
    caught_up_of,
    is_finished,
    takes_event_batches,
    watermark_of,
)
from cdcflow.chunks import chunked
from cdcflow.config import PipelineSpec
from cdcflow.contract import (
    Checkpoint,
    CheckpointStore,
    DataLossHeadroom,
    FencingCheckpointStore,
    Offset,
    Partition,
    PluginContext,
    Rejected,
    Sink,
    Source,
    Transform,
    offset_key,
)
from cdcflow.engine_checks import refuse_engine_mismatches
from cdcflow.errors import (
    CdcflowError,
    ConfigError,
    StartupCheckError,
    TransactionFencedError,
    TransientError,
)
from cdcflow.events import ChangeEvent, Record
from cdcflow.metrics import PipelineMetrics
from cdcflow.prerequisites import PrerequisiteScope, refuse_unmet_prerequisites
from cdcflow.record_errors import (
    DEAD_LETTER_STAGE_HEADER,
    RecordFailedError,
    RejectedRecordRouter,
    dead_letter_record,
    transform_stage,
)
from cdcflow.retry import Backoff
from cdcflow.succession import SuccessionGate
from cdcflow.transactions import (
    TransactionalSink,
    TransactionalStore,
    TransactionRouting,
    exactly_once_requested,
    fenced_out_of_the_pipeline,
)
from cdcflow.watermarks import pipeline_watermark

if TYPE_CHECKING:
    from cdcflow.plugins import PluginRegistry

__all__ = [
    "DEAD_LETTER_STAGE_HEADER",
    "AllPartitions",
    "BucketAssignment",
    "HashAssignment",
    "PartitionAssignment",
    "PipelineRunner",
    "ReadSizing",
    "RecordFailedError",
    "StoppedWhileRetryingError",
    "apply_transforms",
    "bucket_of",
    "dead_letter_record",
]

log = logging.getLogger("cdcflow.pipeline")

# How often each partition's data-loss headroom is measured (ReportsDataLossHeadroom), and how
# often a partition below engine.data_loss_warn_s is warned about again.
_HEADROOM_EVERY_S = 10.0
_HEADROOM_WARN_EVERY_S = 600.0


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


def bucket_of(partition_id: str, buckets: int) -> int:
    """The bucket (of ``buckets``) a partition belongs to: stable across runs, processes and machines.

    A well-mixed hash (BLAKE2b), not CRC-32: CRC-32 is linear, so ids that differ only in their
    last characters (``datagen-0``, ``datagen-1``...) share low bits, and ``crc32 % n`` put all four
    datagen partitions on one of two workers.
    """
    digest = hashlib.blake2b(partition_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % buckets


@dataclass(frozen=True)
class HashAssignment:
    """Worker ``index`` of ``count`` owns the partitions whose id hashes to it (stable across runs):
    the static split of ``--workers N``, one bucket per worker."""

    index: int
    count: int

    def owns(self, partition_id: str) -> bool:
        return bucket_of(partition_id, self.count) == self.index


@dataclass
class BucketAssignment:
    """A worker group's share: the partitions of the buckets the group's coordinator gave this
    worker. ``owned`` changes only in the delivery thread, between reads (see
    :class:`cdcflow.group.runner.GroupPipelineRunner`); other threads only read it."""

    buckets: int
    owned: frozenset[int] = frozenset()

    def bucket_of(self, partition_id: str) -> int:
        return bucket_of(partition_id, self.buckets)

    def owns(self, partition_id: str) -> bool:
        return bucket_of(partition_id, self.buckets) in self.owned


class _StopRequestedError(Exception):
    """Stop was requested while waiting to retry."""


class _WritingStoppedError(Exception):
    """The partition being written is no longer certainly this runner's (a worker group's member
    whose session is in doubt): not one more batch."""


class StoppedWhileRetryingError(CdcflowError):
    """A stop came while a failure was being retried: no final flush and checkpoint happened. The
    last checkpoint stands and what came after it is read again at the next start; the process
    exits non-zero so that a supervisor knows the stop was not clean."""


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
                rejected.append(Rejected(record, exc, transform_stage(transform.type_name)))
                current = None
                break
            if current is None:
                break
        if current is not None:
            output.append(current)
    return output, rejected


_DECLINES_BEFORE_RECORDS = 3
"""Compact batches a stage declines in a row before the runner reads records instead (cdcflow.batches)."""


@dataclass
class ReadSizing:
    """How many records one read of a partition may take.

    Enough to keep the sink busy, few enough that one read is delivered in about one checkpoint
    interval (``target_s``): offsets are committed between reads, so this is what bounds what a
    crash replays while a backlog is read (``engine.max_records_per_read`` alone let one read of
    50,000 records run for seconds before its commit). A run starts at ``floor`` (a batch), so its
    first checkpoint comes right after its first batch, and grows at most twofold a read towards
    what the measured delivery rate gets through in ``target_s``, never past ``ceiling``.
    """

    ceiling: int
    floor: int
    target_s: float
    limit: int = field(init=False)

    def __post_init__(self) -> None:
        self.limit = self.floor

    def delivered(self, records: int, seconds: float) -> None:
        """A read of ``records`` took ``seconds``, reading to writing."""
        if records < self.limit:
            return  # caught up: a short read says nothing about how fast a full one goes
        affordable = records / max(seconds, 1e-6) * self.target_s
        self.limit = max(self.floor, min(self.ceiling, 2 * self.limit, int(affordable)))


@dataclass
class _PartitionState:
    partition: Partition
    position: Offset
    committed: Checkpoint | None
    watermark_us: int | None = None
    finished: bool = False
    caught_up: bool = False  # at the last look, the source had nothing beyond ``position``
    caught_up_at_us: int | None = None  # when it last had
    uncommitted_records: int = 0  # delivered to the sink since the last commit

    @property
    def dirty(self) -> bool:
        if self.committed is None or offset_key(self.committed.offset) != offset_key(self.position):
            return True
        # Committed while reading, found caught up since: the checkpoint says so too (offsets show).
        return self.caught_up and not self.committed.caught_up


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
        self.listed_partition_ids: frozenset[str] = frozenset()  # the source's partitions at the last refresh
        # Per partition, up to when everything is known durable downstream (survives a rewind).
        self._durable_until_us: dict[str, int] = {}
        self.metrics.lag_seconds = self.checkpoint_lag_seconds
        # Compact batches (cdcflow.batches) only when every stage after the source has a batch
        # form; any stage may still decline one batch, which then goes on as records.
        self._batch_sink = self.sink if isinstance(self.sink, WritesEventBatches) else None
        self._batch_transforms = [t for t in self.transforms if isinstance(t, TransformsEventBatches)]
        self._takes_batches = takes_event_batches(self.sink) and len(self._batch_transforms) == len(self.transforms)
        self._batches_declined_in_a_row = 0
        dead_letter = self.dead_letter
        self._rejected_records = RejectedRecordRouter(
            self.spec.name,
            self.spec.errors.tolerance,
            None if dead_letter is None else lambda: dead_letter,
            self.metrics.rejected_records,
        )
        self._read_sizing = ReadSizing(
            ceiling=self.spec.engine.max_records_per_read,
            floor=min(self.spec.engine.batch_size, self.spec.engine.max_records_per_read),
            target_s=self.store.interval_ms / 1000,
        )
        # Until this run has committed once, a checkpoint follows the first read that delivered
        # anything: a process that keeps being killed soon after it starts still moves forward.
        self._committed_this_run = False
        # A partition replacing others waits until they are committed up to its start, whoever owns them.
        self._succession = SuccessionGate(self.source, _committed_offsets_in(self.store))
        self._headroom_measured_at = float("-inf")
        self._headroom_warned_at: dict[str, float] = {}
        self._writing_partition = ""  # the partition whose range is being delivered
        # delivery: exactly_once: each interval's records go into the transaction its checkpoint commits.
        self._transactions = self._transaction_routing()

    # --- lifecycle -----------------------------------------------------------------------------

    def run(self) -> None:
        """Deliver until the bounded source is drained (then return) or ``stop`` is set."""
        plugins = self._plugins()
        try:
            for plugin in plugins:  # one at a time, so a retry does not reopen what is already open
                self._open_within_startup_timeout(plugin)
            # A table with CDC off would deliver nothing without a word: refuse it now.
            scope = PrerequisiteScope(
                thorough=False, timeout_s=self.spec.engine.startup_timeout_s, transactions=self.spec.group is not None
            )
            refuse_unmet_prerequisites(self.spec.name, plugins, scope)
            self._committed = self._with_retries("load checkpoints", self._load_checkpoints)
            for pid, checkpoint in self._committed.items():
                self._durable_until_us[pid] = checkpoint.durable_until_us()
            log.info("pipeline %s running: %d committed partition checkpoints", self.spec.name, len(self._committed))
            self._with_retries("deliver", self._deliver_until_done)
            log.info(
                "pipeline %s stopped: %d records read, %d written, %s",
                self.spec.name,
                self.metrics.records_read,
                self.metrics.records_written,
                self._rejected_records.summary(),
            )
        except _StopRequestedError as exc:
            raise StoppedWhileRetryingError(
                f"pipeline {self.spec.name}: stopped while retrying after {type(exc.__cause__).__name__}: "
                f"{exc.__cause__}; the last checkpoint stands, what came after it is read again at the next start"
            ) from exc.__cause__
        finally:
            self.metrics.forget_data_loss_headroom(())
            for plugin in reversed(plugins):
                try:
                    plugin.close()
                except Exception:
                    log.exception("closing %s failed", type(plugin).__name__)

    def _plugins(self) -> list[Any]:
        plugins: list[Any] = [self.store, self.source, *self.transforms, self.sink]
        return plugins + ([self.dead_letter] if self.dead_letter is not None else [])

    def _open_within_startup_timeout(self, plugin: Any) -> None:
        """``check_reachable`` then ``open``, retrying transient failures for at most
        ``engine.startup_timeout_s``: a system that is not there fails the start with a message
        naming the setting, instead of being retried for the whole retry budget."""
        timeout_s = self.spec.engine.startup_timeout_s
        where = f"{plugin.context.field_path or type(plugin).__name__} ({plugin.config.type})"
        deadline = time.monotonic() + timeout_s
        backoff = Backoff(self.spec.errors.retry)
        while True:
            try:
                plugin.check_reachable(max(0.1, deadline - time.monotonic()))
                plugin.open()
                return
            except TransientError as exc:
                self.metrics.error(type(exc).__name__)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise StartupCheckError(
                        f"pipeline {self.spec.name}: {where} could not start within engine.startup_timeout_s = "
                        f"{timeout_s:g} s: {exc}"
                    ) from exc
                delay = min(backoff.next_delay(f"pipeline {self.spec.name}: open {where}", exc), remaining)
                log.warning("opening %s failed (%s: %s); retrying in %.2fs", where, type(exc).__name__, exc, delay)
                if self.stop.wait(delay):
                    raise _StopRequestedError from exc

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
                if self._wait(delay):
                    raise _StopRequestedError from exc
                continue
            self._backoff.succeeded()
            return result

    def _rewind_to_committed(self) -> None:
        # What was written since the last commit may be lost downstream: read it again, and
        # commit again as soon as something is through.
        self._states.clear()
        self._committed_this_run = False
        self._last_refresh_at = float("-inf")
        if self._transactions is not None:
            # What was written is in transactions that must never commit: end them, and read the
            # checkpoints back at the next claim (a commit that failed may have gone through).
            self._transactions.forget_all()

    # --- the loop ------------------------------------------------------------------------------

    def _deliver_until_done(self) -> None:
        """One uninterrupted run of the loop, until the source is drained or ``stop`` is set."""
        while True:
            self._between_reads()
            self._refresh_partitions_if_due()
            progressed = False if self._paused() else self._read_cycle()
            drained = self._drained()
            stopping = self.stop.is_set()
            if drained or stopping or self._checkpoint_due():
                self._checkpoint()
            self._measure_data_loss_headroom()
            if drained or stopping:
                return
            if not progressed:
                self._wait(self.spec.worker_engine.poll_interval_ms / 1000)

    # --- hooks a worker group's runner (cdcflow.group) overrides; these are the one-process defaults

    def _load_checkpoints(self) -> dict[str, Checkpoint]:
        """The checkpoints the run starts from."""
        if self._transactions is not None:
            return self._claim_own_unit()
        return self.store.load()

    def _between_reads(self) -> None:
        """Called at the top of each cycle: the moment to change what this runner owns."""

    def _interrupted(self) -> bool:
        """True to end the read cycle early, before the next partition (something waits on the loop)."""
        return False

    def _paused(self) -> bool:
        """True while reading is paused: the loop still checkpoints and answers ``_between_reads``."""
        return False

    def _before_starting(self, partitions: dict[str, Partition]) -> None:
        """Called with owned partitions that are about to get state (their checkpoints are needed)."""
        if self._transactions is not None and not self._transactions.store.claimed():
            self._committed = self._claim_own_unit()  # after a failure: what is committed, read back
            for pid, checkpoint in self._committed.items():
                self._durable_until_us[pid] = checkpoint.durable_until_us()

    def _commit(self, changed: dict[str, Checkpoint]) -> dict[str, Checkpoint]:
        """Make ``changed`` durable; returns what was committed."""
        if self._transactions is not None:
            committed, fenced = self._transactions.commit(changed)
            if fenced:
                self._fenced(fenced)
            return committed
        self.store.commit(changed)
        return changed

    def _fenced(self, units: frozenset[int]) -> None:
        """Another process claimed these transaction units: nothing of theirs may be written again."""
        raise fenced_out_of_the_pipeline(self.spec.name, units)

    # --- exactly once --------------------------------------------------------------------------

    def _transaction_routing(self) -> TransactionRouting | None:
        if not exactly_once_requested(self.sink.config):
            return None
        store, sink = self.store, self.sink
        if not (isinstance(store, FencingCheckpointStore) and isinstance(store, TransactionalStore)):
            raise ConfigError(
                f"{self.spec.file}: sink.delivery exactly_once needs a checkpoint store that commits in the "
                f"sink's transactions (kafka); checkpoint.type is {store.config.type!r}"
            )
        assert isinstance(sink, TransactionalSink)
        dead_letter = self.dead_letter if isinstance(self.dead_letter, TransactionalSink) else None
        return TransactionRouting(sink, store, dead_letter, self._transaction_unit)

    def _transaction_unit(self, partition_id: str) -> int:
        """The transaction unit a partition's records go into: without a group, this process's
        (its worker index: one producer and one transaction per interval, as a Kafka Connect task
        has, rather than one per partition, which thousands of partitions would make thousands of)."""
        return self.assignment.index if isinstance(self.assignment, HashAssignment) else 0

    def _claim_own_unit(self) -> dict[str, Checkpoint]:
        """Fence the previous run (it ends what it left open), then read what is committed."""
        assert self._transactions is not None
        unit = self._transaction_unit("")
        return self._transactions.store.claim({unit}, lambda partition_id: unit)

    def _flush_sinks(self) -> None:
        """Every record written so far delivered, and the dead letters of those refused; with
        exactly once, into the open transaction of each unit written since the last checkpoint."""
        if self._transactions is None:
            self._handle_rejected(self.sink.flush())
            self._rejected_records.flush()
            return
        fenced = set()
        for unit in sorted(self._transactions.written):
            try:
                self._transactions.enter(unit)
                self._handle_rejected(self.sink.flush())
                self._rejected_records.flush()
            except TransactionFencedError:
                fenced.add(unit)
        if fenced:
            self._fenced(frozenset(fenced))

    def _drained(self) -> bool:
        return self.source.bounded and all(s.finished for s in self._states.values())

    def _before_write(self) -> None:
        """Called before each batch is written: raise :class:`_WritingStoppedError` to write no
        more of the range (a worker group's member that may have lost its partitions)."""

    def _abandon_range(self, state: _PartitionState) -> None:
        """A range's writes stopped part-way (:meth:`_before_write`): its position is unchanged."""

    def _wait(self, seconds: float) -> bool:
        """Idle for up to ``seconds``; True if stop was asked for."""
        return self.stop.wait(seconds)

    # --- partitions ----------------------------------------------------------------------------

    def _checkpoint_due(self) -> bool:
        return self.clock() - self._last_checkpoint_at >= self.store.interval_ms / 1000

    def _refresh_partitions_if_due(self) -> None:
        now = self.clock()
        if now - self._last_refresh_at < self.spec.engine.partition_refresh_ms / 1000:
            return
        self._last_refresh_at = now
        listed = self.source.partitions()
        self.listed_partition_ids = frozenset(p.id for p in listed)
        self._succession.listed(listed)
        current = {p.id: p for p in listed if self.assignment.owns(p.id)}
        self._before_starting({pid: p for pid, p in current.items() if pid not in self._states})
        for partition_id, partition in current.items():
            if partition_id not in self._states:
                start = self._start_of(partition)
                self._states[partition_id] = _PartitionState(partition, start, self._committed.get(partition_id))
                # A partition never committed is known durable up to where it starts, or else
                # from when it was first seen: its lag grows from there while its records wait.
                first_seen_us = watermark_of(self.source, partition, start) or int(now * 1_000_000)
                self._durable_until_us.setdefault(partition_id, first_seen_us)
        self.metrics.partitions_owned.set(len(current))

    def _start_of(self, partition: Partition) -> Offset:
        committed = self._committed.get(partition.id)
        return dict(committed.offset) if committed is not None else self.source.initial_offset(partition)

    def _read_cycle(self) -> bool:
        progressed = False
        for state in list(self._states.values()):
            if state.finished:
                continue
            if self.stop.is_set() or self._interrupted():
                break
            start = state.position
            if self._succession.may_read(state.partition):
                end = self.source.latest_offset(state.partition, start, self._read_sizing.limit)
            else:
                end = start  # replaces partitions not yet committed up to its start: nothing yet
            news = offset_key(end) != offset_key(start)
            if news:
                state.caught_up = False  # before writing: a sink that blocks shows as lag
                started = self.clock()
                records = self._deliver_owned_range(state, start, end)
                if records is None:
                    break  # its writes had to stop mid-range: whatever waits on the loop goes first
                self._read_sizing.delivered(records, self.clock() - started)
                state.uncommitted_records += records
                state.position = end
                progressed = True
            state.watermark_us = watermark_of(self.source, state.partition, state.position)
            state.finished = is_finished(self.source, state.partition, state.position)
            self._note_caught_up(state, news)
            if progressed and (self._checkpoint_due() or not self._committed_this_run):
                # A cycle over many partitions (a snapshot's slices, thousands of stream groups)
                # can outlast the interval: commit what is delivered, so a crash re-reads less.
                self._checkpoint()
        return progressed

    def _deliver_owned_range(self, state: _PartitionState, start: Offset, end: Offset) -> int | None:
        """:meth:`_deliver_range` into the partition's transaction (exactly once); None when its
        writes had to stop part-way, the partition's position unchanged."""
        self._writing_partition = state.partition.id
        try:
            if self._transactions is not None:
                self._transactions.enter_partition(state.partition.id)
            return self._deliver_range(state.partition, start, end)
        except TransactionFencedError:
            self._fenced(frozenset({self._transaction_unit(state.partition.id)}))
        except _WritingStoppedError:
            self._abandon_range(state)
        return None

    def _note_caught_up(self, state: _PartitionState, news: bool) -> None:
        verdict = caught_up_of(self.source, state.partition, state.position)
        state.caught_up = state.finished or (verdict if verdict is not None else not news)
        if state.caught_up:
            now_us = int(self.clock() * 1_000_000)
            state.caught_up_at_us = now_us
            if state.uncommitted_records == 0:
                # Everything the partition has was already durable: nothing waits as of now.
                self._durable_until_us[state.partition.id] = now_us

    def _deliver_range(self, partition: Partition, start: Offset, end: Offset) -> int:
        """Read (start, end] of ``partition``, transform and write it; how many records were read."""
        batch_size = self.spec.engine.batch_size
        source = self.source
        batches = (
            source.read_event_batches(partition, start, end, batch_size)
            if self._takes_batches and isinstance(source, ReadsEventBatches)
            else None
        )
        if batches is None:
            return self._deliver(self.source.read(partition, start, end))
        read = 0
        for batch in batches:
            self._before_write()
            read += len(batch)
            self.metrics.read(len(batch))
            self._deliver_batch(batch)
        return read

    def _deliver_batch(self, batch: EventBatch) -> None:
        if not self._takes_batches or self._batch_sink is None:  # given up on batches within this read range
            self._write([*batch.records()])
            return
        transformed: EventBatch | None = batch
        for transform in self._batch_transforms:
            if transformed is not None:
                transformed = transform.apply_to_event_batch(transformed)  # None: needs objects
        rejected = None if transformed is None else self._batch_sink.write_event_batch(transformed)
        if rejected is None:  # a stage needs Python objects for this batch
            self._write([*batch.records()])
            self._batches_declined_in_a_row += 1
            if self._batches_declined_in_a_row == _DECLINES_BEFORE_RECORDS:
                # Building objects from a batch costs more than reading them: a stage that keeps
                # declining (a table whose values the converter rewrites) gets records from now on.
                self._takes_batches = False
                log.info(
                    "pipeline %s: a stage declined %d batches in a row; reading records",
                    self.spec.name,
                    _DECLINES_BEFORE_RECORDS,
                )
            return
        self._batches_declined_in_a_row = 0
        self._handle_rejected(rejected)
        self.metrics.wrote(len(batch))

    def _deliver(self, records: Iterator[Record | Rejected]) -> int:
        """Transform and write ``records``; how many were read."""
        read = 0
        for batch in chunked(records, self.spec.engine.batch_size):
            self._before_write()
            read += len(batch)
            self.metrics.read(len(batch))
            self._write(batch)
        return read

    def _write(self, batch: list[Record | Rejected]) -> None:
        transformed = self._transform(batch)
        if transformed:
            self._handle_rejected(self.sink.write(transformed))
            self.metrics.wrote(len(transformed))

    def _transform(self, batch: list[Record | Rejected]) -> list[Record]:
        output, rejected = apply_transforms(self.transforms, batch)
        self._handle_rejected(rejected)
        return output

    def _handle_rejected(self, rejected: Iterable[Rejected]) -> None:
        rejected = list(rejected)
        if rejected:
            self.metrics.error("record_rejected")
            self._rejected_records.route(rejected)

    # --- checkpoints ---------------------------------------------------------------------------

    def _pipeline_watermark(self) -> int | None:
        """The watermark of the owned partitions (:func:`cdcflow.watermarks.pipeline_watermark`)."""
        return pipeline_watermark((s.watermark_us, s.finished) for s in self._states.values())

    def _checkpoint(self) -> None:
        watermark_us = self._pipeline_watermark()
        if watermark_us is not None and isinstance(self.sink, WatermarkAwareSink):
            self.sink.on_watermark(watermark_us)
        self._flush_sinks()
        now_us = int(self.clock() * 1_000_000)
        changed = {
            pid: Checkpoint(dict(s.position), s.watermark_us, now_us, s.caught_up)
            for pid, s in self._states.items()
            if s.dirty
        }
        if changed:
            changed = self._commit(changed)
        if changed:
            self._committed_this_run = True
            self._committed.update(changed)
            for pid, checkpoint in changed.items():
                state = self._states[pid]
                state.committed = checkpoint
                self._note_durable(state)
            offsets = {pid: c.offset for pid, c in changed.items()}
            self._succession.note_committed(offsets)
            self.source.commit(offsets)
            self.metrics.committed(watermark_us)
            log.debug("committed %d partitions, watermark %s", len(changed), watermark_us)
        # A checkpoint made it through: whatever failed before has passed, so the next failure
        # starts a fresh retry budget instead of inheriting an old one.
        self._backoff.succeeded()
        self._last_checkpoint_at = self.clock()

    # --- time to loss --------------------------------------------------------------------------

    def _measure_data_loss_headroom(self) -> None:
        """Every owned partition's headroom, from its committed offset, on the metrics port; a
        WARN below ``engine.data_loss_warn_s``."""
        now = self.clock()
        if now - self._headroom_measured_at < _HEADROOM_EVERY_S:
            return
        self._headroom_measured_at = now
        measured = []
        source = self.source
        if not isinstance(source, ReportsDataLossHeadroom):
            return
        for pid, state in list(self._states.items()):
            if state.finished:
                continue
            committed = state.committed.offset if state.committed is not None else state.position
            try:
                headroom = source.data_loss_headroom(state.partition, committed)
            except TransientError as exc:
                log.debug("pipeline %s: headroom of %s not measured: %s", self.spec.name, pid, exc)
                continue
            if headroom is None:
                continue
            measured.append(pid)
            self.metrics.data_loss_headroom(pid, headroom.reason, headroom.seconds, now, self.clock)
            self._warn_of_little_headroom(pid, headroom, now)
        self.metrics.forget_data_loss_headroom(measured)

    def _warn_of_little_headroom(self, pid: str, headroom: DataLossHeadroom, now: float) -> None:
        limit = self.spec.worker_engine.data_loss_warn_s
        if not limit or headroom.seconds >= limit:
            self._headroom_warned_at.pop(pid, None)
            return
        if now - self._headroom_warned_at.get(pid, float("-inf")) < _HEADROOM_WARN_EVERY_S:
            return
        self._headroom_warned_at[pid] = now
        log.warning(
            "pipeline %s: partition %s may lose changes not yet delivered in %.0f s (%s%s), below "
            "engine.data_loss_warn_s = %g s: it must catch up, or be given more room",
            self.spec.name,
            pid,
            max(0.0, headroom.seconds),
            headroom.reason,
            f": {headroom.detail}" if headroom.detail else "",
            limit,
        )

    # --- lag -----------------------------------------------------------------------------------

    def _note_durable(self, state: _PartitionState) -> None:
        """``state``'s position was just committed: what it delivered is durable downstream."""
        pid = state.partition.id
        known = [self._durable_until_us.get(pid), state.watermark_us]
        if state.caught_up:
            known.append(state.caught_up_at_us)  # everything the source had when last looked at
        durable = [t for t in known if t is not None]
        if durable:
            self._durable_until_us[pid] = max(durable)
        state.uncommitted_records = 0

    def checkpoint_lag_seconds(self) -> float:
        """How long changes have been waiting (see :mod:`cdcflow.metrics`): 0 when every owned
        partition is caught up with nothing uncommitted; NaN before anything is known."""
        now = self.clock()
        states = dict(self._states)  # one copy: the loop's thread changes it
        lags = []
        for pid in states.keys() | self._durable_until_us.keys():
            state = states.get(pid)
            if state is not None and state.caught_up and state.uncommitted_records == 0:
                lags.append(0.0)
                continue
            durable_us = self._durable_until_us.get(pid)
            if durable_us is not None:
                lags.append(max(0.0, now - durable_us / 1e6))
        return max(lags) if lags else float("nan")


def _committed_offsets_in(store: CheckpointStore[Any]) -> Callable[[], dict[str, Offset]]:
    """The source's view of what every process of the pipeline committed: the store, read anew
    (it is opened before the source, and the source reads it from the loop's thread)."""
    # Settled commits only: the gates it serves wait a little longer on an older view, whereas a
    # full load can wait on a dead group member's open commit while the loop owes a rebalance.
    return lambda: {pid: checkpoint.offset for pid, checkpoint in store.load_settled().items()}


def build_runner(
    spec: PipelineSpec,
    factory: PluginRegistry,
    assignment: PartitionAssignment | None = None,
    stop: threading.Event | None = None,
    worker_id: str = "0",
    runner_class: type[PipelineRunner] = PipelineRunner,
    **runner_options: Any,
) -> PipelineRunner:
    """Instantiate a pipeline's plugins through the registry (``factory``) and wire the loop
    (``runner_class`` with ``runner_options``: a worker group's runner)."""
    refuse_engine_mismatches(spec)
    base = PluginContext(
        pipeline=spec.name,
        pipeline_file=spec.file,
        worker_id=worker_id,
        logger=logging.getLogger(f"cdcflow.{spec.name}"),
    )
    store: CheckpointStore[Any] = factory.create(spec.checkpoint, base)
    return runner_class(
        spec=spec,
        source=factory.create(spec.source, replace(base, committed_offsets=_committed_offsets_in(store))),
        transforms=[factory.create(t, base) for t in spec.transforms],
        sink=factory.create(spec.sink, base),
        store=store,
        dead_letter=factory.create(spec.dead_letter, base) if spec.dead_letter is not None else None,
        assignment=assignment or AllPartitions(),
        stop=stop or threading.Event(),
        **runner_options,
    )
