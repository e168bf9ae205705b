"""From decoded mutations to events: row changes of the updates this node emits (the replica filter,
:mod:`.replicas`), and seed 001's schema-change events where a ``system_schema`` mutation is in the log."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from cdcflow.events import ChangeEvent, Record, SchemaChangeEvent
from cdcflow.sources.cassandra_commitlog.changes import RowChange, cassandra_source, change_event
from cdcflow.sources.cassandra_commitlog.decoding import CommitLogDecoding, MutationChanges
from cdcflow.sources.cassandra_commitlog.mutation import Mutation, PartitionUpdate
from cdcflow.sources.cassandra_commitlog.replicas import PrimaryReplicaFilter
from cdcflow.sources.cassandra_commitlog.reporting import CommitLogReport

__all__ = ["CommitLogEvents"]


class CommitLogEvents:
    """Makes one node's events: ``replicas`` (None under ``replicas: all``) says which partitions it emits."""

    def __init__(
        self,
        cluster: str,
        node: str,
        decoding: CommitLogDecoding,
        report: CommitLogReport,
        replicas: PrimaryReplicaFilter | None,
    ) -> None:
        self.cluster = cluster
        self.node = node
        self.replicas = replicas
        self._decoding = decoding
        self._report = report

    def emits(self, keyspace: str, partition_key: bytes) -> bool:
        """Whether this node emits the partition's changes (a skipped one is counted)."""
        if self.replicas is None or self.replicas.emits(keyspace, partition_key):
            return True
        self._report.counted("skipped_not_primary_replica")
        return False

    def event(
        self, change: RowChange, schema: Any, segment_id: int, position: int, index: int, now_ms: int
    ) -> ChangeEvent:
        return change_event(change, schema, self.cluster, self.node, segment_id, position, index, now_ms)

    def delta(self, changes: MutationChanges, segment_id: int, position: int) -> Iterator[Record]:
        """delta: one mutation's events, in its order (schema changes first), each with its index in it."""
        index = 0
        now_ms = int(time.time() * 1000)
        for schema_event in self.schema_events(changes.schema_updates, segment_id, position, now_ms):
            yield schema_event
            index += 1
        replicas = self.replicas
        for table, key, row_changes_of_update in changes.updates:
            if replicas is not None and not self.emits(table.keyspace, key):
                continue
            schema = table.row_schema(self.cluster)
            for change in row_changes_of_update:
                yield self.event(change, schema, segment_id, position, index, now_ms)
                index += 1

    def emitted_updates(self, mutation: Mutation) -> Iterator[PartitionUpdate]:
        """The mutation's partition updates of emitted tables this node emits."""
        for update in mutation.updates:
            if update.table.keyspace != "system_schema" and self.emits(update.table.keyspace, update.key):
                yield update

    def schema_events(
        self, schema_updates: list[PartitionUpdate], segment_id: int, position: int, now_ms: int
    ) -> Iterator[Record]:
        """The schema-change events of a mutation's ``system_schema`` updates; every node's log holds
        them alike, so one node emits them (:meth:`.replicas.PrimaryReplicaFilter.emits_cluster_wide`)."""
        if schema_updates and (self.replicas is None or self.replicas.emits_cluster_wide()):
            yield from self._schema_changes(schema_updates, segment_id, position, 0, now_ms)

    def _schema_changes(
        self, updates: list[PartitionUpdate], segment_id: int, position: int, index: int, now_ms: int
    ) -> Iterator[SchemaChangeEvent]:
        """Seed 001's schema-change events, where the change is in the commit log: a replay emits them again.

        A system_schema mutation names the keyspace (partition key) and the tables (first
        clustering column) it changes; the schema is read again and each changed table that this
        source emits (or emitted before a DROP) gets an event with its DDL now.
        """
        # One schema change writes several system_schema tables in one mutation (tables, columns...).
        keyspace = updates[0].key.decode("utf-8", errors="replace")
        rows = [row for update in updates for row in update.rows]
        tables = {
            row.clustering[0].decode("utf-8", errors="replace") for row in rows if row.clustering and row.clustering[0]
        }
        tables = {name for name in tables if self._decoding.is_wanted(keyspace, name)}
        if not tables:
            return
        catalog = self._decoding.catalog
        before = {name: catalog.by_name(keyspace, name) for name in tables}
        self._decoding.refresh()
        for name in sorted(tables):
            previous, current = before[name], self._decoding.catalog.by_name(keyspace, name)
            if not any(t is not None and self._decoding.emits(t) for t in (previous, current)):
                continue
            ddl = current.ddl() if current is not None else f"DROP TABLE {keyspace}.{name}"
            source = cassandra_source(
                self.cluster,
                keyspace,
                name,
                self.node,
                {"segment": segment_id, "position": position, "index": index},
                max((row.timestamp or 0 for row in rows), default=0),
            )
            schema = current.row_schema(self.cluster) if current is not None else None
            yield SchemaChangeEvent(keyspace, name, ddl, source, now_ms, schema)
            index += 1
