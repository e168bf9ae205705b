"""Compact commit-log batches give exactly the events (and Kafka messages) the source's ``read``
gives: random tables of every CQL type and random mutations of them (tests/commitlog_writer.py),
and the real segments of tests/fixtures/commitlog.

What a compact batch holds is checked against ``changes.change_event`` over the compiled
decoder's row changes (held equal to the reference's by test_compiled_commitlog.py); what the
converters write for a batch against what they write for each of those events. Collections,
user types, tuples and decimals travel compact (each test counts how many events held them); a
mutation the compact form does not carry (a cell of a dropped column) must be declined, never
written differently. Skipped when the compiled core is not built (or CDCFLOW_PURE_PYTHON=1).
"""

from __future__ import annotations

import json
import struct
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdcflow.batches import BatchTable, EventBatch
from cdcflow.contract import PluginContext
from cdcflow.converters import AvroConverter, AvroConverterConfig, JsonConverter, JsonConverterConfig
from cdcflow.errors import ConverterError
from cdcflow.events import ChangeEvent, Op
from cdcflow.native import native_module
from cdcflow.sources.cassandra_commitlog.changes import VERSION, change_event
from cdcflow.sources.cassandra_commitlog.schema import SchemaCatalog, TableSchema
from cdcflow.sources.cassandra_commitlog.segment import Entry, Section, read_entries
from tests.commitlog_writer import catalogs, mutations
from tests.paths import COMMITLOG_FIXTURES

NATIVE = native_module()
pytestmark = pytest.mark.skipif(NATIVE is None, reason="the compiled core (cdcflow._native) is not built")

if NATIVE is not None:
    from cdcflow.sources.cassandra_commitlog.compiled import CompactInto, CompiledDecoder

FORMATS = sorted(p.name for p in COMMITLOG_FIXTURES.iterdir() if (p / "schema.json").exists())
CONTEXT = PluginContext("compact", Path("compact.yaml"))
CLUSTER, NODE, SEGMENT, NOW_MS = "c1", "node-1", 7, 1_795_000_000_000
BASE = 1000  # the section's logical start: positions are offsets past it


def _not_schema(table: TableSchema) -> bool:
    return table.keyspace != "system_schema"  # as the source: schema updates are the reference's


def _framed(mutation: bytes) -> bytes:
    """The mutation framed as Cassandra frames a sync section's entries (size, its CRC, the
    mutation, the CRC of both)."""
    size = struct.pack(">i", len(mutation))
    size_crc = zlib.crc32(size)
    return size + struct.pack(">I", size_crc) + mutation + struct.pack(">I", zlib.crc32(mutation, size_crc))


Emits = Callable[[str, bytes], bool]


def _reference_events(decoder: Any, mutation: bytes, position: int, emits: Emits | None) -> list[ChangeEvent] | None:
    """The events ``read`` gives for the entry (None: the compiled decoder declines it), leaving
    out the partition updates ``emits`` (a replica filter) says no to."""
    updates = decoder.decode(mutation)
    if updates is None:
        return None
    events, index = [], 0
    for table, key, changes in updates:
        if emits is not None and not emits(table.keyspace, key):
            continue
        for change in changes:
            schema = table.row_schema(CLUSTER)
            events.append(change_event(change, schema, CLUSTER, NODE, SEGMENT, position, index, NOW_MS))
            index += 1
    return events


def _batch(builder: Any) -> EventBatch:
    events = builder.take(NODE, NOW_MS)
    tables = [
        BatchTable(t.row_schema(CLUSTER), "cassandra", CLUSTER, t.keyspace, t.table, version=VERSION)
        for t in builder.tables()
    ]
    return EventBatch(events, tables)


def _compact_and_reference(
    catalog: SchemaCatalog, mutation_list: list[bytes], emits: Emits | None = None
) -> tuple[EventBatch, list[Any], list[tuple[bytes, str | None]]]:
    """The entries the compact form takes, as one batch, with the reference's events for them;
    and the mutations it declined."""
    decoder = CompiledDecoder(catalog, _not_schema, NATIVE)
    builder = NATIVE.CompactBatchBuilder()
    expected: list[Any] = []
    declined: list[tuple[bytes, str | None]] = []
    base = BASE
    for mutation in mutation_list:
        # A section each, one after the other, so that each is taken or refused on its own.
        framed = _framed(mutation)
        section = Section(0, len(framed), base, framed)
        outcome, _ = decoder.section_into(section, base - 1, CompactInto(builder, SEGMENT, None, emits))
        base += len(framed)
        reference = _reference_events(decoder, mutation, outcome.end, emits)
        if outcome.refused is None:
            assert reference is not None, "compact changes for a mutation the compiled decoder declines"
            expected.extend(reference)
        else:
            declined.append((mutation, outcome.refused))
    return _batch(builder), expected, declined


def _same_events(got: list[ChangeEvent], expected: list[ChangeEvent]) -> None:
    # repr: every field, values with their types (1 is not 1.0 nor True), dicts in their order;
    # but a position's keys in sorted order on both sides: it travels as canonical JSON text
    # (SourceInfo.position_text), and a batch holds it so.
    def comparable(event: ChangeEvent) -> str:
        source = replace(event.source, position=dict(sorted(event.source.position.items())))
        return repr(event.with_changes(source=source))

    assert len(got) == len(expected)
    for index, (event, reference) in enumerate(zip(got, expected, strict=True)):
        assert comparable(event) == comparable(reference), f"event {index}"


# Why the compact form declines a mutation the compiled decoder decodes (mutation.rs): changes
# whose rows or headers only the reference writes.
NOT_CARRIED = {
    "a cell of a dropped column",
    "a column name json.dumps would escape",
}


def _composites(value: Any) -> Counter[str]:
    """What kinds of composite values (and decimals) ``value`` holds, nested ones too."""
    found: Counter[str] = Counter()
    if isinstance(value, list):
        found["list"] += 1
        for item in value:
            found += _composites(item)
    elif isinstance(value, dict):
        found["dict"] += 1
        for key, item in value.items():
            found += _composites(key) + _composites(item)
    elif isinstance(value, Decimal):
        found["decimal"] += 1
    return found


def _count_carried(events: list[ChangeEvent], seen: Counter[str]) -> None:
    """Counts the events a compact batch carried whose values or headers the compact path used
    to hand back to the reference: collections, user types and tuples (lists, dicts), decimals,
    multi-cell columns (replaced or removed elements), range deletions."""
    for event in events:
        kinds = _composites(list((event.after or {}).values()))
        seen["events with lists"] += kinds["list"] > 1  # the row's values are one list
        seen["events with dicts"] += kinds["dict"] > 0
        seen["events with decimals"] += kinds["decimal"] > 0
        headers = event.headers or {}
        for header in ("cdc.replaced", "cdc.removed", "cdc.range"):
            seen[f"events with {header}"] += header in headers


def _declines_only_what_it_does_not_carry(catalog: SchemaCatalog, mutation: bytes, reason: str | None) -> None:
    """A mutation the compact form declines is one the compiled decoder declines too, or one
    with a change compact rows do not carry."""
    if CompiledDecoder(catalog, _not_schema, NATIVE).decode(mutation) is not None:
        assert reason in NOT_CARRIED, f"declined a mutation compact rows carry: {reason}"


_PROPERTY = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large]}


def test_compact_batches_of_random_mutations_hold_the_events_read_gives() -> None:
    # What the examples compared: an example whose mutations all decline compares no event.
    seen: Counter[str] = Counter()

    @settings(max_examples=150, **_PROPERTY)
    @given(data=st.data(), catalog=catalogs())
    def hold_the_events_read_gives(data: st.DataObject, catalog: SchemaCatalog) -> None:
        mutation_list = data.draw(st.lists(mutations(catalog), min_size=1, max_size=4))
        # A replica filter (replicas: primary) keeps some partition updates and leaves out the rest.
        emits = data.draw(st.sampled_from([None, lambda keyspace, key: len(key) % 2 == 0]))
        batch, expected, declined = _compact_and_reference(catalog, mutation_list, emits)
        _same_events(batch.records(), expected)
        _same_events([batch.record(i) for i in range(len(batch))], expected)
        for mutation, reason in declined:
            _declines_only_what_it_does_not_carry(catalog, mutation, reason)
        seen["examples with events"] += bool(expected)
        seen["events"] += len(expected)
        seen["mutations declined"] += len(declined)
        _count_carried(expected, seen)

    hold_the_events_read_gives()
    # Of 150 examples, a run had events in 80 (433 events) and declined 32 mutations (most of
    # them the compiled decoder's own declines); 299 events held lists, 240 dicts, 56 replaced
    # and 47 removed elements of multi-cell columns (compact rows carried none before).
    assert seen["examples with events"] >= 30 and seen["events"] >= 150, seen
    assert seen["events with lists"] >= 30 and seen["events with dicts"] >= 30, seen
    assert seen["events with cdc.replaced"] >= 3 and seen["events with cdc.removed"] >= 3, seen


def _accounts_catalog() -> SchemaCatalog:
    """benchmarks/debezium_peer.py's accounts table (collections of decimals, a static column, a
    frozen user type holding a decimal) with a multi-cell user type and a tuple beside it."""
    columns = [
        ["account_id", "partition_key", 0, "uuid"],
        ["entry", "clustering", 0, "int"],
        ["owner", "static", -1, "text"],
        ["balance", "regular", -1, "decimal"],
        ["fees", "regular", -1, "list<decimal>"],
        ["limits", "regular", -1, "map<text, decimal>"],
        ["tags", "regular", -1, "set<text>"],
        ["counts", "regular", -1, "map<text, int>"],
        ["address", "regular", -1, "frozen<address>"],
        ["home", "regular", -1, "address"],
        ["spot", "regular", -1, "frozen<tuple<int, decimal, text>>"],
        ["history", "regular", -1, "frozen<map<bigint, frozen<list<decimal>>>>"],
        ["updated_at", "regular", -1, "timestamp"],
        ["note", "regular", -1, "text"],
    ]
    table = {"id": "0f0e0d0c-0b0a-0908-0706-050403020100", "keyspace": "ks", "table": "accounts"}
    types = {"ks": {"address": [["street", "city", "zip", "deposit"], ["text", "text", "int", "decimal"]]}}
    return SchemaCatalog.from_description(
        {"tables": [{**table, "cdc": True, "columns": columns, "dropped": []}], "types": types}
    )


def test_compact_batches_of_collections_user_types_and_decimals_hold_the_events_read_gives() -> None:
    """The accounts table's mutations (random, of every shape the commit log holds) travel in
    compact batches, their composite values and decimals decoded by the compiled core, and
    give the events and each converter's messages that read gives."""
    catalog = _accounts_catalog()
    seen: Counter[str] = Counter()

    @settings(max_examples=60, **_PROPERTY)
    @given(data=st.data(), tombstones=st.booleans())
    def hold_the_events_read_gives(data: st.DataObject, tombstones: bool) -> None:
        mutation_list = data.draw(st.lists(mutations(catalog), min_size=1, max_size=3))
        batch, expected, declined = _compact_and_reference(catalog, mutation_list)
        _same_events(batch.records(), expected)
        for mutation, reason in declined:
            _declines_only_what_it_does_not_carry(catalog, mutation, reason)
        for converter in CONVERTERS:
            seen["messages"] += max(_assert_messages_as_per_event(converter, batch, tombstones), 0)
        seen["events"] += len(expected)
        seen["mutations"] += len(mutation_list)
        seen["mutations declined"] += len(declined)
        _count_carried(expected, seen)

    hold_the_events_read_gives()
    # Of 25 runs of 60 examples: 163-424 events (median 264) of 73-127 mutations, none declined;
    # at least 41 with lists, 63 with dicts, 54 with decimals, 20 replacing and 23 removing
    # elements; 557-1,368 messages. The bounds are about half the least a run had.
    assert seen["events"] >= 80 and seen["mutations declined"] * 5 <= seen["mutations"], seen
    assert seen["events with lists"] >= 20 and seen["events with dicts"] >= 30, seen
    assert seen["events with decimals"] >= 25 and seen["messages"] >= 280, seen
    assert seen["events with cdc.replaced"] >= 10 and seen["events with cdc.removed"] >= 10, seen


class _Registry:
    """Schema ids for the Avro converter: the registry is not what is tested here (the
    integration tests run the real one); what the converter writes for each event is."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def register(self, subject: str, schema: Any) -> int:
        return self.ids.setdefault(subject, len(self.ids) + 1)


def _converters() -> list[Any]:
    converters: list[Any] = []
    for decimal_handling in ("precise", "double", "string"):
        for schemas_enable in (True, False):
            config = {"type": "json", "schemas_enable": schemas_enable, "decimal_handling": decimal_handling}
            converters.append(JsonConverter(JsonConverterConfig.model_validate(config), CONTEXT))
        avro = AvroConverter(
            AvroConverterConfig.model_validate(
                {"type": "avro", "schema_registry_url": "http://registry.invalid", "decimal_handling": decimal_handling}
            ),
            CONTEXT,
        )
        avro._registry = _Registry()  # type: ignore[assignment]
        converters.append(avro)
    return converters


CONVERTERS = _converters() if NATIVE is not None else []


def _assert_messages_as_per_event(converter: Any, batch: EventBatch, tombstones: bool) -> int:
    """Asserts the batch's messages are what the converter writes for each of its events: how
    many messages that is, or -1 when it rejects an event and the batch declined."""
    destinations = [t.destination() for t in batch.tables]
    expected: list[tuple[Any, ...]] = []
    for index, event in enumerate(batch.records()):
        try:
            key = converter.serialize_key(event, event.destination())
            value = converter.serialize_value(event, event.destination())
        except ConverterError:
            # An event the converter rejects: the batch must then decline, so that it is rejected alone.
            assert converter.serialize_event_batch(batch, destinations, tombstones) is None
            return -1
        headers = list(event.headers.items()) if event.headers else None
        expected.append((destinations.index(event.destination()), index, key, value, headers))
        if tombstones and event.op is Op.DELETE and event.key:
            expected.append((destinations.index(event.destination()), index, key, None, None))
    encoded = converter.serialize_event_batch(batch, destinations, tombstones)
    assert encoded is not None, f"{type(converter).__name__} declined a batch whose every event it writes"
    assert list(zip(*encoded, strict=True)) == expected
    return len(expected)


def test_compact_commitlog_messages_are_what_each_converter_writes_for_each_event() -> None:
    # What the examples compared: an empty batch (every mutation declined) compares nothing.
    seen: Counter[str] = Counter()

    @settings(max_examples=100, **_PROPERTY)
    @given(data=st.data(), catalog=catalogs(), tombstones=st.booleans())
    def as_each_converter_writes_each_event(data: st.DataObject, catalog: SchemaCatalog, tombstones: bool) -> None:
        mutation_list = data.draw(st.lists(mutations(catalog), min_size=1, max_size=4))
        batch, _, _ = _compact_and_reference(catalog, mutation_list)
        seen["batches with events" if len(batch) else "empty batches"] += 1
        _count_carried(batch.records(), seen)
        for converter in CONVERTERS:
            messages = _assert_messages_as_per_event(converter, batch, tombstones)
            seen["batches written"] += messages > 0
            seen["messages"] += max(messages, 0)
            seen["batches rejected"] += messages < 0

    as_each_converter_writes_each_event()
    # Of 100 examples, a run had 47 batches with events, which the 9 converters wrote 342 times
    # (744 messages) and rejected 81 times; their events held 66 lists, 72 dicts, 22 replaced and
    # 19 removed elements of multi-cell columns.
    assert seen["batches with events"] >= 10 and seen["batches written"] >= 50 and seen["messages"] >= 100, seen
    assert seen["events with lists"] >= 10 and seen["events with dicts"] >= 10, seen
    assert seen["events with cdc.replaced"] >= 3 and seen["events with cdc.removed"] >= 3, seen


@pytest.mark.parametrize("name", FORMATS)
def test_the_segments_cassandra_wrote_give_the_same_events_compact(name: str) -> None:
    [segment] = sorted((COMMITLOG_FIXTURES / name).glob("CommitLog-*.log"))
    catalog = SchemaCatalog.load(COMMITLOG_FIXTURES / name / "schema.json")
    mutation_list = [e.mutation for e in read_entries(segment.read_bytes()) if isinstance(e, Entry)]
    batch, expected, declined = _compact_and_reference(catalog, mutation_list)
    assert len(batch) > 0, "the real segments' plain writes travel compact"
    _same_events(batch.records(), expected)
    for converter in CONVERTERS:
        _assert_messages_as_per_event(converter, batch, True)
    for mutation, reason in declined:
        _declines_only_what_it_does_not_carry(catalog, mutation, reason)
    assert len(declined) < len(mutation_list)


def _plain_writes(catalog: SchemaCatalog) -> list[tuple[str, bytes]]:
    """The mutations of the v8 fixture's segment that compact batches carry, each with the id of
    its (first) table."""
    [segment] = sorted((COMMITLOG_FIXTURES / "v8").glob("CommitLog-*.log"))
    carried = []
    for entry in read_entries(segment.read_bytes()):
        if not isinstance(entry, Entry):
            continue
        updates = CompiledDecoder(catalog, _not_schema, NATIVE).decode(entry.mutation)
        if updates and not _compact_and_reference(catalog, [entry.mutation])[2]:
            carried.append((updates[0][0].table_id, entry.mutation))
    return carried


def test_a_section_is_taken_from_after_up_to_up_to_until_an_entry_compact_rows_do_not_carry() -> None:
    """decode_section_into takes the entries of the range in one call: those ending past ``after``,
    none past ``up_to`` (and says it reached it), and stops at a corrupt entry, saying why and
    where, with the batch holding exactly the events read gives for the entries before it."""
    catalog = SchemaCatalog.load(COMMITLOG_FIXTURES / "v8" / "schema.json")
    first, second, third, fourth, fifth = [mutation for _, mutation in _plain_writes(catalog)[:5]]
    corrupt = bytearray(_framed(fourth))
    corrupt[-1] ^= 0xFF  # the entry's data CRC
    frames = [_framed(first), _framed(second), _framed(third), bytes(corrupt), _framed(fifth)]
    ends = [BASE + sum(len(f) for f in frames[: i + 1]) for i in range(len(frames))]
    payload = b"".join(frames)

    def into_batch(after: int, up_to: int | None) -> tuple[Any, EventBatch]:
        builder = NATIVE.CompactBatchBuilder()
        decoder = CompiledDecoder(catalog, _not_schema, NATIVE)
        outcome, _ = decoder.section_into(
            Section(0, len(payload), BASE, payload), after, CompactInto(builder, SEGMENT, up_to)
        )
        return outcome, _batch(builder)

    def read_gives(*taken: int) -> list[ChangeEvent]:
        decoder = CompiledDecoder(catalog, _not_schema, NATIVE)
        mutations = [first, second, third, fourth, fifth]
        return [e for i in taken for e in _reference_events(decoder, mutations[i], ends[i], None) or []]

    outcome, batch = into_batch(ends[0], None)
    assert (outcome.refused, outcome.end, outcome.reached_up_to) == ("entry data CRC does not match", ends[3], False)
    _same_events(batch.records(), read_gives(1, 2))

    outcome, batch = into_batch(ends[0], ends[2])
    assert (outcome.refused, outcome.end, outcome.reached_up_to) == (None, ends[2], True)
    _same_events(batch.records(), read_gives(1, 2))

    outcome, batch = into_batch(BASE - 1, ends[1])
    assert (outcome.refused, outcome.end, outcome.reached_up_to) == (None, ends[1], True)
    _same_events(batch.records(), read_gives(0, 1))


def test_mutations_of_a_table_the_source_found_dropped_are_skipped_whole_and_counted() -> None:
    """A table the schema no longer knows refuses the section (the source's read then decides:
    a schema refresh, or a dropped table), unless the source found it dropped: then its
    mutations are skipped, as read skips them, and the rest of the section is taken."""
    description = json.loads((COMMITLOG_FIXTURES / "v8" / "schema.json").read_text())
    writes = _plain_writes(SchemaCatalog.from_description(description))
    gone_table, gone = writes[0]
    kept = next(mutation for table_id, mutation in writes if table_id != gone_table)
    tables = [t for t in description["tables"] if t["id"] != gone_table]
    catalog = SchemaCatalog.from_description({**description, "tables": tables})
    payload = _framed(gone) + _framed(kept)
    section = Section(0, len(payload), BASE, payload)

    builder = NATIVE.CompactBatchBuilder()
    decoder = CompiledDecoder(catalog, _not_schema, NATIVE)
    outcome, _ = decoder.section_into(section, BASE - 1, CompactInto(builder, SEGMENT))
    assert (outcome.refused, outcome.dropped, len(builder)) == ("unknown table", 0, 0)

    builder = NATIVE.CompactBatchBuilder()
    decoder = CompiledDecoder(catalog, _not_schema, NATIVE, dropped={gone_table})
    outcome, _ = decoder.section_into(section, BASE - 1, CompactInto(builder, SEGMENT))
    assert (outcome.refused, outcome.dropped) == (None, 1)
    reference = _reference_events(CompiledDecoder(catalog, _not_schema, NATIVE), kept, BASE + len(payload), None)
    _same_events(_batch(builder).records(), reference or [])


def test_a_decimal_beyond_a_doubles_range_makes_the_double_converters_batch_decline() -> None:
    # balance = 1E+400 (unscaled 1, scale -400): the compiled core holds it, and as a double it
    # would be Infinity. Under decimal_handling: double the converter refuses the event; the batch
    # must then decline (so that the event is rejected alone), not write Infinity.
    from tests.commitlog_writer import CellSpec, RowSpec, UpdateSpec, mutation_bytes

    catalog = _accounts_catalog()
    table = next(iter(catalog.tables.values()))
    balance = table.column("balance")
    assert balance is not None
    row = RowSpec(
        clustering=[struct.pack(">i", 1)],
        timestamp=1_795_000_000_000_000,
        cells=[CellSpec(balance, struct.pack(">i", -400) + b"\x01")],
        columns=[balance],
    )
    mutation = mutation_bytes([UpdateSpec(table, bytes(range(16)), items=[row])])
    batch, expected, declined = _compact_and_reference(catalog, [mutation])
    assert declined == [] and len(expected) == 1 and expected[0].after["balance"] == Decimal("1E+400")
    double = JsonConverter(JsonConverterConfig.model_validate({"type": "json", "decimal_handling": "double"}), CONTEXT)
    assert _assert_messages_as_per_event(double, batch, tombstones=False) == -1
    precise = JsonConverter(JsonConverterConfig.model_validate({"type": "json"}), CONTEXT)
    assert _assert_messages_as_per_event(precise, batch, tombstones=False) == 1
