"""A RawKV client: get, put, delete (single and batch, puts with TTL), scan and delete-range.

Requests are routed to the leader of each key's region; region errors (not leader, epoch
mismatch, region not found, server busy) and unreachable stores are retried after refreshing the
route, with an exponential backoff bounded by ``backoff_budget_s``.

Batches are cut as tikv/client-go ``rawkv/rawkv.go`` cuts them: per region, puts in requests of
about 16 KiB of keys and values (``rawBatchPutSize``; client-go has no pair count for puts), gets
and deletes in requests of 512 keys (``rawBatchPairCount``), the requests of one call sent
concurrently (client-go: one goroutine each; here at most ``max_concurrent_requests``). A store
refuses a raft command above its ``raft-entry-max-size`` (8 MiB by default) with
``RaftEntryTooLarge``; client-go fails the call on it (``internal/locate/region_request.go``).
cdcflow never lets a put request pass 16 KiB unless one pair alone does (client-go may, by one
pair), halves and resends a request of several pairs that is refused anyway (a store configured
with a tiny limit), and fails at once, with :class:`TiKVServerError`, for a single pair too large
for any entry.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message

from cdcflow.config import RetryConfig
from cdcflow.errors import RetriesExhaustedError
from cdcflow.retry import Backoff
from cdcflow.sources.tikv_client.codec import KeyCodec, decode_memcomparable
from cdcflow.sources.tikv_client.exceptions import (
    RegionErrorsExhaustedError,
    RegionNotInPDError,
    StoreNotFoundError,
    TiKVServerError,
    TiKVUnavailableError,
)
from cdcflow.sources.tikv_client.pd import PDClient, RegionInfo, serialize_message
from cdcflow.sources.tikv_client.proto import errorpb_pb2, kvrpcpb_pb2
from cdcflow.sources.tikv_client.regions import RegionCache

__all__ = ["RawKVClient", "RegionRetry", "certificate_refused"]

log = logging.getLogger("cdcflow.tikv.rawkv")

ResponseT = TypeVar("ResponseT", bound=Message)
ItemT = TypeVar("ItemT")

_UNREACHABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}
PUT_REQUEST_BYTES = 16 * 1024  # client-go rawkv.go rawBatchPutSize: keys + values per put request
KEY_REQUEST_COUNT = 512  # client-go rawkv.go rawBatchPairCount: keys per get or delete request


@dataclass(frozen=True)
class RegionRetry:
    """Why a region request must be routed again, and how long TiKV asked us to wait.
    ``entry_size``: the store refused the request as a raft entry of that many bytes."""

    reason: str
    wait_ms: int = 0
    entry_size: int = 0


class RawKVClient:
    """RawKV operations on user keys of one keyspace (API V2) or of the whole cluster (API V1)."""

    def __init__(
        self,
        pd: PDClient,
        codec: KeyCodec,
        timeout_s: float = 10.0,
        backoff_budget_s: float = 20.0,
        max_concurrent_requests: int = 8,
    ) -> None:
        self.pd = pd
        self.codec = codec
        self.timeout_s = timeout_s
        self.regions = RegionCache(pd)
        self._pool = ThreadPoolExecutor(max_concurrent_requests, thread_name_prefix="tikv-rawkv")
        self._retry = RetryConfig(
            initial_backoff_ms=5, max_backoff_ms=1000, multiplier=2.0, jitter=0.2, max_elapsed_s=backoff_budget_s
        )
        self._api_version = kvrpcpb_pb2.V2 if codec.api_version == 2 else kvrpcpb_pb2.V1

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self.regions.close()

    # --- single keys -----------------------------------------------------------------------

    def get(self, key: bytes) -> bytes | None:
        (response,) = self._per_region(
            "RawGet",
            [key],
            lambda ctx, keys: kvrpcpb_pb2.RawGetRequest(context=ctx, key=self.codec.request_key(keys[0])),
            kvrpcpb_pb2.RawGetResponse,
            key_of=_same,
            weight_of=_one,
            limit=1,
        )
        return None if response.not_found else bytes(response.value)

    def put(self, key: bytes, value: bytes, ttl_s: int = 0) -> None:
        self.batch_put([(key, value)], [ttl_s] if ttl_s else None)

    def delete(self, key: bytes) -> None:
        self.batch_delete([key])

    # --- batches ---------------------------------------------------------------------------

    def batch_get(self, keys: Sequence[bytes]) -> dict[bytes, bytes]:
        """The keys that exist, with their values."""
        found: dict[bytes, bytes] = {}
        for response in self._per_region(
            "RawBatchGet",
            list(keys),
            lambda ctx, group: kvrpcpb_pb2.RawBatchGetRequest(
                context=ctx, keys=[self.codec.request_key(k) for k in group]
            ),
            kvrpcpb_pb2.RawBatchGetResponse,
            key_of=_same,
            weight_of=_one,
            limit=KEY_REQUEST_COUNT,
        ):
            for pair in response.pairs:
                found[self.codec.user_key(bytes(pair.key))] = bytes(pair.value)
        return found

    def batch_put(self, pairs: Sequence[tuple[bytes, bytes]], ttls_s: Sequence[int] | None = None) -> None:
        """Writes every pair; ``ttls_s`` is one TTL for all or one per pair (0: no expiry).

        The requests of one call go concurrently, so a key given twice is written once, with its
        last value (client-go's ``BatchPut`` keeps the last too).
        """
        if ttls_s is not None and len(ttls_s) not in (1, len(pairs)):
            raise ValueError(f"{len(ttls_s)} TTLs for {len(pairs)} pairs: give one TTL or one per pair")
        last: dict[bytes, tuple[bytes, bytes, int]] = {
            key: (key, value, (ttls_s[0] if len(ttls_s) == 1 else ttls_s[index]) if ttls_s else 0)
            for index, (key, value) in enumerate(pairs)
        }
        items = list(last.values())

        def request(ctx: kvrpcpb_pb2.Context, group: list[tuple[bytes, bytes, int]]) -> Message:
            ttls = [ttl for _, _, ttl in group]
            return kvrpcpb_pb2.RawBatchPutRequest(
                context=ctx,
                pairs=[kvrpcpb_pb2.KvPair(key=self.codec.request_key(k), value=v) for k, v, _ in group],
                ttls=ttls if any(ttls) else [],
            )

        self._per_region(
            "RawBatchPut",
            items,
            request,
            kvrpcpb_pb2.RawBatchPutResponse,
            key_of=lambda item: item[0],
            weight_of=lambda item: len(item[0]) + len(item[1]),
            limit=PUT_REQUEST_BYTES,
        )

    def batch_delete(self, keys: Sequence[bytes]) -> None:
        self._per_region(
            "RawBatchDelete",
            list(dict.fromkeys(keys)),
            lambda ctx, group: kvrpcpb_pb2.RawBatchDeleteRequest(
                context=ctx, keys=[self.codec.request_key(k) for k in group]
            ),
            kvrpcpb_pb2.RawBatchDeleteResponse,
            key_of=_same,
            weight_of=_one,
            limit=KEY_REQUEST_COUNT,
        )

    # --- ranges ----------------------------------------------------------------------------

    def scan(self, start: bytes = b"", end: bytes = b"", limit: int = 10_000) -> list[tuple[bytes, bytes]]:
        """Up to ``limit`` live pairs in [start, end) in key order (``end`` empty: the keyspace's end)."""
        request_start, request_end = self.codec.request_range(start, end)
        pairs: list[tuple[bytes, bytes]] = []
        cursor = request_start
        while len(pairs) < limit:
            remaining = limit - len(pairs)

            def scan_request(
                ctx: kvrpcpb_pb2.Context, region_end: bytes, c: bytes = cursor, n: int = remaining
            ) -> Message:
                return kvrpcpb_pb2.RawScanRequest(
                    context=ctx, start_key=c, end_key=_min_end(request_end, region_end), limit=n
                )

            region, response = self._range_request("RawScan", cursor, scan_request, kvrpcpb_pb2.RawScanResponse)
            pairs.extend((self.codec.user_key(bytes(kv.key)), bytes(kv.value)) for kv in response.kvs)
            next_cursor = self._request_key_after(region)
            if next_cursor is None or (request_end and next_cursor >= request_end):
                break
            cursor = next_cursor
        return pairs[:limit]

    def scan_all(self, start: bytes = b"", end: bytes = b"", page: int = 10_000) -> Iterable[tuple[bytes, bytes]]:
        """Every live pair in [start, end), fetched ``page`` at a time."""
        cursor = start
        while True:
            batch = self.scan(cursor, end, page)
            yield from batch
            if len(batch) < page:
                return
            cursor = batch[-1][0] + b"\x00"

    def delete_range(self, start: bytes = b"", end: bytes = b"") -> None:
        """Deletes every key in [start, end), region by region.

        Under API V2 this is not a change a change feed sees: TiKV removes every version of the
        range physically (one raft DeleteRange, no delete markers; tikv/tikv src/storage/mod.rs
        ``raw_delete_range``) and its CDC passes on puts only. A ``tikv_rawkv`` source (or
        TiKV-CDC) downstream keeps the keys; use :meth:`batch_delete`, which writes delete
        markers, when deletes must replicate, or delete the range downstream too.
        """
        request_start, request_end = self.codec.request_range(start, end)
        cursor = request_start
        while True:

            def delete_request(ctx: kvrpcpb_pb2.Context, region_end: bytes, c: bytes = cursor) -> Message:
                return kvrpcpb_pb2.RawDeleteRangeRequest(
                    context=ctx, start_key=c, end_key=_min_end(request_end, region_end)
                )

            region, _ = self._range_request(
                "RawDeleteRange", cursor, delete_request, kvrpcpb_pb2.RawDeleteRangeResponse
            )
            next_cursor = self._request_key_after(region)
            if next_cursor is None or (request_end and next_cursor >= request_end):
                return
            cursor = next_cursor

    # --- routing ---------------------------------------------------------------------------

    def _request_key_after(self, region: RegionInfo) -> bytes | None:
        """The first request key of the region after ``region``, or None at the end of the cluster."""
        if not region.end_key:
            return None
        if self.codec.api_version == 1:
            return region.end_key
        key, _ = decode_memcomparable(region.end_key)
        return key

    def _region_end_request_key(self, region: RegionInfo) -> bytes:
        after = self._request_key_after(region)
        return after if after is not None else b""

    def _range_request(
        self,
        method: str,
        cursor: bytes,
        build: Callable[[kvrpcpb_pb2.Context, bytes], Message],
        response_type: type[ResponseT],
    ) -> tuple[RegionInfo, ResponseT]:
        backoff = Backoff(self._retry)
        while True:
            region = self.regions.locate(self.codec.region_key(cursor))
            region_end = self._region_end_request_key(region)

            def request(ctx: kvrpcpb_pb2.Context, end: bytes = region_end) -> Message:
                return build(ctx, end)

            outcome = self._send(method, region, request, response_type)
            if not isinstance(outcome, RegionRetry):
                return region, outcome
            self._wait(backoff, method, outcome)

    def _per_region(
        self,
        method: str,
        items: list[ItemT],
        build: Callable[[kvrpcpb_pb2.Context, list[ItemT]], Message],
        response_type: type[ResponseT],
        key_of: Callable[[ItemT], bytes],
        weight_of: Callable[[ItemT], int],
        limit: int,
    ) -> list[ResponseT]:
        """Sends ``items`` grouped by region, each group cut into requests of at most ``limit``
        (by ``weight_of``; one item heavier than that goes alone), the requests concurrently.
        Requests that meet a region error are regrouped and sent again until every item is
        acknowledged or the backoff budget runs out; one refused as too large a raft entry is
        halved (see the module docstring)."""
        responses: list[ResponseT] = []
        pending = items
        backoff = Backoff(self._retry)
        while pending:
            requests = [
                (region, chunk)
                for region, group in self._group_by_region(pending, key_of)
                for chunk in _cut(group, weight_of, limit)
            ]
            outcomes = self._send_each(method, requests, build, response_type)
            retry: list[ItemT] = []
            last: RegionRetry | None = None
            for (region, chunk), outcome in zip(requests, outcomes, strict=True):
                if not isinstance(outcome, RegionRetry):
                    responses.append(outcome)
                    continue
                retry.extend(chunk)
                if outcome.entry_size:
                    if len(chunk) == 1:
                        raise TiKVServerError(
                            f"{method} on {region.describe()}: one pair of {weight_of(chunk[0])} bytes makes a raft "
                            f"entry of {outcome.entry_size} bytes, above the store's raft-entry-max-size: TiKV "
                            f"cannot store it"
                        )
                    limit = min(limit, max(1, sum(weight_of(item) for item in chunk) // 2))
                else:
                    last = outcome
            pending = retry
            if last is not None:
                self._wait(backoff, method, last)
        return responses

    def _send_each(
        self,
        method: str,
        requests: list[tuple[RegionInfo, list[ItemT]]],
        build: Callable[[kvrpcpb_pb2.Context, list[ItemT]], Message],
        response_type: type[ResponseT],
    ) -> list[ResponseT | RegionRetry]:
        """One request per (region, items), concurrently when there are several."""

        def send(request: tuple[RegionInfo, list[ItemT]]) -> ResponseT | RegionRetry:
            region, chunk = request
            return self._send(method, region, lambda ctx: build(ctx, chunk), response_type)

        if len(requests) == 1:
            return [send(requests[0])]
        return list(self._pool.map(send, requests))

    def _group_by_region(
        self, items: list[ItemT], key_of: Callable[[ItemT], bytes]
    ) -> list[tuple[RegionInfo, list[ItemT]]]:
        groups: dict[int, tuple[RegionInfo, list[ItemT]]] = {}
        current: RegionInfo | None = None
        for item in items:
            region_key = self.codec.region_key(self.codec.request_key(key_of(item)))
            if current is None or not current.contains(region_key):
                current = self.regions.locate(region_key)
            entry = groups.get(current.id)
            if entry is None:
                groups[current.id] = (current, [item])
            else:
                entry[1].append(item)
        return list(groups.values())

    def _wait(self, backoff: Backoff, method: str, retry: RegionRetry) -> None:
        try:
            delay = backoff.next_delay(method, RuntimeError(retry.reason))
        except RetriesExhaustedError as exc:
            raise RegionErrorsExhaustedError(
                f"{method} kept failing for {self._retry.max_elapsed_s}s; last: {retry.reason}"
            ) from exc
        time.sleep(max(delay, retry.wait_ms / 1000))

    def _send(
        self,
        method: str,
        region: RegionInfo,
        build: Callable[[kvrpcpb_pb2.Context], Message],
        response_type: type[ResponseT],
    ) -> ResponseT | RegionRetry:
        """One request to ``region``'s leader: its response, or why it must be routed again."""
        try:
            store_id, peer = self.regions.leader_store(region)
        except RegionNotInPDError as exc:
            self.regions.invalidate(region.id)
            return RegionRetry(str(exc))
        try:
            address, channel = self.regions.channel_for_store(store_id)
        except (TiKVUnavailableError, StoreNotFoundError) as exc:
            # A purged store: the cached region still routes there; PD knows where it leads now.
            self.regions.invalidate(region.id)
            return RegionRetry(f"PD cannot name store {store_id}: {exc}")
        context = kvrpcpb_pb2.Context(
            region_id=region.id,
            region_epoch=region.meta.region_epoch,
            peer=peer,
            api_version=self._api_version,
        )
        if self.codec.api_version == 2:
            context.keyspace_id = self.codec.keyspace_id
        call = channel.unary_unary(
            f"/tikvpb.Tikv/{method}",
            request_serializer=serialize_message,
            response_deserializer=response_type.FromString,
        )
        try:
            response: Any = call(build(context), timeout=self.timeout_s)
        except grpc.RpcError as exc:
            if exc.code() in _UNREACHABLE:
                self.regions.forget_store(store_id)
                self.regions.invalidate(region.id)
                return RegionRetry(f"store {store_id} at {address}: {exc.code().name}")
            if exc.code() == grpc.StatusCode.UNAUTHENTICATED:
                raise TiKVServerError(f"store {store_id} at {address}: {certificate_refused(exc.details())}") from exc
            raise TiKVServerError(
                f"{method} to store {store_id} at {address}: {exc.code().name}: {exc.details()}"
            ) from exc
        if response.HasField("region_error"):
            return self._handle_region_error(region, response.region_error)
        error = getattr(response, "error", "")
        if error:
            raise TiKVServerError(f"{method} on {region.describe()}: {error}")
        # RawScan and RawBatchGet have no error field: TiKV answers a request it refuses as one
        # pair with an empty key and a KeyError, and a key it cannot read as a pair with an error
        # (tikv/tikv src/storage/errors.rs extract_kv_pairs).
        for pair in getattr(response, "kvs", None) or getattr(response, "pairs", None) or ():
            if pair.HasField("error"):
                key_error = pair.error
                text = key_error.abort or key_error.retryable or str(key_error).strip()
                raise TiKVServerError(f"{method} on {region.describe()}: {text}")
        typed: ResponseT = response
        return typed

    def _handle_region_error(self, region: RegionInfo, error: errorpb_pb2.Error) -> RegionRetry:
        """What to do about a region error. kvproto's ``errorpb.Error`` is not a oneof: it names
        its kind by which field is set, possibly none (a bare message) or one newer than this
        client; as in client-go (``internal/locate/region_request.go`` ``onRegionError``), what is
        not known to need more is answered by refreshing the route and retrying."""
        kind = _region_error_kind(error)
        why = f"{region.describe()}: {error.message or kind or 'region error'}"
        if kind == "raft_entry_too_large":
            # raftstore refused the proposal (peer.rs): the route is right, the request too big.
            return RegionRetry(why, entry_size=int(error.raft_entry_too_large.entry_size) or 1)
        if kind == "not_leader":
            leader = error.not_leader.leader
            if not (leader.store_id and self.regions.update_leader(region.id, leader)):
                self.regions.invalidate(region.id)
            return RegionRetry(f"{region.describe()}: not leader")
        if kind == "server_is_busy":
            return RegionRetry(
                f"{region.describe()}: server is busy ({error.server_is_busy.reason})",
                int(error.server_is_busy.backoff_ms),
            )
        if kind == "epoch_not_match":
            self.regions.invalidate(region.id)
            for current in error.epoch_not_match.current_regions:
                self.regions.invalidate(int(current.id))
            return RegionRetry(f"{region.describe()}: epoch not match")
        if kind in _NOT_RETRYABLE:
            raise TiKVServerError(f"{why} ({kind}: the region is being flashed back; retry once that is over)")
        if kind in _RETRY_IN_PLACE:
            return RegionRetry(why)  # the route is right; the store needs time
        if kind in ("store_not_match", "is_witness", "mismatch_peer_id"):
            store_id, _ = self.regions.leader_store(region)
            self.regions.forget_store(store_id)
        self.regions.invalidate(region.id)
        return RegionRetry(why)


_RETRY_IN_PLACE = frozenset(
    {
        "stale_command",
        "max_timestamp_not_synced",
        "read_index_not_ready",
        "proposal_in_merging_mode",
        "data_is_not_ready",
        "region_not_initialized",
        "disk_full",
        "RecoveryInProgress",
        "undetermined_result",  # RawKV puts and deletes are idempotent: sending them again is safe
    }
)
_NOT_RETRYABLE = frozenset({"FlashbackInProgress", "FlashbackNotPrepared"})


def _region_error_kind(error: errorpb_pb2.Error) -> str:
    """The name of the variant set in ``error``, "" when only a message (or nothing) is."""
    return next((field.name for field, _ in error.ListFields() if field.name != "message"), "")


def certificate_refused(details: str | None) -> str:
    """What to say when a store answers UNAUTHENTICATED: TiKV's cert-allowed-cn or
    cert-allowed-san refused the client certificate (tikv/tikv components/security/src/lib.rs)."""
    return (
        f"TiKV refused this client's certificate ({details}): its cert-allowed-cn / cert-allowed-san do not "
        f"allow the common name or subject alternative names of tls.cert"
    )


def _min_end(request_end: bytes, region_end: bytes) -> bytes:
    """The nearer of two exclusive ends, where empty means unbounded."""
    if not region_end:
        return request_end
    if not request_end:
        return region_end
    return min(request_end, region_end)


def _same(key: bytes) -> bytes:
    return key


def _one(item: object) -> int:
    return 1


def _cut(group: list[ItemT], weight_of: Callable[[ItemT], int], limit: int) -> list[list[ItemT]]:
    """``group`` in order, in runs of total weight at most ``limit`` (an item heavier than the
    limit makes a run of its own)."""
    runs: list[list[ItemT]] = []
    current: list[ItemT] = []
    total = 0
    for item in group:
        weight = weight_of(item)
        if current and total + weight > limit:
            runs.append(current)
            current, total = [], 0
        current.append(item)
        total += weight
    if current:
        runs.append(current)
    return runs
