"""The mirror's rule: one partition's rows as they are now, from the rows the table holds and the
micro-batch's changes to that partition, in order.

Pure Python over the values Spark hands a ``mapInArrow`` task (typed as the Delta columns are), so
the rule is tested without Spark. What it applies:

* a change carrying some columns sets only those (absent is not null: a column absent from the
  change's ``after`` keeps its value; one present as null becomes null);
* changes apply in source order: a key's changes from one source partition in their read order
  (their position there), changes from several partitions (a key that moved: a new CDC
  generation, a region split, another replica) by their source timestamp; a change that is not
  later than the row it would touch, by the same rule against the row's stamp (the partition,
  micro-batch and timestamp of its last change), is skipped, so a replayed or late change never
  overwrites a newer one;
* a delete removes the row; an insert after it in the same batch starts a fresh row;
* Cassandra's partition-level changes: a partition delete removes the partition's rows (and its
  static values), a range delete the rows its clustering bounds hold (each unless the row is newer),
  a static row change sets the static columns of every row of the partition; a partition with
  static values and no row shows as one row without clustering values, as ``SELECT`` does;
* a Cassandra multi-cell column (a non-frozen collection or user type) that a change updates
  without replacing (``cdc.replaced``) gets the elements added and loses those removed
  (``cdc.removed``): set union, map entries by key, list elements appended, user-type fields by
  name.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from cdcflow.sinks.delta_spark.exceptions import MirrorUnsupportedChangeError

__all__ = [
    "ACTION",
    "CHANGE_META",
    "DELTA_SOURCES",
    "STAMP_COLUMNS",
    "STATIC_STAMP",
    "MirrorLayout",
    "fold_partition",
]

STAMP_COLUMNS = ("_cdc_ts_us", "_cdc_partition", "_cdc_position", "_cdc_batch")
"""What each mirror row keeps of the last change applied to it: its source timestamp, partition
and position there, and the micro-batch that wrote it (read order across batches)."""
STATIC_STAMP = "_cdc_static_ts_us"
"""The source timestamp of a partition's static values (a table with static columns only)."""
ACTION = "__action"
"""``upsert`` or ``delete``: what the MERGE does with a row the fold returns."""
CHANGE_META = (
    "__kind",
    "__batch",
    "__ord",
    "__op",
    "__ts",
    "__partition",
    "__position",
    "__system",
    "__key",
    "__after",
    "__headers",
)
"""The columns a change row carries beside the table's (state rows have them null but ``__kind``)."""

STATE, CHANGE = 0, 1
DELTA_SOURCES = frozenset({"cassandra"})
"""Source systems whose events carry a multi-cell column's added elements rather than its value."""


@dataclass(frozen=True)
class MirrorLayout:
    """What the fold needs to know of a mirror table.

    ``columns`` are the table's value columns (key columns among them), ``key`` the primary key
    (partition key first), ``partition_key`` its partition key (the whole key for tables whose
    partition-level changes were never seen), ``static`` the static columns, ``multi_cell`` each
    non-frozen collection or user-type column's kind (``list``, ``set``, ``map``, ``udt``).
    """

    columns: tuple[str, ...]
    key: tuple[str, ...]
    partition_key: tuple[str, ...]
    static: tuple[str, ...] = ()
    multi_cell: Mapping[str, str] = field(default_factory=dict)
    destination: str = ""

    @property
    def clustering(self) -> tuple[str, ...]:
        return tuple(c for c in self.key if c not in self.partition_key)


@dataclass(frozen=True)
class _Stamp:
    """Where a change stands in source order: its source partition, the micro-batch and read order
    it came in, its source timestamp. Within one partition read order decides, across partitions
    the timestamp (then read order). A row loaded from the table has no read order in its batch."""

    partition: str | None
    batch: int
    order: int
    ts: int
    position: str | None = None

    @classmethod
    def of(cls, change: Mapping[str, Any]) -> _Stamp:
        return cls(change["__partition"], change["__batch"], change["__ord"], change["__ts"], change["__position"])

    def later_than(self, other: _Stamp) -> bool:
        read_order = (self.batch, self.order) > (other.batch, other.order)
        if self.partition == other.partition:
            return read_order
        return self.ts > other.ts or (self.ts == other.ts and read_order)


_NOTHING = _Stamp(None, -1, -1, -(2**63))
_LAST = 2**63  # the read order of a stored row within the batch that wrote it: after all of it


@dataclass
class _Row:
    values: dict[str, Any]
    stamp: _Stamp
    dirty: bool = False


@dataclass
class _Partition:
    rows: dict[tuple[Any, ...], _Row]
    static_values: dict[str, Any]
    static_stamp: _Stamp
    static_dirty: bool = False
    held: dict[tuple[Any, ...], dict[str, Any]] = field(default_factory=dict)  # keys the table holds now
    partition_values: dict[str, Any] = field(default_factory=dict)  # the partition key's values


def fold_partition(
    layout: MirrorLayout, state: Sequence[Mapping[str, Any]], changes: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The rows to upsert and delete (``__action``) so that the table's rows of one partition,
    ``state``, become what ``changes`` make of them."""
    part = _load(layout, state)
    one_partition = len({c["__partition"] for c in changes}) == 1
    ordered = sorted(changes, key=lambda c: c["__ord"] if one_partition else (c["__ts"], c["__ord"]))
    for change in ordered:
        part.partition_values = part.partition_values or {c: change.get(c) for c in layout.partition_key}
        if _is_partition_level(layout, change):
            _apply_partition_change(layout, part, change)
        else:
            _apply_row_change(layout, part, change)
    return _output(layout, part)


def _row_key(layout: MirrorLayout, values: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(_comparable(values.get(c)) for c in layout.key)


def _load(layout: MirrorLayout, state: Sequence[Mapping[str, Any]]) -> _Partition:
    rows: dict[tuple[Any, ...], _Row] = {}
    static_values: dict[str, Any] = {}
    static_stamp = _NOTHING
    held: dict[tuple[Any, ...], dict[str, Any]] = {}
    for stored in state:
        key = _row_key(layout, stored)
        held[key] = {c: stored.get(c) for c in layout.key}
        values = {c: stored.get(c) for c in layout.columns}
        if layout.static:
            static_values = {c: values.pop(c, None) for c in layout.static}
            static_ts = stored.get(STATIC_STAMP)
            static_stamp = _NOTHING if static_ts is None else _Stamp(None, -1, -1, static_ts)
        if layout.clustering and all(stored.get(c) is None for c in layout.clustering):
            continue  # the partition's static values alone: not a row of its own
        ts, partition, position, batch = (stored.get(c) for c in STAMP_COLUMNS)
        # Whatever a batch changed it read before writing the row: a change of the same batch is a re-run.
        rows[key] = _Row(values, _Stamp(partition, -1 if batch is None else batch, _LAST, ts or 0, position))
    partition_values = {c: state[0].get(c) for c in layout.partition_key} if state else {}
    return _Partition(rows, static_values, static_stamp, held=held, partition_values=partition_values)


def _is_partition_level(layout: MirrorLayout, change: Mapping[str, Any]) -> bool:
    if not layout.clustering:
        return False
    key = json.loads(change["__key"]) if change["__key"] else {}
    return not any(c in key for c in layout.clustering)


def _headers(change: Mapping[str, Any]) -> dict[str, str]:
    given = change.get("__headers")
    if not given:
        return {}
    return dict(given.items()) if isinstance(given, Mapping) else dict(given)


def _apply_row_change(layout: MirrorLayout, part: _Partition, change: Mapping[str, Any]) -> None:
    key = _row_key(layout, change)
    row = part.rows.get(key)
    stamp = _Stamp.of(change)
    if change["__op"] == "d":
        # A tombstone wins a tie with the write it meets (Cassandra's rule).
        if row is not None and not row.stamp.later_than(stamp):
            del part.rows[key]
        return
    if row is not None and not stamp.later_than(row.stamp):
        return
    if row is None:
        row = part.rows[key] = _Row({c: None for c in layout.columns if c not in layout.static}, _NOTHING)
    after = json.loads(change["__after"]) if change["__after"] else {}
    _set_columns(layout, row.values, change, after, _headers(change), skip=set(layout.static))
    for name in layout.key:
        row.values[name] = change.get(name)
    row.stamp = stamp
    row.dirty = True


def _apply_partition_change(layout: MirrorLayout, part: _Partition, change: Mapping[str, Any]) -> None:
    stamp = _Stamp.of(change)
    headers = _headers(change)
    if change["__op"] == "d":
        deletion = headers.get("cdc.deletion", "partition")
        if deletion == "range":
            bounds = json.loads(headers["cdc.range"])
            doomed = [
                k for k, r in part.rows.items() if not r.stamp.later_than(stamp) and _in_range(layout, r.values, bounds)
            ]
        else:
            doomed = [k for k, r in part.rows.items() if not r.stamp.later_than(stamp)]
            if not part.static_stamp.later_than(stamp):
                if any(v is not None for v in part.static_values.values()):
                    part.static_dirty = True
                part.static_values = {c: None for c in layout.static}
                part.static_stamp = stamp
        for key in doomed:
            del part.rows[key]
        return
    if not stamp.later_than(part.static_stamp):
        return  # an older static write than the values the partition holds
    after = json.loads(change["__after"]) if change["__after"] else {}
    values = {c: part.static_values.get(c) for c in layout.static}
    _set_columns(layout, values, change, after, headers, only=set(layout.static))
    part.static_values = values
    part.static_stamp = stamp
    part.static_dirty = True


def _set_columns(
    layout: MirrorLayout,
    values: dict[str, Any],
    change: Mapping[str, Any],
    after: Mapping[str, Any],
    headers: Mapping[str, str],
    skip: set[str] | None = None,
    only: set[str] | None = None,
) -> None:
    """Set each column the change carries (present in ``after``), merging multi-cell deltas."""
    replaced = set(json.loads(headers["cdc.replaced"])) if "cdc.replaced" in headers else set()
    removed: dict[str, list[Any]] = json.loads(headers["cdc.removed"]) if "cdc.removed" in headers else {}
    deltas = change["__system"] in DELTA_SOURCES
    for name in layout.columns:
        if (skip and name in skip) or (only is not None and name not in only) or name in layout.key:
            continue
        kind = layout.multi_cell.get(name) if deltas and name not in replaced else None
        if name not in after and not (kind and name in removed):
            continue  # absent: not touched
        if kind is None:
            values[name] = change.get(name)
        else:
            values[name] = _merge_cells(
                layout, name, kind, values.get(name), change.get(name), after.get(name), removed.get(name, [])
            )


def _merge_cells(
    layout: MirrorLayout, name: str, kind: str, old: Any, added: Any, raw_added: Any, removed: list[Any]
) -> Any:
    """A multi-cell column after an update that added ``added`` and removed ``removed`` (labels)."""
    if kind == "set":
        gone = {_label_key(r) for r in removed}
        kept = [v for v in (old or []) if _label_key(_comparable(v)) not in gone]
        seen = {_label_key(_comparable(v)) for v in kept}
        for value in added or []:
            if _label_key(_comparable(value)) not in seen:
                kept.append(value)
                seen.add(_label_key(_comparable(value)))
        return _sorted_if_possible(kept) or None
    if kind == "map":
        entries = _map_items(old)
        gone = {_label_key(r) for r in removed}
        new = _map_items(added)
        replaced_keys = {_label_key(_comparable(k)) for k, _ in new} | gone
        merged = [(k, v) for k, v in entries if _label_key(_comparable(k)) not in replaced_keys] + new
        return merged or None
    if kind == "list":
        if removed:
            raise MirrorUnsupportedChangeError(
                f"destination {layout.destination!r}: list column {name!r} lost elements {removed} by cell id; the "
                "mirror keeps a list as its values, not their cell ids. Make the column frozen<list<...>>, or use "
                "mode: changelog for this table"
            )
        return [*(old or []), *(added or [])] or None
    # a user type: the fields the update wrote (present in its JSON), the others kept
    merged_fields = dict(old or {})
    written = raw_added if isinstance(raw_added, Mapping) else {}
    for field_name in written:
        merged_fields[field_name] = (added or {}).get(field_name)
    for field_name in removed:
        merged_fields[str(field_name)] = None
    return merged_fields


def _map_items(value: Any) -> list[tuple[Any, Any]]:
    if value is None:
        return []
    if isinstance(value, Mapping):
        return list(value.items())
    return [(entry[0], entry[1]) if isinstance(entry, tuple) else (entry["key"], entry["value"]) for entry in value]


def _sorted_if_possible(values: list[Any]) -> list[Any]:
    try:
        return sorted(values)
    except TypeError:
        return values


def _comparable(value: Any) -> Any:
    """A value as the change log's labels write it (a set element in ``cdc.removed``, a range
    bound in ``cdc.range``): timestamps as epoch milliseconds, dates as epoch days."""
    if isinstance(value, dt.datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
        return int(aware.timestamp() * 1000)
    if isinstance(value, dt.date):
        return (value - dt.date(1970, 1, 1)).days
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    return value


def _label_key(value: Any) -> Any:
    """A hashable form of a label (lists and maps become JSON text)."""
    if isinstance(value, (list, dict)):
        return json.dumps(value, sort_keys=True, default=str)
    return value


def _in_range(layout: MirrorLayout, values: Mapping[str, Any], bounds: Mapping[str, Any]) -> bool:
    """Whether a row's clustering values fall in a range deletion's bounds (clustering prefixes; an
    empty prefix is unbounded). Bounds in descending order (a DESC clustering column) are read
    the other way round."""
    clustering = [_comparable(values.get(c)) for c in layout.clustering]
    if any(v is None for v in clustering):
        return False
    start = [bounds["start"][c] for c in layout.clustering if c in bounds.get("start", {})]
    end = [bounds["end"][c] for c in layout.clustering if c in bounds.get("end", {})]
    start_inclusive, end_inclusive = bounds.get("start_inclusive", True), bounds.get("end_inclusive", True)
    width = min(len(start), len(end))
    if width and start[:width] > end[:width]:
        start, end, start_inclusive, end_inclusive = end, start, end_inclusive, start_inclusive
    if start:
        prefix = clustering[: len(start)]
        if prefix < start or (prefix == start and not start_inclusive):
            return False
    if end:
        prefix = clustering[: len(end)]
        if prefix > end or (prefix == end and not end_inclusive):
            return False
    return True


def _output(layout: MirrorLayout, part: _Partition) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    written: set[tuple[Any, ...]] = set()
    static = part.static_values if layout.static else {}
    has_static = any(v is not None for v in static.values())
    for key, row in part.rows.items():
        written.add(key)
        if row.dirty or part.static_dirty or key not in part.held:
            out.append(_emitted(layout, row.values, row.stamp, static, part.static_stamp))
    if layout.static and not part.rows and has_static:
        # A partition with static values and no row: one row without clustering values.
        keyless = {c: None for c in layout.columns} | part.partition_values
        key = _row_key(layout, keyless)
        written.add(key)
        if part.static_dirty or key not in part.held:
            out.append(_emitted(layout, keyless, part.static_stamp, static, part.static_stamp))
    for key, values in part.held.items():
        if key not in written:
            out.append({**values, ACTION: "delete"})
    return out


def _emitted(
    layout: MirrorLayout,
    values: Mapping[str, Any],
    stamp: _Stamp,
    static: Mapping[str, Any],
    static_stamp: _Stamp,
) -> dict[str, Any]:
    row = {c: values.get(c) for c in layout.columns}
    row.update(static)
    row.update(zip(STAMP_COLUMNS, (stamp.ts, stamp.partition, stamp.position, stamp.batch), strict=True))
    if layout.static:
        row[STATIC_STAMP] = None if static_stamp is _NOTHING else static_stamp.ts
    row[ACTION] = "upsert"
    return row
