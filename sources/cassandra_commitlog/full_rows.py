"""Full row images (seed 001's stateless processing): rows read back from the node by their key.

A mutation carries only the columns it wrote; the whole row is read from the local node once the
mutation's time bucket has closed, so the copy read has every write of that window. Keys are bound
as the raw bytes the commit log holds, through ``blobAs<type>(?)``, so no value is re-encoded on
the way (key columns must be native types; other tables keep delta images).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cdcflow.sources.cassandra_commitlog.schema import ColumnSchema, TableSchema
from cdcflow.sources.cql.cqltypes import from_driver

__all__ = ["FullRowReader"]


def _bind(column: ColumnSchema) -> str:
    if column.type_text == "blob":
        return f'"{column.name}" = ?'
    return f'"{column.name}" = blobAs{column.type_text}(?)'


class FullRowReader:
    """Reads one row by its raw key values; prepared statements are cached per table id."""

    def __init__(self, session: Any, execution_profile: str | None) -> None:
        self.session = session
        self.execution_profile = execution_profile
        self._statements: dict[str, Any] = {}

    @staticmethod
    def supports(table: TableSchema) -> bool:
        return all(c.type.kind == "native" for c in (*table.partition_key, *table.clustering))

    def read(
        self, table: TableSchema, key_values: Sequence[bytes | None], consistency_level: Any = None
    ) -> dict[str, Any] | None:
        """The row as event values, or None when it does not exist (any more)."""
        statement = self._statements.get(table.table_id)
        if statement is None:
            keys = (*table.partition_key, *table.clustering)
            where = " AND ".join(_bind(c) for c in keys)
            statement = self.session.prepare(f'SELECT * FROM "{table.keyspace}"."{table.table}" WHERE {where}')
            self._statements[table.table_id] = statement
        bound = statement.bind(list(key_values))
        if consistency_level is not None:
            bound.consistency_level = consistency_level
        profile = self.execution_profile if consistency_level is None else None
        result = self.session.execute(bound, execution_profile=profile) if profile else self.session.execute(bound)
        row = result.one()
        if row is None:
            return None
        columns = {c.name: c for c in (*table.partition_key, *table.clustering, *table.columns.values())}
        return {
            name: from_driver(value, columns[name].type)
            for name, value in zip(result.column_names, row, strict=True)
            if name in columns
        }
