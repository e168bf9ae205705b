"""CDC streams of tablet keyspaces (seed 004, "Streams description tables for tablets").

Each CDC table of a tablet keyspace has its own stream set, one stream per tablet of its log
table; the stream's token is the tablet's last token. When tablets split or merge, a new stream
set starts operating at a timestamp: the streams that end are *closed* there, the new ones
*opened*. ``system.cdc_streams`` lists, for every timestamp, the current set (``stream_state``
0) and the difference from the previous one (1 closed, 2 opened), so the set operating at any
timestamp can be rebuilt, and each stream's lifetime ``[opened, closed)`` bounds where its rows
are read: a write close to a change may be logged in both an old and a new stream.
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Iterable
from dataclasses import dataclass, field

from cdcflow.sources.scylla_cdc.exceptions import GenerationMetadataError
from cdcflow.sources.scylla_cdc.stream_id import StreamId

__all__ = ["StreamLifetime", "StreamState", "TabletStreamHistory"]


class StreamState(enum.IntEnum):
    """``cdc::stream_state``, the ``stream_state`` column."""

    CURRENT = 0
    CLOSED = 1
    OPENED = 2


@dataclass(frozen=True, slots=True)
class StreamLifetime:
    """A stream and the interval ``[opened_us, closed_us)`` its rows are read in."""

    stream: StreamId
    opened_us: int
    closed_us: int | None


def _by_token(streams: Iterable[StreamId]) -> tuple[StreamId, ...]:
    return tuple(sorted(set(streams), key=lambda s: (s.token, s.raw)))


@dataclass
class TabletStreamHistory:
    """One table's stream sets by timestamp (µs), rebuilt from ``system.cdc_streams`` rows."""

    _timestamps: list[int] = field(default_factory=list)
    _sets: dict[int, tuple[StreamId, ...]] = field(default_factory=dict)
    _opened: dict[StreamId, int] = field(default_factory=dict)
    _closed: dict[StreamId, int] = field(default_factory=dict)

    @classmethod
    def from_rows(cls, rows: Iterable[tuple[int, int, StreamId]]) -> TabletStreamHistory:
        """From ``(timestamp_us, stream_state, stream_id)`` rows in any order."""
        current: dict[int, set[StreamId]] = {}
        opened: dict[int, set[StreamId]] = {}
        closed: dict[int, set[StreamId]] = {}
        for timestamp, state, stream in rows:
            try:
                kind = StreamState(state)
            except ValueError as exc:
                raise GenerationMetadataError(f"unknown stream_state {state} at {timestamp}") from exc
            target = {StreamState.CURRENT: current, StreamState.OPENED: opened, StreamState.CLOSED: closed}[kind]
            target.setdefault(timestamp, set()).add(stream)
        history = cls()
        for timestamp in sorted(set(current) | set(opened) | set(closed)):
            if timestamp not in current:
                raise GenerationMetadataError(f"stream set at {timestamp} lists changes but no current streams")
            history._add(timestamp, current[timestamp], closed.get(timestamp, set()))
            for stream in opened.get(timestamp, set()):
                history._opened.setdefault(stream, timestamp)
        return history

    def _add(self, timestamp_us: int, current: set[StreamId], closed: set[StreamId]) -> None:
        bisect.insort(self._timestamps, timestamp_us)
        self._sets[timestamp_us] = _by_token(current)
        for stream in current:
            self._opened.setdefault(stream, timestamp_us)
        for stream in closed:
            self._closed.setdefault(stream, timestamp_us)

    def timestamps(self) -> list[int]:
        return list(self._timestamps)

    def streams_at(self, ts_us: int) -> tuple[StreamId, ...]:
        """The stream set operating at ``ts_us`` (empty before the first timestamp)."""
        index = bisect.bisect_right(self._timestamps, ts_us) - 1
        return self._sets[self._timestamps[index]] if index >= 0 else ()

    def changes_at(self, timestamp_us: int) -> tuple[tuple[StreamId, ...], tuple[StreamId, ...]]:
        """(closed, opened) at a timestamp of the history, as ``system.cdc_streams`` lists them."""
        closed = _by_token(s for s, t in self._closed.items() if t == timestamp_us)
        opened = _by_token(s for s, t in self._opened.items() if t == timestamp_us)
        return closed, opened

    def lifetimes(self) -> list[StreamLifetime]:
        """Every stream with its ``[opened, closed)`` interval, by opening time then token."""
        return sorted(
            (StreamLifetime(s, opened, self._closed.get(s)) for s, opened in self._opened.items()),
            key=lambda life: (life.opened_us, life.stream.token, life.stream.raw),
        )
