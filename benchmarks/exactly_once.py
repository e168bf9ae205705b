"""What exactly once into Kafka costs, and what it guarantees (issue 24, item 6).

Three writers of the same records, in one run, on the local broker:

* ``at_least_once``: datagen -> kafka (json) with the kafka checkpoint store, an idempotent producer;
* ``exactly_once``: the same pipeline with ``sink.delivery: exactly_once`` (each checkpoint
  interval's records and its checkpoint in one transaction);
* ``peer``: a plain transactional confluent-kafka producer loop writing the exactly_once run's
  records again (read back first: the same bytes), committing a transaction every interval: the
  floor a Kafka transaction costs, with no source, transform or encoding.

Each prints events/s (wall) and events per CPU-second of this process (librdkafka's threads
included), medians of ``--repeats`` runs taken in turn. Then ``--kills`` SIGKILLs of an
exactly_once ``cdcflow run`` mid-stream (each once the run's own records reached the broker), a
run to the end, and what a read_committed reader sees: lost, duplicated, and the copies the
aborted transactions held (seen only read_uncommitted).

    python benchmarks/exactly_once.py --events 200000 --repeats 3 --kills 20
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from cdcflow.config import load_pipeline
from cdcflow.pipeline import build_runner
from cdcflow.plugins import PluginRegistry
from cdcflow.processes import tune_for_the_loop

REPO = Path(__file__).resolve().parents[1]


def pipeline_file(
    folder: Path, prefix: str, bootstrap: str, events: int | None, rate: int | None, delivery: str
) -> Path:
    file = folder / f"{prefix}.yaml"
    file.write_text(
        f"name: {prefix}\n"
        f"source: {{type: datagen, count: {events if events is not None else 'null'}, "
        f"rate: {rate if rate is not None else 'null'}, partitions: 4, tables: 2, keys: 10000, event_size: 256}}\n"
        f'transforms: [{{type: route, regex: "datagen\\\\.shop\\\\.(.*)", replacement: "{prefix}.$1"}}]\n'
        f"sink: {{type: kafka, bootstrap_servers: '{bootstrap}', delivery: {delivery}}}\n"
        f"checkpoint: {{type: kafka, bootstrap_servers: '{bootstrap}', topic: {prefix}-offsets, interval_ms: 1000}}\n"
    )
    return file


def run_pipeline(folder: Path, bootstrap: str, events: int, delivery: str) -> tuple[str, float, float]:
    """One in-process run to the end: its topic prefix, wall seconds, CPU seconds."""
    prefix = f"eo{uuid.uuid4().hex[:8]}"
    registry = PluginRegistry.from_entry_points()
    runner = build_runner(
        load_pipeline(pipeline_file(folder, prefix, bootstrap, events, None, delivery), registry), registry
    )
    cpu, wall = time.process_time(), time.monotonic()
    runner.run()
    return prefix, time.monotonic() - wall, time.process_time() - cpu


def read_back(
    bootstrap: str, prefix: str, isolation: str = "read_committed"
) -> list[tuple[str, bytes | None, bytes | None]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:6]}",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    try:
        metadata = consumer.list_topics(timeout=30)
        assignment, remaining = [], set()
        for topic in (t for t in metadata.topics if t.startswith(prefix + ".")):
            for number in metadata.topics[topic].partitions:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, number), timeout=30)
                if high > low:
                    assignment.append(TopicPartition(topic, number, low))
                    remaining.add((topic, number))
        consumer.assign(assignment)
        records = []
        while remaining:
            batch = consumer.consume(10_000, 30)
            if not batch:
                raise RuntimeError(f"no record within 30 s; waiting for {sorted(remaining)[:3]}")
            for message in batch:
                error = message.error()
                if error is not None:
                    remaining.discard((message.topic(), message.partition()))
                    continue
                records.append((message.topic() or "", message.key(), message.value()))
        return records
    finally:
        consumer.close()


def peer(
    bootstrap: str, records: list[tuple[str, bytes | None, bytes | None]], interval_s: float
) -> tuple[float, float]:
    """The records again through one transactional producer, a commit every ``interval_s``."""
    prefix = f"peer{uuid.uuid4().hex[:8]}"
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": prefix,
            "compression.type": "lz4",
            "linger.ms": 5,
            "queue.buffering.max.kbytes": 65536,
        }
    )
    producer.init_transactions(30)
    cpu, wall = time.process_time(), time.monotonic()
    producer.begin_transaction()
    began = time.monotonic()
    for topic, key, value in records:
        while True:
            try:
                producer.produce(f"{prefix}.{topic}", value=value, key=key)
                break
            except BufferError:
                producer.poll(0.05)
        if time.monotonic() - began >= interval_s:
            producer.commit_transaction(30)
            producer.begin_transaction()
            began = time.monotonic()
    producer.commit_transaction(30)
    return time.monotonic() - wall, time.process_time() - cpu


def log_end(bootstrap: str, prefix: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-ends"})
    try:
        total, metadata = 0, consumer.list_topics(timeout=30)
        for topic in (t for t in metadata.topics if t.startswith(prefix + ".")):
            for number in metadata.topics[topic].partitions:
                try:
                    total += consumer.get_watermark_offsets(TopicPartition(topic, number), timeout=30)[1]
                except KafkaException:
                    continue
        return total
    finally:
        consumer.close()


def kills(folder: Path, bootstrap: str, events: int, count: int) -> dict[str, int]:
    prefix = f"eokill{uuid.uuid4().hex[:6]}"
    file = pipeline_file(folder, prefix, bootstrap, events, 5000, "exactly_once")
    rng = random.Random(20261125)
    command = [sys.executable, "-m", "cdcflow.cli", "run", str(file)]
    for _ in range(count):
        before = log_end(bootstrap, prefix)
        process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while log_end(bootstrap, prefix) <= before and process.poll() is None:
            time.sleep(0.05)
        time.sleep(rng.uniform(0, 1.0))
        if process.poll() is not None:
            raise RuntimeError("the source was drained before all the kills: give it more --kill-events")
        process.send_signal(signal.SIGKILL)
        process.wait()
    subprocess.run(command, cwd=REPO, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def copies(isolation: str) -> Counter[int]:
        values = [json.loads(v)["payload"] for _, _, v in read_back(bootstrap, prefix, isolation) if v is not None]
        return Counter(int((p["after"] or p["before"])["seq"]) for p in values)

    committed, everything = copies("read_committed"), copies("read_uncommitted")
    return {
        "kills": count,
        "events": events,
        "lost": len(set(range(events)) - set(committed)),
        "duplicated": sum(1 for n in committed.values() if n > 1),
        "aborted_copies": sum(everything.values()) - sum(committed.values()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--kill-events", type=int, default=400_000)
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="cdcflow-bench-eo-"))
    tune_for_the_loop()  # as a worker process does

    measured: dict[str, list[tuple[float, float]]] = {"at_least_once": [], "exactly_once": [], "peer": []}
    for _ in range(args.repeats):
        for delivery in ("at_least_once", "exactly_once"):
            prefix, wall, cpu = run_pipeline(folder, args.bootstrap, args.events, delivery)
            measured[delivery].append((wall, cpu))
            if delivery == "exactly_once":
                records = read_back(args.bootstrap, prefix)
                measured["peer"].append(peer(args.bootstrap, records, 1.0))
    print(
        f"{args.events} events (json, 256 B payloads, 4 partitions), checkpoint interval 1 s, medians of {args.repeats}"
    )
    print(f"{'writer':>14} {'events/s':>10} {'events/CPU-s':>13}")
    for writer, runs in measured.items():
        wall = statistics.median(w for w, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        print(f"{writer:>14} {args.events / wall:>10,.0f} {args.events / cpu:>13,.0f}")
    if args.kills:
        print(json.dumps(kills(folder, args.bootstrap, args.kill_events, args.kills)))


if __name__ == "__main__":
    main()
