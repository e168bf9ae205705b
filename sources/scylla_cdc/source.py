"""The ``scylla_cdc`` source: ScyllaDB's CDC log tables, read stream group by stream group.

Partitions are stream groups of one table: in a vnode keyspace, the streams of one token range
of one generation (its row of ``cdc_streams_descriptions_v2``); in a tablet keyspace, up to
``tablet_streams_per_partition`` streams opened at the same timestamp. Each stream is read only
within its operating interval: ``[generation, next generation)`` for vnodes, ``[opened, closed)``
for tablets (ScyllaDB logs a write in the newest stream set whose timestamp is at or before
the write's, so a stream holds only rows of its lifetime; the bounds are kept all the same).

A group of a later generation, or of a tablet stream set after a resize, names the groups of the
previous one whose token ranges it overlaps (:mod:`.successors`): a key moves between those at its
start, and the engines read it only once they are committed up to there (``Partition.succeeds``).

A partition is read continuously up to its watermark, ``now - confidence_window`` (clamped to its
end, and to the last metadata refresh so a generation published since cannot be missed), in
windows of at most ``window_ms``; an empty window is followed by a probe for the next row, so an
empty stretch of any length costs one query. A window holding more than ``max_buffered_rows`` is
halved until it fits: that bounds memory whatever the write rate.

A group is queried again once its watermark moved ``poll_interval_ms``; each read that finds
nothing doubles that group's wait, up to ``max_idle_poll_ms``, and a read that finds a change
resets it (an idle table costs a query per group every 10 s, not two a second). A log query that
fails in a way that may pass (:class:`LogReadUnavailableError`) is retried for its group alone,
after the ``query_retry`` backoff: ``latest_offset`` returns what was read before the failure and
the group waits while the others go on, so nothing is read twice; a group still failing after
``query_retry.max_elapsed_s`` stops the source. A query the cluster refuses for good raises at once.

Offsets: ``{"ts": T}`` means every row with a ``cdc$time`` at or before ``T`` (µs) is done;
``{"ts": T, "after": [time, stream, seq]}`` means every row before ``T`` is done, and those at ``T``
up to that base write, in the order (time UUID, stream): a read cycle holding more rows than the
engine allows is cut between two base writes, never inside one.

``snapshot: initial | initial_only`` adds the tables' existing rows first, read from the base
tables by token-range slice partitions (:mod:`.snapshot_rows`, :mod:`cdcflow.sources.cql.snapshot`).
Under ``initial`` every stream group's start (``start``, by default ``latest``: the pipeline's
first start minus the confidence window) is committed before any slice is read, and a table's
groups read nothing until every slice of the table is committed. If the log's TTL has meanwhile
expired rows from within a confidence window of the snapshot's start on, the hand-off fails
(``SnapshotOutlivedLogError``) instead of skipping them.

Live snapshots (``cdcflow snapshot``, ``snapshot: when_needed``; :mod:`cdcflow.sources.cql.live_snapshot`)
re-read a table while its groups stream: each group reads the chunks of its own token ranges (its
vnode range; the tablets of its streams, as they are at the chunk's watermarks), with the chunk's
read end time as its high watermark. A group of a new generation or stream set takes the requests
its predecessors left unfinished when it starts. Under ``when_needed`` a group without a checkpoint
starts at ``start`` (default ``latest``) with a live snapshot of its table, and a group whose
committed position the log's TTL has passed goes on from the TTL horizon with one, instead of
failing with ``LogExpiredError``.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from cdcflow.chunks import chunked
from cdcflow.config import RetryConfig
from cdcflow.contract import (
    DataLossHeadroom,
    Offset,
    Partition,
    PluginConfig,
    PluginContext,
    Rejected,
    Source,
    Succession,
    offset_key,
)
from cdcflow.errors import SnapshotTableError, SnapshotUnsupportedError, SourceUnavailableError
from cdcflow.events import Record
from cdcflow.live_snapshots import LiveSnapshotProgress, SnapshotRequest
from cdcflow.metrics import source_counter
from cdcflow.prerequisites import CheckResult, PrerequisiteScope
from cdcflow.retry import Backoff
from cdcflow.sources.cql.connection import CqlClientSecurity
from cdcflow.sources.cql.live_snapshot import LIVE_FIELD, LiveSnapshots, LiveState, TokenRange
from cdcflow.sources.cql.snapshot import RowToRecord, SnapshotConfig, SnapshotTable, TokenRangeSnapshot
from cdcflow.sources.scylla_cdc import prerequisites
from cdcflow.sources.scylla_cdc.connection import connect_as_configured, token_owner_count
from cdcflow.sources.scylla_cdc.exceptions import (
    CdcMetadataUnavailableError,
    KeysOnlyDeltaError,
    LogExpiredError,
    LogReadUnavailableError,
    MetadataTablesMissingError,
)
from cdcflow.sources.scylla_cdc.log_events import LogRow, batch_events, batches
from cdcflow.sources.scylla_cdc.log_reader import LogTableReader, SentWindow, WindowTooLargeError
from cdcflow.sources.scylla_cdc.metadata import (
    GenerationReader,
    MetadataQueries,
    StreamRange,
    TabletStreamReader,
    datetime_to_micros,
)
from cdcflow.sources.scylla_cdc.snapshot_rows import ScyllaRowEvents, base_table
from cdcflow.sources.scylla_cdc.stream_id import StreamId
from cdcflow.sources.scylla_cdc.successors import tablet_predecessors, vnode_predecessors
from cdcflow.sources.scylla_cdc.table_options import CdcOptions, SchemaTablesLookup
from cdcflow.sources.scylla_cdc.tokens import ring_ranges

__all__ = ["ScyllaCdcSource", "ScyllaCdcSourceConfig"]

log = logging.getLogger("cdcflow.scylla_cdc")

_TABLE_NAME = re.compile(r"^[A-Za-z0-9_]+\.[A-Za-z0-9_]+$")
_MAX_TAIL = b"\xff" * 17  # sorts after every (time UUID, stream) pair of a microsecond
Bound = tuple[int, bytes, bytes, int]


class ScyllaCdcSourceConfig(PluginConfig, CqlClientSecurity, SnapshotConfig):
    hosts: list[str] = Field(default_factory=lambda: ["127.0.0.1"], min_length=1, description="contact points")
    port: int = Field(default=9042, ge=1, le=65535)
    local_dc: str | None = Field(default=None, description="read from this datacenter's replicas first")
    protocol_version: int = Field(default=4, ge=3, le=5, description="CQL protocol (ScyllaDB speaks 4)")
    cluster: str = Field(default="scylla", description="the server name: topics are <cluster>.<keyspace>.<table>")
    tables: list[str] = Field(min_length=1, description="base tables to follow, as keyspace.table (CDC enabled)")
    start: str | None = Field(
        default=None,
        description="where partitions without a checkpoint start: earliest (all the log holds), latest "
        "(now minus the confidence window, when the pipeline first starts), or an ISO-8601 time / epoch ms; "
        "null: latest with snapshot: initial (the snapshot holds the state before it), else earliest",
    )
    cluster_write_timeout_ms: int = Field(
        default=2_000,
        ge=1,
        description="the cluster's write_request_timeout_in_ms (ScyllaDB's default 2000): a write can "
        "still land that long after its timestamp, so the confidence window must cover it",
    )
    generation_leeway_ms: int = Field(
        default=5_000,
        ge=0,
        description="ScyllaDB's CDC generation leeway, a constant 5 s (cdc/generation.cc "
        "get_generation_leeway): a write stamped up to this long ago is still taken (cdc/metadata.cc "
        "lines 87-128), so the confidence window must cover it too. Lower it only for a test cluster "
        "whose writes all carry the coordinator's clock",
    )
    confidence_window_ms: int = Field(
        default=30_000,
        ge=1,
        description="how old a change must be before it is read: at least cluster_write_timeout_ms plus "
        "generation_leeway_ms (replicas that have not applied a write yet, writes stamped in the past), "
        "plus client clock skew. 30 s is the default of scylla-cdc-java, scylla-cdc-go and the Kafka "
        "connector (scylla.confidence.window.size) and scylla-cdc-rust's safety_interval. Latency is "
        "this plus about poll_interval_ms: windows are read continuously up to now minus this",
    )
    window_ms: int = Field(
        default=30_000,
        ge=1,
        description="the widest time span one query reads when catching up (ScyllaDB's consumers read "
        "30 s windows: scylla.query.time.window.size, QueryTimeWindowSize; rust: 60 s); empty stretches "
        "are skipped by probing for the next row, not window by window",
    )
    poll_interval_ms: int = Field(
        default=500,
        ge=1,
        description="a partition is queried again once its watermark moved this much, so latency is "
        "the confidence window plus at most this plus a read cycle. ScyllaDB's consumers sleep 10 s "
        "between polls (scylla-cdc-go PostNonEmptyQueryDelay, rust sleep_interval) and wait for a whole "
        "query window; two small queries per stream group per second are cheap for ScyllaDB, raise it "
        "for clusters with thousands of stream groups",
    )
    max_idle_poll_ms: int = Field(
        default=10_000,
        ge=1,
        description="each read of a stream group that finds nothing doubles the group's wait, from "
        "poll_interval_ms up to this; a read that finds a change resets it. A change in a group idle "
        "that long arrives up to this much later (scylla-cdc-rust sleeps 10 s between reads, "
        "scylla-cdc-go 30 s after an empty one); poll_interval_ms: no backoff",
    )
    page_size: int = Field(
        default=5_000,
        ge=1,
        description="rows per CQL page; 5000 is the drivers' default that the Kafka connector keeps "
        "(scylla.query.options.fetch.size = 0)",
    )
    max_concurrent_queries: int = Field(
        default=4,
        ge=0,
        description="window queries of the next partitions sent ahead while one is processed (their "
        "first pages wait in memory: at most page_size x this rows, times the queries a group needs "
        "when it has more than max_streams_per_query streams); 0: one query at a time",
    )
    max_streams_per_query: int = Field(
        default=100,
        ge=1,
        description="streams named in one query's IN list: a group with more (a node with more shards, "
        "tablet_streams_per_partition above it) is read in several queries sent together. ScyllaDB refuses "
        "more than max_partition_key_restrictions_per_query (default 100) keys in one query",
    )
    max_buffered_rows: int = Field(
        default=50_000,
        ge=1,
        description="memory ceiling: rows one window may hold (ten pages); a fuller window is halved "
        "until it fits, and one read cycle holds at most this many rows",
    )
    metadata_refresh_ms: int = Field(
        default=5_000,
        ge=1,
        description="how often generations and tablet stream sets are re-read. A generation starts 2 x "
        "ring_delay + 5 s (65 s) after it is published, so it is known long before it operates; "
        "scylla-cdc-go polls every 15 s",
    )
    consistency: Literal["ONE", "LOCAL_ONE", "QUORUM", "LOCAL_QUORUM", "ALL"] = Field(
        default="QUORUM",
        description="for log-table reads (the Kafka connector's default). CDC metadata is read as ScyllaDB "
        "reads it, whatever this says: QUORUM when several nodes own tokens, ONE on a single node",
    )
    generations_keyspace: str = Field(
        default="system_distributed",
        description="where cdc_generation_timestamps and cdc_streams_descriptions(_v2) are",
    )
    tablets_keyspace: str = Field(default="system", description="where cdc_timestamps, cdc_streams and cdc_local are")
    schema_keyspace: str = Field(
        default="system_schema",
        description="where each table's CDC options are (tables.extensions['cdc']): a table that logs deltas of "
        "keys alone (cdc 'delta': 'keys') is read only with post-images",
    )
    query_retry: RetryConfig = Field(
        default_factory=lambda: RetryConfig(initial_backoff_ms=100, max_backoff_ms=10_000),
        description="a stream group whose log query fails in a way that may pass (a read or client timeout, "
        "too few live replicas, an overloaded node, a lost connection) is queried again after this backoff, "
        "alone: the other groups go on and nothing is read twice (100 ms doubling up to 10 s, as "
        "scylla-cdc-rust's stream reader); failing for max_elapsed_s stops the source",
    )
    tablet_streams_per_partition: int = Field(
        default=16, ge=1, description="tablet keyspaces: streams opened together are read in groups of this size"
    )
    log_ttl_s: int | None = Field(
        default=None,
        ge=0,
        description="overrides the log's TTL, which is otherwise each table's cdc ttl option (its "
        "system_schema.tables.extensions['cdc'], 86400 s by default): a new reader starts at it, a reader "
        "that fell behind it fails (LogExpiredError), expired generations are not listed; 0: rows never expire",
    )

    @field_validator("tables")
    @classmethod
    def _qualified(cls, tables: list[str]) -> list[str]:
        for name in tables:
            if not _TABLE_NAME.match(name):
                raise ValueError(f"{name!r} is not keyspace.table")
        return tables

    @field_validator("consistency", mode="before")
    @classmethod
    def _readable(cls, value: object) -> object:
        # scylladb db/consistency_level.cc lines 401-409 (validate_for_read): every log query would
        # be refused as an invalid request.
        if isinstance(value, str) and value.upper() in ("EACH_QUORUM", "ANY"):
            raise ValueError(
                f"{value.upper()} is only supported for writes (ScyllaDB refuses it for reads: "
                "db/consistency_level.cc validate_for_read); use LOCAL_QUORUM to read from a quorum of "
                "the local datacenter, or QUORUM"
            )
        return value

    @field_validator("confidence_window_ms")
    @classmethod
    def _covers_late_writes(cls, value: int, info: ValidationInfo) -> int:
        timeout, leeway = info.data.get("cluster_write_timeout_ms"), info.data.get("generation_leeway_ms")
        if timeout is None or leeway is None:
            return value  # their own errors are reported
        if value < timeout + leeway:
            raise ValueError(
                f"{value} ms is shorter than cluster_write_timeout_ms + generation_leeway_ms = {timeout} + "
                f"{leeway} = {timeout + leeway} ms: a write stamped up to the generation leeway ago is still "
                "taken (scylladb cdc/metadata.cc lines 87-128) and its replicas may apply it up to the write "
                "timeout later, so a window read sooner can miss it for good; set it to at least "
                f"{timeout + leeway}"
            )
        return value

    @field_validator("max_idle_poll_ms")
    @classmethod
    def _not_below_poll_interval(cls, value: int, info: ValidationInfo) -> int:
        poll = info.data.get("poll_interval_ms")
        if poll is not None and value < poll:
            raise ValueError(f"{value} ms is shorter than poll_interval_ms ({poll} ms): set it to at least that")
        return value

    @field_validator("start")
    @classmethod
    def _start_format(cls, value: str | None) -> str | None:
        if value is not None:
            _parse_start(value, 0)
        return value

    @property
    def stream_start(self) -> str:
        """``start`` with its default resolved."""
        if self.start is not None:
            return self.start
        return "latest" if self.snapshot in ("initial", "when_needed") else "earliest"

    @model_validator(mode="after")
    def _consistent(self) -> ScyllaCdcSourceConfig:
        if self.max_buffered_rows < self.page_size:
            raise ValueError(f"max_buffered_rows ({self.max_buffered_rows}) must hold a page ({self.page_size})")
        if self.page_size * self.max_concurrent_queries > self.max_buffered_rows:
            raise ValueError(
                f"page_size x max_concurrent_queries ({self.page_size} x {self.max_concurrent_queries}) is over "
                f"the memory ceiling max_buffered_rows ({self.max_buffered_rows})"
            )
        return self


def _parse_start(value: str, now_us: int) -> int | None:
    """The first timestamp (µs) to read; None for earliest."""
    if value == "earliest":
        return None
    if value == "latest":
        return now_us
    if value.isdigit():
        return int(value) * 1000
    try:
        return datetime_to_micros(datetime.fromisoformat(value.replace("Z", "+00:00")))
    except ValueError as exc:
        raise ValueError(f"start must be earliest, latest, an ISO-8601 time or epoch ms, found {value!r}") from exc


def _readable_delta(table: str, options: CdcOptions | None) -> Literal["full", "keys"]:
    """The table's delta mode, when its events can carry its rows: deltas of keys alone say which
    key changed but not how, so such a table is read only with post-images."""
    if options is None:
        return "full"  # no cdc extension (before ScyllaDB 4.0, or not ScyllaDB): full deltas
    if options.delta == "keys" and not options.postimage:
        raise KeysOnlyDeltaError(table)
    return options.delta


@dataclass(frozen=True)
class _Stream:
    stream: StreamId
    opened_us: int
    closed_us: int | None


@dataclass(frozen=True)
class _Group:
    """A partition: streams of one table read together."""

    id: str
    table: str  # keyspace.table
    streams: tuple[_Stream, ...]
    start_us: int
    end_us: int | None  # exclusive; None while any stream may still get rows
    succeeds: Succession | None = None  # the groups whose keys it takes over at start_us
    token_ranges: tuple[TokenRange, ...] | None = None  # vnodes: its range (tablets: from the stream set)

    def partition(self) -> Partition:
        return Partition(
            self.id,
            {"table": self.table, "streams": [s.stream.hex() for s in self.streams], "start_us": self.start_us},
            self.succeeds,
        )


@dataclass(frozen=True)
class _Position:
    ts: int
    after: tuple[bytes, bytes, int] | None = None  # (time UUID, stream, seq) of the last row read at ts
    # Set on a start placed at the log's TTL horizon (nothing read yet): it follows the horizon
    # as rows expire. A position reached by reading never has it: falling behind the TTL fails.
    horizon: bool = False

    @classmethod
    def of(cls, offset: Offset) -> _Position:
        after = offset.get("after")
        if after is None:
            return cls(int(offset["ts"]), horizon=bool(offset.get("horizon")))
        import uuid

        time_text, stream_hex, seq = after
        return cls(int(offset["ts"]), (uuid.UUID(time_text).bytes, bytes.fromhex(stream_hex), int(seq)))

    def offset(self) -> Offset:
        if self.after is None:
            return {"ts": self.ts, "horizon": True} if self.horizon else {"ts": self.ts}
        import uuid

        time_bytes, stream, seq = self.after
        return {"ts": self.ts, "after": [str(uuid.UUID(bytes=time_bytes)), stream.hex(), seq]}

    @property
    def bound(self) -> Bound:
        if self.after is None:
            return (self.ts, _MAX_TAIL, b"", 0)
        return (self.ts, *self.after)

    @property
    def query_after_us(self) -> int:
        """The exclusive lower time bound of a query that must still see the rest of ``ts``."""
        return self.ts if self.after is None else self.ts - 1


def _alive(lifetimes: Mapping[bytes, tuple[int, int | None]], row: LogRow) -> bool:
    """The row is inside its stream's ``[opened, closed)`` (a query of several streams reads each
    over the whole window; rows outside a stream's lifetime belong to no partition of it)."""
    bounds = lifetimes.get(row.stream)
    if bounds is None:
        return False
    opened, closed = bounds
    return opened <= row.ts_us and (closed is None or row.ts_us < closed)


def _vnode_group_id(table: str, generation_us: int, range_key: str) -> str:
    return f"{table}/g{generation_us // 1000}/{range_key}"


class _LogStream:
    """The stream groups as a live snapshot's stream (:class:`~cdcflow.sources.cql.live_snapshot.LiveStream`)."""

    def __init__(self, source: ScyllaCdcSource) -> None:
        self._source = source

    def latest(self, partition: Partition, start: Offset, cap: Offset | None, max_records: int | None) -> Offset:
        return self._source._stream_latest(partition, start, cap, max_records)

    def read(self, partition: Partition, start: Offset, end: Offset) -> Iterator[Record | Rejected]:
        return self._source._stream_read(partition, start, end)

    def order(self, position: Offset) -> Bound:
        return _Position.of(position).bound

    def high_mark(self, partition: Partition, position: Offset, read_ended_us: int) -> Offset | None:
        # The log is in write-time order, and a row the read saw was written before it ended.
        return _Position(read_ended_us).offset()

    def token_ranges(self, partition: Partition, position: Offset) -> Sequence[TokenRange]:
        group = self._source._group(partition)
        return self._source._group_token_ranges(group, _Position.of(position).ts) or ()

    def snapshot_table(self, name: str) -> tuple[SnapshotTable, tuple[str, ...], RowToRecord]:
        return self._source._live_table(name)


def _vnode_token_ranges(ranges: Sequence[StreamRange]) -> dict[str, tuple[TokenRange, ...]]:
    """Each range key of a v2 generation with the tokens it holds (v1 gives no range ends: none)."""
    ends = sorted((r.range_end, r.key) for r in ranges if r.range_end is not None)
    if len(ends) != len(ranges):
        return {}
    cut = [end for end, _ in ends]
    return {key: ring_ranges(cut, index) for index, (_, key) in enumerate(ends)}


def _with_predecessors(
    groups: dict[str, _Group], lifetimes: Sequence[tuple[StreamId, int, int | None]]
) -> dict[str, _Group]:
    """``groups`` of one tablet table, each opened after a resize naming the groups of the
    streams whose token ranges its own streams took over then."""
    parents = tablet_predecessors(lifetimes)
    group_of = {s.stream: group.id for group in groups.values() for s in group.streams}
    linked = {}
    for group_id, group in groups.items():
        predecessors = {group_of[p] for s in group.streams for p in parents.get(s.stream, ())} - {group_id}
        succession = Succession(tuple(sorted(predecessors)), group.start_us) if predecessors else None
        linked[group_id] = replace(group, succeeds=succession)
    return linked


@dataclass
class _Prefetch:
    """A window query sent ahead for a partition, valid if the engine asks from ``start``."""

    start: str
    after_us: int
    up_to_us: int
    window: SentWindow


@dataclass
class _Retry:
    """A stream group whose last log query failed: not queried before ``due`` (monotonic s)."""

    backoff: Backoff
    due: float = 0.0


@dataclass
class _Cache:
    """What ``latest_offset`` read, for the ``read`` of the same range that follows it."""

    partition: str
    start: str
    end: str
    batches: list[list[LogRow]] = field(default_factory=list)


class ScyllaCdcSource(Source[ScyllaCdcSourceConfig]):
    """``scylla_cdc``: changes from ScyllaDB CDC log tables, generation- and stream-aware."""

    type_name = "scylla_cdc"
    config_model = ScyllaCdcSourceConfig

    def __init__(self, config: ScyllaCdcSourceConfig, context: PluginContext) -> None:
        super().__init__(config, context)
        self._cluster: Any = None
        self._session: Any = None
        self._profile: object = None  # log reads, at the configured consistency
        self._metadata_profile: object = None  # CDC metadata reads, at ScyllaDB's own
        self._readers: dict[str, LogTableReader] = {}
        self._generations: GenerationReader | None = None
        self._tablets: TabletStreamReader | None = None
        self._tablet_tables: set[str] = set()
        self._groups: dict[str, _Group] = {}
        self._listed: list[str] = []
        self._ttl_us: dict[str, int | None] = {}
        self._cdc_options: dict[str, CdcOptions | None] = {}  # None: the table has no cdc extension
        self._metadata_at_us = 0  # metadata is complete up to here: read before this time
        self._metadata_due = 0.0
        self._start_us: int | None = None
        self._spans: dict[str, int] = {}
        self._cache: _Cache | None = None
        self._visits: dict[str, int] = {}  # partition -> its place in the engine's read order
        self._expected: dict[str, Offset] = {}  # where the engine will next read each partition from
        self._prefetched: dict[str, _Prefetch] = {}
        self._asked: set[str] = set()  # partitions the engine asked latest_offset of
        self._idle_wait_us: dict[str, int] = {}  # groups whose last reads found nothing: their wait
        self._retries: dict[str, _Retry] = {}  # groups whose last log query failed
        self._snapshot: TokenRangeSnapshot | None = None
        self._live: LiveSnapshots | None = None
        self._live_rows = ScyllaRowEvents()  # the tables live snapshots read, added as they are asked for
        self._tablet_lifetimes: dict[str, list[tuple[StreamId, int, int | None]]] = {}
        self._adopted: set[str] = set()  # groups that took their predecessors' unfinished live snapshots
        self.bounded = config.snapshot == "initial_only"  # the slices are all there is

    # --- lifecycle ---------------------------------------------------------------------------

    def open(self) -> None:
        config = self.config
        connection = connect_as_configured(config)
        self._cluster, self._session = connection.cluster, connection.session
        self._profile, self._metadata_profile = connection.log_profile, connection.metadata_profile
        try:
            self._discover()
            if config.snapshot in ("initial", "initial_only"):
                self._snapshot = self._build_snapshot()
            self._live = LiveSnapshots(
                config, self.context, self._session, _LogStream(self), execution_profile=self._profile
            )
        except BaseException:
            self.close()
            raise

    def _build_snapshot(self) -> TokenRangeSnapshot:
        rows = ScyllaRowEvents()
        tables = []
        for reader in self._readers.values():
            table, types = base_table(self._cluster, reader.layout)
            rows.add(reader.layout, types)
            tables.append(table)
        return TokenRangeSnapshot(
            self.config,
            tables,
            self.context,
            self._session,
            rows,
            stream_partitions=lambda: [p.id for p in self._stream_partitions()],
            execution_profile=self._profile,
        )

    def _discover(self) -> None:
        """Each table's log, layout (vnodes or tablets) and TTL, and the metadata to read them by."""
        config = self.config
        queries = MetadataQueries(self._session, self._metadata_profile, lambda: token_owner_count(self._cluster))
        self._generations = GenerationReader(queries, config.generations_keyspace, config.tablets_keyspace)
        self._tablets = TabletStreamReader(queries, config.tablets_keyspace)
        options = SchemaTablesLookup(self._session, config.schema_keyspace, self._metadata_profile)
        for name in config.tables:
            keyspace, table = name.split(".")
            self._cdc_options[name] = options.cdc_options(keyspace, table)
            delta = _readable_delta(name, self._cdc_options[name])
            self._readers[name] = LogTableReader(
                self._cluster,
                self._session,
                self._profile,
                config.cluster,
                keyspace,
                table,
                config.page_size,
                config.max_streams_per_query,
                delta,
            )
            self._ttl_us[name] = self._log_ttl_us(name)
            if self._tablets.newest_timestamp(keyspace, table) is not None:
                self._tablet_tables.add(name)
        if len(self._tablet_tables) < len(config.tables) and self._generations.detect_layout() is None:
            raise MetadataTablesMissingError(config.generations_keyspace, ["cdc_generation_timestamps"])
        self._start_us = _parse_start(config.stream_start, self._now_us() - config.confidence_window_ms * 1000)
        self._refresh_metadata()

    def close(self) -> None:
        if self._cluster is not None:
            self._cluster.shutdown()
            self._cluster = None

    @staticmethod
    def _now_us() -> int:
        return time.time_ns() // 1000

    def _log_ttl_us(self, table: str) -> int | None:
        """How long the table's log keeps rows: ``log_ttl_s`` if set, else the table's cdc option
        ``ttl`` (its ``system_schema.tables.extensions['cdc']``; ``scylla_tables.cdc`` is always
        empty since ScyllaDB 4.0: ``db/schema_tables.cc`` line 1663); None: rows never expire."""
        if self.config.log_ttl_s is not None:
            return self.config.log_ttl_s * 1_000_000 or None
        options = self._cdc_options.get(table)
        if options is None:
            log.warning(
                "%s: no cdc schema extension in %s.tables: the log's TTL is unknown, so a reader that falls "
                "behind it cannot be told; set log_ttl_s to the table's cdc ttl",
                table,
                self.config.schema_keyspace,
            )
            return None
        return options.log_ttl_us

    # --- metadata ----------------------------------------------------------------------------

    def _refresh_metadata_if_due(self) -> None:
        # Reads stop at the last refresh (a generation published later operates later still), so
        # a confidence window shorter than metadata_refresh_ms refreshes as often as it needs.
        stale = self._metadata_at_us < self._now_us() - self.config.confidence_window_ms * 1000
        if stale or time.monotonic() >= self._metadata_due:
            self._refresh_metadata()

    def _refresh_metadata(self) -> None:
        """Re-read generations and stream sets and rebuild the groups; everything published before
        this call started is in them, so reads may go up to that moment."""
        assert self._generations is not None and self._tablets is not None
        started_us = self._now_us()
        groups: dict[str, _Group] = {}
        vnode_tables = [t for t in self.config.tables if t not in self._tablet_tables]
        if vnode_tables:
            generations = self._generations.generations()
            for index, generation in enumerate(generations):
                end = generations[index + 1].timestamp_us if index + 1 < len(generations) else None
                previous = generations[index - 1] if index > 0 else None
                # A key's stream in this generation may have been any overlapping range's in the last.
                replaced = vnode_predecessors(previous.ranges, generation.ranges) if previous is not None else {}
                ranges_of = _vnode_token_ranges(generation.ranges)
                for table in vnode_tables:
                    for stream_range in generation.ranges:
                        group_id = _vnode_group_id(table, generation.timestamp_us, stream_range.key)
                        streams = tuple(_Stream(s, generation.timestamp_us, end) for s in stream_range.streams)
                        succeeds = None
                        if previous is not None:
                            predecessors = replaced[stream_range.key]
                            succeeds = Succession(
                                tuple(_vnode_group_id(table, previous.timestamp_us, key) for key in predecessors),
                                generation.timestamp_us,
                            )
                        groups[group_id] = _Group(
                            group_id,
                            table,
                            streams,
                            generation.timestamp_us,
                            end,
                            succeeds,
                            ranges_of.get(stream_range.key),
                        )
        for table in sorted(self._tablet_tables):
            keyspace, name = table.split(".")
            history = self._tablets.history(keyspace, name)
            if history is not None:
                lifetimes = [(life.stream, life.opened_us, life.closed_us) for life in history.lifetimes()]
                self._tablet_lifetimes[table] = lifetimes
                groups.update(self._tablet_groups(table, lifetimes))
        self._groups.update(groups)
        self._listed = list(groups)
        self._metadata_at_us = started_us
        self._metadata_due = time.monotonic() + self.config.metadata_refresh_ms / 1000

    def _tablet_groups(self, table: str, lifetimes: Sequence[tuple[StreamId, int, int | None]]) -> dict[str, _Group]:
        by_opening: dict[int, list[_Stream]] = {}
        for stream, opened, closed in lifetimes:
            by_opening.setdefault(opened, []).append(_Stream(stream, opened, closed))
        groups = {}
        size = self.config.tablet_streams_per_partition
        for opened, streams in sorted(by_opening.items()):
            streams.sort(key=lambda s: (s.stream.token, s.stream.raw))
            for number, listed in enumerate(chunked(streams, size)):
                chunk = tuple(listed)
                ends = [s.closed_us for s in chunk]
                end = None if any(e is None for e in ends) else max(e for e in ends if e is not None)
                group_id = f"{table}/t{opened // 1000}/{number}"
                groups[group_id] = _Group(group_id, table, chunk, opened, end)
        return _with_predecessors(groups, lifetimes)

    # --- partitions and offsets --------------------------------------------------------------

    def partitions(self) -> Sequence[Partition]:
        slices = self._snapshot.partitions() if self._snapshot is not None else []
        return [*slices, *self._stream_partitions()]

    def _stream_partitions(self) -> list[Partition]:
        if self.config.snapshot == "initial_only":
            return []
        self._refresh_metadata_if_due()
        now = self._now_us()
        listed = []
        for group_id in self._listed:
            group = self._groups[group_id]
            if group.end_us is not None and self._expired_before(group.table, now) >= group.end_us:
                continue  # its rows expired: nothing left to read
            listed.append(group.partition())
            self._visits.setdefault(group_id, len(self._visits))  # the engine reads in this order
        return listed

    def _slice(self, partition: Partition) -> TokenRangeSnapshot | None:
        """The snapshot, when ``partition`` is one of its slices."""
        if self._snapshot is not None and self._snapshot.holds(partition.id):
            return self._snapshot
        return None

    def _group(self, partition: Partition) -> _Group:
        group = self._groups.get(partition.id)
        if group is None:
            self._refresh_metadata()
            group = self._groups.get(partition.id)
        if group is None:
            raise CdcMetadataUnavailableError(f"partition {partition.id} is not in the CDC metadata (yet)")
        return group

    def _expired_before(self, table: str, now_us: int) -> int:
        ttl = self._ttl_us.get(table)
        return now_us - ttl if ttl is not None else -(1 << 62)

    def initial_offset(self, partition: Partition) -> Offset:
        snapshot = self._slice(partition)
        if snapshot is not None:
            return snapshot.initial_offset()
        group = self._group(partition)
        begin = group.start_us
        if self._start_us is not None:
            begin = max(begin, self._start_us)
        horizon = self._expired_before(group.table, self._now_us()) - 1
        position = _Position(begin - 1)
        if position.ts < horizon:  # older rows expired: a new reader starts with what the log keeps
            position = _Position(horizon, horizon=True)
        if group.end_us is not None and position.ts >= group.end_us - 1:
            position = _Position(group.end_us - 1)
        offset = position.offset()
        self._expected.setdefault(partition.id, offset)  # a partition without a checkpoint starts here
        if self.config.snapshot == "when_needed" and not self._finished(group, offset):
            return LiveSnapshots.with_table_snapshotted(offset, group.table)
        return offset

    def watermark(self, partition: Partition, offset: Offset) -> int | None:
        if self._slice(partition) is not None:
            return None  # a slice is a state, not a stretch of time
        position = _Position.of(offset)
        return position.ts if position.after is not None else position.ts + 1

    def is_finished(self, partition: Partition, offset: Offset) -> bool:
        snapshot = self._slice(partition)
        if snapshot is not None:
            return snapshot.is_finished(offset)
        group = self._group(partition)
        self._check_not_behind_ttl(group, offset)
        finished = self._finished(group, offset)
        if finished and self._live is not None:
            self._live.forget(partition.id)  # a chunk it could not finish is its successors' to read
        return finished

    def check_prerequisites(self, scope: PrerequisiteScope) -> Sequence[CheckResult]:
        if self._session is None:  # cdcflow doctor: on a connection of its own
            return prerequisites.check_cluster(self.config, scope.timeout_s)
        # At start, just opened: each table's options are read, and its log table was found.
        return prerequisites.check_cdc_options(
            self.config, self.config.tables, self._cdc_options, dict.fromkeys(self.config.tables, True)
        )

    def data_loss_headroom(self, partition: Partition, committed: Offset) -> DataLossHeadroom | None:
        """The log's TTL less how far behind the group's committed position is: rows older than
        the TTL are gone from the log (a reader behind it fails with LogExpiredError)."""
        group = self._groups.get(partition.id)  # snapshot slices read base tables: none
        ttl_us = self._ttl_us.get(group.table) if group is not None else None
        if ttl_us is None:
            return None
        lag_us = max(0, self._now_us() - _Position.of(committed).ts)
        detail = f"the log keeps rows {ttl_us // 1_000_000} s, the partition is {lag_us // 1_000_000} s behind"
        return DataLossHeadroom((ttl_us - lag_us) / 1e6, "log_ttl", detail)

    def caught_up(self, partition: Partition, offset: Offset) -> bool | None:
        # For lag (cdcflow.metrics): read up to now minus the confidence window (within a poll
        # interval) is all the log may give now; _plan then has nothing to read yet. A slice not
        # read yet, and a group waiting for it, are work waiting.
        snapshot = self._slice(partition)
        if snapshot is not None:
            return snapshot.is_finished(offset)
        if partition.id in self._retries:
            return False  # its last query failed: what it has is not known
        return self._plan(self._group(partition), offset) is None

    def _finished(self, group: _Group, offset: Offset) -> bool:
        if group.end_us is None:
            return False
        position = _Position.of(offset)
        if position.after is None and position.ts >= group.end_us - 1:
            return True
        return self._expired_before(group.table, self._now_us()) >= group.end_us

    def _upper(self, group: _Group) -> tuple[int, bool]:
        """How far the group may be read now, and whether that is its end (not the live edge)."""
        live = min(self._now_us() - self.config.confidence_window_ms * 1000, self._metadata_at_us)
        if group.end_us is not None and group.end_us - 1 <= live:
            return group.end_us - 1, True
        return live, False

    def latest_offset(self, partition: Partition, start: Offset, max_records: int | None) -> Offset:
        snapshot = self._slice(partition)
        if snapshot is not None:
            return snapshot.latest_offset(start)
        self._refresh_metadata_if_due()
        group = self._group(partition)
        if self.config.snapshot == "when_needed" and self._behind_ttl(group, start):
            return self._from_the_horizon_with_a_snapshot(group, start)
        adopted = self._with_predecessors_snapshots(partition, group, start)
        if adopted is not start:
            return adopted  # a range that only queues them: the next one reads with them
        assert self._live is not None, "open() first"
        return self._live.latest_offset(partition, start, max_records)

    def _stream_latest(
        self, partition: Partition, start: Offset, cap: Offset | None, max_records: int | None
    ) -> Offset:
        """How far ``partition`` can be read from ``start`` now, never past ``cap``."""
        group = self._group(partition)
        if not self._may_stream(group):
            return start
        self._check_log_kept(group, start)
        self._check_not_behind_ttl(group, start)
        self._visits.setdefault(partition.id, len(self._visits))
        self._asked.add(partition.id)  # past the engine's succession gate, if it has one
        retry = self._retries.get(partition.id)
        if retry is not None and time.monotonic() < retry.due:
            return start  # its last query failed: it waits out its backoff, the other groups go on
        prefetched = self._prefetched.pop(partition.id, None)
        planned = self._plan(group, start, cap)
        if planned is None:
            return start
        position, upper = planned
        if prefetched is None or prefetched.start != offset_key(start):
            prefetched = None
        elif upper - prefetched.up_to_us < self.config.poll_interval_ms * 1000:
            # The query sent ahead covers nearly all there is: stop there rather than send another
            # for the few milliseconds since (catching up, reading goes on past it).
            upper = prefetched.up_to_us
        if cap is not None:
            upper = min(upper, _Position.of(cap).ts)  # a live snapshot chunk's high watermark
            if position.bound >= _Position(upper).bound:
                return start
        budget = min(max_records or self.config.max_buffered_rows, self.config.max_buffered_rows)
        kept: list[list[LogRow]] = []
        count = 0
        end = position
        try:
            for batch, reached in self._batches(group, position, _Position(upper), prefetched):
                end = reached
                if batch is not None:
                    kept.append(batch)
                    count += len(batch)
                    if count >= budget:
                        break
        except LogReadUnavailableError as failure:
            self._retry_later(group, failure)  # what was read before it is kept: read once
        else:
            self._retries.pop(group.id, None)
            self._pace(group, found=count > 0)
        self._cache = _Cache(partition.id, offset_key(start), offset_key(end.offset()), kept)
        self._expected[partition.id] = end.offset()
        self._send_ahead(partition.id)
        return end.offset()

    def _retry_later(self, group: _Group, failure: LogReadUnavailableError) -> None:
        """Schedule ``group``'s next query after the ``query_retry`` backoff (RetriesExhaustedError
        once the group has failed for its max_elapsed_s)."""
        retry = self._retries.setdefault(group.id, _Retry(Backoff(self.config.query_retry)))
        delay = retry.backoff.next_delay(f"reading stream group {group.id}", failure)
        retry.due = time.monotonic() + delay
        self._counted("query_retry")
        self.context.logger.warning(
            "stream group %s: %s; queried again in %.2f s, the other groups go on", group.id, failure, delay
        )

    def _pace(self, group: _Group, found: bool) -> None:
        """After a read of ``group``: a change found resets its wait to poll_interval_ms, nothing
        found doubles it, up to max_idle_poll_ms."""
        if found:
            self._idle_wait_us.pop(group.id, None)
            return
        wait = self._idle_wait_us.get(group.id, self.config.poll_interval_ms * 1000)
        self._idle_wait_us[group.id] = min(2 * wait, self.config.max_idle_poll_ms * 1000)

    def _may_stream(self, group: _Group) -> bool:
        """Gate 2 of the snapshot: the group's table has every slice committed (or no snapshot)."""
        return self._snapshot is None or self._snapshot.stream_may_start(group.table)

    def _check_log_kept(self, group: _Group, start: Offset) -> None:
        """At the hand-off: the log still holds every row from a confidence window before the
        snapshot's start (rows the snapshot may have missed) up to where the group is."""
        if self._snapshot is None:
            return
        self._snapshot.check_log_kept(
            _Position.of(start).ts,
            self._snapshot.started_us(group.table),
            self._expired_before(group.table, self._now_us()),
            self.config.confidence_window_ms * 1000,
            f"{group.table} stream group {group.id}",
        )

    def _check_not_behind_ttl(self, group: _Group, offset: Offset) -> None:
        """Fail loudly when rows after ``offset`` may have expired unread: its position, reached
        by reading (or committed), is older than the log's TTL, before the group's end. (Under
        ``snapshot: when_needed`` latest_offset goes on from the horizon with a live snapshot.)"""
        if self.config.snapshot == "when_needed" or not self._behind_ttl(group, offset):
            return
        now = self._now_us()
        ttl = self._ttl_us[group.table]
        assert ttl is not None
        self._counted("log_expired")
        raise LogExpiredError(group.table, group.id, (now - _Position.of(offset).ts) / 1e6, ttl / 1e6)

    def _behind_ttl(self, group: _Group, offset: Offset) -> bool:
        position = _Position.of(offset)
        if position.horizon or self._finished_by_reading(group, position):
            return False
        return position.ts < self._expired_before(group.table, self._now_us()) - 1

    def _from_the_horizon_with_a_snapshot(self, group: _Group, start: Offset) -> Offset:
        """``snapshot: when_needed``: the group's committed position is older than the log's TTL;
        it goes on from what the log keeps, with a live snapshot of its table."""
        horizon = _Position(self._expired_before(group.table, self._now_us()) - 1, horizon=True)
        self._counted("log_expired_snapshot")
        self.context.logger.warning(
            "%s stream group %s: its committed position %s is older than the log's TTL: changes after it have "
            "expired. snapshot: when_needed: going on from what the log keeps, with a live snapshot of %s",
            group.table,
            group.id,
            _Position.of(start).ts,
            group.table,
        )
        live = {k: v for k, v in start.items() if k == LIVE_FIELD}
        return LiveSnapshots.with_table_snapshotted({**horizon.offset(), **live}, group.table)

    def _with_predecessors_snapshots(self, partition: Partition, group: _Group, start: Offset) -> Offset:
        """``start`` with the live snapshots its predecessors left unfinished (they ended before
        their chunk's high watermark), when the group starts reading (``start`` itself when none)."""
        succession = group.succeeds
        reader = self.context.committed_offsets
        if succession is None or reader is None or group.id in self._adopted:
            return start
        self._adopted.add(group.id)
        if _Position.of(start).ts >= group.start_us:
            return start  # it has read past its start: what it took then is in its offset
        committed = reader()
        offset = start
        for predecessor in succession.predecessors:
            state = LiveState.of(committed.get(predecessor) or {})
            for request in state.queue if state is not None else ():
                if request.table == group.table:
                    offset = LiveSnapshots.with_request(offset, request)
        if offset != start:
            self.context.logger.info(
                "stream group %s takes the live snapshots its predecessors %s left unfinished",
                group.id,
                ", ".join(succession.predecessors),
            )
            return offset
        return start

    @staticmethod
    def _finished_by_reading(group: _Group, position: _Position) -> bool:
        return group.end_us is not None and position.after is None and position.ts >= group.end_us - 1

    def _plan(self, group: _Group, start: Offset, cap: Offset | None = None) -> tuple[_Position, int] | None:
        """Where reading ``group`` from ``start`` begins (past the TTL horizon) and how far it may
        go now, never past ``cap``; None when there is nothing to read yet (finished, or its wait
        not over; a group reading up to a live snapshot chunk's high watermark, ``cap``, does not
        wait once it may reach it)."""
        if self._finished(group, start):
            return None
        position = _Position.of(start)
        upper, at_end = self._upper(group)
        floor = self._expired_before(group.table, self._now_us()) - 1
        if position.horizon and position.ts < min(floor, upper):
            # a start at the TTL horizon follows it: rows older than the TTL are gone
            return _Position(min(floor, upper), horizon=True), upper
        if cap is not None and _Position.of(cap).ts <= upper:
            upper, at_end = _Position.of(cap).ts, True
        if position.after is None:
            if position.ts >= upper:
                return None
            wait = self._idle_wait_us.get(group.id, self.config.poll_interval_ms * 1000)
            if not at_end and upper - position.ts < wait:
                return None  # let the watermark move the group's wait before querying again
        return position, upper

    def _send_ahead(self, current: str) -> None:
        """Send the first window query of the partitions the engine reads next, so their pages
        arrive while this one is turned into events (at most ``max_concurrent_queries``)."""
        limit = self.config.max_concurrent_queries
        for partition_id, sent in list(self._prefetched.items()):
            if self._finished(self._groups[partition_id], json.loads(sent.start)):
                del self._prefetched[partition_id]  # the engine no longer reads it
        if limit == 0 or len(self._prefetched) >= limit:
            return
        order = sorted(self._visits, key=self._visits.__getitem__)
        place = self._visits[current]
        following = order[place + 1 :] + order[: place + 1]
        for partition_id in following:
            if len(self._prefetched) >= limit:
                return
            start = self._expected.get(partition_id)
            group = self._groups.get(partition_id)
            if start is None or group is None or partition_id in self._prefetched or partition_id == current:
                continue
            if not self._may_stream(group):
                continue  # waits for the snapshot: nothing to send ahead
            if group.succeeds is not None and partition_id not in self._asked:
                continue  # may wait for the groups it replaces: the engine does not ask yet
            if partition_id in self._retries:
                continue  # its own read retries when its backoff is over
            planned = self._plan(group, start)
            if planned is None:
                continue
            position, upper = planned
            after_us = position.query_after_us
            lifetimes = self._lifetimes(group, after_us, upper)
            up_to = min(after_us + self._spans.get(group.id, self.config.window_ms * 1000), upper)
            if not lifetimes or up_to <= after_us:
                continue
            window = self._readers[group.table].start_window(list(lifetimes), after_us, up_to)
            self._counted("window_query")
            self._prefetched[partition_id] = _Prefetch(offset_key(start), after_us, up_to, window)

    def read(self, partition: Partition, start: Offset, end: Offset) -> Iterator[Record | Rejected]:
        snapshot = self._slice(partition)
        if snapshot is not None:
            yield from snapshot.read(partition, start, end)
            return
        assert self._live is not None, "open() first"
        yield from self._live.read(partition, start, end)

    def _stream_read(self, partition: Partition, start: Offset, end: Offset) -> Iterator[Record | Rejected]:
        """The group's changes in (start, end]."""
        now_ms = time.time_ns() // 1_000_000
        cache = self._cache
        if cache is not None and (cache.partition, cache.start, cache.end) == (
            partition.id,
            offset_key(start),
            offset_key(end),
        ):
            self._cache = None
            found: Iterator[list[LogRow]] = iter(cache.batches)
        else:
            group = self._group(partition)
            found = (b for b, _ in self._batches(group, _Position.of(start), _Position.of(end)) if b is not None)
        reader = self._readers[self._group(partition).table]
        for batch in found:
            yield from batch_events(reader.layout, batch, partition.id, now_ms)

    # --- reading windows ---------------------------------------------------------------------

    def _batches(
        self, group: _Group, start: _Position, end: _Position, prefetched: _Prefetch | None = None
    ) -> Iterator[tuple[list[LogRow] | None, _Position]]:
        """The base writes of ``group`` in ``(start, end]`` in read order, each with the position
        it completes, and ``(None, position)`` each time a window or an empty stretch is crossed."""
        reader = self._readers[group.table]
        position = start
        while position.bound < end.bound:
            after_us = position.query_after_us
            lifetimes = self._lifetimes(group, after_us, end.ts)
            if not lifetimes:
                break  # every stream closed before this: nothing more can come
            streams = list(lifetimes)
            if prefetched is not None and prefetched.after_us == after_us and prefetched.up_to_us <= end.ts:
                rows, up_to = self._sent_window(group, reader, streams, prefetched, end.ts)
            else:
                rows, up_to = self._window(group, reader, streams, after_us, end.ts)
            prefetched = None
            kept = sorted(
                (r for r in rows if position.bound < r.sort_key <= end.bound and _alive(lifetimes, r)),
                key=lambda r: r.sort_key,
            )
            for batch in batches(kept):
                last = batch[-1]
                yield batch, _Position(last.ts_us, (last.time.bytes, last.stream, last.seq))
            if up_to >= end.ts:
                break
            position = _Position(up_to)
            yield None, position
            if not rows:  # an empty window: jump straight to the next row, however far
                self._counted("probe")
                following = reader.first_time_after(streams, up_to, end.ts)
                if following is None:
                    break
                position = _Position(following - 1)
                yield None, position
        yield None, end

    @staticmethod
    def _lifetimes(group: _Group, after_us: int, up_to_us: int) -> dict[bytes, tuple[int, int | None]]:
        """The streams that may hold rows in ``(after_us, up_to_us]``, with their ``[opened, closed)``."""
        return {
            s.stream.raw: (s.opened_us, s.closed_us)
            for s in group.streams
            if s.opened_us <= up_to_us and (s.closed_us is None or s.closed_us > after_us + 1)
        }

    def _window(
        self, group: _Group, reader: LogTableReader, streams: list[bytes], after_us: int, limit_us: int
    ) -> tuple[list[LogRow], int]:
        """Rows of one window starting after ``after_us``: as wide as the group's last good span,
        halved while it holds more than ``max_buffered_rows``."""
        widest = self.config.window_ms * 1000
        span = self._spans.get(group.id, widest)
        while True:
            up_to = min(after_us + span, limit_us)
            self._counted("window_query")
            try:
                rows = reader.window(streams, after_us, up_to, self.config.max_buffered_rows if span > 1 else None)
            except WindowTooLargeError:
                span = max(1, (up_to - after_us) // 2)
                self._counted("window_split")
                continue
            # A window far from full may widen again, up to window_ms.
            self._spans[group.id] = min(widest, span * 2) if len(rows) < self.config.max_buffered_rows // 4 else span
            return rows, up_to

    def _sent_window(
        self, group: _Group, reader: LogTableReader, streams: list[bytes], sent: _Prefetch, limit_us: int
    ) -> tuple[list[LogRow], int]:
        try:
            return reader.finish_window(sent.window, self.config.max_buffered_rows), sent.up_to_us
        except WindowTooLargeError:
            self._counted("window_split")
            self._spans[group.id] = max(1, (sent.up_to_us - sent.after_us) // 2)
            return self._window(group, reader, streams, sent.after_us, limit_us)

    def _counted(self, what: str) -> None:
        source_counter(self.context.pipeline, what).inc()

    # --- live snapshots (cdcflow.live_snapshots.LiveSnapshotSource) -----------------------------

    def check_snapshot_request(self, request: SnapshotRequest) -> None:
        if self._live is None:
            raise SourceUnavailableError("the source is not open yet (the pipeline is starting): ask again")
        self._live_table(request.table)
        self._live.check_request(request)

    def with_snapshot_request(self, partition: Partition, offset: Offset, request: SnapshotRequest) -> Offset | None:
        if self._slice(partition) is not None:
            return None
        group = self._group(partition)
        if group.table != request.table or self._finished(group, offset):
            return None
        if self._group_token_ranges(group, self._now_us()) is None:
            raise SnapshotUnsupportedError(
                f"{group.table} stream group {group.id}: its generation is described in the v1 table only, which "
                "does not say which tokens a group holds: a live snapshot cannot tell its keys"
            )
        assert self._live is not None, "open() first"
        return self._live.with_request(offset, request)

    def live_snapshot_progress(self, partition: Partition, offset: Offset) -> list[LiveSnapshotProgress]:
        if self._live is None or self._slice(partition) is not None or self._finished(self._group(partition), offset):
            return []  # a finished group's unfinished requests are its successors' (they take them)
        return self._live.progress(partition, offset)

    def _live_table(self, name: str) -> tuple[SnapshotTable, tuple[str, ...], RowToRecord]:
        reader = self._readers.get(name)
        if reader is None:
            raise SnapshotTableError(
                f"this source follows {', '.join(self.config.tables)}, not {name}: name one of them"
            )
        table, types = base_table(self._cluster, reader.layout)
        self._live_rows.add(reader.layout, types)
        return table, reader.layout.key_columns, self._live_rows

    def _group_token_ranges(self, group: _Group, at_us: int) -> tuple[TokenRange, ...] | None:
        """The tokens whose changes ``group`` carries at ``at_us``: its vnode range, or the ranges
        of its tablet streams operating then; None when the metadata does not say (v1)."""
        if group.table not in self._tablet_tables:
            return group.token_ranges
        alive = sorted(
            (stream.token, stream.raw)
            for stream, opened, closed in self._tablet_lifetimes.get(group.table, [])
            if opened <= at_us and (closed is None or at_us < closed)
        )
        ends = [token for token, _ in alive]
        mine = {s.stream.raw for s in group.streams}
        ranges = [r for index, (_, raw) in enumerate(alive) if raw in mine for r in ring_ranges(ends, index)]
        return tuple(sorted(ranges))

    def commit(self, offsets: Mapping[str, Offset]) -> None:
        """Nothing to move: the log keeps rows for their TTL whatever consumers did. A snapshot
        counts its committed slices (and the groups' recorded starts) at once."""
        if self._snapshot is not None:
            self._snapshot.note_committed(offsets)
