"""Snapshot modes of the CQL sources (``scylla_cdc``, ``cassandra_commitlog``): a table's existing
rows as ``op: r`` events before its stream, with Debezium's ``snapshot.mode`` names.

Modes
-----
``never`` (cdcflow's default, as before): the stream only. ``initial``: a snapshot, then the
stream; a pipeline whose snapshot is finished (every slice committed as done) only streams.
``initial_only``: the snapshot alone; the pipeline ends once every slice is delivered (the
stream's partitions are not listed, so no stream position is recorded and cdc_raw is not held).
``when_needed``: no slices and no gates; a stream partition without a committed offset, or whose
committed position is gone from its log, gets a *live* snapshot of its tables queued
(:mod:`.live_snapshot`), read while it streams.

Slices
------
Each table's Murmur3 token ring is cut into ``snapshot_slices`` equal ranges, each a partition of
the source with a checkpoint of its own: ``{"done": false}`` until the slice has been read whole,
then ``{"done": true, "started_us": t}`` (when its read began). A slice is read in one read cycle
with a paged ``SELECT token(pk), <columns> ... WHERE token(pk) > a AND token(pk) <= b``; a crash
re-reads the slices not committed as done (at least once), never the others. Worker processes
split slices like any partition. Ids are ``[<prefix>/]snapshot/<keyspace.table>/<i>-of-<n>``: a
different ``snapshot_slices`` is a different snapshot, taken anew.

The ordering hazard, and the hand-off
-------------------------------------
The snapshot reads key k at one moment; a change to k made while it runs reaches the stream's log
at its own moment, before or after that read. A consumer applies events in order. If a stream
change of k reached it *before* a snapshot row of k read *earlier* than the change, the older
snapshot row would overwrite the change: a stale final state. If the stream started only after the
change and the snapshot read k before it, the change would be lost. Hence three steps:

1. **Record first** (gate 1). Every stream partition's start offset is committed before any slice
   is read: a slice's ``latest_offset`` returns its start until each stream partition the source
   lists has a committed offset. Every change made after the snapshot's first read is then past
   a recorded start.
2. **Snapshot.** Slices are read and committed.
3. **Stream from the record** (gate 2). A stream partition reads nothing until every slice of its
   table (of every table, for the commit log's node partitions, which carry them all) is
   committed as done; it then reads from its recorded start. Changes made during the snapshot
   arrive after every snapshot row, some twice (the snapshot saw them already): at least once, and
   the last event of each key carries its latest state.

Both gates read *committed* checkpoints, not this process's positions: slices and stream
partitions may run in different worker processes (``engine.workers > 1``), and a slice read but
not yet committed can be read again after a crash, after stream events were delivered. The
checkpoint store is the one truth every process shares; the engine hands it to the source as
``PluginContext.committed_offsets`` (the worker engine reads its store, at most once a second while
a gate is closed, and this process's own commits count at once through ``Source.commit``; Spark
gives the offsets its micro-batch starts from, those of the last completed batch). An open gate
stays open for the run. A stream partition that waits reports ``latest_offset == start``: to the
engine it is a partition with nothing new yet.

Limits
------
* While the snapshot runs the stream waits, and its log must keep what it waits for. Cassandra:
  the commit-log source deletes a segment only once the checkpoint covering it is durable, so
  nothing is deleted during the snapshot and cdc_raw grows with every write to a CDC table. At
  ``cdc_total_space`` Cassandra refuses writes to CDC tables (``cdc_block_writes: true``, the
  default) or, with ``cdc_block_writes: false``, deletes the oldest segments
  (``src/java/org/apache/cassandra/config/Config.java``, ``cdc_block_writes``;
  ``CommitLogSegmentManagerCDC``): the recorded start is gone, and the source fails at the hand-off
  with :class:`SnapshotOutlivedLogError`. ScyllaDB: log rows expire after the table's CDC ``ttl``
  (86400 s by default); a snapshot that outlasts it fails at the hand-off the same way.
* A snapshot row is the row as one replica set returned it at read time (the source's
  consistency), stamped with that time. The stream's recorded start lies before the first read
  (ScyllaDB: by the confidence window; Cassandra: the oldest segment with CDC data in cdc_raw),
  so a write a replica had not applied when the snapshot read it still comes through the stream.
"""

from __future__ import annotations

import itertools
import logging
import sys
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any, Literal, Protocol

from pydantic import BaseModel, Field

from cdcflow.contract import Offset, Partition, PluginContext
from cdcflow.errors import ConfigError, SourceError, SourceUnavailableError
from cdcflow.events import Record
from cdcflow.metrics import SnapshotMetrics, snapshot_metrics

__all__ = [
    "ProgressBar",
    "RowToRecord",
    "SnapshotConfig",
    "SnapshotEngineError",
    "SnapshotError",
    "SnapshotMode",
    "SnapshotOutlivedLogError",
    "SnapshotTable",
    "TokenRangeSnapshot",
    "token_slices",
]

SnapshotMode = Literal["never", "initial", "initial_only", "when_needed"]

_MIN_TOKEN, _MAX_TOKEN = -(2**63), 2**63 - 1  # Murmur3Partitioner
# How often a closed gate reads the committed checkpoints again (a store read: a folder, a topic).
VIEW_REFRESH_S = 1.0
_PROGRESS_REFRESH_S = 0.25
_ROWS_PER_METRICS_UPDATE = 500

log = logging.getLogger("cdcflow.snapshot")


class SnapshotError(SourceError):
    """A snapshot cannot be taken or handed over to the stream."""


class SnapshotOutlivedLogError(SnapshotError):
    """The stream's recorded start fell out of its log while the snapshot ran: changes made during
    the snapshot are gone. Not retried: take the snapshot again faster, or keep the log longer."""


class SnapshotEngineError(SnapshotError, ConfigError):
    """The engine running the source does not show it the pipeline's committed offsets, which the
    hand-off between snapshot and stream needs."""


class SnapshotConfig(BaseModel):
    """The snapshot fields of a CQL source's config."""

    snapshot: SnapshotMode = Field(
        default="never",
        description="never: stream only; initial: the tables' existing rows (op r) first, then the stream from "
        "a position recorded before the snapshot; initial_only: the existing rows, then the pipeline ends; "
        "when_needed: a live snapshot of the tables (while streaming) when a stream partition has no committed "
        "offset or its committed position is gone from the log",
    )
    snapshot_chunk_rows: int = Field(
        default=1024,
        ge=1,
        description="live snapshots: rows per chunk, the rows held in memory between a chunk's watermarks "
        "(Debezium's incremental.snapshot.chunk.size)",
    )
    snapshot_open_chunks: int = Field(
        default=16,
        ge=1,
        description="live snapshots: chunks one process holds at once (one per stream partition reading one); "
        "other partitions stream on and read theirs when one is delivered",
    )
    snapshot_slices: int = Field(
        default=64, ge=1, le=65536, description="token-ring slices per table: the units of parallelism and resume"
    )
    snapshot_page_size: int = Field(default=1000, ge=1, description="rows per CQL page of a slice read")
    snapshot_progress: bool | None = Field(
        default=None, description="a progress bar on stderr; null: when stderr is a terminal"
    )


def token_slices(count: int) -> list[tuple[int, int]]:
    """``count`` slices covering the whole Murmur3 ring; each is (exclusive start, inclusive end),
    the first one's start being the ring's minimum, itself a token (read inclusively)."""
    width = (_MAX_TOKEN - _MIN_TOKEN) // count
    bounds = [_MIN_TOKEN + i * width for i in range(count)] + [_MAX_TOKEN]
    return list(itertools.pairwise(bounds))


@dataclass(frozen=True)
class SnapshotTable:
    """A table to snapshot: its name as the source names it (``keyspace.table``), its partition key
    columns (for ``token()``) and every column to read, key columns included."""

    name: str
    partition_key: tuple[str, ...]
    columns: tuple[str, ...]

    @property
    def keyspace(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def table(self) -> str:
        return self.name.split(".", 1)[1]


class RowToRecord(Protocol):
    """How a source turns one row read by a slice into its event (None: the source leaves it out,
    as the commit-log source does for rows another node's worker emits). ``values`` are the
    driver's values by column name; ``position`` is the row's place, for ``source.position``."""

    def __call__(
        self, table: SnapshotTable, token: int, values: Mapping[str, Any], position: dict[str, Any], read_at_us: int
    ) -> Record | None: ...


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _slice_id(prefix: str, table: str, index: int, count: int) -> str:
    return f"{prefix}snapshot/{table}/{index:05d}-of-{count:05d}"


def _done(offset: Offset | None) -> bool:
    return bool(offset and offset.get("done"))


class ProgressBar:
    """One line on a terminal, redrawn in place (at most four times a second)."""

    def __init__(self, enabled: bool, stream: IO[str]) -> None:
        self.enabled = enabled
        self._stream = stream
        self._drawn_at = float("-inf")
        self._ended = False

    def show(self, finished: int, total: int, rows_here: int, tables: int, force: bool = False) -> None:
        """A snapshot's: slices finished by the whole pipeline (as the committed checkpoints say),
        rows read by this process."""
        plural = "" if tables == 1 else "s"
        text = f"{finished}/{total} slices of {tables} table{plural}, {rows_here:,} rows read by this process"
        self.draw(finished / total if total else 1.0, text, finished >= total, force)

    def draw(self, share: float, text: str, complete: bool, force: bool = False) -> None:
        """``share`` (0 to 1) as a bar, then ``text``; ``complete`` ends the line (and the bar,
        until something is drawn as not complete again)."""
        if not self.enabled or (self._ended and complete):
            return
        now = time.monotonic()
        if not (force or complete) and now - self._drawn_at < _PROGRESS_REFRESH_S:
            return
        self._drawn_at = now
        width = 30
        filled = min(width, max(0, int(width * share)))
        self._stream.write(f"\rsnapshot [{'#' * filled}{'.' * (width - filled)}] {text}" + ("\n" if complete else ""))
        self._stream.flush()
        self._ended = complete


class TokenRangeSnapshot:
    """One source's snapshot: the slices of its tables, how they are read, and the two gates
    between them and the source's stream (see the module's documentation).

    The source lists :meth:`partitions` with its own, routes the calls for a slice (``holds``) here,
    asks :meth:`stream_may_start` before reading a stream partition, and passes ``commit`` on to
    :meth:`note_committed`. ``stream_partitions`` names the stream partitions whose start must be
    committed before slices are read (none under ``initial_only``).
    """

    def __init__(
        self,
        settings: SnapshotConfig,
        tables: Sequence[SnapshotTable],
        context: PluginContext,
        session: Any,
        to_record: RowToRecord,
        stream_partitions: Callable[[], Collection[str]],
        *,
        id_prefix: str = "",
        execution_profile: object | None = None,
        progress_stream: IO[str] | None = None,
        view_refresh_s: float = VIEW_REFRESH_S,
    ) -> None:
        self.settings = settings
        self._context = context
        self._session = session
        self._to_record = to_record
        self._stream_partitions = stream_partitions
        self._execution_profile = execution_profile
        self._tables = {t.name: t for t in tables}
        self._slices: dict[str, Partition] = {}
        self._slices_of: dict[str, list[str]] = {t.name: [] for t in tables}
        ranges = token_slices(settings.snapshot_slices)
        for table in tables:
            for index, (start, end) in enumerate(ranges):
                partition_id = _slice_id(id_prefix, table.name, index, len(ranges))
                self._slices[partition_id] = Partition(partition_id, {"table": table.name, "start": start, "end": end})
                self._slices_of[table.name].append(partition_id)
        self._view: dict[str, Offset] = {}
        self._view_read_at = float("-inf")
        self._view_refresh_s = view_refresh_s
        self._slices_open = False
        self._waiting_logged = False
        self._open_streams: dict[str, int | None] = {}  # table (or "*") -> when its snapshot began
        self._rows_here = 0
        self._metrics: dict[str, SnapshotMetrics] = {t.name: snapshot_metrics(context.pipeline, t.name) for t in tables}
        for name, metrics in self._metrics.items():
            metrics.slices.set(len(self._slices_of[name]))
        stream = progress_stream or sys.stderr
        enabled = settings.snapshot_progress if settings.snapshot_progress is not None else stream.isatty()
        # Worker processes share the terminal: the first one draws (its slice counts are everyone's).
        self._bar = ProgressBar(enabled and context.worker_id == "0", stream)

    # --- slices as partitions -----------------------------------------------------------------

    def partitions(self) -> list[Partition]:
        return list(self._slices.values())

    def holds(self, partition_id: str) -> bool:
        return partition_id in self._slices

    @staticmethod
    def initial_offset() -> Offset:
        return {"done": False}

    @staticmethod
    def is_finished(offset: Offset) -> bool:
        return _done(offset)

    def latest_offset(self, start: Offset) -> Offset:
        """The whole slice once the stream's start is recorded; ``start`` until then."""
        if _done(start):
            return start
        self._refresh_view()  # throttled: keeps the progress of other processes' slices current
        if not self._may_read_slices():
            return start
        return {"done": True, "started_us": time.time_ns() // 1000}

    def read(self, partition: Partition, start: Offset, end: Offset) -> Iterator[Record]:
        """Every row of the slice, if ``(start, end]`` is the slice's one step to done."""
        if _done(start) or not _done(end):
            return
        table = self._tables[partition.info["table"]]
        keys = ", ".join(_quoted(c) for c in table.partition_key)
        lower = ">=" if partition.info["start"] == _MIN_TOKEN else ">"
        query = (
            f"SELECT token({keys}), {', '.join(_quoted(c) for c in table.columns)} "
            f"FROM {_quoted(table.keyspace)}.{_quoted(table.table)} "
            f"WHERE token({keys}) {lower} %s AND token({keys}) <= %s"
        )
        yield from self._rows(partition, table, query)

    def _rows(self, partition: Partition, table: SnapshotTable, query: str) -> Iterator[Record]:
        from cassandra.query import SimpleStatement

        statement = SimpleStatement(query, fetch_size=self.settings.snapshot_page_size)
        bounds = (partition.info["start"], partition.info["end"])
        read_at_us = time.time_ns() // 1000
        metrics = self._metrics[table.name]
        counted = 0
        try:
            if self._execution_profile is None:
                rows = iter(self._session.execute(statement, bounds))
            else:
                rows = iter(self._session.execute(statement, bounds, execution_profile=self._execution_profile))
        except Exception as exc:  # the driver's errors: timeouts, unavailable, a node going down
            raise SourceUnavailableError(f"reading snapshot slice {partition.id}: {type(exc).__name__}: {exc}") from exc
        for index in itertools.count():
            try:
                row = next(rows)  # the next page is fetched here, so its failure is a read failure
            except StopIteration:
                break
            except Exception as exc:
                raise SourceUnavailableError(
                    f"reading snapshot slice {partition.id} after {index} rows: {type(exc).__name__}: {exc}"
                ) from exc
            values = dict(zip(table.columns, row[1:], strict=True))
            record = self._to_record(table, row[0], values, {"slice": partition.id, "row": index}, read_at_us)
            counted += 1
            if counted == _ROWS_PER_METRICS_UPDATE:
                self._count_rows(metrics, counted)
                counted = 0
            if record is not None:
                yield record
        self._count_rows(metrics, counted)

    def _count_rows(self, metrics: SnapshotMetrics, rows: int) -> None:
        metrics.rows.inc(rows)
        self._rows_here += rows
        self._show_progress()

    # --- the gates ----------------------------------------------------------------------------

    def note_committed(self, offsets: Mapping[str, Offset]) -> None:
        """This process's offsets that are now committed (``Source.commit``): they count at once."""
        self._view.update(offsets)
        if any(self.holds(pid) for pid in offsets):
            self._show_progress(force=True)

    def _refresh_view(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._view_read_at < self._view_refresh_s:
            return
        reader = self._context.committed_offsets
        if reader is None and self.settings.snapshot == "initial_only":
            # No stream to hand over to: the view only shows other processes' progress.
            return
        if reader is None:
            raise SnapshotEngineError(
                f"pipeline {self._context.pipeline}: this engine does not show the source the pipeline's committed "
                "offsets, which snapshot: initial needs to hand over to the stream; run it on the "
                "worker or spark engine"
            )
        self._view = dict(reader())
        self._view_read_at = now
        self._show_progress(force=True)

    def _may_read_slices(self) -> bool:
        """Gate 1: every stream partition's start is committed (the record comes first)."""
        if self._slices_open:
            return True
        waiting = [pid for pid in self._stream_partitions() if pid not in self._view]
        if waiting:
            if not self._waiting_logged:
                self._waiting_logged = True
                log.info(
                    "pipeline %s: the snapshot waits until the stream's start positions are committed (%d partitions)",
                    self._context.pipeline,
                    len(waiting),
                )
            return False
        self._slices_open = True
        log.info(
            "pipeline %s: snapshot of %s in %d slices each; the stream starts once every slice is delivered",
            self._context.pipeline,
            ", ".join(self._tables),
            self.settings.snapshot_slices,
        )
        return True

    def stream_may_start(self, table: str | None = None) -> bool:
        """Gate 2: every slice of ``table`` (of every table when None) is committed as done."""
        key = table if table is not None else "*"
        if key in self._open_streams:
            return True
        names = list(self._tables) if table is None else [table] if table in self._tables else []
        slices = [pid for name in names for pid in self._slices_of[name]]
        if not all(_done(self._view.get(pid)) for pid in slices):
            self._refresh_view()
            if not all(_done(self._view.get(pid)) for pid in slices):
                return False
        started = [int(self._view[pid].get("started_us", 0)) for pid in slices]
        self._open_streams[key] = min(started) if started else None
        if slices:
            log.info(
                "pipeline %s: snapshot of %s delivered (%d slices); its stream starts from the recorded positions",
                self._context.pipeline,
                ", ".join(names),
                len(slices),
            )
        return True

    def started_us(self, table: str | None = None) -> int | None:
        """When the snapshot of ``table`` (of every table: None) began reading, once
        :meth:`stream_may_start` said yes for it; None before, or without slices."""
        return self._open_streams.get(table if table is not None else "*")

    def check_log_kept(
        self, stream_position_us: int, started_us: int | None, horizon_us: int, margin_us: int, where: str
    ) -> None:
        """Fail when a stream about to read from ``stream_position_us`` (not yet past the snapshot's
        start ``started_us``) would need log rows older than the log's ``horizon_us``: rows within
        ``margin_us`` before the snapshot's start, or after it, are gone (a snapshot read may not
        have seen them)."""
        if started_us is None or stream_position_us > started_us:
            return
        needed_from = max(stream_position_us, started_us - margin_us)
        if horizon_us > needed_from:
            raise SnapshotOutlivedLogError(
                f"{where}: the snapshot began at {_utc(started_us)} and the log now keeps rows only from "
                f"{_utc(horizon_us)}: changes made from {_utc(needed_from)} have expired before the stream "
                "could read them. Take the snapshot again (cdcflow offsets reset FILE with the snapshot/... and "
                "stream partitions, while stopped) with more slices and workers, or raise the table's CDC ttl"
            )

    # --- progress -----------------------------------------------------------------------------

    def _show_progress(self, force: bool = False) -> None:
        finished_total = 0
        for name, slices in self._slices_of.items():
            finished = sum(1 for pid in slices if _done(self._view.get(pid)))
            self._metrics[name].slices_finished.set(finished)
            finished_total += finished
        self._bar.show(finished_total, len(self._slices), self._rows_here, len(self._tables), force)


def _utc(micros: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(micros / 1e6))
