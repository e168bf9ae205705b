"""One place for the succession rule, which both engines apply before asking a source for news.

A partition that replaces others (``Partition.succeeds``: a ScyllaDB generation's stream group,
a tablet stream set after a split or merge) holds a key's changes from ``from_us`` on, and its
predecessors held them before. Read side by side, the successor's newer changes of a key could
reach the sink before the predecessor's older ones. So a successor is not read past its start
until each predecessor is *complete up to* ``from_us``:

* it is finished at its committed offset (:class:`~cdcflow.capabilities.FinitePartitions`: read
  to its end, or expired), or
  its watermark there is at or past ``from_us`` (a predecessor whose other keys go on, as a
  stream set keeping some of its streams), or
* the source no longer lists it (a partition disappears only once read to its end or expired).

Committed offsets, not positions: the predecessor may belong to another worker process, another
machine of a group, or a Spark batch not yet completed, and what was read but not committed can
be read again after a crash, after the successor's changes were delivered. The worker engine reads
its checkpoint store (at most once per ``refresh_s`` while a gate is closed; this process's own
commits count at once), the Spark engine the offsets its micro-batch starts from (those of the
last completed batch). A predecessor with no committed offset yet is waited for: its owner commits
its start at its first checkpoint. An open gate stays open for the run (committed offsets only move
forward), and a waiting partition is, to the engine, a partition with nothing new yet.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from cdcflow.capabilities import is_finished, watermark_of
from cdcflow.contract import Offset, Partition, Source

__all__ = ["SuccessionGate"]

REFRESH_S = 1.0
"""How often a closed gate reads the committed offsets again (a checkpoint-store read)."""

log = logging.getLogger("cdcflow.succession")


class SuccessionGate:
    """Whether a partition may be read past its start, from the source's listing and the
    pipeline's committed offsets (``committed_offsets``, read anew at most every ``refresh_s``)."""

    def __init__(
        self,
        source: Source[Any],
        committed_offsets: Callable[[], Mapping[str, Offset]],
        refresh_s: float = REFRESH_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._source = source
        self._committed_offsets = committed_offsets
        self._refresh_s = refresh_s
        self._clock = clock
        self._listed: dict[str, Partition] | None = None  # None until the engine lists partitions
        self._view: dict[str, Offset] = {}
        self._view_read_at = float("-inf")
        self._open: set[str] = set()
        self._waiting: set[str] = set()

    def listed(self, partitions: Iterable[Partition]) -> None:
        """The source's partitions now (all of them, not only this process's)."""
        self._listed = {p.id: p for p in partitions}

    def note_committed(self, offsets: Mapping[str, Offset]) -> None:
        """Offsets this process just committed: they count at once."""
        self._view.update(offsets)

    def may_read(self, partition: Partition) -> bool:
        """True unless ``partition`` replaces partitions not yet complete up to where it starts."""
        if partition.succeeds is None or partition.id in self._open:
            return True
        waiting = self.waiting_on(partition)
        if waiting and self._clock() - self._view_read_at >= self._refresh_s:
            self._view = dict(self._committed_offsets())
            self._view_read_at = self._clock()
            waiting = self.waiting_on(partition)
        if waiting:
            if partition.id not in self._waiting:
                self._waiting.add(partition.id)
                log.debug("partition %s waits for the partitions it replaces: %s", partition.id, waiting)
            return False
        self._open.add(partition.id)
        if partition.id in self._waiting:
            self._waiting.discard(partition.id)
            log.debug("partition %s: the partitions it replaces are complete; reading it", partition.id)
        return True

    def waiting_on(self, partition: Partition) -> list[str]:
        """The predecessors of ``partition`` not complete up to its start, as the view has them."""
        succession = partition.succeeds
        if succession is None:
            return []
        return [pid for pid in succession.predecessors if not self._complete_up_to(pid, succession.from_us)]

    def _complete_up_to(self, partition_id: str, from_us: int) -> bool:
        if self._listed is None:
            return False
        predecessor = self._listed.get(partition_id)
        if predecessor is None:
            return True  # gone from the source: read to its end or expired
        offset = self._view.get(partition_id)
        if offset is None:
            return False  # its owner has not committed its start yet
        if is_finished(self._source, predecessor, offset):
            return True
        watermark = watermark_of(self._source, predecessor, offset)
        return watermark is not None and watermark >= from_us
