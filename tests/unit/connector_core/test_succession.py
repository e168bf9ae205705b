"""The succession rule (cdcflow.succession) in the delivery loop, on a source of two partitions over
the same keys where ``new`` replaces ``old`` (a generation switch, a tablet merge): each key's
changes reach the sink in the order the source numbered them, and a gate follows the committed
offsets, not the positions of the process that reads."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace

import pytest

from cdcflow.config import parse_pipeline
from cdcflow.contract import Offset, Partition, PluginConfig, PluginContext, Rejected, Source, Succession
from cdcflow.events import ChangeEvent, Op, Record, SourceInfo
from cdcflow.pipeline import HashAssignment, build_runner
from cdcflow.plugins import PluginRegistry
from cdcflow.succession import SuccessionGate
from tests.unit.connector_core.test_delivery_loop import RecordingSink

KEYS = 3


class HandoverConfig(PluginConfig):
    changes: int = 30  # per partition
    listed: tuple[str, ...] = ("new", "old")


class HandoverSource(Source[HandoverConfig]):
    """``old`` holds changes 0..n-1, ``new`` changes n..2n-1, change i of key ``i % 3`` at time i:
    ``new`` takes the keys over from ``old`` at time n. Offsets ``{"i": last change done}``."""

    type_name = "handover"
    config_model = HandoverConfig
    bounded = True

    def _bounds(self, partition: Partition) -> tuple[int, int]:
        n = self.config.changes
        return (0, n - 1) if partition.id == "old" else (n, 2 * n - 1)

    def partitions(self) -> Sequence[Partition]:
        n = self.config.changes
        known = {"old": Partition("old"), "new": Partition("new", succeeds=Succession(("old",), n))}
        return [known[pid] for pid in self.config.listed]

    def initial_offset(self, partition: Partition) -> Offset:
        return {"i": self._bounds(partition)[0] - 1}

    def latest_offset(self, partition: Partition, start: Offset, max_records: int | None) -> Offset:
        return {"i": min(start["i"] + (max_records or 1), self._bounds(partition)[1])}

    def read(self, partition: Partition, start: Offset, end: Offset) -> Iterator[Record | Rejected]:
        for i in range(start["i"] + 1, end["i"] + 1):
            source = SourceInfo("test", "c", "ks", "t", partition.id, {"i": i}, i)
            yield ChangeEvent(Op.UPDATE, {"k": i % KEYS}, None, {"k": i % KEYS, "v": i}, source, 0)

    def watermark(self, partition: Partition, offset: Offset) -> int | None:
        return int(offset["i"]) + 1

    def is_finished(self, partition: Partition, offset: Offset) -> bool:
        return int(offset["i"]) >= self._bounds(partition)[1]


@pytest.fixture
def registry() -> PluginRegistry:
    registry = PluginRegistry.from_entry_points()
    registry.register(
        SimpleNamespace(cdcflow_source_types=lambda: [HandoverSource], cdcflow_sink_types=lambda: [RecordingSink]),
        "tests",
    )
    RecordingSink.durable = []
    RecordingSink.calls = []
    return registry


def spec(tmp_path: Path, registry: PluginRegistry, **source: object) -> object:
    data = {
        "name": "handover",
        "source": {"type": "handover", **source},
        "sink": {"type": "recording"},
        "checkpoint": {"type": "file", "path": str(tmp_path / "ckpt"), "interval_ms": 1},
        "engine": {"max_records_per_read": 4, "batch_size": 4, "poll_interval_ms": 1},
    }
    return parse_pipeline(data, tmp_path / "handover.yaml", registry)


def values_by_key(events: list[Record]) -> dict[int, list[int]]:
    found: dict[int, list[int]] = {}
    for event in events:
        assert isinstance(event, ChangeEvent) and event.after is not None
        found.setdefault(event.key["k"], []).append(event.after["v"])
    return found


def written_order(changes: int) -> dict[int, list[int]]:
    return {k: [i for i in range(2 * changes) if i % KEYS == k] for k in range(KEYS)}


def test_one_process_delivers_the_successor_after_its_predecessor(tmp_path: Path, registry: PluginRegistry) -> None:
    # ``new`` is listed first: a loop without the rule reads it first.
    build_runner(spec(tmp_path, registry), registry).run()
    assert values_by_key(RecordingSink.durable) == written_order(30)


def test_two_processes_wait_for_each_others_commits(tmp_path: Path, registry: PluginRegistry) -> None:
    """``old`` and ``new`` in different worker processes (threads here, sharing the checkpoint
    folder as processes do): the worker of ``new`` waits for the other's commits."""
    runners = [
        build_runner(spec(tmp_path, registry, changes=200), registry, assignment=HashAssignment(i, 2), worker_id=str(i))
        for i in range(2)
    ]
    owners = {pid: [r.assignment.owns(pid) for r in runners].index(True) for pid in ("old", "new")}
    assert owners["old"] != owners["new"]  # blake2b of the fixed ids
    # The worker of new starts first and alone, until it has committed its start: without the
    # rule it reads new meanwhile, before anything of old.
    waiting = runners[owners["new"]]
    threads = [threading.Thread(target=r.run) for r in runners]
    threads[owners["new"]].start()
    deadline = time.monotonic() + 30
    while "new" not in waiting.store.load() and time.monotonic() < deadline:
        time.sleep(0.01)
    threads[owners["old"]].start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a worker is still waiting"
    assert waiting.metrics.records_read == 200
    assert values_by_key(RecordingSink.durable) == written_order(200)


def test_a_gate_follows_committed_offsets(tmp_path: Path, registry: PluginRegistry) -> None:
    source = HandoverSource(HandoverConfig(type="handover", changes=10), PluginContext("p", tmp_path / "p.yaml"))
    partitions = {p.id: p for p in source.partitions()}
    committed: dict[str, Offset] = {}
    reads: list[Mapping[str, Offset]] = []

    def store() -> Mapping[str, Offset]:
        reads.append(dict(committed))
        return committed

    clock = [0.0]
    gate = SuccessionGate(source, store, refresh_s=1.0, clock=lambda: clock[0])
    gate.listed(partitions.values())
    assert gate.may_read(partitions["old"])  # replaces nothing
    assert not gate.may_read(partitions["new"])  # old has committed nothing yet
    committed["old"] = {"i": 9}  # old complete, as another process committed it
    assert not gate.may_read(partitions["new"])  # the store is read at most once a second
    clock[0] = 1.0
    assert gate.may_read(partitions["new"])
    assert len(reads) == 2

    # Complete up to the successor's start: finished, or a watermark at or past it; this
    # process's own commits count at once; a predecessor the source no longer lists is gone.
    fresh = SuccessionGate(source, dict, refresh_s=1000.0, clock=lambda: 0.0)
    fresh.listed(partitions.values())
    fresh.note_committed({"old": {"i": 8}})
    assert fresh.waiting_on(partitions["new"]) == ["old"]
    fresh.note_committed({"old": {"i": 9}})
    assert fresh.waiting_on(partitions["new"]) == []
    fresh.listed([partitions["new"]])
    fresh.note_committed({"old": {"i": 0}})
    assert fresh.waiting_on(partitions["new"]) == []

    unlisted = SuccessionGate(source, dict)
    assert not unlisted.may_read(partitions["new"])  # nothing listed yet: nothing known gone
