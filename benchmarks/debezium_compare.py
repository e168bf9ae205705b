"""Debezium's Cassandra change events mapped onto cdcflow's, and the two compared value by value.

Both are read back from Kafka as JSON without schemas. Each side's message becomes a
:class:`Change`: what happened to which row, and the values, in Python's types (decimals as
``Decimal``, timestamps as epoch milliseconds, collections and user types as lists and dicts).
Changes are paired by the commit-log entry they came from (segment, position: both connectors
report the mutation's position) and the row they touch, and compared field by field.

Debezium's envelope (debezium-connector-cassandra v3.4.0.Final, read for this mapping, not copied):
- ``op``: ``i`` insert, ``u`` update, ``d`` delete, ``r`` a range tombstone
  (``core/.../Record.java`` ``Operation``); its documentation says ``c`` and that range deletes are
  not captured, the 3.4 code emits ``i`` and ``r``.
- ``after``: every column of the table, ``null`` when the mutation did not touch it, else
  ``{"value", "deletion_ts", "set"}``; ``deletion_ts`` is a cell's expiry in microseconds for a
  cell written with a TTL, the deletion time for deleted ones (``CassandraSchemaFactory.CellData``,
  ``Cassandra5CommitLogReadHandlerImpl.populateRegularColumns``).
- a range tombstone's bounds in ``after._range_start`` / ``_range_end``: ``method`` (Cassandra's
  bound kind, ``INCL_START_BOUND``...) and the clustering values as text.
- a partition deletion is ``d`` with the clustering columns ``null`` in the key.
- ``source.file`` / ``source.pos``: the commit-log segment and the mutation's position;
  ``source.ts_us``: the change's write time.

What Debezium does not carry is kept apart from mismatches, as known differences (its
documentation's list: static columns, TTL on collections, range deletes; and what its event
cannot say about collections, see :data:`KNOWN_DIFFERENCES`).
"""

from __future__ import annotations

import base64
import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

#: Why a difference is not a mismatch: Debezium's documentation ("The following features are
#: currently not supported by the Cassandra connector"), or what its event has no field for.
KNOWN_DIFFERENCES: dict[str, str] = {
    "static row": "a change of static columns only: Debezium does not capture static columns (documented)",
    "collection TTL": "a collection written with a TTL: Debezium carries no TTL for collections (documented)",
    "element removal": (
        "elements removed from a collection: Debezium has no field for a removal and puts the removed"
        " elements where the column's value goes (set: the removed elements; map: their keys with null)"
    ),
}

#: How long after its client-side write time a write may be applied by the node (seconds).
APPLY_WITHIN_S = 60

#: What only cdcflow's events say, counted but not compared (Debezium's event has nothing to
#: compare it with).
CDCFLOW_ONLY = {
    "replaced": "cdc.replaced: the collection or user type was written whole, not appended to",
}


@dataclass(frozen=True)
class TableShape:
    """The columns of a table, as the driver's metadata gives them."""

    keyspace: str
    name: str
    partition_key: tuple[str, ...]
    clustering: tuple[str, ...]
    types: Mapping[str, str]  # column -> CQL type, e.g. "list<decimal>", "frozen<address>"
    user_types: Mapping[str, Mapping[str, str]]  # user type -> field -> CQL type

    @property
    def qualified(self) -> str:
        return f"{self.keyspace}.{self.name}"


@dataclass
class Change:
    """One connector's event, in terms both connectors can be compared in."""

    kind: str  # row, static, partition, range
    op: str  # c, u, d
    key: tuple[tuple[str, Any], ...]
    segment: int
    position: int
    ts_us: int
    appended_ms: int  # the Kafka record's LogAppendTime
    values: dict[str, Any] = field(default_factory=dict)  # c/u: the columns the event carries
    ttl_columns: dict[str, int] = field(default_factory=dict)  # cdcflow: seconds; Debezium: expiry µs
    removed: dict[str, Any] = field(default_factory=dict)  # cdcflow's cdc.removed
    replaced: frozenset[str] = frozenset()  # cdcflow's cdc.replaced
    bounds: tuple[Any, ...] | None = None  # range: (start, start inclusive, end, end inclusive)

    @property
    def match_key(self) -> tuple[Any, ...]:
        return (self.segment, self.position, self.kind if self.kind != "static" else "row", self.key)


@dataclass
class Comparison:
    """The outcome for one table: pairs compared, mismatches, known differences."""

    table: str
    cdcflow_events: int = 0
    debezium_events: int = 0
    paired: int = 0
    mismatches: list[str] = field(default_factory=list)
    resent: Counter[str] = field(default_factory=Counter)  # a change sent again (after a restart)
    known: Counter[str] = field(default_factory=Counter)
    known_examples: dict[str, str] = field(default_factory=dict)
    cdcflow_only: Counter[str] = field(default_factory=Counter)

    def note_known(self, category: str, example: str) -> None:
        self.known[category] += 1
        self.known_examples.setdefault(category, example)


# --- values -----------------------------------------------------------------------------------------


def _split_arguments(text: str) -> list[str]:
    """``text,decimal`` or ``text,frozen<map<text,int>>`` into its top-level type arguments."""
    parts, depth, start = [], 0, 0
    for at, char in enumerate(text):
        if char == "<":
            depth += 1
        elif char == ">":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:at].strip())
            start = at + 1
    parts.append(text[start:].strip())
    return parts


def normalize(value: Any, cql_type: str, shape: TableShape) -> Any:
    """A JSON value of either connector as the Python value both should agree on: decimals (text
    in ``string`` mode, ``{"scale", "value"}`` in ``precise`` mode) as ``Decimal``, varints as
    ``int``, collections element by element; an empty collection is ``None``, as Cassandra reads
    it (an empty non-frozen collection is no collection)."""
    if value is None:
        return None
    cql_type = cql_type.strip()
    if cql_type.startswith("frozen<"):
        return normalize(value, cql_type[len("frozen<") : -1], shape)
    if cql_type == "decimal":
        if isinstance(value, dict):  # precise: Debezium's VariableScaleDecimal
            unscaled = int.from_bytes(base64.b64decode(value["value"]), "big", signed=True)
            return Decimal(unscaled).scaleb(-int(value["scale"]))
        return Decimal(str(value))
    if cql_type == "varint":
        if isinstance(value, str) and not value.lstrip("-").isdigit():
            return int.from_bytes(base64.b64decode(value), "big", signed=True)
        return int(value)
    if cql_type in ("uuid", "timeuuid"):
        return str(value).lower()
    if cql_type.startswith("list<"):
        return [normalize(item, cql_type[len("list<") : -1], shape) for item in value] or None
    if cql_type.startswith("set<"):
        # A set is compared as a set: cdcflow keeps Cassandra's order, Debezium's comes out of a
        # Java HashSet (SetTypeDeserializer).
        return sorted((normalize(item, cql_type[len("set<") : -1], shape) for item in value), key=repr) or None
    if cql_type.startswith("map<"):
        key_type, value_type = _split_arguments(cql_type[len("map<") : -1])
        # maps with non-text keys as key/value records
        pairs = [(e["key"], e["value"]) for e in value] if isinstance(value, list) else list(value.items())
        normalized = {str(normalize(k, key_type, shape)): normalize(v, value_type, shape) for k, v in pairs}
        return normalized or None
    if cql_type in shape.user_types:
        fields = shape.user_types[cql_type]
        return {name: normalize(value.get(name), fields[name], shape) for name in fields}
    return value


def _canonical_key(key: Mapping[str, Any], shape: TableShape) -> tuple[tuple[str, Any], ...]:
    """The primary-key columns the event names (a partition or range deletion names no clustering
    value: Debezium sends them as null, cdcflow leaves them out)."""
    columns = (*shape.partition_key, *shape.clustering)
    return tuple(
        (name, normalize(key[name], shape.types[name], shape)) for name in columns if key.get(name) is not None
    )


# --- cdcflow ----------------------------------------------------------------------------------------


def cdcflow_change(
    key: bytes, value: bytes, headers: Iterable[tuple[str, bytes]], appended_ms: int, shape: TableShape
) -> Change:
    """A cdcflow event (its JSON key and envelope, and its ``cdc.*`` headers) as a :class:`Change`."""
    event = json.loads(value)
    cdc = {name: raw.decode() for name, raw in headers if name.startswith("cdc.")}
    position = json.loads(event["source"]["position"])
    canonical_key = _canonical_key(json.loads(key), shape)
    op = event["op"]
    if op == "d":
        kind = cdc.get("cdc.deletion", "row")
    elif len(canonical_key) < len(shape.partition_key) + len(shape.clustering):
        kind = "static"  # a static row's key is its partition key
    else:
        kind = "row"
    change = Change(
        kind=kind,
        op=op,
        key=canonical_key,
        segment=int(position["segment"]),
        position=int(position["position"]),
        ts_us=int(event["source"]["ts_us"]),
        appended_ms=appended_ms,
    )
    if op != "d":
        after = event.get("after") or {}
        change.values = {
            name: normalize(column, shape.types[name], shape) for name, column in after.items() if name in shape.types
        }
        change.ttl_columns = {name: int(ttl) for name, ttl in json.loads(cdc.get("cdc.ttl", "{}")).items()}
        change.removed = json.loads(cdc.get("cdc.removed", "{}"))
        change.replaced = frozenset(json.loads(cdc.get("cdc.replaced", "[]")))
    if kind == "range":
        bounds = json.loads(cdc["cdc.range"])
        change.bounds = (
            {name: str(v) for name, v in bounds["start"].items()},
            bool(bounds["start_inclusive"]),
            {name: str(v) for name, v in bounds["end"].items()},
            bool(bounds["end_inclusive"]),
        )
    return change


# --- Debezium ---------------------------------------------------------------------------------------

_DEBEZIUM_OPS = {"i": "c", "u": "u", "d": "d", "r": "d"}


def debezium_change(key: bytes, value: bytes, appended_ms: int, shape: TableShape) -> Change:
    """A Debezium event (its JSON key and envelope) as a :class:`Change`."""
    event = json.loads(value)
    source = event["source"]
    after = event.get("after") or {}
    canonical_key = _canonical_key(json.loads(key), shape)
    op = event["op"]
    if op == "r":
        kind = "range"
    elif op == "d":
        kind = "row" if len(canonical_key) == len(shape.partition_key) + len(shape.clustering) else "partition"
    else:
        kind = "row"
    segment = int(str(source["file"]).rsplit("-", 1)[1].split(".")[0])
    change = Change(
        kind=kind,
        op=_DEBEZIUM_OPS[op],
        key=canonical_key,
        segment=segment,
        position=int(source["pos"]),
        ts_us=int(source["ts_us"]),
        appended_ms=appended_ms,
    )
    if op in ("i", "u"):
        for name, cell in after.items():
            if cell is None or name not in shape.types:
                continue
            change.values[name] = normalize(cell["value"], shape.types[name], shape)
            if cell.get("deletion_ts") is not None:
                change.ttl_columns[name] = int(cell["deletion_ts"])
    if op == "r":
        change.bounds = (*_debezium_bound(after["_range_start"]), *_debezium_bound(after["_range_end"]))
    return change


def _debezium_bound(bound: Mapping[str, Any]) -> tuple[dict[str, str], bool]:
    values = {item["name"]: item["value"] for item in bound["values"]}
    return values, str(bound["method"]).startswith("INCL")


# --- pairing and comparing --------------------------------------------------------------------------


def _describe(change: Change) -> str:
    key = ", ".join(f"{name}={value}" for name, value in change.key)
    return f"{change.kind} {change.op} ({key}) at segment {change.segment} position {change.position}"


def _collection_kind(cql_type: str) -> str | None:
    bare = cql_type[len("frozen<") : -1] if cql_type.startswith("frozen<") else cql_type
    if cql_type.startswith("frozen<"):
        return None
    for kind in ("list", "set", "map"):
        if bare.startswith(kind + "<"):
            return kind
    return None


def _is_removal_as_value(removed: Any, debezium_value: Any, collection: str | None) -> bool:
    """Whether Debezium's value for a column is what it makes of an element removal: the removed
    set elements as the value, or the removed map keys with null (their cells are tombstones:
    ``getComplexColumnDataByteBufferList`` serializes every cell of the column, removed or not)."""
    if collection == "set":
        return sorted(map(str, debezium_value or [])) == sorted(map(str, removed))
    if collection == "map":
        return bool(debezium_value == {str(k): None for k in removed})
    return False


def _compare_values(ours: Change, theirs: Change, shape: TableShape, result: Comparison) -> list[str]:
    problems = []
    if ours.op != theirs.op:
        problems.append(f"op {ours.op} (cdcflow) vs {theirs.op} (Debezium)")
    if ours.ts_us != theirs.ts_us:
        problems.append(f"write time {ours.ts_us} (cdcflow) vs {theirs.ts_us} (Debezium)")
    if ours.bounds != theirs.bounds:
        problems.append(f"range {ours.bounds} (cdcflow) vs {theirs.bounds} (Debezium)")
    for name in sorted(set(ours.values) | set(theirs.values) | set(ours.removed)):
        collection = _collection_kind(shape.types[name])
        if name in ours.removed and name not in ours.values:
            if _is_removal_as_value(ours.removed[name], theirs.values.get(name), collection):
                result.note_known("element removal", f"{_describe(ours)}: {name} {ours.removed[name]} removed")
                continue
            problems.append(f"{name}: {ours.removed[name]} removed (cdcflow) vs {theirs.values.get(name)!r} (Debezium)")
            continue
        if name not in theirs.values:
            problems.append(f"{name}: {ours.values[name]!r} (cdcflow), absent (Debezium)")
        elif name not in ours.values:
            problems.append(f"{name}: absent (cdcflow), {theirs.values[name]!r} (Debezium)")
        elif ours.values[name] != theirs.values[name]:
            problems.append(f"{name}: {ours.values[name]!r} (cdcflow) vs {theirs.values[name]!r} (Debezium)")
    for name in sorted(set(ours.ttl_columns) | set(theirs.ttl_columns)):
        if _collection_kind(shape.types[name]) and name not in theirs.ttl_columns:
            result.note_known("collection TTL", f"{_describe(ours)}: {name} TTL {ours.ttl_columns[name]} s")
        elif name not in theirs.ttl_columns or name not in ours.ttl_columns:
            problems.append(
                f"{name}: TTL {ours.ttl_columns.get(name)} s (cdcflow), expiry {theirs.ttl_columns.get(name)}"
            )
        else:
            # Debezium gives the cell's expiry: the second the node applied the write (its clock)
            # plus the TTL. The write time is the client's, when it made the statement (the
            # driver's client-side timestamps): the expiry less cdcflow's TTL must fall at or
            # after it, within the time a write can wait in the client and the node.
            applied_s = theirs.ttl_columns[name] / 1e6 - ours.ttl_columns[name]
            if not -1 <= applied_s - ours.ts_us / 1e6 <= APPLY_WITHIN_S:
                problems.append(
                    f"{name}: TTL {ours.ttl_columns[name]} s (cdcflow) vs expiry {theirs.ttl_columns[name]}"
                )
    if ours.replaced:
        result.cdcflow_only["replaced"] += 1
    return problems


def compare(table: TableShape, cdcflow_changes: list[Change], debezium_changes: list[Change]) -> Comparison:
    """Pairs the two connectors' changes of one table and compares each pair."""
    result = Comparison(table.qualified, len(cdcflow_changes), len(debezium_changes))
    theirs_by_key: dict[tuple[Any, ...], list[Change]] = defaultdict(list)
    for change in debezium_changes:
        theirs_by_key[change.match_key].append(change)
    mismatches: list[str] = []
    paired: set[tuple[Any, ...]] = set()
    for ours in cdcflow_changes:
        candidates = theirs_by_key.get(ours.match_key)
        if not candidates:
            if ours.kind == "static":
                result.note_known("static row", _describe(ours))
            elif ours.match_key in paired:
                result.resent["cdcflow"] += 1
            else:
                mismatches.append(f"{_describe(ours)}: no Debezium event")
            continue
        theirs = candidates.pop(0)
        paired.add(ours.match_key)
        result.paired += 1
        problems = _compare_values(ours, theirs, table, result)
        if problems:
            mismatches.append(f"{_describe(ours)}: " + "; ".join(problems))
    for left in theirs_by_key.values():
        for change in left:
            if change.match_key in paired:
                result.resent["Debezium"] += 1
            else:
                mismatches.append(f"{_describe(change)}: no cdcflow event")
    result.mismatches = mismatches
    return result
