"""How reading ScyllaDB's CDC can fail, each leaf under a family of :mod:`cdcflow.errors`.

::

    ScyllaCdcError (SourceError)
    ├── StreamIdError (SourceDataError)             bytes that are not a 128-bit stream ID
    ├── GenerationMetadataError (SourceDataError)   description tables that contradict the design
    ├── LogRowError (SourceDataError)               a log row the event mapping cannot place
    ├── CdcOptionsError (SourceDataError)           a table's cdc schema extension cannot be read
    ├── LogExpiredError                             the log's TTL removed rows not read yet
    ├── CdcMetadataUnavailableError (SourceUnavailableError)   the cluster cannot be read now
    │   └── LogReadUnavailableError                 a log query failed in a way that may pass
    ├── LogTableGoneError                           a followed table's CDC log was dropped
    ├── LogReadRefusedError                         the cluster refuses a log query for good
    ├── MetadataTablesMissingError (ConfigError)    no CDC description tables in the named keyspace
    ├── UnknownCdcTableError (ConfigError)          a configured table has no CDC log table
    ├── KeysOnlyDeltaError (ConfigError)            a table logs keys alone and no post-image
    └── StreamsPerQueryError (ConfigError)          the cluster refuses a query naming that many streams
"""

from __future__ import annotations

from cdcflow.errors import ConfigError, SourceDataError, SourceError, SourceUnavailableError

__all__ = [
    "CdcMetadataUnavailableError",
    "CdcOptionsError",
    "GenerationMetadataError",
    "KeysOnlyDeltaError",
    "LogExpiredError",
    "LogReadRefusedError",
    "LogReadUnavailableError",
    "LogRowError",
    "LogTableGoneError",
    "MetadataTablesMissingError",
    "ScyllaCdcError",
    "StreamIdError",
    "StreamsPerQueryError",
    "UnknownCdcTableError",
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


class CdcOptionsError(ScyllaCdcError, SourceDataError):
    """A table's ``cdc`` schema extension (``system_schema.tables.extensions['cdc']``) is not the
    serialized options map ScyllaDB writes, or holds an option or value ScyllaDB refuses."""


class LogExpiredError(ScyllaCdcError):
    """A stream group's position is older than the log's TTL: rows after it may have expired
    unread. Not retried: reading on would skip them without a word."""

    def __init__(self, table: str, group: str, lag_s: float, ttl_s: float) -> None:
        self.table = table
        self.group = group
        self.lag_s = lag_s
        self.ttl_s = ttl_s
        super().__init__(
            f"table {table}, stream group {group}: the reader is {lag_s:.0f} s behind, past the log's TTL of "
            f"{ttl_s:.0f} s: changes after its position may have expired unread. Re-snapshot the table "
            "(snapshot: initial with a new pipeline name) or raise the table's cdc ttl before falling this far behind"
        )


class CdcMetadataUnavailableError(ScyllaCdcError, SourceUnavailableError):
    """The CDC description tables or a log table cannot be read right now: retried with backoff."""


class LogReadUnavailableError(CdcMetadataUnavailableError):
    """A log query of one stream group failed in a way a retry may cure (a read or client timeout,
    too few live replicas, an overloaded node, a lost connection): the source retries that group
    alone with backoff (``query_retry``) while the others go on, and raises it only once the
    group's retries are spent."""

    def __init__(self, where: str, error: BaseException) -> None:
        self.error = error
        super().__init__(f"reading {where}: {type(error).__name__}: {error}")


class LogTableGoneError(ScyllaCdcError):
    """A followed table's CDC log table no longer exists (the table or its keyspace was dropped, or
    CDC disabled on it): no retry brings it back."""

    def __init__(self, table: str, log_table: str, answer: str) -> None:
        self.table = table
        super().__init__(
            f"table {table}: its CDC log table {log_table} is gone (the table or its keyspace was dropped, "
            "or CDC disabled on it); remove it from tables, or re-create it with cdc = {'enabled': true} and "
            f"start the pipeline under a new name. The cluster answered: {answer}"
        )


class LogReadRefusedError(ScyllaCdcError):
    """The cluster refuses a log query for good: the role may not read the log table, the request
    is invalid for it, or a replica failed to execute it. Retrying would only hide it."""

    def __init__(self, where: str, error: BaseException, fix: str) -> None:
        self.error = error
        super().__init__(f"reading {where}: the cluster refuses the query ({type(error).__name__}: {error}); {fix}")


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


class KeysOnlyDeltaError(ScyllaCdcError, ConfigError):
    """A followed table logs deltas of keys alone (``cdc = {'delta': 'keys'}``) and no post-image:
    its events could say which key changed but not how, and a sink would take their ``after`` for
    the row, every other column null."""

    def __init__(self, table: str) -> None:
        self.table = table
        super().__init__(
            f"table {table}: its CDC log holds keys alone (cdc = {{'delta': 'keys'}}) and no post-image, so its "
            "change events would carry no values; enable post-images (ALTER TABLE ... WITH cdc = {'enabled': true, "
            "'delta': 'keys', 'postimage': true}: events then carry the row after each change) or log whole deltas "
            "('delta': 'full'), or remove the table from tables"
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
