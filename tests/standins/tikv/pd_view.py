"""What PD knows of the regions: a tree filled by region heartbeats, which can lag the stores.

PD never reads a region from TiKV; it learns each one from the heartbeat its leader sends, and
keeps them in a tree by start key (tikv/pd ``pkg/core/region_tree.go`` at a186e0cc). Putting a
region deletes every region it overlaps, then inserts it (``regionTree.update``, region_tree.go:
171-191). So after a split, whichever half reports first deletes the old, wider region, and the
other half's range is a *hole* until its own heartbeat comes: ``ScanRegions`` skips it
(``RegionsInfo.ScanRegions`` / ``regionTree.scanRange``, region_tree.go:331-346: the scan starts at
the region holding the start key, or the first one after it) and ``GetRegion`` of a key in it
answers a header without a region (pkg/utils/grpcutil/cluster.go:39-46). client-go retries both
(internal/locate/region_cache.go:2407 "region not found for key", 2554 "PD returned regions have
gaps"), as TiKV-CDC does (``CheckRegionsLeftCover``, tikv/migration cdc/cdc/kv/client.go:910-934).

A PD member that becomes leader loads the regions from its storage without leaders
(pkg/storage/endpoint/meta.go:210 ``core.NewRegionInfo(region, nil, core.SetSource(core.Storage))``)
until each region's leader heartbeats again; client-go retries such regions ("All returned
regions have no leaders", region_cache.go:2565).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from cdcflow.sources.tikv_client.proto import metapb_pb2


@dataclass(frozen=True)
class PDRegion:
    """A region as its last heartbeat described it; ``leader`` None: loaded from storage."""

    meta: metapb_pb2.Region
    leader: metapb_pb2.Peer | None
    start: bytes = field(init=False)
    end: bytes = field(init=False)  # empty: the end of the key space

    def __post_init__(self) -> None:
        object.__setattr__(self, "start", bytes(self.meta.start_key))
        object.__setattr__(self, "end", bytes(self.meta.end_key))

    def holds(self, key: bytes) -> bool:
        return self.start <= key and (not self.end or key < self.end)


class RegionTree:
    """PD's region tree; not thread-safe (the cluster's lock guards it)."""

    def __init__(self) -> None:
        self._starts: list[bytes] = []
        self._regions: list[PDRegion] = []
        self._by_id: dict[int, PDRegion] = {}

    def put(self, region: PDRegion) -> None:
        """A heartbeat. A stale one (an older epoch than the region PD holds, same id) is
        ignored, as PD's ``PreCheckPutRegion`` refuses it; otherwise every overlapping region is
        deleted and this one inserted (region_tree.go:171-191)."""
        held = self._by_id.get(region.meta.id)
        if held is not None:
            old, new = held.meta.region_epoch, region.meta.region_epoch
            if new.version < old.version or new.conf_ver < old.conf_ver:
                return
            self.remove(held.meta.id)
        # The regions it overlaps lie together in start order: from the one holding its start
        # (or the first after it) to the last starting before its end.
        low = bisect.bisect_right(self._starts, region.start) - 1
        if low < 0 or not self._regions[low].holds(region.start):
            low = bisect.bisect_left(self._starts, region.start)
        high = bisect.bisect_left(self._starts, region.end) if region.end else len(self._regions)
        for overlapped in self._regions[low:high]:
            del self._by_id[overlapped.meta.id]
        self._regions[low:high] = [region]
        self._starts[low:high] = [region.start]
        self._by_id[region.meta.id] = region

    def remove(self, region_id: int) -> None:
        region = self._by_id.pop(region_id, None)
        if region is not None:
            index = bisect.bisect_left(self._starts, region.start)  # starts are distinct: no overlaps
            del self._regions[index]
            del self._starts[index]

    def get_by_key(self, key: bytes) -> PDRegion | None:
        index = bisect.bisect_right(self._starts, key) - 1
        if index >= 0 and self._regions[index].holds(key):
            return self._regions[index]
        return None

    def get_by_id(self, region_id: int) -> PDRegion | None:
        return self._by_id.get(region_id)

    def scan(self, start: bytes, end: bytes, limit: int) -> list[PDRegion]:
        """``RegionsInfo.ScanRegions``: from the region holding ``start`` (or the first after
        it) while a region starts before ``end``; ``limit`` <= 0: no limit."""
        index = bisect.bisect_right(self._starts, start) - 1
        if index < 0 or not self._regions[index].holds(start):
            index = bisect.bisect_left(self._starts, start)
        out: list[PDRegion] = []
        for region in self._regions[max(index, 0) :]:
            if end and region.start >= end:
                break
            if limit > 0 and len(out) >= limit:
                break
            out.append(region)
        return out

    def forget_leaders(self) -> None:
        """A new PD leader's view: every region as loaded from storage, without its leader."""
        self._regions = [PDRegion(r.meta, None) for r in self._regions]
        self._by_id = {r.meta.id: r for r in self._regions}

    def all(self) -> list[PDRegion]:
        return list(self._regions)
