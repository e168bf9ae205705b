"""The ``tikv`` sink: RawKV batch writes to a downstream cluster, per-key order kept.

Records are spread over ``workers`` threads by a hash of their key, so every write of one key goes
through one worker, in order. A worker gathers writes into a batch bounded by ``batch_max_entries``,
``batch_max_bytes`` and ``batch_max_ms`` (and cut at every watermark advance and flush): these are
flush thresholds (TiKV-CDC's 4096 entries / 40 MiB), not request sizes. It sends the batch as
runs: consecutive PUTs as one ``batch_put``, consecutive DELETEs as one ``batch_delete``, a run
cut where a key repeats, so no two writes of a key are ever reordered or merged; the client cuts a
run into requests small enough for a raft entry (16 KiB of puts, 512 deletes per request, as
client-go does) and sends them concurrently. A record TiKV can never store (a key above
``max_key_bytes``, TiKV's storage.max-key-size, counted as TiKV counts it: with the keyspace
prefix; or a key and value above ``max_write_bytes``, under the downstream's raft-entry-max-size)
is rejected to the dead letters instead of failing the flush forever. A PUT's TTL is recomputed
against the clock when it is sent (the upstream carries the absolute expiry): one already expired
is written as a DELETE. Failed requests are retried with backoff; ``flush`` returns only when
every write handed to ``write`` is acknowledged by TiKV.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

from pydantic import Field

from cdcflow.config import RetryConfig
from cdcflow.contract import PluginConfig, PluginContext, Rejected, Sink
from cdcflow.errors import (
    RecordRejectedError,
    RetriesExhaustedError,
    SinkDeliveryError,
    SinkUnavailableError,
    TransientError,
)
from cdcflow.events import ChangeEvent, Op, Record
from cdcflow.record_errors import SINK_STAGE
from cdcflow.retry import Backoff
from cdcflow.sources.tikv_client import KeyCodec
from cdcflow.sources.tikv_client.exceptions import TiKVClientError
from cdcflow.sources.tikv_client.tls import TLSConfig, TLSFileError

__all__ = ["TiKVSink", "TiKVSinkConfig"]

log = logging.getLogger("cdcflow.sinks.tikv")


class TiKVSinkConfig(PluginConfig):
    pd_endpoints: list[str] = Field(min_length=1, description="the downstream cluster's PD addresses")
    api_version: Literal[1, 2] = Field(default=2, description="2: keys go to keyspace_id; 1: raw keys (V1TTL for TTLs)")
    keyspace_id: int = Field(default=0, ge=0, le=(1 << 24) - 1, description="target keyspace (API V2)")
    workers: int = Field(default=4, ge=1, le=256, description="concurrent writers; keys are hashed to them")
    batch_max_entries: int = Field(default=4096, ge=1, description="a batch is sent at this many writes")
    batch_max_bytes: int = Field(default=40 << 20, ge=1024, description="a batch is sent at this many bytes")
    max_key_bytes: int = Field(
        default=8 << 10,
        ge=1,
        description="keys longer than this as TiKV receives them (API V2: with the 4-byte keyspace prefix) are "
        "rejected: TiKV's storage.max-key-size (8 KiB default)",
    )
    max_write_bytes: int = Field(
        default=7 << 20,
        ge=1024,
        description="a key and value above this are rejected: keep it under the downstream's raft-entry-max-size "
        "(8 MiB default) less the key encoding and the raft command's framing",
    )
    batch_max_ms: int = Field(default=500, ge=1, description="a batch is sent at the latest this long after it began")
    queue_max_batches: int = Field(default=64, ge=1, description="write() blocks when a worker has this many waiting")
    request_timeout_s: float = Field(default=10.0, gt=0)
    tls: TLSConfig | None = Field(default=None, description="mutual TLS to PD and TiKV: {ca, cert, key} PEM files")
    retry: RetryConfig = Field(
        default=RetryConfig(initial_backoff_ms=100, max_backoff_ms=5000, max_elapsed_s=120.0),
        description="backoff of a failed batch before the flush fails (the pipeline then replays)",
    )


class _Write(NamedTuple):
    key: bytes
    value: bytes | None  # None: delete
    expire_ts: int  # seconds since the epoch; 0: none


class _Marker:
    """A flush request: the worker sends what it holds and sets ``done`` (when ``wait`` is set)."""

    def __init__(self, wait: bool) -> None:
        self.done = threading.Event() if wait else None


@dataclass
class _Worker:
    index: int
    inbox: queue.Queue[list[_Write] | _Marker]
    thread: threading.Thread | None = None


class TiKVSink(Sink[TiKVSinkConfig]):
    type_name = "tikv"
    config_model = TiKVSinkConfig

    def __init__(self, config: TiKVSinkConfig, context: PluginContext) -> None:
        super().__init__(config, context)
        self.codec = KeyCodec(config.api_version, config.keyspace_id if config.api_version == 2 else 0)
        # grpc is the cdcflow[tikv] extra: imported here so that the plugin registers without it.
        from cdcflow.sources.tikv_client.pd import PDClient
        from cdcflow.sources.tikv_client.rawkv import RawKVClient

        self.pd = PDClient(config.pd_endpoints, config.request_timeout_s, config.tls)
        self.client = RawKVClient(self.pd, self.codec, config.request_timeout_s)
        self._key_prefix_bytes = len(self.codec.request_key(b""))
        self._workers: list[_Worker] = []
        self._error: BaseException | None = None
        self._error_lock = threading.Lock()
        self._stopping = threading.Event()
        self._watermark_us = -1
        self.requests_sent = 0

    # --- lifecycle -----------------------------------------------------------------------------

    def open(self) -> None:
        try:
            self.pd.connect()
        except TLSFileError:
            raise  # a setting to fix, not a cluster to wait for
        except TiKVClientError as exc:
            raise SinkUnavailableError(f"downstream TiKV: {exc}") from exc
        for index in range(self.config.workers):
            worker = _Worker(index, queue.Queue(self.config.queue_max_batches))
            worker.thread = threading.Thread(target=self._run, args=(worker,), name=f"tikv-sink-{index}", daemon=True)
            worker.thread.start()
            self._workers.append(worker)

    def close(self) -> None:
        self._stopping.set()
        for worker in self._workers:
            if worker.thread is not None:
                worker.thread.join(timeout=self.config.request_timeout_s)
        self._workers.clear()
        self.client.close()
        self.pd.close()

    # --- the contract --------------------------------------------------------------------------

    def write(self, records: Sequence[Record]) -> list[Rejected]:
        self._raise_if_failed(SinkUnavailableError)
        rejected: list[Rejected] = []
        shards: list[list[_Write]] = [[] for _ in self._workers]
        count = len(self._workers)
        for record in records:
            write = self._to_write(record)
            if isinstance(write, Rejected):
                rejected.append(write)
            else:
                shards[hash(write.key) % count].append(write)
        for worker, shard in zip(self._workers, shards, strict=True):
            if shard:
                worker.inbox.put(shard)
        return rejected

    def flush(self) -> list[Rejected]:
        markers = [_Marker(wait=True) for _ in self._workers]
        for worker, marker in zip(self._workers, markers, strict=True):
            worker.inbox.put(marker)
        for marker in markers:
            assert marker.done is not None
            marker.done.wait()
        self._raise_if_failed(SinkDeliveryError)
        return []

    def on_watermark(self, watermark_us: int) -> None:
        """Everything below the watermark has been handed over: send it now, don't wait for the timer."""
        if watermark_us > self._watermark_us:
            self._watermark_us = watermark_us
            for worker in self._workers:
                worker.inbox.put(_Marker(wait=False))

    # --- records -------------------------------------------------------------------------------

    def _to_write(self, record: Record) -> _Write | Rejected:
        if not isinstance(record, ChangeEvent):
            return Rejected(
                record, RecordRejectedError("the tikv sink writes change events, not schema changes"), SINK_STAGE
            )
        key = record.key.get("key")
        if not isinstance(key, bytes) or not key:
            return Rejected(record, RecordRejectedError(f"the key must be non-empty bytes, found {key!r}"), SINK_STAGE)
        if record.op is Op.DELETE or record.after is None:
            return _Write(key, None, 0)
        value = record.after.get("value")
        if not isinstance(value, bytes):  # b"" is a value: RawKV stores empty values
            return Rejected(record, RecordRejectedError(f"RawKV values are bytes, found {value!r}"), SINK_STAGE)
        # TiKV checks storage.max-key-size on the key it receives, the API V2 prefix included
        # (tikv/tikv src/storage/mod.rs 153-166 check_key_size, 2437 raw_put, 2550 raw_batch_put).
        request_key_bytes = len(key) + self._key_prefix_bytes
        if request_key_bytes > self.config.max_key_bytes:
            return Rejected(
                record,
                RecordRejectedError(
                    f"a {len(key)}-byte key is {request_key_bytes} bytes as TiKV receives it (with the "
                    f"{self._key_prefix_bytes}-byte keyspace prefix), longer than max_key_bytes "
                    f"({self.config.max_key_bytes}), TiKV's storage.max-key-size"
                ),
                SINK_STAGE,
            )
        if len(key) + len(value) > self.config.max_write_bytes:
            return Rejected(
                record,
                RecordRejectedError(
                    f"a {len(key)}-byte key with a {len(value)}-byte value is more than max_write_bytes "
                    f"({self.config.max_write_bytes}): no raft entry of the downstream can hold it"
                ),
                SINK_STAGE,
            )
        return _Write(key, value, int(record.after.get("expire_ts") or 0))

    # --- workers -------------------------------------------------------------------------------

    def _run(self, worker: _Worker) -> None:
        pending: list[_Write] = []
        pending_bytes = 0
        deadline = float("inf")
        limit_s = self.config.batch_max_ms / 1000
        while not self._stopping.is_set():
            try:
                item = worker.inbox.get(timeout=min(0.2, max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                if pending and time.monotonic() >= deadline:
                    self._send(pending)
                    pending, pending_bytes, deadline = [], 0, float("inf")
                continue
            if isinstance(item, _Marker):
                if pending:
                    self._send(pending)
                    pending, pending_bytes, deadline = [], 0, float("inf")
                if item.done is not None:
                    item.done.set()
                continue
            if not pending:
                deadline = time.monotonic() + limit_s
            for write in item:
                pending.append(write)
                pending_bytes += len(write.key) + (len(write.value) if write.value else 0)
                if len(pending) >= self.config.batch_max_entries or pending_bytes >= self.config.batch_max_bytes:
                    self._send(pending)
                    pending, pending_bytes, deadline = [], 0, time.monotonic() + limit_s

    def _send(self, writes: list[_Write]) -> None:
        if self._error is not None:
            return  # the flush will fail and the pipeline replays these from its checkpoint
        now_s = time.time()
        for run_is_put, run in _runs(writes, now_s):
            backoff = Backoff(self.config.retry)
            while True:
                try:
                    if run_is_put:
                        ttls = [max(1, int(w.expire_ts - now_s)) if w.expire_ts else 0 for w in run]
                        self.client.batch_put(
                            [(w.key, w.value if w.value is not None else b"") for w in run], ttls if any(ttls) else None
                        )
                    else:
                        self.client.batch_delete([w.key for w in run])
                    self.requests_sent += 1
                    break
                except TransientError as exc:
                    try:
                        delay = backoff.next_delay("tikv sink batch", exc)
                    except RetriesExhaustedError as exhausted:
                        self._fail(exhausted)
                        return
                    log.warning("downstream write failed (%s); retrying in %.2fs", exc, delay)
                    if self._stopping.wait(delay):
                        return
                except Exception as exc:  # refused for good: the flush fails, nothing is committed
                    self._fail(exc)
                    return

    def _fail(self, error: BaseException) -> None:
        with self._error_lock:
            if self._error is None:
                self._error = error

    def _raise_if_failed(self, error_type: type[SinkUnavailableError] | type[SinkDeliveryError]) -> None:
        with self._error_lock:
            error, self._error = self._error, None
        if error is not None:
            raise error_type(f"downstream TiKV did not acknowledge a batch: {type(error).__name__}: {error}") from error


def _runs(writes: list[_Write], now_s: float) -> list[tuple[bool, list[_Write]]]:
    """Consecutive PUTs or DELETEs, cut where a key repeats; expired PUTs become DELETEs."""
    runs: list[tuple[bool, list[_Write]]] = []
    current: list[_Write] = []
    current_is_put = True
    keys: set[bytes] = set()
    for write in writes:
        is_put = write.value is not None and not (write.expire_ts and write.expire_ts <= now_s)
        if current and (is_put != current_is_put or write.key in keys):
            runs.append((current_is_put, current))
            current, keys = [], set()
        if not current:
            current_is_put = is_put
        current.append(write if is_put else _Write(write.key, None, 0))
        keys.add(write.key)
    if current:
        runs.append((current_is_put, current))
    return runs
