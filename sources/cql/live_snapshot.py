"""Live snapshots of the CQL sources: a table re-read in token-range chunks inside a stream
partition, while that partition keeps streaming (Debezium's incremental snapshot, Netflix's DBLog).

Why inside the stream partition
-------------------------------
A snapshot row must never reach a consumer after a newer streamed change of its key, nor may an
older streamed change follow it. DBLog orders the two by the log itself: note a *low watermark*
in the log, read a chunk of rows, note a *high watermark*; a change between the two marks to a key
of the chunk removes that key from the chunk; the chunk's remaining rows are emitted at the high
watermark, in the log's order. That needs one ordered log that carries every change of the
chunk's keys, read by the one that holds the chunk. In cdcflow a CQL source's log is split into
stream partitions, each read on its own by whichever process owns it; but each carries the changes
of known keys: a Cassandra node's commit log every key that node emits (``replicas: primary``: the
tokens it is primary for), a ScyllaDB stream group the keys whose tokens route to its streams (a
vnode range, the tablets of its streams). So each stream partition snapshots its own keys: the
chunks are cut from *its* token ranges, and its own positions are the watermarks. A request is
queued in every partition carrying the table, and its progress is part of the partition's offset
(``{..., "live_snapshot": {...}}``): committed with the stream position, resumed after a crash,
moved with the partition to another worker.

One chunk, in one partition (:class:`LiveSnapshots`)
----------------------------------------------------
1. At position L (the partition's position, everything up to it delivered): read the next chunk,
   ``SELECT ... WHERE token(pk) > a AND token(pk) <= b [AND where] LIMIT n``, cut at a token
   boundary, into memory (each row as its ``op: r`` event).
2. Note H: a position of the partition's log at or past every change the read could have seen.
   Cassandra: the synced end of cdc_raw, noted two ``commitlog_sync_period``\\ s after the read
   (a write applied before the read ends is synced by then); ScyllaDB: the read's end time (the
   log is ordered by write time, and the stream reads up to now minus the confidence window).
3. Stream on up to H, never past it (``latest_offset`` caps the stream's end at H). Each event of
   the chunk's table drops its row from the chunk (a partition or range deletion, a static row: the
   rows of its partition); a schema change of the table throws the chunk away.
4. At H: one more range, with the same stream position and the request's progress moved past the
   chunk: its ``read`` yields the chunk's remaining rows. Then the next chunk, from L = H.

Every change at or before L was applied when the chunk was read (it was delivered, and the
database applied it before logging... or, for ScyllaDB, it is older than the confidence window):
the chunk's row is at least as new. A change in (L, H] is delivered in its place and its row is
dropped. A change after H was not seen by the read: it follows the row. A crash loses the chunk
in memory: the partition resumes from its committed offset (whose progress says which chunks are
delivered) with a new chunk from there.

Limits
------
* At most ``snapshot_open_chunks`` chunks are held in memory per process (each at most
  ``snapshot_chunk_rows`` rows); further partitions stream on and take their chunk when one closes.
* A row dropped for a change in (L, H] is delivered by that change alone: with delta row images
  the consumer gets only the columns the change wrote (the rest it had before, from the stream).
* A ScyllaDB group whose streams change (a tablet resize) between L and H reads its chunk again;
  a group that ends (a new generation) before H leaves the request to its successors, which take
  the requests their predecessors left unfinished when they start.
* The worker engine only: the chunk lives in the process that planned the range
  (:class:`LiveSnapshotStateError` elsewhere).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import IO, Any, Protocol

from cdcflow.contract import Offset, Partition, PluginContext, Rejected
from cdcflow.errors import SnapshotWhereError, SourceUnavailableError
from cdcflow.events import ChangeEvent, Record, SchemaChangeEvent
from cdcflow.live_snapshots import LiveSnapshotProgress, SnapshotRequest
from cdcflow.metrics import forget_live_snapshot, live_snapshot_metrics
from cdcflow.sources.cql.snapshot import ProgressBar, RowToRecord, SnapshotConfig, SnapshotError, SnapshotTable

__all__ = [
    "LIVE_FIELD",
    "WHOLE_RING",
    "LiveSnapshotStateError",
    "LiveSnapshots",
    "LiveState",
    "LiveStream",
    "TokenRange",
    "checked_where",
    "stream_position",
]

LIVE_FIELD = "live_snapshot"
"""The field of a stream partition's offset that holds its live snapshot requests and progress."""

TokenRange = tuple[int, int]
"""Tokens ``(start, end]`` of the Murmur3 ring (the ring's minimum is no key's token)."""

WHOLE_RING: TokenRange = (-(2**63), 2**63 - 1)

_FORBIDDEN_IN_WHERE = (";", "--", "//", "/*")
# A chunk not asked for this long (its partition moved to another worker, the pipeline paused)
# gives up its room when another partition needs one.
_IDLE_CHUNK_S = 60.0

log = logging.getLogger("cdcflow.snapshot")


class LiveSnapshotStateError(SnapshotError):
    """A live snapshot's chunk was asked of a process that did not read it (an engine that reads a
    range elsewhere than where it planned it: live snapshots run on the worker engine)."""


def checked_where(where: str | None) -> str | None:
    """``where`` stripped, or a :class:`SnapshotWhereError` when it is not one CQL condition."""
    if where is None or not where.strip():
        return None
    text = where.strip()
    if any(mark in text for mark in _FORBIDDEN_IN_WHERE):
        raise SnapshotWhereError(
            f"--where {where!r}: give one CQL condition, as written after WHERE (no ';' and no comments)"
        )
    return text


def stream_position(offset: Offset) -> Offset:
    """A stream partition's offset without its live snapshot state: the stream's own position."""
    return {k: v for k, v in offset.items() if k != LIVE_FIELD}


@dataclass(frozen=True)
class LiveState:
    """The live snapshot requests queued in a stream partition's offset: the first is being read,
    its rows up to token ``after`` (None: none yet) delivered in ``chunks`` chunks of ``rows`` rows."""

    queue: tuple[SnapshotRequest, ...]
    after: int | None = None
    rows: int = 0
    chunks: int = 0

    @classmethod
    def of(cls, offset: Offset) -> LiveState | None:
        data = offset.get(LIVE_FIELD)
        if not data or not data.get("queue"):
            return None
        after = data.get("after")
        return cls(
            tuple(SnapshotRequest.from_json(r) for r in data["queue"]),
            None if after is None else int(after),
            int(data.get("rows", 0)),
            int(data.get("chunks", 0)),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "queue": [r.to_json() for r in self.queue],
            "after": self.after,
            "rows": self.rows,
            "chunks": self.chunks,
        }

    @property
    def current(self) -> SnapshotRequest:
        return self.queue[0]

    def queued(self, request: SnapshotRequest) -> LiveState:
        """With ``request`` at the end of the queue, unless it is there already (its id), or a request
        of the same table and condition waits behind the current one (it will read the same rows)."""
        if any(r.id == request.id for r in self.queue):
            return self
        if any(r.table == request.table and r.where == request.where for r in self.queue[1:]):
            return self
        return replace(self, queue=(*self.queue, request))

    def advanced(self, chunk_end: int, rows: int, finished: bool) -> LiveState | None:
        """After a chunk up to ``chunk_end`` with ``rows`` rows; the next request (None: no more)
        once ``finished``."""
        if finished:
            return self.next()
        return replace(self, after=chunk_end, rows=self.rows + rows, chunks=self.chunks + 1)

    def next(self) -> LiveState | None:
        """Without the current request: the next one, from its start."""
        return LiveState(self.queue[1:]) if len(self.queue) > 1 else None


def with_state(position: Offset, state: LiveState | None) -> Offset:
    """``position`` (a stream position) with ``state``; without the field when nothing is queued."""
    return dict(position) if state is None else {**position, LIVE_FIELD: state.to_json()}


def clipped(ranges: Sequence[TokenRange], after: int | None) -> list[TokenRange]:
    """The parts of ``ranges`` past token ``after``."""
    if after is None:
        return list(ranges)
    return [(max(start, after), end) for start, end in ranges if end > after]


def share_done(ranges: Sequence[TokenRange], after: int | None) -> float:
    """How much of ``ranges`` (by token count) lies at or before ``after``."""
    total = sum(end - start for start, end in ranges)
    if not total or after is None:
        return 0.0
    left = sum(end - start for start, end in clipped(ranges, after))
    return 1.0 - left / total


class LiveStream(Protocol):
    """What a source tells :class:`LiveSnapshots` about its stream partitions. Positions are the
    stream's own offsets (without :data:`LIVE_FIELD`)."""

    def latest(self, partition: Partition, start: Offset, cap: Offset | None, max_records: int | None) -> Offset:
        """The stream's ``latest_offset`` from ``start``, never past ``cap`` (None: no cap)."""

    def read(self, partition: Partition, start: Offset, end: Offset) -> Iterator[Record | Rejected]:
        """The stream's events in (start, end]."""

    def order(self, position: Offset) -> tuple[Any, ...]:
        """A sort key of positions in the partition's log."""

    def high_mark(self, partition: Partition, position: Offset, read_ended_us: int) -> Offset | None:
        """H for a chunk read that ended at ``read_ended_us``, the stream being at ``position``: a
        position at or past every change the read could see; None while it cannot be told yet."""

    def token_ranges(self, partition: Partition, position: Offset) -> Sequence[TokenRange]:
        """The tokens whose changes the partition carries at ``position``, sorted."""

    def snapshot_table(self, name: str) -> tuple[SnapshotTable, tuple[str, ...], RowToRecord]:
        """Table ``name`` to read: its shape, its key columns (partition key then clustering) and
        how a row becomes an event. Raises :class:`~cdcflow.errors.SnapshotTableError`."""


def _hashable(value: Any) -> Any:
    """``value`` as something hashable that equal values share (collections as tuples and sets)."""
    if isinstance(value, Mapping):
        return frozenset((_hashable(k), _hashable(v)) for k, v in value.items())
    if isinstance(value, list | tuple):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, set | frozenset):
        return frozenset(_hashable(v) for v in value)
    return value


@dataclass
class _Chunk:
    """Rows of one chunk read: (token, values by column), in token order, and up to which token
    they are all of the partition's rows (``end``), whether that is the end of its ranges."""

    rows: list[tuple[int, dict[str, Any]]]
    end: int
    finishes: bool


@dataclass
class _Window:
    """A chunk in memory between its low and high watermark."""

    request: str
    after: int | None
    table: SnapshotTable
    key_columns: tuple[str, ...]
    ranges: tuple[TokenRange, ...]
    low_order: tuple[Any, ...]
    read_ended_us: int
    chunk_end: int
    finishes: bool
    events: dict[Any, ChangeEvent] = field(default_factory=dict)  # by key, in token order
    by_partition: dict[Any, list[Any]] = field(default_factory=dict)
    high: Offset | None = None
    high_order: tuple[Any, ...] | None = None
    thrown_away: bool = False  # a schema change of the table came through: read the chunk again
    used_at: float = field(default_factory=time.monotonic)

    def add(self, event: ChangeEvent) -> None:
        key = self._key(event.key)
        self.events[key] = event
        self.by_partition.setdefault(self._partition(event.key), []).append(key)

    def holds(self, state: LiveState, order: tuple[Any, ...]) -> bool:
        """Whether this window is the chunk ``state`` reads next, from a position between its marks."""
        if state.current.id != self.request or state.after != self.after or order < self.low_order:
            return False
        return self.high_order is None or order <= self.high_order

    def saw(self, record: Record) -> None:
        """A streamed event inside the window: the rows it makes stale leave the chunk."""
        if isinstance(record, SchemaChangeEvent):
            if f"{record.keyspace}.{record.table}" == self.table.name:
                self.thrown_away = True
            return
        if not isinstance(record, ChangeEvent):
            return
        source = record.source
        if f"{source.keyspace}.{source.table}" != self.table.name:
            return
        key = record.key or {}
        clustering = self.key_columns[len(self.table.partition_key) :]
        if all(key.get(c) is not None for c in clustering):
            self.events.pop(self._key(key), None)
            return
        # A partition or range deletion, a static row: every row of the partition may have changed.
        for row_key in self.by_partition.pop(self._partition(key), []):
            self.events.pop(row_key, None)

    def _key(self, key: Mapping[str, Any]) -> Any:
        return _hashable([key.get(c) for c in self.key_columns])

    def _partition(self, key: Mapping[str, Any]) -> Any:
        return _hashable([key.get(c) for c in self.table.partition_key])


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class ChunkReader:
    """Reads a table's rows by token ranges, at most about ``rows`` at a time, cut between tokens."""

    def __init__(self, session: Any, page_size: int, execution_profile: object | None = None) -> None:
        self._session = session
        self._page_size = page_size
        self._execution_profile = execution_profile

    def _query(self, table: SnapshotTable, restriction: str, where: str | None, limit: int | None) -> str:
        keys = ", ".join(_quoted(c) for c in table.partition_key)
        text = (
            f"SELECT token({keys}), {', '.join(_quoted(c) for c in table.columns)} "
            f"FROM {_quoted(table.keyspace)}.{_quoted(table.table)} WHERE {restriction.format(keys=keys)}"
        )
        if where is not None:
            text += f" AND {where}"
        if limit is not None:
            text += f" LIMIT {limit}"
        return text + (" ALLOW FILTERING" if where is not None else "")

    def _rows(self, query: str, parameters: tuple[int, ...], what: str) -> list[tuple[int, dict[str, Any]]]:
        from cassandra import InvalidRequest
        from cassandra.query import SimpleStatement

        statement = SimpleStatement(query, fetch_size=self._page_size)
        options = {} if self._execution_profile is None else {"execution_profile": self._execution_profile}
        try:
            return [(row[0], row[1:]) for row in self._session.execute(statement, parameters, **options)]
        except InvalidRequest as exc:
            raise SnapshotWhereError(f"{what}: the database refuses {query!r}: {exc}") from exc
        except Exception as exc:  # the driver's errors: timeouts, unavailable, a node going down
            raise SourceUnavailableError(f"{what}: {type(exc).__name__}: {exc}") from exc

    def check(self, table: SnapshotTable, where: str | None) -> None:
        """Raise :class:`SnapshotWhereError` if the database refuses ``where`` on ``table``."""
        query = self._query(table, "token({keys}) > %s", where, 1)
        self._rows(query, (2**63 - 2,), f"checking --where on {table.name}")

    def chunk(self, table: SnapshotTable, where: str | None, ranges: Sequence[TokenRange], rows: int) -> _Chunk:
        """The next rows of ``ranges`` (sorted, past what is done), at most ``rows`` unless one
        token alone holds more (then that token's rows, all of them)."""
        found: list[tuple[int, Any]] = []
        for start, end in ranges:
            wanted = rows - len(found)
            query = self._query(table, "token({keys}) > %s AND token({keys}) <= %s", where, wanted)
            got = self._rows(query, (start, end), f"reading a chunk of {table.name}")
            found += got
            if len(got) < wanted:
                continue  # the range is read whole
            last = found[-1][0]
            whole = [row for row in found if row[0] != last]
            if whole:
                return self._named(table, whole, last - 1, False)
            # One token holds the whole chunk (a wide partition): read that token's rows, all of them.
            query = self._query(table, "token({keys}) = %s", where, None)
            every = self._rows(query, (last,), f"reading a chunk of {table.name}")
            return self._named(table, every, last, last >= ranges[-1][1])
        return self._named(table, found, ranges[-1][1], True)

    @staticmethod
    def _named(table: SnapshotTable, rows: list[tuple[int, Any]], end: int, finishes: bool) -> _Chunk:
        return _Chunk([(token, dict(zip(table.columns, values, strict=True))) for token, values in rows], end, finishes)


class _Progress:
    """This process's live snapshots on a terminal: the share of the chunks' token ranges done
    over the partitions reading one, and the rows delivered."""

    def __init__(self, enabled: bool, stream: IO[str]) -> None:
        self._bar = ProgressBar(enabled, stream)
        self._shares: dict[tuple[str, str], float] = {}
        self._rows = 0

    def update(self, partition: str, table: str, share: float | None, rows: int = 0) -> None:
        """``share`` None: the partition's snapshot of ``table`` is over. A partition starting or
        ending a snapshot is drawn at once; a share moving, at most four times a second."""
        joined = (partition, table) not in self._shares
        if share is None:
            self._shares.pop((partition, table), None)
        else:
            self._shares[(partition, table)] = share
        self._rows += rows
        running = len(self._shares)
        if not running:
            self._bar.draw(1.0, f"live snapshot done, {self._rows:,} rows delivered by this process", True)
            return
        tables = sorted({t for _, t in self._shares})
        mean = sum(self._shares.values()) / running
        self._bar.draw(
            mean,
            f"live snapshot of {', '.join(tables)}: {mean:.0%} of {running} partition"
            f"{'' if running == 1 else 's'}, {self._rows:,} rows delivered by this process",
            False,
            force=joined or share is None,
        )


class LiveSnapshots:
    """The live snapshots of one source's stream partitions (see the module's documentation).

    The source routes a stream partition's ``latest_offset`` and ``read`` here whenever its offset
    holds :data:`LIVE_FIELD`, and asks :meth:`declines_batches` before offering compact batches
    (each streamed event must be seen here while a chunk is open).
    """

    def __init__(
        self,
        settings: SnapshotConfig,
        context: PluginContext,
        session: Any,
        stream: LiveStream,
        *,
        execution_profile: object | None = None,
        progress_stream: IO[str] | None = None,
    ) -> None:
        self.settings = settings
        self._context = context
        self._stream = stream
        self._reader = ChunkReader(session, settings.snapshot_page_size, execution_profile)
        self._windows: dict[str, _Window] = {}
        self._skips: dict[str, Offset] = {}  # per partition, the last range that only dropped a request
        self._waiting_logged: set[str] = set()
        output = progress_stream or sys.stderr
        enabled = settings.snapshot_progress if settings.snapshot_progress is not None else output.isatty()
        self._progress = _Progress(enabled, output)

    # --- requests -----------------------------------------------------------------------------

    def check_request(self, request: SnapshotRequest) -> SnapshotRequest:
        """The request with its condition checked against the database (raises
        :class:`SnapshotWhereError`, :class:`~cdcflow.errors.SnapshotTableError`)."""
        where = checked_where(request.where)
        table, _, _ = self._stream.snapshot_table(request.table)
        self._reader.check(table, where)
        return replace(request, where=where)

    @staticmethod
    def with_request(offset: Offset, request: SnapshotRequest) -> Offset:
        """``offset`` with ``request`` queued."""
        state = LiveState.of(offset)
        state = LiveState((request,)) if state is None else state.queued(request)
        return with_state(stream_position(offset), state)

    @staticmethod
    def with_table_snapshotted(offset: Offset, table: str) -> Offset:
        """``offset`` with ``snapshot: when_needed``'s request for ``table`` queued (one id per
        table, so that a partition that inherits its predecessors' requests takes it once)."""
        return LiveSnapshots.with_request(offset, SnapshotRequest(table, id=f"when_needed:{table}"))

    @staticmethod
    def pending(offset: Offset) -> bool:
        return LiveState.of(offset) is not None

    def progress(self, partition: Partition, offset: Offset) -> list[LiveSnapshotProgress]:
        state = LiveState.of(offset)
        if state is None:
            return []
        ranges = self._stream.token_ranges(partition, stream_position(offset))
        done = share_done(ranges, state.after)
        return [
            LiveSnapshotProgress(r.id, r.table, r.where, done if i == 0 else 0.0, state.rows if i == 0 else 0, i == 0)
            for i, r in enumerate(state.queue)
        ]

    def declines_batches(self, offset: Offset) -> bool:
        return self.pending(offset)

    def forget(self, partition_id: str) -> None:
        """The partition is done (finished, or no longer this process's): its chunk goes."""
        window = self._windows.pop(partition_id, None)
        self._skips.pop(partition_id, None)
        if window is not None:
            forget_live_snapshot(self._context.pipeline, window.table.name, partition_id)
            self._progress.update(partition_id, window.table.name, None)

    # --- reading ------------------------------------------------------------------------------

    def latest_offset(self, partition: Partition, start: Offset, max_records: int | None) -> Offset:
        state = LiveState.of(start)
        position = stream_position(start)
        if state is None:
            self._windows.pop(partition.id, None)
            return self._stream.latest(partition, position, None, max_records)
        order = self._stream.order(position)
        window = self._windows.get(partition.id)
        if window is not None and not window.holds(state, order):
            window = None
            del self._windows[partition.id]
        if window is None:
            if not self._room_for_a_chunk():
                self._log_waiting(partition)
                return with_state(self._stream.latest(partition, position, None, max_records), state)
            opened = self._open(partition, state, position)
            if opened is not state:
                # The queue moved on without a chunk to read: a range that only changes the offset.
                end = with_state(position, opened)
                self._skips[partition.id] = end
                return end
            window = self._windows[partition.id]
        window.used_at = time.monotonic()
        if window.high is None:
            window.high = self._stream.high_mark(partition, position, window.read_ended_us)
            window.high_order = None if window.high is None else self._stream.order(window.high)
        if window.high_order is not None and order >= window.high_order:
            return self._at_high_mark(partition, start, state, window)
        end = self._stream.latest(partition, position, window.high, max_records)
        return with_state(end, state)

    def _room_for_a_chunk(self) -> bool:
        """Whether another chunk may be held; chunks of partitions not asked for a while (moved to
        another worker, a paused pipeline) give up their room (read again when asked again)."""
        if len(self._windows) < self.settings.snapshot_open_chunks:
            return True
        idle_since = time.monotonic() - _IDLE_CHUNK_S
        for partition_id in [pid for pid, w in self._windows.items() if w.used_at < idle_since]:
            del self._windows[partition_id]
        return len(self._windows) < self.settings.snapshot_open_chunks

    def _at_high_mark(self, partition: Partition, start: Offset, state: LiveState, window: _Window) -> Offset:
        """The chunk's rows are due: the range that emits them, unless the chunk must be read again."""
        assert window.high is not None
        ranges = tuple(self._stream.token_ranges(partition, window.high))
        if window.thrown_away or ranges != window.ranges:
            why = "its table's schema changed" if window.thrown_away else "the partition's streams changed"
            log.info("%s: live snapshot chunk of %s read again: %s", partition.id, window.table.name, why)
            del self._windows[partition.id]
            return start
        advanced = state.advanced(window.chunk_end, len(window.events), window.finishes)
        return with_state(stream_position(start), advanced)

    def _open(self, partition: Partition, state: LiveState, position: Offset) -> LiveState | None:
        """Read the next chunk of the current request into a window at ``position`` (L); returns
        ``state`` when it did, or the state the queue moved on to when there was nothing to read
        (the request's table is gone, or its rows are all delivered)."""
        from cdcflow.errors import SnapshotRequestError

        request = state.current
        ranges = tuple(self._stream.token_ranges(partition, position))
        remaining = clipped(ranges, state.after)
        try:
            table, key_columns, to_record = self._stream.snapshot_table(request.table)
            if not remaining:
                self._finished(partition, state)
                return state.next()
            read_started_us = time.time_ns() // 1000
            chunk = self._reader.chunk(table, request.where, remaining, self.settings.snapshot_chunk_rows)
        except SnapshotRequestError as exc:
            # Checked when it was asked for: the table or its columns changed since. Stopping the
            # stream for it would be worse than leaving it: say so, and go on with the next one.
            log.error("%s: live snapshot %s of %s dropped: %s", partition.id, request.id, request.table, exc)
            self._finished(partition, state)
            return state.next()
        read_ended_us = time.time_ns() // 1000
        window = _Window(
            request.id,
            state.after,
            table,
            key_columns,
            ranges,
            self._stream.order(position),
            read_ended_us,
            chunk.end,
            chunk.finishes,
        )
        for index, (token, values) in enumerate(chunk.rows):
            place = {"slice": partition.id, "live_snapshot": request.id, "chunk": state.chunks, "row": index}
            event = to_record(table, token, values, place, read_started_us)
            if isinstance(event, ChangeEvent):
                window.add(event)
        self._windows[partition.id] = window
        self._waiting_logged.discard(partition.id)
        return state

    def read(self, partition: Partition, start: Offset, end: Offset) -> Iterator[Record | Rejected]:
        state = LiveState.of(start)
        first, last = stream_position(start), stream_position(end)
        if state is not None and LiveState.of(end) != state and first == last:
            if self._skips.get(partition.id) == end:
                return  # a request left without a chunk (see latest_offset): nothing to deliver
            yield from self._emit(partition, state, LiveState.of(end))
            return
        records = self._stream.read(partition, first, last)
        window = self._windows.get(partition.id)
        if state is None or window is None or not window.holds(state, self._stream.order(first)):
            yield from records
            return
        for record in records:
            if not isinstance(record, Rejected):
                window.saw(record)
            yield record

    def _emit(self, partition: Partition, state: LiveState, after: LiveState | None) -> Iterator[Record]:
        """The chunk's rows that no streamed change replaced, at its high watermark."""
        window = self._windows.get(partition.id)
        if window is None or window.request != state.current.id or window.after != state.after:
            raise LiveSnapshotStateError(
                f"{partition.id}: the live snapshot chunk after token {state.after} of {state.current.table} is not "
                "in this process: live snapshots run on the worker engine, which plans and reads a range in one "
                "process"
            )
        rows = list(window.events.values())
        metrics = live_snapshot_metrics(self._context.pipeline, window.table.name, partition.id)
        metrics.rows.inc(len(rows))
        if after is not None and after.current.id == state.current.id:
            share = share_done(window.ranges, after.after)
            metrics.done.set(share)
            self._progress.update(partition.id, window.table.name, share, len(rows))
        else:
            self._finished(partition, state, len(rows))
        yield from rows

    def _finished(self, partition: Partition, state: LiveState, rows: int = 0) -> None:
        request = state.current
        log.info(
            "%s: live snapshot %s of %s%s delivered (%d rows in %d chunks)",
            partition.id,
            request.id,
            request.table,
            f" where {request.where}" if request.where else "",
            state.rows + rows,
            state.chunks + (1 if rows else 0),
        )
        forget_live_snapshot(self._context.pipeline, request.table, partition.id)
        self._progress.update(partition.id, request.table, None, rows)

    def _log_waiting(self, partition: Partition) -> None:
        if partition.id not in self._waiting_logged:
            self._waiting_logged.add(partition.id)
            log.info(
                "%s: its live snapshot chunk waits: %d chunks are held already (snapshot_open_chunks)",
                partition.id,
                len(self._windows),
            )
