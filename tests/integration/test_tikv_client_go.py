"""TiKV's own Go client (tikv/client-go v2.0.4, ``rawkv``) against the stand-in, and against cdcflow.

client-go was written against real TiKV and PD, not against the stand-in: what it expects of them
(a batch stream per store, TTL reads, PD's answers in a hole or without a leader, errors naming
the region's new epoch or leader, a store PD no longer knows) checks that the stand-in behaves as
they do. Every expected value here is computed by the test from what it wrote. The region changes
are made between two operations of a running client, whose region cache is then stale.

The oracle (tests/oracles/tikv_client_go) is built once and cached; without go the module is
skipped. ``CDCFLOW_TIKV_PD`` runs the tests that need no stand-in control on a real cluster.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from cdcflow.contract import Offset, PluginContext, Rejected
from cdcflow.events import ChangeEvent, Op, SourceInfo
from cdcflow.sinks.tikv.sink import TiKVSink, TiKVSinkConfig
from cdcflow.sources.tikv_client.codec import encode_memcomparable
from cdcflow.sources.tikv_rawkv.source import TiKVRawKVSource, TiKVRawKVSourceConfig
from tests.integration.tikv_helpers import REAL_UPSTREAM, TiKVCluster, key_range, start_cluster, wait_until
from tests.oracles.tikv_client_go import ClientGo, OracleUnavailableError, build_oracle
from tests.standins.tikv.kvproto_extra import SERVING, HealthCheckRequest, HealthCheckResponse

KEYSPACE_0 = b"r\x00\x00\x00"  # client-go v2.0.4's API V2 prefix: keyspace 0 only


@pytest.fixture(scope="module")
def client_go_binary() -> Path:
    try:
        return build_oracle()
    except OracleUnavailableError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def cluster() -> Iterator[TiKVCluster]:
    yield from start_cluster(REAL_UPSTREAM)


@pytest.fixture
def client_go(client_go_binary: Path, tmp_path: Path) -> Iterator[Callable[[TiKVCluster], ClientGo]]:
    """Starts client-go processes on a cluster (every PD member given, as an application would)."""
    opened: list[ClientGo] = []

    def start(on: TiKVCluster) -> ClientGo:
        members = on.standin.pd_members if on.standin is not None else [on.pd]
        client = ClientGo(client_go_binary, members, tmp_path / "client-go.log")
        opened.append(client)
        return client

    yield start
    for client in opened:
        client.close()


def _region_holding(cluster: TiKVCluster, user_key: bytes) -> dict[str, Any]:
    at = encode_memcomparable(KEYSPACE_0 + user_key)
    for region in cluster.control("regions"):
        if bytes.fromhex(region["start"]) <= at and (not region["end"] or at < bytes.fromhex(region["end"])):
            return dict(region)
    raise AssertionError(f"no region holds {user_key!r}")


def _errors_sent(cluster: TiKVCluster, kind: str) -> int:
    return int(cluster.control("region_errors_sent").get(kind, 0))


def test_what_client_go_writes_it_reads_back_and_so_does_cdcflow(
    cluster: TiKVCluster, client_go: Callable[[TiKVCluster], ClientGo]
) -> None:
    go = client_go(cluster)
    start, end = key_range("cgo")
    keys = [start + b"k%03d" % n for n in range(60)]
    held = {key: b"v%d" % n for n, key in enumerate(keys)}
    go.call("batch_put", keys=keys, values=list(held.values()))
    go.call("put", key=keys[0], value=b"overwritten")
    held[keys[0]] = b"overwritten"
    go.call("put", key=start + b"empty", value=b"")
    held[start + b"empty"] = b""

    assert go.get(start + b"empty") == b""  # an empty value, not "not found"
    assert go.get(start + b"missing") is None
    assert go.batch_get([start + b"empty", start + b"missing", keys[5]]) == [b"", None, b"v5"]

    go.call("delete", key=keys[1])
    go.call("batch_delete", keys=keys[2:4])
    go.call("delete_range", start=keys[50], end=keys[55])
    for key in [*keys[1:4], *keys[50:55]]:
        del held[key]
    expected = sorted(held.items())
    assert go.scan(start, end, limit=1000) == expected
    assert go.scan(start, end, limit=10) == expected[:10]
    assert go.scan(start, end, limit=1000, key_only=True) == [(key, b"") for key, _ in expected]
    assert cluster.snapshot(start, end) == held  # cdcflow's client reads the same keyspace-0 keys


def test_ttls_count_down_and_expire(cluster: TiKVCluster, client_go: Callable[[TiKVCluster], ClientGo]) -> None:
    go = client_go(cluster)
    start, end = key_range("cgo-ttl")
    short, long_a, long_b, plain = (start + name for name in (b"short", b"long-a", b"long-b", b"plain"))
    go.call("put", key=short, value=b"soon gone", ttl=3)
    go.call("batch_put", keys=[long_a, long_b], values=[b"a", b"b"], ttls=[3600, 3600])
    go.call("put", key=plain, value=b"kept")

    assert go.ttl(short) in (1, 2, 3)  # whole seconds left, counted by the store
    assert 3500 < (go.ttl(long_a) or 0) <= 3600
    assert go.ttl(plain) == 0  # stored without a TTL
    assert go.ttl(start + b"missing") is None

    wait_until(lambda: go.get(short) is None, 30, "the 3 s TTL to expire")
    assert go.ttl(short) is None
    assert go.scan(start, end, limit=100) == [(long_a, b"a"), (long_b, b"b"), (plain, b"kept")]
    assert cluster.kv.get(short) is None and cluster.kv.get(long_b) == b"b"


def test_a_split_and_a_leader_transfer_mid_run(
    cluster: TiKVCluster, client_go: Callable[[TiKVCluster], ClientGo]
) -> None:
    go = client_go(cluster)
    start, end = key_range("cgo-regions")
    keys = [start + b"k%03d" % n for n in range(100)]
    go.call("batch_put", keys=keys, values=[b"first-%d" % n for n in range(100)])  # caches the region

    stale_epochs = _errors_sent(cluster, "epoch_not_match")
    cluster.split(start + b"k050")  # client-go still routes the whole range to the wider region
    second = [b"second-%d" % n for n in range(100)]
    go.call("batch_put", keys=keys, values=second)
    assert go.scan(start, end, limit=1000) == list(zip(keys, second, strict=True))
    assert _errors_sent(cluster, "epoch_not_match") > stale_epochs  # its cache was stale, and it recovered

    right = _region_holding(cluster, start + b"k075")
    assert right["start"] == encode_memcomparable(KEYSPACE_0 + start + b"k050").hex()
    new_leader = next(store for store in right["stores"] if store != right["leader_store"])
    stale_leaders = _errors_sent(cluster, "not_leader")
    cluster.control("transfer_leader", region_id=right["id"], store_id=new_leader)
    third = [b"third-%d" % n for n in range(50, 100)]
    go.call("batch_put", keys=keys[50:], values=third)
    assert go.batch_get(keys) == second[:50] + third
    assert _errors_sent(cluster, "not_leader") > stale_leaders  # sent to the old leader first
    assert cluster.snapshot(start, end) == dict(zip(keys, second[:50] + third, strict=True))


def test_a_key_in_a_hole_of_pds_regions_is_read_once_pd_hears_of_its_region(
    cluster: TiKVCluster, client_go: Callable[[TiKVCluster], ClientGo]
) -> None:
    start, _ = key_range("cgo-hole")
    cluster.kv.batch_put([(start + b"a", b"left"), (start + b"z", b"right")])
    split_at = KEYSPACE_0 + start + b"m"
    try:
        # Only the right half reports: PD's tree has nothing left of the split (pd_view.py).
        cluster.control("split", key=split_at.hex(), hole_s=600, first="right")
        at = encode_memcomparable(KEYSPACE_0 + start + b"a")
        assert not any(
            bytes.fromhex(r["start"]) <= at and (not r["end"] or at < bytes.fromhex(r["end"]))
            for r in cluster.control("pd_regions")
        )
        go = client_go(cluster)  # nothing cached: it must ask PD
        go.send("get", key=start + b"a")
        assert not go.has_answer(1.0), "client-go answered for a key PD holds no region for"
        cluster.control("report_heartbeats")
        answer = go.answer()
        assert answer["ok"] and answer["value"] == b"left".hex()
        assert go.get(start + b"z") == b"right"
    finally:
        cluster.control("report_heartbeats")


def test_a_pd_leader_failover_with_regions_that_lost_their_leaders(
    cluster: TiKVCluster, client_go: Callable[[TiKVCluster], ClientGo]
) -> None:
    start, end = key_range("cgo-pd")
    key = start + b"k"
    cluster.kv.put(key, b"before")
    region = _region_holding(cluster, key)
    # Lead from the last store: client-go sends a leaderless region's requests to its first peer.
    cluster.control("transfer_leader", region_id=region["id"], store_id=max(region["stores"]))
    stale_leaders = _errors_sent(cluster, "not_leader")
    try:
        cluster.control("pd_failover", to=2, election_s=1.0, heartbeats_after_s=0)
        go = client_go(cluster)  # finds member 2 once elected
        assert cluster.control("pd_members")["leader"] == 2
        assert all(r["leader_store"] is None for r in cluster.control("pd_regions"))
        assert go.get(key) == b"before"
        go.call("put", key=key, value=b"after")
        assert go.scan(start, end, limit=10) == [(key, b"after")]
        assert _errors_sent(cluster, "not_leader") > stale_leaders  # followed the stores' leader hint
    finally:
        # back to member 1, every region's leader reported again, for the tests after this one
        cluster.control("pd_failover", to=1, election_s=0, heartbeats_after_s=0.1)
        cluster.control("report_heartbeats")
    assert cluster.kv.get(key) == b"after"


@pytest.fixture
def cluster_of_its_own() -> Iterator[TiKVCluster]:
    """A stand-in a test may take a store out of."""
    if REAL_UPSTREAM:
        pytest.skip("purges a store")
    yield from start_cluster(None)


def test_a_store_purged_mid_run(cluster_of_its_own: TiKVCluster, client_go: Callable[[TiKVCluster], ClientGo]) -> None:
    own = cluster_of_its_own
    go = client_go(own)
    start, _ = key_range("cgo-purge")
    keys = [start + b"k%02d" % n for n in range(20)]
    go.call("batch_put", keys=keys, values=[b"v%d" % n for n in range(20)])
    region = _region_holding(own, keys[0])
    leader = max(region["stores"])
    own.control("transfer_leader", region_id=region["id"], store_id=leader)
    assert go.get(keys[0]) == b"v0"  # client-go now sends this region's requests to that store
    own.control("purge_store", store_id=leader)  # PD forgets it; its server stops
    assert go.batch_get(keys) == [b"v%d" % n for n in range(20)]
    go.call("put", key=keys[0], value=b"after the purge")
    assert own.kv.get(keys[0]) == b"after the purge"
    assert _region_holding(own, keys[0])["leader_store"] != leader


def test_every_store_answers_the_health_check_client_go_sends(cluster: TiKVCluster) -> None:
    # client-go asks Health/Check of a store it failed to reach, and counts it unreachable
    # (marking its regions for reload) until the answer is SERVING.
    if cluster.standin is None:
        pytest.skip("asks the stand-in's stores")
    for address in cluster.standin.stores.values():
        with grpc.insecure_channel(address) as channel:
            check = channel.unary_unary(
                "/grpc.health.v1.Health/Check",
                request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=HealthCheckResponse.FromString,
            )
            assert check(HealthCheckRequest(service=""), timeout=10).status == SERVING


# --- client-go and cdcflow on the same data --------------------------------------------------


def _changes(records: list[ChangeEvent | Rejected]) -> dict[bytes, list[tuple[str, bytes | None, bool]]]:
    """Per key, its events as (op, value, has TTL), a repeat of the same event right after it
    dropped (a write between a subscription and its snapshot arrives twice: at least once)."""
    out: dict[bytes, list[tuple[str, bytes | None, bool]]] = {}
    for record in records:
        assert isinstance(record, ChangeEvent), record
        after = record.after
        change = (
            ("c", after["value"], after["expire_ts"] is not None)
            if record.op is Op.CREATE and after is not None
            else ("d", None, False)
        )
        history = out.setdefault(record.key["key"], [])
        if not history or history[-1] != change:
            history.append(change)
    return out


def test_what_client_go_writes_cdcflows_source_reads_as_change_events(
    cluster: TiKVCluster, client_go: Callable[[TiKVCluster], ClientGo], tmp_path: Path
) -> None:
    start, end = key_range("cgo-cdc")
    config = TiKVRawKVSourceConfig(
        type="tikv_rawkv",
        pd_endpoints=[cluster.pd],
        start_key=start.decode(),
        end_key=end.decode(),
        partitions=2,
        start_ts=cluster.ts_before_writes(),
        safety_interval_ms=0,
    )
    source = TiKVRawKVSource(config, PluginContext("client-go-cdc", tmp_path / "p.yaml"))
    source.open()
    try:
        partitions = list(source.partitions())
        offsets: dict[str, Offset] = {p.id: source.initial_offset(p) for p in partitions}
        records: list[ChangeEvent | Rejected] = []

        def poll() -> dict[bytes, list[tuple[str, bytes | None, bool]]]:
            if cluster.standin is not None:
                cluster.control("advance_resolved_ts")
            for partition in partitions:
                latest = source.latest_offset(partition, offsets[partition.id], 10_000)
                records.extend(source.read(partition, offsets[partition.id], latest))  # type: ignore[arg-type]
                offsets[partition.id] = latest
            return _changes(records)

        subscribed = cluster.control("feed_subscriptions") if cluster.standin is not None else 0
        poll()
        if cluster.standin is not None:  # what is written from now on arrives live, in order
            wait_until(lambda: cluster.control("feed_subscriptions") > subscribed, 10, "the feed to subscribe")

        go = client_go(cluster)
        a, b, c, d = (start + name for name in (b"a", b"b", b"c", b"d"))
        go.call("put", key=a, value=b"a1")
        go.call("put", key=a, value=b"")  # an empty value is a value
        go.call("batch_put", keys=[b, c], values=[b"b1", b"c1"], ttls=[3600, 3600])
        go.call("delete", key=b)
        go.call("put", key=d, value=b"d1", ttl=3600)
        go.call("batch_delete", keys=[c])
        go.call("put", key=a, value=b"a2")
        expected = {
            a: [("c", b"a1", False), ("c", b"", False), ("c", b"a2", False)],
            b: [("c", b"b1", True), ("d", None, False)],
            c: [("c", b"c1", True), ("d", None, False)],
            d: [("c", b"d1", True)],
        }
        wait_until(lambda: poll() == expected, 60, "the source to read client-go's writes")
        now_s = time.time()
        ttl_writes = [r for r in records if isinstance(r, ChangeEvent) and r.after and r.after["expire_ts"]]
        assert all(now_s + 3500 < r.after["expire_ts"] <= now_s + 3601 for r in ttl_writes if r.after)
    finally:
        source.close()


def _event(key: bytes, value: bytes | None, expire_ts: int | None = None) -> ChangeEvent:
    source = SourceInfo(system="tikv", cluster="c", keyspace="ks0", table="rawkv", partition="p", position={}, ts_us=0)
    if value is None:
        return ChangeEvent(Op.DELETE, {"key": key}, None, None, source, 0)
    return ChangeEvent(Op.CREATE, {"key": key}, None, {"key": key, "value": value, "expire_ts": expire_ts}, source, 0)


def test_what_cdcflows_tikv_sink_writes_client_go_reads_back(
    cluster: TiKVCluster, client_go: Callable[[TiKVCluster], ClientGo], tmp_path: Path
) -> None:
    start, end = key_range("cgo-sink")
    a, b, c, d = (start + name for name in (b"a", b"b", b"c", b"d"))
    config = TiKVSinkConfig(type="tikv", pd_endpoints=[cluster.pd], workers=2, batch_max_ms=50)
    sink = TiKVSink(config, PluginContext("client-go-sink", tmp_path / "p.yaml"))
    sink.open()
    try:
        expire_ts = int(time.time()) + 3600
        records = [_event(a, b"a1"), _event(b, b""), _event(c, b"c1", expire_ts), _event(d, b"d1"), _event(d, None)]
        assert sink.write([*records, _event(a, b"a2")]) == []
        assert sink.flush() == []
    finally:
        sink.close()
    go = client_go(cluster)
    assert go.batch_get([a, b, c, d]) == [b"a2", b"", b"c1", None]
    assert go.scan(start, end, limit=10) == [(a, b"a2"), (b, b""), (c, b"c1")]
    assert go.ttl(a) == 0
    assert 3500 < (go.ttl(c) or 0) <= 3600
