"""End-to-end latency: CQL write on the real node → cassandra_commitlog source → Kafka.

Writes ``--rows`` rows at ``--rate`` rows/s through cassandra-driver while a ``cdcflow run``
worker streams the table's changes to Kafka, then reads the topic back. Latency per change is the
Kafka record's timestamp (set when the sink produced it; the producer lingers 20 ms at most) minus
the write timestamp Cassandra gave the mutation. Prints p50/p90/p99/max and the rows that arrived.

    bash scripts/services.sh start kafka cassandra
    python benchmarks/cassandra_to_kafka_latency.py --rows 5000 --rate 500

The node's commit-log sync period (1 s in scripts/cassandra.sh) bounds the latency from below:
a change is read only once Cassandra has synced it to disk.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, TopicPartition

from cdcflow.sources.cassandra_commitlog.cluster import connect

CDC_RAW = (
    Path(os.environ.get("CDCFLOW_DATA", Path(os.environ.get("CDCFLOW_CACHE", Path.home() / ".cache/cdcflow")) / "run"))
    / "cassandra"
    / "cdc_raw"
)


def _consume(bootstrap: str, topic: str, expected: int, timeout_s: float) -> list[tuple[int, int]]:
    """(write timestamp µs, Kafka record timestamp ms) of each change in ``topic``."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}", "enable.auto.commit": False}
    )
    metadata = consumer.list_topics(topic, timeout=30)
    consumer.assign([TopicPartition(topic, number, 0) for number in metadata.topics[topic].partitions])
    found: list[tuple[int, int]] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(found) < expected and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None or message.value() is None:
                continue
            if message.error() is not None:
                if message.error().code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(str(message.error()))
                continue
            payload = json.loads(message.value())["payload"]
            found.append((int(payload["source"]["ts_us"]), message.timestamp()[1]))
    finally:
        consumer.close()
    return found


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--rate", type=float, default=500.0, help="rows written per second")
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--cdc-raw", type=Path, default=CDC_RAW)
    args = parser.parse_args()
    keyspace = f"bench{uuid.uuid4().hex[:8]}"
    cluster, session = connect(["127.0.0.1"])
    session.execute(
        f"CREATE KEYSPACE {keyspace} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
    )
    session.execute(f"CREATE TABLE {keyspace}.orders (id int PRIMARY KEY, total int, note text) WITH cdc = true")
    folder = Path(tempfile.mkdtemp(prefix="cdcflow-latency-"))
    pipeline = folder / "latency.yaml"
    pipeline.write_text(
        f"name: latency-{keyspace}\n"
        f"source: {{type: cassandra_commitlog, cdc_raw: '{args.cdc_raw}', cluster: bench, tables: [{keyspace}.orders],"
        " processed_segments: keep, error_store: {type: file, path: errors.jsonl}}\n"
        f"sink: {{type: kafka, bootstrap_servers: '{args.bootstrap}', linger_ms: 20}}\n"
        "checkpoint: {type: file, path: ckpt, interval_ms: 500}\n"
        "engine: {poll_interval_ms: 100}\n"
    )
    worker = subprocess.Popen([sys.executable, "-m", "cdcflow.cli", "run", str(pipeline)], stderr=subprocess.PIPE)
    try:
        assert worker.stderr is not None
        for line in worker.stderr:  # wait until the worker is reading
            if b" running: " in line:
                break
        insert = session.prepare(f"INSERT INTO {keyspace}.orders (id, total, note) VALUES (?, ?, ?)")
        started = time.monotonic()
        for row in range(args.rows):
            session.execute(insert, (row, row, "x" * 100))
            pause = started + (row + 1) / args.rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)
        found = _consume(args.bootstrap, f"bench.{keyspace}.orders", args.rows, timeout_s=120)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
        session.execute(f"DROP KEYSPACE {keyspace}")
        cluster.shutdown()
    latencies = [record_ms - written_us / 1000 for written_us, record_ms in found]
    print(f"{len(found)} of {args.rows} changes arrived ({args.rate:.0f} rows/s written)")
    if latencies:
        print(
            "latency CQL write -> Kafka record (ms): "
            + ", ".join(f"p{int(q * 100)} {_percentile(latencies, q):.0f}" for q in (0.5, 0.9, 0.99))
            + f", max {max(latencies):.0f}"
        )


if __name__ == "__main__":
    main()
