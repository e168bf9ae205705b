"""The stand-in cluster's state: TSO, stores, regions, MVCC storage, feeds, GC safepoints.

One lock guards everything, so a write, the feed rows it produces and a resolved-ts computed
after it are ordered exactly as TiKV promises on one store: a resolved-ts is sent only once every
write with a smaller timestamp has been sent. What TiKV does *not* promise, the stand-in does not
either: each store stamps writes and resolved-ts from its own cache of PD timestamps
(:mod:`causal_ts`), PD's picture of the regions lags the stores (:mod:`pd_view`), and a leader
transfer can let the old leader send one more resolved-ts after the new leader's first write
(:meth:`Cluster.transfer_leader` with ``linger``). docs/tikv.md lists each behaviour with its
upstream source.
"""

from __future__ import annotations

import bisect
import itertools
import queue
import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from cdcflow.sources.tikv_client.codec import (
    RawValue,
    compose_ts,
    decode_memcomparable,
    decode_raw_value,
    encode_memcomparable,
    encode_raw_value,
    encode_storage_key,
)
from cdcflow.sources.tikv_client.proto import cdcpb_pb2, errorpb_pb2, kvrpcpb_pb2, metapb_pb2
from tests.standins.tikv.causal_ts import CausalTsProvider
from tests.standins.tikv.pd_view import PDRegion, RegionTree

SCAN_BATCH_ROWS = 256  # rows per incremental-scan event (TiKV batches by max_scan_batch_bytes/size)
RAW_RANGE = (b"r", b"s")  # api_version ApiV2::get_rawkv_range: every RawKV key of every keyspace
# cdc.incremental-scan-concurrency-limit and cdc.sink-memory-quota (tikv/tikv src/config/mod.rs:
# 3308, 3316 at 8e964719)
SCAN_CONCURRENCY_LIMIT = 10_000
SINK_MEMORY_QUOTA = 512 << 20
PD_MEMBERS = 3


class TSO:
    """PD's timestamp oracle: physical milliseconds from the clock, a logical counter within one."""

    def __init__(self) -> None:
        self.physical = 0
        self.logical = 0
        # Its own lock, taken last: a store renewing its cache holds the provider's lock and asks
        # here, while a write holds the cluster's and asks the provider.
        self._lock = threading.Lock()

    def next(self, count: int = 1) -> int:
        """The last of ``count`` fresh timestamps."""
        with self._lock:
            now = int(time.time() * 1000)
            if now > self.physical:
                self.physical, self.logical = now, 0
            self.logical += count
            if self.logical >= 1 << 18:
                self.physical, self.logical = self.physical + 1, count
            return compose_ts(self.physical, self.logical)


@dataclass
class Region:
    id: int
    start: bytes  # region-key space: memcomparable request keys
    end: bytes
    conf_ver: int
    version: int
    peers: dict[int, int]  # store id -> peer id
    leader_store: int
    learners: set[int] = field(default_factory=set)  # stores whose peer is a learner (never leads)

    def contains(self, region_key: bytes) -> bool:
        return self.start <= region_key and (not self.end or region_key < self.end)

    def meta(self) -> metapb_pb2.Region:
        return metapb_pb2.Region(
            id=self.id,
            start_key=self.start,
            end_key=self.end,
            region_epoch=metapb_pb2.RegionEpoch(conf_ver=self.conf_ver, version=self.version),
            peers=[
                metapb_pb2.Peer(id=p, store_id=s, role=metapb_pb2.Learner if s in self.learners else metapb_pb2.Voter)
                for s, p in sorted(self.peers.items())
            ],
        )

    def leader(self) -> metapb_pb2.Peer:
        return metapb_pb2.Peer(id=self.peers[self.leader_store], store_id=self.leader_store)


@dataclass
class Subscription:
    connection: FeedConnection
    request_id: int
    region_id: int
    start: bytes  # region-key space, the requested span
    end: bytes
    initialized: bool = False
    raw: bool = True  # kv_api RawKV; a TiDB feed sees no RawKV writes (the stand-in holds no others)

    def observes(self, region_key: bytes) -> bool:
        return self.start <= region_key and (not self.end or region_key < self.end)

    def send_rows(self, rows: list[cdcpb_pb2.Event.Row]) -> None:
        entries = cdcpb_pb2.Event.Entries(entries=rows)
        event = cdcpb_pb2.Event(region_id=self.region_id, request_id=self.request_id, entries=entries)
        self.connection.put(cdcpb_pb2.ChangeDataEvent(events=[event]))


# semver.org's regular expression: Rust's `semver::Version::parse`, which TiKV uses, is as strict
# (MAJOR.MINOR.PATCH, no leading `v`, no leading zeros; "6.2" and "cdcflow" are refused).
_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)
BATCH_RESOLVED_TS = "batch_resolved_ts"
VALIDATE_CLUSTER_ID = "validate_cluster_id"


@dataclass(frozen=True, order=True)
class SemVer:
    """A version as TiKV compares them; a pre-release sorts before its release."""

    major: int
    minor: int
    patch: int
    release: int = 1  # 0: a pre-release (4.0.8-alpha < 4.0.8)
    pre: str = ""

    @classmethod
    def parse(cls, text: str) -> SemVer:
        """``text`` as TiKV reads a ``ticdc_version``: anything unparsable is 0.0.0
        (tikv/tikv components/cdc/src/service.rs ``parse_version_from_request_header``)."""
        match = _SEMVER.match(text)
        if match is None:
            return cls(0, 0, 0)
        major, minor, patch, pre = match.group(1, 2, 3, 4)
        return cls(int(major), int(minor), int(patch), 0 if pre else 1, pre or "")

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}" + (f"-{self.pre}" if self.pre else "")

    def features(self) -> frozenset[str]:
        # service.rs FeatureGate::default_features: >= 4.0.8 batched resolved-ts, >= 5.3.0 the
        # cluster-id check. (STREAM_MULTIPLEXING needs EventFeedV2, which the stand-in lacks.)
        features = set()
        if self >= SemVer(4, 0, 8):
            features.add(BATCH_RESOLVED_TS)
        if self >= SemVer(5, 3, 0):
            features.add(VALIDATE_CLUSTER_ID)
        return frozenset(features)


@dataclass(eq=False)
class FeedConnection:
    """One EventFeed stream to one store."""

    store_id: int
    outbox: queue.Queue[cdcpb_pb2.ChangeDataEvent | BaseException] = field(default_factory=queue.Queue)
    subscriptions: list[Subscription] = field(default_factory=list)
    closed: bool = False
    # The client's version: from the first request of the stream (service.rs handle_event_feed,
    # "Get version from the first request in the stream"), never changed afterwards.
    version: SemVer | None = None
    features: frozenset[str] = frozenset()
    queued_bytes: int = 0  # events put and not yet sent: what TiKV's sink memory quota counts

    def put(self, event: cdcpb_pb2.ChangeDataEvent | BaseException) -> None:
        if isinstance(event, cdcpb_pb2.ChangeDataEvent):
            self.queued_bytes += event.ByteSize()
        self.outbox.put(event)

    def sent(self, event: cdcpb_pb2.ChangeDataEvent) -> None:
        self.queued_bytes -= event.ByteSize()


@dataclass
class Version:
    ts: int
    value: bytes  # API V2 stored value: user value, optional expire ts, meta byte


def _varint_len(value: int) -> int:
    return max(1, (value.bit_length() + 6) // 7)


def _field_len(payload: int) -> int:
    """A length-delimited protobuf field: one-byte tag, varint length, payload."""
    return 1 + _varint_len(payload) + payload


RAFT_HEADER_BYTES = 48  # RaftRequestHeader: region id, peer, epoch, term (approximate)


def raft_entry_size(writes: list[tuple[bytes, bytes]]) -> int:
    """The serialized size of the RaftCmdRequest that TiKV proposes for RawKV API V2 writes
    (request key, stored value): tikv_kv ``Modify::Put`` becomes ``Request{cmd_type: Put,
    put: PutRequest{key: memcomparable key + 8-byte ts, value}}`` (components/tikv_kv/src/lib.rs),
    and raftstore compares ``req.write_to_bytes().len()`` with raft-entry-max-size
    (components/raftstore/src/store/peer.rs, before proposing). The storage key is the
    memcomparable request key and the write's timestamp; the header is approximated."""
    total = _field_len(RAFT_HEADER_BYTES)
    for key, value in writes:
        put = _field_len(len(key)) + _field_len(len(value))
        total += _field_len(2 + _field_len(put))  # cmd_type varint, then the put
    return total


class Cluster:
    def __init__(
        self,
        cluster_id: int,
        store_ids: list[int],
        tikv_version: str = "8.5.0",
        api_version: int = 2,
        store_cluster_id: int | None = None,
        raft_entry_max_size: int = 8 << 20,
        scan_concurrency_limit: int = SCAN_CONCURRENCY_LIMIT,
        sink_memory_quota: int = SINK_MEMORY_QUOTA,
    ) -> None:
        self.lock = threading.RLock()
        self.cluster_id = cluster_id  # PD's
        # The id the TiKV stores were bootstrapped with; another one than PD's emulates
        # pd_endpoints that point at a different cluster than the stores a client reaches.
        self.store_cluster_id = cluster_id if store_cluster_id is None else store_cluster_id
        # TiKV's storage.api-version. The stand-in stores API V2 data only: with 1, every RawKV
        # request is refused as TiKV refuses V2 requests on V1 storage, and so is a RawKV feed.
        self.api_version = api_version
        # raftstore raft-entry-max-size (components/raftstore/src/store/config.rs: 8 MiB default)
        self.raft_entry_max_size = raft_entry_max_size
        self.region_errors_sent: dict[str, int] = {}  # by variant, what RawKV requests were answered
        # The TiKV release emulated: before 7.3.0 a stream holds one subscription per region and
        # checks the client version on every Register (tikv v6.5.0 components/cdc/src/service.rs
        # Conn::subscribe / check_version_and_set_feature).
        self.tikv_version = SemVer.parse(tikv_version)
        if self.tikv_version == SemVer(0, 0, 0):
            raise ValueError(f"--tikv-version must be MAJOR.MINOR.PATCH, not {tikv_version!r}")
        self.tso = TSO()
        self.store_ids = store_ids
        self.store_addresses: dict[int, str] = {}
        self._ids = itertools.count(1000)
        peers = {s: next(self._ids) for s in store_ids}
        first = Region(next(self._ids), b"", b"", 1, 1, peers, store_ids[0])
        self.regions: list[Region] = [first]  # in key order
        self._region_starts: list[bytes] = [first.start]  # the regions' starts, for bisect
        self._regions_by_id: dict[int, Region] = {first.id: first}
        self.keys: list[bytes] = []  # sorted request keys
        self.versions: dict[bytes, list[Version]] = {}
        self.gc_safe_point = 0
        self.service_safe_points: dict[str, tuple[int, float]] = {}
        self.connections: list[FeedConnection] = []
        self.injected: dict[tuple[int | None, str], int] = {}  # (store or None, kind) -> remaining count
        self.injected_variant = ""  # the errorpb.Error field an injected region_error sets
        self.injected_pd_error_type = 1
        self.registers = 0  # Register requests received, refused ones included
        self.feed_errors_sent: dict[str, int] = {}  # Register refusals, by cdcpb.Error field
        self.pd_requests: dict[str, int] = {}  # PD calls the leader served, by method
        self.scan_gate = threading.Event()  # cleared: incremental scans wait before each batch
        self.scan_gate.set()
        self.scans_waiting = 0
        # endpoint.rs:853-872 (on_register): registrations whose incremental scan has not ended,
        # per store; one more above the limit is refused with server_is_busy.
        self.scan_concurrency_limit = scan_concurrency_limit
        self.scans_pending: dict[int, int] = dict.fromkeys(store_ids, 0)
        self.scans_pending_peak: dict[int, int] = dict.fromkeys(store_ids, 0)  # the most at once, for tests
        # errors.rs:104-108, delegate.rs:212: events a stream has not taken above the sink memory
        # quota end the subscription they were for with ``congested``.
        self.sink_memory_quota = sink_memory_quota
        # Each store's causal timestamps (causal_ts.py), renewed by the 100 ms ticker (tick()).
        self.providers: dict[int, CausalTsProvider] = {s: CausalTsProvider(self._pd_tso) for s in store_ids}
        # Old leaders still holding their subscriptions of a region after a lingering transfer.
        self.lingering: dict[int, int] = {}  # region id -> the store that led it
        # PD: its members (one leader, or none during an election), its view of the regions
        # (pd_view.py), heartbeats not yet delivered, and the stores it forgot.
        self.pd_members = list(range(1, PD_MEMBERS + 1))
        self.pd_leader: int | None = 1
        self.pd_urls: dict[int, str] = {}
        self.pd_tree = RegionTree()
        self.pd_heartbeats_due: list[tuple[float, int]] = []  # (monotonic due time, region id)
        self.pd_election_ends: tuple[float, int] | None = None  # (due, the member that wins)
        self.purged_stores: set[int] = set()
        self.pd_stopped: set[int] = set()  # PD members whose process is gone
        # Set by the server process: start a new store's gRPC server (returns its address), stop one.
        self.start_store_server: Any = None
        self.stop_store_server: Any = None
        self.stop_pd_server: Any = None
        self._heartbeat(first)

    def _pd_tso(self, count: int) -> int:
        """PD's Tso with ``count`` (a store renewing its causal timestamps): the last of them."""
        return self.tso.next(count)

    def tick(self) -> None:
        """What happens on its own every 100 ms: each store renews its timestamp cache, heartbeats
        that were held back reach PD, a PD election ends."""
        for provider in list(self.providers.values()):
            provider.renew()
        now = time.monotonic()
        with self.lock:
            due = [region_id for when, region_id in self.pd_heartbeats_due if when <= now]
            self.pd_heartbeats_due = [(w, r) for w, r in self.pd_heartbeats_due if w > now]
            for region_id in due:
                region = self.region_by_id(region_id)
                if region is not None:
                    self._heartbeat(region)
            if self.pd_election_ends is not None and self.pd_election_ends[0] <= now:
                self.pd_leader = self.pd_election_ends[1]
                self.pd_election_ends = None

    # --- PD's view -------------------------------------------------------------------------

    def _heartbeat(self, region: Region) -> None:
        """The region's leader reports it to PD (pd_view.py: PD's tree takes it, deleting what it
        overlaps)."""
        self.pd_tree.put(PDRegion(region.meta(), region.leader()))

    def report_heartbeats(self) -> int:
        """Delivers every held-back heartbeat now; returns how many."""
        with self.lock:
            due = [region_id for _, region_id in self.pd_heartbeats_due]
            self.pd_heartbeats_due = []
            for region_id in due:
                region = self.region_by_id(region_id)
                if region is not None:
                    self._heartbeat(region)
            return len(due)

    def _heartbeat_later(self, region_id: int, delay_s: float) -> None:
        self.pd_heartbeats_due.append((time.monotonic() + delay_s, region_id))

    def pd_failover(self, to: int, election_s: float, heartbeats_after_s: float) -> None:
        """PD's leader steps down: for ``election_s`` no member leads (every member answers "not
        leader"; GetMembers names no leader), then member ``to`` does, with the regions loaded
        from storage, leaderless (pd_view.py), until each region's leader heartbeats again
        ``heartbeats_after_s`` later (TiKV's region heartbeat tick; 0: only report_heartbeats)."""
        assert to in self.pd_members, f"PD has members {self.pd_members}, not {to}"
        with self.lock:
            self.pd_leader = None
            self.pd_election_ends = (time.monotonic() + election_s, to)
            self.pd_tree.forget_leaders()
            if heartbeats_after_s > 0:
                for region in self.regions:
                    self._heartbeat_later(region.id, election_s + heartbeats_after_s)
        if election_s <= 0:
            self.tick()

    def pd_stop_member(self, member: int, election_s: float, heartbeats_after_s: float) -> int | None:
        """PD member ``member``'s process dies: its port stops answering (the member stays listed
        in GetMembers, as in etcd until removed). When it led, the others elect a leader once its
        lease runs out (tikv/pd server/server.go 2011 ``campaignLeader``; leader-lease 5 s,
        server/config/config.go 178): for ``election_s`` none leads, then the first live member
        does, regions leaderless as in :meth:`pd_failover`. Returns the new leader (None: the
        member did not lead)."""
        assert self.stop_pd_server is not None, "only the server process stops PD members"
        with self.lock:
            assert member in self.pd_members and member not in self.pd_stopped
            self.pd_stopped.add(member)
            led = self.pd_leader == member or (self.pd_election_ends is not None and self.pd_election_ends[1] == member)
            successor = next(m for m in self.pd_members if m not in self.pd_stopped)
        self.stop_pd_server(member)
        if not led:
            return None
        self.pd_failover(successor, election_s, heartbeats_after_s)
        return successor

    # --- regions ---------------------------------------------------------------------------

    def region_of(self, region_key: bytes) -> Region:
        index = bisect.bisect_right(self._region_starts, region_key) - 1
        if index >= 0 and self.regions[index].contains(region_key):
            return self.regions[index]
        raise AssertionError(f"no region holds {region_key.hex()}")

    def region_by_id(self, region_id: int) -> Region | None:
        return self._regions_by_id.get(region_id)

    def split_many(self, request_keys: list[bytes], spread_leaders: bool = False) -> int:
        """Splits at every key (as :meth:`split`, each half reporting to PD at once), for a
        cluster of many regions; ``spread_leaders``: the regions' leaders are then spread over
        the stores in turn, as PD's balance-leader scheduler would (each store renews its
        timestamp cache once, as a leadership landing on it does). Returns the region count."""
        with self.lock:
            for key in sorted(set(request_keys)):
                self.split(key)
            if spread_leaders:
                for index, region in enumerate(self.regions):
                    region.leader_store = self.store_ids[index % len(self.store_ids)]
                    self._heartbeat(region)
                for store_id in self.store_ids:
                    self.providers[store_id].flush()
            return len(self.regions)

    def split(self, request_key: bytes, hole_s: float = 0.0, first: str = "left") -> list[int]:
        """Splits the region holding ``request_key`` there; returns the two region ids, left
        first. As raftstore's default right-derive-when-split = true (store/config.rs), the
        original id keeps the right part; the subscriptions of the region end with
        epoch_not_match listing both (delegate.rs sink_admin).

        Both halves report to PD at once, unless ``hole_s`` > 0: then only the ``first`` half
        ("left" or "right") does, and PD's tree has a hole where the other half lies for
        ``hole_s`` seconds (or until report_heartbeats), as between two heartbeats (pd_view.py)."""
        with self.lock:
            at = encode_memcomparable(request_key)
            old = self.region_of(at)
            if old.start == at:
                return [old.id]
            left = Region(
                next(self._ids),
                old.start,
                at,
                old.conf_ver,
                old.version + 1,
                {s: next(self._ids) for s in old.peers},
                old.leader_store,
            )
            index = bisect.bisect_right(self._region_starts, at) - 1  # old's place: left takes it
            old.start = at
            old.version += 1
            self.regions.insert(index, left)
            self._region_starts.insert(index + 1, at)
            self._regions_by_id[left.id] = left
            if hole_s > 0:
                reported, held = (left, old) if first == "left" else (old, left)
                self._heartbeat(reported)
                self._heartbeat_later(held.id, hole_s)
            else:
                self._heartbeat(left)
                self._heartbeat(old)
            self._fail_subscriptions(old.id, _epoch_not_match([left, old]))
            return [left.id, old.id]

    def merge(self, left_id: int) -> int:
        """Merges the region after ``left_id`` into it; returns the merged region's id. The
        subscriptions of both end with epoch_not_match and no regions listed (delegate.rs
        sink_admin on PrepareMerge / CommitMerge)."""
        with self.lock:
            left = self.region_by_id(left_id)
            assert left is not None and left.end, f"region {left_id} has no right neighbour"
            right = self.region_of(left.end)
            left.end = right.end
            left.version = max(left.version, right.version) + 1
            index = bisect.bisect_left(self._region_starts, right.start)
            del self.regions[index]
            del self._region_starts[index]
            del self._regions_by_id[right.id]
            self.lingering.pop(right.id, None)
            # raftstore pd.rs:2175-2181: a merge renews the causal timestamps of the store that
            # leads the merged region, so its next write is above the source region's.
            self.providers[left.leader_store].flush()
            self._heartbeat(left)
            self._fail_subscriptions(right.id, _epoch_not_match([]))
            self._fail_subscriptions(left.id, _epoch_not_match([]))
            return left.id

    def conf_change(self, region_id: int) -> None:
        """A peer of the region replaced (raft ChangePeer): ``conf_ver`` moves, ``version`` does
        not, and CDC subscriptions go on (delegate.rs ``sink_admin`` ends them on splits and
        merges only)."""
        with self.lock:
            region = self.region_by_id(region_id)
            assert region is not None
            follower = next((s for s in sorted(region.peers) if s != region.leader_store), region.leader_store)
            region.peers[follower] = next(self._ids)
            region.conf_ver += 2  # one peer removed, one added
            self._heartbeat(region)

    def transfer_leader(self, region_id: int, store_id: int, linger: bool = False, pd_heartbeat_s: float = 0.0) -> None:
        """Moves the region's leadership to ``store_id``, whose causal timestamps are renewed
        first (raftstore pd.rs:2175-2190: the new leader's next timestamp is above anything its
        store handed out before). The old leader's subscriptions end with not_leader naming the
        new leader, at once, or, with ``linger``, only at :meth:`release_old_leader`: meanwhile
        the new leader takes writes and the old one still holds its subscriptions (they get no
        rows and no periodic resolved-ts, as it no longer leads).

        The new leader reports to PD on becoming leader (raftstore fsm/peer.rs 2321-2330
        ``on_role_changed``: ``heartbeat_pd``), through the PD worker: PD names the old leader
        until that heartbeat lands, at once here, or ``pd_heartbeat_s`` later."""
        with self.lock:
            region = self.region_by_id(region_id)
            assert region is not None and store_id in region.peers
            assert store_id not in region.learners, "a learner never leads (raft-rs refuses to transfer to one)"
            old = region.leader_store
            region.leader_store = store_id
            self.providers[store_id].flush()
            if pd_heartbeat_s > 0:
                self._heartbeat_later(region.id, pd_heartbeat_s)
            else:
                self._heartbeat(region)
            if linger and old != store_id:
                self.lingering[region.id] = old
                return
            error = cdcpb_pb2.Error(not_leader=errorpb_pb2.NotLeader(region_id=region.id, leader=region.leader()))
            self._fail_subscriptions(region.id, error, lambda s: s.connection.store_id != store_id)

    def demote_to_learner(self, region_id: int, store_id: int) -> None:
        """The region's voter on ``store_id`` becomes a learner (raft joint consensus,
        ChangePeerV2 DemoteVoter: conf_ver moves once entering and once leaving the joint
        state); it stays listed among the peers, where it was. client-go region_cache.go
        2234-2237: "a leader step down as a learner during a conf change". A leader is moved
        to the next voter first."""
        with self.lock:
            region = self.region_by_id(region_id)
            assert region is not None and store_id in region.peers and store_id not in region.learners
            if region.leader_store == store_id:
                voter = next(s for s in sorted(region.peers) if s != store_id and s not in region.learners)
                self.transfer_leader(region_id, voter)
            region.learners.add(store_id)
            region.conf_ver += 2
            self._heartbeat(region)

    def release_old_leader(self, region_id: int) -> int:
        """Ends a lingering transfer the way tikv/migration#193 describes: the old leader sends
        its subscriptions of the region one last resolved-ts, then not_leader. That resolved-ts is
        the old store's ``min_ts`` (endpoint.rs:1121-1143: taken from the store's causal
        timestamp provider, then the leadership check, then the send; the check can pass on a
        leadership that is already moving), drawn after the old store's cache was renewed by a
        leadership landing there (pd.rs:2175-2181), so it is above the new leader's first
        writes (PD hands out increasing timestamps). Returns the resolved-ts sent."""
        with self.lock:
            old = self.lingering.pop(region_id)
            region = self.region_by_id(region_id)
            assert region is not None
            provider = self.providers[old]
            provider.flush()
            resolved = provider.get_ts()
            for connection in self.connections:
                if connection.store_id != old:
                    continue
                live = [s for s in connection.subscriptions if s.region_id == region_id and s.initialized]
                self._send_resolved(connection, live, resolved)
            error = cdcpb_pb2.Error(not_leader=errorpb_pb2.NotLeader(region_id=region.id, leader=region.leader()))
            self._fail_subscriptions(region.id, error, lambda s: s.connection.store_id == old)
            return resolved

    # --- stores ----------------------------------------------------------------------------

    def add_store(self) -> int:
        """A new, empty store: its gRPC server is started and PD lists it."""
        assert self.start_store_server is not None, "only the server process starts stores"
        with self.lock:
            store_id = max([*self.store_ids, *self.purged_stores]) + 1
            self.store_ids.append(store_id)
            self.providers[store_id] = CausalTsProvider(self._pd_tso)
            self.scans_pending[store_id] = 0
        address = self.start_store_server(store_id)
        with self.lock:
            self.store_addresses[store_id] = address
        return store_id

    def purge_store(self, store_id: int) -> None:
        """Takes a store out for good, as PD does once every peer left it: each of its peers is
        replaced by one on a store the region has none on (conf_ver + 2), each of its leaders
        moves to another peer (whose cache is renewed), its streams break, its server stops,
        and PD no longer knows it (the store is tombstoned, then removed: GetStore answers
        "invalid store ID %d, not found", pd server/grpc_service.go:774-800)."""
        with self.lock:
            assert store_id in self.store_ids and len(self.store_ids) > 1
            others = [s for s in self.store_ids if s != store_id]
            for region in self.regions:
                if store_id not in region.peers:
                    continue
                del region.peers[store_id]
                spare = next((s for s in others if s not in region.peers), None)
                if spare is not None:
                    region.peers[spare] = next(self._ids)
                region.conf_ver += 2 if spare is not None else 1
                if region.leader_store == store_id:
                    region.leader_store = sorted(region.peers)[0]
                    self.providers[region.leader_store].flush()
                    error = cdcpb_pb2.Error(
                        not_leader=errorpb_pb2.NotLeader(region_id=region.id, leader=region.leader())
                    )
                    self._fail_subscriptions(region.id, error, lambda s: s.connection.store_id == store_id)
                self._heartbeat(region)
            for connection in list(self.connections):
                if connection.store_id == store_id:
                    self._close_connection(connection)
            self.store_ids.remove(store_id)
            self.purged_stores.add(store_id)
            self.store_addresses.pop(store_id, None)
            self.providers.pop(store_id, None)
        if self.stop_store_server is not None:
            self.stop_store_server(store_id)

    # --- requests --------------------------------------------------------------------------

    def check_request(
        self, store_id: int, context: kvrpcpb_pb2.Context, keys: Iterable[bytes]
    ) -> errorpb_pb2.Error | None:
        """The region error TiKV would answer for this request at this store, if any."""
        if self.take_injected(store_id, "region_error"):
            # errorpb.Error is not a oneof: a store may send a bare message, or a variant a
            # client does not know; nothing is set but the variant (with its region id).
            injected = errorpb_pb2.Error()
            if self.injected_variant:
                variant = getattr(injected, self.injected_variant)
                variant.SetInParent()
                if "region_id" in variant.DESCRIPTOR.fields_by_name:
                    variant.region_id = context.region_id
            return injected
        for kind in ("not_leader", "epoch_not_match", "server_is_busy"):
            if self.take_injected(store_id, kind):
                region = self.region_by_id(context.region_id)
                if kind == "server_is_busy":
                    return errorpb_pb2.Error(
                        message="injected",
                        server_is_busy=errorpb_pb2.ServerIsBusy(reason="injected busy", backoff_ms=5),
                    )
                if kind == "epoch_not_match" or region is None:
                    return errorpb_pb2.Error(
                        message="injected",
                        epoch_not_match=errorpb_pb2.EpochNotMatch(current_regions=[r.meta() for r in self.regions]),
                    )
                return errorpb_pb2.Error(message="injected", not_leader=errorpb_pb2.NotLeader(region_id=region.id))
        region = self.region_by_id(context.region_id)
        if region is None:
            return errorpb_pb2.Error(
                message="region not found", region_not_found=errorpb_pb2.RegionNotFound(region_id=context.region_id)
            )
        if store_id not in region.peers:
            return errorpb_pb2.Error(
                message="store not match", store_not_match=errorpb_pb2.StoreNotMatch(request_store_id=store_id)
            )
        if region.leader_store != store_id:
            return errorpb_pb2.Error(
                message="not leader", not_leader=errorpb_pb2.NotLeader(region_id=region.id, leader=region.leader())
            )
        # raftstore util.rs check_region_epoch with NORMAL_REQ_CHECK_VER = true and
        # NORMAL_REQ_CHECK_CONF_VER = false: "for get/set/delete, we don't care conf_version".
        epoch = context.region_epoch
        if epoch.version != region.version:
            return _region_error_epoch([r for r in self.regions if r.id == region.id or _adjacent(r, region)])
        for key in keys:
            region_key = encode_memcomparable(key)
            if not region.contains(region_key):
                return errorpb_pb2.Error(
                    message="key not in region",
                    key_not_in_region=errorpb_pb2.KeyNotInRegion(
                        key=key, region_id=region.id, start_key=region.start, end_key=region.end
                    ),
                )
        return None

    def check_entry_size(self, region_id: int, entries: list[tuple[bytes, RawValue]]) -> errorpb_pb2.Error | None:
        """RaftEntryTooLarge when the writes' raft command exceeds raft-entry-max-size, as
        raftstore answers it (components/raftstore/src/errors.rs: message "raft entry is too
        large, region {id}, entry size {n}" and errorpb field raft_entry_too_large)."""
        size = raft_entry_size([(encode_storage_key(k, 0), encode_raw_value(v)) for k, v in entries])
        if size <= self.raft_entry_max_size:
            return None
        return errorpb_pb2.Error(
            message=f"raft entry is too large, region {region_id}, entry size {size}",
            raft_entry_too_large=errorpb_pb2.RaftEntryTooLarge(region_id=region_id, entry_size=size),
        )

    def count_region_error(self, error: errorpb_pb2.Error) -> None:
        for descriptor, _ in error.ListFields():
            if descriptor.name != "message":
                self.region_errors_sent[descriptor.name] = self.region_errors_sent.get(descriptor.name, 0) + 1

    def take_injected(self, store_id: int | None, kind: str) -> bool:
        for target in ((store_id, kind), (None, kind)):
            remaining = self.injected.get(target, 0)
            if remaining > 0:
                self.injected[target] = remaining - 1
                return True
        return False

    def inject(self, kind: str, store_id: int | None, count: int) -> None:
        with self.lock:
            if kind == "stream_break":
                for connection in list(self.connections):
                    if store_id is None or connection.store_id == store_id:
                        self._close_connection(connection)
                return
            self.injected[(store_id, kind)] = self.injected.get((store_id, kind), 0) + count

    # --- storage ---------------------------------------------------------------------------

    def write(self, entries: list[tuple[bytes, RawValue]], store_id: int) -> int:
        """Stores one new version of each key at one timestamp of ``store_id``'s causal
        timestamp cache (src/storage/mod.rs:2423-2470 ``raw_put``: ``get_causal_ts`` once per
        command, every key of a batch at that timestamp) and feeds it to subscribers."""
        with self.lock:
            ts = self.providers[store_id].get_ts()
            rows: dict[int, list[tuple[Subscription, cdcpb_pb2.Event.Row]]] = {}
            for key, value in entries:
                versions = self.versions.get(key)
                if versions is None:
                    versions = self.versions[key] = []
                    bisect.insort(self.keys, key)
                versions.append(Version(ts, encode_raw_value(value)))
                self._feed(key, ts, value, rows)
            self._flush_feed(rows)
            return ts

    def _feed(
        self, key: bytes, ts: int, value: RawValue, rows: dict[int, list[tuple[Subscription, cdcpb_pb2.Event.Row]]]
    ) -> None:
        if not self.connections:
            return
        region_key = encode_memcomparable(key)
        region = self.region_of(region_key)
        for connection in self.connections:
            if connection.store_id != region.leader_store:
                continue
            for subscription in connection.subscriptions:
                if subscription.raw and subscription.region_id == region.id and subscription.observes(region_key):
                    rows.setdefault(id(subscription), []).append((subscription, _row(key, ts, value)))

    def _flush_feed(self, rows: dict[int, list[tuple[Subscription, cdcpb_pb2.Event.Row]]]) -> None:
        for pairs in rows.values():
            self._send_rows(pairs[0][0], [row for _, row in pairs])

    def _send_rows(self, subscription: Subscription, rows: list[cdcpb_pb2.Event.Row]) -> None:
        """Rows to a subscription, or, when its stream holds more unsent events than the sink
        memory quota, the end of the subscription with ``congested`` (errors.rs:104-108)."""
        connection = subscription.connection
        if connection.queued_bytes > self.sink_memory_quota:
            if subscription in connection.subscriptions:
                connection.subscriptions.remove(subscription)
                error = cdcpb_pb2.Error(congested=cdcpb_pb2.Congested(region_id=subscription.region_id))
                event = cdcpb_pb2.Event(
                    region_id=subscription.region_id, request_id=subscription.request_id, error=error
                )
                connection.put(cdcpb_pb2.ChangeDataEvent(events=[event]))
            return
        subscription.send_rows(rows)

    def delete_range(self, start: bytes, end: bytes) -> None:
        """RawDeleteRange under API V2 (tikv/tikv src/storage/mod.rs ``raw_delete_range``): one
        raft ``DeleteRange`` over the encoded keys without a timestamp, which removes every
        version of every key in [start, end) physically; no delete marker is written, and the
        CDC observer passes on Put commands only (components/cdc/src/delegate.rs "cdc skip other
        command"), so nothing reaches the feed."""
        with self.lock:
            doomed = self.keys_in(start, end)
            for key in doomed:
                del self.versions[key]
            low = bisect.bisect_left(self.keys, start)
            del self.keys[low : low + len(doomed)]

    def inject_row(self, row: cdcpb_pb2.Event.Row) -> None:
        """Sends ``row`` as it is to the subscribers observing its key, storing nothing."""
        with self.lock:
            region_key = encode_memcomparable(bytes(row.key))
            region = self.region_of(region_key)
            for connection in self.connections:
                for subscription in list(connection.subscriptions):
                    if subscription.region_id == region.id and connection.store_id == region.leader_store:
                        self._send_rows(subscription, [row])

    def live_value(self, key: bytes, now_s: float) -> RawValue | None:
        versions = self.versions.get(key)
        if not versions:
            return None
        value = decode_raw_value(versions[-1].value)
        if value.is_delete or (value.expire_ts is not None and value.expire_ts <= now_s):
            return None
        return value

    def keys_in(self, start: bytes, end: bytes) -> list[bytes]:
        """Stored request keys in [start, end) (``end`` empty: unbounded)."""
        low = bisect.bisect_left(self.keys, start)
        high = bisect.bisect_left(self.keys, end) if end else len(self.keys)
        return self.keys[low:high]

    # --- the change feed -------------------------------------------------------------------

    def register(self, connection: FeedConnection, request: cdcpb_pb2.ChangeDataRequest) -> None:
        """A Register, checked in the order of tikv/tikv components/cdc/src/endpoint.rs
        ``on_register`` (v6.5.0's order before 7.3.0); an error ends the request, nothing follows."""
        with self.lock:
            self.registers += 1
            version = SemVer.parse(request.header.ticdc_version)
            if connection.version is None:
                connection.version, connection.features = version, version.features()
            modern = self.tikv_version >= SemVer(7, 3, 0)
            # >= 7.3 the first request's features decide; v6.5.0 checked each request's own version.
            validates_cluster_id = (
                VALIDATE_CLUSTER_ID in connection.features if modern else VALIDATE_CLUSTER_ID in version.features()
            )
            region = self.region_by_id(request.region_id)
            error: cdcpb_pb2.Error | None = None
            kv_api = request.kv_api
            if validates_cluster_id and request.header.cluster_id != self.store_cluster_id:
                error = cdcpb_pb2.Error(
                    cluster_id_mismatch=cdcpb_pb2.ClusterIDMismatch(
                        current=self.store_cluster_id, request=request.header.cluster_id
                    )
                )
            elif not (
                kv_api == cdcpb_pb2.ChangeDataRequest.TiDB
                or (kv_api == cdcpb_pb2.ChangeDataRequest.RawKV and self.api_version == 2)
            ):
                # service.rs validate_kv_api: TiDB always, RawKV only on storage.api-version = 2,
                # TxnKV never; endpoint.rs answers required_version "6.2.0".
                error = cdcpb_pb2.Error(compatibility=cdcpb_pb2.Compatibility(required_version="6.2.0"))
            elif self.scans_pending.get(connection.store_id, 0) >= self.scan_concurrency_limit:
                # endpoint.rs:853-872: too many registrations whose scan has not ended on this store
                error = cdcpb_pb2.Error(
                    server_is_busy=errorpb_pb2.ServerIsBusy(reason="too many pending incremental scans")
                )
            elif self.take_injected(connection.store_id, "feed_busy"):
                # on_register: "too many pending incremental scans" past incremental_scan_concurrency_limit
                error = cdcpb_pb2.Error(
                    server_is_busy=errorpb_pb2.ServerIsBusy(reason="too many pending incremental scans")
                )
            elif region is None:
                error = cdcpb_pb2.Error(region_not_found=errorpb_pb2.RegionNotFound(region_id=request.region_id))
            elif not modern and version != connection.version:
                # v6.5.0 Conn::check_version_and_set_feature: another version on the same stream.
                error = cdcpb_pb2.Error(compatibility=cdcpb_pb2.Compatibility(required_version=str(connection.version)))
            elif any(
                s.region_id == region.id and (not modern or s.request_id == request.request_id)
                for s in connection.subscriptions
            ):
                # >= 7.3 downstreams are keyed by (request_id, region_id) (service.rs DownstreamKey);
                # before, by region id alone: a second subscription of a region on one stream is refused.
                error = cdcpb_pb2.Error(duplicate_request=cdcpb_pb2.DuplicateRequest(region_id=region.id))
            elif region.leader_store != connection.store_id:
                error = cdcpb_pb2.Error(not_leader=errorpb_pb2.NotLeader(region_id=region.id, leader=region.leader()))
            elif request.region_epoch.version != region.version:
                # delegate.rs check_epoch_on_ready: compare_region_epoch(check_conf_ver = false)
                error = _epoch_not_match([r for r in self.regions if r.id == region.id or _adjacent(r, region)])
            if error is not None:
                kind = next((f.name for f, _ in error.ListFields()), "error")
                self.feed_errors_sent[kind] = self.feed_errors_sent.get(kind, 0) + 1
                connection.put(
                    cdcpb_pb2.ChangeDataEvent(
                        events=[
                            cdcpb_pb2.Event(region_id=request.region_id, request_id=request.request_id, error=error)
                        ]
                    )
                )
                return
            assert region is not None
            start = max(region.start, bytes(request.start_key))
            end_candidates = [e for e in (region.end, bytes(request.end_key)) if e]
            end = min(end_candidates) if end_candidates else b""
            subscription = Subscription(
                connection, request.request_id, region.id, start, end, raw=kv_api == cdcpb_pb2.ChangeDataRequest.RawKV
            )
            # Live rows flow from now on (DownstreamState Initializing: ready_for_change_events),
            # resolved-ts only once the scan has finished (Normal: ready_for_advancing_ts).
            connection.subscriptions.append(subscription)
            store = connection.store_id
            pending = self.scans_pending[store] = self.scans_pending.get(store, 0) + 1
            self.scans_pending_peak[store] = max(self.scans_pending_peak.get(store, 0), pending)
            threading.Thread(
                target=self._incremental_scan,
                args=(subscription, int(request.checkpoint_ts)),
                name=f"scan-{request.request_id}",
                daemon=True,
            ).start()

    def deregister(self, connection: FeedConnection, request: cdcpb_pb2.ChangeDataRequest) -> None:
        with self.lock:
            connection.subscriptions = [
                s
                for s in connection.subscriptions
                if not (s.region_id == request.region_id and s.request_id == request.request_id)
            ]

    def _incremental_scan(self, subscription: Subscription, checkpoint_ts: int) -> None:
        try:
            self._scan_region(subscription, checkpoint_ts)
        finally:
            with self.lock:  # endpoint.rs:996: the scan's slot is released however it ended
                store = subscription.connection.store_id
                self.scans_pending[store] = max(0, self.scans_pending.get(store, 0) - 1)

    def _scan_region(self, subscription: Subscription, checkpoint_ts: int) -> None:
        """The catch-up scan of one subscription, beside its live rows, as tikv/tikv
        components/cdc/src/initializer.rs ``async_incremental_scan`` does it for RawKV: a snapshot
        of the *whole region* within ``[r, s)`` (every keyspace, not the requested span: the
        observed range is used only for TiDB scans), read with ``RawMvccIterator``, which yields
        each key's newest version only, sent when its timestamp is above the checkpoint (deletes
        and expired values included), in batches, then INITIALIZED. Live rows of the span keep
        coming meanwhile, so a scan row can follow a newer live row of its key, and a write made
        between the subscription and the snapshot arrives twice."""
        with self.lock:
            if subscription not in subscription.connection.subscriptions:
                return
            region = self.region_by_id(subscription.region_id)
            assert region is not None
            rows: list[cdcpb_pb2.Event.Row] = []
            if subscription.raw:
                region_start = decode_memcomparable(region.start)[0] if region.start else b""
                region_end = decode_memcomparable(region.end)[0] if region.end else b""
                start = max(region_start, RAW_RANGE[0])
                end = min(region_end, RAW_RANGE[1]) if region_end else RAW_RANGE[1]
                for key in self.keys_in(start, end):
                    newest = self.versions[key][-1]
                    if newest.ts > checkpoint_ts:
                        rows.append(_row(key, newest.ts, decode_raw_value(newest.value)))
        batches = [rows[index : index + SCAN_BATCH_ROWS] for index in range(0, len(rows), SCAN_BATCH_ROWS)] or [[]]
        for number, batch in enumerate(batches):
            self._wait_for_scan_gate()
            with self.lock:
                if subscription.connection.closed or subscription not in subscription.connection.subscriptions:
                    return  # ended meanwhile (an error, a deregister, a closed stream): the scan is cancelled
                entries = list(batch)
                if number == len(batches) - 1:
                    entries.append(cdcpb_pb2.Event.Row(type=cdcpb_pb2.Event.INITIALIZED))
                    subscription.initialized = True
                self._send_rows(subscription, entries)

    def _wait_for_scan_gate(self) -> None:
        if self.scan_gate.is_set():
            return
        with self.lock:
            self.scans_waiting += 1
        self.scan_gate.wait()
        with self.lock:
            self.scans_waiting -= 1

    def pause_scans(self, paused: bool) -> None:
        """Holds every incremental scan before its next batch (after its snapshot), or lets them go."""
        if paused:
            self.scan_gate.clear()
        else:
            self.scan_gate.set()

    def advance_resolved_ts(self) -> dict[int, int]:
        """Sends every initialized subscription on its region's leader a resolved-ts: all its
        writes below it were sent. Returns the resolved-ts of each store that sent one.

        As tikv/tikv components/cdc/src/endpoint.rs ``register_min_ts_event`` (1100-1190) and
        ``Advance::emit_resolved_ts`` (387-470, filled by delegate.rs ``Delegate::on_min_ts``):
        each store takes its ``min_ts`` from its own causal timestamp provider under API V2
        (1124-1131), keeps the regions it still leads (the leadership check), and only
        subscriptions whose incremental scan finished take part. A stream whose client has
        BATCH_RESOLVED_TS gets ``ResolvedTs{regions, ts, request_id: 0}`` messages, its regions in
        batches of 8, 32, 128, ...; any other stream gets one ``Event.resolved_ts`` per (stream,
        region), carrying the request id of the subscription registered last (the ``compat`` map
        is overwritten per downstream), so an older subscription of the same region on that
        stream gets none.
        """
        with self.lock:
            sent: dict[int, int] = {}
            for connection in self.connections:
                provider = self.providers.get(connection.store_id)
                if provider is None:
                    continue
                live = []
                for subscription in connection.subscriptions:
                    region = self.region_by_id(subscription.region_id)
                    if subscription.initialized and region is not None and region.leader_store == connection.store_id:
                        live.append(subscription)
                if not live:
                    continue
                if connection.store_id not in sent:
                    sent[connection.store_id] = provider.get_ts()
                self._send_resolved(connection, live, sent[connection.store_id])
            return sent

    def _send_resolved(self, connection: FeedConnection, live: list[Subscription], resolved: int) -> None:
        if not live:
            return
        if BATCH_RESOLVED_TS in connection.features:
            regions = [s.region_id for s in live]
            index, batch = 0, 8
            while index < len(regions):
                connection.put(
                    cdcpb_pb2.ChangeDataEvent(
                        resolved_ts=cdcpb_pb2.ResolvedTs(
                            regions=regions[index : index + batch], ts=resolved, request_id=0
                        )
                    )
                )
                index, batch = index + batch, batch * 4
            return
        compat: dict[int, int] = {}
        for subscription in live:
            compat[subscription.region_id] = subscription.request_id  # the last one wins
        connection.put(
            cdcpb_pb2.ChangeDataEvent(
                events=[
                    cdcpb_pb2.Event(region_id=region_id, request_id=request_id, resolved_ts=resolved)
                    for region_id, request_id in compat.items()
                ]
            )
        )

    def open_connection(self, store_id: int) -> FeedConnection:
        with self.lock:
            connection = FeedConnection(store_id)
            self.connections.append(connection)
            return connection

    def _close_connection(self, connection: FeedConnection, error: BaseException | None = None) -> None:
        connection.closed = True
        if connection in self.connections:
            self.connections.remove(connection)
        connection.put(error or ConnectionAbortedError("stream broken"))

    def close_connection(self, connection: FeedConnection) -> None:
        with self.lock:
            connection.closed = True
            if connection in self.connections:
                self.connections.remove(connection)

    def _fail_subscriptions(self, region_id: int, error: cdcpb_pb2.Error, which: Any = None) -> None:
        for connection in self.connections:
            failed = [s for s in connection.subscriptions if s.region_id == region_id and (which is None or which(s))]
            for subscription in failed:
                connection.subscriptions.remove(subscription)
                connection.put(
                    cdcpb_pb2.ChangeDataEvent(
                        events=[cdcpb_pb2.Event(region_id=region_id, request_id=subscription.request_id, error=error)]
                    )
                )

    # --- GC --------------------------------------------------------------------------------

    def update_service_safe_point(self, service_id: str, ttl_s: int, safe_point: int) -> int:
        """PD's rule (tikv/pd pkg/gc/gc_state_manager.go 1145-1210,
        ``CompatibleUpdateServiceGCSafePoint``: a service safepoint is a GC barrier): one below
        the GC safepoint is not taken, and the answer is the GC safepoint that passed it;
        ``ttl <= 0`` removes the service's (deleteGCBarrier; TiKV-CDC removes its own so).
        Otherwise the answer is the minimum of the services in force, never above the one taken."""
        with self.lock:
            now = time.time()
            self.service_safe_points = {k: v for k, v in self.service_safe_points.items() if v[1] > now}
            if ttl_s <= 0:
                self.service_safe_points.pop(service_id, None)
            elif safe_point < self.gc_safe_point:
                return self.gc_safe_point
            else:
                self.service_safe_points[service_id] = (safe_point, now + ttl_s)
            updated = self._min_service_safe_point()
            return updated if updated is not None else max(safe_point, self.gc_safe_point)

    def _min_service_safe_point(self) -> int | None:
        values = [v[0] for v in self.service_safe_points.values()]
        return min(values) if values else None

    def run_gc(self, target: int, ignore_services: bool = False) -> int:
        """Moves the GC safepoint towards ``target`` (not past any service's unless told to) and
        drops the versions no reader at or above it can see."""
        with self.lock:
            minimum = None if ignore_services else self._min_service_safe_point()
            safe_point = target if minimum is None else min(target, minimum)
            self.gc_safe_point = max(self.gc_safe_point, safe_point)
            for key, versions in self.versions.items():
                keep_from = 0
                for index, version in enumerate(versions):
                    if version.ts <= self.gc_safe_point:
                        keep_from = index
                self.versions[key] = versions[keep_from:]
            return self.gc_safe_point

    def history(self, start: bytes, end: bytes) -> dict[str, list[list[Any]]]:
        """Every stored version of the request keys in [start, end): hex key -> [ts, op, value hex, expire]."""
        with self.lock:
            out: dict[str, list[list[Any]]] = {}
            for key in self.keys_in(start, end):
                rows = []
                for version in self.versions[key]:
                    value = decode_raw_value(version.value)
                    rows.append([version.ts, "d" if value.is_delete else "p", value.user_value.hex(), value.expire_ts])
                out[key.hex()] = rows
            return out


def _row(key: bytes, ts: int, value: RawValue) -> cdcpb_pb2.Event.Row:
    return cdcpb_pb2.Event.Row(
        start_ts=ts,
        commit_ts=ts,
        type=cdcpb_pb2.Event.COMMITTED,
        op_type=cdcpb_pb2.Event.Row.DELETE if value.is_delete else cdcpb_pb2.Event.Row.PUT,
        key=key,
        value=value.user_value,
        expire_ts_unix_secs=value.expire_ts or 0,
    )


def _adjacent(a: Region, b: Region) -> bool:
    return a.end == b.start or b.end == a.start


def _epoch_not_match(regions: list[Region]) -> cdcpb_pb2.Error:
    return cdcpb_pb2.Error(epoch_not_match=errorpb_pb2.EpochNotMatch(current_regions=[r.meta() for r in regions]))


def _region_error_epoch(regions: list[Region]) -> errorpb_pb2.Error:
    return errorpb_pb2.Error(
        message="epoch not match",
        epoch_not_match=errorpb_pb2.EpochNotMatch(current_regions=[r.meta() for r in regions]),
    )
