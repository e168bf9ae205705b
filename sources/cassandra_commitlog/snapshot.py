"""A Cassandra table's existing rows as ``op: r`` events: the ``snapshot`` modes of the
``cassandra_commitlog`` source, and the ``cassandra_snapshot`` source behind ``cdcflow bootstrap``.

Both read token-range slices through :class:`cdcflow.sources.cql.snapshot.TokenRangeSnapshot`
(its documentation holds the hand-off to the stream and its limits); this module says which tables
a Cassandra snapshot reads and how a row becomes an event: the values the commit-log path decodes
for the same row (``from_driver``), ``source.snapshot = true``, stamped with the read time. Under
``replicas: primary`` a node's worker emits only the rows whose token it is the primary replica
of, the rule its stream follows, so workers on every node together emit each row once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from pydantic import Field

from cdcflow.contract import Offset, Partition, PluginConfig, PluginContext, Source
from cdcflow.errors import ConfigError, SourceUnavailableError
from cdcflow.events import ChangeEvent, Op, Record
from cdcflow.sources.cassandra_commitlog.changes import cassandra_source
from cdcflow.sources.cassandra_commitlog.cluster import connect
from cdcflow.sources.cassandra_commitlog.schema import SchemaCatalog, TableSchema, load_schema_catalog
from cdcflow.sources.cql.connection import CqlClientSecurity, refusal
from cdcflow.sources.cql.cqltypes import from_driver
from cdcflow.sources.cql.snapshot import SnapshotConfig, SnapshotTable, TokenRangeSnapshot

__all__ = [
    "CassandraRowEvents",
    "CassandraSnapshotSource",
    "CassandraSnapshotSourceConfig",
    "snapshot_tables",
]


def snapshot_tables(catalog: SchemaCatalog, names: Sequence[str] | None, where: str) -> list[TableSchema]:
    """The tables a snapshot reads: ``names`` (each must exist), or every table with ``cdc = true``
    outside the system keyspaces except counter tables (their stream skips them too), by name."""
    if names is not None:
        found = []
        for name in names:
            keyspace, table = name.split(".", 1)
            schema = catalog.by_name(keyspace, table)
            if schema is None:
                raise ConfigError(f"{where}: table {name} does not exist in the cluster")
            found.append(schema)
        return found
    return sorted(
        (
            t
            for t in catalog.tables.values()
            if t.cdc
            and not t.keyspace.startswith("system")
            and not any(c.type_text == "counter" for c in t.columns.values())
        ),
        key=lambda t: (t.keyspace, t.table),
    )


def snapshot_table(schema: TableSchema) -> SnapshotTable:
    columns = (*schema.partition_key, *schema.clustering, *sorted(schema.columns.values(), key=lambda c: c.name))
    return SnapshotTable(
        f"{schema.keyspace}.{schema.table}",
        tuple(c.name for c in schema.partition_key),
        tuple(c.name for c in columns),
    )


class CassandraRowEvents:
    """Rows of a Cassandra snapshot as events (a :class:`~cdcflow.sources.cql.snapshot.RowToRecord`)."""

    def __init__(
        self,
        cluster: str,
        schemas: Sequence[TableSchema],
        emits_token: Callable[[str, int], bool] | None = None,
    ) -> None:
        self._cluster = cluster
        self._schemas = {f"{s.keyspace}.{s.table}": s for s in schemas}
        self._emits_token = emits_token
        self._columns = {
            name: {c.name: c for c in (*s.partition_key, *s.clustering, *s.columns.values())}
            for name, s in self._schemas.items()
        }
        self._keys = {name: [c.name for c in (*s.partition_key, *s.clustering)] for name, s in self._schemas.items()}
        self._row_schemas = {name: s.row_schema(cluster) for name, s in self._schemas.items()}

    def __call__(
        self, table: SnapshotTable, token: int, values: Mapping[str, Any], position: dict[str, Any], read_at_us: int
    ) -> Record | None:
        if self._emits_token is not None and not self._emits_token(table.keyspace, token):
            return None  # another node's worker emits it
        columns = self._columns[table.name]
        after = {name: from_driver(value, columns[name].type) for name, value in values.items()}
        key = {name: after.get(name) for name in self._keys[table.name]}
        source = cassandra_source(
            self._cluster, table.keyspace, table.table, position["slice"], position, read_at_us, snapshot=True
        )
        return ChangeEvent(Op.READ, key, None, after, source, read_at_us // 1000, self._row_schemas[table.name])


class CassandraSnapshotSourceConfig(PluginConfig, CqlClientSecurity):
    table: str = Field(pattern=r"^[^.\s]+\.[^.\s]+$", description="keyspace.table to read")
    hosts: list[str] = Field(default_factory=lambda: ["127.0.0.1"])
    port: int = Field(default=9042, ge=1, le=65535)
    cluster: str = Field(default="cassandra", description="the server name: topics are <cluster>.<keyspace>.<table>")
    ranges: int = Field(default=64, ge=1, le=65536, description="token-ring slices: units of parallelism and resume")
    page_size: int = Field(default=1000, ge=1)
    progress: bool | None = Field(default=None, description="a progress bar on stderr; null: when stderr is a terminal")


class CassandraSnapshotSource(Source[CassandraSnapshotSourceConfig]):
    """``cassandra_snapshot``: every row of one table, once, by token-ring slices; the same as
    ``cassandra_commitlog`` with ``snapshot: initial_only`` and that one table, without cdc_raw."""

    type_name = "cassandra_snapshot"
    config_model = CassandraSnapshotSourceConfig
    bounded = True

    def __init__(self, config: CassandraSnapshotSourceConfig, context: PluginContext) -> None:
        super().__init__(config, context)
        self._cluster: Any = None
        self._snapshot: TokenRangeSnapshot | None = None

    def open(self) -> None:
        try:
            self._cluster, session = connect(self.config.hosts, self.config.port, security=self.config)
            catalog = load_schema_catalog(session)
        except Exception as exc:
            raise refusal(self.config.hosts, exc) or SourceUnavailableError(
                f"cannot reach Cassandra at {self.config.hosts}: {exc}"
            ) from exc
        [schema] = snapshot_tables(catalog, [self.config.table], "source.table")
        settings = SnapshotConfig(
            snapshot="initial_only",
            snapshot_slices=self.config.ranges,
            snapshot_page_size=self.config.page_size,
            snapshot_progress=self.config.progress,
        )
        self._snapshot = TokenRangeSnapshot(
            settings,
            [snapshot_table(schema)],
            self.context,
            session,
            CassandraRowEvents(self.config.cluster, [schema]),
            stream_partitions=list,
        )

    def close(self) -> None:
        if self._cluster is not None:
            self._cluster.shutdown()
            self._cluster = None

    def _slices(self) -> TokenRangeSnapshot:
        assert self._snapshot is not None, "open() first"
        return self._snapshot

    def partitions(self) -> Sequence[Partition]:
        return self._slices().partitions()

    def initial_offset(self, partition: Partition) -> Offset:
        return self._slices().initial_offset()

    def latest_offset(self, partition: Partition, start: Offset, max_records: int | None) -> Offset:
        return self._slices().latest_offset(start)

    def is_finished(self, partition: Partition, offset: Offset) -> bool:
        return self._slices().is_finished(offset)

    def read(self, partition: Partition, start: Offset, end: Offset) -> Iterator[Record]:
        return self._slices().read(partition, start, end)

    def commit(self, offsets: Mapping[str, Offset]) -> None:
        self._slices().note_committed(offsets)
