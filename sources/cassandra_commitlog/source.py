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

The parts, each a module: :mod:`.cdc_raw` (which segments exist, their ``_cdc.idx`` state, positions,
retiring read ones), :mod:`.decoding` (the schema, the tables emitted, and the one choice between the
reference reader and the compiled core), :mod:`.readers` (the latest-offset walk, ranges read as
decoded entries or compact batches), :mod:`.events` (events of the updates this node emits:
:mod:`.replicas`), :mod:`.full_rows` (``row_image: full``), :mod:`.cdc_space` (cdc_raw against
``cdc_total_space``), :mod:`.reporting` (counters, log, error store). :class:`CassandraCommitLogSource`
composes them with the snapshots.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from cdcflow.batches import EventBatch
from cdcflow.contract import DataLossHeadroom, Offset, Partition, PluginContext, Rejected, Source
from cdcflow.errors import ConfigError, SnapshotTableError, SourceUnavailableError
from cdcflow.events import Record
from cdcflow.live_snapshots import LiveSnapshotProgress, SnapshotRequest
from cdcflow.prerequisites import CheckResult, PrerequisiteScope
from cdcflow.sources.cassandra_commitlog import prerequisites
from cdcflow.sources.cassandra_commitlog.cdc_raw import SEGMENT_READ, CdcRawSegments, Position, order
from cdcflow.sources.cassandra_commitlog.cdc_space import CdcRawWatch, read_cdc_space_settings
from cdcflow.sources.cassandra_commitlog.cluster import LOCAL_NODE_PROFILE, connect
from cdcflow.sources.cassandra_commitlog.config import CassandraCommitLogSourceConfig, default_error_file
from cdcflow.sources.cassandra_commitlog.decoding import CommitLogDecoding
from cdcflow.sources.cassandra_commitlog.error_store import open_error_store
from cdcflow.sources.cassandra_commitlog.events import CommitLogEvents
from cdcflow.sources.cassandra_commitlog.full_rows import FullRowImages, FullRowReader
from cdcflow.sources.cassandra_commitlog.out_of_sequence import OutOfSequenceStore
from cdcflow.sources.cassandra_commitlog.readers import CommitLogReader
from cdcflow.sources.cassandra_commitlog.replicas import PrimaryReplicaFilter
from cdcflow.sources.cassandra_commitlog.reporting import CommitLogReport
from cdcflow.sources.cassandra_commitlog.schema import TableSchema, load_schema_catalog
from cdcflow.sources.cassandra_commitlog.snapshot import CassandraRowEvents, snapshot_table, snapshot_tables
from cdcflow.sources.cql.connection import refusal
from cdcflow.sources.cql.live_snapshot import WHOLE_RING, LiveSnapshots, TokenRange
from cdcflow.sources.cql.snapshot import (
    RowToRecord,
    SnapshotOutlivedLogError,
    SnapshotTable,
    TokenRangeSnapshot,
)

__all__ = ["CassandraCommitLogSource", "CassandraCommitLogSourceConfig", "default_error_file"]

# A live snapshot chunk's high watermark is taken this many sync periods after its read: every
# write the read saw is in the commit log by then, and synced into cdc_raw's index.
_SYNC_PERIODS_BEFORE_HIGH_MARK = 2
_DEFAULT_SYNC_PERIOD_S = 10.0  # cassandra.yaml's commitlog_sync_period, when the node does not say


class CassandraCommitLogSource(Source[CassandraCommitLogSourceConfig]):
    """``cassandra_commitlog``: changes from the commit-log segments Cassandra hard-links into cdc_raw."""

    type_name = "cassandra_commitlog"
    config_model = CassandraCommitLogSourceConfig

    def __init__(self, config: CassandraCommitLogSourceConfig, context: PluginContext) -> None:
        super().__init__(config, context)
        self.node = config.node or socket.gethostname()
        self._cluster: Any = None
        self._session: Any = None
        self._report = CommitLogReport(self.node, context, config.cdc_raw.parent / "cdc_unreadable")
        self._segments = CdcRawSegments(
            config.cdc_raw, config.processed_segments, config.archive_dir, context.logger, self.node
        )
        self._decoding = CommitLogDecoding(config.tables, config.schema_refresh_s, self._report, context.logger)
        self._reader = CommitLogReader(self._segments, self._decoding, self._report, self.node, config.cluster)
        self._events = CommitLogEvents(config.cluster, self.node, self._decoding, self._report, None)
        self._full_rows: FullRowImages | None = None  # row_image: full, once open
        self._cdc_raw = CdcRawWatch(config.cdc_raw, context.logger)
        self._snapshot: TokenRangeSnapshot | None = None
        self._live: LiveSnapshots | None = None
        self._log_kept_checked = False  # snapshot: when_needed: the committed segment was looked for
        self.bounded = config.snapshot == "initial_only"  # the slices are all there is

    # --- lifecycle ---------------------------------------------------------------------------

    def open(self) -> None:
        config = self.config
        try:
            self._cluster, self._session = connect(
                config.hosts, config.port, local_node=config.ring_address, security=config
            )
        except Exception as exc:
            raise refusal(config.hosts, exc) or SourceUnavailableError(
                f"cannot reach Cassandra at {config.hosts}: {exc}"
            ) from exc
        self._decoding.load(self._session)
        if config.replicas == "primary":
            self._events.replicas = PrimaryReplicaFilter(self._cluster, config.ring_address)
        if config.row_image == "full":
            self._full_rows = FullRowImages(
                FullRowReader(self._session, LOCAL_NODE_PROFILE),
                OutOfSequenceStore(self._session, config.error_store.keyspace, self.node),
                self._events,
                self._decoding,
                config.window_count,
                config.window_interval_ms,
                self.context.logger,
            )
        self._report.error_store = open_error_store(
            config.error_store, default_error_file(self.context), lambda: self._session
        )
        if config.snapshot in ("initial", "initial_only"):
            self._snapshot = self._build_snapshot()
        self._live = LiveSnapshots(
            config, self.context, self._session, _CommitLogStream(self), execution_profile=LOCAL_NODE_PROFILE
        )
        self._cdc_raw.read_settings(self._session, LOCAL_NODE_PROFILE, waits_for_snapshot=config.snapshot == "initial")

    def check_prerequisites(self, scope: PrerequisiteScope) -> Sequence[CheckResult]:
        if self._session is not None:  # at start, just opened: the schema and settings are read
            tables = prerequisites.check_tables(self.config, self._decoding.catalog)
            if not prerequisites.reads_cdc_raw(self.config):
                return tables
            return [
                *tables,
                *prerequisites.check_node_cdc(self._cdc_raw.settings),
                *prerequisites.check_cdc_raw(self.config),
            ]
        node_address = self.config.ring_address
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

    # --- snapshots ---------------------------------------------------------------------------

    def _snapshot_tables(self) -> list[TableSchema]:
        tables = snapshot_tables(self._decoding.catalog, self.config.tables, "source.tables")
        if not tables:
            raise ConfigError(
                f"source.snapshot: {self.config.snapshot} but no table has cdc = true (and no counter columns) "
                "to read; name them in source.tables"
            )
        return tables

    def _build_snapshot(self) -> TokenRangeSnapshot:
        tables = self._snapshot_tables()
        return TokenRangeSnapshot(
            self.config,
            [snapshot_table(t) for t in tables],
            self.context,
            self._session,
            CassandraRowEvents(self.config.cluster, tables, self._emits_token()),
            stream_partitions=lambda: [p.id for p in self._stream_partitions()],
            # One node's worker snapshots what it emits: slices of different nodes never share an id.
            id_prefix=f"{self.node}/",
        )

    def _emits_token(self) -> Callable[[str, int], bool] | None:
        """Which snapshot rows (by token) this node emits; None: all of them."""
        replicas = self._events.replicas
        return replicas.emits_token if replicas is not None else None

    def _slice(self, partition: Partition) -> TokenRangeSnapshot | None:
        """The snapshot, when ``partition`` is one of its slices."""
        if self._snapshot is not None and self._snapshot.holds(partition.id):
            return self._snapshot
        return None

    # --- partitions and offsets --------------------------------------------------------------

    def partitions(self) -> Sequence[Partition]:
        slices = self._snapshot.partitions() if self._snapshot is not None else []
        return [*slices, *self._stream_partitions()]

    def _stream_partitions(self) -> list[Partition]:
        if self.config.snapshot == "initial_only":
            return []
        return [Partition(self.node, {"cdc_raw": str(self.config.cdc_raw)})]

    def initial_offset(self, partition: Partition) -> Offset:
        snapshot = self._slice(partition)
        if snapshot is not None:
            return snapshot.initial_offset()
        if self.config.snapshot == "when_needed":
            return self._with_every_table_snapshotted(Position(0, 0).offset())
        # None yet: the stream starts at the first segment, and there is nothing to check at the
        # hand-off (a segment without CDC data leaves cdc_raw when Cassandra discards it).
        oldest = self._segments.oldest_with_cdc_data() if self._snapshot is not None else None
        if oldest is None:
            return Position(0, 0).offset()
        # The record the snapshot hands over to: everything still in cdc_raw with CDC data.
        return {**Position(oldest, 0).offset(), "recorded_for_snapshot": True}

    def latest_offset(self, partition: Partition, start: Offset, max_records: int | None) -> Offset:
        snapshot = self._slice(partition)
        if snapshot is not None:
            return snapshot.latest_offset(start)
        if self.config.snapshot == "when_needed" and not self._log_kept_checked:
            self._log_kept_checked = True
            if not self._committed_segment_kept(start):
                found = self._segments.found(0)
                oldest = Position(found[0][0], 0).offset() if found else Position.of(start).offset()
                return self._with_every_table_snapshotted({**start, **oldest})
        assert self._live is not None, "open() first"
        return self._live.latest_offset(partition, start, max_records)

    def _stream_latest(self, start: Offset, cap: Offset | None, max_records: int | None) -> Offset:
        """How far the node's commit log can be read from ``start`` now, never past ``cap``."""
        if self._snapshot is not None:
            if not self._snapshot.stream_may_start():
                self._cdc_raw.warn_while_waiting()
                return start
            if start.get("recorded_for_snapshot"):
                self._check_recorded_segment_kept(Position.of(start).segment)
        offset, stopped_at_open_bucket = self._walk(start, max_records)
        if cap is not None and order(offset) > order(cap):
            # Up to a live snapshot chunk's high watermark (a position this walk gave before).
            offset, stopped_at_open_bucket = dict(cap), False
        if self._full_rows is not None and stopped_at_open_bucket:
            self._full_rows.walked_to_open_buckets()
        return offset

    def _walk(self, start: Offset, max_records: int | None) -> tuple[Offset, bool]:
        """The latest-offset walk (:meth:`.readers.CommitLogReader.latest`), stopping at the open
        time buckets under ``row_image: full``."""
        horizon_us = self._full_rows.horizon() if self._full_rows is not None else None
        return self._reader.latest(start, max_records, horizon_us)

    def _check_recorded_segment_kept(self, segment_id: int) -> None:
        """At the hand-off: the segment recorded before the snapshot is still in cdc_raw (nothing
        of this pipeline deletes it before the stream has read it)."""
        if self._segments.holds(segment_id):
            return
        raise SnapshotOutlivedLogError(
            f"commit log {self.node}: segment {segment_id}, where the stream was to start after the snapshot, is no "
            f"longer in {self.config.cdc_raw}: changes made during the snapshot may be gone (with cdc_block_writes: "
            "false Cassandra deletes the oldest segments when cdc_total_space is full). Take the snapshot again "
            "(cdcflow offsets reset FILE, while stopped) with a larger cdc_total_space, more slices and workers"
        )

    def _committed_segment_kept(self, start: Offset) -> bool:
        """Whether the committed position is still in cdc_raw: its segment is there, or this source
        deleted it after reading it whole (the offset says so), or nothing was read yet."""
        position = Position.of(start)
        if position.segment == 0 or start.get(SEGMENT_READ) or start.get("recorded_for_snapshot"):
            return True
        if self._segments.holds(position.segment):
            return True
        self._report.counted("log_lost_snapshot")
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

    # --- reading -----------------------------------------------------------------------------

    def read(self, partition: Partition, start: Offset, end: Offset) -> Iterator[Record | Rejected]:
        snapshot = self._slice(partition)
        if snapshot is not None:
            yield from snapshot.read(partition, start, end)
            return
        assert self._live is not None, "open() first"
        yield from self._live.read(partition, start, end)

    def _stream_read(self, start: Offset, end: Offset) -> Iterator[Record]:
        """The node's changes in (start, end]."""
        first, last = Position.of(start), Position.of(end)
        if self._full_rows is not None:
            yield from self._full_rows.events(self._reader.mutations(first, last))
            return
        for changes, segment_id, position in self._reader.changes(first, last):
            yield from self._events.delta(changes, segment_id, position)

    def read_event_batches(
        self, partition: Partition, start: Offset, end: Offset, batch_size: int
    ) -> Iterator[EventBatch] | None:
        """delta: the range's events in the compiled core's compact batches, when every entry in
        it is one the compiled core decodes with the current schema to compact changes; else None,
        and ``read`` gives the range (the reference's events, the error store, schema changes)."""
        if self._decoding.native is None or self.config.row_image != "delta" or self._slice(partition) is not None:
            return None
        if self._live is not None and self._live.declines_batches(start):
            return None  # each event must pass the live snapshot's chunk: read() gives them
        replicas = self._events.replicas
        batches = self._reader.compact_batches(
            Position.of(start), Position.of(end), batch_size, replicas.emits if replicas is not None else None
        )
        # How often the fast path is taken: a table whose changes keep declining shows here.
        self._report.counted("range_read_compact" if batches is not None else "range_read_by_record")
        return None if batches is None else iter(batches)

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
        if partition.id != self.node:
            return None
        return self._cdc_raw.headroom()

    def commit(self, offsets: Mapping[str, Offset]) -> None:
        if self._snapshot is not None:
            self._snapshot.note_committed(offsets)
        if self._full_rows is not None:
            self._full_rows.forget_emitted()  # their events are durable downstream now
        for partition_id, offset in offsets.items():
            if partition_id != self.node:
                continue  # a snapshot slice
            for segment_id, path, index in self._segments.finished(Position.of(offset)):
                self._cdc_raw.growth.retired(segment_id, index.offset)
                self._segments.retire(path, index)

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
        catalog = self._decoding.catalog
        table = catalog.by_name(keyspace, table_name)
        if table is None or table.keyspace == "system_schema" or not self._decoding.emits(table):
            followed = sorted(f"{t.keyspace}.{t.table}" for t in catalog.tables.values() if self._live_table(t))
            raise SnapshotTableError(
                f"commit log {self.node}: this source does not emit {name} (it must exist, have cdc = true, no "
                f"counters, and be in source.tables when that is set); it emits: {', '.join(followed) or 'none'}"
            )
        return table

    def _live_table(self, table: TableSchema) -> bool:
        return not table.keyspace.startswith("system") and self._decoding.emits(table)

    def _with_every_table_snapshotted(self, offset: Offset) -> Offset:
        """``offset`` with a live snapshot of each table the source snapshots queued (when_needed)."""
        for table in self._snapshot_tables():
            offset = LiveSnapshots.with_table_snapshotted(offset, f"{table.keyspace}.{table.table}")
        return offset


class _CommitLogStream:
    """The node's commit log as a live snapshot's stream (:class:`~cdcflow.sources.cql.live_snapshot.LiveStream`)."""

    def __init__(self, source: CassandraCommitLogSource) -> None:
        self._source = source

    def latest(self, partition: Partition, start: Offset, cap: Offset | None, max_records: int | None) -> Offset:
        return self._source._stream_latest(start, cap, max_records)

    def read(self, partition: Partition, start: Offset, end: Offset) -> Iterator[Record]:
        return self._source._stream_read(start, end)

    def order(self, position: Offset) -> tuple[int, int]:
        return order(position)

    def high_mark(self, partition: Partition, position: Offset, read_ended_us: int) -> Offset | None:
        """The synced end of cdc_raw, once the node has synced what it wrote before the read ended."""
        period_s = self._source._cdc_raw.sync_period_s
        wait_us = int(_SYNC_PERIODS_BEFORE_HIGH_MARK * (period_s or _DEFAULT_SYNC_PERIOD_S) * 1_000_000)
        if time.time_ns() // 1000 < read_ended_us + wait_us:
            return None
        return self._source._walk(position, None)[0]

    def token_ranges(self, partition: Partition, position: Offset) -> Sequence[TokenRange]:
        return [WHOLE_RING]  # every key the node emits; the rows of others are left out as the stream leaves them

    def snapshot_table(self, name: str) -> tuple[SnapshotTable, tuple[str, ...], RowToRecord]:
        source = self._source
        schema = source._emitted_table(name)
        rows = CassandraRowEvents(source.config.cluster, [schema], source._emits_token())
        key_columns = tuple(c.name for c in (*schema.partition_key, *schema.clustering))
        return snapshot_table(schema), key_columns, rows
