"""From CDC log rows to change events (ScyllaDB's "CDC log table", "Basic operations",
"Advanced column types" and "Preimages and postimages" documents, and its ``cdc/split.cc`` and
``cdc/log.cc``).

ScyllaDB logs a base write as one *record* per timestamp: log rows of one stream and one
``cdc$time``, numbered by ``cdc$batch_seq_no`` and ended by ``cdc$end_of_batch``: pre-images
(operation 0), deltas (1 update, 2 insert, 3 row delete, 4 partition delete, 5-8 range-delete
bounds, -3/-4 deletions ScyllaDB made itself), post-images (9). It splits one row's change into
several delta rows (one per TTL; a collection's tombstone apart from its cells; a row marker
apart from collection cells), so the events are one per row per record, as the
``cassandra_commitlog`` source gives one per row per write:

* ``op``: insert ``c`` (any of the row's deltas is an insert), update ``u``, every deletion ``d``
  (row, partition and range deletions are events, with their kind in the ``cdc.deletion`` header,
  a range's bounds in ``cdc.range``, ``cdc.origin: service`` for -3/-4).
* ``before``: the pre-image of the row, when the table logs them (a partition deletion of a table
  without clustering columns gets one since ScyllaDB 2026.1): the columns it names, a null one
  as ``None``.
* ``after``: the post-image when the table logs them (every column of the row's kind, a missing
  one ``None``); otherwise the deltas applied in order: a
  written column with its value, a column set to null (``cdc$deleted_X``) as ``None``, untouched
  columns absent. A collection or user type overwritten or deleted as a whole is named in
  ``cdc.replaced``; removed elements (``cdc$deleted_elements_X``) are in ``cdc.removed``: list
  elements by their timeuuid key (lists are maps keyed by timeuuid in the log), user-type fields
  by name. A user-type value whose fields are all null only marks the column as touched.
* ``cdc$ttl`` goes to ``cdc.ttl`` as ``{column: seconds}`` for the columns the write set, and for
  the primary key columns when an INSERT's row marker has a TTL (an INSERT of keys alone too).
* A table that logs deltas of keys alone (``cdc = {'delta': 'keys'}``, read only with post-images)
  marks its events ``cdc.delta: keys``.
* An image holds one kind of column: the static row's the static columns, a clustered row's the
  regular ones (``cdc/log.cc`` generate_image). Columns an image says nothing of are absent from
  ``before``/``after``, never ``None``, and ``cdc.absent`` names them per image
  (``{"before": [...], "after": [...]}``) for formats that give every column a value (Avro).

A column deleted with ``DELETE c FROM`` is logged one microsecond after the write (its tombstone
is at the write's timestamp, and ScyllaDB logs tombstones at ``t + 1``): a record, and an event,
of its own. Images are matched to the changes of the record by the row's primary key: the
pre-image to the first change of that row, the post-image to the last. An image with no change of
its row, or an unknown operation, is rejected (dead-letter destination) with the row, never
dropped.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Literal

from cdcflow.contract import Rejected
from cdcflow.converters import json_default
from cdcflow.events import ChangeEvent, Column, Op, RowSchema, SourceInfo
from cdcflow.record_errors import SOURCE_STAGE
from cdcflow.sources.cql.cqltypes import CqlType, from_driver, user_type_value, user_types_of
from cdcflow.sources.scylla_cdc.exceptions import LogRowError

__all__ = [
    "DELETED_ELEMENTS_PREFIX",
    "DELETED_PREFIX",
    "LogLayout",
    "LogRow",
    "batch_events",
    "batches",
    "snapshot_source",
]

DELETED_PREFIX = "cdc$deleted_"
DELETED_ELEMENTS_PREFIX = "cdc$deleted_elements_"
PRE_IMAGE, UPDATE, INSERT, ROW_DELETE, PARTITION_DELETE, POST_IMAGE = 0, 1, 2, 3, 4, 9
# ScyllaDB's own deletions (cdc/log.hh service_row_delete = -3, service_partition_delete = -4)
_ROW_DELETES = (ROW_DELETE, -3)
_PARTITION_DELETES = (PARTITION_DELETE, -4)
_LEFT_BOUNDS = {5: True, 6: False}  # inclusive?
_RIGHT_BOUNDS = {7: True, 8: False}
# Native types whose driver value differs from the event value (datetime -> ms, UUID -> text...).
_DRIVER_FORMS = frozenset({"timestamp", "date", "time", "decimal", "uuid", "timeuuid", "inet", "duration"})


def _version() -> str:
    try:
        return metadata.version("cdcflow")
    except metadata.PackageNotFoundError:
        return "0"


_VERSION = _version()


@dataclass(slots=True)
class LogRow:
    """One row of a CDC log table: the ``cdc$`` metadata columns and the rest by name, as the
    driver returned them."""

    stream: bytes
    time: uuid.UUID
    ts_us: int
    seq: int
    operation: int | None
    ttl: int | None
    end_of_batch: bool | None
    values: dict[str, Any]

    @property
    def sort_key(self) -> tuple[int, bytes, bytes, int]:
        """The partition's read order: time, then the rest of the time UUID, stream, sequence."""
        return (self.ts_us, self.time.bytes, self.stream, self.seq)


@dataclass(frozen=True)
class LogLayout:
    """What each column of a log table is, for one set of columns (it changes with ALTER TABLE)."""

    cluster: str
    keyspace: str
    table: str
    partition_key: tuple[str, ...]
    clustering: tuple[str, ...]
    value_columns: tuple[str, ...]
    types: Mapping[str, CqlType]
    static_columns: frozenset[str] = frozenset()
    delta: Literal["full", "keys"] = "full"  # the table's cdc 'delta' option
    row_schema: RowSchema = field(init=False, compare=False)
    key_columns: tuple[str, ...] = field(init=False, compare=False)
    # non-frozen collections and user types: they have a cdc$deleted_elements_X column
    multi_cell_columns: frozenset[str] = field(init=False, compare=False)
    user_type_columns: frozenset[str] = field(init=False, compare=False)
    _converted: frozenset[str] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key_columns", self.partition_key + self.clustering)
        multi = frozenset(n for n in self.value_columns if DELETED_ELEMENTS_PREFIX + n in self.types)
        object.__setattr__(self, "multi_cell_columns", multi)
        object.__setattr__(self, "user_type_columns", frozenset(n for n in multi if self.types[n].kind == "udt"))
        key = tuple(Column(name, self.types[name].text, optional=False) for name in self.key_columns)
        values = tuple(Column(name, self.types[name].text) for name in self.value_columns)
        user_types = user_types_of(self.types[name] for name in (*self.key_columns, *self.value_columns))
        object.__setattr__(
            self,
            "row_schema",
            RowSchema(f"{self.cluster}.{self.keyspace}.{self.table}", key, key + values, user_types=user_types),
        )
        # The driver already returns event values for most native types (int, text, double...).
        object.__setattr__(
            self,
            "_converted",
            frozenset(n for n, t in self.types.items() if t.kind != "native" or t.text in _DRIVER_FORMS),
        )

    def value(self, name: str, raw: Any) -> Any:
        if raw is None or name not in self._converted:
            return raw
        return from_driver(raw, self.types[name])


def batches(rows: Sequence[LogRow]) -> Iterator[list[LogRow]]:
    """Rows in read order, cut into base writes: one stream and ``cdc$time`` each."""
    current: list[LogRow] = []
    for row in rows:
        if current and (row.time != current[0].time or row.stream != current[0].stream):
            yield current
            current = []
        current.append(row)
    if current:
        yield current


def _identity(layout: LogLayout, row: LogRow) -> Hashable:
    """The row's primary key as the driver gave it (a static row's clustering columns are null),
    to pair a row's deltas and images; as text when a key value is unhashable (a frozen map)."""
    raw = tuple(row.values.get(n) for n in layout.key_columns)
    try:
        hash(raw)
    except TypeError:
        return json.dumps(_key(layout, row, layout.key_columns), sort_keys=True, default=json_default)
    return raw


def _key(layout: LogLayout, row: LogRow, columns: Sequence[str]) -> dict[str, Any]:
    key = {}
    for name in columns:
        raw = row.values.get(name)
        if raw is not None:  # a static row's delta has no clustering values
            key[name] = layout.value(name, raw)
    return key


def _image_columns(layout: LogLayout, row: LogRow) -> tuple[str, ...]:
    """The columns an image row can hold: a row's image is built from one kind of column, the
    static row's from the static columns (its clustering columns are null), a clustered row's
    from the regular ones (scylladb ``cdc/log.cc`` line 1849 picks the kind, 1909 takes
    ``_schema->columns(kind)`` for a post-image; a pre-image's columns are of that kind too)."""
    if not layout.static_columns:
        return layout.value_columns
    static_row = bool(layout.clustering) and all(row.values.get(n) is None for n in layout.clustering)
    return tuple(n for n in layout.value_columns if (n in layout.static_columns) == static_row)


def _image(layout: LogLayout, row: LogRow, post_image: bool) -> tuple[dict[str, Any], list[str]]:
    """An image row as a row, and the value columns it says nothing of (absent from it). A
    post-image holds every column of its kind, a missing one is null; a pre-image holds the
    columns it names, a null one flagged ``cdc$deleted_X`` (``cdc/log.cc`` generate_image)."""
    image = _key(layout, row, layout.key_columns)
    for name in _image_columns(layout, row):
        raw = row.values.get(name)
        if raw is not None:
            image[name] = layout.value(name, raw)
        elif post_image or row.values.get(DELETED_PREFIX + name):
            image[name] = None
    return image, [n for n in layout.value_columns if n not in image]


def _source(layout: LogLayout, partition: str, row: LogRow) -> SourceInfo:
    position = {"stream": row.stream.hex(), "time": str(row.time), "seq": row.seq}
    return SourceInfo(
        "scylla", layout.cluster, layout.keyspace, layout.table, partition, position, row.ts_us, False, _VERSION
    )


def snapshot_source(layout: LogLayout, partition: str, position: Mapping[str, Any], read_at_us: int) -> SourceInfo:
    """The ``source`` block of a row a snapshot read from ``layout``'s base table, stamped with
    the read time (``snapshot = true``)."""
    return SourceInfo(
        "scylla", layout.cluster, layout.keyspace, layout.table, partition, position, read_at_us, True, _VERSION
    )


def _headers(values: Mapping[str, Any]) -> dict[str, str] | None:
    if not values:
        return None
    return {
        name: value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=json_default)
        for name, value in values.items()
    }


def _all_null_udt(raw: Any) -> bool:
    """A user-type value with no field set: ScyllaDB writes one whenever a non-frozen user type is
    touched (``cdc/log.cc`` udt_visitor builds it from one slot per field), so it says nothing."""
    values = raw.values() if isinstance(raw, Mapping) else raw
    return all(v is None for v in values)


def _merged(old: Any, new: Any) -> Any:
    """Two parts of one multi-cell column written by one base write (one row per TTL)."""
    from cassandra.util import SortedSet

    if isinstance(new, Mapping) and isinstance(old, Mapping):
        return {**old, **new}
    if isinstance(new, set | frozenset | SortedSet) and isinstance(old, set | frozenset | SortedSet):
        return SortedSet([*old, *new])
    if hasattr(new, "_fields") and hasattr(old, "_fields"):  # user types, field by field
        return {f: getattr(new, f) if getattr(new, f) is not None else getattr(old, f) for f in new._fields}
    return new


def _coalesced_delta(layout: LogLayout, rows: Sequence[LogRow], headers: dict[str, Any]) -> dict[str, Any]:
    """The changes of one row's delta rows (one per TTL and change type, ``cdc/split.cc``) as one
    ``after``: later rows win, a tombstone (``cdc$deleted_X``) drops what came before it."""
    values: dict[str, Any] = {}
    deleted: set[str] = set()
    removed: dict[str, set[Any]] = {}
    ttl: dict[str, int] = {}
    for row in rows:
        if row.operation == INSERT and row.ttl is not None:
            # An insert row's cdc$ttl is its row marker's (cdc/log.cc lines 1540-1541): the
            # primary key lives that long, also when the INSERT wrote nothing else.
            ttl.update(dict.fromkeys(layout.key_columns, row.ttl))
        for name in layout.value_columns:
            raw = row.values.get(name)
            if raw is not None and name in layout.user_type_columns and _all_null_udt(raw):
                raw = None
            if row.values.get(DELETED_PREFIX + name):
                values[name] = None
                deleted.add(name)
            if raw is not None:
                previous = values.get(name)
                values[name] = _merged(previous, raw) if previous is not None else raw
                if row.ttl is not None:
                    ttl[name] = row.ttl
            elements = row.values.get(DELETED_ELEMENTS_PREFIX + name)
            if elements:
                removed.setdefault(name, set()).update(elements)
    after = _key(layout, rows[0], layout.key_columns)
    for name, raw in values.items():
        after[name] = layout.value(name, raw)
    for name in layout.user_type_columns - deleted:
        _user_type_field_update(layout, name, after, removed.get(name, set()))
    replaced = [n for n in layout.value_columns if n in deleted and n in layout.multi_cell_columns]
    if replaced:
        headers["cdc.replaced"] = replaced
    if removed:
        headers["cdc.removed"] = {name: _removed_labels(layout, name, items) for name, items in removed.items()}
    if ttl:
        headers["cdc.ttl"] = ttl
    return after


def _user_type_field_update(layout: LogLayout, name: str, after: dict[str, Any], nulled: set[Any]) -> None:
    """A non-frozen user type's field update (issue 13): the log's value has every field, null
    where the write did not touch it; the event carries only the fields written, and those set to
    null (``cdc$deleted_elements_X``, field indexes) as ``None``. A value written whole
    (``cdc$deleted_X``) keeps every field; the caller leaves those out."""
    if name not in after and not nulled:
        return
    written = after.get(name) or {}
    names = layout.types[name].field_names
    indexes = {int(i) for i in nulled}
    fields = [(i, written.get(f)) for i, f in enumerate(names) if written.get(f) is not None or i in indexes]
    after[name] = user_type_value(names, fields, whole=False)


def _removed_labels(layout: LogLayout, name: str, items: set[Any]) -> list[Any]:
    """Removed elements as the commit-log source names them: user-type fields by name, list
    elements by their timeuuid, set elements and map keys by value."""
    cql = layout.types[name]
    if cql.kind == "udt":
        return [cql.field_names[i] if 0 <= i < len(cql.field_names) else i for i in sorted(items)]
    return sorted(layout.value(DELETED_ELEMENTS_PREFIX + name, items), key=str)


def _rejected(layout: LogLayout, partition: str, row: LogRow, reason: str, now_ms: int) -> Rejected:
    values = {name: layout.value(name, raw) for name, raw in row.values.items() if raw is not None}
    headers = _headers({"cdc.operation": str(row.operation)})
    event = ChangeEvent(
        Op.UPDATE,
        _key(layout, row, layout.partition_key),
        None,
        values,
        _source(layout, partition, row),
        now_ms,
        layout.row_schema,
        headers=headers,
    )
    where = f"{layout.keyspace}.{layout.table} stream {row.stream.hex()} time {row.time} seq {row.seq}"
    return Rejected(event, LogRowError(f"{where}: {reason}"), SOURCE_STAGE)


@dataclass
class _Change:
    """One event of a record: a row's upserts (operations 1 and 2, coalesced), a row or
    partition deletion, or a range deletion's two bounds."""

    rows: list[LogRow]
    key: dict[str, Any]
    row_key: Hashable | None  # the row's identity, for images; None for ranges and for partition
    # deletions of tables with clustering columns


def batch_events(
    layout: LogLayout, batch: Sequence[LogRow], partition: str, now_ms: int
) -> Iterator[ChangeEvent | Rejected]:
    """The events of one record (one stream and ``cdc$time``), in ``cdc$batch_seq_no`` order of
    each change's first row: a row's inserts and updates make one event."""
    if len(batch) == 1 and batch[0].operation in (UPDATE, INSERT):
        row = batch[0]  # the common case: nothing to pair or coalesce
        yield _change_event(
            layout, partition, _Change([row], _key(layout, row, layout.key_columns), None), {}, {}, now_ms
        )
        return
    pre: dict[Hashable, LogRow] = {}
    post: dict[Hashable, LogRow] = {}
    changes: list[_Change] = []
    upserts: dict[Hashable, _Change] = {}
    pending_left: LogRow | None = None
    for row in sorted(batch, key=lambda r: r.seq):
        operation = row.operation
        if operation in (PRE_IMAGE, POST_IMAGE):
            images = pre if operation == PRE_IMAGE else post
            images.setdefault(_identity(layout, row), row)
        elif operation in (UPDATE, INSERT):
            identity = _identity(layout, row)
            upsert = upserts.get(identity)
            if upsert is None:
                upsert = upserts[identity] = _Change([], _key(layout, row, layout.key_columns), identity)
                changes.append(upsert)
            upsert.rows.append(row)
        elif operation in _ROW_DELETES:
            changes.append(_Change([row], _key(layout, row, layout.key_columns), _identity(layout, row)))
        elif operation in _PARTITION_DELETES:
            key = _key(layout, row, layout.partition_key)
            # Without clustering columns the partition is the row: its pre-image (2026.1+) pairs.
            changes.append(_Change([row], key, None if layout.clustering else _identity(layout, row)))
        elif operation in _LEFT_BOUNDS:
            if pending_left is not None:
                changes.append(_Change([pending_left], _key(layout, pending_left, layout.partition_key), None))
            pending_left = row
        elif operation in _RIGHT_BOUNDS:
            bounds = [pending_left, row] if pending_left is not None else [row]
            changes.append(_Change(bounds, _key(layout, row, layout.partition_key), None))
            pending_left = None
        else:
            yield _rejected(layout, partition, row, f"unknown cdc$operation {operation}", now_ms)
    if pending_left is not None:
        changes.append(_Change([pending_left], _key(layout, pending_left, layout.partition_key), None))

    first_of: dict[Hashable, int] = {}
    last_of: dict[Hashable, int] = {}
    for index, change in enumerate(changes):
        if change.row_key is not None:
            first_of.setdefault(change.row_key, index)
            last_of[change.row_key] = index
    for which, images in (("pre", pre), ("post", post)):
        for identity, row in images.items():
            if identity not in first_of:
                yield _rejected(layout, partition, row, f"a {which}-image with no delta of its row", now_ms)
    for index, change in enumerate(changes):
        row_key = change.row_key
        before = pre.get(row_key) if row_key is not None and first_of.get(row_key) == index else None
        after = post.get(row_key) if row_key is not None and last_of.get(row_key) == index else None
        paired = {k: v for k, v in (("before", before), ("after", after)) if v is not None}
        yield _change_event(layout, partition, change, paired, {}, now_ms)


def _change_event(
    layout: LogLayout,
    partition: str,
    change: _Change,
    images: Mapping[str, LogRow],
    headers: dict[str, Any],
    now_ms: int,
) -> ChangeEvent:
    first = change.rows[0]
    operation = change.rows[-1].operation
    before = None
    absent: dict[str, list[str]] = {}
    before_row = images.get("before")
    if before_row is not None:
        before, absent["before"] = _image(layout, before_row, post_image=False)
    after = None
    if operation in (UPDATE, INSERT):
        op = Op.CREATE if any(r.operation == INSERT for r in change.rows) else Op.UPDATE
        after = _coalesced_delta(layout, change.rows, headers)
        image = images.get("after")
        if image is not None:
            after, absent["after"] = _image(layout, image, post_image=True)  # the whole row after
    else:
        op = Op.DELETE
        if operation in _ROW_DELETES:
            headers["cdc.deletion"] = "row"
        elif operation in _PARTITION_DELETES:
            headers["cdc.deletion"] = "partition"
        else:
            headers["cdc.deletion"] = "range"
            headers["cdc.range"] = _range(layout, change.rows)
        if operation is not None and operation < 0:
            # -3 / -4: deleted by ScyllaDB itself (the expiration service of Alternator TTL and,
            # since 2026.2, CQL per-row TTL; cdc/log.hh service_row_delete, service_partition_delete)
            headers["cdc.origin"] = "service"
    if layout.delta == "keys":
        # The log's delta rows hold keys alone: what only they say (cdc.replaced, cdc.removed, a
        # column's TTL) is missing, and after is the post-image (the source requires them).
        headers["cdc.delta"] = "keys"
    absent = {image: columns for image, columns in absent.items() if columns}
    if absent:
        # Avro records and Parquet rows have every column: this tells what an image left out
        # from what it says is null (JSON leaves them out).
        headers["cdc.absent"] = absent
    return ChangeEvent(
        op,
        change.key,
        before,
        after,
        _source(layout, partition, first),
        now_ms,
        layout.row_schema,
        headers=_headers(headers),
    )


def _range(layout: LogLayout, rows: Sequence[LogRow]) -> dict[str, Any]:
    """A range deletion's bounds: the clustering prefix of each bound row (null columns are not
    part of it; an unbounded side is an empty prefix) and whether it is inclusive."""
    bounds: dict[str, Any] = {"start": {}, "start_inclusive": True, "end": {}, "end_inclusive": True}
    for row in rows:
        side = "start" if row.operation in _LEFT_BOUNDS else "end"
        inclusive = _LEFT_BOUNDS.get(row.operation or 0, _RIGHT_BOUNDS.get(row.operation or 0, True))
        bounds[side] = _key(layout, row, layout.clustering)
        bounds[f"{side}_inclusive"] = inclusive
    return bounds
