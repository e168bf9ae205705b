"""Registers the ``cassandra_commitlog`` and ``cassandra_snapshot`` sources and their commands."""

from typing import Any

from cdcflow.cli import CommandLine
from cdcflow.extras import CASSANDRA, Extra
from cdcflow.plugins.hookspecs import hookimpl
from cdcflow.sources.cassandra_commitlog.commands import add_commands
from cdcflow.sources.cassandra_commitlog.snapshot import CassandraSnapshotSource
from cdcflow.sources.cassandra_commitlog.source import CassandraCommitLogSource


@hookimpl
def cdcflow_source_types() -> list[type[Any]]:
    return [CassandraCommitLogSource, CassandraSnapshotSource]


@hookimpl
def cdcflow_cli_commands(commands: CommandLine) -> None:
    add_commands(commands)


@hookimpl
def cdcflow_required_extras() -> list[Extra]:
    return [CASSANDRA]
