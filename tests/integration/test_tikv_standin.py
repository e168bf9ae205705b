"""The TiKV stand-in itself does what the upstream servers' code does (docs/tikv.md lists each
behaviour and its source): these tests speak plain gRPC to it, not through cdcflow's client
logic, so that a stand-in sharing the client's misunderstanding shows here."""

from __future__ import annotations

import contextlib
import queue
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from cdcflow.sources.tikv_client.codec import LOGICAL_BITS, encode_memcomparable
from cdcflow.sources.tikv_client.pd import serialize_message
from cdcflow.sources.tikv_client.proto import cdcpb_pb2, pdpb_pb2
from tests.integration.tikv_helpers import REAL_UPSTREAM, TiKVCluster, key_range, start_cluster, wait_until

pytestmark = pytest.mark.skipif(bool(REAL_UPSTREAM), reason="checks the stand-in, not a real cluster")

_PREFIX = b"r\x00\x00\x00"


@pytest.fixture(scope="module")
def cluster() -> Iterator[TiKVCluster]:
    yield from start_cluster(None)


def _pd_call(address: str, method: str, request: Any, response_type: Any) -> Any:
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary(
            f"/pdpb.PD/{method}", request_serializer=serialize_message, response_deserializer=response_type.FromString
        )
        return call(request, timeout=5)


def _header(cluster: TiKVCluster) -> pdpb_pb2.RequestHeader:
    cluster.pd_client.connect()
    return pdpb_pb2.RequestHeader(cluster_id=cluster.pd_client.cluster_id)


def _written_ts(cluster: TiKVCluster, user_key: bytes) -> list[int]:
    raw = cluster.control("history", start=(_PREFIX + user_key).hex(), end=(_PREFIX + user_key + b"\x00").hex())
    return [row[0] for row in raw[(_PREFIX + user_key).hex()]]


def test_a_store_stamps_writes_from_its_cache_behind_pds_now_and_a_new_leader_above_the_old(
    cluster: TiKVCluster,
) -> None:
    # causal_ts/src/tso.rs: batches renewed every 100 ms, popped oldest first, kept 3 s; raftstore
    # pd.rs:2175-2190: a leader change renews the new leader's cache.
    start, _ = key_range("causal")
    wait_until(lambda: cluster.control("causal_ts_flushes") is not None, 5, "the stand-in")
    pd_now = cluster.pd_client.get_ts()
    cluster.kv.put(start + b"a", b"1")
    (first,) = _written_ts(cluster, start + b"a")
    assert first < pd_now, "an idle store's write carries a timestamp PD handed out before its now"
    region = next(
        r
        for r in cluster.control("regions")
        if bytes.fromhex(r["start"]) <= encode_memcomparable(_PREFIX + start + b"a")
        and (not r["end"] or encode_memcomparable(_PREFIX + start + b"a") < bytes.fromhex(r["end"]))
    )
    before_flush = cluster.pd_client.get_ts()
    cluster.control("transfer_leader", region_id=region["id"], store_id=region["leader_store"] % 3 + 1)
    cluster.kv.put(start + b"a", b"2")
    _, second = _written_ts(cluster, start + b"a")
    assert second > before_flush > first


def test_pd_followers_answer_not_leader_and_name_the_leader(cluster: TiKVCluster) -> None:
    # pd server/grpc_service.go validateRoleInRequest (UNAVAILABLE "not leader"), GetMembers from
    # any member, Tso on a member that does not serve (codes.Unknown, pkg/tso/allocator.go).
    assert cluster.standin is not None
    leader, follower = cluster.standin.pd_members[0], cluster.standin.pd_members[1]
    members = _pd_call(follower, "GetMembers", pdpb_pb2.GetMembersRequest(), pdpb_pb2.GetMembersResponse)
    assert len(members.members) == 3 and members.leader.client_urls == [f"http://{leader}"]
    with pytest.raises(grpc.RpcError) as refused:
        _pd_call(
            follower,
            "GetRegion",
            pdpb_pb2.GetRegionRequest(header=_header(cluster), region_key=b""),
            pdpb_pb2.GetRegionResponse,
        )
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE and refused.value.details() == "not leader"
    with grpc.insecure_channel(follower) as channel:
        tso = channel.stream_stream(
            "/pdpb.PD/Tso", request_serializer=serialize_message, response_deserializer=pdpb_pb2.TsoResponse.FromString
        )
        with pytest.raises(grpc.RpcError) as tso_refused:
            next(iter(tso(iter([pdpb_pb2.TsoRequest(header=_header(cluster), count=1)]), timeout=5)))
    assert tso_refused.value.code() == grpc.StatusCode.UNKNOWN and "not leader" in (tso_refused.value.details() or "")


def test_a_pd_failover_has_no_leader_then_regions_without_leaders_until_they_report() -> None:
    # A new PD leader loads regions from storage without leaders (pd pkg/storage/endpoint/meta.go
    # NewRegionInfo(region, nil)); ScanRegions sends them with an empty leader Peer.
    with contextlib.contextmanager(start_cluster)(None, stores=1) as cluster:
        assert cluster.standin is not None
        cluster.control("pd_failover", to=2, election_s=30.0)
        members = _pd_call(
            cluster.standin.pd_members[1], "GetMembers", pdpb_pb2.GetMembersRequest(), pdpb_pb2.GetMembersResponse
        )
        assert not members.HasField("leader")
        cluster.control("pd_failover", to=2, election_s=0.0)
        new_leader = cluster.standin.pd_members[1]
        scan = _pd_call(
            new_leader,
            "ScanRegions",
            pdpb_pb2.ScanRegionsRequest(header=_header(cluster), start_key=b"", end_key=b""),
            pdpb_pb2.ScanRegionsResponse,
        )
        assert scan.regions and all(r.leader.id == 0 for r in scan.regions)
        cluster.control("report_heartbeats")
        assert cluster.control("pd_regions")[0]["leader_store"] is None  # nothing was held back
        cluster.control("pd_failover", to=2, election_s=0.0, heartbeats_after_s=0.05)
        wait_until(lambda: cluster.control("pd_regions")[0]["leader_store"] == 1, 5, "the region's heartbeat")


def test_a_split_leaves_a_hole_in_pds_regions_until_the_other_half_reports(cluster: TiKVCluster) -> None:
    # pd region_tree.go 171-191 (a put deletes what it overlaps), grpcutil/cluster.go:39-46 (a
    # key in a hole: a header without a region).
    start, _ = key_range("pdtree")
    at = encode_memcomparable(_PREFIX + start + b"m")
    cluster.control("split", key=(_PREFIX + start + b"m").hex(), hole_s=60.0, first="right")
    hole_key = encode_memcomparable(_PREFIX + start + b"a")
    answer = _pd_call(
        cluster.pd,
        "GetRegion",
        pdpb_pb2.GetRegionRequest(header=_header(cluster), region_key=hole_key),
        pdpb_pb2.GetRegionResponse,
    )
    assert answer.header.error.type == pdpb_pb2.OK and not answer.HasField("region")
    scan = _pd_call(
        cluster.pd,
        "ScanRegions",
        pdpb_pb2.ScanRegionsRequest(header=_header(cluster), start_key=hole_key, end_key=b""),
        pdpb_pb2.ScanRegionsResponse,
    )
    assert scan.regions[0].region.start_key == at  # the scan skips the hole
    cluster.control("report_heartbeats")
    answer = _pd_call(
        cluster.pd,
        "GetRegion",
        pdpb_pb2.GetRegionRequest(header=_header(cluster), region_key=hole_key),
        pdpb_pb2.GetRegionResponse,
    )
    assert answer.region.end_key == at


def test_a_purged_store_is_unknown_to_pd_and_its_peers_move() -> None:
    with contextlib.contextmanager(start_cluster)(None, stores=3) as cluster:
        added = cluster.control("add_store")
        cluster.control("purge_store", store_id=1)
        answer = _pd_call(
            cluster.pd,
            "GetStore",
            pdpb_pb2.GetStoreRequest(header=_header(cluster), store_id=1),
            pdpb_pb2.GetStoreResponse,
        )
        assert answer.header.error.message == "invalid store ID 1, not found"
        assert all(1 not in r["stores"] and added["store_id"] in r["stores"] for r in cluster.control("regions"))
        assert all(r["leader_store"] != 1 for r in cluster.control("regions"))


def test_registrations_above_the_scan_limit_are_refused_as_busy() -> None:
    # cdc endpoint.rs:853-872: past incremental-scan-concurrency-limit, server_is_busy.
    with contextlib.contextmanager(start_cluster)(None, stores=1, scan_concurrency_limit=1) as cluster:
        assert cluster.standin is not None
        cluster.control("pause_scans", paused=True)
        region = cluster.control("regions")[0]
        requests: queue.Queue[cdcpb_pb2.ChangeDataRequest | None] = queue.Queue()

        def outgoing() -> Iterator[cdcpb_pb2.ChangeDataRequest]:
            while (request := requests.get()) is not None:
                yield request

        with grpc.insecure_channel(cluster.standin.stores[1]) as channel:
            feed = channel.stream_stream(
                "/cdcpb.ChangeData/EventFeed",
                request_serializer=serialize_message,
                response_deserializer=cdcpb_pb2.ChangeDataEvent.FromString,
            )
            responses = feed(outgoing(), timeout=10)
            header = cdcpb_pb2.Header(cluster_id=_header(cluster).cluster_id, ticdc_version="6.2.0")
            for request_id in (1, 2):
                requests.put(
                    cdcpb_pb2.ChangeDataRequest(
                        header=header,
                        region_id=region["id"],
                        region_epoch={"version": region["version"]},
                        checkpoint_ts=cluster.pd_client.get_ts() - (1 << LOGICAL_BITS),
                        request_id=request_id,
                        register=cdcpb_pb2.ChangeDataRequest.Register(),
                        kv_api=cdcpb_pb2.ChangeDataRequest.RawKV,
                    )
                )
            event = next(e for response in responses for e in response.events if e.HasField("error"))
            requests.put(None)
            cluster.control("pause_scans", paused=False)
        assert event.request_id == 2
        assert event.error.server_is_busy.reason == "too many pending incremental scans"
