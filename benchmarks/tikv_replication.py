"""TiKV -> TiKV replication through ``cdcflow run`` against two stand-in clusters.

Writes a steady load upstream (``--rate`` keys/s in batches) for ``--duration`` seconds while one
worker replicates; prints the replication throughput (keys/s from the first to the last key
applied downstream), the checkpoint lag (now minus the committed watermark, sampled from the
checkpoint file every 100 ms once the watermark has reached the load's start) p50/p99, and the
CPU seconds of each process.

    python benchmarks/tikv_replication.py --rate 20000 --duration 30
    python benchmarks/tikv_replication.py --backlog 200000    # write first, then measure the catch-up
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cdcflow.sources.tikv_client.codec import LOGICAL_BITS  # noqa: E402
from tests.integration.tikv_helpers import (  # noqa: E402
    TiKVCluster,
    pipeline_file,
    start_cluster,
    start_worker,
    stop_worker,
)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100


def committed_watermark_us(folder: Path) -> int | None:
    """The pipeline's committed watermark: the minimum over its partitions' checkpoint files."""
    marks = []
    for path in folder.glob("*.checkpoint.json"):
        try:
            mark = json.loads(path.read_text()).get("watermark_us")
        except (OSError, ValueError):
            continue
        if mark is not None:
            marks.append(int(mark))
    return min(marks) if marks else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=20_000, help="keys written per second (steady mode)")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of steady load")
    parser.add_argument("--backlog", type=int, default=0, help="write this many keys first, then replicate")
    parser.add_argument("--batch", type=int, default=1000, help="keys per upstream write request")
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--safety-interval-ms", type=int, default=3000)
    parser.add_argument("--regions", type=int, default=8, help="upstream regions over the keys, leaders spread")
    parser.add_argument(
        "--initializing-limit", type=int, default=40, help="the source's max_initializing_regions_per_store"
    )
    args = parser.parse_args()

    up_iter, down_iter = start_cluster(None), start_cluster(None)
    upstream: TiKVCluster = next(up_iter)
    downstream: TiKVCluster = next(down_iter)
    folder = Path(tempfile.mkdtemp(prefix="tikv-bench-"))
    start, end = b"bench/", b"bench0"
    step = 100_000_000 // args.regions
    upstream.control(
        "split_many",
        keys=[(b"r\x00\x00\x00" + start + b"k%08d" % (n * step)).hex() for n in range(1, args.regions)],
        spread_leaders=args.regions > 8,
    )
    # Stores stamp writes from timestamp caches up to 3 s old (TiKV's causal-ts alloc-ahead
    # buffer; the stand-in does the same): start 10 s back so that no write falls below the start.
    start_ts = upstream.pd_client.get_ts() - (10_000 << LOGICAL_BITS)
    file = pipeline_file(
        folder,
        upstream,
        downstream,
        start,
        end,
        start_ts,
        safety_interval_ms=args.safety_interval_ms,
        max_initializing_regions_per_store=args.initializing_limit,
    )
    value = bytes(random.Random(1).randbytes(args.value_size // 2).hex(), "ascii")[: args.value_size]
    written = 0

    def write(count: int, rate: float | None) -> None:
        nonlocal written
        began = time.monotonic()
        for first in range(0, count, args.batch):
            size = min(args.batch, count - first)
            if args.regions > 8:  # keys in order, spread over every region: a batch touches few of them
                stride = 100_000_000 // count
                keys = [start + b"k%08d" % ((first + n) * stride) for n in range(size)]
            else:
                keys = [start + b"k%08d" % random.randrange(100_000_000) for _ in range(size)]
            upstream.kv.batch_put([(k, value) for k in keys])
            written += len(keys)
            if rate:
                time.sleep(max(0.0, began + written / rate - time.monotonic()))

    if args.backlog:
        write(args.backlog, None)
    lags: list[float] = []
    stop_sampling = threading.Event()

    sampled_from = time.time()  # lag counts from when the pipeline first reached the load's start

    def sample() -> None:
        while not stop_sampling.wait(0.1):
            mark = committed_watermark_us(folder / "checkpoints")
            if mark is not None and mark / 1e6 >= sampled_from:
                lags.append(time.time() - mark / 1e6)

    began = time.monotonic()
    worker = start_worker(file)
    sampler = threading.Thread(target=sample, daemon=True)
    if not args.backlog:
        sampler.start()
        write(int(args.rate * args.duration), args.rate)
    target_ts = upstream.pd_client.get_ts()
    while (committed_watermark_us(folder / "checkpoints") or 0) < (target_ts >> 18) * 1000:
        time.sleep(0.05)
    elapsed = time.monotonic() - began
    worker_cpu = cpu_seconds(worker.pid)
    up_cpu = cpu_seconds(upstream.standin.process.pid)  # type: ignore[union-attr]
    down_cpu = cpu_seconds(downstream.standin.process.pid)  # type: ignore[union-attr]
    stop_sampling.set()
    stop_worker(worker, file)
    scans = upstream.control("scans_pending")["peak"]
    busy = upstream.control("feed_errors_sent").get("server_is_busy", 0)
    keys_downstream = sum(1 for _ in downstream.kv.scan_all(start, end))
    keys_upstream = sum(1 for _ in upstream.kv.scan_all(start, end))
    for generator in (up_iter, down_iter):
        generator.close()
    mode = f"backlog of {args.backlog:,}" if args.backlog else f"steady {args.rate:,} keys/s for {args.duration:.0f}s"
    print(f"mode: {mode}, batches of {args.batch}, {args.value_size}-byte values, {args.regions:,} regions")
    print(
        f"catch-up scans at once per store, at most: {scans} (limit {args.initializing_limit}); "
        f"registrations refused as server_is_busy: {busy}"
    )
    print(f"keys written: {written:,}; distinct keys upstream {keys_upstream:,}, downstream {keys_downstream:,}")
    print(f"replicated: {written / elapsed:,.0f} keys/s over {elapsed:.1f}s (worker start to last checkpoint)")
    print(
        f"worker CPU: {worker_cpu:.1f}s ({written / max(worker_cpu, 1e-9):,.0f} keys per CPU-second); "
        f"stand-ins: upstream {up_cpu:.1f}s, downstream {down_cpu:.1f}s"
    )
    if lags:
        ordered = sorted(lags)
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        print(
            f"checkpoint lag: p50 {statistics.median(ordered):.2f}s, p99 {p99:.2f}s, max {ordered[-1]:.2f}s "
            f"({len(ordered)} samples, safety interval {args.safety_interval_ms} ms)"
        )


if __name__ == "__main__":
    main()
