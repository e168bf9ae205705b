"""``cdcflow offsets show|reset|set`` and ``cdcflow snapshot`` without ``--url``: a stopped
pipeline's offsets, wherever they are kept.

Offsets live in one of three places, and a change must reach the one the pipeline resumes from:

* the worker engine's checkpoint store (file, kafka...); a source that keeps its own bookmark
  (the ``kafka`` source's consumer group) is told as well
  (:class:`~cdcflow.capabilities.ForgetsPartitions` / ``Source.commit``);
* a worker group's store, through each bucket's claim, which fences any worker still holding it;
* the spark engine's checkpoint folder, where Spark's offset log is the only truth.

A change is refused while the pipeline runs, or its next checkpoint would overwrite it: every
process running a pipeline holds a shared lock (:func:`pipeline_running`), which a change takes
exclusively; a worker group must have no members (while it runs, change offsets through its
REST API, with the pipeline paused). Partitions the pipeline does not have are refused too.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cdcflow.capabilities import SparkNativeSource, forget_partitions, watermark_of
from cdcflow.config import PipelineSpec
from cdcflow.contract import (
    Checkpoint,
    CheckpointStore,
    FencingCheckpointStore,
    Offset,
    Partition,
    PluginContext,
    Source,
)
from cdcflow.errors import PipelineRunningError, SnapshotTableError, SnapshotUnsupportedError, UnknownPartitionError
from cdcflow.live_snapshots import LiveSnapshotSource, SnapshotRequest

if TYPE_CHECKING:
    from cdcflow.plugins import PluginRegistry

__all__ = ["PipelineOffsets", "lock_file", "pipeline_running"]


def lock_file(spec: PipelineSpec) -> Path:
    """Beside the checkpoint folder when there is one (shared by the processes that share the
    folder), else in this machine's temporary folder."""
    path = getattr(spec.checkpoint.config, "path", None)
    if path is not None:
        path = Path(path)
        return path.with_name(f".{path.name}.running")
    return Path(tempfile.gettempdir()) / f"cdcflow-{os.getuid()}" / f"{spec.name}.running"


def _open_lock(spec: PipelineSpec) -> int:
    path = lock_file(spec)
    path.parent.mkdir(parents=True, exist_ok=True)
    return os.open(path, os.O_CREAT | os.O_RDWR, 0o644)


@contextmanager
def pipeline_running(spec: PipelineSpec) -> Iterator[None]:
    """Held by every process that runs ``spec`` (shared: ``--workers N`` run one pipeline)."""
    descriptor = _open_lock(spec)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH)
        yield
    finally:
        os.close(descriptor)


@contextmanager
def _pipeline_stopped(spec: PipelineSpec) -> Iterator[None]:
    descriptor = _open_lock(spec)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise PipelineRunningError(
                f"pipeline {spec.name} is running (a process holds {lock_file(spec)}): stop it first, or its next "
                "checkpoint overwrites the change"
            ) from None
        yield
    finally:
        os.close(descriptor)


class PipelineOffsets:
    """Show or change one pipeline's offsets while it is stopped."""

    def __init__(self, spec: PipelineSpec, registry: PluginRegistry) -> None:
        self.spec = spec
        self.registry = registry
        self.context = PluginContext(spec.name, spec.file)

    # --- reading -------------------------------------------------------------------------------

    def show(self) -> dict[str, Checkpoint]:
        if self.spec.engine.type == "spark":
            with self._source() as source:
                return self._spark_checkpoints(source)
        with self._store() as store:
            return store.load()

    # --- changing ------------------------------------------------------------------------------

    def reset(self, partition_ids: Sequence[str] | None) -> list[str]:
        """Back to their start (all partitions when None); returns the partitions reset."""
        return self._change(None if partition_ids is None else dict.fromkeys(partition_ids))

    def set_offsets(self, offsets: Mapping[str, Offset]) -> list[str]:
        return self._change(dict(offsets))

    def request_snapshot(self, request: SnapshotRequest) -> list[str]:
        """Queue a live snapshot in the committed offset of every partition that carries the
        request's table (:mod:`cdcflow.live_snapshots`): the next run takes it while it streams.
        Returns the partitions it was queued in (none: it was queued already)."""
        if self.spec.engine.type == "spark":
            raise SnapshotUnsupportedError(
                f"pipeline {self.spec.name}: live snapshots run on the worker engine, not on spark"
            )
        self._refuse_if_group_runs()
        with _pipeline_stopped(self.spec), self._source() as source:
            if not isinstance(source, LiveSnapshotSource):
                raise SnapshotUnsupportedError(
                    f"pipeline {self.spec.name}: source type {self.spec.source.config.type!r} takes no live snapshots"
                )
            source.check_snapshot_request(request)
            with self._store() as store:
                committed = store.load()
                now_us = int(time.time() * 1_000_000)
                checkpoints: dict[str, Checkpoint | None] = {}
                carried = False
                for partition in source.partitions():
                    current = committed.get(partition.id)
                    offset = current.offset if current is not None else source.initial_offset(partition)
                    queued = source.with_snapshot_request(partition, offset, request)
                    carried = carried or queued is not None
                    if queued is not None and queued != offset:
                        watermark = watermark_of(source, partition, queued)
                        checkpoints[partition.id] = Checkpoint(dict(queued), watermark, now_us)
                if not carried:
                    raise SnapshotTableError(
                        f"pipeline {self.spec.name}: none of its partitions carries {request.table}"
                    )
                self._write(store, checkpoints)
                return sorted(checkpoints)

    def _change(self, changes: dict[str, Offset | None] | None) -> list[str]:
        self._refuse_if_group_runs()
        with _pipeline_stopped(self.spec), self._source() as source:
            listed = {p.id: p for p in source.partitions()}
            if self.spec.engine.type == "spark":
                return self._change_spark(source, listed, changes)
            with self._store() as store:
                return self._change_store(store, source, listed, changes)

    def _change_store(
        self,
        store: CheckpointStore[Any],
        source: Source[Any],
        listed: dict[str, Partition],
        changes: dict[str, Offset | None] | None,
    ) -> list[str]:
        targets = self._targets(changes, set(listed) | set(store.load()))
        now_us = int(time.time() * 1_000_000)
        checkpoints: dict[str, Checkpoint | None] = {}
        for pid, offset in targets.items():
            if offset is None:
                forget_partitions(source, [pid])
                checkpoints[pid] = None
            else:
                checkpoints[pid] = Checkpoint(dict(offset), _watermark(source, listed, pid, offset), now_us)
        self._write(store, checkpoints)
        source.commit({pid: c.offset for pid, c in checkpoints.items() if c is not None})
        return sorted(targets)

    def _targets(self, changes: dict[str, Offset | None] | None, known: set[str]) -> dict[str, Offset | None]:
        if changes is None:
            return dict.fromkeys(sorted(known))
        unknown = sorted(set(changes) - known)
        if unknown:
            raise UnknownPartitionError(
                f"pipeline {self.spec.name} has no partition {', '.join(unknown)}; its partitions: "
                f"{', '.join(sorted(known)[:50]) or 'none'}"
            )
        return changes

    def _write(self, store: CheckpointStore[Any], checkpoints: Mapping[str, Checkpoint | None]) -> None:
        if self.spec.group is not None and isinstance(store, FencingCheckpointStore):
            # Through each bucket's claim: a worker of the group that still believes it owns the
            # bucket (frozen, cut off) is fenced and cannot overwrite the change later.
            from cdcflow.pipeline import bucket_of

            buckets = self.spec.group.buckets
            by_bucket: dict[int, dict[str, Checkpoint | None]] = {}
            for pid, checkpoint in checkpoints.items():
                by_bucket.setdefault(bucket_of(pid, buckets), {})[pid] = checkpoint
            store.claim(by_bucket, lambda pid: bucket_of(pid, buckets))
            store.commit_claimed(by_bucket)
            return
        forgotten = [pid for pid, c in checkpoints.items() if c is None]
        if forgotten:
            store.reset(forgotten)
        kept = {pid: c for pid, c in checkpoints.items() if c is not None}
        if kept:
            store.commit(kept)

    def _refuse_if_group_runs(self) -> None:
        group = self.spec.group
        if group is None:
            return
        from cdcflow.group.worker import running_members

        members = running_members(group)
        if members:
            raise PipelineRunningError(
                f"pipeline {self.spec.name}: {len(members)} worker(s) of group {group.id} are running "
                f"({', '.join(members)}): pause the pipeline and change offsets through a worker's REST API, "
                f"e.g. cdcflow pause {self.spec.name} --url {group.rest.url()}, then cdcflow offsets reset "
                f"{self.spec.file} --url {group.rest.url()}"
            )

    # --- spark ---------------------------------------------------------------------------------

    def _spark_location(self) -> Path:
        from cdcflow.spark_engine.offsets import checkpoint_location

        return checkpoint_location(self.spec)

    def _spark_checkpoints(self, source: Source[Any]) -> dict[str, Checkpoint]:
        from cdcflow.spark_engine.offsets import last_committed_batch

        location = self._spark_location()
        found = last_committed_batch(location)
        if found is None:
            return {}
        batch, logged = found
        offsets = source.spark_native_offsets(logged) if isinstance(source, SparkNativeSource) else dict(logged)
        committed_at_us = int((location / "commits" / str(batch)).stat().st_mtime * 1_000_000)
        listed = {p.id: p for p in source.partitions()}
        return {
            pid: Checkpoint(dict(offset), _watermark(source, listed, pid, offset), committed_at_us)
            for pid, offset in offsets.items()
        }

    def _change_spark(
        self, source: Source[Any], listed: dict[str, Partition], changes: dict[str, Offset | None] | None
    ) -> list[str]:
        import shutil

        from cdcflow.spark_engine.offsets import append_committed_batch

        location = self._spark_location()
        current = {pid: c.offset for pid, c in self._spark_checkpoints(source).items()}
        targets = self._targets(changes, set(listed) | set(current))
        if changes is None:
            # Everything back to the start: without its checkpoint folder the query starts afresh.
            forget_partitions(source, sorted(targets))
            shutil.rmtree(location, ignore_errors=True)
            return sorted(targets)
        for pid, offset in targets.items():
            if offset is None:
                forget_partitions(source, [pid])
                current[pid] = source.initial_offset(listed[pid]) if pid in listed else current.pop(pid)
            else:
                current[pid] = dict(offset)
        if current:
            logged = source.spark_native_log(current) if isinstance(source, SparkNativeSource) else current
            append_committed_batch(location, logged)
        return sorted(targets)

    # --- plugins -------------------------------------------------------------------------------

    @contextmanager
    def _source(self) -> Iterator[Source[Any]]:
        source: Source[Any] = self.registry.create(self.spec.source, self.context)
        source.check_reachable(self.spec.engine.startup_timeout_s)
        source.open()
        try:
            yield source
        finally:
            source.close()

    @contextmanager
    def _store(self) -> Iterator[CheckpointStore[Any]]:
        store: CheckpointStore[Any] = self.registry.create(self.spec.checkpoint, self.context)
        store.check_reachable(self.spec.engine.startup_timeout_s)
        store.open()
        try:
            yield store
        finally:
            store.close()


def _watermark(source: Source[Any], listed: Mapping[str, Partition], pid: str, offset: Offset) -> int | None:
    return watermark_of(source, listed[pid], offset) if pid in listed else None
