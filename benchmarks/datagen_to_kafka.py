"""datagen -> Kafka throughput, latency and memory.

Prints events/s (wall and per CPU-second of this process), p50/p99 latency from an event's
creation at the source (its ``ts_us``) to the broker's acknowledgement, and RSS over time.

    python benchmarks/datagen_to_kafka.py --events 200000 --converter avro
    python benchmarks/datagen_to_kafka.py --duration 600 --rate 20000   # flat-memory soak

Needs the local broker (``bash scripts/services.sh start``) and, for avro, the registry.
"""

from __future__ import annotations

import argparse
import math
import resource
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, Message

from connector_core.config import load_pipeline
from connector_core.events import Record
from connector_core.pipeline import build_runner
from plugins import PluginRegistry
from sinks.kafka.sink import KafkaSink


class _AckTimes:
    """A histogram of (ack time - event time) over acknowledged records, in 1% wide buckets.

    Counting into buckets keeps the benchmark's own memory flat, so the RSS it prints is the
    pipeline's, even over hours.
    """

    _GROWTH = math.log(1.01)

    def __init__(self) -> None:
        self.buckets: Counter[int] = Counter()
        self.count = 0
        self.lock = threading.Lock()

    def add(self, latency_ms: float) -> None:
        with self.lock:
            self.buckets[int(math.log(max(latency_ms, 0.01)) / self._GROWTH)] += 1
            self.count += 1

    def percentile(self, fraction: float) -> float | None:
        if not self.count:
            return None
        target, seen = fraction * self.count, 0
        for bucket in sorted(self.buckets):
            seen += self.buckets[bucket]
            if seen >= target:
                return math.exp((bucket + 1) * self._GROWTH)
        return None

    def install(self) -> None:
        original = KafkaSink._on_delivery
        latencies = self

        def on_delivery(sink: KafkaSink, record: Record, error: KafkaError | None, message: Message) -> None:
            if error is None:
                latencies.add((time.time() * 1e6 - record.source.ts_us) / 1000)
            original(sink, record, error, message)

        KafkaSink._on_delivery = on_delivery  # type: ignore[method-assign]


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--event-size", type=int, default=1024)
    parser.add_argument("--converter", choices=["json", "avro"], default="avro")
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--registry", default="http://127.0.0.1:8081")
    parser.add_argument("--duration", type=float, help="run this long at --rate instead of --events")
    parser.add_argument("--rate", type=float, default=20_000)
    args = parser.parse_args()

    prefix = f"bench{uuid.uuid4().hex[:8]}"
    count = "null" if args.duration else args.events
    rate = args.rate if args.duration else "null"
    folder = Path(tempfile.mkdtemp(prefix="cdcflow-bench-"))
    file = folder / "bench.yaml"
    file.write_text(
        f"name: {prefix}\n"
        f"source: {{type: datagen, count: {count}, rate: {rate}, partitions: 4, tables: 3, "
        f"event_size: {args.event_size}}}\n"
        f'transforms: [{{type: route, regex: "(.*)", replacement: "{prefix}.$1"}}]\n'
        f"sink: {{type: kafka, bootstrap_servers: '{args.bootstrap}', converter: {args.converter}"
        + (f", schema_registry_url: '{args.registry}'" if args.converter == "avro" else "")
        + "}\n"
        "checkpoint: {type: file, path: ckpt, interval_ms: 1000}\n"
    )
    acks = _AckTimes()
    acks.install()
    registry = PluginRegistry.from_entry_points()
    runner = build_runner(load_pipeline(file, registry), registry)

    rss_samples: list[tuple[float, float]] = []
    done = threading.Event()

    def sample_memory() -> None:
        start = time.monotonic()
        while not done.wait(5.0):
            rss_samples.append((time.monotonic() - start, _rss_mb()))

    sampler = threading.Thread(target=sample_memory, daemon=True)
    sampler.start()
    if args.duration:
        threading.Timer(args.duration, runner.stop.set).start()
    cpu_start, wall_start = time.process_time(), time.monotonic()
    runner.run()
    wall, cpu = time.monotonic() - wall_start, time.process_time() - cpu_start
    done.set()

    delivered = acks.count
    p50, p99 = acks.percentile(0.50), acks.percentile(0.99)
    result: dict[str, Any] = {
        "converter": args.converter,
        "event_size_bytes": args.event_size,
        "events": delivered,
        "wall_s": round(wall, 2),
        "events_per_s_wall": round(delivered / wall),
        "events_per_cpu_s": round(delivered / cpu),
        "latency_p50_ms": None if p50 is None else round(p50, 1),
        "latency_p99_ms": None if p99 is None else round(p99, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    for key, value in result.items():
        print(f"{key:>20}: {value}")
    if rss_samples:
        print(
            "  rss over time (s, MB): "
            + ", ".join(f"({t:.0f}, {m:.0f})" for t, m in rss_samples[:: max(1, len(rss_samples) // 12)])
        )


if __name__ == "__main__":
    main()
