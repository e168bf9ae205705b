"""Registers the ``cassandra_commitlog`` and ``cassandra_snapshot`` sources."""

from typing import Any

from plugins.hookspecs import hookimpl
from sources.cassandra_commitlog.snapshot import CassandraSnapshotSource
from sources.cassandra_commitlog.source import CassandraCommitLogSource


@hookimpl
def cdcflow_source_types() -> list[type[Any]]:
    return [CassandraCommitLogSource, CassandraSnapshotSource]
