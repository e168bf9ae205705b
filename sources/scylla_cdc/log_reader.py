"""Queries of one CDC log table: a stream group's rows in a time window, and the next row's time.

A query names its streams in one ``"cdc$stream_id" IN (...)``; ScyllaDB refuses more than
``max_partition_key_restrictions_per_query`` keys (default 100, ``db/config.cc``; checked in
``cql3/restrictions/statement_restrictions.cc``), and a vnode group has one stream per shard of
the range's owner, so a group is queried in chunks of at most ``max_streams_per_query`` streams,
sent together, their rows merged.

Queries are sent unprepared: every response then carries its own column list, so rows written
after ``ALTER TABLE`` (which alters the log table too) are read with their new columns at once,
without re-preparing and without a stale result-metadata cache (ScyllaDB speaks protocol v4, where
a prepared ``SELECT *`` keeps the columns it was prepared with). Its column types name user types
with their fields, so a field added by ``ALTER TYPE`` (which alters every table using the type,
the log table too: scylladb ``cql3/statements/alter_type_statement.cc`` lines 74-93) is seen on the
first page that has it, and the layout is re-read before any of its rows becomes an event.

Each query is routed to the replicas of its first stream's token (:mod:`.routing`). A failed query
raises :class:`LogReadUnavailableError` when a retry may cure it (the driver's exception types:
:func:`cdcflow.sources.cql.driver_errors.is_transient_read_failure`), else what to fix: the log
table is gone (:class:`LogTableGoneError`, asked of ``system_schema`` after an invalid request) or
the cluster refuses the read (:class:`LogReadRefusedError`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from cdcflow.chunks import chunked
from cdcflow.sources.cql.cqltypes import CqlType, build_type
from cdcflow.sources.cql.driver_errors import is_transient_read_failure
from cdcflow.sources.scylla_cdc.exceptions import (
    CdcMetadataUnavailableError,
    LogReadRefusedError,
    LogReadUnavailableError,
    LogTableGoneError,
    StreamsPerQueryError,
    UnknownCdcTableError,
)
from cdcflow.sources.scylla_cdc.log_events import LogLayout, LogRow
from cdcflow.sources.scylla_cdc.stream_id import StreamId
from cdcflow.sources.scylla_cdc.timeuuids import max_timeuuid, micros_of

__all__ = ["LOG_SUFFIX", "LogTableReader", "SentWindow", "WindowTooLargeError", "stream_chunks"]

LOG_SUFFIX = "_scylla_cdc_log"
_META = ("cdc$stream_id", "cdc$time", "cdc$batch_seq_no", "cdc$operation", "cdc$ttl", "cdc$end_of_batch")

# How a cluster refuses too many keys in an IN list. ScyllaDB (a ServerError,
# statement_restrictions.cc): "size of partition-key IN list or partition-key cartesian product of
# IN list 128 is greater than maximum 100. ..."; Cassandra's guardrail (an InvalidRequest):
# "Guardrail partition_keys_in_select violated: ... number of partition keys 128 exceeds fail
# threshold of 100."
_TOO_MANY_KEYS = re.compile(r"is greater than maximum (\d+)|partition_keys_in_select violated.*?threshold of (\d+)")

log = logging.getLogger("cdcflow.scylla_cdc")


def _user_type_key(name: str) -> str:
    return name.strip('"').lower()


def _response_user_types(column_types: Sequence[Any]) -> dict[str, tuple[str, ...]]:
    """The user types a response's column types (the driver's type classes) name, nested ones
    too, with their field names as the server described them."""
    from cassandra.cqltypes import UserType

    found: dict[str, tuple[str, ...]] = {}
    pending = list(column_types)
    while pending:
        cql_type = pending.pop()
        if isinstance(cql_type, type) and issubclass(cql_type, UserType):
            user_type: Any = cql_type  # a class the driver made for the type: its fields are attributes
            found[user_type.typename] = tuple(user_type.fieldnames)
        pending.extend(getattr(cql_type, "subtypes", None) or ())
    return found


def _layout_user_types(layout: LogLayout) -> dict[str, tuple[str, ...]]:
    return {_user_type_key(t.name): tuple(n for n, _ in t.fields) for t in layout.row_schema.user_types}


class WindowTooLargeError(Exception):
    """A window holds more rows than the memory ceiling: the caller narrows it (internal)."""


@dataclass(frozen=True)
class _Columns:
    """Where the metadata columns sit in one response's rows, and which are data columns."""

    index: dict[str, int]
    data: tuple[tuple[int, str], ...]

    @classmethod
    def of(cls, names: Sequence[str]) -> _Columns:
        index = {name: i for i, name in enumerate(names)}
        return cls(index, tuple((i, name) for i, name in enumerate(names) if name not in _META))


def stream_chunks(streams: Sequence[bytes], limit: int) -> list[list[bytes]]:
    """``streams`` in as few queries of at most ``limit`` as possible, of near-equal size."""
    count = max(1, -(-len(streams) // limit))
    size = max(1, -(-len(streams) // count))
    return list(chunked(streams, size)) or [[]]


@dataclass(frozen=True)
class SentWindow:
    """A window's queries, one per chunk of streams, sent and not yet read."""

    futures: tuple[Any, ...]
    sizes: tuple[int, ...]  # streams per query


class LogTableReader:
    """Reads ``<keyspace>.<table>_scylla_cdc_log`` for the table's stream groups."""

    def __init__(
        self,
        cluster: Any,
        session: Any,
        profile: object,
        cluster_name: str,
        keyspace: str,
        table: str,
        page_size: int,
        max_streams_per_query: int = 100,
        delta: Literal["full", "keys"] = "full",
    ) -> None:
        self._cluster = cluster
        self._session = session
        self._profile = profile
        self._cluster_name = cluster_name
        self.keyspace = keyspace
        self.table = table
        self.log_table = table + LOG_SUFFIX
        self._page_size = page_size
        self._max_streams = max_streams_per_query
        self._delta: Literal["full", "keys"] = delta
        self._columns: dict[tuple[str, ...], _Columns] = {}
        self.layout = self._load_layout()
        self._user_types = _layout_user_types(self.layout)
        self._from = f'"{keyspace}"."{self.log_table}"'

    # --- schema ------------------------------------------------------------------------------

    def _load_layout(self) -> LogLayout:
        keyspace = self._cluster.metadata.keyspaces.get(self.keyspace)
        base = keyspace.tables.get(self.table) if keyspace is not None else None
        log_table = keyspace.tables.get(self.log_table) if keyspace is not None else None
        if base is None or log_table is None:
            raise UnknownCdcTableError(f"{self.keyspace}.{self.table}")
        user_types = {name: (list(udt.field_names), list(udt.field_types)) for name, udt in keyspace.user_types.items()}
        types: dict[str, CqlType] = {
            name: build_type(column.cql_type, user_types)
            for name, column in log_table.columns.items()
            if name not in _META
        }
        partition_key = tuple(c.name for c in base.partition_key)
        clustering = tuple(c.name for c in base.clustering_key)
        keys = set(partition_key) | set(clustering)
        values = tuple(sorted(n for n in types if not n.startswith("cdc$") and n not in keys))
        static = frozenset(name for name, column in base.columns.items() if column.is_static)
        return LogLayout(
            self._cluster_name, self.keyspace, self.table, partition_key, clustering, values, types, static, self._delta
        )

    def _refresh_layout(self, names: Sequence[str], user_types: Sequence[str] = ()) -> None:
        """A response named columns, or user-type fields, the layout does not know: the table or
        a type it uses was altered since."""
        try:
            for name in user_types:
                self._cluster.refresh_user_type_metadata(self.keyspace, name)
            self._cluster.refresh_table_metadata(self.keyspace, self.log_table)
            self._cluster.refresh_table_metadata(self.keyspace, self.table)
        except Exception as exc:
            raise CdcMetadataUnavailableError(
                f"re-reading the schema of {self.keyspace}.{self.log_table}: {exc}"
            ) from exc
        self.layout = self._load_layout()
        self._user_types = _layout_user_types(self.layout)
        log.info(
            "%s.%s: the log table's columns changed; now reading %s",
            self.keyspace,
            self.table,
            ", ".join(self.layout.value_columns),
        )
        unknown = [n for n in names if n not in self.layout.types and n not in _META]
        if unknown:
            log.warning("%s: columns %s are not in the schema yet; their values pass as read", self.log_table, unknown)

    def _columns_of(self, names: Sequence[str], column_types: Sequence[Any]) -> _Columns:
        key = tuple(names)
        columns = self._columns.get(key)
        if columns is None:
            if any(n not in self.layout.types for n in names if n not in _META):
                self._refresh_layout(names)
            columns = self._columns[key] = _Columns.of(names)
        self._check_user_types(names, column_types)
        return columns

    def _check_user_types(self, names: Sequence[str], column_types: Sequence[Any]) -> None:
        """Re-read the layout when a page's user types have fields the layout does not (ALTER
        TYPE ... ADD): their values would lose the new fields. Still different after the re-read
        (the schema not agreed yet): unavailable, so the window is read again later, not lost."""
        described = _response_user_types(column_types)
        stale = sorted(n for n, fields in described.items() if self._user_types.get(_user_type_key(n)) != fields)
        if not stale:
            return
        self._refresh_layout(names, stale)
        still = [n for n in stale if self._user_types.get(_user_type_key(n)) != described[n]]
        if still:
            raise CdcMetadataUnavailableError(
                f"{self.keyspace}.{self.log_table}: user types {still} have the fields "
                f"{[list(described[n]) for n in still]} in the log's rows and "
                f"{[list(self._user_types.get(_user_type_key(n), ())) for n in still]} in the schema the "
                "driver reads (schema changes not agreed yet)"
            )

    # --- queries -----------------------------------------------------------------------------

    def _failure(self, exc: Exception, streams: int) -> Exception:
        """The error a failed log query of ``streams`` streams raises."""
        from cassandra import InvalidRequest, Unauthorized

        where = f"{self.keyspace}.{self.log_table}"
        refused = _TOO_MANY_KEYS.search(str(exc))
        if refused is not None:
            limit = refused.group(1) or refused.group(2)
            return StreamsPerQueryError(where, streams, int(limit) if limit else None, str(exc))
        if is_transient_read_failure(exc):
            return LogReadUnavailableError(where, exc)
        if isinstance(exc, InvalidRequest):
            try:
                gone = not self._log_table_exists()
            except Exception as lookup:
                return LogReadUnavailableError(f"system_schema.tables, after {where} refused a query", lookup)
            if gone:
                return LogTableGoneError(f"{self.keyspace}.{self.table}", where, str(exc))
        if isinstance(exc, Unauthorized):
            fix = f"grant the source's role (its username) SELECT on it: GRANT SELECT ON {where} TO <role>"
        else:
            fix = "retrying will not change the answer"
        return LogReadRefusedError(where, exc, fix)

    def _log_table_exists(self) -> bool:
        """Whether the cluster's schema still has the log table (asked anew: the driver's metadata
        may lag a drop). On ScyllaDB and Cassandra alike ``system_schema.tables`` lists it."""
        rows = self._session.execute(
            "SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s AND table_name = %s",
            (self.keyspace, self.log_table),
            execution_profile=self._profile,
        )
        return rows.one() is not None

    def _send(
        self, query: str, streams: Sequence[bytes], after_us: int, up_to_us: int, fetch_size: int | None
    ) -> SentWindow:
        from cassandra.query import ValueSequence

        from cdcflow.sources.scylla_cdc.routing import StreamQuery  # imports the driver

        futures, sizes = [], []
        for chunk in stream_chunks(streams, self._max_streams):
            statement = StreamQuery(query, self.keyspace, StreamId(chunk[0]).token, fetch_size)
            parameters = (ValueSequence(chunk), max_timeuuid(after_us), max_timeuuid(up_to_us))
            try:
                futures.append(self._session.execute_async(statement, parameters, execution_profile=self._profile))
            except Exception as exc:
                raise self._failure(exc, len(chunk)) from exc
            sizes.append(len(chunk))
        return SentWindow(tuple(futures), tuple(sizes))

    def window(self, streams: Sequence[bytes], after_us: int, up_to_us: int, limit: int | None) -> list[LogRow]:
        """Every row of ``streams`` with a ``cdc$time`` in ``(after_us, up_to_us]``, unordered.

        Raises :class:`WindowTooLargeError` past ``limit`` rows, having held at most that many.
        """
        return self.finish_window(self.start_window(streams, after_us, up_to_us), limit)

    def start_window(self, streams: Sequence[bytes], after_us: int, up_to_us: int) -> SentWindow:
        """Send a window's queries without waiting: their first pages arrive while other work goes on."""
        query = f'SELECT * FROM {self._from} WHERE "cdc$stream_id" IN %s AND "cdc$time" > %s AND "cdc$time" <= %s'
        return self._send(query, streams, after_us, up_to_us, self._page_size)

    def finish_window(self, sent: SentWindow, limit: int | None) -> list[LogRow]:
        """The rows of a window sent with :meth:`start_window` (see :meth:`window`); ``limit``
        counts the rows of all its queries together."""
        rows: list[LogRow] = []
        for future, size in zip(sent.futures, sent.sizes, strict=True):
            try:
                result = future.result()
            except Exception as exc:
                raise self._failure(exc, size) from exc
            for page_rows, names, column_types in self._pages(result, size):
                columns = self._columns_of(names, column_types)
                rows.extend(self._log_row(columns, row) for row in page_rows)
                if limit is not None and len(rows) > limit:
                    raise WindowTooLargeError(len(rows))
        return rows

    def _pages(self, result: Any, streams: int) -> Iterator[tuple[list[Any], list[str], list[Any]]]:
        while True:
            yield result.current_rows, list(result.column_names or ()), list(result.column_types or ())
            if not result.has_more_pages:
                return
            try:
                result.fetch_next_page()
            except Exception as exc:
                raise self._failure(exc, streams) from exc

    @staticmethod
    def _log_row(columns: _Columns, row: Sequence[Any]) -> LogRow:
        index = columns.index
        time = row[index["cdc$time"]]

        def meta(name: str) -> Any:
            position = index.get(name)
            return row[position] if position is not None else None

        return LogRow(
            stream=row[index["cdc$stream_id"]],
            time=time,
            ts_us=micros_of(time),
            seq=row[index["cdc$batch_seq_no"]],
            operation=meta("cdc$operation"),
            ttl=meta("cdc$ttl"),
            end_of_batch=meta("cdc$end_of_batch"),
            values={name: row[i] for i, name in columns.data},
        )

    def first_time_after(self, streams: Sequence[bytes], after_us: int, up_to_us: int) -> int | None:
        """The earliest ``cdc$time`` (µs) of ``streams`` in ``(after_us, up_to_us]``: one row per
        stream at most, so an empty stretch of any length costs one query (per chunk of streams)."""
        sent = self._send(
            f'SELECT "cdc$time" FROM {self._from} WHERE "cdc$stream_id" IN %s AND "cdc$time" > %s '
            'AND "cdc$time" <= %s PER PARTITION LIMIT 1',
            streams,
            after_us,
            up_to_us,
            None,
        )
        times: list[int] = []
        for future, size in zip(sent.futures, sent.sizes, strict=True):
            try:
                times.extend(micros_of(row[0]) for row in future.result())
            except Exception as exc:
                raise self._failure(exc, size) from exc
        return min(times) if times else None
