"""Table schemas keyed by table id, read from the cluster's ``system_schema`` (seed 001's SchemaUpdater).

A mutation names its table by id and its columns by name, but not their types: the types decide
how many bytes each value takes, so nothing past an unknown table can be read. The catalog also
keeps dropped columns (a segment written before ``ALTER TABLE ... DROP`` still holds them) and
serialises to JSON, so a segment can be decoded away from its cluster (fixtures, ``dump``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdcflow.events import Column, RowSchema
from cdcflow.sources.cql.cqltypes import CqlType, build_type, user_types_of

__all__ = ["ColumnSchema", "SchemaCatalog", "TableSchema", "load_schema_catalog"]

UserTypes = Mapping[str, tuple[Sequence[str], Sequence[str]]]


@dataclass(frozen=True, slots=True)
class ColumnSchema:
    name: str
    kind: str  # partition_key, clustering, static, regular
    position: int
    type_text: str
    type: CqlType = field(repr=False, compare=False)

    @property
    def complex(self) -> bool:
        return self.type.multi_cell


@dataclass(frozen=True, slots=True)
class TableSchema:
    table_id: str
    keyspace: str
    table: str
    cdc: bool
    partition_key: tuple[ColumnSchema, ...]
    clustering: tuple[ColumnSchema, ...]
    columns: Mapping[str, ColumnSchema]  # static and regular, by name
    dropped: Mapping[str, ColumnSchema] = field(default_factory=dict)

    @property
    def clustering_lengths(self) -> tuple[int, ...]:
        """Each clustering column's fixed storage length, or -1 (length-prefixed)."""
        return tuple(c.type.fixed_length for c in self.clustering)

    def column(self, name: str) -> ColumnSchema | None:
        """A static or regular column; a dropped one when the table no longer has it."""
        return self.columns.get(name) or self.dropped.get(name)

    def ddl(self) -> str:
        """The table as a CREATE TABLE statement (columns, primary key, cdc), for schema-change events."""
        columns = [*self.partition_key, *self.clustering, *sorted(self.columns.values(), key=lambda c: c.name)]
        lines = [f"{c.name} {c.type_text}" + (" static" if c.kind == "static" else "") for c in columns]
        partition = ", ".join(c.name for c in self.partition_key)
        key = ", ".join([f"({partition})", *(c.name for c in self.clustering)])
        lines.append(f"PRIMARY KEY ({key})")
        return f"CREATE TABLE {self.keyspace}.{self.table} ({', '.join(lines)}) WITH cdc = {str(self.cdc).lower()}"

    def row_schema(self, cluster: str) -> RowSchema:
        """The events' schema of this table (built once per table version: every update asks)."""
        cached = _row_schemas.get(id(self))
        if cached is not None and cached[0] is self and cached[1] == cluster:
            return cached[2]
        if len(_row_schemas) >= 4096:
            _row_schemas.clear()
        schema = self._build_row_schema(cluster)
        _row_schemas[id(self)] = (self, cluster, schema)
        return schema

    def _build_row_schema(self, cluster: str) -> RowSchema:
        key_columns = self.partition_key + self.clustering
        key = tuple(Column(c.name, c.type_text, optional=False) for c in key_columns)
        regular = sorted(self.columns.values(), key=lambda c: c.name)
        return RowSchema(
            f"{cluster}.{self.keyspace}.{self.table}",
            key,
            key + tuple(Column(c.name, c.type_text) for c in regular),
            user_types=user_types_of(c.type for c in (*key_columns, *regular)),
        )


# id(table) -> (the table, cluster, its row schema); the entry holds the table, so the id stays its own.
_row_schemas: dict[int, tuple[TableSchema, str, RowSchema]] = {}


@dataclass(slots=True)
class SchemaCatalog:
    """Every table of a cluster by id, with what is needed to decode its mutations."""

    tables: dict[str, TableSchema] = field(default_factory=dict)
    description: dict[str, Any] = field(default_factory=dict)  # the JSON form it was built from

    def table(self, table_id: str) -> TableSchema | None:
        return self.tables.get(table_id)

    def by_name(self, keyspace: str, table: str) -> TableSchema | None:
        for schema in self.tables.values():
            if schema.keyspace == keyspace and schema.table == table:
                return schema
        return None

    def to_json(self) -> str:
        return json.dumps(self.description, indent=1, sort_keys=True)

    def save(self, path: Path) -> None:
        path.write_text(self.to_json())

    @classmethod
    def from_json(cls, text: str) -> SchemaCatalog:
        return cls.from_description(json.loads(text))

    @classmethod
    def load(cls, path: Path) -> SchemaCatalog:
        return cls.from_json(path.read_text())

    @classmethod
    def from_description(cls, description: Mapping[str, Any]) -> SchemaCatalog:
        """Build from ``{"tables": [...], "types": {keyspace: {name: [field names, field types]}}}``."""
        types: Mapping[str, Mapping[str, Sequence[Sequence[str]]]] = description.get("types", {})
        tables: dict[str, TableSchema] = {}
        for entry in description.get("tables", []):
            keyspace = entry["keyspace"]
            user_types: UserTypes = {name: (spec[0], spec[1]) for name, spec in types.get(keyspace, {}).items()}
            columns = [
                ColumnSchema(name, kind, position, text, build_type(text, user_types))
                for name, kind, position, text in entry["columns"]
            ]
            dropped = {
                name: ColumnSchema(name, "regular", -1, text, build_type(text, user_types))
                for name, text in entry.get("dropped", [])
            }
            table = TableSchema(
                table_id=entry["id"],
                keyspace=keyspace,
                table=entry["table"],
                cdc=bool(entry.get("cdc")),
                partition_key=tuple(
                    sorted((c for c in columns if c.kind == "partition_key"), key=lambda c: c.position)
                ),
                clustering=tuple(sorted((c for c in columns if c.kind == "clustering"), key=lambda c: c.position)),
                columns={c.name: c for c in columns if c.kind in ("regular", "static")},
                dropped=dropped,
            )
            tables[table.table_id] = table
        return cls(tables, dict(description))


def describe_rows(
    tables: Iterable[Any], columns: Iterable[Any], dropped: Iterable[Any], types: Iterable[Any]
) -> dict[str, Any]:
    """The catalog's JSON form from ``system_schema`` rows (named tuples from cassandra-driver)."""
    by_table: dict[tuple[str, str], list[list[Any]]] = {}
    for row in columns:
        by_table.setdefault((row.keyspace_name, row.table_name), []).append(
            [row.column_name, row.kind, row.position, row.type]
        )
    dropped_by_table: dict[tuple[str, str], list[list[str]]] = {}
    for row in dropped:
        dropped_by_table.setdefault((row.keyspace_name, row.table_name), []).append([row.column_name, row.type])
    user_types: dict[str, dict[str, list[list[str]]]] = {}
    for row in types:
        user_types.setdefault(row.keyspace_name, {})[row.type_name] = [list(row.field_names), list(row.field_types)]
    described = []
    for row in tables:
        name = (row.keyspace_name, row.table_name)
        described.append(
            {
                "id": str(row.id),
                "keyspace": row.keyspace_name,
                "table": row.table_name,
                "cdc": bool(getattr(row, "cdc", False)),
                "columns": sorted(by_table.get(name, [])),
                "dropped": sorted(dropped_by_table.get(name, [])),
            }
        )
    return {"tables": sorted(described, key=lambda t: (t["keyspace"], t["table"])), "types": user_types}


def load_schema_catalog(session: Any) -> SchemaCatalog:
    """Read every table, column, dropped column and user type from a cassandra-driver session."""
    tables = session.execute("SELECT keyspace_name, table_name, id, cdc FROM system_schema.tables")
    columns = session.execute(
        "SELECT keyspace_name, table_name, column_name, kind, position, type FROM system_schema.columns"
    )
    # dropped_time is not selected: the driver cannot decode the far-future values Cassandra keeps there.
    dropped = session.execute("SELECT keyspace_name, table_name, column_name, type FROM system_schema.dropped_columns")
    types = session.execute("SELECT keyspace_name, type_name, field_names, field_types FROM system_schema.types")
    return SchemaCatalog.from_description(describe_rows(tables, columns, dropped, types))


def table_id_text(raw: bytes) -> str:
    return str(uuid.UUID(bytes=raw))
