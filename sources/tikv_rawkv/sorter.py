"""Holds a partition's changes until resolved-ts passes them, and hands them out in timestamp order.

The change feed pushes rows region by region, each region in its own timestamp order; the worker
loop pulls ranges (start, end] of the partition and needs the same records every time it reads
one range. The sorter bridges the two: it keeps every row above the partition's committed
checkpoint, so a range can be read again after a crash of the sink or a retry, and discards rows
only once a checkpoint covering them is durable (:meth:`PartitionSorter.discard_through`).

Memory is bounded: beyond ``memory_limit_bytes`` the rows in memory are sorted and written to a
spill file as one sorted run; a read merges the runs and what is still in memory. Each run keeps
the sort timestamps of its rows in memory (8 bytes a row) to find ranges without reading the file.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import os
import pickle
import tempfile
import threading
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from cdcflow.chunks import chunked

__all__ = ["Item", "PartitionSorter"]

PUT, DELETE, REJECTED = 0, 1, 2
_CHUNK = 4096
_OVERHEAD = 120  # bytes a held row costs besides its key and value (tuple, ints)


class Item(NamedTuple):
    """One row of the feed. ``sort_ts`` is where it sits in the partition's order: its own
    timestamp, or, for a row that arrived after its range was handed out, the next range."""

    sort_ts: int
    key: bytes  # the user key; for a rejected row, the raw key as the feed sent it
    ts: int
    kind: int  # PUT, DELETE or REJECTED
    value: bytes
    expire_ts: int  # seconds since the epoch; 0: none
    reason: str  # why a REJECTED row was rejected


@dataclass
class _Run:
    path: Path
    sort_ts: array[int]
    chunk_offsets: list[int] = field(default_factory=list)

    @property
    def max_ts(self) -> int:
        return self.sort_ts[-1]


class PartitionSorter:
    """Rows above ``base_ts``, thread-safe: the feed adds, the worker loop reads and discards."""

    def __init__(self, base_ts: int, memory_limit_bytes: int, spill_dir: Path | None = None) -> None:
        self.base_ts = base_ts
        self.released = base_ts
        self.late_rows = 0
        self._limit = memory_limit_bytes
        self._spill_dir = spill_dir
        self._lock = threading.Lock()
        self._memory: list[Item] = []
        self._memory_bytes = 0
        self._sorted = True
        self._runs: list[_Run] = []

    # --- the feed side -----------------------------------------------------------------------

    def add(self, items: list[Item]) -> None:
        with self._lock:
            released = self.released
            for arrived in items:
                item = arrived
                if item.sort_ts <= released:
                    # Resolved-ts already passed it (TiKV-CDC's leader-transfer hazard, beyond the
                    # safety interval): it goes into the next range rather than nowhere.
                    item = item._replace(sort_ts=released + 1)
                    self.late_rows += 1
                self._memory.append(item)
                self._memory_bytes += len(item.key) + len(item.value) + _OVERHEAD
            self._sorted = False
            if self._memory_bytes > self._limit:
                self._spill()

    # --- the loop side -----------------------------------------------------------------------

    def end_for(self, start_ts: int, safe_ts: int, max_records: int | None) -> int:
        """How far to read from ``start_ts``: ``safe_ts``, or earlier so that about ``max_records``
        rows are in (start, end]; every row with the returned timestamp is included."""
        if safe_ts <= start_ts:
            return start_ts
        with self._lock:
            self._sort_memory()
            slices = [self._ts_slice(self._memory_ts(), start_ts, safe_ts)]
            slices += [self._ts_slice(run.sort_ts, start_ts, safe_ts) for run in self._runs]
            end = safe_ts
            if max_records is not None and sum(len(s) for s in slices) > max_records:
                merged = heapq.merge(*slices)
                end = next(itertools.islice(merged, max_records - 1, None))
            self.released = max(self.released, end)
            return end

    def release_through(self, ts: int) -> None:
        """Marks (..., ts] as handed out: a row arriving at or below ``ts`` from now on is late."""
        with self._lock:
            self.released = max(self.released, ts)

    def read(self, start_ts: int, end_ts: int) -> list[Item]:
        """The rows in (start_ts, end_ts] by (sort_ts, key), each row once."""
        with self._lock:
            self._sort_memory()
            memory = self._memory
            low = bisect.bisect_right(memory, start_ts, key=_sort_ts)
            high = bisect.bisect_right(memory, end_ts, key=_sort_ts)
            sources: list[Iterator[Item]] = [iter(memory[low:high])]
            sources += [self._read_run(run, start_ts, end_ts) for run in self._runs]
            out: list[Item] = []
            previous: tuple[int, bytes, int, int] | None = None
            for item in heapq.merge(*sources):
                identity = (item.sort_ts, item.key, item.ts, item.kind)
                if identity != previous:  # a region resubscribed from its resolved-ts sends rows again
                    out.append(item)
                    previous = identity
            return out

    def discard_through(self, ts: int) -> None:
        """Forgets rows at or below ``ts``: a checkpoint covering them is durable."""
        with self._lock:
            self._sort_memory()
            cut = bisect.bisect_right(self._memory, ts, key=_sort_ts)
            if cut:
                dropped = self._memory[:cut]
                self._memory_bytes -= sum(len(i.key) + len(i.value) + _OVERHEAD for i in dropped)
                del self._memory[:cut]
            keep = []
            for run in self._runs:
                if run.max_ts <= ts:
                    run.path.unlink(missing_ok=True)
                else:
                    keep.append(run)
            self._runs = keep
            self.base_ts = max(self.base_ts, ts)

    @property
    def held_rows(self) -> int:
        with self._lock:
            return len(self._memory) + sum(len(run.sort_ts) for run in self._runs)

    @property
    def spilled_runs(self) -> int:
        return len(self._runs)

    def close(self) -> None:
        with self._lock:
            for run in self._runs:
                run.path.unlink(missing_ok=True)
            self._runs = []
            self._memory = []
            self._memory_bytes = 0

    # --- internals -----------------------------------------------------------------------------

    def _sort_memory(self) -> None:
        if not self._sorted:
            self._memory.sort()
            self._sorted = True

    def _memory_ts(self) -> list[int]:
        return [item.sort_ts for item in self._memory]

    @staticmethod
    def _ts_slice(values: list[int] | array[int], start_ts: int, end_ts: int) -> list[int] | array[int]:
        return values[bisect.bisect_right(values, start_ts) : bisect.bisect_right(values, end_ts)]

    def _spill(self) -> None:
        self._sort_memory()
        fd, name = tempfile.mkstemp(prefix="tikv-sorter-", suffix=".run", dir=self._spill_dir)
        run = _Run(Path(name), array("Q", (item.sort_ts for item in self._memory)))
        with os.fdopen(fd, "wb") as file:
            for chunk in chunked(self._memory, _CHUNK):
                run.chunk_offsets.append(file.tell())
                pickle.dump(chunk, file, protocol=pickle.HIGHEST_PROTOCOL)
        self._runs.append(run)
        self._memory = []
        self._memory_bytes = 0

    def _read_run(self, run: _Run, start_ts: int, end_ts: int) -> Iterator[Item]:
        low = bisect.bisect_right(run.sort_ts, start_ts)
        high = bisect.bisect_right(run.sort_ts, end_ts)
        if low >= high:
            return iter(())
        items: list[Item] = []
        with run.path.open("rb") as file:
            for chunk in range(low // _CHUNK, (high - 1) // _CHUNK + 1):
                file.seek(run.chunk_offsets[chunk])
                rows: list[Item] = pickle.load(file)
                first = chunk * _CHUNK
                items.extend(rows[max(0, low - first) : max(0, high - first)])
        return iter(items)


def _sort_ts(item: Item) -> int:
    return item.sort_ts
