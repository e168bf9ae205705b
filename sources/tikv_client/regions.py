"""A cache of regions and store addresses, filled from PD and corrected by region errors."""

from __future__ import annotations

import bisect
import threading
import time

import grpc

from cdcflow.sources.tikv_client.exceptions import RegionNotInPDError
from cdcflow.sources.tikv_client.pd import PDClient, RegionInfo, grpc_channel
from cdcflow.sources.tikv_client.proto import metapb_pb2

__all__ = ["RegionCache"]


class RegionCache:
    """Regions by start key, store addresses and one gRPC channel per store. Thread-safe."""

    def __init__(self, pd: PDClient) -> None:
        self.pd = pd
        self._lock = threading.Lock()
        self._starts: list[bytes] = []
        self._regions: list[RegionInfo] = []  # in key order, never overlapping
        self._start_of: dict[int, bytes] = {}  # region id -> its start key, to find it by bisect
        self._addresses: dict[int, str] = {}
        self._channels: dict[str, grpc.Channel] = {}

    def locate(self, region_key: bytes) -> RegionInfo:
        """The region holding ``region_key``, from the cache or else from PD. A key in a hole of
        PD's tree is asked again with backoff (client-go ``loadRegion``: "region not found for
        key", BoRegionMiss) until PD knows it or ``pd.timeout_s`` passes
        (:class:`RegionNotInPDError` then)."""
        with self._lock:
            index = bisect.bisect_right(self._starts, region_key) - 1
            if index >= 0 and self._regions[index].contains(region_key):
                return self._regions[index]
        deadline = time.monotonic() + self.pd.timeout_s
        delay = 0.002
        while True:
            try:
                region = self.pd.get_region(region_key)
                break
            except RegionNotInPDError:
                if time.monotonic() + delay > deadline:
                    raise
                time.sleep(delay)
                delay = min(0.5, delay * 2)
        self.insert(region)
        return region

    def insert(self, region: RegionInfo) -> None:
        """Remembers ``region``, dropping the cached regions it overlaps (they are older). The
        cached regions never overlap, so those it overlaps lie together in start order."""
        with self._lock:
            self._drop(region.id)
            low = bisect.bisect_right(self._starts, region.start_key) - 1
            if low < 0 or not self._regions[low].contains(region.start_key):
                low = bisect.bisect_left(self._starts, region.start_key)
            high = bisect.bisect_left(self._starts, region.end_key) if region.end_key else len(self._regions)
            for overlapped in self._regions[low:high]:
                self._start_of.pop(overlapped.id, None)
            self._regions[low:high] = [region]
            self._starts[low:high] = [region.start_key]
            self._start_of[region.id] = region.start_key

    def invalidate(self, region_id: int) -> None:
        with self._lock:
            self._drop(region_id)

    def _drop(self, region_id: int) -> None:
        start = self._start_of.pop(region_id, None)
        if start is None:
            return
        index = bisect.bisect_left(self._starts, start)
        if index < len(self._regions) and self._regions[index].id == region_id:
            del self._regions[index]
            del self._starts[index]

    def update_leader(self, region_id: int, leader: metapb_pb2.Peer) -> bool:
        """Points a cached region at its new leader; False when the region is not cached or the
        leader is not one of its voters (then the region must be read from PD again)."""
        with self._lock:
            start = self._start_of.get(region_id)
            if start is None:
                return False
            index = bisect.bisect_left(self._starts, start)
            hinted = self._regions[index].with_hinted_leader(leader)
            if hinted is None:
                return False
            self._regions[index] = hinted
            return True

    def leader_store(self, region: RegionInfo) -> tuple[int, metapb_pb2.Peer]:
        """The store id and peer a request for ``region`` goes to: its leader, else (PD has not
        heard from it since PD's leader changed) its first voter, which names the leader in
        its not_leader answer. Never a learner: one never leads (client-go region_cache.go
        ``findElectableStoreID``)."""
        if region.leader is not None and region.leader.id:
            return int(region.leader.store_id), region.leader
        voter = next((p for p in region.meta.peers if p.role != metapb_pb2.Learner), None)
        if voter is None:
            raise RegionNotInPDError(f"{region.describe()} lists no voter to ask for its leader")
        return int(voter.store_id), voter

    def channel_for_store(self, store_id: int) -> tuple[str, grpc.Channel]:
        with self._lock:
            address = self._addresses.get(store_id)
        if address is None:
            address = self.pd.get_store_address(store_id)
        with self._lock:
            self._addresses[store_id] = address
            channel = self._channels.get(address)
            if channel is None:
                channel = self._channels[address] = grpc_channel(address, self.pd.tls)
            return address, channel

    def forget_store(self, store_id: int) -> None:
        """The store did not answer: its address is looked up again next time."""
        with self._lock:
            address = self._addresses.pop(store_id, None)
            channel = self._channels.pop(address, None) if address is not None else None
        if channel is not None:
            channel.close()

    def close(self) -> None:
        with self._lock:
            channels = list(self._channels.values())
            self._channels.clear()
        for channel in channels:
            channel.close()
