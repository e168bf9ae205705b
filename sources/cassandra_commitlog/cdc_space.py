"""How full a node's cdc_raw is against its ``cdc_total_space``, and how soon it fills.

Cassandra counts the commit-log segments in cdc_raw against ``cdc_total_space``; once they reach
it, a new segment may not take CDC writes: with ``cdc_block_writes: true`` (the default) the node
refuses writes to CDC tables, with ``false`` it deletes the oldest unread segments, and their
changes are lost to every reader (``CommitLogSegmentManagerCDC`` in Cassandra 4.0+). The source
deletes what it has read and checkpointed; what it has not read fills the directory at the rate
the node writes CDC data. :class:`CdcRawGrowth` measures that rate from the segments' ``_cdc.idx``
offsets (each says how many bytes of its segment Cassandra has synced) and gives the time left.
The offsets move at each commit-log sync (``commitlog_sync_period``, 10 s by default), so the
rate is given only once the samples span three sync periods.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cdcflow.contract import DataLossHeadroom
from cdcflow.sources.cassandra_commitlog.cdc_index import index_path, read_cdc_index
from cdcflow.sources.cassandra_commitlog.segment import parse_segment_name

__all__ = [
    "CdcRawGrowth",
    "CdcRawWatch",
    "CdcSpaceSettings",
    "cdc_raw_bytes",
    "parse_data_storage",
    "read_cdc_space_settings",
]

_DATA_STORAGE = re.compile(r"^\s*(\d+)\s*(B|KiB|MiB|GiB)?\s*$")
_DATA_STORAGE_UNITS = {None: 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_DURATION_UNITS_S = {None: 0.001, "ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}  # a bare number is ms
_DEFAULT_SYNC_PERIOD_S = 10.0  # cassandra.yaml's commitlog_sync_period
# The write rate is the growth of synced bytes over about this long (a few minutes: one burst
# does not make an alarm, a sustained rate does).
_RATE_WINDOW_S = 300.0
_SYNC_PERIODS_PER_RATE = 3
# While the stream waits for a snapshot: how often cdc_raw's size is measured, and from which share
# of cdc_total_space on it is worth a warning (then at every further tenth).
_CDC_RAW_CHECK_S = 10.0
_CDC_RAW_WARN_FROM = 0.5


def parse_data_storage(text: str) -> int | None:
    """``1024MiB`` (Cassandra's data-storage setting, as ``system_views.settings`` shows it) in bytes."""
    size = _DATA_STORAGE.match(text)
    return None if size is None else int(size.group(1)) * _DATA_STORAGE_UNITS[size.group(2)]


def parse_duration_s(text: str) -> float | None:
    """``1000ms``, ``10s`` (Cassandra's duration settings) in seconds."""
    duration = _DURATION.match(text)
    return None if duration is None else float(duration.group(1)) * _DURATION_UNITS_S[duration.group(2)]


@dataclass(frozen=True)
class CdcSpaceSettings:
    """The node's CDC settings (``system_views.settings``, Cassandra 4.1+); None: not readable."""

    cdc_enabled: bool | None
    cdc_total_space: int | None  # bytes
    cdc_block_writes: bool | None
    cdc_raw_directory: str | None
    commitlog_sync_period_s: float | None = None


def read_cdc_space_settings(session: Any, profile: object) -> CdcSpaceSettings:
    """The local node's CDC settings (``profile`` sends to that node). Raises the driver's error
    where the table cannot be read (before Cassandra 4.1, or a role without access to
    ``system_views``)."""
    found: dict[str, str] = {}
    names = ("cdc_enabled", "cdc_total_space", "cdc_block_writes", "cdc_raw_directory", "commitlog_sync_period")
    for name in names:
        rows = session.execute(
            "SELECT value FROM system_views.settings WHERE name = %s", (name,), execution_profile=profile
        )
        for row in rows:
            found[name] = str(row[0])

    def flag(name: str) -> bool | None:
        return found[name].lower() == "true" if name in found else None

    total, period = found.get("cdc_total_space"), found.get("commitlog_sync_period")
    return CdcSpaceSettings(
        cdc_enabled=flag("cdc_enabled"),
        cdc_total_space=parse_data_storage(total) if total is not None else None,
        cdc_block_writes=flag("cdc_block_writes"),
        cdc_raw_directory=found.get("cdc_raw_directory"),
        commitlog_sync_period_s=parse_duration_s(period) if period is not None else None,
    )


def cdc_raw_bytes(cdc_raw: Path) -> int:
    """What the segments in cdc_raw take on disk, as Cassandra counts them against cdc_total_space."""
    used = 0
    for path in cdc_raw.glob("CommitLog-*.log"):
        try:
            used += path.stat().st_size
        except FileNotFoundError:
            continue  # retired meanwhile
    return used


class CdcRawGrowth:
    """cdc_raw's use and the node's CDC write rate, from samples of its segments.

    A sample adds each segment's newly synced bytes (its ``_cdc.idx`` offset since the last
    sample; a segment first seen after the first sample counts whole) to a running total; the
    rate is that total's growth over the samples of the last few minutes. A segment the source
    deletes between two samples is told with its last offset (:meth:`retired`), or what the node
    wrote into it after the last sample would go uncounted while the pipeline keeps up.
    """

    def __init__(self, cdc_raw: Path, sync_period_s: float | None = None) -> None:
        self.cdc_raw = cdc_raw
        self.min_span_s = _SYNC_PERIODS_PER_RATE * (sync_period_s or _DEFAULT_SYNC_PERIOD_S)
        self.used_bytes = 0
        self._synced: dict[int, int] = {}  # segment id -> its synced offset at the last sample
        self._written = 0
        self._samples: deque[tuple[float, int]] = deque()  # (time, bytes written so far)
        self._retired: dict[int, int] = {}  # segment id -> its offset when deleted, since the last sample

    def retired(self, segment_id: int, offset: int) -> None:
        """The source deleted (or moved) segment ``segment_id``, synced to ``offset``."""
        self._retired[segment_id] = offset

    def sample(self, now: float) -> None:
        first = not self._samples
        synced: dict[int, int] = {}
        gone, self._retired = self._retired, {}
        used = 0
        for path in self.cdc_raw.glob("CommitLog-*.log"):
            name = parse_segment_name(path.name)
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                continue
            used += size
            if name is None:
                continue
            index = read_cdc_index(index_path(path))
            offset = index.offset if index is not None else self._synced.get(name[1], 0)
            before = self._synced.get(name[1])
            if before is not None:
                self._written += max(0, offset - before)
            elif not first:
                self._written += offset
            synced[name[1]] = offset
        for segment_id, offset in gone.items():
            if segment_id not in synced and not first:
                self._written += max(0, offset - self._synced.get(segment_id, 0))
        self._synced = synced
        self.used_bytes = used
        self._samples.append((now, self._written))
        while len(self._samples) > 2 and now - self._samples[1][0] >= _RATE_WINDOW_S:
            self._samples.popleft()

    def write_rate(self) -> float | None:
        """Bytes a second the node wrote into cdc_raw over the last few minutes; None until the
        samples span three commit-log sync periods."""
        if not self._samples:
            return None
        (start, written_then), (end, written_now) = self._samples[0], self._samples[-1]
        if end - start < self.min_span_s:
            return None
        return (written_now - written_then) / (end - start)

    def seconds_to_full(self, total_space: int) -> float | None:
        """How long until cdc_raw reaches ``total_space`` at the current rate (``inf``: nothing is
        written); None while the rate is unknown."""
        rate = self.write_rate()
        if rate is None:
            return None
        room = max(0, total_space - self.used_bytes)
        return room / rate if rate > 0 else math.inf


class CdcRawWatch:
    """One node's cdc_raw against its ``cdc_total_space``: the data-loss headroom, and warnings while
    the stream waits for a snapshot (and nothing of cdc_raw is deleted)."""

    def __init__(self, cdc_raw: Path, logger: logging.Logger) -> None:
        self.cdc_raw = cdc_raw
        self.settings: CdcSpaceSettings | None = None  # the node's, read at open
        self.growth = CdcRawGrowth(cdc_raw)
        self._logger = logger
        self._checked_at = float("-inf")
        self._warned_share = 0.0

    def read_settings(self, session: Any, profile: object, waits_for_snapshot: bool) -> None:
        """The node's ``cdc_total_space`` and ``cdc_block_writes`` (Cassandra 4.1+ settings table),
        for the data-loss headroom and the warnings while the stream waits; left unknown where the
        table is not there. ``waits_for_snapshot``: ``snapshot: initial``."""
        try:
            self.settings = read_cdc_space_settings(session, profile)
        except Exception as exc:  # an older node, or no access to system_views
            self._logger.info("cannot read the node's CDC settings (%s): cdc_raw is not watched", exc)
            return
        # The headroom's write rate: sampled from now on, over three of the node's sync periods.
        self.growth = CdcRawGrowth(self.cdc_raw, self.settings.commitlog_sync_period_s)
        self.growth.sample(time.monotonic())
        if waits_for_snapshot and self.settings.cdc_block_writes is False:
            self._logger.warning(
                "this node has cdc_block_writes: false: when cdc_raw reaches cdc_total_space while the stream waits "
                "for the snapshot, Cassandra deletes the oldest segments and the pipeline stops at the hand-off "
                "(SnapshotOutlivedLogError)"
            )

    @property
    def sync_period_s(self) -> float | None:
        return self.settings.commitlog_sync_period_s if self.settings is not None else None

    def warn_while_waiting(self) -> None:
        """While the stream waits for the snapshot: say when cdc_raw fills towards cdc_total_space."""
        limit = self.settings.cdc_total_space if self.settings is not None else None
        now = time.monotonic()
        if not limit or now - self._checked_at < _CDC_RAW_CHECK_S:
            return
        self._checked_at = now
        used = cdc_raw_bytes(self.cdc_raw)
        share = used / limit
        if share >= max(_CDC_RAW_WARN_FROM, self._warned_share + 0.1):
            self._warned_share = share
            outcome = (
                "Cassandra then deletes the oldest segments and this pipeline stops at the hand-off"
                if self.settings is not None and self.settings.cdc_block_writes is False
                else "Cassandra then refuses writes to CDC tables until the stream consumes segments"
            )
            self._logger.warning(
                "cdc_raw holds %d MiB, %.0f%% of cdc_total_space (%d MiB), while the stream waits for the snapshot; "
                "at 100%% %s",
                used >> 20,
                share * 100,
                limit >> 20,
                outcome,
            )

    def headroom(self) -> DataLossHeadroom | None:
        """How long until cdc_raw reaches cdc_total_space at the node's current CDC write rate, were
        nothing read and deleted meanwhile; None while unknown."""
        total = self.settings.cdc_total_space if self.settings is not None else None
        if not total:
            return None
        self.growth.sample(time.monotonic())
        seconds = self.growth.seconds_to_full(total)
        rate = self.growth.write_rate()
        if seconds is None or rate is None:
            return None  # the rate needs a second sample
        detail = (
            f"cdc_raw holds {self.growth.used_bytes >> 20} of {total >> 20} MiB (cdc_total_space), "
            f"the node writes {rate / 1024:.0f} KiB/s of CDC data"
        )
        return DataLossHeadroom(seconds, "cdc_raw_full", detail)
