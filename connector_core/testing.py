"""Helpers for plugin authors: check a plugin against the contract without writing the harness again.

    from cdcflow.testing import check_source_contract

    def test_my_source_keeps_the_contract():
        report = check_source_contract(MySource(config, context))
        assert report.records > 0

:func:`check_source_contract` raises :class:`SourceContractViolationError` naming the partition and
the rule broken: offsets that do not survive JSON, reads that are not deterministic, ranges that
do not split, watermarks that go back, a finished partition that grows, or compact batches
(:class:`~cdcflow.capabilities.ReadsEventBatches`) that differ from what ``read`` gives.

:func:`check_sink_contract`, :func:`check_transform_contract` and :func:`check_converter_contract`
do the same for the other kinds (:class:`PluginContractViolationError`), and :class:`RecordingSink`
is a sink that keeps what it was given, to test what a source or transform hands on.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdcflow.capabilities import ReadsEventBatches, is_finished, watermark_of
from cdcflow.contract import (
    Converter,
    Offset,
    Partition,
    PluginConfig,
    PluginContext,
    Rejected,
    Sink,
    Source,
    Transform,
    offset_key,
)
from cdcflow.errors import TransformError
from cdcflow.events import ChangeEvent, Op, Record, RowSchema, SchemaChangeEvent
from cdcflow.record_errors import SINK_STAGE

__all__ = [
    "ConverterContractReport",
    "PluginContractViolationError",
    "RecordingSink",
    "RecordingSinkConfig",
    "SinkContractReport",
    "SourceContractReport",
    "SourceContractViolationError",
    "TransformContractReport",
    "check_converter_contract",
    "check_sink_contract",
    "check_source_contract",
    "check_transform_contract",
]


class SourceContractViolationError(AssertionError):
    """A source broke one of the promises in :class:`cdcflow.contract.Source`."""


@dataclass
class SourceContractReport:
    partitions: int = 0
    ranges: int = 0
    records: int = 0


def _comparable(records: Iterable[Record | Rejected]) -> list[Any]:
    # ts_ms is processing time: the one field a replay may legitimately change.
    return [
        (r.record.with_changes(ts_ms=0), r.stage, str(r.error)) if isinstance(r, Rejected) else r.with_changes(ts_ms=0)
        for r in records
    ]


def _require(condition: bool, partition: Partition, rule: str) -> None:
    if not condition:
        raise SourceContractViolationError(f"partition {partition.id}: {rule}")


def check_source_contract(source: Source[Any], max_records: int = 100, cycles: int = 5) -> SourceContractReport:
    """Read ``cycles`` ranges of up to ``max_records`` from every partition and check each rule.

    The source must be open. Reads happen twice per range, so keep ``max_records`` small for
    sources backed by a real system.
    """
    report = SourceContractReport()
    for partition in source.partitions():
        report.partitions += 1
        start = source.initial_offset(partition)
        _check_offset(partition, start)
        _require(list(source.read(partition, start, start)) == [], partition, "read(start, start] must be empty")
        previous_watermark = watermark_of(source, partition, start)
        for _ in range(cycles):
            end = source.latest_offset(partition, start, max_records)
            _check_offset(partition, end)
            if offset_key(end) == offset_key(start):
                break
            first = _comparable(source.read(partition, start, end))
            _require(
                first == _comparable(source.read(partition, start, end)),
                partition,
                f"read({start}, {end}] is not deterministic",
            )
            report.ranges += 1
            report.records += len(first)
            _check_event_batches(source, partition, start, end, first)
            middle = source.latest_offset(partition, start, max(1, len(first) // 2))
            if offset_key(middle) not in (offset_key(start), offset_key(end)):
                split = _comparable(source.read(partition, start, middle)) + _comparable(
                    source.read(partition, middle, end)
                )
                _require(split == first, partition, f"read({start}, {end}] differs from the same range read in two")
            watermark = watermark_of(source, partition, end)
            if previous_watermark is not None and watermark is not None:
                _require(watermark >= previous_watermark, partition, f"watermark went back at {end}")
            previous_watermark = watermark
            start = end
        if is_finished(source, partition, start):
            again = source.latest_offset(partition, start, max_records)
            _require(offset_key(again) == offset_key(start), partition, "a finished partition moved on")
    return report


def _check_event_batches(
    source: Source[Any], partition: Partition, start: Offset, end: Offset, read: list[Any]
) -> None:
    """A source with compact batches gives in them exactly what ``read`` gives for the range."""
    if not isinstance(source, ReadsEventBatches):
        return
    batches = source.read_event_batches(partition, start, end, max(1, len(read) // 3))
    if batches is not None:
        compact = _comparable(record for batch in batches for record in batch.records())
        _require(compact == read, partition, f"read_event_batches({start}, {end}] differs from read")


def _check_offset(partition: Partition, offset: Offset) -> None:
    try:
        text = json.dumps(offset, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise SourceContractViolationError(f"partition {partition.id}: offset {offset!r} is not JSON: {exc}") from exc
    _require(json.loads(text) == offset, partition, f"offset {offset!r} does not survive a JSON round trip")


# --- sinks, transforms and converters -----------------------------------------------------------


class PluginContractViolationError(AssertionError):
    """A sink, transform or converter broke one of the promises in :mod:`cdcflow.contract`."""


class RecordingSinkConfig(PluginConfig):
    """A :class:`RecordingSink` takes no settings."""


class RecordingSink(Sink[RecordingSinkConfig]):
    """A sink that keeps what it was given, for tests of what reaches a sink.

    ``written`` is every record ``write`` took, ``durable`` what the last ``flush`` covered,
    ``watermarks`` each ``on_watermark``. ``refuse(record)`` returning an exception refuses that
    record for good at ``write`` (it comes back as :class:`~cdcflow.contract.Rejected`, stage
    ``sink``), as a real sink does with a record its destination will never take.
    """

    type_name = "recording"
    config_model = RecordingSinkConfig

    def __init__(
        self,
        config: RecordingSinkConfig | None = None,
        context: PluginContext | None = None,
        refuse: Callable[[Record], BaseException | None] = lambda record: None,
    ) -> None:
        super().__init__(
            config or RecordingSinkConfig(type="recording"), context or PluginContext("test", Path("test.yaml"))
        )
        self.refuse = refuse
        self.written: list[Record] = []
        self.durable: list[Record] = []
        self.watermarks: list[int] = []
        self.flushes = 0
        self.opened = self.closed = False

    def open(self) -> None:
        self.opened = True

    def close(self) -> None:
        self.closed = True

    def write(self, records: Sequence[Record]) -> list[Rejected]:
        rejected = []
        for record in records:
            error = self.refuse(record)
            if error is None:
                self.written.append(record)
            else:
                rejected.append(Rejected(record, error, SINK_STAGE))
        return rejected

    def flush(self) -> list[Rejected]:
        self.flushes += 1
        self.durable = list(self.written)
        return []

    def on_watermark(self, watermark_us: int) -> None:
        self.watermarks.append(watermark_us)


def _violation(plugin: Sink[Any] | Transform[Any] | Converter[Any], rule: str) -> PluginContractViolationError:
    return PluginContractViolationError(f"{type(plugin).__name__} ({plugin.type_name}): {rule}")


@dataclass
class SinkContractReport:
    written: int = 0
    rejected_at_write: int = 0
    rejected_at_flush: int = 0
    rejected: list[Rejected] = field(default_factory=list)  # what went to the dead letters, in order


def check_sink_contract(sink: Sink[Any], records: Sequence[Record]) -> SinkContractReport:
    """Write ``records`` in two batches, flush twice, and check :class:`~cdcflow.contract.Sink`'s promises.

    ``write`` and ``flush`` return lists of :class:`~cdcflow.contract.Rejected`, each a record
    (for the dead letters) with the error that refused it; ``write`` refuses only records of its
    own batch, ``flush`` only records ``write`` accepted, and no record is refused twice; a
    second ``flush`` with nothing written since has nothing more to refuse; ``engines`` names
    known engines. A sink may refuse a stand-in it built (the bytes a broker refused, a withheld
    tombstone). The sink must be open; what "durable" means downstream is for the caller to read back.
    """
    engines = sink.engines
    if not engines or not engines <= {"worker", "spark"}:
        raise _violation(sink, f"engines {set(engines)} must be a non-empty subset of {{'worker', 'spark'}}")
    given = {id(record): record for record in records}
    refused: dict[int, Record] = {}  # by id, holding each so that its id stays its own
    report = SinkContractReport(written=len(records))
    half = len(records) // 2
    for batch in (records[:half], records[half:]):
        rejected = sink.write(list(batch))
        _check_rejected(sink, "write", rejected, given, {id(r) for r in batch}, refused)
        report.rejected_at_write += len(rejected)
        report.rejected += rejected
    rejected = sink.flush()
    _check_rejected(sink, "flush", rejected, given, set(given) - set(refused), refused)
    report.rejected_at_flush = len(rejected)
    report.rejected += rejected
    again = sink.flush()
    if again:
        raise _violation(sink, f"a flush with nothing written since refused {len(again)} record(s) again")
    return report


def _check_rejected(
    sink: Sink[Any],
    method: str,
    rejected: Any,
    given: dict[int, Record],
    allowed: set[int],
    refused: dict[int, Record],
) -> None:
    if not isinstance(rejected, list):
        raise _violation(sink, f"{method} returned {type(rejected).__name__}, not a list of Rejected")
    for item in rejected:
        if not isinstance(item, Rejected) or not isinstance(item.error, BaseException):
            raise _violation(sink, f"{method} returned {item!r}, not a Rejected with the error that refused it")
        if not isinstance(item.record, ChangeEvent | SchemaChangeEvent):
            raise _violation(sink, f"{method} refused {item.record!r}, which is no record a dead letter can carry")
        key = id(item.record)
        if key in refused:
            raise _violation(sink, f"{method} refused a record that was refused already: {item.record!r}")
        if key in given and key not in allowed:
            raise _violation(sink, f"{method} refused a record it had not accepted (not written yet): {item.record!r}")
        refused[key] = item.record


@dataclass
class TransformContractReport:
    events: int = 0
    kept: int = 0
    dropped: int = 0


def check_transform_contract(transform: Transform[Any], events: Sequence[ChangeEvent]) -> TransformContractReport:
    """Run every event through the transform as the runtime does and check
    :class:`~cdcflow.contract.Transform`'s promises.

    ``apply`` does not mutate its input and gives the same answer twice; the event it returns
    carries the schema ``transform_schema`` states for the input's (the runtime's
    ``transform_event``), whose columns cover every column the event carries; the key keeps the
    key columns that schema names; ``transform_schema`` answers the same for the same input.
    """
    report = TransformContractReport(events=len(events))
    for event in events:
        pristine = copy.deepcopy(event)
        first = transform.apply(event)
        if event != pristine:
            raise _violation(transform, f"apply mutated its input: {pristine!r} became {event!r}")
        if first != transform.apply(copy.deepcopy(pristine)):
            raise _violation(transform, f"apply gave two answers for {pristine!r}")
        try:
            result = transform.transform_event(copy.deepcopy(pristine))
        except TransformError as exc:
            raise _violation(transform, f"its output does not fit the schema it states: {exc}") from exc
        if result is None:
            report.dropped += 1
            continue
        report.kept += 1
        if pristine.schema is not None and result.schema is not None:
            stated = transform.transform_schema(pristine.schema, pristine.source)
            if stated.fingerprint != transform.transform_schema(pristine.schema, pristine.source).fingerprint:
                raise _violation(transform, "transform_schema gave two answers for one schema and table")
            if result.schema.fingerprint != stated.fingerprint:
                raise _violation(transform, "the event apply returned carries another schema than it states")
            _check_key(transform, pristine, result, pristine.schema, stated)
    return report


def _check_key(
    transform: Transform[Any], event: ChangeEvent, result: ChangeEvent, schema: RowSchema, stated: RowSchema
) -> None:
    had = {c.name for c in schema.key_columns}
    if not had <= set(event.key):
        return  # the input lacked key columns: nothing to keep
    wanted = {c.name for c in stated.key_columns}
    if not wanted <= set(result.key):
        missing = sorted(wanted - set(result.key))
        raise _violation(transform, f"the key lost column(s) {missing} that transform_schema keeps as key columns")


@dataclass
class ConverterContractReport:
    records: int = 0
    tombstones: int = 0


def check_converter_contract(
    converter: Converter[Any], events: Sequence[ChangeEvent], destination: str = "cdcflow.test"
) -> ConverterContractReport:
    """Serialize every event and check :class:`~cdcflow.contract.Converter`'s promises.

    Keys and values are bytes, the same bytes twice; a value is None (a tombstone) only for a
    delete; ``deserialize`` reads the converter's own output back: the key to the event's key, an
    envelope to its ``op``, ``before`` and ``after``, an unwrapped value to its row. Give events
    whose values the converter can carry exactly (``schemas_enable: false`` JSON, for instance,
    cannot tell a decimal from a float).
    """
    report = ConverterContractReport(records=len(events))
    for event in events:
        key = converter.serialize_key(event, destination)
        value = converter.serialize_value(event, destination)
        if key != converter.serialize_key(event, destination) or value != converter.serialize_value(event, destination):
            raise _violation(converter, f"serialized {event!r} to different bytes twice")
        for part, data in (("key", key), ("value", value)):
            if data is not None and not isinstance(data, bytes):
                raise _violation(converter, f"serialize_{part} returned {type(data).__name__}, not bytes or None")
        if key is not None:
            _require_read_back(converter, "key", converter.deserialize(destination, key), event.key, event)
        if value is None:
            if event.op is not Op.DELETE:
                raise _violation(converter, f"serialize_value gave a tombstone (None) for a {event.op.name} event")
            report.tombstones += 1
            continue
        read = converter.deserialize(destination, value)
        if event.envelope:
            for name, expected in (("op", event.op.value), ("before", event.before), ("after", event.after)):
                _require_read_back(converter, f"value's {name}", read.get(name), expected, event)
        else:
            _require_read_back(converter, "unwrapped value", read, event.after, event)
    return report


def _require_read_back(converter: Converter[Any], part: str, found: Any, expected: Any, event: ChangeEvent) -> None:
    if found != expected:
        raise _violation(converter, f"deserialize read the {part} back as {found!r}, not {expected!r} ({event!r})")
