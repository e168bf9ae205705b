"""A PD client: cluster id and leader, TSO, regions, stores and GC safepoints, over gRPC."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message

from cdcflow.sources.tikv_client.codec import compose_ts
from cdcflow.sources.tikv_client.exceptions import (
    PDError,
    RegionNotInPDError,
    StoreNotFoundError,
    TiKVUnavailableError,
)
from cdcflow.sources.tikv_client.proto import metapb_pb2, pdpb_pb2
from cdcflow.sources.tikv_client.tls import TLSConfig

__all__ = ["PDClient", "RegionInfo", "covering_prefix", "grpc_channel", "serialize_message", "strip_scheme"]

log = logging.getLogger("cdcflow.tikv.pd")

ResponseT = TypeVar("ResponseT", bound=Message)
ResultT = TypeVar("ResultT")

_CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 256 * 1024 * 1024),
    ("grpc.max_send_message_length", 256 * 1024 * 1024),
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
]
_RETRIED_CODES = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}
_FIRST_RETRY_S = 0.05  # a PD call that found no leader waits this long, doubling, before asking again
_LAST_RETRY_S = 1.0


def grpc_channel(address: str, tls: TLSConfig | None = None) -> grpc.Channel:
    """A channel with cdcflow's message-size and keepalive settings: mutual TLS with ``tls``,
    plain otherwise. The server certificate must name the address dialled (an IP SAN for an IP)."""
    target = strip_scheme(address)
    if tls is None:
        return grpc.insecure_channel(target, options=_CHANNEL_OPTIONS)
    return grpc.secure_channel(target, tls.channel_credentials(), options=_CHANNEL_OPTIONS)


def strip_scheme(url: str) -> str:
    """``http://host:port`` (as PD lists its members) to ``host:port``."""
    return url.split("://", 1)[-1].rstrip("/")


@dataclass(frozen=True)
class RegionInfo:
    """A region as PD describes it; keys are in region-key space (memcomparable under API V2)."""

    meta: metapb_pb2.Region
    leader: metapb_pb2.Peer | None

    @property
    def id(self) -> int:
        return int(self.meta.id)

    @property
    def start_key(self) -> bytes:
        return bytes(self.meta.start_key)

    @property
    def end_key(self) -> bytes:
        return bytes(self.meta.end_key)

    @property
    def leader_store_id(self) -> int:
        """The store of its leader, 0 when PD named none."""
        return int(self.leader.store_id) if self.leader is not None else 0

    def contains(self, region_key: bytes) -> bool:
        return self.start_key <= region_key and (not self.end_key or region_key < self.end_key)

    def with_leader(self, leader: metapb_pb2.Peer) -> RegionInfo:
        return RegionInfo(self.meta, leader)

    def with_hinted_leader(self, hint: metapb_pb2.Peer) -> RegionInfo | None:
        """The region led by the peer a not_leader answer named; None when that store holds no
        voter of it (a learner never leads; a store not listed means this copy is stale)."""
        peer = next((p for p in self.meta.peers if p.store_id == hint.store_id), None)
        if peer is None or peer.role == metapb_pb2.Learner:
            return None
        return RegionInfo(self.meta, peer)

    def describe(self) -> str:
        epoch = self.meta.region_epoch
        return (
            f"region {self.id} [{self.start_key.hex()}, {self.end_key.hex() or 'inf'}) "
            f"epoch {epoch.conf_ver}/{epoch.version}"
        )


class PDClient:
    """Talks to the PD leader, found through the members PD names.

    Every member answers ``GetMembers`` with the members' client URLs and the leader; only the
    leader serves the other calls (a follower answers UNAVAILABLE "not leader", Tso
    ``codes.Unknown``: tikv/pd server/grpc_service.go 2169-2190, 620-624). The client remembers
    every member PD names beside the configured endpoints, so a leader that dies is replaced by
    one the configuration never listed (client-go's PD client: ``updateMember`` from
    ``GetMembers``). A call that meets an unreachable leader or a follower asks the members
    again and retries with backoff (50 ms, doubling to 1 s) for at most ``timeout_s``: an
    election takes seconds (PD's leader lease is 5 s: server/config/config.go 178). Then it raises
    :class:`TiKVUnavailableError` (transient); :class:`PDError` when PD answers with an error
    header.
    """

    def __init__(self, endpoints: Sequence[str], timeout_s: float = 10.0, tls: TLSConfig | None = None) -> None:
        if not endpoints:
            raise ValueError("at least one PD endpoint is needed")
        self.endpoints = [strip_scheme(e) for e in endpoints]
        self.timeout_s = timeout_s
        self.tls = tls  # for PD and, through RegionCache, every store
        self.cluster_id = 0
        self._lock = threading.Lock()
        self._channel: grpc.Channel | None = None
        self._members: list[str] = []  # every member's client URL PD named, host:port
        self.leader = ""  # the member this client talks to

    # --- connection ------------------------------------------------------------------------

    def connect(self) -> None:
        """Finds the cluster id and the leader; idempotent.

        PD answers every call but ``GetMembers`` with FAILED_PRECONDITION unless its header
        carries PD's cluster id (tikv/pd ``server/grpc_service.go`` ``validateRoleInRequest``), so
        the id is learned here first. Once learned it is kept: a member of another cluster (the
        endpoints name two clusters) is refused with :class:`PDError` instead of followed.

        The members PD named before are asked first, then the configured endpoints. While
        members answer without a leader (an election) they are asked again with backoff for at
        most ``timeout_s``; when none answers at all, the first connection fails at once (a
        wrong address or TLS setting), a later one retries for ``timeout_s`` too (the leader
        died: another member takes over).
        """
        deadline = time.monotonic() + self.timeout_s
        delay = _FIRST_RETRY_S
        while True:
            with self._lock:
                if self._channel is not None:
                    return
                failures, answered = self._connect_once()
                if self._channel is not None:
                    return
                give_up = (not answered and not self._members) or time.monotonic() + delay > deadline
            if give_up:
                hint = (
                    "if the cluster serves TLS, set tls: {ca, cert, key}"
                    if self.tls is None
                    else "with tls: check that tls.ca signed PD's certificate, that PD's CA signed tls.cert, and "
                    "that PD's certificate names the address dialled"
                )
                raise TiKVUnavailableError(f"no PD leader answered ({hint}): {'; '.join(failures)}")
            time.sleep(delay)
            delay = min(_LAST_RETRY_S, delay * 2)

    def _connect_once(self) -> tuple[list[str], bool]:
        """One round over the known members and the configured endpoints: connects to the
        leader if one names it. Returns the failures and whether any member answered."""
        failures: list[str] = []
        answered = False
        for endpoint in dict.fromkeys([*self._members, *self.endpoints]):
            channel = grpc_channel(endpoint, self.tls)
            try:
                members = self._unary(channel, "GetMembers", pdpb_pb2.GetMembersRequest(), pdpb_pb2.GetMembersResponse)
            except grpc.RpcError as exc:
                channel.close()
                failures.append(f"{endpoint}: {exc.code().name}: {exc.details()}")
                continue
            cluster_id = int(members.header.cluster_id)
            error = members.header.error
            if error.type != pdpb_pb2.OK or cluster_id == 0:
                # grpcutil.WrapHeader: NOT_BOOTSTRAPPED "cluster id is not ready" while PD starts.
                channel.close()
                failures.append(f"{endpoint}: {_error_type_name(error.type)} {error.message or 'no cluster id'}")
                continue
            if self.cluster_id and cluster_id != self.cluster_id:
                channel.close()
                raise PDError(
                    f"PD at {endpoint} belongs to cluster {cluster_id}, not cluster {self.cluster_id} that this "
                    f"client first reached: pd_endpoints {self.endpoints} name members of two clusters"
                )
            answered = True
            self.cluster_id = cluster_id
            self._members = [strip_scheme(url) for member in members.members for url in member.client_urls[:1]]
            leader_urls = list(members.leader.client_urls)
            if not leader_urls:
                # GetMembers during an election names no leader (grpc_service.go 434-480).
                channel.close()
                failures.append(f"{endpoint}: no leader (an election is under way)")
                continue
            leader = strip_scheme(leader_urls[0])
            if leader != endpoint:
                channel.close()
                channel = grpc_channel(leader, self.tls)
            self._channel = channel
            self.leader = leader
            return failures, answered
        return failures, answered

    def close(self) -> None:
        with self._lock:
            if self._channel is not None:
                self._channel.close()
                self._channel = None

    def _unary(self, channel: grpc.Channel, method: str, request: Message, response_type: type[ResponseT]) -> ResponseT:
        call = channel.unary_unary(
            f"/pdpb.PD/{method}",
            request_serializer=serialize_message,
            response_deserializer=response_type.FromString,
        )
        response: ResponseT = call(request, timeout=self.timeout_s)
        return response

    def _call(
        self, method: str, request: Message, response_type: type[ResponseT], check_header: bool = True
    ) -> ResponseT:
        def send(channel: grpc.Channel) -> ResponseT:
            header = getattr(request, "header", None)
            if header is not None:
                header.cluster_id = self.cluster_id  # known only once connected
            return self._unary(channel, method, request, response_type)

        response = self._on_the_leader(method, send, retried=_RETRIED_CODES)
        if check_header:
            _check_header(method, response)
        return response

    def _on_the_leader(
        self, method: str, send: Callable[[grpc.Channel], ResultT], retried: Container[grpc.StatusCode] | None
    ) -> ResultT:
        """``send`` on the leader's channel. An answer with a ``retried`` code (None: any) sends
        the client to the members again, with backoff, for at most ``timeout_s``; any other is a
        :class:`PDError`, as is FAILED_PRECONDITION, which only a member of another cluster sends
        (``validateRoleInRequest``: ErrMismatchClusterID)."""
        deadline = time.monotonic() + self.timeout_s
        delay = _FIRST_RETRY_S
        while True:
            self.connect()
            channel = self._channel
            if channel is None:
                continue  # closed by another thread meanwhile
            try:
                return send(channel)
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.FAILED_PRECONDITION:
                    raise PDError(
                        f"PD {method}: {exc.details()}: the PD this client reached is not cluster {self.cluster_id}"
                    ) from exc
                if retried is not None and exc.code() not in retried:
                    raise PDError(f"PD {method} failed: {exc.code().name}: {exc.details()}") from exc
                self._leader_lost(channel)
                if time.monotonic() + delay > deadline:
                    raise TiKVUnavailableError(
                        f"PD {method}: {exc.code().name}: {exc.details()} (no leader served within {self.timeout_s}s)"
                    ) from exc
                time.sleep(delay)
                delay = min(_LAST_RETRY_S, delay * 2)

    def _leader_lost(self, channel: grpc.Channel) -> None:
        """The leader behind ``channel`` did not serve: the next call asks the members again
        (unless another thread already did)."""
        with self._lock:
            if self._channel is channel:
                self._channel.close()
                self._channel = None

    # --- TSO -------------------------------------------------------------------------------

    def get_ts(self) -> int:
        """A fresh timestamp from PD's TSO. A member that cannot hand one out (a follower
        answers ``codes.Unknown`` "requested pd is not leader of cluster", pkg/tso/allocator.go
        217-222; an unreachable leader) sends the client to the members again, with backoff,
        for at most ``timeout_s``, as client-go's TSO dispatcher reconnects."""

        def send(channel: grpc.Channel) -> pdpb_pb2.TsoResponse:
            stream = channel.stream_stream(
                "/pdpb.PD/Tso",
                request_serializer=serialize_message,
                response_deserializer=pdpb_pb2.TsoResponse.FromString,
            )
            request = pdpb_pb2.TsoRequest(header=pdpb_pb2.RequestHeader(cluster_id=self.cluster_id), count=1)
            responses: Any = stream(iter([request]), timeout=self.timeout_s)
            response: pdpb_pb2.TsoResponse = next(responses)
            return response

        response = self._on_the_leader("Tso", send, retried=None)
        _check_header("Tso", response)
        return compose_ts(int(response.timestamp.physical), int(response.timestamp.logical))

    # --- regions and stores ----------------------------------------------------------------

    def get_region(self, region_key: bytes) -> RegionInfo:
        """The region holding ``region_key`` (memcomparable under API V2)."""
        response = self._call(
            "GetRegion",
            pdpb_pb2.GetRegionRequest(header=self._header(), region_key=region_key),
            pdpb_pb2.GetRegionResponse,
        )
        if not response.HasField("region"):
            # A key in a hole of PD's region tree (a split half not yet reported): PD answers an
            # empty header (tikv/pd pkg/utils/grpcutil/cluster.go GetRegion); it fills in.
            raise RegionNotInPDError(f"PD knows no region for key {region_key.hex()} (yet)")
        return RegionInfo(response.region, _named_leader(response.leader))

    def get_region_by_id(self, region_id: int) -> RegionInfo | None:
        response = self._call(
            "GetRegionByID",
            pdpb_pb2.GetRegionByIDRequest(header=self._header(), region_id=region_id),
            pdpb_pb2.GetRegionResponse,
        )
        if not response.HasField("region"):
            return None
        return RegionInfo(response.region, _named_leader(response.leader))

    def scan_regions(self, start_key: bytes, end_key: bytes, limit: int = 0) -> list[RegionInfo]:
        """Regions overlapping [start_key, end_key) in key order (``end_key`` empty: to the end),
        as PD's tree holds them: possibly with holes, or none at all, while a split's halves
        have not both reported. Check the answer with :func:`covering_prefix`."""
        regions: list[RegionInfo] = []
        cursor = start_key
        while True:
            response = self._call(
                "ScanRegions",
                pdpb_pb2.ScanRegionsRequest(header=self._header(), start_key=cursor, end_key=end_key, limit=limit),
                pdpb_pb2.ScanRegionsResponse,
            )
            page = (
                [RegionInfo(r.region, _named_leader(r.leader)) for r in response.regions]
                if response.regions
                else [
                    RegionInfo(meta, _named_leader(leader))
                    for meta, leader in zip(response.region_metas, response.leaders, strict=False)
                ]
            )
            regions.extend(page)
            if not page or limit > 0:
                return regions
            last_end = page[-1].end_key
            if not last_end or (end_key and last_end >= end_key):
                return regions
            cursor = last_end

    def get_store_address(self, store_id: int) -> str:
        """The address of a store PD knows; :class:`StoreNotFoundError` for one it removed
        (GetStore answers UNKNOWN "invalid store ID N, not found", tikv/pd
        server/grpc_service.go 774-800) or holds as a tombstone: a region routed there must be
        looked up again."""
        response = self._call(
            "GetStore",
            pdpb_pb2.GetStoreRequest(header=self._header(), store_id=store_id),
            pdpb_pb2.GetStoreResponse,
            check_header=False,
        )
        error = response.header.error
        if error.type == pdpb_pb2.UNKNOWN or response.store.state == metapb_pb2.Tombstone:
            raise StoreNotFoundError(
                f"PD does not serve store {store_id}: {error.message or 'a tombstone'} (purged or being removed)"
            )
        _check_header("GetStore", response)
        return str(response.store.address)

    def get_all_stores(self) -> list[metapb_pb2.Store]:
        response = self._call(
            "GetAllStores",
            pdpb_pb2.GetAllStoresRequest(header=self._header(), exclude_tombstone_stores=True),
            pdpb_pb2.GetAllStoresResponse,
        )
        return list(response.stores)

    # --- GC safepoints ---------------------------------------------------------------------

    def get_gc_safe_point(self) -> int:
        """The cluster's GC safepoint: versions below it may be gone."""
        response = self._call(
            "GetGCSafePoint", pdpb_pb2.GetGCSafePointRequest(header=self._header()), pdpb_pb2.GetGCSafePointResponse
        )
        return int(response.safe_point)

    def update_gc_safe_point(self, safe_point: int) -> int:
        """Moves the cluster's GC safepoint (what a GC worker does); returns the one now in force."""
        response = self._call(
            "UpdateGCSafePoint",
            pdpb_pb2.UpdateGCSafePointRequest(header=self._header(), safe_point=safe_point),
            pdpb_pb2.UpdateGCSafePointResponse,
        )
        return int(response.new_safe_point)

    def update_service_gc_safe_point(self, service_id: str, ttl_s: int, safe_point: int) -> int:
        """Keeps GC below ``safe_point`` for ``ttl_s`` seconds; returns the minimum over services.

        PD keeps a service's safepoint only if it is not below that minimum: a returned minimum
        above ``safe_point`` means the request was refused.
        """
        response = self._call(
            "UpdateServiceGCSafePoint",
            pdpb_pb2.UpdateServiceGCSafePointRequest(
                header=self._header(), service_id=service_id.encode(), TTL=ttl_s, safe_point=safe_point
            ),
            pdpb_pb2.UpdateServiceGCSafePointResponse,
        )
        return int(response.min_safe_point)

    def _header(self) -> pdpb_pb2.RequestHeader:
        return pdpb_pb2.RequestHeader()  # _call fills in the cluster id once connected


def covering_prefix(regions: Sequence[RegionInfo], start: bytes, end: bytes) -> tuple[list[RegionInfo], bytes | None]:
    """The regions that cover [start, end) without a gap from ``start`` on, and the first key
    they leave uncovered (None: they cover it all). TiKV-CDC's ``CheckRegionsLeftCover``
    (tikv/migration cdc/pkg/regionspan/region.go) and client-go's gap check of a region scan
    refuse the same answers: an empty one, one starting after ``start``, one with a hole."""
    ordered = sorted(regions, key=lambda r: r.start_key)
    covered: list[RegionInfo] = []
    cursor = start
    for region in ordered:
        if region.end_key and region.end_key <= cursor:
            continue  # wholly before what is still to cover
        if region.start_key > cursor:
            break  # a hole at cursor
        covered.append(region)
        if not region.end_key or (end and region.end_key >= end):
            return covered, None
        cursor = region.end_key
    return covered, cursor


def _named_leader(leader: metapb_pb2.Peer) -> metapb_pb2.Peer | None:
    """PD's leader of a region, None when it names none: a region PD loaded from storage and
    has not heard from since is sent with an empty Peer (tikv/pd grpcutil/cluster.go 127-131;
    client-go "Leader id = 0 indicates no leader")."""
    return leader if leader.id else None


def serialize_message(message: Message) -> bytes:
    """The gRPC request serializer of every cdcflow TiKV call."""
    return message.SerializeToString()


def _check_header(method: str, response: Any) -> None:
    error = response.header.error
    if error.type != pdpb_pb2.OK:
        raise PDError(f"PD {method} answered {_error_type_name(error.type)}: {error.message}")


def _error_type_name(error_type: int) -> str:
    """kvproto's pdpb.ErrorType keeps growing: a type this client does not know is shown by number."""
    try:
        return pdpb_pb2.ErrorType.Name(error_type)
    except ValueError:
        return f"error type {error_type}"
