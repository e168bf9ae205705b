"""Registers the ``cassandra_commitlog`` source."""

from typing import Any

from plugins.hookspecs import hookimpl
from sources.cassandra_commitlog.source import CassandraCommitLogSource


@hookimpl
def cdcflow_source_types() -> list[type[Any]]:
    return [CassandraCommitLogSource]
