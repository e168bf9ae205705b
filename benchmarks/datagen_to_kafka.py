"""datagen -> Kafka throughput, latency and memory.

Prints events/s (wall and per CPU-second of this process), p50/p99 latency from an event's
creation at the source (its ``ts_us``) to the broker appending it (the topics are created with
``LogAppendTime``, and read back afterwards), and RSS over time.

    python benchmarks/datagen_to_kafka.py --events 200000 --converter avro
    python benchmarks/datagen_to_kafka.py --duration 600 --rate 20000   # flat-memory soak

Needs the local broker (``bash scripts/services.sh start``) and, for avro, the registry.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import bench_topics
from confluent_kafka import Consumer

from cdcflow.config import load_pipeline
from cdcflow.contract import Converter, PluginContext
from cdcflow.converters import converter_from_fields
from cdcflow.metrics import METRICS_REGISTRY
from cdcflow.pipeline import build_runner
from cdcflow.plugins import PluginRegistry
from cdcflow.processes import tune_for_the_loop


class _Latencies:
    """A histogram of latencies in 1% wide buckets, so the benchmark's own memory stays flat."""

    _GROWTH = math.log(1.01)

    def __init__(self) -> None:
        self.buckets: Counter[int] = Counter()
        self.count = 0

    def add(self, latency_ms: float) -> None:
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


def _create_topics(bootstrap: str, topics: list[str]) -> None:
    """Topics stamped with the broker's append time, so each record carries when the broker took it."""
    bench_topics.create_topics(bootstrap, topics, config={"message.timestamp.type": "LogAppendTime"})


def _measure_latencies(
    bootstrap: str, registry_url: str, topics: list[str], expected: int, sample_every: int
) -> tuple[int, _Latencies]:
    """Reads the topics back: records found, and (append time - event time) of every ``sample_every``-th."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe(topics)
    converter: Converter[Any] | None = None
    latencies, found, idle_since = _Latencies(), 0, time.monotonic()
    try:
        while found < expected and time.monotonic() - idle_since < 30:
            messages = consumer.consume(1000, timeout=1.0)
            if messages:
                idle_since = time.monotonic()
            for message in messages:
                if message.error() is not None or message.value() is None:
                    continue
                found += 1
                if found % sample_every:
                    continue
                value = message.value()
                if value[:1] == b"\0":  # Confluent Avro wire format
                    if converter is None:
                        converter = _avro_reader(registry_url)
                    payload = converter.deserialize(message.topic(), value)
                else:
                    payload = json.loads(value)["payload"]
                appended_ms = message.timestamp()[1]
                latencies.add(appended_ms - payload["source"]["ts_us"] / 1000)
    finally:
        consumer.close()
    return found, latencies


def _avro_reader(registry_url: str) -> Converter[Any]:
    registry = PluginRegistry.from_entry_points()
    context = PluginContext("bench", Path("bench.yaml"), factory=registry)
    return converter_from_fields("avro", registry_url, context)


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
    parser.add_argument("--registry", default="http://127.0.0.1:8081/apis/ccompat/v7")
    parser.add_argument("--duration", type=float, help="run this long at --rate instead of --events")
    parser.add_argument("--rate", type=float, default=20_000)
    parser.add_argument("--sample-every", type=int, default=10, help="latency of every n-th record read back")
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
    topics = [f"{prefix}.datagen.shop.table_{i}" for i in range(3)]
    _create_topics(args.bootstrap, topics)
    registry = PluginRegistry.from_entry_points()
    runner = build_runner(load_pipeline(file, registry), registry)
    tune_for_the_loop()  # as `cdcflow run` does

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
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    delivered = int(METRICS_REGISTRY.get_sample_value("cdcflow_events_out_total", {"pipeline": prefix}) or 0)
    found, latencies = _measure_latencies(args.bootstrap, args.registry, topics, delivered, args.sample_every)
    p50, p99 = latencies.percentile(0.50), latencies.percentile(0.99)
    result: dict[str, Any] = {
        "converter": args.converter,
        "event_size_bytes": args.event_size,
        "events": delivered,
        "events_read_back": found,
        "wall_s": round(wall, 2),
        "events_per_s_wall": round(delivered / wall),
        "events_per_cpu_s": round(delivered / cpu),
        "latency_p50_ms": None if p50 is None else round(p50, 1),
        "latency_p99_ms": None if p99 is None else round(p99, 1),
        "peak_rss_mb": round(peak_rss_mb, 1),
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
