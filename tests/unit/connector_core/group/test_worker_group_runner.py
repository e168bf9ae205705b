"""A group member's delivery loop (no services): what a revoke, a loss and a fenced commit do to
its partitions and checkpoints, the group's config checks, and the bucket hash."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

import pytest

from cdcflow.config import parse_pipeline
from cdcflow.contract import Checkpoint, CheckpointStoreConfig, FencingCheckpointStore, PluginContext
from cdcflow.errors import ConfigFieldError
from cdcflow.group.runner import GroupPipelineRunner
from cdcflow.pipeline import BucketAssignment, HashAssignment, bucket_of, build_runner
from cdcflow.plugins import PluginRegistry
from tests.unit.connector_core.test_delivery_loop import RecordingSink


@dataclass
class Claims:
    """What a fencing store keeps on its server: each bucket's current claim, and the checkpoints."""

    epochs: dict[int, int] = field(default_factory=dict)
    committed: dict[str, Checkpoint] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


class MemoryFencingConfig(CheckpointStoreConfig):
    interval_ms: int = 100


class MemoryFencingStore(FencingCheckpointStore[MemoryFencingConfig]):
    """The fencing contract over shared memory: a claim bumps the bucket's epoch, and a commit with
    an older epoch is fenced, as a newer transactional producer fences an older one."""

    type_name = "memory-fencing"
    config_model = MemoryFencingConfig
    shared: ClassVar[Claims] = Claims()
    # Set: a full load waits for it, as a read_committed read waits at a dead member's open
    # transaction (which only the claim of its buckets, in a rebalance, aborts).
    open_transaction: ClassVar[threading.Event | None] = None
    settled_loads: ClassVar[int] = 0

    def __init__(self, config: MemoryFencingConfig, context: PluginContext) -> None:
        super().__init__(config, context)
        self.mine: dict[int, int] = {}

    def load(self) -> dict[str, Checkpoint]:
        if self.open_transaction is not None:
            self.open_transaction.wait()
        with self.shared.lock:
            return dict(self.shared.committed)

    def load_settled(self) -> dict[str, Checkpoint]:
        type(self).settled_loads += 1
        with self.shared.lock:
            return dict(self.shared.committed)

    def commit(self, checkpoints: Mapping[str, Checkpoint]) -> None:
        raise AssertionError("a group member commits through its claims only")

    def reset(self, partition_ids: Sequence[str] | None = None) -> None:
        raise AssertionError("not used by the loop")

    def claim(self, buckets: Collection[int], bucket_of: Callable[[str], int]) -> dict[str, Checkpoint]:
        with self.shared.lock:
            for bucket in buckets:
                if bucket not in self.mine:
                    self.shared.epochs[bucket] = self.shared.epochs.get(bucket, 0) + 1
                    self.mine[bucket] = self.shared.epochs[bucket]
            return {pid: c for pid, c in self.shared.committed.items() if bucket_of(pid) in set(buckets)}

    def commit_claimed(self, checkpoints: Mapping[int, Mapping[str, Checkpoint | None]]) -> frozenset[int]:
        fenced = set()
        with self.shared.lock:
            for bucket, values in checkpoints.items():
                if self.shared.epochs.get(bucket) != self.mine[bucket]:
                    fenced.add(bucket)
                    continue
                for pid, checkpoint in values.items():
                    if checkpoint is None:
                        self.shared.committed.pop(pid, None)
                    else:
                        self.shared.committed[pid] = checkpoint
        self.release(fenced)
        return frozenset(fenced)

    def release(self, buckets: Collection[int]) -> None:
        for bucket in buckets:
            self.mine.pop(bucket, None)

    def claimed(self) -> frozenset[int]:
        return frozenset(self.mine)


BUCKETS = 4
GROUP = f"{{bootstrap_servers: 'unused:9092', buckets: {BUCKETS}, rest: {{port: 0}}}}"


@pytest.fixture
def registry() -> PluginRegistry:
    registry = PluginRegistry.from_entry_points()
    registry.register(
        SimpleNamespace(
            cdcflow_sink_types=lambda: [RecordingSink], cdcflow_checkpoint_store_types=lambda: [MemoryFencingStore]
        ),
        "tests",
    )
    RecordingSink.durable.clear()
    RecordingSink.calls.clear()
    MemoryFencingStore.shared = Claims()
    MemoryFencingStore.open_transaction = None
    MemoryFencingStore.settled_loads = 0
    return registry


def member(tmp_path: Path, registry: PluginRegistry, source: str = "partitions: 8, rate: 4000") -> GroupPipelineRunner:
    import yaml

    data = yaml.safe_load(
        "name: g\n"
        f"source: {{type: datagen, {source}}}\n"
        "sink: {type: recording}\n"
        "checkpoint: {type: memory-fencing}\n"
        f"engine: {{poll_interval_ms: 10, max_records_per_read: 50, group: {GROUP}}}\n"
    )
    spec = parse_pipeline(data, tmp_path / "g.yaml", registry)
    runner = build_runner(spec, registry, BucketAssignment(BUCKETS), runner_class=GroupPipelineRunner)
    assert isinstance(runner, GroupPipelineRunner)
    return runner


def wait(condition: Callable[[], bool], what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def durable_seq(pid: str) -> int:
    return max((r.source.position["seq"] for r in RecordingSink.durable if r.source.partition == pid), default=0)


def partitions_of(bucket: int) -> list[str]:
    return [f"datagen-{i}" for i in range(8) if bucket_of(f"datagen-{i}", BUCKETS) == bucket]


def test_revoke_flushes_commits_then_drops_the_buckets_partitions(tmp_path: Path, registry: PluginRegistry) -> None:
    runner = member(tmp_path, registry)
    runner.request("assign", frozenset(range(BUCKETS)))
    thread = threading.Thread(target=runner.run)
    thread.start()
    try:
        wait(lambda: len(runner.snapshot["partitions"]) == 8, "all 8 partitions to start")
        revoked = next(b for b in range(BUCKETS) if partitions_of(b))
        wait(lambda: all(durable_seq(pid) > 0 for pid in partitions_of(revoked)), "the bucket's events to arrive")
        assert runner.request("revoke", frozenset({revoked})).wait(10)
        # Everything read from the revoked partitions is durable and committed: the next owner
        # starts exactly where this one stopped.
        for pid in partitions_of(revoked):
            assert MemoryFencingStore.shared.committed[pid].offset["seq"] == durable_seq(pid)
        wait(lambda: not set(partitions_of(revoked)) & set(runner.snapshot["partitions"]), "the snapshot to drop them")
        assert revoked not in runner.buckets.owned
    finally:
        runner.stop.set()
        thread.join(30)


def test_a_commit_fenced_by_a_new_owner_drops_the_bucket(tmp_path: Path, registry: PluginRegistry) -> None:
    runner = member(tmp_path, registry)
    runner.request("assign", frozenset(range(BUCKETS)))
    thread = threading.Thread(target=runner.run)
    thread.start()
    try:
        wait(lambda: len(runner.snapshot["partitions"]) == 8, "all 8 partitions to start")
        taken = next(b for b in range(BUCKETS) if partitions_of(b))
        newcomer = MemoryFencingStore(MemoryFencingConfig(type="memory-fencing"), PluginContext("g", tmp_path))
        at_claim = newcomer.claim([taken], lambda pid: bucket_of(pid, BUCKETS))
        wait(lambda: taken not in runner.buckets.owned, "the fenced bucket to be dropped")
        # The zombie's later positions never reached the store: it holds what the newcomer found.
        for pid in partitions_of(taken):
            assert MemoryFencingStore.shared.committed.get(pid) == at_claim.get(pid)
        others = [pid for b in runner.buckets.owned for pid in partitions_of(b)]
        before = {pid: MemoryFencingStore.shared.committed[pid].offset["seq"] for pid in others}
        wait(
            lambda: all(MemoryFencingStore.shared.committed[pid].offset["seq"] > before[pid] for pid in others),
            "the other buckets to go on committing",
        )
    finally:
        runner.stop.set()
        thread.join(30)


def test_a_member_done_with_its_partitions_answers_a_revoke_while_a_commit_is_left_open(
    tmp_path: Path, registry: PluginRegistry
) -> None:
    # Its partitions finished, the member looks every second whether the whole pipeline is done.
    # That look must not wait on a dead member's open commit: the rebalance that ends it waits on
    # this member's revoke.
    MemoryFencingStore.open_transaction = threading.Event()
    runner = member(tmp_path, registry, "partitions: 8, count: 80")
    mine = next(b for b in range(BUCKETS) if partitions_of(b))
    runner.request("assign", frozenset({mine}))
    thread = threading.Thread(target=runner.run)
    thread.start()
    try:
        wait(lambda: set(runner.snapshot["partitions"]) == set(partitions_of(mine)), "its partitions to start")
        wait(lambda: MemoryFencingStore.settled_loads >= 2, "the member to look whether the pipeline is done")
        assert runner.request("revoke", frozenset({mine})).wait(10)
        assert mine not in runner.buckets.owned
    finally:
        MemoryFencingStore.open_transaction.set()
        runner.stop.set()
        thread.join(30)


def test_lose_drops_without_a_commit(tmp_path: Path, registry: PluginRegistry) -> None:
    runner = member(tmp_path, registry)
    runner.request("assign", frozenset(range(BUCKETS)))
    thread = threading.Thread(target=runner.run)
    thread.start()
    try:
        wait(lambda: len(runner.snapshot["partitions"]) == 8, "all 8 partitions to start")
        lost = next(b for b in range(BUCKETS) if partitions_of(b))
        flushes = RecordingSink.calls.count("flush")
        committed = {pid: MemoryFencingStore.shared.committed.get(pid) for pid in partitions_of(lost)}
        assert runner.request("lose", frozenset({lost})).wait(10)
        assert {pid: MemoryFencingStore.shared.committed.get(pid) for pid in partitions_of(lost)} == committed
        assert RecordingSink.calls.count("flush") - flushes <= 1  # at most the periodic checkpoint in progress
        assert lost not in runner.buckets.owned
    finally:
        runner.stop.set()
        thread.join(30)


def test_a_group_needs_a_checkpoint_store_that_machines_share(tmp_path: Path, registry: PluginRegistry) -> None:
    import yaml

    data = yaml.safe_load(
        "name: g\nsource: {type: datagen}\nsink: {type: recording}\ncheckpoint: {type: file, path: ck}\n"
        f"engine: {{workers: 2, group: {GROUP}}}\n"
    )
    with pytest.raises(ConfigFieldError) as caught:
        parse_pipeline(data, tmp_path / "g.yaml", registry)
    text = str(caught.value)
    assert "field checkpoint.type:" in text and "not shared between machines" in text
    assert "field engine.workers: expected 1 with engine.group" in text


def test_heartbeat_must_fit_the_session_several_times(tmp_path: Path, registry: PluginRegistry) -> None:
    import yaml

    data = yaml.safe_load(
        "name: g\nsource: {type: datagen}\nsink: {type: recording}\ncheckpoint: {type: memory-fencing}\n"
        "engine: {group: {bootstrap_servers: 'k:9092', session_timeout_s: 6, heartbeat_interval_s: 3}}\n"
    )
    with pytest.raises(ConfigFieldError, match="at most a third of session_timeout_s"):
        parse_pipeline(data, tmp_path / "g.yaml", registry)


def test_the_bucket_hash_splits_ids_that_differ_in_their_last_digit() -> None:
    # crc32 % 2 put datagen-0 and datagen-1 (and -2, -3) on the same worker of two.
    assert {HashAssignment(0, 2).owns("datagen-0"), HashAssignment(0, 2).owns("datagen-1")} == {True, False}
    spread = [bucket_of(f"datagen-{i}", 32) for i in range(64)]
    assert len(set(spread)) >= 24  # 64 ids over 32 buckets: a good hash leaves few empty


def test_a_revoke_that_outlives_the_rebalance_timeout_ends_the_process() -> None:
    from cdcflow.group.coordinator import EXIT_REVOKE_TIMEOUT, wait_or_exit

    exits: list[int] = []
    done, stuck = threading.Event(), threading.Event()
    done.set()
    wait_or_exit([done], 0.05, "revoking [1]", exit=exits.append)
    assert exits == []
    wait_or_exit([done, stuck], 0.05, "revoking [1]", exit=exits.append)
    assert exits == [EXIT_REVOKE_TIMEOUT]
