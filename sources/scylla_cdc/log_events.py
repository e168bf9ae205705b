"""From CDC log rows to change events (ScyllaDB's "CDC log table", "Basic operations",
"Advanced column types" and "Preimages and postimages" documents).

One base write becomes one *batch* of log rows: same stream, same ``cdc$time``, numbered by
``cdc$batch_seq_no`` and ended by ``cdc$end_of_batch``; it lists the pre-images (operation 0),
then the deltas (1 update, 2 insert, 3 row delete, 4 partition delete, 5-8 range-delete bounds),
then the post-images (9). Each delta is one event:

* ``op``: insert ``c``, update ``u``, every deletion ``d`` (row, partition and range deletions
  are events, with their kind in the ``cdc.deletion`` header and a range's bounds in
  ``cdc.range``); a range deletion's two bound rows make one event.
* ``before``: the pre-image of the delta's row, when the table logs them.
* ``after``: the post-image when the table logs them; otherwise the delta applied: a written
  column with its value, a column set to null (``cdc$deleted_X``) as ``None``, untouched columns
  absent. A collection overwritten as a whole is named in ``cdc.replaced``; removed elements
  (``cdc$deleted_elements_X``) are in ``cdc.removed``: list elements by their timeuuid key (lists
  are maps keyed by timeuuid in the log), user-type fields by field index.
* ``cdc$ttl`` goes to ``cdc.ttl`` as ``{column: seconds}`` for the columns the write set.

Images are matched to their delta inside the batch by the row's primary key: the pre-image to the
first delta of that row, the post-image to the last. An image with no delta of its row, or an
operation outside 0-9, is rejected (dead-letter destination) with the row, never dropped.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from cdcflow.contract import Rejected
from cdcflow.converters import json_default
from cdcflow.events import ChangeEvent, Column, Op, RowSchema, SourceInfo
from cdcflow.sources.cql.cqltypes import CqlType, from_driver, user_type_value, user_types_of
from cdcflow.sources.scylla_cdc.exceptions import LogRowError

__all__ = [
    "DELETED_ELEMENTS_PREFIX",
    "DELETED_PREFIX",
    "LogLayout",
    "LogRow",
    "batch_events",
    "batches",
]

DELETED_PREFIX = "cdc$deleted_"
DELETED_ELEMENTS_PREFIX = "cdc$deleted_elements_"
PRE_IMAGE, UPDATE, INSERT, ROW_DELETE, PARTITION_DELETE, POST_IMAGE = 0, 1, 2, 3, 4, 9
_LEFT_BOUNDS = {5: True, 6: False}  # inclusive?
_RIGHT_BOUNDS = {7: True, 8: False}
_ROW_LEVEL = (UPDATE, INSERT, ROW_DELETE)
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
    closed_time_us: int | None
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
    row_schema: RowSchema = field(init=False, compare=False)
    key_columns: tuple[str, ...] = field(init=False, compare=False)
    _converted: frozenset[str] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key_columns", self.partition_key + self.clustering)
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


@dataclass
class _Delta:
    rows: list[LogRow]  # one row, or a range deletion's two bounds
    key: dict[str, Any]
    row_key: str | None  # the row's primary key as text, for images; None for partition and range


def _key_text(key: Mapping[str, Any]) -> str:
    return json.dumps(key, sort_keys=True, default=json_default, separators=(",", ":"))


def _key(layout: LogLayout, row: LogRow, columns: Sequence[str]) -> dict[str, Any]:
    key = {}
    for name in columns:
        raw = row.values.get(name)
        if raw is not None:  # a static row's delta has no clustering values
            key[name] = layout.value(name, raw)
    return key


def _image(layout: LogLayout, row: LogRow, whole_row: bool) -> dict[str, Any]:
    image = _key(layout, row, layout.key_columns)
    for name in layout.value_columns:
        raw = row.values.get(name)
        if raw is not None:
            image[name] = layout.value(name, raw)
        elif whole_row or row.values.get(DELETED_PREFIX + name):
            image[name] = None
    return image


def _source(layout: LogLayout, partition: str, row: LogRow) -> SourceInfo:
    position = {"stream": row.stream.hex(), "time": str(row.time), "seq": row.seq}
    return SourceInfo(
        "scylla", layout.cluster, layout.keyspace, layout.table, partition, position, row.ts_us, False, _VERSION
    )


def _headers(values: Mapping[str, Any]) -> dict[str, str] | None:
    if not values:
        return None
    return {
        name: value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=json_default)
        for name, value in values.items()
    }


def _applied_delta(layout: LogLayout, row: LogRow, headers: dict[str, Any]) -> dict[str, Any]:
    after = _key(layout, row, layout.key_columns)
    replaced, removed, ttl = [], {}, {}
    for name in layout.value_columns:
        raw = row.values.get(name)
        deleted = bool(row.values.get(DELETED_PREFIX + name))
        elements = row.values.get(DELETED_ELEMENTS_PREFIX + name)
        if raw is not None:
            after[name] = layout.value(name, raw)
            if deleted:
                replaced.append(name)
            if row.ttl is not None:
                ttl[name] = row.ttl
        elif deleted:
            after[name] = None
        if elements:
            removed[name] = sorted(layout.value(DELETED_ELEMENTS_PREFIX + name, elements), key=str)
        if not deleted and layout.types[name].kind == "udt" and layout.types[name].multi_cell:
            _user_type_field_update(layout, name, after, elements)
    if replaced:
        headers["cdc.replaced"] = replaced
    if removed:
        headers["cdc.removed"] = removed
    if ttl:
        headers["cdc.ttl"] = ttl
    return after


def _user_type_field_update(layout: LogLayout, name: str, after: dict[str, Any], elements: Any) -> None:
    """A non-frozen user type's field update (issue 13): the log's value has every field, null
    where the write did not touch it; the event carries only the fields written, and the fields
    set to null (``cdc$deleted_elements_X``, by index) as ``None``."""
    written = after.get(name) or {}
    nulled = {int(i) for i in layout.value(DELETED_ELEMENTS_PREFIX + name, elements) or ()} if elements else set()
    names = layout.types[name].field_names
    fields = [(i, written.get(field)) for i, field in enumerate(names) if written.get(field) is not None or i in nulled]
    if fields or name in after:
        after[name] = user_type_value(names, fields, whole=False)


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
    return Rejected(event, LogRowError(f"{where}: {reason}"), "source")


def batch_events(
    layout: LogLayout, batch: Sequence[LogRow], partition: str, now_ms: int
) -> Iterator[ChangeEvent | Rejected]:
    """The events of one base write's log rows, in ``cdc$batch_seq_no`` order of their deltas."""
    pre: dict[str, LogRow] = {}
    post: dict[str, LogRow] = {}
    deltas: list[_Delta] = []
    pending_left: LogRow | None = None
    # Images are matched to deltas by the row's key as text; a batch without images needs no text.
    has_images = any(r.operation in (PRE_IMAGE, POST_IMAGE) for r in batch)
    for row in sorted(batch, key=lambda r: r.seq) if len(batch) > 1 else batch:
        operation = row.operation
        if operation in (PRE_IMAGE, POST_IMAGE):
            images = pre if operation == PRE_IMAGE else post
            images.setdefault(_key_text(_key(layout, row, layout.key_columns)), row)
        elif operation in _ROW_LEVEL:
            key = _key(layout, row, layout.key_columns)
            deltas.append(_Delta([row], key, _key_text(key) if has_images else ""))
        elif operation == PARTITION_DELETE:
            deltas.append(_Delta([row], _key(layout, row, layout.partition_key), None))
        elif operation in _LEFT_BOUNDS:
            if pending_left is not None:
                deltas.append(_Delta([pending_left], _key(layout, pending_left, layout.partition_key), None))
            pending_left = row
        elif operation in _RIGHT_BOUNDS:
            bounds = [pending_left, row] if pending_left is not None else [row]
            deltas.append(_Delta(bounds, _key(layout, row, layout.partition_key), None))
            pending_left = None
        else:
            yield _rejected(layout, partition, row, f"unknown cdc$operation {operation}", now_ms)
    if pending_left is not None:
        deltas.append(_Delta([pending_left], _key(layout, pending_left, layout.partition_key), None))

    first_of: dict[str, int] = {}
    last_of: dict[str, int] = {}
    for index, delta in enumerate(deltas):
        if delta.row_key is not None:
            first_of.setdefault(delta.row_key, index)
            last_of[delta.row_key] = index
    for row_key, images in (("pre", pre), ("post", post)):
        for text, row in images.items():
            if text not in first_of:
                yield _rejected(layout, partition, row, f"a {row_key}-image with no delta of its row", now_ms)

    for index, delta in enumerate(deltas):
        yield _delta_event(layout, partition, delta, index, first_of, last_of, pre, post, now_ms)


def _delta_event(
    layout: LogLayout,
    partition: str,
    delta: _Delta,
    index: int,
    first_of: Mapping[str, int],
    last_of: Mapping[str, int],
    pre: Mapping[str, LogRow],
    post: Mapping[str, LogRow],
    now_ms: int,
) -> ChangeEvent:
    row = delta.rows[0]
    operation = delta.rows[-1].operation
    headers: dict[str, Any] = {}
    before = after = None
    if delta.row_key is not None and first_of.get(delta.row_key) == index and delta.row_key in pre:
        before = _image(layout, pre[delta.row_key], whole_row=False)
    if operation in (UPDATE, INSERT):
        op = Op.CREATE if operation == INSERT else Op.UPDATE
        assert delta.row_key is not None
        image = post.get(delta.row_key) if last_of.get(delta.row_key) == index else None
        after = _image(layout, image, whole_row=True) if image is not None else _applied_delta(layout, row, headers)
        if image is not None and row.ttl is not None:
            headers["cdc.ttl"] = {n: row.ttl for n in layout.value_columns if row.values.get(n) is not None}
    else:
        op = Op.DELETE
        if operation == ROW_DELETE:
            headers["cdc.deletion"] = "row"
        elif operation == PARTITION_DELETE:
            headers["cdc.deletion"] = "partition"
        else:
            headers["cdc.deletion"] = "range"
            headers["cdc.range"] = _range(layout, delta.rows)
    return ChangeEvent(
        op,
        delta.key,
        before,
        after,
        _source(layout, partition, row),
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
