"""The PD/TiKV client against the stand-in, where it behaves as the upstream servers do: PD's
cluster-id check, region errors, per-key errors, raft entry limits, range deletes, region epochs."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdcflow.contract import PluginContext
from cdcflow.errors import RecordRejectedError
from cdcflow.events import ChangeEvent, Op, SourceInfo
from cdcflow.sinks.tikv.sink import TiKVSink, TiKVSinkConfig
from cdcflow.sources.tikv_client import KeyCodec
from cdcflow.sources.tikv_client.codec import encode_memcomparable
from cdcflow.sources.tikv_client.exceptions import PDError, TiKVServerError
from cdcflow.sources.tikv_client.pd import PDClient
from cdcflow.sources.tikv_client.rawkv import RawKVClient
from tests.integration.tikv_helpers import REAL_UPSTREAM, TiKVCluster, key_range, start_cluster
from tests.standins.tikv.control import StandinCluster


@pytest.fixture(scope="module")
def upstream() -> Iterator[TiKVCluster]:
    yield from start_cluster(REAL_UPSTREAM)


def test_a_pd_client_that_never_connected_sends_the_cluster_id_on_its_first_call(upstream: TiKVCluster) -> None:
    # Real PD fails every call but GetMembers whose header does not carry its cluster id.
    pd = PDClient([upstream.pd])
    try:
        region = pd.get_region(b"")
        assert region.id > 0 and pd.cluster_id != 0
        assert pd.get_gc_safe_point() >= 0
    finally:
        pd.close()


def test_pd_endpoints_of_two_clusters_are_refused_not_followed() -> None:
    if REAL_UPSTREAM:
        pytest.skip("needs two stand-ins with different cluster ids")
    first, second = StandinCluster.start(stores=1, cluster_id=7), StandinCluster.start(stores=1, cluster_id=8)
    pd = PDClient([first.pd, second.pd], timeout_s=2.0)
    try:
        pd.get_ts()
        first.stop()  # the client moves to the next endpoint: another cluster's PD
        with pytest.raises(PDError, match=r"cluster 8, not cluster 7"):
            for _ in range(3):
                pd.get_region(b"")
    finally:
        pd.close()
        first.stop()
        second.stop()


@pytest.fixture(scope="module")
def small_entries() -> Iterator[TiKVCluster]:
    """A stand-in whose raft-entry-max-size is 64 KiB (TiKV's default is 8 MiB)."""
    if REAL_UPSTREAM:
        pytest.skip("needs a stand-in with a small raft-entry-max-size")
    yield from start_cluster(None, stores=1, raft_entry_max_size=64 << 10)


def _entry_too_large_replies(cluster: TiKVCluster) -> int:
    return int(cluster.control("region_errors_sent").get("raft_entry_too_large", 0))


def test_a_batch_larger_than_a_raft_entry_goes_in_requests_that_fit(small_entries: TiKVCluster) -> None:
    kv = RawKVClient(small_entries.pd_client, KeyCodec(2, 0), backoff_budget_s=3.0)
    before = _entry_too_large_replies(small_entries)
    try:
        pairs = [(b"big/%04d" % n, bytes([n % 250 + 1]) * 2048) for n in range(200)]  # 400 KiB, one region
        kv.batch_put(pairs)
        assert kv.batch_get([key for key, _ in pairs]) == dict(pairs)
        kv.batch_delete([key for key, _ in pairs])
        assert kv.batch_get([key for key, _ in pairs]) == {}
        assert _entry_too_large_replies(small_entries) == before
    finally:
        kv.close()


def test_one_pair_larger_than_a_raft_entry_fails_at_once_naming_the_limit(small_entries: TiKVCluster) -> None:
    kv = RawKVClient(small_entries.pd_client, KeyCodec(2, 0), backoff_budget_s=3.0)
    before = _entry_too_large_replies(small_entries)
    try:
        with pytest.raises(TiKVServerError, match="raft-entry-max-size"):
            kv.batch_put([(b"huge/a", b"x" * 100_000), (b"huge/b", b"y")])
        assert _entry_too_large_replies(small_entries) - before <= 2  # refused, not retried for 3 s
        assert kv.get(b"huge/b") == b"y"  # the pair that fits is written
    finally:
        kv.close()


def test_the_sink_sends_a_big_flush_in_entries_that_fit_and_rejects_a_record_no_entry_can_hold(
    small_entries: TiKVCluster, tmp_path: Path
) -> None:
    config = TiKVSinkConfig(
        type="tikv", pd_endpoints=[small_entries.pd], workers=2, max_write_bytes=32 << 10, batch_max_ms=50
    )
    sink = TiKVSink(config, PluginContext("tikv-sink-test", tmp_path / "p.yaml"))
    before = _entry_too_large_replies(small_entries)
    sink.open()
    try:
        records = [_put(b"sink/%04d" % n, b"v" * 2048) for n in range(200)] + [_put(b"sink/huge", b"x" * 40_000)]
        rejected = sink.write(records) + sink.flush()
        assert [r.record.key for r in rejected] == [{"key": b"sink/huge"}]  # type: ignore[union-attr]
        assert isinstance(rejected[0].error, RecordRejectedError) and "max_write_bytes" in str(rejected[0].error)
        written = small_entries.kv.batch_get([b"sink/%04d" % n for n in range(200)])
        assert len(written) == 200 and set(written.values()) == {b"v" * 2048}
        assert _entry_too_large_replies(small_entries) == before
    finally:
        sink.close()


def _put(key: bytes, value: bytes) -> ChangeEvent:
    source = SourceInfo(system="tikv", cluster="c", keyspace="ks0", table="rawkv", partition="p", position={}, ts_us=0)
    return ChangeEvent(Op.CREATE, {"key": key}, None, {"key": key, "value": value, "expire_ts": None}, source, 0)


def test_a_request_tikv_refuses_as_a_whole_reports_its_error_not_a_bad_key(upstream: TiKVCluster) -> None:
    # TiKV answers a V1 request to V2 storage in `error`, or, for RawScan and RawBatchGet, which
    # have no such field, in one KvPair with an empty key and KeyError.abort set.
    v1 = RawKVClient(upstream.pd_client, KeyCodec(1))
    try:
        with pytest.raises(TiKVServerError, match="Api version in request does not match with TiKV storage"):
            v1.scan(b"a", b"b")
        with pytest.raises(TiKVServerError, match="Api version in request does not match with TiKV storage"):
            v1.batch_get([b"a"])
        with pytest.raises(TiKVServerError, match="Api version in request does not match with TiKV storage"):
            v1.get(b"a")
    finally:
        v1.close()


def test_a_key_error_in_a_batch_get_is_reported(upstream: TiKVCluster) -> None:
    start, _ = key_range("keyerror")
    upstream.kv.put(start + b"k", b"v")
    upstream.control("inject", kind="key_error")
    with pytest.raises(TiKVServerError, match="injected key error"):
        upstream.kv.batch_get([start + b"k"])
    assert upstream.kv.batch_get([start + b"k"]) == {start + b"k": b"v"}


@pytest.mark.parametrize(
    "variant",
    ["", "undetermined_result", "disk_full", "region_not_initialized", "mismatch_peer_id", "key_not_in_region"],
)
def test_region_errors_are_retried_after_refreshing_the_route(upstream: TiKVCluster, variant: str) -> None:
    # errorpb.Error is not a oneof: a bare error (no message, no variant) or a variant the
    # client has no special case for means "refresh the route and retry", as in client-go.
    start, _ = key_range("regionerror")
    upstream.control("inject", kind="region_error", variant=variant, count=2)
    upstream.kv.batch_put([(start + b"a", b"1"), (start + b"b", b"2")])
    assert upstream.kv.batch_get([start + b"a", start + b"b"]) == {start + b"a": b"1", start + b"b": b"2"}


def test_a_region_in_flashback_fails_the_request_at_once(upstream: TiKVCluster) -> None:
    start, _ = key_range("flashback")
    upstream.control("inject", kind="region_error", variant="FlashbackInProgress", count=1)
    with pytest.raises(TiKVServerError, match="FlashbackInProgress"):
        upstream.kv.put(start + b"a", b"1")


@pytest.mark.parametrize(("error_type", "shown"), [(10, "INVALID_VALUE"), (42, "error type 42")])
def test_pd_error_types_the_client_may_not_know_are_reported(
    upstream: TiKVCluster, error_type: int, shown: str
) -> None:
    pd = PDClient([upstream.pd])
    try:
        pd.connect()
        upstream.control("inject", kind="pd_error", error_type=error_type)
        with pytest.raises(PDError, match=f"GetGCSafePoint answered {shown}: injected"):
            pd.get_gc_safe_point()
    finally:
        pd.close()


def test_a_conf_change_does_not_stale_a_region_the_client_knows(upstream: TiKVCluster) -> None:
    # TiKV checks a request's region epoch on `version` only (raftstore util.rs
    # NORMAL_REQ_CHECK_CONF_VER = false): a peer change leaves cached routes valid.
    start, _ = key_range("confver")
    upstream.kv.put(start + b"a", b"1")  # the region is now cached, with its conf_ver
    region_key = encode_memcomparable(b"r\x00\x00\x00" + start + b"a").hex()
    region = next(
        r for r in upstream.control("regions") if r["start"] <= region_key and (not r["end"] or region_key < r["end"])
    )
    before = upstream.control("region_errors_sent").get("epoch_not_match", 0)
    upstream.control("conf_change", region_id=region["id"])
    upstream.kv.put(start + b"b", b"2")
    assert upstream.control("region_errors_sent").get("epoch_not_match", 0) == before
    assert upstream.kv.get(start + b"b") == b"2"


def test_an_empty_value_is_stored_and_read_back_as_an_empty_value(upstream: TiKVCluster) -> None:
    # TiKV stores empty RawKV values (src/storage/mod.rs test data "empty value"); client-go
    # dropped its own refusal ("rawkv: permit empty value", #612). Present and empty, not absent.
    start, end = key_range("emptyvalue")
    upstream.kv.put(start + b"a", b"")
    upstream.kv.batch_put([(start + b"b", b""), (start + b"c", b"x")])
    assert upstream.kv.get(start + b"a") == b""
    assert upstream.kv.get(start + b"z") is None
    assert upstream.kv.scan(start, end) == [(start + b"a", b""), (start + b"b", b""), (start + b"c", b"x")]


def test_a_key_in_a_hole_of_pds_regions_is_written_once_pd_knows_its_region(upstream: TiKVCluster) -> None:
    # After a split PD's tree has a hole where the half that has not reported yet lies (tikv/pd
    # pkg/core/region_tree.go 171-191); GetRegion of a key there answers no region. client-go asks
    # again with backoff ("region not found for key"); so must this client.
    start, _ = key_range("pdhole")
    upstream.control("split", key=(b"r\x00\x00\x00" + start + b"m").hex(), hole_s=1.0, first="left")
    hole_start = encode_memcomparable(b"r\x00\x00\x00" + start + b"m").hex()
    assert not any(r["start"] == hole_start for r in upstream.control("pd_regions"))
    upstream.kv.put(start + b"x", b"1")
    assert upstream.kv.get(start + b"x") == b"1"


def test_the_sink_checks_the_key_tikv_receives_against_its_key_size_limit(
    upstream: TiKVCluster, tmp_path: Path
) -> None:
    # TiKV compares storage.max-key-size (8 KiB) with the key it receives, the API V2 prefix
    # ("r" and the keyspace id, 4 bytes) included (src/storage/mod.rs check_key_size in raw_put
    # and raw_batch_put): a user key of 8,190 bytes is 8,194 there and refused for good.
    config = TiKVSinkConfig(type="tikv", pd_endpoints=[upstream.pd], workers=1, batch_max_ms=50)
    sink = TiKVSink(config, PluginContext("tikv-sink-key-size", tmp_path / "p.yaml"))
    sink.open()
    start, _ = key_range("keysize")
    fits = start + b"f" * (8192 - 4 - len(start) - 1)  # 8,192 bytes as TiKV receives it
    too_long = start + b"t" * (8192 - 4 - len(start) + 2)
    try:
        rejected = sink.write([_put(fits, b"1"), _put(too_long, b"2"), _put(start + b"after", b"3")]) + sink.flush()
        assert [r.record.key for r in rejected] == [{"key": too_long}]  # type: ignore[union-attr]
        assert isinstance(rejected[0].error, RecordRejectedError) and "max_key_bytes" in str(rejected[0].error)
        assert upstream.kv.batch_get([fits, start + b"after"]) == {fits: b"1", start + b"after": b"3"}
    finally:
        sink.close()


def test_the_sink_writes_on_after_pd_purges_a_store_its_regions_led(tmp_path: Path) -> None:
    # A purged store is gone from PD (GetStore: "invalid store ID N, not found", tikv/pd
    # server/grpc_service.go 774-800) while the client's cache still routes regions to it: each
    # such region must be looked up again, not fail the flush for good.
    if REAL_UPSTREAM:
        pytest.skip("purges a store of the stand-in")
    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(contextlib.contextmanager(start_cluster)(None, stores=3))
        start, _ = key_range("purge")
        cluster.split(start + b"m")
        for region in cluster.control("regions"):
            cluster.control("transfer_leader", region_id=region["id"], store_id=3)
        config = TiKVSinkConfig(type="tikv", pd_endpoints=[cluster.pd], workers=1, batch_max_ms=50)
        sink = TiKVSink(config, PluginContext("tikv-sink-purge", tmp_path / "p.yaml"))
        sink.open()
        stack.callback(sink.close)
        sink.write([_put(start + b"a", b"1"), _put(start + b"x", b"1")])
        sink.flush()  # both regions cached, led by store 3
        cluster.control("purge_store", store_id=3)
        for key in (start + b"a", start + b"x"):  # one region at a time: the second meets PD's answer
            sink.write([_put(key, b"2")])
            assert sink.flush() == []
        assert cluster.kv.batch_get([start + b"a", start + b"x"]) == {start + b"a": b"2", start + b"x": b"2"}


@pytest.mark.parametrize("how", ["the leader dies", "the leader steps down"])
def test_pd_calls_and_tso_wait_out_a_pd_election_on_members_pd_named(how: str) -> None:
    # A PD leader that dies or steps down leaves the members without a leader until one wins the
    # election (leader lease 5 s; followers answer UNAVAILABLE "not leader", Tso codes.Unknown).
    # The client was configured with the first member only: it must find the others from PD's
    # GetMembers answers, ask them again with backoff, and retry its calls, TSO included.
    if REAL_UPSTREAM:
        pytest.skip("stops a PD member of the stand-in")
    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(contextlib.contextmanager(start_cluster)(None, stores=1))
        assert cluster.standin is not None
        pd = PDClient([cluster.standin.pd_members[0]], timeout_s=10.0)
        stack.callback(pd.close)
        before = pd.get_ts()
        if how == "the leader dies":
            assert cluster.control("pd_stop_member", member=1, election_s=1.0, heartbeats_after_s=0.5) == 2
        else:
            cluster.control("pd_failover", to=3, election_s=1.0, heartbeats_after_s=0.5)
        assert pd.get_ts() > before
        assert pd.get_region(b"").id > 0
        assert pd.leader == cluster.standin.pd_members[1 if how == "the leader dies" else 2]


def test_a_region_pd_knows_no_leader_of_is_asked_at_a_voter_never_a_learner() -> None:
    # After a PD failover PD knows regions without leaders; a request goes to a peer that can
    # lead (client-go findElectableStoreID), never to a learner, which is refused as not_leader.
    # Here the first peer listed is a learner (a voter demoted in a conf change).
    if REAL_UPSTREAM:
        pytest.skip("demotes a peer and fails PD over on the stand-in")
    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(contextlib.contextmanager(start_cluster)(None, stores=3))
        (region,) = cluster.control("regions")
        cluster.control("demote_to_learner", region_id=region["id"], store_id=1)  # leadership moves to store 2
        cluster.control("pd_failover", to=2, election_s=0.0)
        pd = PDClient([cluster.pd])
        stack.callback(pd.close)
        kv = RawKVClient(pd, KeyCodec(2, 0), backoff_budget_s=5.0)
        stack.callback(kv.close)
        refused_before = cluster.control("region_errors_sent").get("not_leader", 0)
        kv.put(b"learner-test", b"1")
        assert kv.get(b"learner-test") == b"1"
        assert cluster.control("region_errors_sent").get("not_leader", 0) == refused_before
