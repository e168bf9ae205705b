"""The delivery loop's promises, checked with a recording sink (cdcflow's own Sink interface)."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from cdcflow.config import parse_pipeline
from cdcflow.contract import Offset, Partition, PluginConfig, PluginContext, Rejected, Sink
from cdcflow.errors import SinkDeliveryError, SourceDataError
from cdcflow.events import Record
from cdcflow.pipeline import HashAssignment, PipelineRunner, RecordFailedError, StoppedWhileRetryingError, build_runner
from cdcflow.plugins import PluginRegistry
from cdcflow.sources.datagen.source import DatagenSource


class RecordingSinkConfig(PluginConfig):
    fail_flushes: int = 0
    fail_flush_numbers: tuple[int, ...] = ()


class RecordingSink(Sink[RecordingSinkConfig]):
    """Keeps what was flushed (durable) apart from what was only written."""

    type_name = "recording"
    config_model = RecordingSinkConfig
    durable: ClassVar[list[Record]] = []
    calls: ClassVar[list[str]] = []

    def __init__(self, config: RecordingSinkConfig, context: PluginContext) -> None:
        super().__init__(config, context)
        self.pending: list[Record] = []
        self.failures_left = config.fail_flushes

    def write(self, records: Sequence[Record]) -> list[Rejected]:
        self.pending.extend(records)
        return []

    def flush(self) -> list[Rejected]:
        self.calls.append("flush")
        if self.failures_left or self.calls.count("flush") in self.config.fail_flush_numbers:
            self.failures_left = max(0, self.failures_left - 1)
            self.pending.clear()  # what was buffered is lost, as with a failed delivery
            raise SinkDeliveryError("simulated lost delivery")
        type(self).durable.extend(self.pending)
        self.pending.clear()
        return []


@pytest.fixture
def registry() -> PluginRegistry:
    registry = PluginRegistry.from_entry_points()
    registry.register(SimpleNamespace(cdcflow_sink_types=lambda: [RecordingSink]), "tests")
    RecordingSink.durable = []
    RecordingSink.calls = []
    return registry


def pipeline(tmp_path: Path, registry: PluginRegistry, **sections: Any) -> PipelineRunner:
    data = {
        "name": "loop",
        "source": {"type": "datagen", "count": 2000, "partitions": 3, "event_size": 8},
        "sink": {"type": "recording"},
        "checkpoint": {"type": "file", "path": str(tmp_path / "ckpt"), "interval_ms": 1},
        "engine": {"max_records_per_read": 100, "batch_size": 50, "poll_interval_ms": 1},
        "errors": {"retry": {"initial_backoff_ms": 1, "max_backoff_ms": 2}},
        **sections,
    }
    spec = parse_pipeline(data, tmp_path / "loop.yaml", registry)
    return build_runner(spec, registry)


def seqs(records: list[Record]) -> Counter[int]:
    return Counter(
        int((r.value_payload() or {})["after" if r.after else "before"]["seq"])  # type: ignore[union-attr]
        for r in records
    )


def committed_offsets(tmp_path: Path) -> dict[str, int]:
    return {
        f.name.split(".")[0]: json.loads(f.read_text())["offset"]["seq"]
        for f in (tmp_path / "ckpt").glob("*.checkpoint.json")
    }


def test_a_failed_flush_replays_from_the_checkpoint_and_loses_nothing(tmp_path: Path, registry: PluginRegistry) -> None:
    runner = pipeline(tmp_path, registry, sink={"type": "recording", "fail_flushes": 3})
    runner.run()
    delivered = seqs(RecordingSink.durable)
    assert set(delivered) == set(range(2000))
    assert committed_offsets(tmp_path) == {"datagen-0": 667, "datagen-1": 667, "datagen-2": 666}


def test_offsets_are_committed_only_after_a_successful_flush(tmp_path: Path, registry: PluginRegistry) -> None:
    runner = pipeline(tmp_path, registry)
    original_commit = runner.store.commit

    def recording_commit(checkpoints: Any) -> None:
        RecordingSink.calls.append("commit")
        durable = seqs(RecordingSink.durable)
        for pid, checkpoint in checkpoints.items():
            index = int(pid.rsplit("-", 1)[1])
            # every event of the partition up to the committed offset is already durable
            assert all((seq - 1) * 3 + index in durable for seq in range(1, checkpoint.offset["seq"] + 1))
        original_commit(checkpoints)

    runner.store.commit = recording_commit  # type: ignore[method-assign]
    runner.run()
    assert RecordingSink.calls.count("commit") >= 1
    assert all(RecordingSink.calls[i - 1] == "flush" for i, c in enumerate(RecordingSink.calls) if c == "commit")


def test_tolerance_none_stops_before_committing_the_failed_range(tmp_path: Path, registry: PluginRegistry) -> None:
    runner = pipeline(tmp_path, registry, transforms=[{"type": "mask", "columns": ["table_2.id"], "mode": "drop"}])
    with pytest.raises(RecordFailedError, match="transform:mask"):
        runner.run()
    durable = seqs(RecordingSink.durable)
    committed = committed_offsets(tmp_path)
    for pid, seq in committed.items():
        index = int(pid.rsplit("-", 1)[1])
        assert all((s - 1) * 3 + index in durable for s in range(1, seq + 1))
    assert sum(committed.values()) < 2000


def test_tolerance_all_routes_rejected_records_to_the_dead_letter_file(
    tmp_path: Path, registry: PluginRegistry
) -> None:
    runner = pipeline(
        tmp_path,
        registry,
        transforms=[{"type": "mask", "columns": ["table_2.id"], "mode": "drop"}],
        errors={"tolerance": "all", "dead_letter": {"type": "file", "path": str(tmp_path / "dlq.jsonl")}},
    )
    runner.run()
    dead = [json.loads(line) for line in (tmp_path / "dlq.jsonl").read_text().splitlines()]
    delivered = seqs(RecordingSink.durable)
    dead_seqs = {(d["value"]["after"] or d["value"]["before"])["seq"] for d in dead}
    assert dead and all(d["destination"].endswith("table_2") for d in dead)
    assert all(d["headers"]["cdcflow.error.stage"] == "transform:mask" for d in dead)
    assert all(d["headers"]["cdcflow.error.class"] == "TransformError" for d in dead)
    assert dead_seqs.isdisjoint(delivered) and dead_seqs | set(delivered) == set(range(2000))


def test_graceful_stop_then_restart_delivers_each_event_exactly_once(tmp_path: Path, registry: PluginRegistry) -> None:
    first = pipeline(tmp_path, registry)
    original_write = first.sink.write

    def write_then_stop(records: Sequence[Record]) -> list[Rejected]:
        if len(RecordingSink.durable) + len(records) > 600:
            first.stop.set()  # as SIGTERM would, in the middle of a read cycle
        return original_write(records)

    first.sink.write = write_then_stop  # type: ignore[method-assign]
    first.run()
    stopped_with = len(RecordingSink.durable)
    assert 0 < stopped_with < 2000
    pipeline(tmp_path, registry).run()
    delivered = seqs(RecordingSink.durable)
    assert set(delivered) == set(range(2000)) and max(delivered.values()) == 1


@pytest.mark.parametrize("workers", [2, 3, 5])
def test_hash_assignment_gives_every_partition_exactly_one_owner(workers: int) -> None:
    ids = [f"datagen-{i}" for i in range(64)] + [f"topic:{i}" for i in range(16)]
    owners = {pid: [w for w in range(workers) if HashAssignment(w, workers).owns(pid)] for pid in ids}
    assert all(len(found) == 1 for found in owners.values())
    assert len({found[0] for found in owners.values()}) == workers  # nobody idles on 80 partitions


def test_stop_during_backoff_ends_without_committing_and_says_so(tmp_path: Path, registry: PluginRegistry) -> None:
    runner = pipeline(
        tmp_path,
        registry,
        sink={"type": "recording", "fail_flushes": 1000},
        errors={"retry": {"initial_backoff_ms": 50, "max_backoff_ms": 50}},
    )
    failures: list[BaseException] = []

    def run() -> None:
        try:
            runner.run()
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    while "flush" not in RecordingSink.calls:
        thread.join(0.01)
    runner.stop.set()
    thread.join(10)
    assert not thread.is_alive()
    assert committed_offsets(tmp_path) == {}
    # Not a clean stop: the process exits non-zero, naming the failure it was retrying.
    assert [type(f) for f in failures] == [StoppedWhileRetryingError]
    assert "stopped while retrying after SinkDeliveryError" in str(failures[0])


def test_metrics_count_events_and_expose_the_committed_watermark(tmp_path: Path, registry: PluginRegistry) -> None:
    from cdcflow.metrics import METRICS_REGISTRY

    runner = pipeline(tmp_path, registry, name="metrics-check")
    runner.run()

    def sample(metric: str) -> float | None:
        value: float | None = METRICS_REGISTRY.get_sample_value(metric, {"pipeline": "metrics-check"})
        return value

    assert sample("cdcflow_events_in_total") == 2000
    assert sample("cdcflow_events_out_total") == 2000
    assert sample("cdcflow_partitions_owned") == 3
    assert (sample("cdcflow_checkpoints_total") or 0) >= 1
    committed = max(json.loads(f.read_text())["watermark_us"] for f in (tmp_path / "ckpt").glob("*.json"))
    watermark = sample("cdcflow_watermark_seconds")
    assert watermark is not None and watermark <= committed / 1e6
    lag = sample("cdcflow_checkpoint_lag_seconds")
    assert lag is not None and lag >= 0


def test_a_successful_checkpoint_renews_the_retry_budget(tmp_path: Path, registry: PluginRegistry) -> None:
    from cdcflow.retry import Backoff

    runner = pipeline(
        tmp_path,
        registry,
        sink={"type": "recording", "fail_flush_numbers": [2, 6]},
        errors={"retry": {"initial_backoff_ms": 1, "max_backoff_ms": 1, "max_elapsed_s": 10}},
    )
    hours = [0.0]

    def slow_clock() -> float:
        hours[0] += 3600  # failures an hour apart, each followed by successful checkpoints
        return hours[0]

    runner._backoff = Backoff(runner.spec.errors.retry, clock=slow_clock)
    runner.run()
    assert set(seqs(RecordingSink.durable)) == set(range(2000))


class PoisonedDatagenSource(DatagenSource):
    """datagen whose every seventh global event cannot be decoded: the source rejects it."""

    type_name = "poisoned_datagen"

    def read(self, partition: Partition, start: Offset, end: Offset) -> Iterator[Record | Rejected]:
        for record in super().read(partition, start, end):
            payload = record.value_payload() or {}
            row = payload.get("after") or payload.get("before")
            if row["seq"] % 7 == 0:
                yield Rejected(record, SourceDataError(f"seq {row['seq']} is poisoned"), "source")
            else:
                yield record


@pytest.mark.parametrize("transforms", [[], [{"type": "filter", "ops": ["c", "u", "d"]}]])
def test_records_a_source_rejects_go_to_the_dead_letters_in_place_and_the_rest_goes_on(
    tmp_path: Path, registry: PluginRegistry, transforms: list[dict[str, Any]]
) -> None:
    registry.register(SimpleNamespace(cdcflow_source_types=lambda: [PoisonedDatagenSource]), "tests-source")
    runner = pipeline(
        tmp_path,
        registry,
        source={"type": "poisoned_datagen", "count": 2000, "partitions": 3, "event_size": 8},
        transforms=transforms,
        errors={"tolerance": "all", "dead_letter": {"type": "file", "path": str(tmp_path / "dlq.jsonl")}},
    )
    runner.run()
    dead = [json.loads(line) for line in (tmp_path / "dlq.jsonl").read_text().splitlines()]
    dead_seqs = Counter((d["value"]["after"] or d["value"]["before"])["seq"] for d in dead)
    assert set(dead_seqs) == {seq for seq in range(2000) if seq % 7 == 0}
    assert all(d["headers"]["cdcflow.error.stage"] == "source" for d in dead)
    assert all(d["headers"]["cdcflow.error.class"] == "SourceDataError" for d in dead)
    assert set(seqs(RecordingSink.durable)) == {seq for seq in range(2000) if seq % 7}


def test_a_source_rejection_with_tolerance_none_stops_the_pipeline(tmp_path: Path, registry: PluginRegistry) -> None:
    registry.register(SimpleNamespace(cdcflow_source_types=lambda: [PoisonedDatagenSource]), "tests-source")
    runner = pipeline(tmp_path, registry, source={"type": "poisoned_datagen", "count": 2000, "partitions": 3})
    with pytest.raises(RecordFailedError, match="at source"):
        runner.run()
    assert 0 not in seqs(RecordingSink.durable)


def test_a_drained_bounded_source_has_no_lag_however_long_after(tmp_path: Path, registry: PluginRegistry) -> None:
    runner = pipeline(tmp_path, registry)
    now = [time.time()]
    runner.clock = lambda: now[0]
    runner.run()
    assert runner.checkpoint_lag_seconds() == 0.0
    now[0] += 3600  # an hour later nothing new can appear in a drained datagen: still no lag
    assert runner.checkpoint_lag_seconds() == 0.0
    checkpoints = runner.store.load()
    assert len(checkpoints) == 3 and all(c.caught_up and c.lag_at_commit_s() == 0 for c in checkpoints.values())


def test_records_that_wait_for_a_failing_sink_make_lag_grow(tmp_path: Path, registry: PluginRegistry) -> None:
    runner = pipeline(
        tmp_path,
        registry,
        sink={"type": "recording", "fail_flushes": 1000},
        errors={"retry": {"initial_backoff_ms": 50, "max_backoff_ms": 50}},
    )
    now = [time.time()]
    runner.clock = lambda: now[0]
    failures: list[BaseException] = []

    def run() -> None:
        try:
            runner.run()
        except StoppedWhileRetryingError as exc:
            failures.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        while RecordingSink.calls.count("flush") < 2:
            thread.join(0.01)
        first = runner.checkpoint_lag_seconds()
        now[0] += 30
        assert runner.checkpoint_lag_seconds() == pytest.approx(first + 30, abs=1)
    finally:
        runner.stop.set()
        thread.join(10)
    assert len(failures) == 1


def test_the_first_checkpoint_of_a_run_follows_its_first_read(tmp_path: Path, registry: PluginRegistry) -> None:
    # An interval far longer than the run: only the first-read rule can commit before the end.
    runner = pipeline(
        tmp_path, registry, checkpoint={"type": "file", "path": str(tmp_path / "ckpt"), "interval_ms": 600_000}
    )
    durable_at_commits: list[int] = []
    original_commit = runner.store.commit

    def recording_commit(checkpoints: Any) -> None:
        durable_at_commits.append(len(RecordingSink.durable))
        original_commit(checkpoints)

    runner.store.commit = recording_commit  # type: ignore[method-assign]
    runner.run()
    # A process killed at any moment after its first read has moved forward: the first commit
    # holds one read (a batch: 50 records), not the whole run's 2,000.
    assert durable_at_commits[0] == 50
    assert durable_at_commits[-1] == 2000


def test_reads_are_sized_to_what_the_sink_delivers_in_one_checkpoint_interval(
    tmp_path: Path, registry: PluginRegistry
) -> None:
    # The sink takes 1 ms of the runner's clock a record; checkpoints are due every 100 ms. One read
    # may take up to 10,000 records, which would be 10 s of delivery between two commits.
    runner = pipeline(
        tmp_path,
        registry,
        source={"type": "datagen", "count": 30_000, "partitions": 2, "event_size": 8},
        checkpoint={"type": "file", "path": str(tmp_path / "ckpt"), "interval_ms": 100},
        engine={"max_records_per_read": 10_000, "batch_size": 20, "poll_interval_ms": 1},
    )
    now = [0.0]
    runner.clock = lambda: now[0]
    original_write = runner.sink.write

    def one_ms_a_record(records: Sequence[Record]) -> list[Rejected]:
        now[0] += len(records) / 1000
        return original_write(records)

    runner.sink.write = one_ms_a_record  # type: ignore[method-assign]
    delivered_between_commits: list[int] = []
    original_commit = runner.store.commit
    last = [0]

    def recording_commit(checkpoints: Any) -> None:
        delivered_between_commits.append(len(RecordingSink.durable) - last[0])
        last[0] = len(RecordingSink.durable)
        original_commit(checkpoints)

    runner.store.commit = recording_commit  # type: ignore[method-assign]
    runner.run()
    assert sum(delivered_between_commits) == 30_000
    # What a crash just before a commit replays: never more than one interval's worth (100
    # records) plus the read that was under way when the interval ended (at most 100 more).
    assert max(delivered_between_commits) <= 200, delivered_between_commits
    assert runner._read_sizing.limit == 100  # settled on exactly one interval's worth


def test_records_dropped_without_dead_letters_are_counted_and_reported_last(
    tmp_path: Path, registry: PluginRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    from cdcflow.metrics import METRICS_REGISTRY

    registry.register(SimpleNamespace(cdcflow_source_types=lambda: [PoisonedDatagenSource]), "tests-source")
    runner = pipeline(
        tmp_path,
        registry,
        name="drops-counted",
        source={"type": "poisoned_datagen", "count": 2000, "partitions": 3, "event_size": 8},
        errors={"tolerance": "all", "dead_letter": "none"},
    )
    with caplog.at_level("INFO", logger="cdcflow"):
        runner.run()
    poisoned = len([seq for seq in range(2000) if seq % 7 == 0])
    assert METRICS_REGISTRY.get_sample_value("cdcflow_dropped_records_total", {"pipeline": "drops-counted"}) == poisoned
    assert set(seqs(RecordingSink.durable)) == {seq for seq in range(2000) if seq % 7}
    last = [r.getMessage() for r in caplog.records if r.name == "cdcflow.pipeline"][-1]
    assert f"2000 records read, {2000 - poisoned} written, 0 sent to the dead letters, {poisoned} dropped" in last


class WatermarkRecordingSink(RecordingSink):
    """A RecordingSink with the WatermarkAwareSink capability (what the tikv sink has)."""

    type_name = "recording_watermarks"
    watermarks: ClassVar[list[int]] = []

    def on_watermark(self, watermark_us: int) -> None:
        type(self).watermarks.append(watermark_us)


def test_a_sink_with_on_watermark_hears_the_pipeline_watermark_at_checkpoints(
    tmp_path: Path, registry: PluginRegistry
) -> None:
    registry.register(SimpleNamespace(cdcflow_sink_types=lambda: [WatermarkRecordingSink]), "tests-watermarks")
    WatermarkRecordingSink.watermarks = []
    pipeline(tmp_path, registry, sink={"type": "recording_watermarks"}).run()
    heard = WatermarkRecordingSink.watermarks
    assert len(heard) >= 2 and heard == sorted(heard)
    checkpoints = [json.loads(f.read_text()) for f in (tmp_path / "ckpt").glob("*.checkpoint.json")]
    # Once every partition is finished, the pipeline is complete up to the last of them.
    assert heard[-1] == max(c["watermark_us"] for c in checkpoints)
