"""The ChangeData EventFeed client: one subscription per region and partition span.

Every region of a partition's span is registered on a bidirectional ``EventFeed`` stream to its
leader's store with ``kv_api = RawKV`` and ``checkpoint_ts`` = where the span resumes. TiKV first
sends what is stored above that timestamp (the incremental scan), then an ``INITIALIZED`` row,
then live rows and resolved-ts. A region error (not leader, epoch mismatch after a split or
merge, region not found, busy) or a broken stream ends the affected subscriptions; their spans
are subscribed again after looking the regions up in PD again.

Where a span resumes. Every resolved-ts TiKV sends is taken less ``safety_ts`` (the source's
``safety_interval_ms``) before it counts, and a span is subscribed again from that: from
``max(from_ts, region resolved-ts - safety)``. TiKV's own resolved-ts is not safe to resume from:
on a leader transfer the old leader can still send one computed from its store's timestamp cache
after the new leader's first write (tikv/migration#193; tikv/tikv components/cdc/src/endpoint.rs
1121-1143, raftstore pd.rs 2175-2190), and the new subscription's catch-up scan sends only rows
above its checkpoint (components/cdc/src/initializer.rs 462-473): resuming from the raw value loses
those writes. TiKV-CDC applies the safety interval to the region's resolved-ts the same way
(``GetSafeResolvedTs``, tikv/migration cdc/cdc/kv/region_worker.go 755-760).

Where PD's answer has a hole. PD learns regions from heartbeats and answers a scan with what its
tree holds: after a split, the half not yet reported is missing, and a span can come back
gapped or empty (tikv/pd pkg/core/region_tree.go 171-191). A span is subscribed only as far as
the regions PD returned cover it from its start; the rest stays pending, with its ``from_ts``,
and is scanned again with backoff until PD covers it (client-go region_cache.go "PD returned
regions have gaps"; TiKV-CDC ``CheckRegionsLeftCover``). A pending span holds its partition's
resolved-ts at its ``from_ts``, so the partition never passes a span nobody follows.

Streams and versions, as TiKV reads them (tikv/tikv ``components/cdc/src/service.rs``,
``endpoint.rs``): TiKV takes the client's ``Header.ticdc_version`` from a stream's first request
as a semantic version (anything else counts as 0.0.0) and gates features on it: from 4.0.8
resolved-ts comes batched per stream (``ResolvedTs{regions, ts, request_id: 0}``), from 5.3.0
TiKV refuses a request whose ``cluster_id`` is not its own. Below 4.0.8 it comes per (stream,
region) to the subscription registered last, so two subscriptions of one region on one stream
would starve the older one; TiKV before 7.3 refuses the second outright (``duplicate_request``).
Two partitions share a region whenever PD merges across a partition cut. So a stream never
carries a region twice: a subscription goes to the first stream to its store that does not
already carry its region, and another stream is opened when none is free. TiKV-CDC gets the same
guarantee from one stream per span (tikv/migration ``cdc/cdc/kv/client.go``), and sends its own
release ("1.1.1"), which TiKV reads as older than 4.0.8; cdcflow sends
:data:`TIKV_CDC_PROTOCOL_VERSION` instead, for batched resolved-ts and the cluster-id check.
"""

from __future__ import annotations

import collections
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import grpc

from cdcflow.sources.tikv_client.codec import KeyCodec, decode_memcomparable
from cdcflow.sources.tikv_client.exceptions import TiKVClientError
from cdcflow.sources.tikv_client.pd import PDClient, RegionInfo, covering_prefix, serialize_message
from cdcflow.sources.tikv_client.proto import cdcpb_pb2
from cdcflow.sources.tikv_client.rawkv import certificate_refused
from cdcflow.sources.tikv_client.regions import RegionCache
from cdcflow.sources.tikv_rawkv.exceptions import FeedRefusedError
from cdcflow.sources.tikv_rawkv.sorter import DELETE, PUT, REJECTED, Item

__all__ = ["TIKV_CDC_PROTOCOL_VERSION", "EventFeed"]

log = logging.getLogger("cdcflow.tikv.feed")

# Sent as Header.ticdc_version on every request. TiKV gates on it (service.rs FeatureGate):
# >= 4.0.8 batched resolved-ts, >= 5.3.0 the cluster-id check; 6.2 is the first TiKV with RawKV CDC.
TIKV_CDC_PROTOCOL_VERSION = "6.2.0"

_ROW = cdcpb_pb2.Event.Row
RowsCallback = Callable[[str, list[Item]], None]


@dataclass
class _Subscription:
    request_id: int
    partition_id: str
    region: RegionInfo
    start: bytes  # region-key space
    end: bytes
    resolved_ts: int
    stream: _StoreStream
    request_start: bytes = b""  # the same span as request keys, to filter rows cheaply
    request_end: bytes = b""
    initialized: bool = False
    sent: bool = False  # its Register went out (else it waits for its store's scans: _register_or_queue)
    store_resolved_ts: int = 0  # the last resolved-ts TiKV sent, as sent
    advanced_at: float = 0.0  # monotonic time of INITIALIZED or of the last resolved-ts that moved it


@dataclass
class _Resubscribe:
    partition_id: str
    start: bytes
    end: bytes
    from_ts: int
    not_before: float
    generation: int
    uncovered_scans: int = 0  # PD scans in a row that did not cover the span: the backoff grows
    # Set: subscribe this region (the span lies within it) at its leader, without asking PD; a
    # not_leader answer named that leader, which PD may not have heard of yet.
    region: RegionInfo | None = None

    def next_scan_delay_s(self) -> float:
        """50 ms, doubling, at most 2 s between scans of a span PD does not cover yet."""
        return min(2.0, 0.05 * 2.0 ** min(self.uncovered_scans, 6))


class _StoreStream:
    """One EventFeed call to one store: a request queue going out, a thread reading events."""

    def __init__(self, feed: EventFeed, store_id: int, address: str, channel: grpc.Channel) -> None:
        self.store_id = store_id
        self.address = address
        self.requests: queue.Queue[cdcpb_pb2.ChangeDataRequest | None] = queue.Queue()
        self.alive = True
        self.refused = False  # TiKV refused the client certificate: the stream is not opened again
        self.regions: dict[int, _Subscription] = {}  # region id -> its one subscription on this stream
        method = channel.stream_stream(
            "/cdcpb.ChangeData/EventFeed",
            request_serializer=serialize_message,
            response_deserializer=cdcpb_pb2.ChangeDataEvent.FromString,
        )
        self.call = method(self._outgoing())
        self.thread = threading.Thread(target=feed._receive, args=(self,), name=f"tikv-feed-{store_id}", daemon=True)
        self.thread.start()

    def _outgoing(self) -> Iterator[cdcpb_pb2.ChangeDataRequest]:
        while True:
            request = self.requests.get()
            if request is None:
                return
            yield request

    def close(self) -> None:
        self.alive = False
        self.requests.put(None)
        self.call.cancel()  # type: ignore[no-untyped-call]


class EventFeed:
    """Subscriptions of every partition span; rows go to ``on_rows(partition_id, items)``."""

    def __init__(
        self,
        pd: PDClient,
        codec: KeyCodec,
        on_rows: RowsCallback,
        retry_delay_s: float = 0.2,
        on_rows_outside_span: Callable[[int], object] = lambda count: None,
        safety_ts: int = 0,
        stuck_region_s: float = 60.0,
        on_stuck_region: Callable[[int], object] = lambda count: None,
        max_initializing_per_store: int = 40,
    ) -> None:
        self.pd = pd
        self.safety_ts = safety_ts  # taken off every resolved-ts TiKV sends (see the module docstring)
        self.stuck_region_s = stuck_region_s
        self.on_stuck_region = on_stuck_region  # how many stuck regions were subscribed again
        self._stuck_checked_at = time.monotonic()
        self.max_initializing_per_store = max_initializing_per_store
        self._initializing: dict[int, int] = {}  # store id -> registrations sent, scan not ended
        self._queued: dict[int, collections.deque[_Subscription]] = {}  # store id -> waiting their turn
        self.codec = codec
        self.on_rows = on_rows
        self.on_rows_outside_span = on_rows_outside_span  # how many scan rows of others' keys were dropped
        self.regions = RegionCache(pd)
        self.retry_delay_s = retry_delay_s
        self._lock = threading.RLock()
        self._subscriptions: dict[int, _Subscription] = {}
        self._streams: dict[int, list[_StoreStream]] = {}  # store id -> its streams
        self._pending: list[_Resubscribe] = []
        self._generation: dict[str, int] = {}
        self._request_ids = itertools.count(1)
        self._closed = threading.Event()
        self._wake = threading.Event()
        self._prefix = codec.prefix
        self._resubscriber = threading.Thread(target=self._resubscribe_loop, name="tikv-feed-resubscribe", daemon=True)
        self._resubscriber.start()
        self.resubscriptions = 0
        self.failure: FeedRefusedError | None = None  # the first refusal no retry cures

    # --- public ------------------------------------------------------------------------------

    def subscribe(self, partition_id: str, start: bytes, end: bytes, from_ts: int) -> None:
        """Follows [start, end) (region-key space) from ``from_ts`` on: rows above it, then live."""
        with self._lock:
            generation = self._generation.get(partition_id, 0) + 1
            self._generation[partition_id] = generation
            self._pending.append(_Resubscribe(partition_id, start, end, from_ts, 0.0, generation))
        self._wake.set()

    def unsubscribe(self, partition_id: str) -> None:
        with self._lock:
            self._generation[partition_id] = self._generation.get(partition_id, 0) + 1
            self._pending = [p for p in self._pending if p.partition_id != partition_id]
            for subscription in list(self._subscriptions.values()):
                if subscription.partition_id == partition_id:
                    self._forget(subscription)
                    self._deregister(subscription)

    def resolved_ts(self, partition_id: str) -> int | None:
        """The partition's resolved-ts, less the safety interval: the minimum over its
        subscriptions and the spans waiting to be subscribed (again, or until PD covers them).
        None while it has neither."""
        with self._lock:
            values = [s.resolved_ts for s in self._subscriptions.values() if s.partition_id == partition_id]
            values += [p.from_ts for p in self._pending if p.partition_id == partition_id]
            return min(values) if values else None

    def subscription_count(self) -> int:
        with self._lock:
            return len(self._subscriptions)

    def close(self) -> None:
        self._closed.set()
        self._wake.set()
        with self._lock:
            streams = [stream for streams in self._streams.values() for stream in streams]
            self._streams.clear()
        for stream in streams:
            stream.close()
        self.regions.close()

    # --- subscribing ---------------------------------------------------------------------------

    def _resubscribe_loop(self) -> None:
        while not self._closed.is_set():
            self._wake.wait(self.retry_delay_s)
            self._wake.clear()
            now = time.monotonic()
            if now - self._stuck_checked_at >= min(1.0, self.stuck_region_s / 4):
                self._stuck_checked_at = now
                self._reconnect_stuck_regions(now)
            with self._lock:
                due = [p for p in self._pending if p.not_before <= now]
            for task in due:
                if self._closed.is_set():
                    return
                try:
                    done = self._subscribe_span(task)
                except TiKVClientError as exc:
                    log.warning("subscribing %s failed (%s); retrying", task.partition_id, exc)
                    with self._lock:
                        task.not_before = time.monotonic() + 1.0
                    continue
                with self._lock:
                    if done and task in self._pending:
                        self._pending.remove(task)

    def _subscribe_span(self, task: _Resubscribe) -> bool:
        """Subscribes the regions PD names for the span, as far as they cover it from its start;
        False when part of it is left pending (PD's answer had a hole or nothing, or a region
        without a leader: PD has not heard from it since PD's own leader changed, and client-go
        and TiKV-CDC leave such regions out of a scan and ask again, region_cache.go
        ``handleRegionInfos``). A task for one region (after not_leader named its leader) is
        registered at that leader without asking PD, as TiKV-CDC retries the region itself
        after ``UpdateLeader`` (tikv/migration cdc/cdc/kv/client.go 1018-1020, 1067)."""
        if task.region is not None:
            regions, uncovered = [task.region], None
        else:
            led = [r for r in self.pd.scan_regions(task.start, task.end) if r.leader is not None]
            regions, uncovered = covering_prefix(led, task.start, task.end)
        with self._lock:
            if self._generation.get(task.partition_id) != task.generation or task not in self._pending:
                return True  # unsubscribed meanwhile
            self._register_regions(task, regions)
            if uncovered is not None:
                task.uncovered_scans += 1
                level = logging.WARNING if task.uncovered_scans in (5, 50) else logging.DEBUG
                log.log(
                    level,
                    "partition %s: PD's regions leave [%s, %s) uncovered or leaderless (%d scans so far); it stays "
                    "pending at %d",
                    task.partition_id,
                    uncovered.hex(),
                    task.end.hex() or "inf",
                    task.uncovered_scans,
                    task.from_ts,
                )
                task.start = uncovered
                task.not_before = time.monotonic() + task.next_scan_delay_s()
            return uncovered is None

    def _reconnect_stuck_regions(self, now: float) -> None:
        """Subscribes again every region whose resolved-ts has not moved for ``stuck_region_s``
        since its catch-up scan ended: its store stopped sending for it without an error (an old
        leader that keeps a subscription it no longer serves, a lost message), and the
        partition would stall behind it for ever. TiKV-CDC reconnects after ``reconnectInterval``
        without a resolved-ts (tikv/migration cdc/cdc/kv/region_worker.go 336-350, client.go 90).
        The region is deregistered where it was and its span subscribed again through PD."""
        with self._lock:
            stuck = [
                s for s in self._subscriptions.values() if s.initialized and now - s.advanced_at > self.stuck_region_s
            ]
            for subscription in stuck:
                self._forget(subscription)
                self._deregister(subscription)
                self._retry_span(
                    subscription,
                    0.0,
                    f"region {subscription.region.id}: no resolved-ts for {now - subscription.advanced_at:.0f}s "
                    f"(stuck_region_s {self.stuck_region_s:g})",
                )
        if stuck:
            log.warning("%d regions sent no resolved-ts for %gs: subscribed again", len(stuck), self.stuck_region_s)
            self.on_stuck_region(len(stuck))

    def _deregister(self, subscription: _Subscription) -> None:
        """Tells the subscription's store to stop sending for it."""
        stream = subscription.stream
        if stream.alive and subscription.sent:
            stream.requests.put(
                cdcpb_pb2.ChangeDataRequest(
                    header=self._header(),
                    region_id=subscription.region.id,
                    request_id=subscription.request_id,
                    deregister=cdcpb_pb2.ChangeDataRequest.Deregister(),
                )
            )

    def _register_regions(self, task: _Resubscribe, regions: list[RegionInfo]) -> None:
        """Registers each region's part of the task's span on a stream to its leader's store,
        in key order, moving the task's start past each one registered: the task keeps only
        what is not subscribed yet. A registration that fails half-way (PD cannot name a store)
        leaves the rest pending, and the retry subscribes only that, never a region twice.
        Every part of a partition's span is so either pending or subscribed, never both: the
        guarantee TiKV-CDC gets from its RegionRangeLock (tikv/migration cdc/pkg/regionspan,
        client.go 633)."""
        with self._lock:
            for region in regions:
                start = max(region.start_key, task.start)
                ends = [e for e in (region.end_key, task.end) if e]
                end = min(ends) if ends else b""
                if end and start >= end:
                    continue
                store_id, _ = self.regions.leader_store(region)
                stream = self._stream(store_id, region.id)
                request_id = next(self._request_ids)
                subscription = _Subscription(
                    request_id,
                    task.partition_id,
                    region,
                    start,
                    end,
                    task.from_ts,
                    stream,
                    self._request_key(start),
                    self._request_key(end),
                )
                self._subscriptions[request_id] = subscription
                stream.regions[region.id] = subscription
                self._register_or_queue(subscription)
                if end:
                    task.start = end

    def _register_or_queue(self, subscription: _Subscription) -> None:
        """Sends the Register now if fewer than ``max_initializing_per_store`` registrations of
        its store are still in their catch-up scan, else queues it until one ends (INITIALIZED,
        or an error). TiKV-CDC does the same with 40 tokens per store (region-scan-limit,
        tikv/migration cdc/pkg/config/server_config.go 98; token_region.go; Release on
        INITIALIZED): a span of thousands of regions otherwise asks every store for thousands
        of scans at once, which TiKV refuses past its incremental-scan-concurrency-limit with
        server_is_busy (tikv/tikv components/cdc/src/endpoint.rs 853-872) and works through
        slowly either way. A queued subscription holds its span (and the partition's
        resolved-ts) like a sent one; it is sent from its resolved-ts, its ``from_ts``."""
        store_id = subscription.stream.store_id
        if self._initializing.get(store_id, 0) < self.max_initializing_per_store:
            self._send_register(subscription)
        else:
            self._queued.setdefault(store_id, collections.deque()).append(subscription)

    def _send_register(self, subscription: _Subscription) -> None:
        store_id = subscription.stream.store_id
        self._initializing[store_id] = self._initializing.get(store_id, 0) + 1
        subscription.sent = True
        region = subscription.region
        subscription.stream.requests.put(
            cdcpb_pb2.ChangeDataRequest(
                header=self._header(),
                region_id=region.id,
                region_epoch=region.meta.region_epoch,
                checkpoint_ts=subscription.resolved_ts,
                start_key=subscription.start,
                end_key=subscription.end,
                request_id=subscription.request_id,
                register=cdcpb_pb2.ChangeDataRequest.Register(),
                kv_api=cdcpb_pb2.ChangeDataRequest.RawKV,
            )
        )

    def _scan_ended(self, subscription: _Subscription) -> None:
        """A sent registration left its catch-up scan (INITIALIZED, or it ended before): its
        store may take the next queued one. Call with the lock held."""
        store_id = subscription.stream.store_id
        self._initializing[store_id] -= 1
        queued = self._queued.get(store_id)
        while queued and self._initializing[store_id] < self.max_initializing_per_store:
            waiting = queued.popleft()
            if waiting.request_id in self._subscriptions and waiting.stream.alive:
                self._send_register(waiting)

    def _request_key(self, region_key: bytes) -> bytes:
        if not region_key or self.codec.api_version == 1:
            return region_key
        return decode_memcomparable(region_key)[0]

    def _header(self) -> cdcpb_pb2.Header:
        """The same header on every request: TiKV reads the version from a stream's first one."""
        return cdcpb_pb2.Header(cluster_id=self.pd.cluster_id, ticdc_version=TIKV_CDC_PROTOCOL_VERSION)

    def _stream(self, store_id: int, region_id: int) -> _StoreStream:
        """A live stream to ``store_id`` that does not carry ``region_id`` yet (see the module
        docstring: a region twice on one stream starves or is refused)."""
        streams = self._streams.setdefault(store_id, [])
        streams[:] = [s for s in streams if s.alive]
        for stream in streams:
            if region_id not in stream.regions:
                return stream
        address, channel = self.regions.channel_for_store(store_id)
        stream = _StoreStream(self, store_id, address, channel)
        streams.append(stream)
        return stream

    def _forget(self, subscription: _Subscription) -> bool:
        """Drops an ended subscription (its region is free on its stream again); False when it
        was already gone. Call with the lock held."""
        if self._subscriptions.pop(subscription.request_id, None) is None:
            return False
        if subscription.sent and not subscription.initialized:
            self._scan_ended(subscription)
        stream = subscription.stream
        if stream.regions.get(subscription.region.id) is subscription:
            del stream.regions[subscription.region.id]
        return True

    def _retry_span(
        self, subscription: _Subscription, delay_s: float, why: str, region: RegionInfo | None = None
    ) -> None:
        """Subscribes the span of an ended subscription again, from its resolved-ts: the larger of
        where it was subscribed from and the region's last resolved-ts less the safety interval
        (:meth:`_advance` keeps it so). ``region``: at that region and leader, not PD's."""
        self.resubscriptions += 1
        log.info(
            "partition %s: %s; resubscribing [%s, %s) from %d",
            subscription.partition_id,
            why,
            subscription.start.hex(),
            subscription.end.hex() or "inf",
            subscription.resolved_ts,
        )
        self._pending.append(
            _Resubscribe(
                subscription.partition_id,
                subscription.start,
                subscription.end,
                subscription.resolved_ts,
                time.monotonic() + delay_s,
                self._generation.get(subscription.partition_id, 0),
                region=region,
            )
        )
        self._wake.set()

    # --- receiving -----------------------------------------------------------------------------

    def _receive(self, stream: _StoreStream) -> None:
        try:
            for response in stream.call:
                self._handle(stream, response)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.UNAUTHENTICATED:
                refusal = f"TiKV store {stream.store_id} at {stream.address}: {certificate_refused(exc.details())}"
                log.error("%s", refusal)
                with self._lock:
                    stream.refused = True
                    if self.failure is None:
                        self.failure = FeedRefusedError(refusal)
            elif not self._closed.is_set() and stream.alive:
                log.warning("EventFeed stream to store %d at %s broke: %s", stream.store_id, stream.address, exc.code())
        except Exception:
            log.exception("EventFeed stream to store %d failed", stream.store_id)
        finally:
            self._stream_ended(stream)

    def _stream_ended(self, stream: _StoreStream) -> None:
        with self._lock:
            stream.alive = False
            streams = self._streams.get(stream.store_id, [])
            if stream in streams:
                streams.remove(stream)
            if self._closed.is_set():
                return
            if not streams:  # its last stream: look the store up again (closing the channel)
                self.regions.forget_store(stream.store_id)
            for subscription in list(stream.regions.values()):
                if self._forget(subscription) and not stream.refused:
                    self._retry_span(subscription, self.retry_delay_s, f"stream to store {stream.store_id} ended")

    def _handle(self, stream: _StoreStream, response: cdcpb_pb2.ChangeDataEvent) -> None:
        for event in response.events:
            kind = event.WhichOneof("event")
            with self._lock:
                subscription = self._subscriptions.get(event.request_id)
            if subscription is None:
                continue  # deregistered or replaced
            if kind == "entries":
                self._handle_rows(subscription, event.entries.entries)
            elif kind == "resolved_ts":
                self._advance(subscription, event.resolved_ts)
            elif kind == "error":
                self._handle_error(subscription, event.error)
        if response.HasField("resolved_ts"):
            # Batched: request_id 0 (per stream), or a subscription's own (stream multiplexing).
            resolved = response.resolved_ts
            with self._lock:
                found = (stream.regions.get(region_id) for region_id in resolved.regions)
                targets = [s for s in found if s is not None and resolved.request_id in (0, s.request_id)]
            for subscription in targets:
                self._advance(subscription, resolved.ts)

    def _advance(self, subscription: _Subscription, ts: int) -> None:
        # Before INITIALIZED, the incremental scan is still running: its resolved-ts means nothing.
        # Taken less the safety interval (the module docstring: a resolved-ts from an old leader).
        if not subscription.initialized or ts <= subscription.store_resolved_ts:
            return
        subscription.store_resolved_ts = ts
        subscription.advanced_at = time.monotonic()
        safe = ts - self.safety_ts
        subscription.resolved_ts = max(subscription.resolved_ts, safe)

    def _handle_error(self, subscription: _Subscription, error: cdcpb_pb2.Error) -> None:
        with self._lock:
            if not self._forget(subscription):
                return
            kind = _error_kind(error)
            refusal = self._refusal(subscription, error, kind)
            if refusal is not None:
                # TiKV-CDC ends the changefeed on these too (tikv/migration cdc/cdc/kv/client.go
                # handleError: ErrVersionIncompatible, ErrClusterIDMismatch, a panic on duplicates).
                log.error("%s", refusal)
                if self.failure is None:
                    self.failure = FeedRefusedError(refusal)
                return
            delay = self.retry_delay_s
            why = f"region {subscription.region.id}: {kind}"
            if kind == "not_leader" and error.not_leader.leader.store_id:
                hinted = subscription.region.with_hinted_leader(error.not_leader.leader)
                if hinted is not None:
                    self._retry_span(subscription, 0.0, f"{why}, led from store {hinted.leader_store_id}", hinted)
                    return
            if kind in ("server_is_busy", "congested"):
                delay = max(delay, 1.0)
            self._retry_span(subscription, delay, why)

    def _refusal(self, subscription: _Subscription, error: cdcpb_pb2.Error, kind: str) -> str | None:
        """What to tell the user about an error TiKV will answer again however often it is asked
        (tikv/tikv components/cdc/src/endpoint.rs on_register), or None for a retryable one."""
        store = f"TiKV store {subscription.stream.store_id} at {subscription.stream.address}"
        if kind == "compatibility":
            return (
                f"{store} refused the RawKV change feed (required_version "
                f"{error.compatibility.required_version}): RawKV CDC needs TiKV >= 6.2 running with "
                f"storage.api-version = 2"
            )
        if kind == "cluster_id_mismatch":
            return (
                f"{store} belongs to cluster {error.cluster_id_mismatch.current} but PD at {self.pd.endpoints} is "
                f"cluster {error.cluster_id_mismatch.request}: pd_endpoints point at a different cluster than "
                f"the stores PD names"
            )
        if kind == "duplicate_request":
            return (
                f"{store} refused region {subscription.region.id} registered twice on one stream "
                f"(duplicate_request): a cdcflow bug, please report it"
            )
        return None

    def _handle_rows(self, subscription: _Subscription, rows: Iterable[cdcpb_pb2.Event.Row]) -> None:
        """Rows of the subscription's span become items; every other row is dropped first.

        TiKV's RawKV incremental scan reads the subscription's whole region within ``[r, s)``
        (tikv/tikv components/cdc/src/initializer.rs), so its rows include other partitions' keys
        and other keyspaces' keys sharing the region: they are not errors, and are counted, not
        rejected. Only a row inside the span can be rejected (it is then always of this keyspace,
        as the span lies within it; the prefix check stays as a guard).
        """
        items: list[Item] = []
        prefix = self._prefix
        start, end = subscription.request_start, subscription.request_end
        cut = len(prefix)
        outside = 0
        for row in rows:
            row_type = row.type
            if row_type == _INITIALIZED:
                with self._lock:
                    if not subscription.initialized and subscription.request_id in self._subscriptions:
                        self._scan_ended(subscription)
                    subscription.initialized = True
                subscription.advanced_at = time.monotonic()  # the stuck-region clock starts here
                continue
            key = row.key
            if key < start or (end and key >= end):
                outside += 1
                continue
            if row_type != _COMMITTED:
                items.append(_rejected(row, f"log type {cdcpb_pb2.Event.LogType.Name(row_type)} in a RawKV feed"))
                continue
            if not key.startswith(prefix):
                items.append(_rejected(row, f"key is not a RawKV key of keyspace {self.codec.keyspace_id}"))
                continue
            ts = row.commit_ts or row.start_ts
            op = row.op_type
            if op == _PUT:  # an empty value is a value (RawKV stores it), never a delete
                items.append(Item(ts, key[cut:], ts, PUT, row.value, row.expire_ts_unix_secs, ""))
            elif op == _DELETE:
                items.append(Item(ts, key[cut:], ts, DELETE, b"", 0, ""))
            else:
                items.append(_rejected(row, f"unknown op type {op} (a value meta flag TiKV could not map)"))
        if outside:
            self.on_rows_outside_span(outside)
        if items:
            self.on_rows(subscription.partition_id, items)


_COMMITTED = cdcpb_pb2.Event.COMMITTED
_INITIALIZED = cdcpb_pb2.Event.INITIALIZED
_PUT = _ROW.PUT
_DELETE = _ROW.DELETE
_ERROR_FIELDS = (
    "not_leader",
    "region_not_found",
    "epoch_not_match",
    "duplicate_request",
    "compatibility",
    "cluster_id_mismatch",
    "server_is_busy",
    "congested",
)


def _error_kind(error: cdcpb_pb2.Error) -> str:
    return next((name for name in _ERROR_FIELDS if error.HasField(name)), "unknown error")


def _rejected(row: cdcpb_pb2.Event.Row, reason: str) -> Item:
    ts = row.commit_ts or row.start_ts
    return Item(ts, bytes(row.key), ts, REJECTED, bytes(row.value), row.expire_ts_unix_secs, reason)
