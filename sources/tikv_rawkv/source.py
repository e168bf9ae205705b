"""The ``tikv_rawkv`` source: changes of a TiKV RawKV (API V2) key range, in resolved-ts order.

How the push-based change feed meets the pull-based loop
--------------------------------------------------------
The EventFeed pushes rows region by region as TiKV applies them, plus resolved-ts: "nothing at
or below this timestamp will still come for this region". The worker loop pulls: it asks
``latest_offset`` how far a partition is complete and reads (start, end] ranges that must be the
same records every time they are read. So, per partition (a sub-range of keys):

* a :class:`~cdcflow.sources.tikv_rawkv.sorter.PartitionSorter` holds every row above the committed
  checkpoint (in memory, spilling sorted runs to disk beyond ``sorter_memory_mb``);
* ``latest_offset`` is ``{"ts": T}`` with T = the partition's resolved-ts less
  ``safety_interval_ms`` (the minimum over its region subscriptions, each resolved-ts taken less
  the interval as it arrives, and over spans waiting to be subscribed: again, or until PD's
  regions cover them; see :mod:`~cdcflow.sources.tikv_rawkv.feed`), capped so that about
  ``max_records`` rows lie in the range;
* ``read(start, end)`` returns the held rows with start < ts <= end, sorted by (ts, key), each row
  once (a span subscribed again sends rows above its resolved-ts twice);
* ``commit`` (after the checkpoint is durable) lets the sorter forget rows at or below it and
  moves the PD service GC safepoint to checkpoint - 1.

The first ``latest_offset`` of a partition subscribes its regions from the offset it is given
(the checkpoint, or the partition map's start timestamp), after checking that the cluster's GC
safepoint is not above it; if the loop later rewinds below what the sorter holds (an offsets
reset), the partition is subscribed again from there.

Reading where the partition is not followed
-------------------------------------------
A ``read(start, end)`` in a process that holds nothing at ``start`` for the partition (a Spark
batch re-planned after a restart, a task in another process) follows the partition from
``start`` itself, "for reads only", and waits, at most ``read_wait_s``, until its own resolved-ts
less the safety interval reaches ``end``; then it answers from what it holds, as the process that
planned the range would. Every read waits that way, so a process's own ``latest_offset`` ranges
pass at once. A partition followed for reads only keeps nothing at or below the last ``start``
it was asked for, is let go after ``_IDLE_READ_FOLLOW_S`` without a read, and never touches the
service GC safepoint: only a process that runs ``latest_offset`` and ``commit`` (the worker
loop, the Spark driver) keeps it, because only it knows which checkpoint is durable; a reader
that moved it could move it past an uncommitted range or back below another reader's.

Such a read is exact only for keys written once between ``start`` and its subscription: TiKV's
RawKV incremental scan sends the newest version of each key above the checkpoint, not every
version (``RawMvccIterator`` in tikv/tikv ``components/cdc/src/initializer.rs``; the stand-in
does the same). An overwritten key then shows its newest value, in the range of that value's
timestamp (eventual consistency, as after any resubscription or restart). This is why the source
sets ``read_where_planned``: the spark engine reads each range in its driver, where
``latest_offset`` has followed the partition all along, and ships the records with the task.

Events
------
A PUT is ``op = c`` (RawKV cannot tell an insert from an overwrite; every PUT is an upsert) with
``after = {key, value, expire_ts}``; an empty value is a value like any other (``b""``, a PUT,
never a delete: RawKV stores it); a DELETE is ``op = d`` with ``after = None``. ``key`` is
``{"key": <user key bytes>}`` without the ``r`` + keyspace prefix; ``expire_ts`` is the absolute
expiry in seconds since the epoch (None without TTL). ``source.position`` is ``{"ts", "key"}``,
``source.ts_us`` the write's timestamp (physical part) and ``source.extra["tikv_ts"]`` the full
TSO timestamp. Topics are ``<cluster>.ks<keyspace_id>.rawkv``. A row of the partition's span
that is not a RawKV change (an op type TiKV could not map from the value's meta flags, a
transactional log type) is yielded as :class:`Rejected` with its raw key
and value, for the dead-letter destination. Rows outside the span (the catch-up scan reads the
whole region: other partitions' and other keyspaces' keys) are dropped and counted
(``tikv_scan_row_outside_span``).

An upstream ``RawDeleteRange`` is not in the change stream: under API V2 TiKV removes every
version of the range physically, writes no delete markers, and its CDC passes on puts only
(tikv/tikv ``src/storage/mod.rs`` ``raw_delete_range``, ``components/cdc/src/delegate.rs``). The
keys stay in the downstream (TiKV, Kafka, Parquet), and writes to them above the checkpoint made
before the delete can vanish from a later catch-up scan as well. Deletes that must replicate use
``RawBatchDelete`` (delete markers, fed as ``op d``), or repeat the range delete downstream.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from cdcflow.config import ResolvedPath
from cdcflow.contract import DataLossHeadroom, Offset, Partition, PluginConfig, PluginContext, Rejected, Source
from cdcflow.errors import SourceUnavailableError
from cdcflow.events import ChangeEvent, Column, Op, Record, RowSchema, SourceInfo
from cdcflow.metrics import source_counter
from cdcflow.prerequisites import CheckResult, PrerequisiteScope
from cdcflow.record_errors import SOURCE_STAGE
from cdcflow.sources.tikv_client.codec import LOGICAL_BITS, KeyCodec, ts_to_us
from cdcflow.sources.tikv_client.exceptions import TiKVClientError
from cdcflow.sources.tikv_client.tls import TLSConfig, TLSFileError
from cdcflow.sources.tikv_rawkv import prerequisites
from cdcflow.sources.tikv_rawkv.exceptions import CheckpointBehindGCSafePointError, FeedRefusedError, RowRejectedError
from cdcflow.sources.tikv_rawkv.layout import PartitionLayout
from cdcflow.sources.tikv_rawkv.sorter import DELETE, PUT, Item, PartitionSorter

if TYPE_CHECKING:
    from cdcflow.sources.tikv_rawkv.feed import EventFeed

__all__ = ["TiKVRawKVSource", "TiKVRawKVSourceConfig", "decode_key_setting"]

log = logging.getLogger("cdcflow.sources.tikv_rawkv")


class TiKVRawKVSourceConfig(PluginConfig):
    pd_endpoints: list[str] = Field(min_length=1, description="PD addresses, host:port")
    cluster: str = Field(default="tikv", description="the cluster's name in events: topics are <cluster>.ks<id>.rawkv")
    keyspace_id: int = Field(default=0, ge=0, le=(1 << 24) - 1, description="the API V2 keyspace to follow")
    start_key: str = Field(default="", description="first user key of the range (key_encoding)")
    end_key: str = Field(default="", description="user key the range stops before; empty: the keyspace's end")
    key_encoding: Literal["utf-8", "hex"] = Field(default="utf-8", description="how start_key and end_key are written")
    partitions: int = Field(default=2, ge=1, description="sub-ranges, cut at region boundaries at the first start")
    partition_map: ResolvedPath | None = Field(
        default=None, description="where the partition map is kept; default state/<pipeline>.tikv-partitions.json"
    )
    start_ts: int | None = Field(
        default=None,
        ge=0,
        description="TSO timestamp to start from; default: PD's now less safety_interval_ms (a store stamps writes "
        "from timestamps it cached up to 3 s earlier)",
    )
    safety_interval_ms: int = Field(
        default=3000,
        ge=0,
        description="taken off every resolved-ts TiKV sends, for the watermark and for where a region is "
        "subscribed again: an old leader can resolve past the new leader's first writes (tikv/migration#193)",
    )
    max_initializing_regions_per_store: int = Field(
        default=40,
        ge=1,
        description="registrations in their catch-up scan at once per TiKV store; more wait their turn "
        "(TiKV-CDC's region-scan-limit)",
    )
    stuck_region_s: float = Field(
        default=60.0,
        gt=0,
        description="a region whose resolved-ts has not moved this long is subscribed again "
        "(metric tikv_stuck_region_reconnect)",
    )
    sorter_memory_mb: int = Field(default=256, ge=1, description="rows held in memory per partition before spilling")
    spill_dir: ResolvedPath | None = Field(default=None, description="where sorted runs spill; default a temp folder")
    gc_ttl_s: int = Field(default=86_400, ge=60, description="TTL of the PD service GC safepoint")
    gc_refresh_s: float = Field(default=60.0, gt=0, description="the service GC safepoint moves at most this often")
    request_timeout_s: float = Field(default=10.0, gt=0)
    tls: TLSConfig | None = Field(default=None, description="mutual TLS to PD and TiKV: {ca, cert, key} PEM files")
    read_wait_s: float = Field(
        default=60.0, gt=0, description="how long a read in a process that did not follow the partition waits for it"
    )


def decode_key_setting(text: str, encoding: str) -> bytes:
    return bytes.fromhex(text) if encoding == "hex" else text.encode()


_IDLE_READ_FOLLOW_S = 300.0  # a partition followed only for reads is let go after this long without one
_READ_POLL_S = 0.05


class _PartitionFeed:
    def __init__(self, sorter: PartitionSorter, region_start: bytes, region_end: bytes, reads_only: bool) -> None:
        self.sorter = sorter
        self.region_start = region_start
        self.region_end = region_end
        self.reads_only = reads_only  # followed to serve reads; latest_offset and commit run elsewhere
        self.read_at = time.monotonic()


class TiKVRawKVSource(Source[TiKVRawKVSourceConfig]):
    type_name = "tikv_rawkv"
    config_model = TiKVRawKVSourceConfig
    read_where_planned = True  # rows exist where the partition was followed; see the module docstring

    def __init__(self, config: TiKVRawKVSourceConfig, context: PluginContext) -> None:
        super().__init__(config, context)
        self.codec = KeyCodec(2, config.keyspace_id)
        self.start_key = decode_key_setting(config.start_key, config.key_encoding)
        self.end_key = decode_key_setting(config.end_key, config.key_encoding)
        # grpc is the cdcflow[tikv] extra: imported here so that the plugin registers without it.
        from cdcflow.sources.tikv_client.pd import PDClient

        self.pd = PDClient(config.pd_endpoints, config.request_timeout_s, config.tls)
        # Before per-partition service safepoints each worker kept one; released at the first refresh.
        self._legacy_service_id: str | None = f"cdcflow-{context.pipeline}-w{context.worker_id}"
        self.schema = RowSchema(
            f"{config.cluster}.ks{config.keyspace_id}.rawkv",
            (Column("key", "blob", optional=False),),
            (Column("key", "blob", optional=False), Column("value", "blob"), Column("expire_ts", "bigint")),
        )
        self._safety = config.safety_interval_ms << LOGICAL_BITS
        self._lock = threading.Lock()
        self._feeds: dict[str, _PartitionFeed] = {}
        self._committed: dict[str, int] = {}
        self._gc_refreshed_at = float("-inf")
        self._layout: PartitionLayout | None = None
        self._feed: EventFeed | None = None
        self._spill_dir: Path | None = None
        self._owns_spill_dir = False
        self._late = source_counter(context.pipeline, "tikv_late_row")
        self._rejected = source_counter(context.pipeline, "tikv_rejected_row")
        self._outside_span = source_counter(context.pipeline, "tikv_scan_row_outside_span")
        self._stuck_regions = source_counter(context.pipeline, "tikv_stuck_region_reconnect")

    # --- lifecycle -----------------------------------------------------------------------------

    def open(self) -> None:
        try:
            self.pd.connect()
            map_path = self.config.partition_map or (
                self.context.base_dir / "state" / f"{self.context.pipeline}.tikv-partitions.json"
            )
            self._layout = PartitionLayout.load_or_create(
                map_path,
                self.pd,
                self.codec,
                self.start_key,
                self.end_key,
                self.config.partitions,
                self._default_start_ts,
            )
        except TLSFileError:
            raise  # a setting to fix, not a cluster to wait for
        except TiKVClientError as exc:
            raise SourceUnavailableError(f"TiKV source {self.context.pipeline}: {exc}") from exc
        if self.config.spill_dir is not None:
            self.config.spill_dir.mkdir(parents=True, exist_ok=True)
            self._spill_dir = Path(tempfile.mkdtemp(prefix="tikv-sorter-", dir=self.config.spill_dir))
        else:
            self._spill_dir = Path(tempfile.mkdtemp(prefix="cdcflow-tikv-sorter-"))
        self._owns_spill_dir = True
        from cdcflow.sources.tikv_rawkv.feed import EventFeed

        self._feed = EventFeed(
            self.pd,
            self.codec,
            self._on_rows,
            on_rows_outside_span=self._outside_span.inc,
            safety_ts=self._safety,
            stuck_region_s=self.config.stuck_region_s,
            on_stuck_region=self._stuck_regions.inc,
            max_initializing_per_store=self.config.max_initializing_regions_per_store,
        )

    def _default_start_ts(self) -> int:
        """``start_ts``, else PD's now less the safety interval. Under API V2 a store stamps a
        write from its cache of PD timestamps, allocated up to causal-ts alloc-ahead-buffer (3 s)
        earlier (tikv/tikv components/causal_ts/src/tso.rs:70, popped oldest first): a write
        made just after PD answered "now" can carry a smaller timestamp, and starting at PD's
        now would skip it (TiKV-CDC's own tests start 10 s back for the same reason)."""
        if self.config.start_ts is not None:
            return self.config.start_ts
        return max(0, self.pd.get_ts() - self._safety)

    def close(self) -> None:
        if self._feed is not None:
            self._feed.close()
            self._feed = None
        for partition_feed in self._feeds.values():
            partition_feed.sorter.close()
        self._feeds.clear()
        self.pd.close()
        if self._owns_spill_dir and self._spill_dir is not None:
            shutil.rmtree(self._spill_dir, ignore_errors=True)

    def check_prerequisites(self, scope: PrerequisiteScope) -> Sequence[CheckResult]:
        if self._layout is not None:  # at start, just opened: one PD call
            return prerequisites.check_store_versions(self.pd)
        try:  # cdcflow doctor: PD and a store asked here, nothing written
            self.pd.connect()
            return [
                *prerequisites.check_store_versions(self.pd),
                prerequisites.check_api_version(self.pd, self.config, self.start_key or b"\0", scope.timeout_s),
                *prerequisites.check_gc(self.pd, self.config, scope.committed_offsets),
            ]
        except TiKVClientError as exc:
            raise SourceUnavailableError(f"TiKV source {self.context.pipeline}: {exc}") from exc
        finally:
            self.pd.close()

    def data_loss_headroom(self, partition: Partition, committed: Offset) -> DataLossHeadroom | None:
        """The GC TTL less the checkpoint's age: once the pipeline stops, its service GC safepoint
        (checkpoint - 1) lives ``gc_ttl_s``, after which GC may pass the checkpoint (TiCDC's rule,
        :mod:`.prerequisites`)."""
        age_s = max(0.0, time.time() - ts_to_us(int(committed["ts"])) / 1e6)
        detail = (
            f"the service GC safepoint lives gc_ttl_s = {self.config.gc_ttl_s} s, the checkpoint is {age_s:.0f} s old"
        )
        return DataLossHeadroom(self.config.gc_ttl_s - age_s, "gc_safepoint", detail)

    # --- the contract --------------------------------------------------------------------------

    def partitions(self) -> Sequence[Partition]:
        assert self._layout is not None, "open() first"
        return self._layout.partitions()

    def initial_offset(self, partition: Partition) -> Offset:
        assert self._layout is not None, "open() first"
        return {"ts": self._layout.start_ts}

    def latest_offset(self, partition: Partition, start: Offset, max_records: int | None) -> Offset:
        start_ts = int(start["ts"])
        partition_feed = self._following(partition, start_ts, reads_only=False)
        assert self._feed is not None
        self._raise_if_refused()
        resolved = self._feed.resolved_ts(partition.id)
        if resolved is None:
            return {"ts": start_ts}
        end = partition_feed.sorter.end_for(start_ts, resolved, max_records)
        return {"ts": end}

    def read(self, partition: Partition, start: Offset, end: Offset) -> Iterator[Record | Rejected]:
        start_ts, end_ts = int(start["ts"]), int(end["ts"])
        if end_ts <= start_ts:
            return
        partition_feed = self._following(partition, start_ts, reads_only=True)
        self._wait_until_complete(partition, start_ts, end_ts)
        late = partition_feed.sorter.late_rows
        if late:
            self._late.inc(late)
            partition_feed.sorter.late_rows = 0
            log.warning(
                "partition %s: %d rows arrived after resolved-ts passed them; sent in the next range",
                partition.id,
                late,
            )
        items = partition_feed.sorter.read(start_ts, end_ts)
        partition_feed.sorter.release_through(end_ts)
        if partition_feed.reads_only:
            # Nobody commits here: a read from start says that everything up to start is done with.
            partition_feed.sorter.discard_through(start_ts)
            partition_feed.read_at = time.monotonic()
        self._let_go_of_idle_read_follows()
        now_ms = int(time.time() * 1000)
        yield from (self._record(partition, item, now_ms) for item in items)

    def watermark(self, partition: Partition, offset: Offset) -> int | None:
        return ts_to_us(int(offset["ts"]))

    def caught_up(self, partition: Partition, offset: Offset) -> bool | None:
        # For lag (cdcflow.metrics): read up to resolved-ts minus the safety interval (TiKV keeps
        # resolved-ts near now; the feed takes the interval off) is all the partition may give now.
        resolved = self._feed.resolved_ts(partition.id) if self._feed is not None else None
        return resolved is not None and int(offset["ts"]) >= resolved

    def commit(self, offsets: Mapping[str, Offset]) -> None:
        for partition_id, offset in offsets.items():
            ts = int(offset["ts"])
            self._committed[partition_id] = ts
            partition_feed = self._feeds.get(partition_id)
            if partition_feed is not None:
                partition_feed.sorter.discard_through(ts)
        if time.monotonic() - self._gc_refreshed_at >= self.config.gc_refresh_s:
            self._refresh_gc_safe_point()

    # --- following partitions ------------------------------------------------------------------

    def _following(self, partition: Partition, start_ts: int, reads_only: bool) -> _PartitionFeed:
        """The partition's feed holding everything above ``start_ts``, subscribed from there if
        this process holds less. ``reads_only``: asked by ``read``, not by ``latest_offset``."""
        with self._lock:
            partition_feed = self._feeds.get(partition.id)
            if partition_feed is not None and start_ts >= partition_feed.sorter.base_ts:
                if partition_feed.reads_only and not reads_only:
                    partition_feed.reads_only = False  # latest_offset runs here too now: commits will come
                    self._keep_gc_safe_point_below(partition.id, start_ts)
                return partition_feed
            assert self._feed is not None and self._spill_dir is not None
            if partition_feed is not None:
                log.info("partition %s rewound to %d below what is held; following it again", partition.id, start_ts)
                self._feed.unsubscribe(partition.id)
                partition_feed.sorter.close()
                reads_only = reads_only and partition_feed.reads_only
            self._check_gc_safe_point(partition, start_ts)
            if not reads_only:
                self._keep_gc_safe_point_below(partition.id, start_ts)
            region_start, region_end = self.codec.region_range(
                bytes.fromhex(str(partition.info["start"])), bytes.fromhex(str(partition.info["end"]))
            )
            sorter = PartitionSorter(start_ts, self.config.sorter_memory_mb << 20, self._spill_dir)
            partition_feed = _PartitionFeed(sorter, region_start, region_end, reads_only)
            self._feeds[partition.id] = partition_feed
            self._feed.subscribe(partition.id, region_start, region_end, start_ts)
            return partition_feed

    def _wait_until_complete(self, partition: Partition, start_ts: int, end_ts: int) -> None:
        """Returns once this process's resolved-ts less the safety interval reaches ``end_ts``."""
        assert self._feed is not None
        deadline = time.monotonic() + self.config.read_wait_s
        while True:
            self._raise_if_refused()
            resolved = self._feed.resolved_ts(partition.id)
            if resolved is not None and resolved >= end_ts:
                return
            if time.monotonic() >= deadline:
                raise SourceUnavailableError(
                    f"partition {partition.id}: reading ({start_ts}, {end_ts}] here, the feed's resolved-ts "
                    f"{resolved} less the safety interval did not reach {end_ts} within read_wait_s "
                    f"({self.config.read_wait_s}s); the range is read again on retry"
                )
            time.sleep(_READ_POLL_S)

    def _raise_if_refused(self) -> None:
        """TiKV refused a subscription for good (not API V2, another cluster): no retry cures it."""
        assert self._feed is not None
        if self._feed.failure is not None:
            raise FeedRefusedError(str(self._feed.failure)) from self._feed.failure

    def _let_go_of_idle_read_follows(self) -> None:
        now = time.monotonic()
        with self._lock:
            idle = [
                partition_id
                for partition_id, partition_feed in self._feeds.items()
                if partition_feed.reads_only and now - partition_feed.read_at > _IDLE_READ_FOLLOW_S
            ]
            for partition_id in idle:
                assert self._feed is not None
                self._feed.unsubscribe(partition_id)
                self._feeds.pop(partition_id).sorter.close()
                log.info("partition %s: no read for %.0fs here; no longer followed", partition_id, _IDLE_READ_FOLLOW_S)

    def _keep_gc_safe_point_below(self, partition_id: str, start_ts: int) -> None:
        self._committed[partition_id] = min(self._committed.get(partition_id, start_ts), start_ts)
        self._refresh_gc_safe_point()

    def _on_rows(self, partition_id: str, items: list[Item]) -> None:
        partition_feed = self._feeds.get(partition_id)
        if partition_feed is not None:
            partition_feed.sorter.add(items)

    def _check_gc_safe_point(self, partition: Partition, start_ts: int) -> None:
        try:
            gc_safe_point = self.pd.get_gc_safe_point()
        except TiKVClientError as exc:
            raise SourceUnavailableError(f"partition {partition.id}: cannot read the GC safepoint: {exc}") from exc
        if start_ts < gc_safe_point:
            raise CheckpointBehindGCSafePointError(
                f"partition {partition.id} would resume from ts {start_ts}, but the cluster's GC safepoint is "
                f"{gc_safe_point}: changes between them may be gone. Restore the downstream from a backup taken "
                f"after {gc_safe_point}, then reset this pipeline's offsets (cdcflow offsets reset) with start_ts "
                f"set to that backup's timestamp"
            )

    def service_id(self, partition_id: str) -> str:
        """The PD service GC safepoint that keeps a partition's changes: one per partition, so
        whichever process commits the partition moves it, and ``cdcflow offsets reset`` removes
        exactly the partitions it resets (:meth:`forget`)."""
        return f"cdcflow-{self.context.pipeline}-{partition_id}"

    def _refresh_gc_safe_point(self) -> None:
        """Keeps PD's GC below each partition's checkpoint this process resumes from (checkpoint
        - 1), under the partition's own service id, lowest first."""
        for partition_id, ts in sorted(self._committed.items(), key=lambda item: item[1]):
            service_id, safe_point = self.service_id(partition_id), max(0, ts - 1)
            try:
                minimum = self.pd.update_service_gc_safe_point(service_id, self.config.gc_ttl_s, safe_point)
            except TiKVClientError as exc:
                log.warning("could not refresh the service GC safepoint %s: %s", service_id, exc)
                return
            if minimum > safe_point:
                raise CheckpointBehindGCSafePointError(
                    f"PD refused service GC safepoint {safe_point} for {service_id}: GC may already have passed "
                    f"{minimum}; the checkpoint is behind it"
                )
        if self._committed:
            self._gc_refreshed_at = time.monotonic()
            if self._legacy_service_id is not None:
                try:
                    self._remove_service_safe_point(self._legacy_service_id)
                    self._legacy_service_id = None
                except TiKVClientError as exc:
                    log.warning("could not remove the former service GC safepoint %s: %s", self._legacy_service_id, exc)

    def forget(self, partition_ids: Sequence[str]) -> None:
        """``cdcflow offsets reset``: the partitions' service GC safepoints are removed, so a
        pipeline whose offsets are deleted no longer holds GC back for ``gc_ttl_s``. A partition
        reset restarts from the partition map's start, refused if GC has passed it since."""
        for partition_id in partition_ids:
            self._committed.pop(partition_id, None)
            try:
                self._remove_service_safe_point(self.service_id(partition_id))
            except TiKVClientError as exc:
                raise SourceUnavailableError(
                    f"partition {partition_id}: cannot remove its service GC safepoint {self.service_id(partition_id)} "
                    f"({exc}); the offsets were not changed, try again"
                ) from exc

    def _remove_service_safe_point(self, service_id: str) -> None:
        """TTL 0 removes a service safepoint, as TiKV-CDC's ``cdc cli unsafe reset`` does
        (tikv/migration cdc/pkg/txnutil/gc/gc_service.go 76-90; PD: ``ttl <= 0`` deletes the GC
        barrier, tikv/pd pkg/gc/gc_state_manager.go 1145-1210)."""
        self.pd.update_service_gc_safe_point(service_id, 0, (1 << 64) - 1)

    # --- events --------------------------------------------------------------------------------

    def _record(self, partition: Partition, item: Item, now_ms: int) -> Record | Rejected:
        source = SourceInfo(
            system="tikv",
            cluster=self.config.cluster,
            keyspace=f"ks{self.config.keyspace_id}",
            table="rawkv",
            partition=partition.id,
            position={"ts": item.ts, "key": item.key.hex()},
            ts_us=ts_to_us(item.ts),
            extra={"tikv_ts": item.ts},
        )
        if item.kind == PUT:
            after = {"key": item.key, "value": item.value, "expire_ts": item.expire_ts or None}
            return ChangeEvent(Op.CREATE, {"key": item.key}, None, after, source, now_ms, self.schema)
        if item.kind == DELETE:
            return ChangeEvent(Op.DELETE, {"key": item.key}, None, None, source, now_ms, self.schema)
        self._rejected.inc()
        raw = ChangeEvent(
            Op.CREATE,
            {"key": item.key},
            None,
            {"key": item.key, "value": item.value, "expire_ts": item.expire_ts or None},
            source,
            now_ms,
            self.schema,
        )
        return Rejected(raw, RowRejectedError(f"partition {partition.id} ts {item.ts}: {item.reason}"), SOURCE_STAGE)
