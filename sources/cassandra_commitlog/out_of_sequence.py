"""Seed 001's out-of-sequence store: changes whose time bucket had closed before they showed up.

Only the row's identity (table, raw key values), the op and the write timestamp are kept; the
row is read back later at QUORUM and sent then. A stored change is deleted only after the event
read for it is durable downstream (the source's ``commit``), so a crash sends it again rather
than never.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from cdcflow.errors import SourceUnavailableError
from cdcflow.sources.cassandra_commitlog.schema import SchemaCatalog, TableSchema

__all__ = ["LateChange", "OutOfSequenceStore"]


@dataclass(frozen=True, slots=True)
class LateChange:
    table: TableSchema
    raw_key: tuple[bytes | None, ...]
    op: str
    ts_us: int


class OutOfSequenceStore:
    """A Cassandra table, partitioned by node: each node's worker owns its late changes."""

    def __init__(self, session: Any, keyspace: str, node: str, table: str = "commitlog_out_of_sequence") -> None:
        self.session = session
        self.node = node
        self._emitted: list[LateChange] = []
        try:
            session.execute(
                f"CREATE KEYSPACE IF NOT EXISTS {keyspace} "
                "WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}"
            )
            session.execute(
                f"CREATE TABLE IF NOT EXISTS {keyspace}.{table} (node text, keyspace_name text, table_name text,"
                " key frozen<list<blob>>, op text, ts bigint, PRIMARY KEY ((node), keyspace_name, table_name, key))"
            )
            columns = "node, keyspace_name, table_name, key, op, ts"
            self._insert = session.prepare(f"INSERT INTO {keyspace}.{table} ({columns}) VALUES (?, ?, ?, ?, ?, ?)")
            self._select = session.prepare(
                f"SELECT keyspace_name, table_name, key, op, ts FROM {keyspace}.{table} WHERE node = ? LIMIT 500"
            )
            self._delete = session.prepare(
                f"DELETE FROM {keyspace}.{table} WHERE node = ? AND keyspace_name = ? AND table_name = ? AND key = ?"
            )
        except Exception as exc:  # the driver's errors share no useful base class
            raise SourceUnavailableError(
                f"out-of-sequence store {keyspace}.{table} could not be prepared: {exc}"
            ) from exc

    def save(self, table: TableSchema, raw_key: Sequence[bytes | None], op: str, ts_us: int) -> None:
        try:
            self.session.execute(
                self._insert, (self.node, table.keyspace, table.table, [k or b"" for k in raw_key], op, ts_us)
            )
        except Exception as exc:
            raise SourceUnavailableError(f"out-of-sequence store write failed: {exc}") from exc

    def pending(self, catalog: SchemaCatalog) -> Iterator[LateChange]:
        """Stored changes not sent yet in this run (those sent wait for ``forget_emitted``)."""
        try:
            rows = list(self.session.execute(self._select, (self.node,)))
        except Exception as exc:
            raise SourceUnavailableError(f"out-of-sequence store read failed: {exc}") from exc
        sent = {(c.table.keyspace, c.table.table, c.raw_key) for c in self._emitted}
        for keyspace, table_name, key, op, ts in rows:
            table = catalog.by_name(keyspace, table_name)
            raw_key = tuple(key)
            if table is None or (keyspace, table_name, raw_key) in sent:
                continue
            yield LateChange(table, raw_key, op, ts)

    def emitted(self, change: LateChange) -> None:
        self._emitted.append(change)

    def forget_emitted(self) -> None:
        for change in self._emitted:
            try:
                self.session.execute(
                    self._delete, (self.node, change.table.keyspace, change.table.table, list(change.raw_key))
                )
            except Exception as exc:
                raise SourceUnavailableError(f"out-of-sequence store delete failed: {exc}") from exc
        self._emitted.clear()
