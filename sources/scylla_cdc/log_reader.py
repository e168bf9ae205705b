"""Queries of one CDC log table: a stream group's rows in a time window, and the next row's time.

Queries are sent unprepared: every response then carries its own column list, so rows written
after ``ALTER TABLE`` (which alters the log table too) are read with their new columns at once,
without re-preparing and without a stale result-metadata cache (ScyllaDB speaks protocol v4, where
a prepared ``SELECT *`` keeps the columns it was prepared with).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from cdcflow.sources.cql.cqltypes import CqlType, build_type
from cdcflow.sources.scylla_cdc.exceptions import CdcMetadataUnavailableError, UnknownCdcTableError
from cdcflow.sources.scylla_cdc.log_events import LogLayout, LogRow
from cdcflow.sources.scylla_cdc.timeuuids import max_timeuuid, micros_of

__all__ = ["LOG_SUFFIX", "LogTableReader", "WindowTooLargeError"]

LOG_SUFFIX = "_scylla_cdc_log"
_META = ("cdc$stream_id", "cdc$time", "cdc$batch_seq_no", "cdc$operation", "cdc$ttl", "cdc$end_of_batch")

log = logging.getLogger("cdcflow.scylla_cdc")


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
    ) -> None:
        self._cluster = cluster
        self._session = session
        self._profile = profile
        self._cluster_name = cluster_name
        self.keyspace = keyspace
        self.table = table
        self.log_table = table + LOG_SUFFIX
        self._page_size = page_size
        self._columns: dict[tuple[str, ...], _Columns] = {}
        self.layout = self._load_layout()
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
        return LogLayout(self._cluster_name, self.keyspace, self.table, partition_key, clustering, values, types)

    def _refresh_layout(self, names: Sequence[str]) -> None:
        """A response named columns the layout does not know: the table was altered since."""
        try:
            self._cluster.refresh_table_metadata(self.keyspace, self.log_table)
            self._cluster.refresh_table_metadata(self.keyspace, self.table)
        except Exception as exc:
            raise CdcMetadataUnavailableError(
                f"re-reading the schema of {self.keyspace}.{self.log_table}: {exc}"
            ) from exc
        self.layout = self._load_layout()
        log.info(
            "%s.%s: the log table's columns changed; now reading %s",
            self.keyspace,
            self.table,
            ", ".join(self.layout.value_columns),
        )
        unknown = [n for n in names if n not in self.layout.types and n not in _META]
        if unknown:
            log.warning("%s: columns %s are not in the schema yet; their values pass as read", self.log_table, unknown)

    def _columns_of(self, names: Sequence[str]) -> _Columns:
        key = tuple(names)
        columns = self._columns.get(key)
        if columns is None:
            if any(n not in self.layout.types for n in names if n not in _META):
                self._refresh_layout(names)
            columns = self._columns[key] = _Columns.of(names)
        return columns

    # --- queries -----------------------------------------------------------------------------

    def _execute(self, query: str, parameters: Sequence[Any], fetch_size: int | None) -> Any:
        from cassandra.query import SimpleStatement

        statement = SimpleStatement(query, fetch_size=fetch_size)
        try:
            return self._session.execute(statement, parameters, execution_profile=self._profile)
        except Exception as exc:
            raise CdcMetadataUnavailableError(
                f"reading {self.keyspace}.{self.log_table}: {type(exc).__name__}: {exc}"
            ) from exc

    def window(self, streams: Sequence[bytes], after_us: int, up_to_us: int, limit: int | None) -> list[LogRow]:
        """Every row of ``streams`` with a ``cdc$time`` in ``(after_us, up_to_us]``, unordered.

        Raises :class:`WindowTooLargeError` past ``limit`` rows, having held at most that many.
        """
        return self.finish_window(self.start_window(streams, after_us, up_to_us), limit)

    def start_window(self, streams: Sequence[bytes], after_us: int, up_to_us: int) -> Any:
        """Send a window's query without waiting: its first page arrives while other work goes on."""
        from cassandra.query import SimpleStatement, ValueSequence

        statement = SimpleStatement(
            f'SELECT * FROM {self._from} WHERE "cdc$stream_id" IN %s AND "cdc$time" > %s AND "cdc$time" <= %s',
            fetch_size=self._page_size,
        )
        parameters = (ValueSequence(list(streams)), max_timeuuid(after_us), max_timeuuid(up_to_us))
        try:
            return self._session.execute_async(statement, parameters, execution_profile=self._profile)
        except Exception as exc:
            where = f"{self.keyspace}.{self.log_table}"
            raise CdcMetadataUnavailableError(f"reading {where}: {type(exc).__name__}: {exc}") from exc

    def finish_window(self, future: Any, limit: int | None) -> list[LogRow]:
        """The rows of a window sent with :meth:`start_window` (see :meth:`window`)."""
        try:
            result = future.result()
        except Exception as exc:
            where = f"{self.keyspace}.{self.log_table}"
            raise CdcMetadataUnavailableError(f"reading {where}: {type(exc).__name__}: {exc}") from exc
        rows: list[LogRow] = []
        for page_rows, names in self._pages(result):
            columns = self._columns_of(names)
            rows.extend(self._log_row(columns, row) for row in page_rows)
            if limit is not None and len(rows) > limit:
                raise WindowTooLargeError(len(rows))
        return rows

    def _pages(self, result: Any) -> Iterator[tuple[list[Any], list[str]]]:
        while True:
            yield result.current_rows, list(result.column_names or ())
            if not result.has_more_pages:
                return
            try:
                result.fetch_next_page()
            except Exception as exc:
                raise CdcMetadataUnavailableError(f"paging {self.keyspace}.{self.log_table}: {exc}") from exc

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
        stream at most, so an empty stretch of any length costs one query."""
        from cassandra.query import ValueSequence

        result = self._execute(
            f'SELECT "cdc$time" FROM {self._from} WHERE "cdc$stream_id" IN %s AND "cdc$time" > %s '
            'AND "cdc$time" <= %s PER PARTITION LIMIT 1',
            (ValueSequence(list(streams)), max_timeuuid(after_us), max_timeuuid(up_to_us)),
            None,
        )
        times = [micros_of(row[0]) for row in result]
        return min(times) if times else None
