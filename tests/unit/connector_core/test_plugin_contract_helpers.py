"""cdcflow.testing's sink, transform and converter checkers pass the built-ins and catch plugins
that break the contract; RecordingSink keeps what it was given. (The kafka sink and the avro
converter, which need the broker and the registry: tests/integration/test_contract_checkers.py.)"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from cdcflow.contract import Converter, PluginConfig, PluginContext, Rejected, Transform
from cdcflow.converters import JsonConverter, JsonConverterConfig
from cdcflow.errors import RecordRejectedError
from cdcflow.events import ChangeEvent, Op, Record, RowSchema, SourceInfo
from cdcflow.sinks.file.sink import FileSink, FileSinkConfig
from cdcflow.sources.datagen import DatagenConfig, DatagenSource
from cdcflow.testing import (
    PluginContractViolationError,
    RecordingSink,
    check_converter_contract,
    check_sink_contract,
    check_transform_contract,
)
from cdcflow.transforms import (
    FilterConfig,
    FilterTransform,
    MaskConfig,
    MaskTransform,
    RouteConfig,
    RouteTransform,
    UnwrapConfig,
    UnwrapTransform,
)

CONTEXT = PluginContext("t", Path("t.yaml"))


def datagen_events(count: int = 60) -> list[ChangeEvent]:
    source = DatagenSource(
        DatagenConfig(type="datagen", count=count, tables=2, op_mix={"c": 0.5, "u": 0.3, "d": 0.2}), CONTEXT
    )
    return [source.event(0, seq, 1_000 * seq) for seq in range(1, count + 1)]


def unwrapped(events: Sequence[ChangeEvent]) -> list[ChangeEvent]:
    unwrap = UnwrapTransform(UnwrapConfig(type="unwrap"), CONTEXT)
    return [e for e in (unwrap.transform_event(event) for event in events) if e is not None]


# --- sinks -------------------------------------------------------------------------------------


def test_the_file_sink_keeps_the_sink_contract(tmp_path: Path) -> None:
    sink = FileSink(FileSinkConfig(type="file", path=tmp_path / "out.jsonl"), CONTEXT)
    sink.open()
    events = datagen_events()
    report = check_sink_contract(sink, events)
    sink.close()
    assert report.written == 60 and report.rejected_at_write == report.rejected_at_flush == 0
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 60


def test_the_recording_sink_keeps_what_it_was_given_and_refuses_on_demand() -> None:
    events = datagen_events(20)
    sink = RecordingSink(refuse=lambda r: RecordRejectedError("no deletes") if r.op is Op.DELETE else None)
    sink.open()
    report = check_sink_contract(sink, events)
    deletes = [e for e in events if e.op is Op.DELETE]
    assert deletes and report.rejected_at_write == len(deletes)
    assert sink.durable == [e for e in events if e.op is not Op.DELETE]
    assert sink.flushes == 2


class _RefusesAgainAtFlush(RecordingSink):
    """Hands the records write refused back at flush too: they would reach the dead letters twice."""

    def __init__(self) -> None:
        super().__init__(refuse=lambda record: RecordRejectedError("refused"))
        self.refused_at_write: list[Rejected] = []

    def write(self, records: Sequence[Record]) -> list[Rejected]:
        rejected = super().write(records)
        self.refused_at_write += rejected
        return rejected

    def flush(self) -> list[Rejected]:
        again, self.refused_at_write = self.refused_at_write, []
        return again


class _RefusesAtFlushWhatComesLater(RecordingSink):
    """Refuses, at its first write, a record of a later batch (which it cannot have been given)."""

    def __init__(self, later: Record) -> None:
        super().__init__()
        self.later = later

    def write(self, records: Sequence[Record]) -> list[Rejected]:
        super().write(records)
        later, self.later = self.later, None
        return [Rejected(later, RecordRejectedError("x"), "sink")] if later is not None else []


class _RefusesForeverAtFlush(RecordingSink):
    def flush(self) -> list[Rejected]:
        super().flush()
        return [Rejected(self.written[0], RecordRejectedError("late"), "sink")] if self.written else []


@pytest.mark.parametrize(
    ("make", "rule"),
    [
        (lambda events: _RefusesAgainAtFlush(), "refused already"),
        (lambda events: _RefusesAtFlushWhatComesLater(events[-1]), "had not accepted"),
        (lambda events: _RefusesForeverAtFlush(), "refused already|nothing written since"),
    ],
    ids=["twice", "not-yet-written", "flush-again"],
)
def test_the_sink_checker_catches_a_sink_that_breaks_the_contract(make: Any, rule: str) -> None:
    events = datagen_events(10)
    with pytest.raises(PluginContractViolationError, match=rule):
        check_sink_contract(make(events), events)


# --- transforms ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "transform",
    [
        FilterTransform(FilterConfig(type="filter", ops=["c", "u"]), CONTEXT),
        RouteTransform(RouteConfig(type="route", regex="(.*)", replacement="cdc.$1"), CONTEXT),
        MaskTransform(MaskConfig(type="mask", columns=["name"], mode="hash", salt="s"), CONTEXT),
        MaskTransform(MaskConfig(type="mask", columns=["payload", "amount"], mode="drop"), CONTEXT),
        UnwrapTransform(UnwrapConfig(type="unwrap", delete_handling="rewrite", add_fields=["op", "table"]), CONTEXT),
        UnwrapTransform(UnwrapConfig(type="unwrap"), CONTEXT),
    ],
    ids=["filter", "route", "mask-hash", "mask-drop", "unwrap-rewrite", "unwrap"],
)
def test_the_builtin_transforms_keep_the_transform_contract(transform: Transform[Any]) -> None:
    events = datagen_events()
    report = check_transform_contract(transform, events)
    assert report.events == 60 and report.kept + report.dropped == 60 and report.kept > 0


class _NoConfig(PluginConfig):
    pass


class _MutatesItsInput(Transform[_NoConfig]):
    type_name = "mutates"
    config_model = _NoConfig

    def apply(self, event: ChangeEvent) -> ChangeEvent | None:
        if event.after is not None:
            event.after["amount"] = 0
        return event


class _AddsAColumnUnstated(Transform[_NoConfig]):
    type_name = "adds"
    config_model = _NoConfig

    def apply(self, event: ChangeEvent) -> ChangeEvent | None:
        after = None if event.after is None else {**event.after, "bucket": 1}
        return event.with_changes(after=after)


class _DropsTheKey(Transform[_NoConfig]):
    type_name = "dropskey"
    config_model = _NoConfig

    def apply(self, event: ChangeEvent) -> ChangeEvent | None:
        return event.with_changes(key={})


@pytest.mark.parametrize(
    ("transform_cls", "rule"),
    [
        (_MutatesItsInput, "mutated its input"),
        (_AddsAColumnUnstated, "does not fit the schema"),
        (_DropsTheKey, "key lost"),
    ],
    ids=["mutates", "unstated-column", "drops-key"],
)
def test_the_transform_checker_catches_a_transform_that_breaks_the_contract(
    transform_cls: type[Transform[Any]], rule: str
) -> None:
    with pytest.raises(PluginContractViolationError, match=rule):
        check_transform_contract(transform_cls(_NoConfig(type=transform_cls.type_name), CONTEXT), datagen_events(10))


# --- converters ----------------------------------------------------------------------------------


@pytest.mark.parametrize("schemas_enable", [True, False])
def test_the_json_converter_keeps_the_converter_contract(schemas_enable: bool) -> None:
    converter = JsonConverter(JsonConverterConfig(type="json", schemas_enable=schemas_enable), CONTEXT)
    events = datagen_events()
    report = check_converter_contract(converter, [*events, *unwrapped(events)])
    deletes = sum(e.op is Op.DELETE for e in events)
    assert report.records == 120 and report.tombstones == deletes > 0  # unwrap turned each delete into a tombstone


class _LosesTheBefore(JsonConverter):
    def deserialize(self, destination: str, data: bytes) -> dict[str, Any]:
        read = super().deserialize(destination, data)
        read.pop("before", None)
        return read


class _TombstonesEverything(JsonConverter):
    def serialize_value(self, record: Record, destination: str) -> bytes | None:
        return None


class _NotDeterministic(JsonConverter):
    calls = 0

    def serialize_key(self, record: Record, destination: str) -> bytes | None:
        self.calls += 1
        return json.dumps({"n": self.calls}).encode()


@pytest.mark.parametrize(
    ("converter_cls", "rule"),
    [(_LosesTheBefore, "value's before"), (_TombstonesEverything, "tombstone"), (_NotDeterministic, "twice")],
    ids=["loses-before", "tombstones", "not-deterministic"],
)
def test_the_converter_checker_catches_a_converter_that_breaks_the_contract(
    converter_cls: type[Converter[Any]], rule: str
) -> None:
    converter = converter_cls(JsonConverterConfig(type="json"), CONTEXT)
    events = [e for e in datagen_events(20) if e.op is Op.UPDATE]
    with pytest.raises(PluginContractViolationError, match=rule):
        check_converter_contract(converter, events)


def test_a_delete_without_a_tombstone_is_read_back_as_its_envelope() -> None:
    schema = RowSchema("c.ks.t", (), ())
    source = SourceInfo("cassandra", "c", "ks", "t", "p", {}, 1)
    delete = ChangeEvent(Op.DELETE, {"id": 1}, {"id": 1}, None, source, 0, schema)
    report = check_converter_contract(
        JsonConverter(JsonConverterConfig(type="json", schemas_enable=False), CONTEXT), [delete]
    )
    assert report.tombstones == 0
