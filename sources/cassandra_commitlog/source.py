r"""The ``cassandra_commitlog`` source: one node's cdc_raw directory, followed as Cassandra syncs it.

One partition per node (this process reads the node's local ``cdc_raw``). An offset is
``{"segment": id, "position": p}``: every entry of an older segment, and every entry of segment
``id`` ending at or before logical position ``p``, is done. Only data the segment's ``_cdc.idx``
declares synced is read, so a change is emitted within about one ``commitlog_sync_period`` and
never from a half-written section. A segment is left behind only once Cassandra marked it
``COMPLETED`` and it was read to its end; after the checkpoint covering it is durable it is
deleted (or moved to an archive), so cdc_raw never fills up and blocks Cassandra's writes.

Bytes that cannot be read go to the error store with their position, and reading goes on. A
``COMPLETED`` segment whose file ends before the offset its index says was synced (cut short:
truncated by a disk, a copy, a hand) is read as far as it goes, then kept whole with its index in
the error store (``cdcflow commitlog kept`` / ``dump --error-store``), logged with its path, offset and
size, and counted (``segment_cut_short``); the stream goes on with the next segment, and the file
leaves cdc_raw for ``cdc_unreadable/``, never deleted or archived. A segment still being written
is never taken for a cut one: its file may end anywhere until Cassandra marks it ``COMPLETED``.

With the compiled core and the ``delta`` row image, a range whose every entry the core decodes to
compact rows is handed over as compact batches (:meth:`CassandraCommitLogSource.read_event_batches`,
:mod:`cdcflow.batches`): the same events, without a Python object per event; any other range
(a damaged entry, a schema change, a range deletion, a multi-cell column) is read by ``read``.

``snapshot: initial | initial_only`` adds the tables' existing rows first, as token-range slice
partitions (:mod:`.snapshot`, :mod:`cdcflow.sources.cql.snapshot`). Under ``initial`` the node
partition's start is recorded as the oldest segment with CDC data in cdc_raw (``{"segment": id,
"position": 0, "recorded_for_snapshot": true}``; none yet: from the first segment, as without a
snapshot) before any slice is read; the partition reads
nothing until every slice is committed, then reads from there. Nothing is deleted meanwhile, so
cdc_raw grows: the source logs how full it is against the node's ``cdc_total_space`` (from
``system_views.settings``), and if the recorded segment is gone at the hand-off (Cassandra deletes
the oldest segments when full and ``cdc_block_writes`` is false) it fails with
``SnapshotOutlivedLogError`` rather than skip what the snapshot could not see.

Live snapshots (``cdcflow snapshot``, ``snapshot: when_needed``; :mod:`cdcflow.sources.cql.live_snapshot`)
re-read a table while the node's partition streams: its chunks are cut from the whole ring (the
rows this node emits, under ``replicas: primary``), read at ONE through this node (as full row
images are), and their high watermark is the synced end of cdc_raw two ``commitlog_sync_period``\ s
after the read. Under ``when_needed`` a node partition without a checkpoint starts with a live
snapshot of every table, and so does one whose committed segment is gone from cdc_raw before it was
read whole (``"segment_read": true`` in an offset says it was, and this source deleted it).
"""

from __future__ import annotations

import logging
import shutil
import socket
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

from pydantic import Field

from cdcflow.batches import BatchTable, EventBatch
from cdcflow.config import ResolvedPath
from cdcflow.contract import DataLossHeadroom, Offset, Partition, PluginConfig, PluginContext, Rejected, Source
from cdcflow.errors import ConfigError, SnapshotTableError, SourceUnavailableError
from cdcflow.events import ChangeEvent, Record, SchemaChangeEvent
from cdcflow.live_snapshots import LiveSnapshotProgress, SnapshotRequest
from cdcflow.metrics import source_counter
from cdcflow.prerequisites import CheckResult, PrerequisiteScope
from cdcflow.sources.cassandra_commitlog import prerequisites
from cdcflow.sources.cassandra_commitlog.cdc_index import CdcIndex, index_path, read_cdc_index
from cdcflow.sources.cassandra_commitlog.cdc_space import (
    CdcRawGrowth,
    CdcSpaceSettings,
    cdc_raw_bytes,
    read_cdc_space_settings,
)
from cdcflow.sources.cassandra_commitlog.changes import (
    VERSION,
    RowChange,
    cassandra_source,
    change_event,
    row_changes,
)
from cdcflow.sources.cassandra_commitlog.cluster import LOCAL_NODE_PROFILE, connect
from cdcflow.sources.cassandra_commitlog.compiled import (
    CompactInto,
    CompiledDecoder,
    CompiledFramer,
    UpdateChanges,
    compiled_core,
)
from cdcflow.sources.cassandra_commitlog.error_store import (
    ErrorRecord,
    ErrorStore,
    ErrorStoreConfig,
    KeptSegment,
    KeptSegmentInfo,
    open_error_store,
)
from cdcflow.sources.cassandra_commitlog.exceptions import CommitLogError, SegmentCutShortError, UnknownTableError
from cdcflow.sources.cassandra_commitlog.full_rows import FullRowReader
from cdcflow.sources.cassandra_commitlog.mutation import Mutation, MutationDecoder, PartitionUpdate, newest_timestamp
from cdcflow.sources.cassandra_commitlog.out_of_sequence import OutOfSequenceStore
from cdcflow.sources.cassandra_commitlog.replicas import PrimaryReplicaFilter
from cdcflow.sources.cassandra_commitlog.schema import SchemaCatalog, TableSchema, load_schema_catalog
from cdcflow.sources.cassandra_commitlog.segment import (
    EntryFault,
    Section,
    SegmentRead,
    parse_segment_name,
    read_entries,
    read_framed,
)
from cdcflow.sources.cassandra_commitlog.snapshot import CassandraRowEvents, snapshot_table, snapshot_tables
from cdcflow.sources.cql.connection import CqlClientSecurity, refusal
from cdcflow.sources.cql.live_snapshot import WHOLE_RING, LiveSnapshots, TokenRange
from cdcflow.sources.cql.snapshot import (
    RowToRecord,
    SnapshotConfig,
    SnapshotOutlivedLogError,
    SnapshotTable,
    TokenRangeSnapshot,
)

__all__ = ["CassandraCommitLogSource", "CassandraCommitLogSourceConfig"]

# Bytes kept per error-store record: a Cassandra blob must stay well under the mutation size limit;
# a segment with more unreadable bytes than this is kept whole (see ``_unreadable_dir``).
_MAX_ERROR_BYTES = 1 << 20
_CLOSED_WITHOUT_INDEX = CdcIndex(offset=(1 << 31) - 1, completed=True)
# The system_schema tables whose mutations (in the commit log like any other) change a table's schema.
_SCHEMA_TABLES = frozenset({"tables", "columns", "dropped_columns"})
# While the stream waits for a snapshot: how often cdc_raw's size is measured, and from which share
# of cdc_total_space on it is worth a warning (then at every further tenth).
_CDC_RAW_CHECK_S = 10.0
_CDC_RAW_WARN_FROM = 0.5
# A live snapshot chunk's high watermark is taken this many sync periods after its read: every
# write the read saw is in the commit log by then, and synced into cdc_raw's index.
_SYNC_PERIODS_BEFORE_HIGH_MARK = 2
_DEFAULT_SYNC_PERIOD_S = 10.0  # cassandra.yaml's commitlog_sync_period, when the node does not say
_SEGMENT_READ = "segment_read"  # in an offset: it is the end of a segment read whole


class CassandraCommitLogSourceConfig(PluginConfig, CqlClientSecurity, SnapshotConfig):
    cdc_raw: ResolvedPath = Field(description="the node's cdc_raw_directory, read locally")
    hosts: list[str] = Field(default_factory=lambda: ["127.0.0.1"], description="nodes to read the schema from")
    port: int = Field(default=9042, ge=1, le=65535)
    cluster: str = Field(default="cassandra", description="the server name: topics are <cluster>.<keyspace>.<table>")
    node: str | None = Field(default=None, description="this node's name in events and offsets; default the hostname")
    tables: list[str] | None = Field(
        default=None, description="keyspace.table names to emit; default every table with cdc = true"
    )
    replicas: Literal["primary", "all"] = Field(
        default="primary",
        description="primary: emit only changes this node is the primary (or first live) replica of; all: every change",
    )
    node_address: str | None = Field(
        default=None, description="this node's address in the ring (for replicas: primary); default the first host"
    )
    row_image: Literal["delta", "full"] = Field(
        default="delta",
        description="delta: the columns each mutation carried; full: the whole row, read back from the local node"
        " once the change's time bucket closed (seed 001's stateless processing)",
    )
    window_count: int = Field(default=5, ge=1, description="full: open time buckets (seed 001: 5)")
    window_interval_ms: int = Field(
        default=60_000, ge=100, description="full: one time bucket's width (seed 001: 1 min)"
    )
    processed_segments: Literal["delete", "archive", "keep"] = Field(
        default="delete", description="what happens to a segment once it is read and checkpointed"
    )
    archive_dir: ResolvedPath | None = Field(default=None, description="where processed segments go (archive)")
    schema_refresh_s: float = Field(default=60.0, gt=0, description="how often the schema is re-read")
    error_store: ErrorStoreConfig = Field(default_factory=ErrorStoreConfig)


@dataclass(slots=True)
class _PendingRow:
    """full: a row changed in the range, waiting to be read back."""

    table: TableSchema
    raw_key: tuple[bytes | None, ...]
    change: RowChange
    op: str  # c if the row was inserted in the range, else the last change's op
    segment: int
    position: int


class _FramedEntry(Protocol):
    """An entry as either reader frames it (``segment.Entry`` or the compiled core's ``FramedEntry``)."""

    @property
    def end(self) -> int: ...

    @property
    def mutation(self) -> bytes | None: ...


@dataclass(slots=True)
class _Changes:
    """delta: what one mutation changes, decoded (row changes per partition update) and the
    ``system_schema`` updates that become schema-change events."""

    updates: list[UpdateChanges]
    schema_updates: list[PartitionUpdate]


_Decoded = TypeVar("_Decoded")


@dataclass(frozen=True, slots=True)
class _Position:
    segment: int
    position: int

    @classmethod
    def of(cls, offset: Offset) -> _Position:
        return cls(int(offset.get("segment", 0)), int(offset.get("position", 0)))

    def offset(self) -> Offset:
        return {"segment": self.segment, "position": self.position}


class CassandraCommitLogSource(Source[CassandraCommitLogSourceConfig]):
    """``cassandra_commitlog``: changes from the commit-log segments Cassandra hard-links into cdc_raw."""

    type_name = "cassandra_commitlog"
    config_model = CassandraCommitLogSourceConfig

    def __init__(self, config: CassandraCommitLogSourceConfig, context: PluginContext) -> None:
        super().__init__(config, context)
        self.node = config.node or socket.gethostname()
        self._cluster: Any = None
        self._session: Any = None
        self._catalog = SchemaCatalog()
        self._catalog_read_at = 0.0
        self._error_store: ErrorStore | None = None
        self._wanted_tables = {name.lower() for name in config.tables} if config.tables else None
        self._cdc_off_warned: set[str] = set()
        self._decoders: dict[int, MutationDecoder] = {}
        # The compiled core (cdcflow._native) frames entries and decodes delta images when built;
        # the reference decoders above decode what it declines, and everything in full mode.
        self._native = compiled_core()
        self._compiled: CompiledDecoder | None = None
        self._cached: tuple[Path, bytes] | None = None  # the segment latest_offset read last
        self._unreadable_dir = config.cdc_raw.parent / "cdc_unreadable"
        self._dropped_tables: set[str] = set()  # ids absent from the schema after a refresh
        self._replica_filter: PrimaryReplicaFilter | None = None
        self._full_rows: FullRowReader | None = None
        self._out_of_sequence: OutOfSequenceStore | None = None
        # full: every time bucket before this (µs) is closed and was processed; a change older than it
        # that shows up later is out of sequence.
        self._closed_before_us = 0
        self._late_before_us = 0
        self._horizon_us = 0
        self._snapshot: TokenRangeSnapshot | None = None
        self._live: LiveSnapshots | None = None
        self._log_kept_checked = False  # snapshot: when_needed: the committed segment was looked for
        self.bounded = config.snapshot == "initial_only"  # the slices are all there is
        self._cdc_space: CdcSpaceSettings | None = None  # the node's, read at open
        self._cdc_growth = CdcRawGrowth(config.cdc_raw)  # for the data-loss headroom
        self._cdc_raw_checked_at = float("-inf")
        self._cdc_raw_warned_share = 0.0

    # --- lifecycle ---------------------------------------------------------------------------

    def open(self) -> None:
        try:
            self._cluster, self._session = connect(
                self.config.hosts,
                self.config.port,
                local_node=self.config.node_address or self.config.hosts[0],
                security=self.config,
            )
        except Exception as exc:
            raise refusal(self.config.hosts, exc) or SourceUnavailableError(
                f"cannot reach Cassandra at {self.config.hosts}: {exc}"
            ) from exc
        self._refresh_schema()
        if self.config.row_image == "full":
            self._full_rows = FullRowReader(self._session, LOCAL_NODE_PROFILE)
            self._out_of_sequence = OutOfSequenceStore(self._session, self.config.error_store.keyspace, self.node)
        if self.config.replicas == "primary":
            self._replica_filter = PrimaryReplicaFilter(self._cluster, self.config.node_address or self.config.hosts[0])
        self._error_store = open_error_store(
            self.config.error_store, default_error_file(self.context), lambda: self._session
        )
        if self.config.snapshot in ("initial", "initial_only"):
            self._snapshot = self._build_snapshot()
        self._live = LiveSnapshots(
            self.config, self.context, self._session, _CommitLogStream(self), execution_profile=LOCAL_NODE_PROFILE
        )
        self._read_cdc_space_settings()

    def _snapshot_tables(self) -> list[TableSchema]:
        tables = snapshot_tables(self._catalog, self.config.tables, "source.tables")
        if not tables:
            raise ConfigError(
                f"source.snapshot: {self.config.snapshot} but no table has cdc = true (and no counter columns) "
                "to read; name them in source.tables"
            )
        return tables

    def _build_snapshot(self) -> TokenRangeSnapshot:
        tables = self._snapshot_tables()
        emits_token = self._replica_filter.emits_token if self._replica_filter is not None else None
        return TokenRangeSnapshot(
            self.config,
            [snapshot_table(t) for t in tables],
            self.context,
            self._session,
            CassandraRowEvents(self.config.cluster, tables, emits_token),
            stream_partitions=lambda: [p.id for p in self._stream_partitions()],
            # One node's worker snapshots what it emits: slices of different nodes never share an id.
            id_prefix=f"{self.node}/",
        )

    def _read_cdc_space_settings(self) -> None:
        """The node's ``cdc_total_space`` and ``cdc_block_writes`` (Cassandra 4.1+ settings table),
        for the data-loss headroom and the warnings while the stream waits; left unknown where the
        table is not there."""
        try:
            self._cdc_space = read_cdc_space_settings(self._session, LOCAL_NODE_PROFILE)
        except Exception as exc:  # an older node, or no access to system_views
            self.context.logger.info("cannot read the node's CDC settings (%s): cdc_raw is not watched", exc)
            return
        # The headroom's write rate: sampled from now on, over three of the node's sync periods.
        self._cdc_growth = CdcRawGrowth(self.config.cdc_raw, self._cdc_space.commitlog_sync_period_s)
        self._cdc_growth.sample(time.monotonic())
        if self.config.snapshot == "initial" and self._cdc_space.cdc_block_writes is False:
            self.context.logger.warning(
                "this node has cdc_block_writes: false: when cdc_raw reaches cdc_total_space while the stream waits "
                "for the snapshot, Cassandra deletes the oldest segments and the pipeline stops at the hand-off "
                "(SnapshotOutlivedLogError)"
            )

    def check_prerequisites(self, scope: PrerequisiteScope) -> Sequence[CheckResult]:
        if self._session is not None:  # at start, just opened: the schema and settings are read
            tables = prerequisites.check_tables(self.config, self._catalog)
            if not prerequisites.reads_cdc_raw(self.config):
                return tables
            return [
                *tables,
                *prerequisites.check_node_cdc(self._cdc_space),
                *prerequisites.check_cdc_raw(self.config),
            ]
        node_address = self.config.node_address or self.config.hosts[0]
        try:
            cluster, session = connect(
                self.config.hosts, self.config.port, local_node=node_address, security=self.config
            )
        except Exception as exc:
            raise refusal(self.config.hosts, exc) or SourceUnavailableError(
                f"cannot reach Cassandra at {self.config.hosts}: {exc}"
            ) from exc
        try:
            catalog = load_schema_catalog(session)
            try:
                settings = read_cdc_space_settings(session, LOCAL_NODE_PROFILE)
            except Exception:  # an older node, or no access to system_views: those checks are skipped
                settings = None
        finally:
            cluster.shutdown()
        tables = prerequisites.check_tables(self.config, catalog)
        if not prerequisites.reads_cdc_raw(self.config):
            return tables
        return [
            *tables,
            *prerequisites.check_node_cdc(settings),
            *prerequisites.check_cdc_raw(self.config),
            *prerequisites.check_node(self.config, settings, node_address),
        ]

    def close(self) -> None:
        if self._cluster is not None:
            self._cluster.shutdown()
            self._cluster = None

    # --- schema ------------------------------------------------------------------------------

    def _refresh_schema(self) -> None:
        try:
            self._catalog = load_schema_catalog(self._session)
        except Exception as exc:
            raise SourceUnavailableError(f"cannot read system_schema: {exc}") from exc
        refreshed = self._catalog_read_at > 0  # at open, the start's own check refuses such tables
        self._catalog_read_at = time.monotonic()
        self._decoders.clear()
        self._compiled = None
        if refreshed:
            self._warn_of_tables_without_cdc()

    def _warn_of_tables_without_cdc(self) -> None:
        """A table of ``tables`` with ``cdc = false`` (turned off while the pipeline ran: the start
        refuses it) writes nothing to cdc_raw: say so once, rather than deliver nothing silently."""
        for name in sorted(self._wanted_tables or ()):
            keyspace, _, table_name = name.partition(".")
            table = self._catalog.by_name(keyspace, table_name)
            if table is not None and not table.cdc and name not in self._cdc_off_warned:
                self._cdc_off_warned.add(name)
                self.context.logger.warning(
                    "%s has cdc = false: its changes no longer reach cdc_raw and are not delivered; "
                    "ALTER TABLE %s WITH cdc = true",
                    name,
                    name,
                )

    def _refresh_schema_if_due(self) -> None:
        if time.monotonic() - self._catalog_read_at > self.config.schema_refresh_s:
            self._refresh_schema()

    def _emits(self, table: TableSchema) -> bool:
        if table.keyspace == "system_schema" and table.table in _SCHEMA_TABLES:
            return True  # read for schema changes (see _schema_changes)
        if not table.cdc:
            return False
        if any(c.type_text == "counter" for c in table.columns.values()):
            self._counted("skipped_counter_table_update")
            return False  # counter updates are deltas of a shard's value, not a row state
        if self._wanted_tables is not None:
            return f"{table.keyspace}.{table.table}".lower() in self._wanted_tables
        return True

    def _decoder(self, version: int) -> MutationDecoder:
        self._refresh_schema_if_due()
        decoder = self._decoders.get(version)
        if decoder is None:
            decoder = self._decoders[version] = MutationDecoder(self._catalog, version, self._emits)
        return decoder

    def _compiled_decoder(self) -> CompiledDecoder:
        self._refresh_schema_if_due()
        if self._compiled is None:
            self._compiled = CompiledDecoder(self._catalog, self._emits, self._native, self._dropped_tables)
        return self._compiled

    def _entries(
        self,
        data: bytes,
        path: Path,
        state: SegmentRead,
        *,
        after: int,
        durable_to: int | None = None,
        synced_to: int | None = None,
        decode: bool = False,
        with_mutations: bool = True,
        compact: CompactInto | None = None,
    ) -> tuple[Iterator[Any], CompiledFramer | None]:
        """A segment's entries and faults, framed by the compiled core when it is built (then also
        decoded to row changes with ``decode``), else by the reference reader; with ``compact``,
        each section's entries decoded into its builder instead (a ``CompactSection`` each).
        ``synced_to``: see :func:`_synced_to`."""
        bounds: dict[str, Any] = {"after": after, "durable_to": durable_to, "synced_to": synced_to, "state": state}
        if self._native is None:
            return read_entries(data, path, **bounds), None
        decoder = self._compiled_decoder if decode or compact is not None else None
        framer = CompiledFramer(self._native, after, decoder, with_mutations, compact)
        return read_framed(data, path, framer, **bounds), framer

    # --- partitions and offsets --------------------------------------------------------------

    def partitions(self) -> Sequence[Partition]:
        slices = self._snapshot.partitions() if self._snapshot is not None else []
        return [*slices, *self._stream_partitions()]

    def _stream_partitions(self) -> list[Partition]:
        if self.config.snapshot == "initial_only":
            return []
        return [Partition(self.node, {"cdc_raw": str(self.config.cdc_raw)})]

    def _slice(self, partition: Partition) -> TokenRangeSnapshot | None:
        """The snapshot, when ``partition`` is one of its slices."""
        if self._snapshot is not None and self._snapshot.holds(partition.id):
            return self._snapshot
        return None

    def initial_offset(self, partition: Partition) -> Offset:
        snapshot = self._slice(partition)
        if snapshot is not None:
            return snapshot.initial_offset()
        if self.config.snapshot == "when_needed":
            return self._with_every_table_snapshotted(_Position(0, 0).offset())
        oldest = self._oldest_cdc_segment() if self._snapshot is not None else None
        if oldest is None:
            return _Position(0, 0).offset()
        # The record the snapshot hands over to: everything still in cdc_raw with CDC data.
        return {**_Position(oldest, 0).offset(), "recorded_for_snapshot": True}

    def _oldest_cdc_segment(self) -> int | None:
        """The oldest segment holding CDC data (it has an index: Cassandra itself removes it from
        cdc_raw only when full with cdc_block_writes false); None when there is none yet (then
        the stream starts at the first segment, and there is nothing to check at the hand-off:
        a segment without CDC data leaves cdc_raw when Cassandra discards it)."""
        found = self._segments(0)
        for (segment_id, _), index in zip(found, self._indexes(found), strict=True):
            if index is not None and index is not _CLOSED_WITHOUT_INDEX:
                return segment_id
        return None

    def _segments(self, first: int) -> list[tuple[int, Path]]:
        found = []
        for path in self.config.cdc_raw.glob("CommitLog-*.log"):
            name = parse_segment_name(path.name)
            if name is not None and name[1] >= first:
                found.append((name[1], path))
        return sorted(found)

    @staticmethod
    def _indexes(found: list[tuple[int, Path]]) -> list[CdcIndex | None]:
        """Each segment's index; a segment without one counts as closed once a newer one has one.

        Cassandra links every segment into cdc_raw when it creates it (the next one ahead of
        time) and writes the index at the first sync with CDC data. Writes only go to the newest
        active segment, so once a newer segment has an index, an older one without any will get
        no more writes: it held no synced CDC data (or was cut short by a crash); it is read to
        its last valid section and passed.
        """
        indexes = [read_cdc_index(index_path(path)) for _, path in found]
        newer_indexed = False
        for number in range(len(found) - 1, -1, -1):
            if indexes[number] is None and newer_indexed:
                indexes[number] = _CLOSED_WITHOUT_INDEX
            newer_indexed = newer_indexed or indexes[number] is not None
        return indexes

    def _bytes(self, path: Path) -> bytes:
        # read() right after uses these same bytes: everything up to the offset found here is in them.
        data = path.read_bytes()
        self._cached = (path, data)
        return data

    def _segment_bytes(self, path: Path) -> bytes:
        """The segment's bytes: those latest_offset just read, when it read this segment last."""
        return self._cached[1] if self._cached and self._cached[0] == path else path.read_bytes()

    def _open_buckets_start_us(self) -> int:
        """full: the start of the oldest open time bucket; every change before it can be read back."""
        interval_us = self.config.window_interval_ms * 1000
        now_bucket = time.time_ns() // 1000 // interval_us
        return (now_bucket - self.config.window_count + 1) * interval_us

    def _in_open_bucket(self, version: int, entry: _FramedEntry, path: Path, horizon_us: int) -> bool:
        assert entry.mutation is not None
        mutation = self._decoder(version).decode(entry.mutation, path, entry.end)
        return any(newest_timestamp(u) >= horizon_us for u in mutation.updates)

    def latest_offset(self, partition: Partition, start: Offset, max_records: int | None) -> Offset:
        snapshot = self._slice(partition)
        if snapshot is not None:
            return snapshot.latest_offset(start)
        if self.config.snapshot == "when_needed" and not self._log_kept_checked:
            self._log_kept_checked = True
            if not self._committed_segment_kept(start):
                found = self._segments(0)
                oldest = _Position(found[0][0], 0).offset() if found else _Position.of(start).offset()
                return self._with_every_table_snapshotted({**start, **oldest})
        assert self._live is not None, "open() first"
        return self._live.latest_offset(partition, start, max_records)

    def _stream_latest(self, start: Offset, cap: Offset | None, max_records: int | None) -> Offset:
        """How far the node's commit log can be read from ``start`` now, never past ``cap``."""
        if self._snapshot is not None:
            if not self._snapshot.stream_may_start():
                self._watch_cdc_raw()
                return start
            if start.get("recorded_for_snapshot"):
                self._check_recorded_segment_kept(_Position.of(start).segment)
        offset, stopped_at_open_bucket = self._latest_offset(start, max_records)
        if cap is not None and _order(offset) > _order(cap):
            # Up to a live snapshot chunk's high watermark (a position this walk gave before).
            offset, stopped_at_open_bucket = dict(cap), False
        if self.config.row_image == "full" and stopped_at_open_bucket:
            # Everything before the open buckets has now been seen: those buckets are closed. What
            # the range holds from before the previous horizon came after its bucket was processed.
            self._late_before_us = self._closed_before_us
            self._closed_before_us = self._horizon_us
        return offset

    def _latest_offset(self, start: Offset, max_records: int | None) -> tuple[Offset, bool]:
        position = _Position.of(start)
        read_whole = bool(start.get(_SEGMENT_READ))  # ``position`` ends a segment read whole
        budget = max_records if max_records is not None else 1 << 62
        full = self.config.row_image == "full"
        self._horizon_us = self._open_buckets_start_us() if full else 0
        found = self._segments(position.segment)
        for (segment_id, path), index in zip(found, self._indexes(found), strict=True):
            if index is None:
                break  # not synced yet, or its index is being rewritten: ask again later
            begin = position.position if segment_id == position.segment else 0
            state = SegmentRead()
            end = begin
            try:
                entries, _ = self._entries(
                    self._bytes(path),
                    path,
                    state,
                    after=begin,
                    # A closed segment is read whole: every byte of it is final (and the offset
                    # Cassandra writes after a replay is the file's length, not a logical position).
                    durable_to=None if index.completed else index.offset,
                    synced_to=_synced_to(index),
                    with_mutations=full,
                )
                for item in entries:
                    if full and not isinstance(item, EntryFault) and state.header is not None:
                        try:
                            if self._in_open_bucket(state.header.version, item, path, self._horizon_us):
                                return _Position(segment_id, end).offset(), True
                        except CommitLogError:
                            pass  # read() sends it to the error store
                    end = item.end
                    budget -= 1
                    if budget <= 0:
                        return _Position(segment_id, end).offset(), False
            except CommitLogError:
                # The whole segment is unreadable (header, encryption): read() stores the error and
                # keeps the file aside; once Cassandra closed it, move past it.
                if not index.completed:
                    return _ended(position, read_whole), True
                position = _Position(segment_id, max(index.offset, 1))
                read_whole = True
                continue
            if not index.completed:
                return _Position(segment_id, max(end, begin)).offset(), True
            # Read to its end (a cut one as far as it goes: read keeps it) and closed by Cassandra:
            # this segment is done, go on with the next.
            position = _Position(segment_id, max(end, index.offset, state.read_to))
            read_whole = True
        return _ended(position, read_whole), True

    def _watch_cdc_raw(self) -> None:
        """While the stream waits for the snapshot: say when cdc_raw fills towards cdc_total_space."""
        limit = self._cdc_space.cdc_total_space if self._cdc_space is not None else None
        now = time.monotonic()
        if not limit or now - self._cdc_raw_checked_at < _CDC_RAW_CHECK_S:
            return
        self._cdc_raw_checked_at = now
        used = cdc_raw_bytes(self.config.cdc_raw)
        share = used / limit
        if share >= max(_CDC_RAW_WARN_FROM, self._cdc_raw_warned_share + 0.1):
            self._cdc_raw_warned_share = share
            outcome = (
                "Cassandra then deletes the oldest segments and this pipeline stops at the hand-off"
                if self._cdc_space is not None and self._cdc_space.cdc_block_writes is False
                else "Cassandra then refuses writes to CDC tables until the stream consumes segments"
            )
            self.context.logger.warning(
                "cdc_raw holds %d MiB, %.0f%% of cdc_total_space (%d MiB), while the stream waits for the snapshot; "
                "at 100%% %s",
                used >> 20,
                share * 100,
                limit >> 20,
                outcome,
            )

    def _check_recorded_segment_kept(self, segment_id: int) -> None:
        """At the hand-off: the segment recorded before the snapshot is still in cdc_raw (nothing
        of this pipeline deletes it before the stream has read it)."""
        if any(found == segment_id for found, _ in self._segments(segment_id)):
            return
        raise SnapshotOutlivedLogError(
            f"commit log {self.node}: segment {segment_id}, where the stream was to start after the snapshot, is no "
            f"longer in {self.config.cdc_raw}: changes made during the snapshot may be gone (with cdc_block_writes: "
            "false Cassandra deletes the oldest segments when cdc_total_space is full). Take the snapshot again "
            "(cdcflow offsets reset FILE, while stopped) with a larger cdc_total_space, more slices and workers"
        )

    def read(self, partition: Partition, start: Offset, end: Offset) -> Iterator[Record | Rejected]:
        snapshot = self._slice(partition)
        if snapshot is not None:
            yield from snapshot.read(partition, start, end)
            return
        assert self._live is not None, "open() first"
        yield from self._live.read(partition, start, end)

    def _stream_read(self, start: Offset, end: Offset) -> Iterator[Record]:
        """The node's changes in (start, end]."""
        first, last = _Position.of(start), _Position.of(end)
        if self.config.row_image == "full":
            yield from self._full_events(self._decoded(first, last, self._decode, compiled=False))
            yield from self._out_of_sequence_events()  # a poll of the store each read cycle
        else:
            for changes, segment_id, position in self._decoded(first, last, self._decode_changes, compiled=True):
                yield from self._events(changes, segment_id, position)

    def read_event_batches(
        self, partition: Partition, start: Offset, end: Offset, batch_size: int
    ) -> Iterator[EventBatch] | None:
        """delta: the range's events in the compiled core's compact batches, when every entry in
        it is one the compiled core decodes with the current schema to compact changes; else None,
        and ``read`` gives the range (the reference's events, the error store, schema changes)."""
        if self._native is None or self.config.row_image != "delta" or self._slice(partition) is not None:
            return None
        if self._live is not None and self._live.declines_batches(start):
            return None  # each event must pass the live snapshot's chunk: read() gives them
        batches = self._compact_batches(_Position.of(start), _Position.of(end), batch_size)
        # How often the fast path is taken: a table whose changes keep declining shows here.
        self._counted("range_read_compact" if batches is not None else "range_read_by_record")
        return None if batches is None else iter(batches)

    def _compact_batches(self, first: _Position, last: _Position, batch_size: int) -> list[EventBatch] | None:
        assert self._native is not None
        builder = self._native.CompactBatchBuilder()
        emits = self._replica_filter.emits if self._replica_filter is not None else None
        batches: list[EventBatch] = []
        skipped = dropped = 0
        for segment_id, path, after, up_to in self._range_segments(first, last):
            state = SegmentRead()
            try:
                data = self._segment_bytes(path)
                synced_to = _synced_to(read_cdc_index(index_path(path)))
                into = CompactInto(builder, segment_id, up_to, emits)
                sections, framer = self._entries(data, path, state, after=after, synced_to=synced_to, compact=into)
                for section in sections:  # a CompactSection each, its entries in the builder
                    decoder = framer.decoder if framer is not None else None
                    if (
                        section.refused is not None  # a fault, or a change compact rows do not carry
                        or decoder is None
                        or decoder.catalog is not self._catalog  # refreshed since: the reference's schema
                    ):
                        return None
                    skipped += section.skipped
                    dropped += section.dropped
                    while len(builder) >= batch_size:
                        batches.append(self._compact_batch(builder, batch_size))
                    if section.reached_up_to:
                        break
            except CommitLogError:
                return None
            if state.section_error is not None or state.cut_at is not None:
                return None  # read stores the error, or keeps the cut segment
        if len(builder):
            batches.append(self._compact_batch(builder, None))
        if skipped:  # counted once the range is taken, as read counts them
            self._counted("skipped_not_primary_replica", skipped)
        if dropped:
            self._counted("skipped_dropped_table_mutation", dropped)
        return batches

    def _compact_batch(self, builder: Any, count: int | None) -> EventBatch:
        events = builder.take(self.node, int(time.time() * 1000), count)
        cluster = self.config.cluster
        tables = [
            BatchTable(table.row_schema(cluster), "cassandra", cluster, table.keyspace, table.table, version=VERSION)
            for table in builder.tables()
        ]
        return EventBatch(events, tables)

    def _decoded(
        self, first: _Position, last: _Position, decode: Callable[..., _Decoded | None], compiled: bool
    ) -> Iterator[tuple[_Decoded, int, int]]:
        """``decode`` applied to each entry of the range; ``compiled``: the compiled core decodes
        each section's entries first (row changes, for :meth:`_decode_changes`)."""
        for segment_id, path, after, up_to in self._range_segments(first, last):
            yield from self._read_segment(segment_id, path, after, up_to, decode, compiled)

    def _range_segments(self, first: _Position, last: _Position) -> Iterator[tuple[int, Path, int, int | None]]:
        """The segments of the range (first, last], each with the position its entries start after
        and the one they end at (None: the segment's end)."""
        for segment_id, path in self._segments(first.segment):
            if segment_id > last.segment:
                return
            after = first.position if segment_id == first.segment else 0
            up_to = last.position if segment_id == last.segment else None
            yield segment_id, path, after, up_to

    def _read_segment(
        self,
        segment_id: int,
        path: Path,
        after: int,
        up_to: int | None,
        decode: Callable[..., _Decoded | None],
        compiled: bool,
    ) -> Iterator[tuple[_Decoded, int, int]]:
        state = SegmentRead()
        data = b""
        index = read_cdc_index(index_path(path))
        try:
            data = self._segment_bytes(path)
            # No durable_to here: ``up_to`` is an entry's end that latest_offset found synced, and
            # it may fall inside a section.
            synced_to = _synced_to(index)
            entries, framer = self._entries(data, path, state, after=after, synced_to=synced_to, decode=compiled)
            for item in entries:
                if up_to is not None and item.end > up_to:
                    return
                if isinstance(item, EntryFault):
                    if state.cut_at is not None and item.end >= state.cut_at:
                        continue  # the entry the cut went through: kept with the whole segment below
                    self._store_error(segment_id, item.end, str(item.error), item.raw)
                    continue
                assert state.header is not None
                decoded = decode(state.header.version, item, path, segment_id, framer)
                if decoded is not None:
                    yield decoded, segment_id, item.end
        except CommitLogError as exc:
            self._store_error(segment_id, after, f"{exc}; the segment is kept in {self._unreadable_dir}", b"")
            return
        # A cut segment is kept once, by the range that reaches its end: latest_offset's next position
        # is the index's offset, and a range starting there reads nothing more of this segment.
        reaches_end = index is not None and after < index.offset and (up_to is None or up_to >= index.offset)
        if state.cut_at is not None and index is not None and reaches_end:
            self._keep_cut_segment(segment_id, path, data, index, state)
        if state.section_error is not None:
            error = state.section_error
            start = error.position or state.read_to
            self._store_error(
                segment_id,
                state.read_to,
                f"{error}; the rest of the segment is unreadable, the segment is kept in {self._unreadable_dir}",
                data[start : start + _MAX_ERROR_BYTES],
            )

    def _decode(
        self, version: int, entry: _FramedEntry, path: Path, segment_id: int, framer: CompiledFramer | None = None
    ) -> Mutation | None:
        """The entry's mutation, decoded by the reference; None when it went to the error store
        (or names a table dropped since)."""
        assert entry.mutation is not None
        try:
            return self._decoder(version).decode(entry.mutation, path, entry.end)
        except UnknownTableError as exc:
            if exc.table_id not in self._dropped_tables:
                self._refresh_schema()  # a table created since the schema was read?
                if self._catalog.table(exc.table_id) is not None:
                    return self._decode(version, entry, path, segment_id)
                # Not in the current schema either: the table was dropped since this was written.
                self._dropped_tables.add(exc.table_id)
                # cdc_raw holds every table dropped since its segments were written: one line, the rest at DEBUG.
                first = len(self._dropped_tables) == 1
                (self.context.logger.info if first else self.context.logger.debug)(
                    "skipping mutations of table id %s: not in the schema (dropped)%s",
                    exc.table_id,
                    "; further dropped tables are logged at DEBUG" if first else "",
                )
            self._counted("skipped_dropped_table_mutation")
        except CommitLogError as exc:
            self._store_error(segment_id, entry.end, str(exc), entry.mutation)
        return None

    def _decode_changes(
        self, version: int, entry: _FramedEntry, path: Path, segment_id: int, framer: CompiledFramer | None
    ) -> _Changes | None:
        """delta: the entry's row changes, from the compiled core when it decoded the entry with
        the current schema, else from the reference (a mutation it declined, a schema refreshed
        since: a later column must show in the events' schema exactly as the reference has it)."""
        native: list[UpdateChanges] | None = getattr(entry, "changes", None)
        decoder = framer.decoder if framer is not None else None
        if native is not None and decoder is not None and decoder.catalog is self._catalog:
            return _Changes(native, [])
        mutation = self._decode(version, entry, path, segment_id)
        if mutation is None:
            return None
        changes = _Changes([], [])
        try:
            for update in mutation.updates:
                if update.table.keyspace == "system_schema":
                    changes.schema_updates.append(update)
                else:
                    changes.updates.append((update.table, update.key, list(row_changes(update))))
        except CommitLogError as exc:  # a value that does not fit its type: the whole mutation is kept aside
            assert entry.mutation is not None
            self._store_error(segment_id, entry.end, str(exc), entry.mutation)
            return None
        return changes

    def _counted(self, what: str, count: int = 1) -> None:
        source_counter(self.context.pipeline, what).inc(count)

    def _store_error(
        self, segment_id: int, position: int, error: str, raw: bytes, level: int = logging.WARNING
    ) -> None:
        self._counted("error_store_record")
        self.context.logger.log(
            level, "commit log %s segment %d position %d: %s", self.node, segment_id, position, error
        )
        if self._error_store is not None:
            self._error_store.save(ErrorRecord(self.node, segment_id, position, error, raw))

    def _keep_cut_segment(self, segment_id: int, path: Path, data: bytes, index: CdcIndex, state: SegmentRead) -> None:
        """A segment cut short: kept whole with its index in the error store (before the offsets past
        it can be committed), logged, counted; commit then moves the file aside (:meth:`_retire`)."""
        assert state.cut_at is not None
        error = SegmentCutShortError(
            f"segment cut short: the file has {len(data)} bytes, but its _cdc.idx says Cassandra synced it to "
            f"position {index.offset} and completed it; its entries were read to position {state.cut_at} and the "
            f"changes after that are missing. The segment and its index are kept in the error store "
            f"(cdcflow commitlog kept) and the file is moved to {self._unreadable_dir}",
            path,
            state.cut_at,
        )
        self._counted("segment_cut_short")
        if self._error_store is not None:
            info = KeptSegmentInfo(self.node, segment_id, path.name, len(data), index.text(), str(error))
            self._error_store.keep_segment(KeptSegment(info, data))
        self._store_error(segment_id, state.cut_at, str(error), b"", logging.ERROR)

    def _full_events(self, mutations: Iterator[tuple[Mutation, int, int]]) -> Iterator[Record]:
        """full: each row changed in the range once, read back from the local node after the range.

        Partition and range deletions, static rows and tables whose key the reader cannot bind
        stay delta events, in place. A change older than the buckets already processed goes to the
        out-of-sequence store instead, and comes out of :meth:`_out_of_sequence_events`.
        """
        assert self._full_rows is not None and self._out_of_sequence is not None
        pending: dict[tuple[str, tuple[bytes | None, ...]], _PendingRow] = {}
        now_ms = int(time.time() * 1000)
        for mutation, segment_id, position in mutations:
            schema_updates = [u for u in mutation.updates if u.table.keyspace == "system_schema"]
            yield from self._schema_events(schema_updates, segment_id, position, now_ms)
            for update in self._emitted_updates(mutation):
                late = 0 < newest_timestamp(update) < self._late_before_us
                changes = list(row_changes(update))
                row_changes_of_rows = changes[len(changes) - len(update.rows) :] if update.rows else []
                keyed = self._full_rows.supports(update.table) and not late
                for index, change in enumerate(changes[: len(changes) - len(row_changes_of_rows)]):
                    yield self._event(
                        change, update.table.row_schema(self.config.cluster), segment_id, position, index, now_ms
                    )
                for row, change in zip(update.rows, row_changes_of_rows, strict=True):
                    raw_key = (*update.key_parts, *row.clustering)
                    if late:
                        self._out_of_sequence.save(update.table, raw_key, change.op, change.ts_us)
                        self.context.logger.info(
                            "a change to %s.%s arrived after its time bucket closed: stored, read back at QUORUM",
                            update.table.keyspace,
                            update.table.table,
                        )
                    elif not keyed:
                        yield self._event(
                            change, update.table.row_schema(self.config.cluster), segment_id, position, 0, now_ms
                        )
                    else:
                        slot = (update.table.table_id, raw_key)
                        previous = pending.pop(slot, None)  # re-inserted: ordered by its last change
                        op = "c" if change.op == "c" or (previous is not None and previous.op == "c") else change.op
                        pending[slot] = _PendingRow(update.table, raw_key, change, op, segment_id, position)
        for index, pending_row in enumerate(pending.values()):
            yield self._read_back(pending_row, index, now_ms)

    def _read_back(self, row: _PendingRow, index: int, now_ms: int, consistency_level: Any = None) -> ChangeEvent:
        assert self._full_rows is not None
        try:
            state = self._full_rows.read(row.table, row.raw_key, consistency_level)
        except Exception as exc:  # the driver's errors: timeouts, unavailable, a node going down
            raise SourceUnavailableError(f"reading back {row.table.keyspace}.{row.table.table}: {exc}") from exc
        change = row.change
        op = "d" if state is None else ("u" if row.op == "d" else row.op)
        full = RowChange(op, change.keyspace, change.table, change.key, None if state is None else {}, change.ts_us)
        event = self._event(full, row.table.row_schema(self.config.cluster), row.segment, row.position, index, now_ms)
        event.after = state
        return event

    def _out_of_sequence_events(self) -> Iterator[Record]:
        """Changes that arrived after their bucket closed, read back at QUORUM (seed 001's OutOfSequenceProcessor)."""
        assert self._out_of_sequence is not None
        from cassandra import ConsistencyLevel

        now_ms = int(time.time() * 1000)
        for index, late in enumerate(self._out_of_sequence.pending(self._catalog)):
            table = late.table
            columns = (*table.partition_key, *table.clustering)
            key = {
                c.name: None if raw is None else c.type.decode(raw)
                for c, raw in zip(columns, late.raw_key, strict=False)
            }
            change = RowChange(late.op, table.keyspace, table.table, key, {}, late.ts_us)
            row = _PendingRow(table, late.raw_key, change, late.op, 0, 0)
            yield self._read_back(row, index, now_ms, ConsistencyLevel.QUORUM)
            self._out_of_sequence.emitted(late)

    def _emitted_updates(self, mutation: Mutation) -> Iterator[PartitionUpdate]:
        for update in mutation.updates:
            if update.table.keyspace == "system_schema":
                continue
            if self._replica_filter is not None and not self._replica_filter.emits(update.table.keyspace, update.key):
                self._counted("skipped_not_primary_replica")
                continue
            yield update

    def _schema_events(
        self, schema_updates: list[PartitionUpdate], segment_id: int, position: int, now_ms: int
    ) -> Iterator[Record]:
        if schema_updates and (self._replica_filter is None or self._replica_filter.emits_cluster_wide()):
            yield from self._schema_changes(schema_updates, segment_id, position, 0, now_ms)

    def _events(self, changes: _Changes, segment_id: int, position: int) -> Iterator[Record]:
        index = 0
        now_ms = int(time.time() * 1000)
        for event in self._schema_events(changes.schema_updates, segment_id, position, now_ms):
            yield event
            index += 1
        for table, key, row_changes_of_update in changes.updates:
            if self._replica_filter is not None and not self._replica_filter.emits(table.keyspace, key):
                self._counted("skipped_not_primary_replica")
                continue
            schema = table.row_schema(self.config.cluster)
            for change in row_changes_of_update:
                yield self._event(change, schema, segment_id, position, index, now_ms)
                index += 1

    def _schema_changes(
        self, updates: list[PartitionUpdate], segment_id: int, position: int, index: int, now_ms: int
    ) -> Iterator[SchemaChangeEvent]:
        """Seed 001's schema-change events, where the change is in the commit log: a replay emits them again.

        A system_schema mutation names the keyspace (partition key) and the tables (first
        clustering column) it changes; the schema is read again and each changed table that this
        source emits (or emitted before a DROP) gets an event with its DDL now.
        """
        # One schema change writes several system_schema tables in one mutation (tables, columns...).
        keyspace = updates[0].key.decode("utf-8", errors="replace")
        rows = [row for update in updates for row in update.rows]
        tables = {
            row.clustering[0].decode("utf-8", errors="replace") for row in rows if row.clustering and row.clustering[0]
        }
        if self._wanted_tables is not None:
            tables = {name for name in tables if f"{keyspace}.{name}".lower() in self._wanted_tables}
        if not tables:
            return
        before = {name: self._catalog.by_name(keyspace, name) for name in tables}
        self._refresh_schema()
        for name in sorted(tables):
            previous, current = before[name], self._catalog.by_name(keyspace, name)
            if not any(t is not None and self._emits(t) for t in (previous, current)):
                continue
            ddl = current.ddl() if current is not None else f"DROP TABLE {keyspace}.{name}"
            source = cassandra_source(
                self.config.cluster,
                keyspace,
                name,
                self.node,
                {"segment": segment_id, "position": position, "index": index},
                max((row.timestamp or 0 for row in rows), default=0),
            )
            schema = current.row_schema(self.config.cluster) if current is not None else None
            yield SchemaChangeEvent(keyspace, name, ddl, source, now_ms, schema)
            index += 1

    def _event(
        self, change: RowChange, schema: Any, segment_id: int, position: int, index: int, now_ms: int
    ) -> ChangeEvent:
        return change_event(change, schema, self.config.cluster, self.node, segment_id, position, index, now_ms)

    def is_finished(self, partition: Partition, offset: Offset) -> bool:
        snapshot = self._slice(partition)
        return snapshot is not None and snapshot.is_finished(offset)

    def caught_up(self, partition: Partition, offset: Offset) -> bool | None:
        # For lag (cdcflow.metrics): a slice not read yet, and the stream waiting for the
        # snapshot (its latest_offset says "nothing new"), are work waiting.
        snapshot = self._slice(partition)
        if snapshot is not None:
            return snapshot.is_finished(offset)
        if self._snapshot is not None and not self._snapshot.stream_may_start():
            return False
        return None

    def data_loss_headroom(self, partition: Partition, committed: Offset) -> DataLossHeadroom | None:
        """The node's: how long until cdc_raw reaches cdc_total_space at the node's current CDC
        write rate, were nothing read and deleted meanwhile (:mod:`.cdc_space`). Snapshot slices
        read the tables, which keep their rows: they have none."""
        total = self._cdc_space.cdc_total_space if self._cdc_space is not None else None
        if partition.id != self.node or not total:
            return None
        self._cdc_growth.sample(time.monotonic())
        seconds = self._cdc_growth.seconds_to_full(total)
        rate = self._cdc_growth.write_rate()
        if seconds is None or rate is None:
            return None  # the rate needs a second sample
        detail = (
            f"cdc_raw holds {self._cdc_growth.used_bytes >> 20} of {total >> 20} MiB (cdc_total_space), "
            f"the node writes {rate / 1024:.0f} KiB/s of CDC data"
        )
        return DataLossHeadroom(seconds, "cdc_raw_full", detail)

    # --- live snapshots (cdcflow.live_snapshots.LiveSnapshotSource) -----------------------------

    def check_snapshot_request(self, request: SnapshotRequest) -> None:
        if self._live is None:
            raise SourceUnavailableError("the source is not open yet (the pipeline is starting): ask again")
        self._emitted_table(request.table)
        self._live.check_request(request)

    def with_snapshot_request(self, partition: Partition, offset: Offset, request: SnapshotRequest) -> Offset | None:
        if partition.id != self.node:
            return None  # a slice of snapshot: initial
        assert self._live is not None, "open() first"
        return self._live.with_request(offset, request)

    def live_snapshot_progress(self, partition: Partition, offset: Offset) -> list[LiveSnapshotProgress]:
        if partition.id != self.node or self._live is None:
            return []
        return self._live.progress(partition, offset)

    def _emitted_table(self, name: str) -> TableSchema:
        """Table ``name``, if this source emits its changes; else :class:`SnapshotTableError`."""
        keyspace, _, table_name = name.partition(".")
        table = self._catalog.by_name(keyspace, table_name)
        if table is None or table.keyspace == "system_schema" or not self._emits(table):
            followed = sorted(f"{t.keyspace}.{t.table}" for t in self._catalog.tables.values() if self._live_table(t))
            raise SnapshotTableError(
                f"commit log {self.node}: this source does not emit {name} (it must exist, have cdc = true, no "
                f"counters, and be in source.tables when that is set); it emits: {', '.join(followed) or 'none'}"
            )
        return table

    def _live_table(self, table: TableSchema) -> bool:
        return table.keyspace != "system_schema" and not table.keyspace.startswith("system") and self._emits(table)

    def _with_every_table_snapshotted(self, offset: Offset) -> Offset:
        """``offset`` with a live snapshot of each table the source snapshots queued (when_needed)."""
        for table in self._snapshot_tables():
            offset = LiveSnapshots.with_table_snapshotted(offset, f"{table.keyspace}.{table.table}")
        return offset

    def _committed_segment_kept(self, start: Offset) -> bool:
        """Whether the committed position is still in cdc_raw: its segment is there, or this source
        deleted it after reading it whole (the offset says so), or nothing was read yet."""
        position = _Position.of(start)
        if position.segment == 0 or start.get(_SEGMENT_READ) or start.get("recorded_for_snapshot"):
            return True
        if any(found == position.segment for found, _ in self._segments(position.segment)):
            return True
        self._counted("log_lost_snapshot")
        self.context.logger.warning(
            "commit log %s: segment %d, where the committed position is, is no longer in %s and was not read "
            "whole: its changes after position %d are gone (Cassandra deletes the oldest segments when cdc_raw "
            "is full and cdc_block_writes is false). snapshot: when_needed: streaming from the oldest segment "
            "there, with a live snapshot of every table",
            self.node,
            position.segment,
            self.config.cdc_raw,
            position.position,
        )
        return False

    def commit(self, offsets: Mapping[str, Offset]) -> None:
        if self._snapshot is not None:
            self._snapshot.note_committed(offsets)
        if self._out_of_sequence is not None:
            self._out_of_sequence.forget_emitted()  # their events are durable downstream now
        for partition_id, offset in offsets.items():
            if partition_id != self.node:
                continue  # a snapshot slice
            done = _Position.of(offset)
            found = self._segments(0)
            for (segment_id, path), index in zip(found, self._indexes(found), strict=True):
                if segment_id > done.segment:
                    break
                finished = segment_id < done.segment or (
                    index is not None and index.completed and done.position >= index.offset
                )
                if finished and index is not None and index.completed:
                    self._retire(segment_id, path, index)

    def _retire(self, segment_id: int, path: Path, cdc_index: CdcIndex) -> None:
        self._cdc_growth.retired(segment_id, cdc_index.offset)
        index = index_path(path)
        unreadable = self._not_wholly_read(path, cdc_index)
        if self.config.processed_segments == "keep" and not unreadable:
            return
        if unreadable or self.config.processed_segments == "archive":
            target = (
                self._unreadable_dir
                if unreadable
                else self.config.archive_dir or self.config.cdc_raw.parent / "cdc_archive"
            )
            target.mkdir(parents=True, exist_ok=True)
            if unreadable:
                self.context.logger.warning(
                    "commit log %s: %s holds bytes its reading could not account for (see the error store): "
                    "moved to %s, not deleted",
                    self.node,
                    path,
                    target,
                )
            shutil.move(str(path), target / path.name)
            if index.exists():
                shutil.move(str(index), target / index.name)
        else:
            path.unlink(missing_ok=True)
            index.unlink(missing_ok=True)
        if self._cached and self._cached[0] == path:
            self._cached = None

    def _not_wholly_read(self, path: Path, index: CdcIndex) -> bool:
        """Whether the segment holds what reading it could not account for: a bad header or
        section (the error store says where), or a cut file (the store keeps a copy). Decided from
        the file itself, as read decided, so it holds whichever process read the segment (the spark
        engine commits in its driver, reads in executors). The file is read afresh: bytes cached
        while it was being written may be fewer than it holds now that it is closed."""
        state = SegmentRead()
        try:
            walk = read_framed(path.read_bytes(), path, _no_entries, synced_to=_synced_to(index), state=state)
            for _ in walk:
                pass
        except CommitLogError:
            return True
        return state.section_error is not None or state.cut_at is not None


class _CommitLogStream:
    """The node's commit log as a live snapshot's stream (:class:`~cdcflow.sources.cql.live_snapshot.LiveStream`)."""

    def __init__(self, source: CassandraCommitLogSource) -> None:
        self._source = source

    def latest(self, partition: Partition, start: Offset, cap: Offset | None, max_records: int | None) -> Offset:
        return self._source._stream_latest(start, cap, max_records)

    def read(self, partition: Partition, start: Offset, end: Offset) -> Iterator[Record]:
        return self._source._stream_read(start, end)

    def order(self, position: Offset) -> tuple[int, int]:
        return _order(position)

    def high_mark(self, partition: Partition, position: Offset, read_ended_us: int) -> Offset | None:
        """The synced end of cdc_raw, once the node has synced what it wrote before the read ended."""
        settings = self._source._cdc_space
        period_s = settings.commitlog_sync_period_s if settings is not None else None
        wait_us = int(_SYNC_PERIODS_BEFORE_HIGH_MARK * (period_s or _DEFAULT_SYNC_PERIOD_S) * 1_000_000)
        if time.time_ns() // 1000 < read_ended_us + wait_us:
            return None
        return self._source._latest_offset(position, None)[0]

    def token_ranges(self, partition: Partition, position: Offset) -> Sequence[TokenRange]:
        return [WHOLE_RING]  # every key the node emits; the rows of others are left out as the stream leaves them

    def snapshot_table(self, name: str) -> tuple[SnapshotTable, tuple[str, ...], RowToRecord]:
        source = self._source
        schema = source._emitted_table(name)
        replicas = source._replica_filter
        rows = CassandraRowEvents(source.config.cluster, [schema], replicas.emits_token if replicas else None)
        key_columns = tuple(c.name for c in (*schema.partition_key, *schema.clustering))
        return snapshot_table(schema), key_columns, rows


def _ended(position: _Position, segment_read: bool) -> Offset:
    """``position`` as an offset, saying when it ends a segment read whole: so that a restart can
    tell that segment, deleted once committed, from one Cassandra deleted before it was read
    (``snapshot: when_needed``)."""
    return {**position.offset(), _SEGMENT_READ: True} if segment_read else position.offset()


def _order(offset: Offset) -> tuple[int, int]:
    """Where an offset stands in the node's commit log, for comparing two."""
    position = _Position.of(offset)
    return (position.segment, position.position)


def _synced_to(index: CdcIndex | None) -> int | None:
    """The offset the segment's file must reach, from a ``COMPLETED`` index Cassandra wrote (not one
    assumed for a segment without any): a file that ends before it was cut short."""
    if index is None or index is _CLOSED_WITHOUT_INDEX or not index.completed:
        return None  # still being written (or never indexed): its file may end anywhere
    return index.offset


def _no_entries(section: Section, path: Path | str, state: SegmentRead) -> Iterator[EntryFault]:
    """A section framer that frames nothing: for a walk over a segment's sections only."""
    return iter(())


def default_error_file(context: PluginContext) -> Path:
    """The file error store's path when ``error_store.path`` is not set."""
    return context.base_dir / f"{context.pipeline}.commitlog_errors.jsonl"
