"""The ``cassandra_snapshot`` source: a table's existing rows as ``op: r`` events (seed 001's bootstrap).

The token ring is cut into ``ranges`` equal slices, each a partition of its own, so the runtime
reads them in parallel (``--workers``), checkpoints each slice when it is delivered, and a
bootstrap that stops resumes from the slices not finished yet. A slice is read with paged
``SELECT ... WHERE token(pk) > a AND token(pk) <= b``; a crash mid-slice re-reads that slice
(at least once). ``cdcflow bootstrap PIPELINE --table ks.t`` runs it with the pipeline's sink.

Changes made while the bootstrap runs are captured by the ``cassandra_commitlog`` pipeline, which
should be running already: a row read here is its state at read time, stamped with that time.
"""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

from pydantic import Field

from cdcflow.contract import Offset, Partition, PluginConfig, PluginContext, Source
from cdcflow.errors import ConfigError, SourceUnavailableError
from cdcflow.events import ChangeEvent, Op, Record
from cdcflow.sources.cassandra_commitlog.changes import cassandra_source
from cdcflow.sources.cassandra_commitlog.cluster import connect
from cdcflow.sources.cassandra_commitlog.schema import TableSchema, load_schema_catalog
from cdcflow.sources.cql.connection import CqlClientSecurity, refusal
from cdcflow.sources.cql.cqltypes import from_driver

__all__ = ["CassandraSnapshotSource", "CassandraSnapshotSourceConfig", "token_slices"]

_MIN_TOKEN, _MAX_TOKEN = -(2**63), 2**63 - 1  # Murmur3Partitioner


def token_slices(count: int) -> list[tuple[int, int]]:
    """``count`` slices covering the whole Murmur3 ring; each is (exclusive start, inclusive end)."""
    width = (_MAX_TOKEN - _MIN_TOKEN) // count
    bounds = [_MIN_TOKEN + i * width for i in range(count)] + [_MAX_TOKEN]
    return list(itertools.pairwise(bounds))


class CassandraSnapshotSourceConfig(PluginConfig, CqlClientSecurity):
    table: str = Field(pattern=r"^[^.\s]+\.[^.\s]+$", description="keyspace.table to read")
    hosts: list[str] = Field(default_factory=lambda: ["127.0.0.1"])
    port: int = Field(default=9042, ge=1, le=65535)
    cluster: str = Field(default="cassandra", description="the server name: topics are <cluster>.<keyspace>.<table>")
    ranges: int = Field(default=64, ge=1, le=65536, description="token-ring slices: units of parallelism and resume")
    page_size: int = Field(default=1000, ge=1)
    progress: bool = Field(default=True, description="print a progress line to stderr as slices finish")


class CassandraSnapshotSource(Source[CassandraSnapshotSourceConfig]):
    """``cassandra_snapshot``: every row of one table, once, by token-ring slices."""

    type_name = "cassandra_snapshot"
    config_model = CassandraSnapshotSourceConfig
    bounded = True

    def __init__(self, config: CassandraSnapshotSourceConfig, context: PluginContext) -> None:
        super().__init__(config, context)
        self.keyspace, self.table_name = config.table.split(".")
        self._cluster: Any = None
        self._session: Any = None
        self._table: TableSchema | None = None
        self._slices = token_slices(config.ranges)
        self._finished_slices = 0
        self._rows = 0

    def open(self) -> None:
        try:
            self._cluster, self._session = connect(self.config.hosts, self.config.port, security=self.config)
            catalog = load_schema_catalog(self._session)
        except Exception as exc:
            raise refusal(self.config.hosts, exc) or SourceUnavailableError(
                f"cannot reach Cassandra at {self.config.hosts}: {exc}"
            ) from exc
        self._table = catalog.by_name(self.keyspace, self.table_name)
        if self._table is None:
            raise ConfigError(f"source.table: {self.config.table} does not exist in the cluster at {self.config.hosts}")

    def close(self) -> None:
        if self._cluster is not None:
            self._cluster.shutdown()
            self._cluster = None

    def partitions(self) -> Sequence[Partition]:
        return [
            Partition(f"{self.config.table}/{index:05d}", {"start": start, "end": end})
            for index, (start, end) in enumerate(self._slices)
        ]

    def initial_offset(self, partition: Partition) -> Offset:
        return {"done": False}

    def latest_offset(self, partition: Partition, start: Offset, max_records: int | None) -> Offset:
        return {"done": True}

    def is_finished(self, partition: Partition, offset: Offset) -> bool:
        return bool(offset.get("done"))

    def read(self, partition: Partition, start: Offset, end: Offset) -> Iterator[Record]:
        if start.get("done") or not end.get("done"):
            return
        from cassandra.query import SimpleStatement

        table = self._table
        assert table is not None
        keys = ", ".join(f'"{c.name}"' for c in table.partition_key)
        lower = ">=" if partition.info["start"] == _MIN_TOKEN else ">"
        query = f'SELECT * FROM "{self.keyspace}"."{self.table_name}"'
        statement = SimpleStatement(
            f"{query} WHERE token({keys}) {lower} %s AND token({keys}) <= %s", fetch_size=self.config.page_size
        )
        columns = {c.name: c for c in (*table.partition_key, *table.clustering, *table.columns.values())}
        key_names = [c.name for c in (*table.partition_key, *table.clustering)]
        schema = table.row_schema(self.config.cluster)
        try:
            result = self._session.execute(statement, (partition.info["start"], partition.info["end"]))
        except Exception as exc:
            raise SourceUnavailableError(f"reading {self.config.table} slice {partition.id}: {exc}") from exc
        read_at_us = int(time.time() * 1_000_000)
        position = 0
        names = list(result.column_names)
        for row in result:
            after = {name: from_driver(value, columns[name].type) for name, value in zip(names, row, strict=True)}
            key = {name: after.get(name) for name in key_names}
            where = {"slice": partition.id, "row": position}
            source = cassandra_source(
                self.config.cluster, self.keyspace, self.table_name, partition.id, where, read_at_us, snapshot=True
            )
            position += 1
            yield ChangeEvent(Op.READ, key, None, after, source, read_at_us // 1000, schema)
        self._rows += position
        self._finished_slices += 1
        self._report_progress()

    def _report_progress(self) -> None:
        if not self.config.progress:
            return
        total = len(self._slices)
        filled = self._finished_slices * 30 // total
        print(
            f"\rbootstrap {self.config.table} [{'#' * filled}{'.' * (30 - filled)}] "
            f"{self._finished_slices}/{total} slices read by this worker, {self._rows:,} rows",
            end="\n" if self._finished_slices == total else "",
            file=sys.stderr,
            flush=True,
        )
