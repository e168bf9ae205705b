"""Prometheus metrics of the delivery loop, labelled by pipeline.

``cdcflow_checkpoint_lag_seconds`` is how long changes have been waiting: the largest, over the
partitions a process owns, of

* 0 for a partition that has delivered (and committed) everything its source has now, its
  *caught up* state. Each source says what that means (:class:`~cdcflow.capabilities.ReportsCaughtUp`):

  - ``kafka``: the committed offset is the partition's end offset;
  - ``datagen``: every event due by now (at its ``rate``) is delivered; a bounded one once drained;
  - ``cassandra_commitlog``: every mutation the node has synced into ``cdc_raw`` is read;
  - ``scylla_cdc``: read up to now minus the confidence window (the newest its readers may read);
  - ``tikv_rawkv``: read up to resolved-ts minus the safety interval (TiKV keeps resolved-ts near now);
  - a snapshot (``snapshot: initial`` of the CQL sources): a slice once read and committed; a
    stream partition waiting for the snapshot is not caught up (its changes wait);

* otherwise, now minus the last moment up to which the partition is known to be durable
  downstream: when it was last seen caught up with everything committed, or its committed
  watermark (event time) if later. It grows only while work waits: records read but not yet
  committed, a backlog, a sink that does not answer.

It is not "now minus the watermark": that grows on a quiet, caught-up topic and would page
someone for nothing.

``cdcflow_data_loss_headroom_seconds{pipeline, partition, reason}`` is how long, at the current
pace, until changes of the partition not yet durable downstream may be lost for good, as its
source tells (:class:`~cdcflow.capabilities.ReportsDataLossHeadroom`): ``cdc_raw_full`` (Cassandra: cdc_raw's free space
against ``cdc_total_space`` at the node's current write rate), ``log_ttl`` (ScyllaDB: the log's
TTL less the partition's lag), ``gc_safepoint`` (TiKV: the GC TTL less the checkpoint's age).
The loop measures it every few seconds; between two measures the gauge counts down one second a
second, so a loop that hangs shows the headroom shrinking. ``+Inf``: nothing in sight.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

__all__ = [
    "METRICS_REGISTRY",
    "PipelineMetrics",
    "SnapshotMetrics",
    "forget_live_snapshot",
    "live_snapshot_metrics",
    "serve_metrics",
    "snapshot_metrics",
    "source_counter",
]

METRICS_REGISTRY = CollectorRegistry(auto_describe=True)

_EVENTS_IN = Counter("cdcflow_events_in", "Records read from the source", ["pipeline"], registry=METRICS_REGISTRY)
_EVENTS_OUT = Counter("cdcflow_events_out", "Records written to the sink", ["pipeline"], registry=METRICS_REGISTRY)
_BATCHES = Counter("cdcflow_batches", "Batches written to the sink", ["pipeline"], registry=METRICS_REGISTRY)
_ERRORS = Counter("cdcflow_errors", "Failures by kind", ["pipeline", "kind"], registry=METRICS_REGISTRY)
_DEAD_LETTERS = Counter(
    "cdcflow_dead_letters", "Records sent to the dead-letter destination", ["pipeline"], registry=METRICS_REGISTRY
)
_DROPPED = Counter(
    "cdcflow_dropped_records",
    "Rejected records dropped because errors.dead_letter is none",
    ["pipeline"],
    registry=METRICS_REGISTRY,
)
_CHECKPOINTS = Counter("cdcflow_checkpoints", "Committed checkpoints", ["pipeline"], registry=METRICS_REGISTRY)
_WATERMARK = Gauge(
    "cdcflow_watermark_seconds",
    "Committed watermark: every change before it is durable downstream (min over partitions)",
    ["pipeline"],
    registry=METRICS_REGISTRY,
)
_LAG = Gauge(
    "cdcflow_checkpoint_lag_seconds",
    "How long changes have been waiting to be durable downstream (0: every partition caught up); see "
    "cdcflow.metrics for each source's meaning of caught up",
    ["pipeline"],
    registry=METRICS_REGISTRY,
)
_PARTITIONS = Gauge(
    "cdcflow_partitions_owned", "Source partitions this process owns", ["pipeline"], registry=METRICS_REGISTRY
)
_SOURCE_COUNTS = Counter(
    "cdcflow_source_counted",
    "What a source counts besides events: mutations skipped by reason, records sent to its error store",
    ["pipeline", "what"],
    registry=METRICS_REGISTRY,
)


_DATA_LOSS_HEADROOM = Gauge(
    "cdcflow_data_loss_headroom_seconds",
    "How long until changes of a partition not yet durable downstream may be lost, at the current pace "
    "(cdc_raw_full, log_ttl, gc_safepoint); +Inf: nothing in sight",
    ["pipeline", "partition", "reason"],
    registry=METRICS_REGISTRY,
)


def source_counter(pipeline: str, what: str) -> Counter:
    """A counter a source plugin increments (``what``: e.g. ``skipped_counter_table``), on the metrics port."""
    return _SOURCE_COUNTS.labels(pipeline, what)


@dataclass
class PipelineMetrics:
    pipeline: str
    committed_watermark_us: int | None = field(default=None, init=False)
    records_read: int = field(default=0, init=False)  # by this process in this run (its last log line)
    records_written: int = field(default=0, init=False)
    lag_seconds: Callable[[], float] = field(default=lambda: float("nan"), init=False)
    """Set by the delivery loop, which knows which partitions are caught up."""

    def __post_init__(self) -> None:
        name = self.pipeline
        self.events_in = _EVENTS_IN.labels(name)
        self.events_out = _EVENTS_OUT.labels(name)
        self.batches = _BATCHES.labels(name)
        self.dead_letters = _DEAD_LETTERS.labels(name)
        self.dropped = _DROPPED.labels(name)
        self.checkpoints = _CHECKPOINTS.labels(name)
        self.partitions_owned = _PARTITIONS.labels(name)
        self._headroom_reasons: dict[str, str] = {}  # partition -> the reason its gauge is labelled with
        # Lag is computed when scraped, so it keeps growing while a pipeline is stuck.
        _LAG.labels(name).set_function(self._scraped_lag_seconds)
        _WATERMARK.labels(name).set_function(self._watermark_seconds)

    def error(self, kind: str) -> None:
        _ERRORS.labels(self.pipeline, kind).inc()

    def data_loss_headroom(
        self, partition: str, reason: str, seconds: float, measured_at: float, clock: Callable[[], float]
    ) -> None:
        """``partition`` had ``seconds`` of headroom (for ``reason``) at ``measured_at`` (``clock``'s
        time); the gauge counts it down from there until the next measure."""
        previous = self._headroom_reasons.get(partition)
        if previous is not None and previous != reason:
            _stop_counting_down(self.pipeline, partition, previous)
        self._headroom_reasons[partition] = reason
        _DATA_LOSS_HEADROOM.labels(self.pipeline, partition, reason).set_function(
            lambda: seconds - max(0.0, clock() - measured_at)
        )

    def forget_data_loss_headroom(self, keep: Collection[str]) -> None:
        """Partitions not in ``keep`` are no longer this process's: their gauges go."""
        for partition in [p for p in self._headroom_reasons if p not in keep]:
            _stop_counting_down(self.pipeline, partition, self._headroom_reasons.pop(partition))

    def read(self, count: int) -> None:
        self.records_read += count
        self.events_in.inc(count)

    def wrote(self, count: int) -> None:
        self.records_written += count
        self.events_out.inc(count)
        self.batches.inc()

    def rejected_records(self, fate: str, count: int) -> None:
        """``count`` rejected records went to the dead letters (``dead_lettered``) or were ``dropped``."""
        (self.dropped if fate == "dropped" else self.dead_letters).inc(count)

    def committed(self, watermark_us: int | None) -> None:
        self.checkpoints.inc()
        if watermark_us is not None:
            self.committed_watermark_us = watermark_us

    def _scraped_lag_seconds(self) -> float:
        return self.lag_seconds()  # looked up at each scrape: the loop sets it after this registers

    def _watermark_seconds(self) -> float:
        return float("nan") if self.committed_watermark_us is None else self.committed_watermark_us / 1e6


# --- snapshots: a source's existing rows, read by slices before its stream starts ---------------

_SNAPSHOT_SLICES = Gauge(
    "cdcflow_snapshot_slices", "Slices a table's snapshot is cut into", ["pipeline", "table"], registry=METRICS_REGISTRY
)
_SNAPSHOT_SLICES_FINISHED = Gauge(
    "cdcflow_snapshot_slices_finished",
    "Snapshot slices delivered and committed, by any process of the pipeline (as this one last read the checkpoints)",
    ["pipeline", "table"],
    registry=METRICS_REGISTRY,
)
_SNAPSHOT_ROWS = Counter(
    "cdcflow_snapshot_rows", "Rows a snapshot read in this process", ["pipeline", "table"], registry=METRICS_REGISTRY
)


@dataclass(frozen=True)
class SnapshotMetrics:
    """One table's snapshot progress: ``slices_finished / slices`` is the share done."""

    slices: Gauge
    slices_finished: Gauge
    rows: Counter


def snapshot_metrics(pipeline: str, table: str) -> SnapshotMetrics:
    """The progress metrics of ``table``'s snapshot in ``pipeline``, on the metrics port."""
    return SnapshotMetrics(
        _SNAPSHOT_SLICES.labels(pipeline, table),
        _SNAPSHOT_SLICES_FINISHED.labels(pipeline, table),
        _SNAPSHOT_ROWS.labels(pipeline, table),
    )


# --- live snapshots: a table re-read in chunks while its stream flows (cdcflow.live_snapshots) ----

_LIVE_SNAPSHOT_DONE = Gauge(
    "cdcflow_snapshot_live_done",
    "Share (0 to 1) of a stream partition's token ranges its live snapshot of a table has delivered",
    ["pipeline", "table", "partition"],
    registry=METRICS_REGISTRY,
)
_LIVE_SNAPSHOT_ROWS = Counter(
    "cdcflow_snapshot_live_rows",
    "Rows a live snapshot delivered (op r) in this process, after those a newer streamed change replaced",
    ["pipeline", "table"],
    registry=METRICS_REGISTRY,
)


@dataclass(frozen=True)
class LiveSnapshotMetrics:
    """A live snapshot's progress in one partition, and the rows it delivered."""

    done: Gauge
    rows: Counter


def live_snapshot_metrics(pipeline: str, table: str, partition: str) -> LiveSnapshotMetrics:
    """The metrics of the live snapshot of ``table`` in ``partition``, on the metrics port."""
    return LiveSnapshotMetrics(
        _LIVE_SNAPSHOT_DONE.labels(pipeline, table, partition), _LIVE_SNAPSHOT_ROWS.labels(pipeline, table)
    )


def forget_live_snapshot(pipeline: str, table: str, partition: str) -> None:
    """Remove a partition's ``cdcflow_snapshot_live_done`` (its live snapshot is over)."""
    with contextlib.suppress(KeyError):
        _LIVE_SNAPSHOT_DONE.remove(pipeline, table, partition)


def _stop_counting_down(pipeline: str, partition: str, reason: str) -> None:
    """Remove a partition's ``cdcflow_data_loss_headroom_seconds`` (handed over, gone, finished)."""
    with contextlib.suppress(KeyError):  # never set, or removed already
        _DATA_LOSS_HEADROOM.remove(pipeline, partition, reason)


def serve_metrics(port: int) -> None:
    """Serve /metrics on 127.0.0.1 unless told otherwise by CDCFLOW_METRICS_ADDR."""
    import os

    start_http_server(port, addr=os.environ.get("CDCFLOW_METRICS_ADDR", "127.0.0.1"), registry=METRICS_REGISTRY)
