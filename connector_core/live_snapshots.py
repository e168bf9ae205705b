"""Live snapshots: a table's rows re-read while its stream keeps flowing, on request.

A source that can do it (the CQL sources: Debezium's incremental snapshot, the DBLog algorithm;
design in docs/snapshots.md) implements :class:`LiveSnapshotSource`. The runtime never learns how:
it hands a :class:`SnapshotRequest` to the owner of each partition, which asks the source for the
partition's next position with the request queued in it (:meth:`LiveSnapshotSource.with_snapshot_request`).
From then on the request is part of the partition's offset, so it is committed with the partition's
checkpoint, moves with the partition to another worker, and resumes after a crash; the source's
``latest_offset``/``read`` do the rest, in the delivery loop like any other range.

Who hands the request over:

* a worker group: ``POST /pipelines/{name}/snapshots`` (``cdcflow snapshot NAME TABLE --url``)
  goes through the group's control topic to every member; each puts it into its partitions,
  commits, and answers (:mod:`cdcflow.group`);
* a stopped pipeline: ``cdcflow snapshot FILE TABLE`` writes it into the committed offsets
  (:meth:`cdcflow.offsets.PipelineOffsets.request_snapshot`); the next run takes it, streaming.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from cdcflow.contract import Offset, Partition

__all__ = ["LiveSnapshotProgress", "LiveSnapshotSource", "SnapshotRequest"]


def _now_us() -> int:
    return time.time_ns() // 1000


@dataclass(frozen=True)
class SnapshotRequest:
    """Re-read ``table`` (``keyspace.table``), only the rows matching ``where`` when given (a CQL
    condition, as after ``WHERE``), while streaming. ``id`` tells requests apart in offsets."""

    table: str
    where: str | None = None
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    requested_at_us: int = field(default_factory=_now_us)

    def __post_init__(self) -> None:
        if self.where is not None:  # blank: no condition
            object.__setattr__(self, "where", self.where.strip() or None)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "table": self.table, "where": self.where, "at": self.requested_at_us}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SnapshotRequest:
        where = data.get("where")
        return cls(str(data["table"]), None if where is None else str(where), str(data["id"]), int(data.get("at", 0)))


@dataclass(frozen=True)
class LiveSnapshotProgress:
    """One request queued in a partition: how much of the partition's share of the table is
    delivered (``share_done``, 0 to 1), its rows delivered so far, and whether it is the one being
    read (``current``) or waits behind it."""

    request: str
    table: str
    where: str | None
    share_done: float
    rows: int
    current: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "request": self.request,
            "table": self.table,
            "where": self.where,
            "done": round(self.share_done, 4),
            "rows": self.rows,
            "state": "READING" if self.current else "QUEUED",
        }


@runtime_checkable
class LiveSnapshotSource(Protocol):
    """A source that takes live snapshots. Every method may be called from the delivery thread
    only, except :meth:`check_snapshot_request`, which a control plane calls from its own."""

    def check_snapshot_request(self, request: SnapshotRequest) -> None:
        """Raise a :class:`~cdcflow.errors.SnapshotRequestError` naming what is wrong (a table the
        source does not follow, a ``where`` the database refuses) before anything is queued. May
        ask the database (the source is open)."""

    def with_snapshot_request(self, partition: Partition, offset: Offset, request: SnapshotRequest) -> Offset | None:
        """``offset`` with ``request`` queued, for a partition whose changes carry rows of the
        request's table (the new offset is committed as the partition's checkpoint); None for a
        partition that carries none of them (another table's stream, a snapshot slice, a finished
        partition). A request already queued there (same id) leaves the offset as it is."""

    def live_snapshot_progress(self, partition: Partition, offset: Offset) -> Sequence[LiveSnapshotProgress]:
        """The requests queued in ``offset``, the one being read first (for status and metrics)."""
