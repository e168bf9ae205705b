"""Compact batches (cdcflow.batches): events the compiled core builds and encodes without Python
objects are exactly the events and bytes of the per-record path.

* datagen's compiled generator gives, batch by batch, the events ``read`` gives (random configs);
* a batch's Avro messages are, byte for byte, fastavro's encoding of each event's key and
  envelope, each delete followed by its tombstone;
* ``route`` on a batch routes as it routes each event; an event that does not fit its schema
  makes the batch decline, so the per-record path can reject just that one;
* the delivery loop takes batches only when every stage has a batch form, and a stage that
  declines a batch still delivers its events once, in order.

Skipped when the compiled core is not built (or CDCFLOW_PURE_PYTHON=1).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdcflow._avro_writer import logical_type_preparers
from cdcflow.batches import EventBatch
from cdcflow.config import parse_pipeline
from cdcflow.contract import PluginConfig, PluginContext, Rejected, Sink
from cdcflow.converters import JsonConverter, JsonConverterConfig
from cdcflow.events import ChangeEvent, Op, Record
from cdcflow.native import native_module
from cdcflow.pipeline import build_runner
from cdcflow.plugins import PluginRegistry
from cdcflow.schemas import avro_key_schema, avro_value_schema
from cdcflow.sources.datagen import DatagenConfig, DatagenSource
from cdcflow.transforms import RouteConfig, RouteTransform

NATIVE = native_module()
pytestmark = pytest.mark.skipif(NATIVE is None, reason="the compiled core (cdcflow._native) is not built")

CONTEXT = PluginContext("compact", Path("compact.yaml"))

_CONFIGS = st.fixed_dictionaries(
    {
        "count": st.integers(0, 400),
        "partitions": st.integers(1, 5),
        "tables": st.integers(1, 4),
        "keys": st.integers(1, 5000),
        "event_size": st.integers(0, 64),
        "seed": st.integers(0, 2**63),
        "op_mix": st.dictionaries(st.sampled_from(["c", "u", "d"]), st.floats(0.01, 5), min_size=1),
        "rate": st.one_of(st.none(), st.floats(1, 1e6)),
    }
)


def _source(config: dict[str, Any]) -> DatagenSource:
    return DatagenSource(DatagenConfig.model_validate({"type": "datagen", **config}), CONTEXT, clock=lambda: 1.7e9)


def _both_ways(source: DatagenSource, max_records: int, batch_size: int) -> tuple[list[Record], list[EventBatch]]:
    read: list[Record] = []
    batches: list[EventBatch] = []
    for partition in source.partitions():
        start = source.initial_offset(partition)
        end = source.latest_offset(partition, start, max_records)
        if end == start:
            continue
        read.extend(r for r in source.read(partition, start, end) if not isinstance(r, Rejected))
        compact = source.read_event_batches(partition, start, end, batch_size)
        assert compact is not None
        batches.extend(compact)
    return read, batches


@settings(max_examples=60, deadline=None)
@given(config=_CONFIGS, max_records=st.integers(1, 300), batch_size=st.integers(1, 97))
def test_compact_batches_hold_exactly_the_events_read_gives(
    config: dict[str, Any], max_records: int, batch_size: int
) -> None:
    read, batches = _both_ways(_source(config), max_records, batch_size)
    assert all(0 < len(b) <= batch_size for b in batches)
    built = [event for batch in batches for event in batch.records()]
    for event in built:
        event.ts_ms = 0  # the wall-clock time an event was made, not part of its content
    for event in read:
        assert isinstance(event, ChangeEvent)
        event.ts_ms = 0
    assert built == read


def _fastavro(schema: Any, datum: Any) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), datum)
    return out.getvalue()


def _plans(batch: EventBatch, value_schema: Any = None) -> list[Any]:
    assert NATIVE is not None
    plans: list[Any] = []
    for index, table in enumerate(batch.tables):
        first = batch.first_of_table(index)
        if first is None:
            plans.append(None)
            continue
        sample = batch.record(first)
        key_prefix, value_prefix = bytes([0, 0, 0, 1, index]), bytes([0, 0, 0, 2, index])
        plans.append(
            (
                NATIVE.AvroWriter(avro_key_schema(sample), logical_type_preparers(), rows=True),
                key_prefix,
                NATIVE.AvroWriter(value_schema or avro_value_schema(sample), logical_type_preparers(), rows=True),
                value_prefix,
                (table.version, table.system, table.cluster, table.keyspace, table.table),
                (),  # no column rewritten
                (),
            )
        )
    return plans


@settings(max_examples=25, deadline=None)
@given(config=_CONFIGS, tombstones=st.booleans())
def test_compact_avro_messages_are_what_fastavro_writes_for_each_event(
    config: dict[str, Any], tombstones: bool
) -> None:
    _, batches = _both_ways(_source({**config, "count": 200}), 100, 64)
    for batch in batches:
        tables, events, keys, values, headers = batch.events.encode_avro(_plans(batch), tombstones)
        assert headers == [None] * len(keys)  # datagen's events have none
        expected: list[tuple[int, int, bytes, bytes | None]] = []
        for index, event in enumerate(batch.records()):
            table = batch.tables.index(next(t for t in batch.tables if t.table == event.source.table))
            key = bytes([0, 0, 0, 1, table]) + _fastavro(avro_key_schema(event), event.key_payload())
            value = bytes([0, 0, 0, 2, table]) + _fastavro(avro_value_schema(event), event.value_payload())
            expected.append((table, index, key, value))
            if tombstones and event.op is Op.DELETE:
                expected.append((table, index, key, None))
        assert list(zip(tables, events, keys, values, strict=True)) == expected


@settings(max_examples=25, deadline=None)
@given(config=_CONFIGS, tombstones=st.booleans(), schemas_enable=st.booleans())
def test_compact_json_messages_are_what_the_json_converter_writes_for_each_event(
    config: dict[str, Any], tombstones: bool, schemas_enable: bool
) -> None:
    converter = JsonConverter(
        JsonConverterConfig.model_validate({"type": "json", "schemas_enable": schemas_enable}), CONTEXT
    )
    _, batches = _both_ways(_source({**config, "count": 200, "event_size": 24}), 100, 64)
    for batch in batches:
        encoded = converter.serialize_event_batch(batch, [t.destination() for t in batch.tables], tombstones)
        assert encoded is not None
        expected: list[tuple[int, bytes | None, bytes | None]] = []
        for index, event in enumerate(batch.records()):
            key, value = converter.serialize_key(event, "t"), converter.serialize_value(event, "t")
            expected.append((index, key, value))
            if tombstones and event.op is Op.DELETE:
                expected.append((index, key, None))
        assert list(zip(encoded.events, encoded.keys, encoded.values, strict=True)) == expected


def test_an_event_that_does_not_fit_its_schema_makes_the_batch_decline() -> None:
    _, batches = _both_ways(_source({"count": 50, "partitions": 1, "tables": 1}), 50, 50)
    (batch,) = batches
    sample = batch.record(0)
    schema = avro_value_schema(sample)
    value = next(f["type"] for f in schema["fields"] if f["name"] == "before")[1]
    for column in value["fields"]:
        if column["name"] == "amount":
            column["type"] = ["null", "long"]  # a double does not fit a long
    with pytest.raises(ValueError, match="does not write"):
        batch.events.encode_avro(_plans(batch, schema), False)


def test_route_on_a_batch_routes_as_on_each_event() -> None:
    route = RouteTransform(
        RouteConfig.model_validate({"type": "route", "regex": r"(.*)\.table_(\d)", "replacement": "t$2.$1"}), CONTEXT
    )
    _, batches = _both_ways(_source({"count": 100, "tables": 3}), 100, 100)
    for batch in batches:
        routed = route.apply_to_event_batch(batch)
        assert [e.destination() for e in routed.records()] == [
            route.apply(e).destination()
            for e in batch.records()  # type: ignore[union-attr]
        ]
        assert {e.destination() for e in routed.records()} <= {f"t{i}.datagen.shop" for i in range(3)}


# --- the delivery loop ------------------------------------------------------------------------------


class BatchSinkConfig(PluginConfig):
    decline_every: int = 2  # 1: declines every batch


class BatchSink(Sink[BatchSinkConfig]):
    """Declines every ``decline_every``-th batch and takes the rest as batches; keeps what reached
    it and how, and how many batches it was offered."""

    type_name = "batch-recording"
    config_model = BatchSinkConfig
    delivered: ClassVar[list[tuple[str, Record]]] = []
    offered_in_all: ClassVar[int] = 0

    def __init__(self, config: BatchSinkConfig, context: PluginContext) -> None:
        super().__init__(config, context)
        self.offered = 0

    def write(self, records: Sequence[Record]) -> list[Rejected]:
        self.delivered.extend(("records", r) for r in records)
        return []

    def write_event_batch(self, batch: EventBatch) -> list[Rejected] | None:
        self.offered += 1
        type(self).offered_in_all += 1
        if self.offered % self.config.decline_every == 0:
            return None
        self.delivered.extend(("batch", r) for r in batch.records())
        return []

    def flush(self) -> list[Rejected]:
        return []


def _run(tmp_path: Path, transforms: list[dict[str, Any]], decline_every: int = 2) -> list[tuple[str, Record]]:
    registry = PluginRegistry.from_entry_points()
    registry.register(SimpleNamespace(cdcflow_sink_types=lambda: [BatchSink]), "tests")
    BatchSink.delivered = []
    BatchSink.offered_in_all = 0
    data = {
        "name": "compact",
        "source": {"type": "datagen", "count": 1000, "partitions": 2, "event_size": 8},
        "transforms": transforms,
        "sink": {"type": "batch-recording", "decline_every": decline_every},
        "checkpoint": {"type": "file", "path": str(tmp_path / "ckpt"), "interval_ms": 1},
        "engine": {"max_records_per_read": 150, "batch_size": 40, "poll_interval_ms": 1},
    }
    build_runner(parse_pipeline(data, tmp_path / "p.yaml", registry), registry).run()
    return BatchSink.delivered


def test_batches_a_stage_declines_still_arrive_once_and_in_order(tmp_path: Path) -> None:
    delivered = _run(tmp_path, [{"type": "route", "regex": "(.*)", "replacement": "x.$1"}])
    ways = {way for way, _ in delivered}
    assert ways == {"batch", "records"}
    seqs = [
        r.source.position["seq"]
        for _, r in delivered
        if isinstance(r, ChangeEvent) and r.source.partition == "datagen-0"
    ]
    assert seqs == list(range(1, 501))
    ids = sorted(r.after["seq"] if r.after else r.before["seq"] for _, r in delivered if isinstance(r, ChangeEvent))  # type: ignore[index]
    assert ids == list(range(1000))
    assert {r.destination() for _, r in delivered}.issubset({f"x.datagen.shop.table_{i}" for i in range(3)})


def test_a_transform_without_a_batch_form_gets_every_event_as_an_object(tmp_path: Path) -> None:
    delivered = _run(tmp_path, [{"type": "filter", "tables": ["table_1"]}])
    assert delivered and {way for way, _ in delivered} == {"records"}


def test_a_sink_that_keeps_declining_gets_records_read_directly(tmp_path: Path) -> None:
    delivered = _run(tmp_path, [], decline_every=1)
    assert BatchSink.offered_in_all == 3  # then the runner stops building batches it would unpack
    assert {way for way, _ in delivered} == {"records"}
    ids = sorted(r.after["seq"] if r.after else r.before["seq"] for _, r in delivered if isinstance(r, ChangeEvent))  # type: ignore[index]
    assert ids == list(range(1000))
