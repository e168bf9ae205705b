"""A ScyllaDB table's existing rows as ``op: r`` events, for the source's ``snapshot`` modes.

The rows are read from the base table by token-range slices
(:class:`cdcflow.sources.cql.snapshot.TokenRangeSnapshot`, which also holds the hand-off to the
stream). Values are converted as the stream converts the same column from the log table, so a
snapshot row and a later change of it carry the same forms and the same row schema; the one
exception is a non-frozen list: the log keeps it as a map keyed by timeuuid (the list's cell
paths), which a base-table read does not return, so a snapshot row carries it as a list and its
row schema names the base type (``list<int>``) for that column.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cdcflow.events import ChangeEvent, Column, Op, Record, RowSchema
from cdcflow.sources.cql.cqltypes import CqlType, build_type, from_driver
from cdcflow.sources.cql.snapshot import SnapshotTable
from cdcflow.sources.scylla_cdc.exceptions import UnknownCdcTableError
from cdcflow.sources.scylla_cdc.log_events import LogLayout, snapshot_source

__all__ = ["ScyllaRowEvents", "base_table"]


def base_table(cluster: Any, layout: LogLayout) -> tuple[SnapshotTable, dict[str, CqlType]]:
    """The base table of ``layout`` to snapshot, and each of its columns' type (driver metadata)."""
    keyspace = cluster.metadata.keyspaces.get(layout.keyspace)
    table = keyspace.tables.get(layout.table) if keyspace is not None else None
    if table is None:
        raise UnknownCdcTableError(f"{layout.keyspace}.{layout.table}")
    user_types = {name: (list(udt.field_names), list(udt.field_types)) for name, udt in keyspace.user_types.items()}
    types = {name: build_type(column.cql_type, user_types) for name, column in table.columns.items()}
    columns = (*layout.key_columns, *(n for n in layout.value_columns if n in types))
    return SnapshotTable(f"{layout.keyspace}.{layout.table}", layout.partition_key, columns), types


def _row_schema(layout: LogLayout, types: Mapping[str, CqlType]) -> RowSchema:
    lists = {name for name in layout.value_columns if name in types and types[name].kind == "list"}
    if not lists:
        return layout.row_schema
    key = layout.row_schema.key_columns
    values = tuple(
        Column(name, types[name].text if name in lists else layout.types[name].text) for name in layout.value_columns
    )
    return layout.row_schema.with_columns(value_columns=key + values)  # keeps its user types


class ScyllaRowEvents:
    """Rows of a ScyllaDB snapshot as events (a :class:`~cdcflow.sources.cql.snapshot.RowToRecord`)."""

    def __init__(self) -> None:
        self._tables: dict[str, tuple[LogLayout, dict[str, CqlType], RowSchema]] = {}

    def add(self, layout: LogLayout, types: dict[str, CqlType]) -> None:
        self._tables[f"{layout.keyspace}.{layout.table}"] = (layout, types, _row_schema(layout, types))

    def __call__(
        self, table: SnapshotTable, token: int, values: Mapping[str, Any], position: dict[str, Any], read_at_us: int
    ) -> Record | None:
        layout, types, schema = self._tables[table.name]
        after = {name: from_driver(value, types[name]) for name, value in values.items()}
        key = {name: after.get(name) for name in layout.key_columns}
        source = snapshot_source(layout, position["slice"], position, read_at_us)
        return ChangeEvent(Op.READ, key, None, after, source, read_at_us // 1000, schema)
