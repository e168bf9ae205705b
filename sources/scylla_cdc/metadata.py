"""Reading the CDC description tables: which streams exist, and when each is read.

Vnode keyspaces (seed 000, "Streams description tables"): generation timestamps come from
``cdc_generation_timestamps``, and a generation's streams from ``cdc_streams_descriptions_v2``
*only once its timestamp is there*: a node writes the streams first and the timestamp last, so a
partition whose timestamp is missing may be partial. Clusters from before 4.4 have only the v1
table ``cdc_streams_descriptions``, whose rows hold a whole generation each. A cluster upgraded
since has both: its generations were rewritten into v2, and new ones go to v2 only. ScyllaDB's
consumers read v2 only once the coordinator's ``cdc_local`` holds the ``rewritten`` row, which is
node-local and which nothing writes any more (raft-mode bootstraps skip it; since 2026.2 nothing
writes ``cdc_local``): a coordinator without it would keep them on v1, blind to new generations.
Here, while the row is not seen, every generation v1 lists is read from v1 and every other one
from v2, re-checked at each refresh: nothing depends on the row, and a generation always comes
from the same table (its partitions keep their names across restarts).

Tablet keyspaces (seed 004): ``cdc_timestamps`` lists when a table's stream set changed and
``cdc_streams`` the streams with their ``stream_state``; the whole history is rebuilt from it.

Stream sets are ``frozen<set<blob>>`` on ScyllaDB; the seed's older text shows
``set<tuple<bigint, bigint>>`` (the ``_first``/``_second`` pair): both are read.

Consistency (:class:`MetadataQueries`): ``system_distributed`` is read as ScyllaDB reads it,
``quorum_if_many`` (QUORUM when several nodes own tokens, ONE on a single node: on one node its
RF 3 still has one replica); the node-local ``system`` tables (tablet streams are virtual
tables there) and ``system_schema`` at ONE. A generation's streams read at ONE while several
nodes own tokens (the driver had not seen a node that just joined) may miss rows a replica has
not received yet: such a list is read again at the next refresh, never kept as final.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from cdcflow.sources.scylla_cdc.connection import metadata_consistency
from cdcflow.sources.scylla_cdc.exceptions import (
    CdcMetadataUnavailableError,
    GenerationMetadataError,
    MetadataTablesMissingError,
)
from cdcflow.sources.scylla_cdc.stream_id import StreamId
from cdcflow.sources.scylla_cdc.tablets import TabletStreamHistory

__all__ = [
    "GenerationReader",
    "MetadataQueries",
    "StreamRange",
    "TabletStreamReader",
    "VnodeGeneration",
    "datetime_to_micros",
    "stream_ids",
]

V2_TABLES = ("cdc_generation_timestamps", "cdc_streams_descriptions_v2")
V1_TABLE = "cdc_streams_descriptions"
TABLET_TABLES = ("cdc_timestamps", "cdc_streams")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

log = logging.getLogger("cdcflow.scylla_cdc")


def datetime_to_micros(value: datetime | int) -> int:
    """A ``timestamp`` column value as µs since the epoch (the driver returns naive UTC datetimes)."""
    if isinstance(value, int):
        return value * 1000
    aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    delta = aware - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def stream_ids(values: Iterable[Any] | None) -> list[StreamId]:
    """Stream IDs from a description column: blobs, or ``(first, second)`` pairs."""
    found = []
    for value in values or ():
        if isinstance(value, bytes | bytearray | memoryview):
            found.append(StreamId.from_bytes(value))
        elif isinstance(value, tuple) and len(value) == 2:
            found.append(StreamId.from_pair(int(value[0]), int(value[1])))
        else:
            raise GenerationMetadataError(f"a stream ID is a blob or a pair of bigints, found {value!r}")
    return found


@dataclass(frozen=True, slots=True)
class StreamRange:
    """Streams read together: a token range of a generation (v2: the row of ``range_end``, the
    range being ``(previous range_end, range_end]``; v1: the streams of one vnode index, whose
    range the v1 table does not give: ``range_end`` None)."""

    key: str
    streams: tuple[StreamId, ...]
    range_end: int | None = None


@dataclass(frozen=True, slots=True)
class VnodeGeneration:
    timestamp_us: int
    ranges: tuple[StreamRange, ...]
    expired_us: int | None = None


def _unavailable(what: str, exc: Exception) -> CdcMetadataUnavailableError:
    return CdcMetadataUnavailableError(f"reading {what}: {type(exc).__name__}: {exc}")


class MetadataQueries:
    """CDC metadata reads in their own execution profile, each at the consistency ScyllaDB uses
    for that keyspace. ``token_owners`` counts the nodes owning tokens now (the driver's view)."""

    def __init__(self, session: Any, profile: object, token_owners: Callable[[], int]) -> None:
        self._session = session
        self._profile = profile
        self.token_owners = token_owners

    def distributed(self, query: str, parameters: Sequence[Any], what: str) -> tuple[list[Any], int]:
        """Rows of a ``system_distributed`` table at ``quorum_if_many``, and the level read at."""
        level = metadata_consistency(self.token_owners())
        return self._read(query, parameters, what, level), level

    def local(self, query: str, parameters: Sequence[Any], what: str) -> list[Any]:
        """Rows of a node-local table (``system``, ``system_schema``): one replica answers."""
        from cassandra import ConsistencyLevel

        return self._read(query, parameters, what, ConsistencyLevel.ONE)

    def complete_at(self, level: int) -> bool:
        """Whether a read at ``level`` saw every acknowledged write: QUORUM, or a single owner."""
        from cassandra import ConsistencyLevel

        return level == ConsistencyLevel.QUORUM or self.token_owners() <= 1

    def _read(self, query: str, parameters: Sequence[Any], what: str, level: int) -> list[Any]:
        from cassandra import ConsistencyLevel
        from cassandra.query import SimpleStatement

        statement = SimpleStatement(query, consistency_level=level)
        try:
            return list(self._session.execute(statement, parameters, execution_profile=self._profile))
        except Exception as exc:
            name = ConsistencyLevel.value_to_name.get(level, str(level))
            raise _unavailable(f"{what} at {name}", exc) from exc


class GenerationReader:
    """Generations of vnode keyspaces from ``generations_keyspace`` (``system_distributed``)."""

    def __init__(self, queries: MetadataQueries, keyspace: str, local_keyspace: str) -> None:
        self._queries = queries
        self._keyspace = keyspace
        self._local_keyspace = local_keyspace
        # Published generations never change: a list read at QUORUM is kept. One read at ONE
        # (a single token owner then) is read again once several nodes own tokens: the driver may
        # not have seen a node that had joined, and the replica read may have missed rows.
        self._described: dict[int, VnodeGeneration] = {}
        self._final: set[int] = set()
        self.layout: Literal["v2", "v1", "v1+v2"] | None = None
        self._v2_only_seen: int | None = None

    def _execute(self, query: str, parameters: Sequence[Any] = (), what: str = "") -> list[Any]:
        rows, _ = self._queries.distributed(query, parameters, what or query)
        return rows

    def _tables(self, keyspace: str) -> set[str]:
        rows = self._queries.local(
            "SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s", (keyspace,), "system_schema.tables"
        )
        return {row[0] for row in rows}

    def detect_layout(self) -> Literal["v2", "v1", "v1+v2"] | None:
        """v2 when only its tables exist, or the v1 rewrite is known done (the ``rewritten`` row
        seen once: sticky); v1 when only the old table exists; v1+v2 when both exist without the
        row; None when there is no description table (a cluster with only tablet keyspaces)."""
        if self.layout == "v2":
            return self.layout
        tables = self._tables(self._keyspace)
        has_v2 = all(name in tables for name in V2_TABLES)
        has_v1 = V1_TABLE in tables
        if has_v2 and has_v1:
            self.layout = "v2" if self._rewritten() else "v1+v2"
        elif has_v2:
            self.layout = "v2"
        else:
            self.layout = "v1" if has_v1 else None
        return self.layout

    def _rewritten(self) -> bool:
        if "cdc_local" not in self._tables(self._local_keyspace):
            return False
        rows = self._queries.local(
            f"SELECT key FROM {self._local_keyspace}.cdc_local WHERE key = 'rewritten'", (), "cdc_local"
        )
        return bool(rows)

    def require_tables(self) -> None:
        if self.detect_layout() is None:
            raise MetadataTablesMissingError(self._keyspace, [*V2_TABLES, V1_TABLE])

    def generations(self) -> list[VnodeGeneration]:
        """Every published generation, oldest first (the layout is re-checked each time)."""
        layout = self.detect_layout()
        if layout is None:
            return []
        if layout == "v1":
            return self._v1_generations()
        v2 = self._v2_generations()
        if layout == "v2":
            return v2
        v1 = self._v1_generations()
        listed = {g.timestamp_us for g in v1}
        only_v2 = [g for g in v2 if g.timestamp_us not in listed]
        if only_v2 and self._v2_only_seen != only_v2[-1].timestamp_us:
            self._v2_only_seen = only_v2[-1].timestamp_us
            log.info(
                "%s: generations %s are in cdc_streams_descriptions_v2 only (no 'rewritten' row in %s.cdc_local): "
                "read from v2, older ones from v1",
                self._keyspace,
                [g.timestamp_us // 1000 for g in only_v2],
                self._local_keyspace,
            )
        return sorted(v1 + only_v2, key=lambda g: g.timestamp_us)

    def _v2_generations(self) -> list[VnodeGeneration]:
        rows = self._execute(
            f"SELECT time, expired FROM {self._keyspace}.cdc_generation_timestamps WHERE key = 'timestamps'",
            (),
            "cdc_generation_timestamps",
        )
        published = sorted((datetime_to_micros(r[0]), r[1]) for r in rows)
        generations = []
        for timestamp_us, expired in published:
            known = self._described.get(timestamp_us)
            if known is None or (timestamp_us not in self._final and self._queries.token_owners() > 1):
                known = self._v2_generation(timestamp_us)
                self._described[timestamp_us] = known
            expired_us = datetime_to_micros(expired) if expired is not None else None
            generations.append(VnodeGeneration(known.timestamp_us, known.ranges, expired_us))
        return generations

    def _v2_generation(self, timestamp_us: int) -> VnodeGeneration:
        from cassandra import ConsistencyLevel

        rows, level = self._queries.distributed(
            f"SELECT range_end, streams FROM {self._keyspace}.cdc_streams_descriptions_v2 WHERE time = %s",
            (timestamp_us // 1000,),
            "cdc_streams_descriptions_v2",
        )
        ranges = tuple(
            StreamRange(f"r{range_end}", tuple(stream_ids(streams)), int(range_end))
            for range_end, streams in sorted(rows)
        )
        if not ranges:
            problem = (
                f"generation {timestamp_us // 1000} is in cdc_generation_timestamps but has no streams in "
                "cdc_streams_descriptions_v2"
            )
            if not self._queries.complete_at(level):  # a replica that has not received them yet
                raise CdcMetadataUnavailableError(f"{problem} on the replica read at ONE")
            raise GenerationMetadataError(problem)
        if level == ConsistencyLevel.QUORUM:
            self._final.add(timestamp_us)
        return VnodeGeneration(timestamp_us, ranges)

    def _v1_generations(self) -> list[VnodeGeneration]:
        rows = self._execute(f"SELECT time, streams, expired FROM {self._keyspace}.{V1_TABLE}", (), V1_TABLE)
        generations = []
        for time, streams, expired in sorted(rows, key=lambda r: r[0]):
            by_vnode: dict[int, list[StreamId]] = {}
            for stream in stream_ids(streams):
                by_vnode.setdefault(stream.vnode_index if stream.version == 1 else -1, []).append(stream)
            ranges = tuple(StreamRange(f"v{index}", tuple(sorted(group))) for index, group in sorted(by_vnode.items()))
            expired_us = datetime_to_micros(expired) if expired is not None else None
            generations.append(VnodeGeneration(datetime_to_micros(time), ranges, expired_us))
        return generations


class TabletStreamReader:
    """Stream histories of tablet tables from ``tablets_keyspace`` (``system``), whose
    ``cdc_timestamps`` and ``cdc_streams`` are node-local virtual tables (read at ONE)."""

    def __init__(self, queries: MetadataQueries, keyspace: str) -> None:
        self._queries = queries
        self._keyspace = keyspace
        self._available: bool | None = None
        self._newest: dict[tuple[str, str], int | None] = {}
        self._histories: dict[tuple[str, str], TabletStreamHistory] = {}

    def _execute(self, query: str, parameters: Sequence[Any], what: str) -> list[Any]:
        return self._queries.local(query, parameters, what)

    def available(self) -> bool:
        if self._available is None:
            rows = self._execute(
                "SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s",
                (self._keyspace,),
                "system_schema.tables",
            )
            names = {row[0] for row in rows}
            self._available = all(name in names for name in TABLET_TABLES)
        return self._available

    def newest_timestamp(self, keyspace: str, table: str) -> int | None:
        """The timestamp of the table's current stream set, None for a table without tablet streams."""
        if not self.available():
            return None
        rows = self._execute(
            f"SELECT timestamp FROM {self._keyspace}.cdc_timestamps WHERE keyspace_name = %s AND table_name = %s "
            "LIMIT 1",
            (keyspace, table),
            "cdc_timestamps",
        )
        found = [datetime_to_micros(row[0]) for row in rows]
        return found[0] if found else None

    def history(self, keyspace: str, table: str) -> TabletStreamHistory | None:
        """The table's stream history, re-read only when ``cdc_timestamps`` shows a new set."""
        newest = self.newest_timestamp(keyspace, table)
        key = (keyspace, table)
        if newest is None:
            return None
        if self._newest.get(key) != newest or key not in self._histories:
            rows = self._execute(
                f"SELECT timestamp, stream_state, stream_id FROM {self._keyspace}.cdc_streams "
                "WHERE keyspace_name = %s AND table_name = %s",
                (keyspace, table),
                "cdc_streams",
            )
            self._histories[key] = TabletStreamHistory.from_rows(
                (datetime_to_micros(ts), int(state), StreamId.from_bytes(stream)) for ts, state, stream in rows
            )
            self._newest[key] = newest
        return self._histories[key]
