"""The scylla_cdc source against an oracle no one here wrote: ScyllaDB's Rust CDC library.

``scylla-cdc`` 0.7.0 (crates.io, ScyllaDB's reference consumer, on the ``scylla`` driver) and
cdcflow's ``scylla_cdc`` source read the same CDC log tables, which the ScyllaDB stand-in writer
(``tests/standins/scylla``) fills in the real Cassandra node for base writes this test makes
through it (one per CQL statement or batch: inserts, updates, column, row, range and partition
deletions, ScyllaDB's own expirations, every native type, statics, collections, user types, TTLs,
pre- and post-images, ``delta: keys``, a generation switch and a tablet split). Each change one reports is compared with
what the other reports: stream, time, order in the stream, operation, key, values written and
nulled, removed elements, TTLs, range bounds and both images. The expected side is always the
oracle's output; nothing is taken from cdcflow's or the writer's functions.

The oracle is ``tests/oracles/scylla_cdc`` (our ``main.rs`` printing every ``CDCRow`` the crate's
consumer API delivers as a JSON line), built once and cached by ``tests/oracles/scylla_cdc/build.py``
(skipped without cargo). The crate hard-codes ScyllaDB's metadata tables
(``stream_generations.rs:123-124, 289-290``: ``system_distributed.cdc_generation_timestamps``,
``system_distributed.cdc_streams_descriptions_v2``, ``system.cdc_timestamps``, ``system.cdc_streams``;
``log_reader.rs``: ``system_schema.scylla_keyspaces``), which Cassandra refuses to create, and
reads the log with ScyllaDB's ``BYPASS CACHE``, which Cassandra's CQL refuses: the build rewrites
exactly those strings, in its copy of the crate fetched from crates.io, to unqualified table names
(found in the keyspace the oracle is told to ``USE``, where the writer put them) and drops
``BYPASS CACHE`` (a cache hint: no row read changes). Nothing else of the crate is changed and none
of its code is in this repository. The ``scylla`` driver speaks CQL v4 to Cassandra 5 unchanged; its
ScyllaDB extensions (shard-aware ports, tablet routing) are not offered by Cassandra and stay off.

How a change is read from the oracle's rows follows ScyllaDB's "CDC log table" and "Preimages and
postimages" documents: a record is one stream and ``cdc$time``; the delta rows of one row in it are
one change; a range deletion is its two bound rows; a row's pre-image precedes its change and its
post-image follows it, both holding the columns of the row's kind only (a clustered row's regular
columns, the static row's static columns), a pre-image marking an included null column with
``cdc$deleted_X`` (scylladb ``cdc/log.cc`` generate_image, 1841-1912). How a change is read from
cdcflow's event follows its documented format (``sources/scylla_cdc/log_events.py``'s docstring):
``after`` and the ``cdc.*`` headers.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

import pytest
from cassandra.util import Date, Duration, Time

from cdcflow.contract import PluginContext
from cdcflow.events import ChangeEvent
from cdcflow.sources.scylla_cdc.source import ScyllaCdcSource, ScyllaCdcSourceConfig
from tests.integration.conftest import CASSANDRA_HOST
from tests.oracles.scylla_cdc import OracleUnavailableError, build_oracle, read_log
from tests.standins.scylla.writer import (
    Add,
    DeleteColumns,
    DeletePartition,
    DeleteRange,
    DeleteRow,
    Insert,
    Overwrite,
    Remove,
    ScyllaCdcWriter,
    SetFields,
    SimulatedKeyspaces,
    Update,
)

PRE_IMAGE, UPDATE, INSERT, ROW_DELETE, PARTITION_DELETE, POST_IMAGE = 0, 1, 2, 3, 4, 9
LEFT_BOUNDS = {5: True, 6: False}  # RowRangeDelInclLeft, RowRangeDelExclLeft: inclusive?
RIGHT_BOUNDS = {7: True, 8: False}
UUID_EPOCH = 0x01B21DD213814000  # 1582-10-15 to 1970-01-01 in 100 ns


# --- the tables: what the test knows of them because it created them ---------------------------------

USER_TYPES = {"pt": ("a", "b")}  # CREATE TYPE pt (a int, b text)


def _type_arguments(cql: str) -> list[str]:
    """``map<text, int>`` -> ``["text", "int"]`` (nested brackets kept whole)."""
    inner, parts, depth, current = cql[cql.index("<") + 1 : -1], [], 0, ""
    for char in inner:
        if char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
            continue
        depth += (char == "<") - (char == ">")
        current += char
    return [*parts, current.strip()]


def _is_multi_cell(cql: str) -> bool:
    """Non-frozen collections and user types: a value written in cells, with removable elements."""
    return cql.split("<", maxsplit=1)[0] in ("set", "map", "list") or cql in USER_TYPES


@dataclass(frozen=True)
class Table:
    """A base table with CDC on, as the test creates it."""

    name: str
    partition_key: tuple[tuple[str, str], ...]
    clustering: tuple[tuple[str, str], ...]
    columns: tuple[tuple[str, str], ...]  # value columns and their CQL types
    static: frozenset[str] = frozenset()
    preimage: bool | Literal["full"] = False
    postimage: bool = False
    tablets: int | None = None
    delta: Literal["full", "keys"] = "full"

    @property
    def key_columns(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.partition_key + self.clustering)

    @property
    def partition_key_names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.partition_key)

    @property
    def clustering_names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.clustering)

    @property
    def value_columns(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.columns)

    @property
    def multi_cell(self) -> frozenset[str]:
        return frozenset(n for n, t in self.columns if _is_multi_cell(t))

    def type_of(self, column: str) -> str:
        return dict(self.partition_key + self.clustering + self.columns)[column]

    def image_columns(self, static_row: bool) -> list[str]:
        """A post-image holds the columns of its row's kind (``cdc/log.cc:1849, 1909``)."""
        if not self.clustering:
            return list(self.value_columns)
        return [n for n in self.value_columns if (n in self.static) == static_row]

    def create(self, writer: ScyllaCdcWriter, keyspace: str) -> None:
        writer.create_table(
            keyspace,
            self.name,
            list(self.partition_key),
            list(self.clustering),
            list(self.columns),
            static=sorted(self.static),
            preimage=self.preimage,
            postimage=self.postimage,
            tablets=self.tablets,
            delta=self.delta,
        )


# --- one value, one change, as both sides must report them --------------------------------------------


def canonical(cql: str, value: Any) -> Any:
    """One form for a value of CQL type ``cql`` from either side: the oracle's JSON (blobs and
    varints as hex, decimals as unscaled hex and scale, maps as pairs, user types as objects) or
    cdcflow's event values. Sets are sorted lists, maps dicts, non-frozen lists (timeuuid-keyed
    maps in the log) dicts keyed by the timeuuid's text, tuples lists, user types their non-null
    fields, durations (months, days, nanoseconds)."""
    if value is None:
        return None
    frozen = cql.startswith("frozen<")
    inner = _type_arguments(cql)[0] if frozen else cql
    base = inner.split("<")[0]
    if inner in USER_TYPES:
        return {f: v for f, v in dict(value).items() if v is not None}
    if base == "set":
        return sorted(canonical(_type_arguments(inner)[0], e) for e in value)
    if base in ("map", "list") and not (base == "list" and frozen):
        key_type, value_type = _type_arguments(inner) if base == "map" else ("timeuuid", _type_arguments(inner)[0])
        pairs = value.items() if isinstance(value, Mapping) else value
        return {_hashable(canonical(key_type, k)): canonical(value_type, v) for k, v in pairs}
    if base == "list":
        return [canonical(_type_arguments(inner)[0], e) for e in value]
    if base == "tuple":
        items = value.values() if isinstance(value, Mapping) else value
        return [canonical(t, v) for t, v in zip(_type_arguments(inner), items, strict=True)]
    return _scalar(inner, value)


def _hashable(value: Any) -> Any:
    return str(value) if isinstance(value, uuid.UUID) else value


def _scalar(cql: str, value: Any) -> Any:
    if cql == "blob":
        return bytes.fromhex(value[2:]) if isinstance(value, str) else bytes(value)
    if cql == "varint":
        return int.from_bytes(bytes.fromhex(value[2:]), "big", signed=True) if isinstance(value, str) else value
    if cql == "decimal" and isinstance(value, Mapping):
        unscaled = int.from_bytes(bytes.fromhex(value["unscaled"][2:]), "big", signed=True)
        return Decimal(unscaled).scaleb(-value["scale"])
    if cql == "date" and isinstance(value, Mapping):
        return value["days_since_epoch"]
    if cql == "time" and isinstance(value, Mapping):
        return value["nanoseconds_since_midnight"]
    if cql == "duration":
        if isinstance(value, Mapping):
            return (value["months"], value["days"], value["nanoseconds"])
        found = re.fullmatch(r"(-?\d+)mo(-?\d+)d(-?\d+)ns", value)
        assert found is not None, f"not a duration: {value!r}"
        return tuple(int(g) for g in found.groups())
    if cql in ("uuid", "timeuuid", "inet"):
        return str(value)
    return value


@dataclass
class Change:
    stream: str
    time: str
    seq: int  # cdc$batch_seq_no of its first delta row
    ts_us: int
    op: str  # c, u, d
    key: dict[str, Any]
    deletion: str | None = None  # row, partition, range
    service: bool = False  # a deletion ScyllaDB made itself (operation -3 / -4)
    written: dict[str, Any] | None = field(default_factory=dict)  # None: the event holds the post-image
    nulled: set[str] = field(default_factory=set)
    removed: dict[str, list[Any]] = field(default_factory=dict)
    ttl: dict[str, int] = field(default_factory=dict)  # column -> seconds; "": the row marker's
    bounds: dict[str, Any] | None = None
    before: dict[str, Any] | None = None
    after_image: dict[str, Any] | None = None

    @property
    def identity(self) -> tuple[str, str, int]:
        return (self.stream, self.time, self.seq)


def _merge(cql: str, old: Any, new: Any) -> Any:
    """Two delta rows of one change writing one multi-cell column (one row per TTL)."""
    if cql.startswith("set<"):
        return sorted({*old, *new})
    if isinstance(old, dict):
        return {**old, **new}
    return new


# --- the oracle's rows as changes --------------------------------------------------------------------


def _ts_us(time_uuid: str) -> int:
    return (uuid.UUID(time_uuid).time - UUID_EPOCH) // 10


def _row_key(table: Table, row: Mapping[str, Any]) -> tuple[str, ...]:
    """Which row of the base table a log row is about (a static row's clustering columns are null)."""
    return tuple(json.dumps(row["values"].get(n)) for n in table.key_columns)


def _present_key(table: Table, row: Mapping[str, Any], columns: Sequence[str]) -> dict[str, Any]:
    values = row["values"]
    return {n: canonical(table.type_of(n), values[n]) for n in columns if values.get(n) is not None}


def _image(table: Table, row: Mapping[str, Any], whole: bool) -> dict[str, Any]:
    """A post-image (``whole``: every column of its row's kind, null or not) or a pre-image: the
    columns it includes, a null one marked by ``cdc$deleted_X`` (``cdc/log.cc`` generate_image:
    "the user will not be able to discern whether a value in the preimage is NULL or it was not
    included"), the others not included."""
    static_row = bool(table.clustering) and all(row["values"].get(n) is None for n in table.clustering_names)
    image = _present_key(table, row, table.key_columns)
    for name in table.image_columns(static_row):
        value = canonical(table.type_of(name), row["values"].get(name))
        if value is not None or whole or row["deleted"].get(name):
            image[name] = value
    return image


def _upsert_facts(table: Table, change: Change, rows: Sequence[Mapping[str, Any]]) -> None:
    """Columns written (non-null values; a user type with no field set writes nothing), nulled
    (``cdc$deleted_X``), removed elements (``cdc$deleted_elements_X``), TTLs (``cdc$ttl``)."""
    written: dict[str, Any] = {}
    for row in rows:
        for name in table.value_columns:
            cql = table.type_of(name)
            value = canonical(cql, row["values"].get(name))
            if value == {} and cql in USER_TYPES:
                value = None
            if row["deleted"].get(name):
                change.nulled.add(name)
            if value is not None:
                written[name] = _merge(cql, written[name], value) if name in written else value
                if row["ttl"] is not None:
                    change.ttl[name] = row["ttl"]
            elements = row["deleted_elements"].get(name) or []
            if elements:
                change.removed[name] = sorted({*change.removed.get(name, []), *_removed(cql, elements)})
        if row["operation_code"] == INSERT and row["ttl"] is not None:
            change.ttl[""] = row["ttl"]  # an insert row's cdc$ttl is its row marker's (cdc/log.cc)
    change.written = written


def _removed(cql: str, elements: Sequence[Any]) -> list[Any]:
    """Removed elements by what they are: user-type fields by name (the log has their index), map
    keys, set elements, list cells by their timeuuid."""
    if cql in USER_TYPES:
        return [USER_TYPES[cql][index] for index in elements]
    element_type = "timeuuid" if cql.startswith("list<") else _type_arguments(cql)[0]
    return [_hashable(canonical(element_type, e)) for e in elements]


def oracle_changes(table: Table, rows: Sequence[Mapping[str, Any]]) -> list[Change]:
    """The changes of the oracle's rows, in the order it delivered their records."""
    records: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for row in rows:
        records.setdefault((row["stream_id"], row["time"]), []).append(row)
    changes: list[Change] = []
    for (stream, time_uuid), record in records.items():
        changes.extend(_record_changes(table, stream, time_uuid, sorted(record, key=lambda r: r["batch_seq_no"])))
    return changes


def _record_changes(table: Table, stream: str, time_uuid: str, record: Sequence[Mapping[str, Any]]) -> list[Change]:
    """One record's changes in ``cdc$batch_seq_no`` order: a row's delta rows (one per TTL and kind
    of change, ``cdc/split.cc``) are one change; a range is its two bound rows; a row's pre-image
    goes with its first change, its post-image with its last."""
    pre: dict[tuple[str, ...], Mapping[str, Any]] = {}
    post: dict[tuple[str, ...], Mapping[str, Any]] = {}
    changes: list[tuple[Change, tuple[str, ...] | None]] = []
    upserts: dict[tuple[str, ...], list[Mapping[str, Any]]] = {}
    left: Mapping[str, Any] | None = None

    def new(row: Mapping[str, Any], op: str, key_columns: Sequence[str]) -> Change:
        key = _present_key(table, row, key_columns)
        return Change(stream, time_uuid, row["batch_seq_no"], _ts_us(time_uuid), op, key)

    for row in record:
        code = row["operation_code"]
        if code in (PRE_IMAGE, POST_IMAGE):
            (pre if code == PRE_IMAGE else post).setdefault(_row_key(table, row), row)
        elif code in (UPDATE, INSERT):
            row_key = _row_key(table, row)
            if row_key not in upserts:
                upserts[row_key] = []
                changes.append((new(row, "u", table.key_columns), row_key))
            upserts[row_key].append(row)
        elif code == ROW_DELETE:
            change = new(row, "d", table.key_columns)
            change.deletion, change.service = "row", row["is_expiration"]
            changes.append((change, _row_key(table, row)))
        elif code == PARTITION_DELETE:
            change = new(row, "d", table.partition_key_names)
            change.deletion, change.service = "partition", row["is_expiration"]
            # without clustering columns the partition is the row: its pre-image goes with it
            changes.append((change, None if table.clustering else _row_key(table, row)))
        elif code in LEFT_BOUNDS:
            left = row
        elif code in RIGHT_BOUNDS:
            change = new(left or row, "d", table.partition_key_names)
            change.deletion = "range"
            change.bounds = _bounds(table, [r for r in (left, row) if r is not None])
            changes.append((change, None))
            left = None
        else:
            raise AssertionError(f"the oracle delivered an operation this test does not know: {row}")
    assert left is None, f"a range's left bound without its right one: {left}"
    first: dict[tuple[str, ...], Change] = {}
    last: dict[tuple[str, ...], Change] = {}
    for change, changed_row in changes:
        if changed_row is None:
            continue
        first.setdefault(changed_row, change)
        last[changed_row] = change
        if changed_row in upserts:
            rows = upserts[changed_row]
            change.op = "c" if any(r["operation_code"] == INSERT for r in rows) else "u"
            _upsert_facts(table, change, rows)
    for row_key, image in pre.items():
        assert row_key in first, f"a pre-image with no change of its row: {image}"
        first[row_key].before = _image(table, image, whole=False)
    for row_key, image in post.items():
        assert row_key in last, f"a post-image with no change of its row: {image}"
        last[row_key].after_image = _image(table, image, whole=True)
    for change, _ in changes:
        if change.after_image is not None:
            # cdcflow's ``after`` is then the post-image: the delta's values and atomic columns'
            # nulls are not in its event (a collection or user type's are, as ``cdc.replaced``)
            change.written = None
            change.nulled &= table.multi_cell
    return [change for change, _ in changes]


def _bounds(table: Table, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A range's bounds: each side's clustering prefix and whether it is inclusive; a side with no
    bound row is unbounded (an empty prefix)."""
    bounds: dict[str, Any] = {"start": {}, "start_inclusive": True, "end": {}, "end_inclusive": True}
    for row in rows:
        code = row["operation_code"]
        side = "start" if code in LEFT_BOUNDS else "end"
        bounds[side] = _present_key(table, row, table.clustering_names)
        bounds[f"{side}_inclusive"] = {**LEFT_BOUNDS, **RIGHT_BOUNDS}[code]
    return bounds


# --- cdcflow's events as changes ---------------------------------------------------------------------


def _header(event: ChangeEvent, name: str) -> Any:
    text = (event.headers or {}).get(name)
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text  # a plain word (cdc.deletion, cdc.origin)


def _row(table: Table, values: Mapping[str, Any]) -> dict[str, Any]:
    return {n: canonical(table.type_of(n), v) for n, v in values.items()}


def cdcflow_change(table: Table, event: ChangeEvent) -> Change:
    """The facts of one event, read as its format says (``after``, ``cdc.*`` headers)."""
    position = event.source.position
    change = Change(
        position["stream"],
        position["time"],
        position["seq"],
        event.source.ts_us,
        event.op.value,
        _row(table, event.key),
    )
    change.deletion = _header(event, "cdc.deletion")
    change.service = _header(event, "cdc.origin") == "service"
    bounds = _header(event, "cdc.range")
    if bounds is not None:
        change.bounds = {**bounds, "start": _row(table, bounds["start"]), "end": _row(table, bounds["end"])}
    change.nulled = set(_header(event, "cdc.replaced") or [])
    for name, elements in (_header(event, "cdc.removed") or {}).items():
        cql = table.type_of(name)
        if cql in USER_TYPES:
            change.removed[name] = sorted(elements)
        else:
            element_type = "timeuuid" if cql.startswith("list<") else _type_arguments(cql)[0]
            change.removed[name] = sorted(_hashable(canonical(element_type, e)) for e in elements)
    for name, seconds in (_header(event, "cdc.ttl") or {}).items():
        # the row marker's TTL is given to the primary key columns
        change.ttl[name if name in table.value_columns else ""] = seconds
    if event.before is not None:
        change.before = _row(table, event.before)
    if event.after is None:
        return change
    if table.postimage:
        change.after_image = _row(table, event.after)
        change.written = None
        return change
    written: dict[str, Any] = {}
    for name, value in event.after.items():
        if name in table.key_columns:
            continue
        if value is None:
            change.nulled.add(name)
            continue
        form = canonical(table.type_of(name), value)
        if form != {} or table.type_of(name) not in USER_TYPES:  # {}: only nulled fields
            written[name] = form
    change.written = written
    return change


# --- running both ----------------------------------------------------------------------------------


class SteppedClock:
    """The writer's coordinator clock, minutes in the past and moved by hand: every write has a
    millisecond of its own, and the log is older than any confidence window when both read it."""

    def __init__(self, start_s: float) -> None:
        self.now_s = start_s

    def __call__(self) -> float:
        return self.now_s

    def step(self, seconds: float = 0.002) -> None:
        self.now_s += seconds


def drain(source: ScyllaCdcSource) -> list[ChangeEvent]:
    """Every event of every partition up to its watermark, each partition in its read order."""
    events: list[ChangeEvent] = []
    for partition in source.partitions():
        start = source.initial_offset(partition)
        while True:
            end = source.latest_offset(partition, start, 1000)
            if end == start:
                break
            for item in source.read(partition, start, end):
                assert isinstance(item, ChangeEvent), f"cdcflow rejected a log row: {item}"
                events.append(item)
            start = end
    return events


@dataclass
class Scenario:
    """What was written, where, and cdcflow's events of it."""

    writer: ScyllaCdcWriter
    clock: SteppedClock
    oracle: Path
    keyspace: str
    tablet_keyspace: str
    start_ms: dict[str, int] = field(default_factory=dict)  # where the oracle starts, per table
    switch_us: dict[str, int] = field(default_factory=dict)  # a table's generation switch or tablet split
    events: dict[str, list[ChangeEvent]] = field(default_factory=dict)

    def qualified(self, table: Table) -> str:
        return f"{self.tablet_keyspace if table.tablets else self.keyspace}.{table.name}"

    def write(self, table: Table, operations: Sequence[Any], **options: Any) -> None:
        self.writer.write(self.qualified(table), operations, **options)
        self.clock.step()

    def expire(self, table: Table, key: Mapping[str, Any]) -> None:
        """The row's TTL ran out and ScyllaDB's expiration service deleted it (-3 / -4)."""
        self.writer.expire_row(self.qualified(table), dict(key))
        self.clock.step()

    def oracle_rows(self, table: Table) -> list[dict[str, Any]]:
        keyspace, name = self.qualified(table).split(".")
        return read_log(
            self.oracle,
            host=f"{CASSANDRA_HOST}:9042",
            metadata_keyspace=self.writer.keyspaces.distributed,
            keyspace=keyspace,
            table=name,
            start_ms=self.start_ms[table.name],
            end_ms=int(time.time() * 1000),
        )

    def read_with_cdcflow(self, tables: Sequence[Table]) -> None:
        """cdcflow's events of ``tables``, read by one source from the start of their logs."""
        config = ScyllaCdcSourceConfig.model_validate(
            {
                "type": "scylla_cdc",
                "hosts": [CASSANDRA_HOST],
                "tables": [self.qualified(t) for t in tables],
                "start": "earliest",
                "generations_keyspace": self.writer.keyspaces.distributed,
                "tablets_keyspace": self.writer.keyspaces.local,
                "schema_keyspace": self.writer.keyspaces.schema,  # the tables' CDC options (log TTL, delta)
                # one node: every replica there is (what the default does on one node is item 1's)
                "consistency": "ONE",
            }
        )
        source = ScyllaCdcSource(config, PluginContext("oracle", Path("oracle.yaml")))
        source.open()
        try:
            for event in drain(source):
                self.events.setdefault(f"{event.source.keyspace}.{event.source.table}", []).append(event)
        finally:
            source.close()

    def compare(self, table: Table) -> list[Change]:
        """Asserts both sides report the same changes of ``table``, stream by stream in the same
        order; returns them."""
        expected = oracle_changes(table, self.oracle_rows(table))
        found = [cdcflow_change(table, e) for e in self.events.get(self.qualified(table), [])]
        assert expected, f"the oracle delivered nothing for {table.name}"
        assert_same_changes(expected, found)
        return expected


def assert_same_changes(expected: Sequence[Change], found: Sequence[Change]) -> None:
    by_identity = {c.identity: c for c in found}
    assert len(by_identity) == len(found), "cdcflow delivered a change twice"
    missing = [c for c in expected if c.identity not in by_identity]
    extra = {c.identity for c in found} - {c.identity for c in expected}
    assert not missing, f"cdcflow never delivered {len(missing)} changes: {missing}"
    assert not extra, f"cdcflow delivered changes the oracle did not: {[by_identity[i] for i in extra]}"
    mismatched = [(e, by_identity[e.identity]) for e in expected if e != by_identity[e.identity]]
    assert not mismatched, "\n".join(f"oracle:  {e}\ncdcflow: {f}" for e, f in mismatched)
    assert _per_stream(expected) == _per_stream(found), "the order of changes in a stream differs"


def _per_stream(changes: Sequence[Change]) -> dict[str, list[tuple[str, str, int]]]:
    order: dict[str, list[tuple[str, str, int]]] = defaultdict(list)
    for change in changes:
        order[change.stream].append(change.identity)
    return dict(order)


# --- the tables and the writes ---------------------------------------------------------------------

INT = "int"
WIDE = Table("wide", (("pk", INT),), (("ck", INT),), (("v", INT), ("t", "text")))
NARROW = Table("narrow", (("pk", INT),), (), (("v", INT),))
TYPES = Table(
    "types",
    (("pk", "text"),),
    (("ck", "timestamp"),),
    (
        ("b", "blob"),
        ("big", "bigint"),
        ("bo", "boolean"),
        ("d", "decimal"),
        ("dt", "date"),
        ("du", "duration"),
        ("f", "double"),
        ("fl", "float"),
        ("ip", "inet"),
        ("si", "smallint"),
        ("ti", "tinyint"),
        ("tm", "time"),
        ("tu", "timeuuid"),
        ("u", "uuid"),
        ("vi", "varint"),
        ("tup", "frozen<tuple<int, text>>"),
        ("fm", "frozen<map<int, text>>"),
    ),
)
COLLECTIONS = Table(
    "colls",
    (("pk", INT),),
    (),
    (
        ("st", "set<int>"),
        ("mp", "map<text, int>"),
        ("ls", "list<text>"),
        ("u", "pt"),
        ("fu", "frozen<pt>"),
        ("fz", "frozen<list<int>>"),
    ),
)
IMAGES = Table(
    "imaged",
    (("pk", INT),),
    (("ck", INT),),
    (("v", INT), ("t", "text"), ("st", "set<int>")),
    preimage=True,
    postimage=True,
)
FULL_IMAGES = Table(
    "fullimg", (("pk", INT),), (), (("v", INT), ("mp", "map<text, int>")), preimage="full", postimage=True
)
STATICS = Table(
    "statics", (("pk", INT),), (("ck", INT),), (("s", INT), ("v", INT)), frozenset({"s"}), preimage=True, postimage=True
)
ROW_TTL = Table("rowttl", (("pk", INT),), (("ck", INT),), (("v", INT),))
KEYS_ONLY = Table(
    "keysonly",
    (("pk", INT),),
    (("ck", INT),),
    (("v", INT), ("st", "set<int>")),
    preimage=True,
    postimage=True,
    delta="keys",
)
TABLET_COUNT = 2
TABLETS = Table("tab", (("pk", INT),), (("ck", INT),), (("v", INT),), tablets=TABLET_COUNT)
VNODE_TABLES = (WIDE, NARROW, TYPES, COLLECTIONS, IMAGES, FULL_IMAGES, STATICS, ROW_TTL, KEYS_ONLY)


def _write_before_the_switch(s: Scenario) -> None:
    # every operation; TTLs; writes split by their timestamps and TTLs; ScyllaDB's own deletions
    s.write(WIDE, [Insert({"pk": 0, "ck": 0, "v": 1, "t": "a"})])
    s.write(WIDE, [Update({"pk": 0, "ck": 0}, {"v": 2})])
    s.write(WIDE, [Update({"pk": 0, "ck": 0}, {"t": None})])
    s.write(WIDE, [DeleteColumns({"pk": 0, "ck": 0}, ("v",))])
    s.write(WIDE, [Insert({"pk": 0, "ck": 1, "v": 10, "t": "b"})], ttl_s=3600)
    s.write(WIDE, [Update({"pk": 0, "ck": 1}, {"v": 11}, ttl_s=60), Update({"pk": 0, "ck": 1}, {"t": "c"})])
    s.write(WIDE, [DeleteRow({"pk": 0, "ck": 1})])
    s.write(WIDE, [Insert({"pk": 1, "ck": c, "v": c}) for c in range(4)])
    s.write(WIDE, [DeleteRange({"pk": 1}, start=(1, True), end=(3, False))])
    s.write(WIDE, [DeleteRange({"pk": 1}, start=(2, False), end=(9, True))])
    s.write(WIDE, [DeleteRange({"pk": 1}, start=(5, True))])
    s.write(WIDE, [DeleteRange({"pk": 1}, end=(0, False))])
    s.write(WIDE, [DeletePartition({"pk": 1})])
    s.write(WIDE, [Insert({"pk": 2, "ck": 0, "v": 5})])
    s.expire(WIDE, {"pk": 2, "ck": 0})
    stamp = int(s.clock() * 1_000_000)
    s.write(
        WIDE,
        [
            Insert({"pk": 3, "ck": 0, "v": 1}, timestamp_us=stamp),
            Update({"pk": 3, "ck": 0}, {"v": 2}, timestamp_us=stamp + 1),
        ],
    )
    s.write(WIDE, [DeleteRow({"pk": 3, "ck": 0}), Insert({"pk": 3, "ck": 1, "v": 3})])
    s.write(NARROW, [Insert({"pk": 0, "v": 1})])
    s.write(NARROW, [DeleteRow({"pk": 0})])
    s.write(NARROW, [Insert({"pk": 1, "v": 2})])
    s.expire(NARROW, {"pk": 1})
    # values of every native type, in the key too
    s.write(
        TYPES,
        [
            Insert(
                {
                    "pk": "clé",
                    "ck": datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=UTC),
                    "b": b"\x00\xff",
                    "big": -(2**62),
                    "bo": True,
                    "d": Decimal("-12.345"),
                    "dt": Date(19000),
                    "du": Duration(1, 2, 3),
                    "f": 1.5,
                    "fl": -2.25,
                    "ip": "2001:db8::1",
                    "si": -3,
                    "ti": 7,
                    "tm": Time(3_723_000_000_123),
                    "tu": uuid.UUID("0a3f6e1c-2b3d-11ef-8000-000000000001"),
                    "u": uuid.UUID(int=5),
                    "vi": -(2**70),
                    "tup": (1, "a"),
                    "fm": {1: "x", 2: "y"},
                }
            )
        ],
    )
    s.write(TYPES, [Update({"pk": "clé", "ck": datetime(2024, 1, 2, tzinfo=UTC)}, {"d": Decimal("1E+3"), "b": None})])
    # collections and user types: add, remove, overwrite, delete, field updates, with and without TTL
    s.write(
        COLLECTIONS,
        [
            Insert(
                {
                    "pk": 0,
                    "st": {1, 2},
                    "mp": {"a": 1},
                    "ls": ["x"],
                    "u": {"a": 1, "b": "q"},
                    "fu": (2, None),
                    "fz": [3, 4],
                }
            )
        ],
    )
    s.write(
        COLLECTIONS,
        [Update({"pk": 0}, {"st": Add({3}), "mp": Add({"b": 2}), "ls": Add(["y"]), "u": SetFields({"b": "r"})})],
    )
    s.write(COLLECTIONS, [Update({"pk": 0}, {"st": Remove({1}), "mp": Remove({"a"}), "u": SetFields({"a": None})})])
    s.write(COLLECTIONS, [Update({"pk": 0}, {"st": Overwrite({9}), "u": Overwrite({"a": 7, "b": None}), "fz": [5]})])
    s.write(COLLECTIONS, [Update({"pk": 0}, {"mp": Add({"c": 3})}, ttl_s=120), Update({"pk": 0}, {"st": Add({10})})])
    s.write(COLLECTIONS, [Update({"pk": 0}, {"mp": Overwrite({"z": 26})})], ttl_s=90)
    s.write(COLLECTIONS, [DeleteColumns({"pk": 0}, ("st", "mp", "u", "fu"))])
    # images: partial and full pre-images, post-images
    s.write(IMAGES, [Insert({"pk": 0, "ck": 0, "v": 1, "t": "a", "st": {1}})])
    s.write(IMAGES, [Update({"pk": 0, "ck": 0}, {"v": 2, "st": Add({2})})])
    s.write(IMAGES, [Update({"pk": 0, "ck": 0}, {"t": None, "st": Remove({1})})])
    s.write(IMAGES, [Insert({"pk": 0, "ck": 1, "v": 3}), Update({"pk": 0, "ck": 0}, {"v": 4})])
    s.write(IMAGES, [DeleteRow({"pk": 0, "ck": 0})])
    s.write(FULL_IMAGES, [Insert({"pk": 0, "v": 1, "mp": {"a": 1}})])
    s.write(FULL_IMAGES, [Update({"pk": 0}, {"mp": Add({"b": 2})})])
    s.write(FULL_IMAGES, [DeleteRow({"pk": 0})])
    # issue 22's case: a static column with post-images
    s.write(STATICS, [Insert({"pk": 0, "ck": 0, "s": 7, "v": 1})])
    s.write(STATICS, [Update({"pk": 0, "ck": 0}, {"v": 2})])
    s.write(STATICS, [Update({"pk": 0}, {"s": 8})])
    # a key-only INSERT ... USING TTL: the log's only trace of that TTL is the row's cdc$ttl
    s.write(ROW_TTL, [Insert({"pk": 0, "ck": 0})], ttl_s=600)
    # cdc = {'delta': 'keys'}: deltas of keys alone, images as usual
    s.write(KEYS_ONLY, [Insert({"pk": 0, "ck": 0, "v": 1, "st": {1}})])
    s.write(KEYS_ONLY, [Update({"pk": 0, "ck": 0}, {"v": 2, "st": Remove({1})})], ttl_s=30)
    s.write(KEYS_ONLY, [DeleteColumns({"pk": 0, "ck": 0}, ("v",))])
    s.write(KEYS_ONLY, [DeleteRow({"pk": 0, "ck": 0})])


def _write_after_the_switch(s: Scenario) -> None:
    s.write(WIDE, [Insert({"pk": 0, "ck": 5, "v": 50})])
    s.write(WIDE, [Update({"pk": 0, "ck": 0}, {"v": 3})])
    s.write(NARROW, [Insert({"pk": 3, "v": 3})])
    s.write(COLLECTIONS, [Update({"pk": 0}, {"st": Add({11}), "ls": Add(["z"])})])


def _write_tablets(s: Scenario, first_ck: int) -> None:
    for pk in range(4):
        s.write(TABLETS, [Insert({"pk": pk, "ck": first_ck, "v": first_ck})])
        s.write(TABLETS, [Update({"pk": pk, "ck": first_ck}, {"v": first_ck + 1})])


@pytest.fixture(scope="session")
def scylla_oracle() -> Path:
    try:
        return build_oracle()
    except OracleUnavailableError as exc:
        pytest.skip(str(exc))


def _simulated_keyspaces(metadata: str) -> SimulatedKeyspaces:
    """The simulated system keyspaces in one (their table names do not overlap), which the oracle
    USEs; system_distributed_everywhere keeps its own (its replication differs)."""
    simulated = SimulatedKeyspaces.prefixed(metadata)
    return dataclasses.replace(
        simulated, **{f.name: metadata for f in dataclasses.fields(simulated) if f.name != "everywhere"}
    )


def _mark_tablet_keyspace(writer: ScyllaCdcWriter, keyspace: str) -> None:
    """What tells scylla-cdc a keyspace uses tablets: its row in ScyllaDB's
    ``system_schema.scylla_keyspaces`` with ``initial_tablets`` set (``log_reader.rs``
    uses_tablets); cdcflow tells it from the tablet metadata the writer keeps."""
    metadata = writer.keyspaces.distributed
    writer.session.execute(
        f"CREATE TABLE IF NOT EXISTS {metadata}.scylla_keyspaces (keyspace_name text PRIMARY KEY, initial_tablets int)"
    )
    writer.session.execute(
        f"INSERT INTO {metadata}.scylla_keyspaces (keyspace_name, initial_tablets) VALUES (%s, %s)",
        (keyspace, TABLET_COUNT),
    )


@pytest.fixture(scope="module")
def scenario(cassandra_session: Any, scylla_oracle: Path) -> Iterator[Scenario]:
    """One cluster's history, five minutes old: the tables, the writes, a vnode generation switch
    and a tablet split; then cdcflow reads every table's log."""
    session: Any = cassandra_session
    keyspace = f"o{uuid.uuid4().hex[:10]}"
    tablet_keyspace = f"{keyspace}_tablets"
    replication = "{'class': 'SimpleStrategy', 'replication_factor': 1}"
    clock = SteppedClock(time.time() - 300)
    writer = ScyllaCdcWriter(
        session,
        _simulated_keyspaces(f"{keyspace}_meta"),
        shards=2,
        ring_delay_s=0,  # a joining node's generation operates from the coordinator's now
        seed=22,
        clock=clock,
    )
    s = Scenario(writer, clock, scylla_oracle, keyspace, tablet_keyspace)
    try:
        for name in (keyspace, tablet_keyspace):
            session.execute(f"CREATE KEYSPACE {name} WITH replication = {replication}")
        session.execute(f"CREATE TYPE {keyspace}.pt (a int, b text)")
        writer.create_metadata_tables()
        first_generation_us = writer.bootstrap(vnodes=3)
        clock.step(1)
        for table in VNODE_TABLES:
            table.create(writer, keyspace)
            s.start_ms[table.name] = first_generation_us // 1000
        _mark_tablet_keyspace(writer, tablet_keyspace)
        TABLETS.create(writer, tablet_keyspace)
        s.start_ms[TABLETS.name] = int(clock() * 1000)  # the first stream set is from before
        _write_before_the_switch(s)
        _write_tablets(s, first_ck=0)
        clock.step(0.01)
        s.switch_us[WIDE.name] = writer.join_node(vnodes=3)
        s.switch_us[TABLETS.name] = writer.change_tablets(s.qualified(TABLETS), TABLET_COUNT * 2, delay_s=0)
        clock.step(0.01)
        _write_after_the_switch(s)
        _write_tablets(s, first_ck=10)
        s.read_with_cdcflow([t for t in (*VNODE_TABLES, TABLETS) if t is not KEYS_ONLY])
        yield s
    finally:
        writer.drop_keyspaces()
        for name in (keyspace, tablet_keyspace):
            session.execute(f"DROP KEYSPACE IF EXISTS {name}")


def _streams_before_and_after(s: Scenario, table: Table, changes: Sequence[Change]) -> tuple[set[str], set[str]]:
    switch = s.switch_us[table.name]
    return {c.stream for c in changes if c.ts_us < switch}, {c.stream for c in changes if c.ts_us >= switch}


def _kinds(changes: Sequence[Change]) -> set[tuple[str, str | None, bool]]:
    return {(c.op, c.deletion, c.service) for c in changes}


def test_every_operation_ttls_and_split_writes_match_the_oracle(scenario: Scenario) -> None:
    changes = scenario.compare(WIDE)
    # the case covers what it says: inserts, updates, each kind of deletion, ScyllaDB's own ones
    assert {("c", None, False), ("u", None, False), ("d", "row", False), ("d", "row", True)} <= _kinds(changes)
    assert {("d", "partition", False), ("d", "range", False)} <= _kinds(changes)
    assert any(c.ttl for c in changes) and any(c.nulled for c in changes)


def test_a_table_without_clustering_columns_matches_the_oracle(scenario: Scenario) -> None:
    changes = scenario.compare(NARROW)
    assert {("d", "partition", False), ("d", "partition", True)} <= _kinds(changes)


def test_values_of_every_native_type_match_the_oracle(scenario: Scenario) -> None:
    changes = scenario.compare(TYPES)
    assert {n for c in changes for n in c.written or {}} == set(TYPES.value_columns)


def test_collections_and_user_types_match_the_oracle(scenario: Scenario) -> None:
    changes = scenario.compare(COLLECTIONS)
    assert {"st", "mp", "u"} <= {n for c in changes for n in c.removed}
    assert {"st", "mp", "u", "fu"} <= {n for c in changes for n in c.nulled}


def test_pre_and_post_images_match_the_oracle(scenario: Scenario) -> None:
    changes = [*scenario.compare(IMAGES), *scenario.compare(FULL_IMAGES)]
    assert any(c.before for c in changes) and any(c.after_image for c in changes)


def test_static_columns_with_post_images_match_the_oracle(scenario: Scenario) -> None:
    """Issue 22's case (item 3): each row's post-image holds its own kind of columns only."""
    changes = scenario.compare(STATICS)
    assert {"s"} in [set(c.after_image or {}) - {"pk", "ck"} for c in changes]


def test_the_ttl_of_an_insert_of_keys_alone_matches_the_oracle(scenario: Scenario) -> None:
    """Item 8: the log's only trace of ``INSERT (pk, ck) ... USING TTL`` is the row's cdc$ttl."""
    changes = scenario.compare(ROW_TTL)
    assert [c.ttl for c in changes] == [{"": 600}]


def test_a_generation_switch_matches_the_oracle(scenario: Scenario) -> None:
    changes = scenario.compare(WIDE)
    before, after = _streams_before_and_after(scenario, WIDE, changes)
    # changes on both sides of the switch, each in its generation's streams
    assert before and after and not before & after


def test_a_tablet_split_matches_the_oracle(scenario: Scenario) -> None:
    changes = scenario.compare(TABLETS)
    before, after = _streams_before_and_after(scenario, TABLETS, changes)
    assert before and after and not before & after


def test_a_table_logging_deltas_of_keys_alone_matches_the_oracle(scenario: Scenario) -> None:
    """``cdc = {'delta': 'keys'}`` (item 7): the oracle's deltas carry keys, operation and TTL alone;
    cdcflow reads such a table with a source of its own (it may refuse it: item 7 decides)."""
    scenario.read_with_cdcflow([KEYS_ONLY])
    changes = scenario.compare(KEYS_ONLY)
    assert not any(c.removed or c.nulled for c in changes)
    assert any(c.after_image for c in changes)
