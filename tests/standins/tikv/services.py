"""gRPC handlers of the stand-in: PD, TiKV RawKV and ChangeData per store, and the test control."""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
from google.protobuf.message import Message

from cdcflow.sources.tikv_client.codec import RawValue, decode_raw_value, encode_memcomparable
from cdcflow.sources.tikv_client.proto import cdcpb_pb2, errorpb_pb2, kvrpcpb_pb2, metapb_pb2, pdpb_pb2
from tests.standins.tikv.cluster import Cluster
from tests.standins.tikv.kvproto_extra import (
    SERVING,
    BatchCommandsRequest,
    BatchCommandsResponse,
    HealthCheckRequest,
    HealthCheckResponse,
    RawGetKeyTTLRequest,
    RawGetKeyTTLResponse,
)
from tests.standins.tikv.pd_view import PDRegion

log = logging.getLogger("standin.tikv")

MAX_KEY_SIZE = 8 << 10  # storage.max-key-size (src/storage/config.rs: 8 KiB default)


def _unary(handler: Callable[[Any, Any], Message], request_type: type[Message]) -> grpc.RpcMethodHandler:
    return grpc.unary_unary_rpc_method_handler(
        handler, request_deserializer=request_type.FromString, response_serializer=lambda m: m.SerializeToString()
    )


# --- PD ----------------------------------------------------------------------------------------


def pd_handler(cluster: Cluster, member_id: int) -> grpc.GenericRpcHandler:
    """PD member ``member_id``: only the leader serves (tikv/pd server/grpc_service.go
    ``validateRoleInRequest``, 2169-2190 at a186e0cc: a follower answers UNAVAILABLE "not leader",
    pkg/errs/errno.go:85, unless the client asks for follower handling, which cdcflow does not);
    every member answers GetMembers (434-480), naming the leader when there is one."""

    def header() -> pdpb_pb2.ResponseHeader:
        with cluster.lock:
            if cluster.take_injected(None, "pd_error"):
                # an error header of a type a client may not know (kvproto pdpb.ErrorType grows)
                error = pdpb_pb2.Error(type=cluster.injected_pd_error_type, message="injected")  # type: ignore[arg-type]
                return pdpb_pb2.ResponseHeader(cluster_id=cluster.cluster_id, error=error)
        return pdpb_pb2.ResponseHeader(cluster_id=cluster.cluster_id)

    def check_leader(context: Any) -> None:
        if cluster.pd_leader != member_id:
            context.abort(grpc.StatusCode.UNAVAILABLE, "not leader")

    def check_cluster_id(request: Any, context: Any) -> None:
        # tikv/pd server/grpc_service.go validateRoleInRequest (through unaryMiddleware, and per
        # request of the Tso stream): a header whose cluster id is not PD's, 0 included, fails
        # the call with FAILED_PRECONDITION (pkg/errs/errno.go ErrMismatchClusterID), not with
        # an error header. GetMembers is exempt: it is how a client learns the id.
        got = request.header.cluster_id
        if got != cluster.cluster_id:
            context.abort(
                grpc.StatusCode.FAILED_PRECONDITION, f"mismatch cluster id, need {cluster.cluster_id} but got {got}"
            )

    def checked(handler: Callable[[Any, Any], Message]) -> Callable[[Any, Any], Message]:
        method = handler.__name__

        def handle(request: Any, context: Any) -> Message:
            check_leader(context)
            check_cluster_id(request, context)
            with cluster.lock:
                cluster.pd_requests[method] = cluster.pd_requests.get(method, 0) + 1
            return handler(request, context)

        return handle

    def get_members(request: pdpb_pb2.GetMembersRequest, context: Any) -> Message:
        with cluster.lock:
            members = [
                pdpb_pb2.Member(name=f"pd-{m}", member_id=m, client_urls=[cluster.pd_urls[m]])
                for m in cluster.pd_members
            ]
            leader = cluster.pd_leader
        header = pdpb_pb2.ResponseHeader(cluster_id=cluster.cluster_id)
        response = pdpb_pb2.GetMembersResponse(header=header, members=members)
        if leader is not None:
            response.leader.CopyFrom(members[cluster.pd_members.index(leader)])
        return response

    def tso(requests: Iterator[pdpb_pb2.TsoRequest], context: Any) -> Iterator[Message]:
        for request in requests:
            if cluster.pd_leader != member_id:
                # grpc_service.go:620-624 with pkg/tso/allocator.go:217-222: GenerateTSO on a
                # member that does not serve fails the stream with codes.Unknown.
                context.abort(
                    grpc.StatusCode.UNKNOWN,
                    "[PD:tso:ErrGenerateTimestamp]generate timestamp failed, requested pd is not leader of cluster",
                )
            check_cluster_id(request, context)
            with cluster.lock:
                ts = cluster.tso.next(max(1, request.count))
            yield pdpb_pb2.TsoResponse(
                header=header(),
                count=request.count,
                timestamp=pdpb_pb2.Timestamp(physical=ts >> 18, logical=ts & ((1 << 18) - 1)),
            )

    def get_store(request: pdpb_pb2.GetStoreRequest, context: Any) -> Message:
        with cluster.lock:
            if cluster.take_injected(request.store_id, "get_store_unavailable"):
                # the call fails in transit, as when PD's leader steps down mid-call
                context.abort(grpc.StatusCode.UNAVAILABLE, "injected: PD unreachable")
        address = cluster.store_addresses.get(request.store_id)
        if address is None:  # grpc_service.go:790-800 (a purged store too, once removed)
            return pdpb_pb2.GetStoreResponse(
                header=pdpb_pb2.ResponseHeader(
                    cluster_id=cluster.cluster_id,
                    error=pdpb_pb2.Error(
                        type=pdpb_pb2.UNKNOWN, message=f"invalid store ID {request.store_id}, not found"
                    ),
                )
            )
        return pdpb_pb2.GetStoreResponse(header=header(), store=metapb_pb2.Store(id=request.store_id, address=address))

    def get_all_stores(request: pdpb_pb2.GetAllStoresRequest, context: Any) -> Message:
        return pdpb_pb2.GetAllStoresResponse(
            header=header(),
            # Each store's version as TiKV reports it to PD (PutStore), which GetAllStores passes on.
            stores=[
                metapb_pb2.Store(id=s, address=a, version=str(cluster.tikv_version))
                for s, a in sorted(cluster.store_addresses.items())
            ],
        )

    # Regions come from PD's own tree (pd_view.py), which lags the stores: holes after a split,
    # leaderless regions after a PD failover. pkg/utils/grpcutil/cluster.go:35-143.

    def get_region(request: pdpb_pb2.GetRegionRequest, context: Any) -> Message:
        with cluster.lock:
            region = cluster.pd_tree.get_by_key(bytes(request.region_key))
            if region is None:  # cluster.go:39-46: the leader answers a bare header
                return pdpb_pb2.GetRegionResponse(header=header())
            return _region_response(header(), region)

    def get_region_by_id(request: pdpb_pb2.GetRegionByIDRequest, context: Any) -> Message:
        with cluster.lock:
            region = cluster.pd_tree.get_by_id(request.region_id)
            if region is None:
                return pdpb_pb2.GetRegionResponse(header=header())
            return _region_response(header(), region)

    def scan_regions(request: pdpb_pb2.ScanRegionsRequest, context: Any) -> Message:
        with cluster.lock:
            found = cluster.pd_tree.scan(bytes(request.start_key), bytes(request.end_key), request.limit)
            # cluster.go:127-140: a region without a leader is sent with an empty Peer.
            leaders = [r.leader if r.leader is not None else metapb_pb2.Peer() for r in found]
            return pdpb_pb2.ScanRegionsResponse(
                header=header(),
                region_metas=[r.meta for r in found],
                leaders=leaders,
                regions=[
                    pdpb_pb2.Region(region=r.meta, leader=leader) for r, leader in zip(found, leaders, strict=True)
                ],
            )

    def get_gc_safe_point(request: pdpb_pb2.GetGCSafePointRequest, context: Any) -> Message:
        return pdpb_pb2.GetGCSafePointResponse(header=header(), safe_point=cluster.gc_safe_point)

    def update_gc_safe_point(request: pdpb_pb2.UpdateGCSafePointRequest, context: Any) -> Message:
        return pdpb_pb2.UpdateGCSafePointResponse(header=header(), new_safe_point=cluster.run_gc(request.safe_point))

    def update_service_gc_safe_point(request: pdpb_pb2.UpdateServiceGCSafePointRequest, context: Any) -> Message:
        minimum = cluster.update_service_safe_point(request.service_id.decode(), request.TTL, request.safe_point)
        return pdpb_pb2.UpdateServiceGCSafePointResponse(
            header=header(), service_id=request.service_id, TTL=request.TTL, min_safe_point=minimum
        )

    return grpc.method_handlers_generic_handler(
        "pdpb.PD",
        {
            "GetMembers": _unary(get_members, pdpb_pb2.GetMembersRequest),
            "Tso": grpc.stream_stream_rpc_method_handler(
                tso,
                request_deserializer=pdpb_pb2.TsoRequest.FromString,
                response_serializer=lambda m: m.SerializeToString(),
            ),
            "GetStore": _unary(checked(get_store), pdpb_pb2.GetStoreRequest),
            "GetAllStores": _unary(checked(get_all_stores), pdpb_pb2.GetAllStoresRequest),
            "GetRegion": _unary(checked(get_region), pdpb_pb2.GetRegionRequest),
            "GetRegionByID": _unary(checked(get_region_by_id), pdpb_pb2.GetRegionByIDRequest),
            "ScanRegions": _unary(checked(scan_regions), pdpb_pb2.ScanRegionsRequest),
            "GetGCSafePoint": _unary(checked(get_gc_safe_point), pdpb_pb2.GetGCSafePointRequest),
            "UpdateGCSafePoint": _unary(checked(update_gc_safe_point), pdpb_pb2.UpdateGCSafePointRequest),
            "UpdateServiceGCSafePoint": _unary(
                checked(update_service_gc_safe_point), pdpb_pb2.UpdateServiceGCSafePointRequest
            ),
        },
    )


def _region_response(header: pdpb_pb2.ResponseHeader, region: PDRegion) -> pdpb_pb2.GetRegionResponse:
    response = pdpb_pb2.GetRegionResponse(header=header, region=region.meta)
    if region.leader is not None:
        response.leader.CopyFrom(region.leader)
    return response


# --- TiKV RawKV --------------------------------------------------------------------------------


def tikv_handler(cluster: Cluster, store_id: int) -> grpc.GenericRpcHandler:
    def storage_error(method: str, request: Any, keys: list[bytes]) -> str | None:
        """What TiKV's storage refuses before any region lookup (src/storage/mod.rs
        ``check_api_version`` / ``check_api_version_ranges``, with components/api_version
        ``ApiV2::parse_key_mode`` / ``parse_range_mode``): a request API version other than
        the storage's for RawKV, and keys or ranges outside RawKV's key mode. A range needs both
        ends, of one key mode, or the end right after it (``b"s"``); an empty end is refused."""
        requested = request.context.api_version
        if cluster.api_version != 2 or requested != kvrpcpb_pb2.V2:
            if cluster.api_version == 1 and requested != kvrpcpb_pb2.V2:
                return "the stand-in stores API V2 data only"
            return (
                f"Api version in request does not match with TiKV storage, cmd: {method}, "
                f"storage: V{cluster.api_version}, request: {kvrpcpb_pb2.APIVersion.Name(requested)}"
            )
        if method in ("RawScan", "RawDeleteRange"):
            start, end = bytes(request.start_key), bytes(request.end_key)
            if not (start and end and start[:1] == b"r" and (end[:1] == b"r" or end == b"s")):
                return (
                    f"Key mode mismatched with the request mode, cmd: {method}, storage: V2, "
                    f"range: ({start.hex().upper()!r}, {end.hex().upper() or None!r})"
                )
            return None
        wrong = next((key for key in keys if not key.startswith(b"r")), None)
        if wrong is not None:
            return f"Key mode mismatched with the request mode, cmd: {method}, storage: V2, key: {wrong.hex().upper()}"
        return None

    def refuse(response: Any, text: str) -> None:
        """A request-level error where TiKV puts it: the ``error`` string of responses that have
        one; RawScan and RawBatchGet have none, so src/storage/errors.rs ``extract_kv_pairs``
        answers one KvPair with an empty key and ``KeyError.abort`` set."""
        fields = response.DESCRIPTOR.fields_by_name
        if "error" in fields:
            response.error = text
        else:
            pairs = response.kvs if "kvs" in fields else response.pairs
            pairs.add(error=kvrpcpb_pb2.KeyError(abort=text))

    def guarded(
        method: str,
        response_type: type[Message],
        keys_of: Callable[[Any], list[bytes]],
        run: Callable[[Any, Any], errorpb_pb2.Error | None],
    ) -> Callable[[Any, Any], Message]:
        def handle(request: Any, context: Any) -> Message:
            response = response_type()
            keys = keys_of(request)
            with cluster.lock:
                refused = storage_error(method, request, keys)
                if refused is not None:
                    refuse(response, refused)
                    return response
                region_error = cluster.check_request(store_id, request.context, keys) or run(request, response)
                if region_error is not None:
                    cluster.count_region_error(region_error)
                    response.region_error.CopyFrom(region_error)  # type: ignore[attr-defined]
            return response

        return handle

    def raw_get(request: kvrpcpb_pb2.RawGetRequest, response: kvrpcpb_pb2.RawGetResponse) -> None:
        value = cluster.live_value(request.key, time.time())
        if value is None:
            response.not_found = True
        else:
            response.value = value.user_value

    def raw_batch_get(request: kvrpcpb_pb2.RawBatchGetRequest, response: kvrpcpb_pb2.RawBatchGetResponse) -> None:
        now = time.time()
        if cluster.take_injected(store_id, "key_error"):
            # storage/errors.rs entry_result_to_kv_pair: a key's own error, the key not set
            response.pairs.add(error=kvrpcpb_pb2.KeyError(abort="injected key error"))
        for key in request.keys:
            value = cluster.live_value(key, now)
            if value is not None:
                response.pairs.add(key=key, value=value.user_value)

    def write(request: Any, response: Any, entries: list[tuple[bytes, RawValue]]) -> errorpb_pb2.Error | None:
        """Stores the writes, or refuses them as TiKV would: a key above storage.max-key-size in
        ``error`` (src/storage/errors.rs KeyTooLarge), a raft command above raft-entry-max-size
        as a region error."""
        too_long = next((key for key, _ in entries if len(key) > MAX_KEY_SIZE), None)
        if too_long is not None:
            response.error = f"max key size exceeded, size: {len(too_long)}, limit: {MAX_KEY_SIZE}"
            return None
        refused = cluster.check_entry_size(request.context.region_id, entries)
        if refused is None:
            cluster.write(entries, store_id)
        return refused

    # An empty value is a value (src/storage/mod.rs:6894 stores and reads one back; client-go
    # "rawkv: permit empty value" #612): RawPut and RawBatchPut take it, and the feed sends it
    # as a PUT row (components/cdc/src/delegate.rs:1319-1339 decode_rawkv).

    def raw_put(request: kvrpcpb_pb2.RawPutRequest, response: kvrpcpb_pb2.RawPutResponse) -> errorpb_pb2.Error | None:
        return write(request, response, [(request.key, RawValue(request.value, _expire(request.ttl)))])

    def raw_batch_put(
        request: kvrpcpb_pb2.RawBatchPutRequest, response: kvrpcpb_pb2.RawBatchPutResponse
    ) -> errorpb_pb2.Error | None:
        ttls = list(request.ttls)
        if ttls and len(ttls) not in (1, len(request.pairs)):
            response.error = f"ttls length {len(ttls)} does not match pairs length {len(request.pairs)}"
            return None
        entries = []
        for index, pair in enumerate(request.pairs):
            ttl = (ttls[0] if len(ttls) == 1 else ttls[index]) if ttls else 0
            entries.append((pair.key, RawValue(pair.value, _expire(ttl))))
        return write(request, response, entries)

    def raw_delete(
        request: kvrpcpb_pb2.RawDeleteRequest, response: kvrpcpb_pb2.RawDeleteResponse
    ) -> errorpb_pb2.Error | None:
        return write(request, response, [(request.key, RawValue(b"", is_delete=True))])

    def raw_batch_delete(request: kvrpcpb_pb2.RawBatchDeleteRequest, response: Message) -> errorpb_pb2.Error | None:
        return write(request, response, [(key, RawValue(b"", is_delete=True)) for key in request.keys])

    def raw_scan(request: kvrpcpb_pb2.RawScanRequest, response: kvrpcpb_pb2.RawScanResponse) -> None:
        region = cluster.region_by_id(request.context.region_id)
        assert region is not None
        now = time.time()
        for key in cluster.keys_in(request.start_key, request.end_key):
            if not region.contains(encode_memcomparable(key)):
                break
            value = cluster.live_value(key, now)
            if value is None:
                continue
            response.kvs.add(key=key, value=b"" if request.key_only else value.user_value)
            if len(response.kvs) >= (request.limit or 1 << 30):
                break

    def raw_delete_range(request: kvrpcpb_pb2.RawDeleteRangeRequest, response: Message) -> None:
        cluster.delete_range(bytes(request.start_key), bytes(request.end_key))

    def raw_get_key_ttl(request: Any, response: Any) -> None:
        """src/storage/raw/encoded.rs ``get_key_ttl_cf``: the seconds left before the value
        expires, 0 without a TTL, not found when absent, deleted or expired; "now" is whole
        seconds (engine_traits raw_ttl.rs ``ttl_current_ts``)."""
        now = int(time.time())
        value = cluster.live_value(request.key, now)
        if value is None:
            response.not_found = True
        else:
            response.ttl = value.expire_ts - now if value.expire_ts is not None else 0

    def one_key(request: Any) -> list[bytes]:
        return [request.key]

    def many_keys(request: Any) -> list[bytes]:
        return list(request.keys)

    def pair_keys(request: Any) -> list[bytes]:
        return [pair.key for pair in request.pairs]

    def range_start(request: Any) -> list[bytes]:
        return [request.start_key]

    handlers = {
        "RawGet": (kvrpcpb_pb2.RawGetRequest, kvrpcpb_pb2.RawGetResponse, one_key, raw_get),
        "RawBatchGet": (kvrpcpb_pb2.RawBatchGetRequest, kvrpcpb_pb2.RawBatchGetResponse, many_keys, raw_batch_get),
        "RawPut": (kvrpcpb_pb2.RawPutRequest, kvrpcpb_pb2.RawPutResponse, one_key, raw_put),
        "RawBatchPut": (kvrpcpb_pb2.RawBatchPutRequest, kvrpcpb_pb2.RawBatchPutResponse, pair_keys, raw_batch_put),
        "RawDelete": (kvrpcpb_pb2.RawDeleteRequest, kvrpcpb_pb2.RawDeleteResponse, one_key, raw_delete),
        "RawBatchDelete": (
            kvrpcpb_pb2.RawBatchDeleteRequest,
            kvrpcpb_pb2.RawBatchDeleteResponse,
            many_keys,
            raw_batch_delete,
        ),
        "RawScan": (kvrpcpb_pb2.RawScanRequest, kvrpcpb_pb2.RawScanResponse, range_start, raw_scan),
        "RawDeleteRange": (
            kvrpcpb_pb2.RawDeleteRangeRequest,
            kvrpcpb_pb2.RawDeleteRangeResponse,
            range_start,
            raw_delete_range,
        ),
        "RawGetKeyTTL": (RawGetKeyTTLRequest, RawGetKeyTTLResponse, one_key, raw_get_key_ttl),
    }
    methods = {
        name: guarded(name, response_type, keys_of, run) for name, (_, response_type, keys_of, run) in handlers.items()
    }
    services = {name: _unary(methods[name], request_type) for name, (request_type, *_) in handlers.items()}
    services["BatchCommands"] = grpc.stream_stream_rpc_method_handler(
        _batch_commands(methods),
        request_deserializer=BatchCommandsRequest.FromString,
        response_serializer=lambda m: m.SerializeToString(),
    )
    return grpc.method_handlers_generic_handler("tikvpb.Tikv", services)


def _batch_commands(
    methods: dict[str, Callable[[Any, Any], Message]],
) -> Callable[[Iterator[Any], Any], Iterator[Message]]:
    """``Tikv/BatchCommands``, the stream client-go sends every command it can batch on (kvproto
    tikvpb.proto 119-223): each request of a ``BatchCommandsRequest`` is answered as its unary
    method answers it, under its request id, as tikv/tikv src/server/service/kv.rs
    ``batch_commands`` / ``handle_batch_commands_request`` (1035-1125, 1343-1390) do; a request
    with no command gets an empty response. TiKV may regroup the answers of a stream's requests;
    the stand-in answers each ``BatchCommandsRequest`` with one response, in order, which a client
    matching ids (client-go client_batch.go ``batchRecvLoop``) cannot tell apart. Commands other
    than the RawKV ones the stand-in serves end the stream with UNIMPLEMENTED."""

    def batch_commands(requests: Iterator[Any], context: Any) -> Iterator[Message]:
        for batch in requests:
            response = BatchCommandsResponse()
            for request_id, request in zip(batch.request_ids, batch.requests, strict=False):
                command = request.WhichOneof("cmd")
                if command is None and request.ByteSize() > 0:
                    context.abort(
                        grpc.StatusCode.UNIMPLEMENTED, "the stand-in serves only RawKV commands in BatchCommands"
                    )
                answer = response.responses.add()
                if command is not None:
                    getattr(answer, command).CopyFrom(methods[command](getattr(request, command), context))
                response.request_ids.append(request_id)
            yield response

    return batch_commands


def health_handler() -> grpc.GenericRpcHandler:
    """``grpc.health.v1.Health/Check``, which every TiKV store serves (src/server/server.rs:131,
    ``create_health``), SERVING once it runs (components/health_controller/src/lib.rs:165-168);
    client-go asks it of a store it failed to reach before sending there again
    (internal/locate/region_cache.go:2551-2570, v2.0.4)."""

    def check(request: Any, context: Any) -> Message:
        return HealthCheckResponse(status=SERVING)

    return grpc.method_handlers_generic_handler("grpc.health.v1.Health", {"Check": _unary(check, HealthCheckRequest)})


def _expire(ttl_s: int) -> int | None:
    return int(time.time()) + ttl_s if ttl_s else None


# --- ChangeData --------------------------------------------------------------------------------


def change_data_handler(cluster: Cluster, store_id: int) -> grpc.GenericRpcHandler:
    def event_feed(requests: Iterator[cdcpb_pb2.ChangeDataRequest], context: Any) -> Iterator[Message]:
        connection = cluster.open_connection(store_id)

        def receive() -> None:
            try:
                for request in requests:
                    if request.HasField("deregister"):
                        cluster.deregister(connection, request)
                    else:
                        cluster.register(connection, request)
            except Exception:  # the client went away
                pass
            finally:
                connection.outbox.put(EOFError())

        threading.Thread(target=receive, name=f"feed-{store_id}", daemon=True).start()
        try:
            while context.is_active():
                try:
                    item = connection.outbox.get(timeout=0.5)
                except queue.Empty:
                    continue
                if isinstance(item, EOFError):
                    return
                if isinstance(item, BaseException):
                    context.abort(grpc.StatusCode.UNAVAILABLE, f"injected stream break: {item}")
                with cluster.lock:
                    connection.sent(item)
                yield item
        finally:
            cluster.close_connection(connection)

    return grpc.method_handlers_generic_handler(
        "cdcpb.ChangeData",
        {
            "EventFeed": grpc.stream_stream_rpc_method_handler(
                event_feed,
                request_deserializer=cdcpb_pb2.ChangeDataRequest.FromString,
                response_serializer=lambda m: m.SerializeToString(),
            ),
        },
    )


# --- control (tests only) ----------------------------------------------------------------------


def control_handler(cluster: Cluster) -> grpc.GenericRpcHandler:
    def call(request: dict[str, Any], context: Any) -> dict[str, Any]:
        command = request.pop("command")
        try:
            return {"result": _control(cluster, command, request)}
        except Exception as exc:  # reported to the test, which fails with it
            return {"error": f"{type(exc).__name__}: {exc}"}

    return grpc.method_handlers_generic_handler(
        "cdcflow.standin.Control",
        {
            "Call": grpc.unary_unary_rpc_method_handler(
                call, request_deserializer=json.loads, response_serializer=lambda d: json.dumps(d).encode()
            ),
        },
    )


def _control(cluster: Cluster, command: str, args: dict[str, Any]) -> Any:
    if command == "split":
        # hole_s > 0: PD hears of the "first" half only, for that long (pd_view.py)
        return cluster.split(bytes.fromhex(args["key"]), float(args.get("hole_s", 0.0)), str(args.get("first", "left")))
    if command == "split_many":
        keys = [bytes.fromhex(k) for k in args["keys"]]
        return cluster.split_many(keys, bool(args.get("spread_leaders", False)))
    if command == "scans_pending":
        with cluster.lock:  # per store: registrations whose incremental scan has not ended, now and at most
            return {"now": dict(cluster.scans_pending), "peak": dict(cluster.scans_pending_peak)}
    if command == "report_heartbeats":
        return cluster.report_heartbeats()
    if command == "pd_regions":
        with cluster.lock:
            return [
                {
                    "id": r.meta.id,
                    "start": r.start.hex(),
                    "end": r.end.hex(),
                    "leader_store": r.leader.store_id if r.leader is not None else None,
                }
                for r in cluster.pd_tree.all()
            ]
    if command == "pd_failover":
        cluster.pd_failover(
            int(args["to"]), float(args.get("election_s", 0.0)), float(args.get("heartbeats_after_s", 0.0))
        )
        return None
    if command == "pd_stop_member":
        return cluster.pd_stop_member(
            int(args["member"]), float(args.get("election_s", 0.0)), float(args.get("heartbeats_after_s", 0.0))
        )
    if command == "pd_members":
        with cluster.lock:
            return {"leader": cluster.pd_leader, "urls": {str(m): u for m, u in cluster.pd_urls.items()}}
    if command == "release_old_leader":
        return cluster.release_old_leader(int(args["region_id"]))
    if command == "add_store":
        store_id = cluster.add_store()
        return {"store_id": store_id, "address": cluster.store_addresses[store_id]}
    if command == "purge_store":
        cluster.purge_store(int(args["store_id"]))
        return None
    if command == "causal_ts_flushes":
        with cluster.lock:
            return {str(s): p.flushes for s, p in cluster.providers.items()}
    if command == "merge":
        return cluster.merge(int(args["region_id"]))
    if command == "conf_change":
        cluster.conf_change(int(args["region_id"]))
        return None
    if command == "transfer_leader":
        # linger: the old leader keeps its subscriptions until release_old_leader (the #193 race);
        # pd_heartbeat_s: PD hears of the new leader that much later
        cluster.transfer_leader(
            int(args["region_id"]),
            int(args["store_id"]),
            bool(args.get("linger", False)),
            float(args.get("pd_heartbeat_s", 0.0)),
        )
        return None
    if command == "demote_to_learner":
        cluster.demote_to_learner(int(args["region_id"]), int(args["store_id"]))
        return None
    if command == "feed_errors_sent":
        with cluster.lock:
            return dict(cluster.feed_errors_sent)
    if command == "pd_requests":
        with cluster.lock:
            return dict(cluster.pd_requests)
    if command == "regions":
        with cluster.lock:
            return [
                {
                    "id": r.id,
                    "start": r.start.hex(),
                    "end": r.end.hex(),
                    "version": r.version,
                    "leader_store": r.leader_store,
                    "stores": sorted(r.peers),
                }
                for r in cluster.regions
            ]
    if command == "inject":
        # kinds: not_leader, epoch_not_match, server_is_busy, feed_busy, stream_break, key_error,
        # get_store_unavailable (PD's GetStore of store_id fails UNAVAILABLE),
        # region_error (args "variant": an errorpb.Error field name, "" for a bare error),
        # pd_error (args "error_type": a pdpb.ErrorType number)
        with cluster.lock:
            cluster.injected_variant = str(args.get("variant", cluster.injected_variant))
            cluster.injected_pd_error_type = int(args.get("error_type", cluster.injected_pd_error_type))
        cluster.inject(args["kind"], args.get("store_id"), int(args.get("count", 1)))
        return None
    if command == "injected":
        with cluster.lock:  # what is left of each injection: kind or store:kind -> count
            return {
                (f"{store}:{kind}" if store is not None else kind): n for (store, kind), n in cluster.injected.items()
            }
    if command == "inject_row":
        cluster.inject_row(
            cdcpb_pb2.Event.Row(
                start_ts=int(args["ts"]),
                commit_ts=int(args["ts"]),
                type=cdcpb_pb2.Event.COMMITTED,
                op_type=int(args["op_type"]),
                key=bytes.fromhex(args["key"]),
                value=bytes.fromhex(args["value"]),
            )
        )
        return None
    if command == "advance_resolved_ts":
        return cluster.advance_resolved_ts()
    if command == "feed_connections":
        with cluster.lock:
            return [
                {
                    "store_id": c.store_id,
                    "version": str(c.version) if c.version is not None else None,
                    "features": sorted(c.features),
                    "regions": [s.region_id for s in c.subscriptions],
                }
                for c in cluster.connections
            ]
    if command == "run_gc":
        return cluster.run_gc(int(args["safe_point"]), bool(args.get("ignore_services", False)))
    if command == "gc_state":
        with cluster.lock:
            return {
                "gc_safe_point": cluster.gc_safe_point,
                "services": {k: [v[0], v[1]] for k, v in cluster.service_safe_points.items()},
            }
    if command == "history":
        return cluster.history(bytes.fromhex(args.get("start", "")), bytes.fromhex(args.get("end", "")))
    if command == "pause_scans":
        cluster.pause_scans(bool(args["paused"]))
        return None
    if command == "scans_waiting":
        with cluster.lock:
            return cluster.scans_waiting
    if command == "region_errors_sent":
        with cluster.lock:
            return dict(cluster.region_errors_sent)
    if command == "feed_registers":
        return cluster.registers
    if command == "feed_subscriptions":
        with cluster.lock:
            return sum(len(c.subscriptions) for c in cluster.connections)
    if command == "stored_value":
        versions = cluster.versions.get(bytes.fromhex(args["key"]))
        return None if not versions else decode_raw_value(versions[-1].value).user_value.hex()
    raise ValueError(f"unknown control command {command!r}")
