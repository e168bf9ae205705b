"""TiKV -> TiKV replication through ``cdcflow run``: order, region changes, crashes, GC safepoints."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdcflow.sources.tikv_client.codec import encode_memcomparable
from tests.integration.tikv_helpers import (
    REAL_DOWNSTREAM,
    REAL_UPSTREAM,
    TiKVCluster,
    apply_batch,
    key_range,
    pipeline_file,
    random_batches,
    start_cluster,
    start_worker,
    stop_worker,
    wait_until,
)


@pytest.fixture(scope="module")
def upstream() -> Iterator[TiKVCluster]:
    yield from start_cluster(REAL_UPSTREAM)


@pytest.fixture(scope="module")
def downstream() -> Iterator[TiKVCluster]:
    yield from start_cluster(REAL_DOWNSTREAM)


def _converged(upstream: TiKVCluster, downstream: TiKVCluster, start: bytes, end: bytes) -> bool:
    return upstream.snapshot(start, end) == downstream.snapshot(start, end)


def test_100k_random_writes_with_splits_and_a_leader_change_replicate_in_order(
    upstream: TiKVCluster, downstream: TiKVCluster, tmp_path: Path
) -> None:
    start, end = key_range("rep")
    for fraction in (b"k005000", b"k010000", b"k015000"):
        upstream.split(start + fraction)
    start_ts = upstream.ts_before_writes()
    file = pipeline_file(tmp_path, upstream, downstream, start, end, start_ts)
    batches = random_batches(random.Random(6), start, keys=20_000, writes=100_000, batch_size=1000)
    worker = start_worker(file)
    try:
        if upstream.standin is not None:  # region changes must happen while the feed is subscribed
            wait_until(lambda: upstream.control("feed_subscriptions") >= 4, 60, "the worker to subscribe")
        for number, batch in enumerate(batches):
            apply_batch(upstream.kv, batch)
            if number == 30 and upstream.standin is not None:
                upstream.split(start + b"k002500")
                upstream.split(start + b"k012500")
            if number == 60 and upstream.standin is not None:
                boundary = encode_memcomparable(b"r\x00\x00\x00" + start + b"k010000").hex()
                moved = next(r for r in upstream.control("regions") if r["start"] == boundary)
                upstream.control("transfer_leader", region_id=moved["id"], store_id=moved["leader_store"] % 3 + 1)
        wait_until(lambda: _converged(upstream, downstream, start, end), 120, "downstream to equal upstream")
    finally:
        log = stop_worker(worker, file)
    assert worker.returncode == 0, log
    expected = upstream.snapshot(start, end)
    assert len(expected) > 10_000
    assert downstream.snapshot(start, end) == expected
    if upstream.standin is not None and downstream.standin is not None:
        # Per key, the downstream saw the upstream's writes in the upstream's order, ending with
        # the same one. A span subscribed again after a split or leader change catches up by
        # TiKV's scan, which sends each key's newest version only: versions written between the
        # span's resolved-ts and its new subscription may be skipped, never reordered or invented.
        upstream_history = upstream.history(start, end)
        downstream_history = downstream.history(start, end)
        assert sum(len(v) for v in upstream_history.values()) == 100_000
        wrong = [
            k
            for k, v in upstream_history.items()
            if not downstream_history.get(k)
            or downstream_history[k][-1] != v[-1]
            or not _in_order_within(downstream_history[k], v)
        ]
        assert wrong == [], f"{len(wrong)} keys differ, first {wrong[0]!r}"
        assert "resubscribing" in log  # the splits and the leader change ended subscriptions


def _in_order_within(part: list[tuple[str, str, bool]], whole: list[tuple[str, str, bool]]) -> bool:
    """Whether ``part`` is ``whole`` with some items left out (the same items, the same order)."""
    remaining = iter(whole)
    return all(item in remaining for item in part)


def test_kill_9_during_replication_loses_nothing(
    upstream: TiKVCluster, downstream: TiKVCluster, tmp_path: Path
) -> None:
    start, end = key_range("crash")
    upstream.split(start + b"k002000")
    start_ts = upstream.ts_before_writes()
    file = pipeline_file(tmp_path, upstream, downstream, start, end, start_ts)
    batches = random_batches(random.Random(9), start, keys=4000, writes=40_000, batch_size=500)
    writer_done = threading.Event()

    def write() -> None:
        for batch in batches:
            apply_batch(upstream.kv, batch)
            time.sleep(0.05)
        writer_done.set()

    writer = threading.Thread(target=write)
    writer.start()
    checkpoints = tmp_path / "checkpoints"
    kills = 0
    try:
        while not writer_done.is_set() or kills < 3:
            worker = start_worker(file)
            seen = _checkpoint_mtime(checkpoints)
            wait_until(lambda s=seen: _checkpoint_mtime(checkpoints) > s, 60, "a new checkpoint")  # type: ignore[misc]
            time.sleep(random.uniform(0.2, 1.0))
            stop_worker(worker, file, kill=True)
            kills += 1
    finally:
        writer.join()
    worker = start_worker(file)
    try:
        seen = _checkpoint_mtime(checkpoints)
        wait_until(lambda: _checkpoint_mtime(checkpoints) > seen, 60, "the last worker's first checkpoint")
        wait_until(lambda: _converged(upstream, downstream, start, end), 120, "downstream to converge")
    finally:
        log = stop_worker(worker, file)
    assert kills >= 3
    assert worker.returncode == 0, log
    assert downstream.snapshot(start, end) == upstream.snapshot(start, end)


def _checkpoint_mtime(folder: Path) -> float:
    return max((p.stat().st_mtime for p in folder.rglob("*") if p.is_file()), default=0.0)


def test_gc_safepoint_is_kept_refreshed_and_a_start_behind_it_is_refused(
    upstream: TiKVCluster, downstream: TiKVCluster, tmp_path: Path
) -> None:
    start, end = key_range("gc")
    start_ts = upstream.ts_before_writes()
    file = pipeline_file(tmp_path, upstream, downstream, start, end, start_ts, gc_refresh_s=0.5, gc_ttl_s=600)
    service = f"cdcflow-{file.stem}-w0"
    worker = start_worker(file)
    try:
        wait_until(lambda: service in upstream.control("gc_state")["services"], 30, "the service safepoint")
        first = upstream.control("gc_state")["services"][service][0]
        assert first == start_ts - 1
        upstream.kv.batch_put([(start + b"a", b"1"), (start + b"b", b"2")])
        wait_until(lambda: upstream.control("gc_state")["services"][service][0] > first, 30, "the safepoint to move on")
        wait_until(lambda: _converged(upstream, downstream, start, end), 30, "replication")
    finally:
        log = stop_worker(worker, file)
    assert worker.returncode == 0, log
    refreshed = upstream.control("gc_state")["services"][service][0]
    assert start_ts <= refreshed < upstream.pd_client.get_ts()

    # The worker stays away longer than its TTL: GC moves past its checkpoint. A start must refuse.
    upstream.kv.put(start + b"c", b"3")
    upstream.control("run_gc", safe_point=upstream.pd_client.get_ts(), ignore_services=True)
    worker = start_worker(file)
    try:
        worker.wait(timeout=60)
    finally:
        log = stop_worker(worker, file)
    assert worker.returncode != 0
    assert "CheckpointBehindGCSafePointError" in log and "GC safepoint" in log
    assert downstream.kv.get(start + b"c") is None


def test_an_empty_value_replicates_as_an_empty_value(
    upstream: TiKVCluster, downstream: TiKVCluster, tmp_path: Path
) -> None:
    # RawKV stores empty values; the feed sends them as PUTs: downstream they are empty values,
    # present, never deletes (a key overwritten with b"" keeps existing).
    start, end = key_range("emptyrep")
    file = pipeline_file(tmp_path, upstream, downstream, start, end, upstream.ts_before_writes())
    upstream.kv.put(start + b"a", b"")
    upstream.kv.put(start + b"b", b"before")
    upstream.kv.put(start + b"b", b"")
    upstream.kv.put(start + b"c", b"kept")
    worker = start_worker(file)
    try:
        wait_until(lambda: _converged(upstream, downstream, start, end), 60, "downstream to equal upstream")
    finally:
        log = stop_worker(worker, file)
    assert worker.returncode == 0, log
    assert downstream.snapshot(start, end) == {start + b"a": b"", start + b"b": b"", start + b"c": b"kept"}
    assert downstream.kv.get(start + b"a") == b""
