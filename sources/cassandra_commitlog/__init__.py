"""The ``cassandra_commitlog`` source: Cassandra's commit-log segments from cdc_raw, parsed in Python."""

from cdcflow.sources.cassandra_commitlog.source import CassandraCommitLogSource, CassandraCommitLogSourceConfig

__all__ = ["CassandraCommitLogSource", "CassandraCommitLogSourceConfig"]
