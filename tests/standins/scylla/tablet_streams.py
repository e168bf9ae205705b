"""The stand-in's tablet stream sets: ScyllaDB's ``cdc::table_streams``, from its code.

A CDC table of a tablet keyspace has a map from timestamp to the stream set operating from it
(scylladb ``cdc/metadata.hh`` ``table_streams``), one stream per tablet of the log table, sorted
by token, each carrying its tablet's last token (``cdc/generation.cc`` lines 442-458
``create_table_streams_mutation``: ``stream_id(map.get_last_token(tid), 0)``). ScyllaDB keeps it
in two internal tables and shows it through two node-local virtual tables:

* ``cdc_streams_state``: the base (oldest) timestamp and its streams; ``cdc_streams_history``: per
  later timestamp the streams closed and opened (``get_switch_streams_mutation``, lines 622-645).
  :meth:`TableStreams.load` rebuilds the map from them as ``load_cdc_tablet_streams`` (lines
  492-566) and ``cdc/metadata.cc`` ``construct_next_stream_set`` (lines 262-303) do.
* ``system.cdc_timestamps`` and ``system.cdc_streams`` (``db/virtual_tables.cc`` lines 1333-1470):
  computed on every read from the node's in-memory map: the timestamps newest first, and per
  timestamp the current set, then the closed and the opened streams (``query_cdc_streams``,
  ``cdc/generation.cc`` lines 596-620: the first entry lists every stream as opened);
  :meth:`TableStreams.virtual_rows`.

A write's stream is the newest set at or before its timestamp (``cdc/metadata.cc`` lines 162-197),
then the first stream whose token is at or past the write's. A tablet resize replaces every
stream (the new IDs carry fresh random bits: ``stream_id`` constructor, ``cdc/generation.cc`` lines
86-112) at ``new_generation_timestamp(true, ring_delay)``, at least 1 ms after the current set
(``generate_tablet_resize_update``, lines 647-674). Garbage collection drops every set closed more
than the log's TTL ago: the newest set whose successor began before ``now - ttl`` becomes the base
(``get_new_base_for_gc`` and ``garbage_collect_cdc_streams_for_table``, lines 716-771).
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from cdcflow.sources.scylla_cdc.stream_id import StreamId
from cdcflow.sources.scylla_cdc.tokens import MIN_TOKEN
from tests.standins.scylla.errors import StandinSetupError, WriteRejectedError

__all__ = ["CLOSED", "CURRENT", "OPENED", "TableStreams", "new_tablet_streams", "stream_diff"]

# cdc::stream_state (cdc/generation.hh): the stream_state column's values.
CURRENT, CLOSED, OPENED = 0, 1, 2


def new_tablet_streams(tablet_count: int, rng: random.Random) -> list[StreamId]:
    """One new stream per tablet of a log table with ``tablet_count`` (a power of two) tablets:
    tablet ``i`` covers biased tokens ``[i * 2**64 / n, (i + 1) * 2**64 / n)`` and its stream
    carries the tablet's last token, random bits, vnode index 0 and version 1."""
    if tablet_count <= 0 or tablet_count & (tablet_count - 1):
        raise StandinSetupError(f"tablet count must be a power of two, found {tablet_count}")
    width = (1 << 64) // tablet_count
    return [StreamId.from_parts((i + 1) * width - 1 + MIN_TOKEN, rng.getrandbits(38), 0) for i in range(tablet_count)]


def _by_token(streams: Iterable[StreamId]) -> tuple[StreamId, ...]:
    return tuple(sorted(streams, key=lambda s: s.token))


def stream_diff(before: Sequence[StreamId], after: Sequence[StreamId]) -> tuple[list[StreamId], list[StreamId]]:
    """``cdc::metadata::generate_stream_diff`` (``cdc/metadata.cc`` lines 321-359): (closed, opened)
    between two token-sorted sets, walked side by side by token."""
    closed: list[StreamId] = []
    opened: list[StreamId] = []
    i = j = 0
    while i < len(before):
        if j == len(after):
            closed.extend(before[i:])
            break
        if after[j].token < before[i].token:
            opened.append(after[j])
            j += 1
        elif after[j].token > before[i].token:
            closed.append(before[i])
            i += 1
        elif after[j] != before[i]:
            opened.append(after[j])
            closed.append(before[i])
            i += 1
            j += 1
        else:
            i += 1
            j += 1
    opened.extend(after[j:])
    return closed, opened


def _next_stream_set(
    previous: Sequence[StreamId], opened: Sequence[StreamId], closed: Sequence[StreamId]
) -> tuple[StreamId, ...]:
    """``cdc::metadata::construct_next_stream_set`` (``cdc/metadata.cc`` lines 262-303)."""
    if len(closed) == len(previous):
        return _by_token(opened)
    gone = set(closed)
    return _by_token([*(s for s in previous if s not in gone), *opened])


@dataclass
class TableStreams:
    """One table's stream sets by timestamp (µs, whole milliseconds: ``timestamp`` columns)."""

    _sets: dict[int, tuple[StreamId, ...]] = field(default_factory=dict)

    @classmethod
    def starting(cls, timestamp_us: int, streams: Iterable[StreamId]) -> TableStreams:
        return cls({timestamp_us: _by_token(streams)})

    @classmethod
    def load(
        cls,
        base_timestamp_us: int,
        base_streams: Iterable[StreamId],
        history: Iterable[tuple[int, int, StreamId]],
    ) -> TableStreams:
        """From ``cdc_streams_state`` (the base) and ``cdc_streams_history`` rows ``(timestamp_us,
        stream_state, stream_id)``: each later timestamp's set built from the one before it."""
        loaded = cls.starting(base_timestamp_us, base_streams)
        diffs: dict[int, tuple[list[StreamId], list[StreamId]]] = {}
        for timestamp, state, stream in history:
            closed, opened = diffs.setdefault(timestamp, ([], []))
            (closed if state == CLOSED else opened).append(stream)
        for timestamp in sorted(diffs):
            closed, opened = diffs[timestamp]
            loaded._sets[timestamp] = _next_stream_set(loaded.current(), _by_token(opened), _by_token(closed))
        return loaded

    def timestamps(self) -> list[int]:
        return sorted(self._sets)

    def current(self) -> tuple[StreamId, ...]:
        return self._sets[max(self._sets)]

    def set_at(self, ts_us: int) -> tuple[StreamId, ...]:
        """``get_tablet_stream_set``: the newest set whose timestamp is at or before ``ts_us``."""
        timestamps = self.timestamps()
        index = bisect.bisect_right(timestamps, ts_us) - 1
        if index < 0:
            raise WriteRejectedError(f"no CDC stream set operates at {ts_us}")
        return self._sets[timestamps[index]]

    def stream_of(self, ts_us: int, token: int) -> StreamId:
        """``get_stream(streams, tok)`` (``cdc/metadata.cc`` lines 56-69): the first stream whose
        token is at or past ``token`` (the last tablet ends at the ring's last token)."""
        streams = self.set_at(ts_us)
        index = bisect.bisect_left([s.token for s in streams], token)
        if index == len(streams):
            raise StandinSetupError(f"no stream of the set at {ts_us} covers token {token}")
        return streams[index]

    def resize(self, timestamp_us: int, streams: Iterable[StreamId]) -> tuple[list[StreamId], list[StreamId]]:
        """A new set from ``timestamp_us``; returns (closed, opened) as the history records them."""
        if timestamp_us <= max(self._sets):
            raise StandinSetupError(f"stream set change at {timestamp_us} is not after {max(self._sets)}")
        new = _by_token(streams)
        diff = stream_diff(self.current(), new)
        self._sets[timestamp_us] = new
        return diff

    def new_base_for_gc(self, now_us: int, ttl_s: int) -> int | None:
        """``get_new_base_for_gc``: the newest set whose successor began at or before ``now -
        ttl`` (every older set closed more than the TTL ago); None when nothing is collected."""
        bound = now_us - ttl_s * 1_000_000
        timestamps = self.timestamps()
        base = 0
        while base + 1 < len(timestamps) and timestamps[base + 1] <= bound:
            base += 1
        return timestamps[base] if base > 0 else None

    def virtual_rows(self) -> Iterator[tuple[int, int, StreamId]]:
        """``system.cdc_streams``'s rows ``(timestamp_us, stream_state, stream_id)`` in clustering
        order: per timestamp the current set, then the closed and the opened streams."""
        previous: tuple[StreamId, ...] | None = None
        for timestamp in self.timestamps():
            streams = self._sets[timestamp]
            closed, opened = ([], list(streams)) if previous is None else stream_diff(previous, streams)
            for state, listed in ((CURRENT, streams), (CLOSED, closed), (OPENED, opened)):
                for stream in sorted(listed, key=lambda s: s.raw):
                    yield timestamp, state, stream
            previous = streams
