"""From a decoded partition update to row changes: what happened to which row, with decoded values.

One partition update can hold a partition deletion, range deletions, a static row and any number
of rows; each becomes a :class:`RowChange` of its own, so no deletion is silently dropped.

``after`` holds only what the mutation carried (the ``delta`` row image): a column absent from it
was not touched, a column present as ``None`` was deleted. For a multi-cell column (non-frozen
collection or user type) the value is what the mutation added or set; a whole-column replacement
or deletion shows as ``replaced``, removed elements as ``removed``. A non-frozen user type's field
update holds only the fields written (a field set to null as ``None``, also named in ``removed``).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from cdcflow.events import ChangeEvent, Op, RowSchema, SourceInfo
from cdcflow.jsontext import with_text_keys
from cdcflow.sources.cassandra_commitlog.exceptions import MutationDecodeError
from cdcflow.sources.cassandra_commitlog.mutation import (
    Cell,
    DeletionTime,
    PartitionUpdate,
    RangeTombstoneMarker,
    RowUpdate,
)
from cdcflow.sources.cassandra_commitlog.schema import ColumnSchema, TableSchema

__all__ = ["VERSION", "RowChange", "cassandra_source", "change_event", "header_json", "row_changes"]

# What bytes that do not fit their type raise while decoding (ValueDecodeError is a ValueError;
# ArithmeticError: a decimal whose scale no float or Decimal can take).
_VALUE_ERRORS = (ValueError, IndexError, struct.error, ArithmeticError)


def _cdcflow_version() -> str:
    try:
        return metadata.version("cdcflow")
    except metadata.PackageNotFoundError:
        return "0"


VERSION = _cdcflow_version()
"""cdcflow's version, as every Cassandra event's ``source.version`` gives it."""


def cassandra_source(
    cluster: str,
    keyspace: str,
    table: str,
    partition: str,
    position: Mapping[str, Any],
    ts_us: int,
    snapshot: bool = False,
) -> SourceInfo:
    """The ``source`` block of every Cassandra event (seed 001): where the change was read, and when written."""
    return SourceInfo("cassandra", cluster, keyspace, table, partition, position, ts_us, snapshot, VERSION)


@dataclass(slots=True)
class RowChange:
    """One change to one row (or partition, or range) of one table."""

    op: str  # "c" insert, "u" update, "d" delete
    keyspace: str
    table: str
    key: dict[str, Any]  # partition key and, for rows, clustering columns
    after: dict[str, Any] | None  # the columns the mutation wrote (None for deletions)
    ts_us: int  # the newest write timestamp in the change
    deletion: str | None = None  # "partition", "range", "row" for deletions
    range: dict[str, Any] | None = None  # start/end clustering bounds of a range deletion
    replaced: list[str] = field(default_factory=list)  # multi-cell columns overwritten as a whole
    removed: dict[str, list[Any]] = field(default_factory=dict)  # elements removed from multi-cell columns
    ttl: dict[str, int] = field(default_factory=dict)  # columns written with a TTL, in seconds

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "op": self.op,
            "keyspace": self.keyspace,
            "table": self.table,
            "key": self.key,
            "after": self.after,
            "ts_us": self.ts_us,
        }
        for name in ("deletion", "range", "replaced", "removed", "ttl"):
            value = getattr(self, name)
            if value:
                document[name] = value
        return document


def _decode(column: ColumnSchema, raw: bytes | None) -> Any:
    if raw is None:
        return None
    try:
        return column.type.decode(raw)
    except _VALUE_ERRORS as exc:
        raise MutationDecodeError(f"column {column.name!r} ({column.type_text}): {exc}") from exc


def _partition_key(update: PartitionUpdate) -> dict[str, Any]:
    table = update.table
    return {
        column.name: _decode(column, raw) for column, raw in zip(table.partition_key, update.key_parts, strict=True)
    }


def _clustering(table: TableSchema, values: tuple[bytes | None, ...]) -> dict[str, Any]:
    return {column.name: _decode(column, raw) for column, raw in zip(table.clustering, values, strict=False)}


def row_changes(update: PartitionUpdate) -> Iterator[RowChange]:
    """Every change the partition update makes, in the order Cassandra applies them."""
    table = update.table
    partition_key = _partition_key(update)
    if update.partition_deletion is not None:
        yield RowChange(
            "d",
            table.keyspace,
            table.table,
            partition_key,
            None,
            update.partition_deletion.marked_for_delete_at,
            "partition",
        )
    yield from _range_deletions(update, partition_key)
    if update.static_row is not None:
        yield _row_change(table, dict(partition_key), update.static_row)
    for row in update.rows:
        yield _row_change(table, {**partition_key, **_clustering(table, row.clustering)}, row)


def _range_deletions(update: PartitionUpdate, partition_key: dict[str, Any]) -> Iterator[RowChange]:
    # Markers come in order: a start bound (or boundary) opens a range, the next end bound closes it.
    table = update.table
    opened: tuple[RangeTombstoneMarker, DeletionTime] | None = None
    for marker in update.markers:
        if marker.kind.endswith("_start") or marker.kind in ("excl_end_incl_start", "incl_end_excl_start"):
            if opened is not None and marker.end_deletion is not None:
                yield _range_change(table, partition_key, opened[0], marker, opened[1])
            start_deletion = marker.start_deletion or marker.deletion
            assert start_deletion is not None
            opened = (marker, start_deletion)
        elif opened is not None:
            yield _range_change(table, partition_key, opened[0], marker, opened[1])
            opened = None


def _range_change(
    table: TableSchema,
    partition_key: dict[str, Any],
    start: RangeTombstoneMarker,
    end: RangeTombstoneMarker,
    deletion: DeletionTime,
) -> RowChange:
    bounds = {
        "start": _clustering(table, start.clustering),
        "start_inclusive": start.kind in ("incl_start", "excl_end_incl_start"),
        "end": _clustering(table, end.clustering),
        "end_inclusive": end.kind in ("incl_end", "incl_end_excl_start"),
    }
    return RowChange(
        "d", table.keyspace, table.table, dict(partition_key), None, deletion.marked_for_delete_at, "range", bounds
    )


def _row_change(table: TableSchema, key: dict[str, Any], row: RowUpdate) -> RowChange:
    if row.deletion is not None and not row.cells:
        return RowChange("d", table.keyspace, table.table, key, None, row.deletion.marked_for_delete_at, "row")
    change = RowChange(
        "c" if row.timestamp is not None else "u", table.keyspace, table.table, key, {}, row.timestamp or 0
    )
    assert change.after is not None
    multi_cell: dict[str, list[Cell]] = {}
    for cell in row.cells:
        change.ts_us = max(change.ts_us, cell.timestamp)
        column = cell.column
        if cell.ttl is not None and not cell.deleted:
            change.ttl[column.name] = cell.ttl
        if cell.path is not None:
            multi_cell.setdefault(column.name, []).append(cell)
        else:
            change.after[column.name] = None if cell.deleted else _decode(column, cell.value)
    for name, deletion in row.complex_deletions.items():
        change.ts_us = max(change.ts_us, deletion.marked_for_delete_at)
        change.replaced.append(name)
        if name not in multi_cell:
            change.after[name] = None  # the whole collection deleted (or set to null)
    for name, cells in multi_cell.items():
        column = cells[0].column
        live: list[tuple[bytes, bytes | None]] = [(c.path or b"", c.value) for c in cells if not c.deleted]
        removed = [c for c in cells if c.deleted]
        whole = name in row.complex_deletions
        try:
            if column.type.kind == "udt":
                # A field update names the fields it wrote; a field set to null is a cell
                # tombstone, so it is there too, as None (and listed in `removed`).
                written = [(c.path or b"", None if c.deleted else c.value) for c in cells]
                change.after[name] = column.type.collect(written, whole)
            elif live or whole:
                change.after[name] = column.type.collect(live)
            if removed:
                change.removed[name] = [column.type.path_label(c.path or b"") for c in removed]
        except _VALUE_ERRORS as exc:
            raise MutationDecodeError(f"column {name!r} ({column.type_text}): {exc}") from exc
    if multi_cell or row.complex_deletions:
        # Columns by name, as every other row has them (Cassandra writes a row's simple cells by
        # name, then its multi-cell ones) and as the event schema lists them.
        change.after = dict(sorted(change.after.items()))
    return change


_OPS = {"c": Op.CREATE, "u": Op.UPDATE, "d": Op.DELETE}


def change_event(
    change: RowChange,
    schema: RowSchema,
    cluster: str,
    node: str,
    segment_id: int,
    position: int,
    index: int,
    now_ms: int,
) -> ChangeEvent:
    """The event of a delta row change read at ``segment_id``/``position`` (its ``index``-th there)
    by ``node``: the key and the columns the mutation carried, its deletions, ranges, replaced or
    removed elements and TTL as ``cdc.*`` headers."""
    source = cassandra_source(
        cluster,
        change.keyspace,
        change.table,
        node,
        {"segment": segment_id, "position": position, "index": index},
        change.ts_us,
    )
    after = None if change.after is None else {**change.key, **change.after}
    return ChangeEvent(_OPS[change.op], change.key, None, after, source, now_ms, schema, headers=_cdc_headers(change))


def _cdc_headers(change: RowChange) -> dict[str, str] | None:
    """The change's deletion kind, range, replaced or removed elements and TTL as ``cdc.*``
    headers; None for the common change that has none of them."""
    if not (change.deletion or change.range or change.replaced or change.removed or change.ttl):
        return None  # checked first: most changes are plain writes, and this runs per change
    headers: dict[str, str] = {}
    for name in ("deletion", "range", "replaced", "removed", "ttl"):
        value = getattr(change, name)
        if value:
            headers[f"cdc.{name}"] = value if isinstance(value, str) else header_json(value)
    return headers


def header_json(value: Any) -> str:
    """A ``cdc.*`` header's JSON text (the compiled core writes the rarer ones through this)."""
    try:
        return json.dumps(value, sort_keys=True, default=str)
    except TypeError:
        # A range bound or removed element holding a map JSON cannot key (decimal keys) or sort
        # (a null key beside ints): its keys as text, rather than a source that stops on it.
        return json.dumps(with_text_keys(value), sort_keys=True, default=str)
