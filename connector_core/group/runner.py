"""A pipeline's delivery loop as one member of a worker group.

The loop is :class:`cdcflow.pipeline.PipelineRunner`'s; this subclass fills in its hooks. The
coordinator's thread never touches the loop's state: it queues a request (assign, revoke, lose)
and, for a revoke, waits until the delivery thread has done it between two reads:

* **assign**: the buckets join :class:`BucketAssignment`; at the next partition refresh their
  partitions start, each bucket first claimed in the checkpoint store (which fences the previous
  owner) and its checkpoints loaded.
* **revoke**: flush the sink, commit every dirty checkpoint, release the buckets' claims and drop
  their partitions' state. If the flush cannot be done, the buckets are released without a commit:
  the new owner replays from the last checkpoint (duplicates, never loss).
* **lose** (the group expelled this worker): drop at once, no commit (it would be fenced anyway).

A live snapshot request (``POST /pipelines/{name}/snapshots``, through the control topic) is put
into the offset of every owned partition carrying its table (``Source.with_snapshot_request``),
committed at once, and answered with those partitions (:mod:`cdcflow.live_snapshots`).

A commit the store reports as fenced means another worker owns the bucket now: its partitions are
dropped the same way, whatever the coordinator has said so far.

With ``delivery: exactly_once`` a bucket is also a transaction unit (:mod:`cdcflow.transactions`):
its records since the last checkpoint are in the open transaction of its producer, which a revoke
commits with the checkpoints and a drop (lose, fenced) aborts; the new owner's claim fences that
producer, so a zombie's records never become visible.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from cdcflow.capabilities import forget_partitions, is_finished, watermark_of
from cdcflow.contract import Checkpoint, FencingCheckpointStore, Partition
from cdcflow.errors import SnapshotRequestError, TransientError
from cdcflow.group.control import ControlChannel, OffsetsCommand, SnapshotCommand
from cdcflow.group.membership import MembershipWatch
from cdcflow.live_snapshots import LiveSnapshotSource, SnapshotRequest
from cdcflow.pipeline import BucketAssignment, PipelineRunner, _PartitionState, _WritingStoppedError

__all__ = ["GroupPipelineRunner", "OwnershipChange"]

log = logging.getLogger("cdcflow.group")

OwnershipChange = Literal["assign", "revoke", "lose"]

_GLOBAL_DRAIN_CHECK_S = 1.0


@dataclass
class _Request:
    kind: OwnershipChange
    buckets: frozenset[int]
    done: threading.Event = field(default_factory=threading.Event)


@dataclass
class GroupPipelineRunner(PipelineRunner):
    """A :class:`PipelineRunner` whose partitions are those of the buckets the group gives it."""

    control: ControlChannel | None = None
    member_id: str = ""
    on_report: Callable[[], None] = lambda: None  # a new snapshot worth publishing at once
    membership: MembershipWatch | None = None  # whether the group still counts this worker in

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.assignment, BucketAssignment):
            raise TypeError("a group runner needs a BucketAssignment")
        if not isinstance(self.store, FencingCheckpointStore):
            raise TypeError(f"checkpoint store {type(self.store).__name__} cannot fence; a group needs one that can")
        self.buckets: BucketAssignment = self.assignment
        self.fencing: FencingCheckpointStore[Any] = self.store
        self._lock = threading.Lock()
        self._requests: list[_Request] = []
        self._commands: list[OffsetsCommand | SnapshotCommand] = []
        self._wake = threading.Event()
        self._closed = False
        self._loaded: set[int] = set()  # buckets whose checkpoints are in self._committed
        self._refresh_requested = False
        self._snapshot_requested = False
        self._was_paused = False
        self._announced: frozenset[str] = frozenset()
        self._drain_checked_at = float("-inf")
        self._last_snapshot_at = float("-inf")
        self._holding_writes = False
        self.snapshot: dict[str, Any] = {"state": "STARTING", "buckets": [], "partitions": {}}

    # --- called from other threads -------------------------------------------------------------

    def request(self, kind: OwnershipChange, buckets: frozenset[int]) -> threading.Event:
        """Queue an ownership change; the returned event is set once the loop has made it."""
        request = _Request(kind, buckets)
        with self._lock:
            if self._closed:
                request.done.set()  # a finished runner holds nothing
            else:
                self._requests.append(request)
        self._wake.set()
        return request.done

    def offsets_command(self, command: OffsetsCommand | SnapshotCommand) -> None:
        if command.pipeline != self.spec.name:
            return
        with self._lock:
            self._commands.append(command)
        self._wake.set()

    def report_soon(self) -> None:
        """Take a fresh snapshot at the next cycle (the pause flag changed): it then shows what the
        loop does, not what it was told."""
        self._snapshot_requested = True
        self._wake.set()

    def refresh_soon(self) -> None:
        """The leader announced a new set of source partitions: list them at the next cycle."""
        self._refresh_requested = True
        self._wake.set()

    def run(self) -> None:
        try:
            super().run()
        finally:
            with self._lock:
                self._closed = True
                pending, self._requests = self._requests, []
            for request in pending:
                request.done.set()
            self.snapshot = {**self.snapshot, "state": "STOPPED", "buckets": [], "partitions": {}}
            self.on_report()

    # --- hooks of the loop ----------------------------------------------------------------------

    def _load_checkpoints(self) -> dict[str, Checkpoint]:
        return {}  # each bucket's come with its claim

    def _between_reads(self) -> None:
        with self._lock:
            requests, self._requests = self._requests, []
            commands, self._commands = self._commands, []
        for request in requests:
            try:
                self._change_ownership(request)
            finally:
                request.done.set()
        for command in commands:
            if isinstance(command, SnapshotCommand):
                self._apply_snapshot_request(command)
            else:
                self._apply_offsets(command)
        if self._refresh_requested:
            self._refresh_requested = False
            self._last_refresh_at = float("-inf")
        paused = self._paused()
        if paused != self._was_paused:
            self._was_paused = paused
            self._snapshot_requested = True
            if paused:
                self._checkpoint()  # what was read is durable and committed: paused offsets are final
        report = bool(requests or commands) or self._snapshot_requested
        if report or self.clock() - self._last_snapshot_at >= 1.0:
            self._snapshot_requested = False
            self._take_snapshot()
            if report:
                self.on_report()

    def _interrupted(self) -> bool:
        return bool(self._requests) or self._paused()

    def _before_write(self) -> None:
        """A zombie stops writing as soon as it can know: the bucket being written is being taken
        away (lose), or the group has not listed this worker for a session (frozen, or cut off from
        the brokers): then it waits for the group's answer, and gives up the range if the loop is
        wanted elsewhere meanwhile. A pending revoke does not stop a range: the bucket stays this
        worker's until the revoke returns."""
        bucket = self.buckets.bucket_of(self._writing_partition)
        while True:
            if self._losing(bucket):
                raise _WritingStoppedError
            if self.membership is None or self.membership.fresh():
                if self._holding_writes:
                    self._holding_writes = False
                    log.info("pipeline %s: the group lists this worker again: writing", self.spec.name)
                return
            if self._requests or self.stop.is_set():
                raise _WritingStoppedError
            if not self._holding_writes:
                self._holding_writes = True
                log.warning(
                    "pipeline %s: the group has not listed this worker for a session (%.0f s): holding its writes "
                    "until it does, or its buckets are taken away",
                    self.spec.name,
                    self.membership.config.session_timeout_s,
                )
            self._wake.wait(0.1)
            self._wake.clear()

    def _losing(self, bucket: int) -> bool:
        with self._lock:
            return any(r.kind == "lose" and bucket in r.buckets for r in self._requests)

    def _abandon_range(self, state: _PartitionState) -> None:
        if self._transactions is None:
            return  # at least once: the range is read again from the unchanged position
        # What the bucket wrote since its checkpoint is in its open transaction, which must never
        # commit now (part of a range): abort it, and restart its partitions from what is committed.
        bucket = self.buckets.bucket_of(state.partition.id)
        for pid in [pid for pid in self._states if self.buckets.bucket_of(pid) == bucket]:
            del self._states[pid]
        self._transactions.forget({bucket})
        self._loaded.discard(bucket)
        self._last_refresh_at = float("-inf")

    def _paused(self) -> bool:
        return self.control is not None and self.control.paused(self.spec.name)

    def _wait(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while not self.stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            if self._wake.wait(min(remaining, 0.1)):
                self._wake.clear()
                break
        return self.stop.is_set()

    def _before_starting(self, partitions: dict[str, Partition]) -> None:
        needed = {self.buckets.bucket_of(pid) for pid in partitions} - self._loaded
        if needed:
            loaded = self.fencing.claim(needed, self.buckets.bucket_of)
            self._committed.update(loaded)
            for pid, checkpoint in loaded.items():
                self._durable_until_us[pid] = checkpoint.durable_until_us()
            self._loaded |= needed
            log.info("pipeline %s: claimed buckets %s (%d checkpoints)", self.spec.name, sorted(needed), len(loaded))

    def _transaction_unit(self, partition_id: str) -> int:
        return self.buckets.bucket_of(partition_id)

    def _fenced(self, units: frozenset[int]) -> None:
        log.warning(
            "pipeline %s: buckets %s were claimed by another worker: their open transactions are fenced, "
            "dropping them without a commit",
            self.spec.name,
            sorted(units),
        )
        self._drop(units & self.buckets.owned)
        self.on_report()

    def _rewind_to_committed(self) -> None:
        super()._rewind_to_committed()
        if self._transactions is not None:
            # Every claim was given up with its open transaction: claim again, and read back.
            self._loaded.clear()

    def _commit(self, changed: dict[str, Checkpoint]) -> dict[str, Checkpoint]:
        if self._transactions is not None:
            return super()._commit(changed)
        by_bucket: dict[int, dict[str, Checkpoint | None]] = {}
        for pid, checkpoint in changed.items():
            by_bucket.setdefault(self.buckets.bucket_of(pid), {})[pid] = checkpoint
        fenced = self.fencing.commit_claimed(by_bucket)
        if fenced:
            log.warning(
                "pipeline %s: buckets %s were claimed by another worker: dropping them without a commit",
                self.spec.name,
                sorted(fenced),
            )
            self._drop(fenced)
            self.on_report()
        return {pid: c for pid, c in changed.items() if self.buckets.bucket_of(pid) not in fenced}

    def _refresh_partitions_if_due(self) -> None:
        if self._requests:
            return  # ownership is about to change: claim and start partitions once it has
        running = len(self._states)
        super()._refresh_partitions_if_due()
        if len(self._states) != running:
            self._snapshot_requested = True  # partitions started: worth reporting at once
        if self.control is not None and 0 in self.buckets.owned and self.listed_partition_ids != self._announced:
            # The leader (owner of bucket 0) tells the others the source's partitions changed.
            self._announced = self.listed_partition_ids
            self.control.announce_partitions(self.spec.name, sorted(self._announced))

    def _drained(self) -> bool:
        """A member is done only when the whole pipeline is: its own partitions may be finished
        while another member's are not, and that member may still die and leave them to it."""
        if not self.source.bounded or not all(s.finished for s in self._states.values()):
            return False
        if not self.listed_partition_ids or self.clock() - self._drain_checked_at < _GLOBAL_DRAIN_CHECK_S:
            return False
        self._drain_checked_at = self.clock()
        # Settled commits: a full load would wait on the open commit of a member that died, which
        # only ends once its buckets are claimed, in a rebalance that waits on this loop.
        committed = self.store.load_settled()
        listed = {p.id: p for p in self.source.partitions()}
        for pid, partition in listed.items():
            state = self._states.get(pid)
            if state is not None:
                continue  # ours, finished (checked above); committed with the final checkpoint
            checkpoint = committed.get(pid)
            if checkpoint is None or not is_finished(self.source, partition, checkpoint.offset):
                return False
        return True

    # --- ownership -----------------------------------------------------------------------------

    def _change_ownership(self, request: _Request) -> None:
        if request.kind == "assign":
            self.buckets.owned |= request.buckets
            self._last_refresh_at = float("-inf")  # start their partitions at once
            log.info("pipeline %s: assigned buckets %s", self.spec.name, sorted(request.buckets))
            return
        mine = request.buckets & self.buckets.owned
        if not mine:
            return
        if request.kind == "revoke" and any(self.buckets.bucket_of(pid) in mine for pid in self._states):
            try:
                self._checkpoint()  # flush, then commit every dirty partition (cheap for the others)
            except TransientError as exc:
                log.warning(
                    "pipeline %s: cannot checkpoint before handing over buckets %s (%s: %s); their new owner "
                    "replays from the last checkpoint",
                    self.spec.name,
                    sorted(mine),
                    type(exc).__name__,
                    exc,
                )
                self._rewind_to_committed()
        self._drop(mine & self.buckets.owned)
        log.info(
            "pipeline %s: %s buckets %s",
            self.spec.name,
            "released" if request.kind == "revoke" else "lost",
            sorted(mine),
        )

    def _drop(self, buckets: frozenset[int]) -> None:
        """Forget everything of ``buckets``: state, checkpoints, claim, ownership."""
        for pid in [pid for pid in self._states if self.buckets.bucket_of(pid) in buckets]:
            del self._states[pid]
        for pid in [pid for pid in self._committed if self.buckets.bucket_of(pid) in buckets]:
            del self._committed[pid]
        for pid in [pid for pid in self._durable_until_us if self.buckets.bucket_of(pid) in buckets]:
            del self._durable_until_us[pid]  # another worker's lag to report now
        if self._transactions is not None:
            self._transactions.forget(buckets)  # aborts what is open (refused as fenced for a zombie)
        else:
            self.fencing.release(buckets)
        self._loaded -= buckets
        self.buckets.owned -= buckets
        self.metrics.partitions_owned.set(len(self._states))

    # --- offsets commands (only while paused) --------------------------------------------------

    def _apply_offsets(self, command: OffsetsCommand) -> None:
        mine = {pid: offset for pid, offset in command.partitions.items() if self.buckets.owns(pid)}
        if not mine or self.control is None:
            return
        if not self._paused():
            self.control.acknowledge(command, self.member_id, {"refused": "the pipeline is running", "partitions": []})
            return
        missing = [pid for pid in mine if pid not in self._states]
        if missing:  # owned but not started yet (just assigned): start them, checkpoints loaded
            self._last_refresh_at = float("-inf")
            self._refresh_partitions_if_due()
        now_us = int(self.clock() * 1_000_000)
        by_bucket: dict[int, dict[str, Checkpoint | None]] = {}
        for pid, offset in mine.items():
            state = self._states.get(pid)
            if state is None:
                continue
            checkpoint = (
                None
                if offset is None
                else Checkpoint(dict(offset), watermark_of(self.source, state.partition, offset), now_us)
            )
            by_bucket.setdefault(self.buckets.bucket_of(pid), {})[pid] = checkpoint
        fenced = self.fencing.commit_claimed(by_bucket)
        applied: list[str] = []
        for bucket, values in by_bucket.items():
            if bucket in fenced:
                continue
            for pid, checkpoint in values.items():
                state = self._states[pid]
                if checkpoint is None:
                    self._committed.pop(pid, None)
                    forget_partitions(self.source, [pid])
                    state.position = self.source.initial_offset(state.partition)
                    state.committed = None
                else:
                    self._committed[pid] = checkpoint
                    self.source.commit({pid: checkpoint.offset})
                    state.position = dict(checkpoint.offset)
                    state.committed = checkpoint
                state.watermark_us = watermark_of(self.source, state.partition, state.position)
                state.finished = is_finished(self.source, state.partition, state.position)
                applied.append(pid)
        if fenced:
            self._drop(fenced)
        log.info("pipeline %s: offsets of %s set by command %s", self.spec.name, sorted(applied), command.id)
        self.control.acknowledge(command, self.member_id, {"partitions": sorted(applied)})

    # --- live snapshot requests -----------------------------------------------------------------

    def _apply_snapshot_request(self, command: SnapshotCommand) -> None:
        """Queue the request in each owned partition that carries its table, commit, answer."""
        if self.control is None or not self.buckets.owned:
            return
        source = self.source
        if not isinstance(source, LiveSnapshotSource):
            self.control.acknowledge(command, self.member_id, {"refused": "the source takes no live snapshots"})
            return
        self._last_refresh_at = float("-inf")  # owned but not started yet (just assigned): start them
        self._refresh_partitions_if_due()
        request = SnapshotRequest.from_json(command.request)
        offsets, skipped = {}, []
        try:
            for pid, state in self._states.items():
                offset = source.with_snapshot_request(state.partition, state.position, request)
                if offset is None:
                    skipped.append(pid)
                else:
                    offsets[pid] = offset
        except SnapshotRequestError as exc:
            self.control.acknowledge(command, self.member_id, {"refused": str(exc)})
            return
        for pid, offset in offsets.items():
            self._states[pid].position = offset
        queued = list(offsets)
        if queued:
            self._checkpoint()  # committed before the answer: the request survives this worker
        applied = sorted(pid for pid in queued if pid in self._states and not self._states[pid].dirty)
        log.info("pipeline %s: live snapshot %s of %s queued in %s", self.spec.name, request.id, request.table, applied)
        self.control.acknowledge(command, self.member_id, {"partitions": applied, "skipped": sorted(skipped)})

    # --- status ----------------------------------------------------------------------------------

    def _take_snapshot(self) -> None:
        """What this worker reports about the pipeline (read by the status publisher)."""
        self._last_snapshot_at = self.clock()
        paused = self._paused()
        now_s = self.clock()
        partitions: dict[str, dict[str, Any]] = {}
        for pid, state in sorted(self._states.items()):
            committed = state.committed
            mark = committed.watermark_us if committed is not None else None
            partitions[pid] = {
                "bucket": self.buckets.bucket_of(pid),
                "state": "FINISHED" if state.finished else "PAUSED" if paused else "RUNNING",
                "offset": state.position,
                "committed_offset": committed.offset if committed is not None else None,
                "watermark_us": mark,
                "lag_s": None if mark is None else round(max(0.0, now_s - mark / 1e6), 3),
            }
            if isinstance(self.source, LiveSnapshotSource):
                progress = self.source.live_snapshot_progress(state.partition, state.position)
                if progress:
                    partitions[pid]["live_snapshots"] = [p.to_json() for p in progress]
        self.snapshot = {
            "state": "PAUSED" if paused else "RUNNING",
            "buckets": sorted(self.buckets.owned),
            "partitions": partitions,
        }
