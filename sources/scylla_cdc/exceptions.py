"""How reading ScyllaDB's CDC can fail, each leaf under a family of :mod:`cdcflow.errors`.

::

    ScyllaCdcError (SourceError)
    ├── StreamIdError (SourceDataError)             bytes that are not a 128-bit stream ID
    ├── GenerationMetadataError (SourceDataError)   description tables that contradict the design
    ├── LogRowError (SourceDataError)               a log row the event mapping cannot place
    ├── CdcMetadataUnavailableError (SourceUnavailableError)   the cluster cannot be read now
    ├── MetadataTablesMissingError (ConfigError)    no CDC description tables in the named keyspace
    ├── UnknownCdcTableError (ConfigError)          a configured table has no CDC log table
    ├── StreamsPerQueryError (ConfigError)          the cluster refuses a query naming that many streams
    └── WriteRejectedError                          the writer refuses a write, as ScyllaDB would
"""

from __future__ import annotations

from cdcflow.errors import ConfigError, SourceDataError, SourceError, SourceUnavailableError

__all__ = [
    "CdcMetadataUnavailableError",
    "GenerationMetadataError",
    "LogRowError",
    "MetadataTablesMissingError",
    "ScyllaCdcError",
    "StreamIdError",
    "StreamsPerQueryError",
    "UnknownCdcTableError",
    "WriteRejectedError",
]


class ScyllaCdcError(SourceError):
    """Root of the ScyllaDB CDC source's own errors."""


class StreamIdError(ScyllaCdcError, SourceDataError):
    """A value that should be a stream ID is not 16 bytes (or not a pair of 64-bit integers)."""


class GenerationMetadataError(ScyllaCdcError, SourceDataError):
    """A generation or tablet stream set read from the cluster breaks the design's rules."""


class LogRowError(ScyllaCdcError, SourceDataError):
    """A CDC log row the source cannot turn into an event (an unknown operation, an image without
    its delta); it goes to the dead-letter destination with the row."""


class CdcMetadataUnavailableError(ScyllaCdcError, SourceUnavailableError):
    """The CDC description tables or a log table cannot be read right now: retried with backoff."""


class MetadataTablesMissingError(ScyllaCdcError, ConfigError):
    """The keyspace named for CDC metadata holds none of ScyllaDB's description tables."""

    def __init__(self, keyspace: str, tables: list[str]) -> None:
        self.keyspace = keyspace
        super().__init__(
            f"keyspace {keyspace!r} has none of the CDC description tables ({', '.join(tables)}); "
            "on ScyllaDB leave generations_keyspace/tablets_keyspace at their defaults, with a "
            "simulated cluster name the keyspaces its writer created"
        )


class UnknownCdcTableError(ScyllaCdcError, ConfigError):
    """A table listed in ``tables`` has no ``<table>_scylla_cdc_log`` next to it."""

    def __init__(self, table: str) -> None:
        self.table = table
        super().__init__(
            f"table {table}: no CDC log table {table}_scylla_cdc_log; enable CDC on it "
            "(ALTER TABLE ... WITH cdc = {'enabled': true}) or remove it from tables"
        )


class StreamsPerQueryError(ScyllaCdcError, ConfigError):
    """The cluster refuses a query with this many partition keys in its IN list (ScyllaDB's
    ``max_partition_key_restrictions_per_query``, default 100; Cassandra's guardrail
    ``partition_keys_in_select_fail_threshold``)."""

    def __init__(self, where: str, streams: int, limit: int | None, answer: str) -> None:
        self.streams = streams
        self.limit = limit
        bound = f"at most {limit}" if limit is not None else "fewer"
        super().__init__(
            f"{where}: the cluster refuses a query of {streams} streams (its limit on partition keys per "
            f"query); set max_streams_per_query to {bound}. The cluster answered: {answer}"
        )


class WriteRejectedError(ScyllaCdcError):
    """A base write ScyllaDB would refuse: its timestamp is outside the generation leeway, or it
    falls into a generation whose data is not known yet."""
