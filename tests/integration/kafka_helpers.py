"""Reading back what a pipeline wrote, and what datagen should have produced."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from cdcflow.contract import PluginContext
from cdcflow.sources.datagen import DatagenConfig, DatagenSource
from tests.integration.conftest import REPO


@dataclass(frozen=True)
class Received:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes]


def read_topics(
    bootstrap: str, topics: list[str], timeout_s: float = 60.0, client: Mapping[str, str] | None = None
) -> list[Received]:
    """Every record currently in ``topics``, in offset order per partition (``client``: extra
    librdkafka settings, e.g. SASL_SSL)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "cdcflow-tests-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            **(client or {}),
        }
    )
    try:
        metadata = consumer.list_topics(timeout=30)
        assignment, ends = [], {}
        for topic in topics:
            if topic not in metadata.topics:
                continue
            for number in metadata.topics[topic].partitions:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, number), timeout=30)
                if high > low:
                    assignment.append(TopicPartition(topic, number, low))
                    ends[(topic, number)] = high
        consumer.assign(assignment)
        received: list[Received] = []
        remaining = set(ends)
        while remaining:
            message = consumer.poll(timeout_s)
            assert message is not None, f"no record within {timeout_s}s; still waiting for {remaining}"
            where = (message.topic(), message.partition())
            if message.error() is not None:
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                if message.offset() >= ends.get(where, 0):
                    remaining.discard(where)
                continue
            received.append(
                Received(
                    message.topic(),
                    message.partition(),
                    message.offset(),
                    message.key(),
                    message.value(),
                    dict(message.headers() or []),
                )
            )
            if message.offset() + 1 >= ends[where]:
                remaining.discard(where)
        return received
    finally:
        consumer.close()


def topics_with_prefix(bootstrap: str, prefix: str, client: Mapping[str, str] | None = None) -> list[str]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cdcflow-tests-lister", **(client or {})})
    try:
        return sorted(t for t in consumer.list_topics(timeout=30).topics if t.startswith(prefix))
    finally:
        consumer.close()


def datagen(config: dict[str, Any]) -> DatagenSource:
    return DatagenSource(
        DatagenConfig.model_validate({"type": "datagen", **config}), PluginContext("expected", Path("expected.yaml"))
    )


def event_id(payload: dict[str, Any]) -> int:
    row = payload["after"] if payload["after"] is not None else payload["before"]
    return int(row["seq"])


def check_against_datagen(source: DatagenSource, payloads: list[dict[str, Any]]) -> None:
    """Each payload is exactly what datagen generates for its (partition, seq), time fields aside."""
    for payload in payloads:
        partition_index = int(payload["source"]["partition"].rsplit("-", 1)[1])
        seq = json.loads(payload["source"]["position"])["seq"]
        expected = source.event(partition_index, seq, payload["source"]["ts_us"]).value_payload()
        assert expected is not None
        for image in ("before", "after"):
            got, want = payload[image], expected[image]
            assert (got is None) == (want is None), (image, payload)
            if got is not None:
                assert {k: v for k, v in got.items() if k != "updated_at_us"} == {
                    k: v for k, v in want.items() if k != "updated_at_us"
                }
        assert payload["op"] == expected["op"]


def assert_per_key_order(records: list[tuple[Received, dict[str, Any]]]) -> None:
    """Within a Kafka partition, the changes of one key appear in their source order."""
    last_seq: dict[tuple[str, int, bytes | None], int] = defaultdict(lambda: -1)
    for received, payload in sorted(records, key=lambda r: (r[0].topic, r[0].partition, r[0].offset)):
        where = (received.topic, received.partition, received.key)
        seq = event_id(payload)
        assert seq >= last_seq[where], f"key {received.key!r} went back from {last_seq[where]} to {seq}"
        last_seq[where] = seq


def start_worker(file: Path) -> subprocess.Popen[bytes]:
    """``cdcflow run FILE`` in the background; its log stays readable on ``stderr``."""
    return subprocess.Popen(
        [sys.executable, "-m", "cdcflow.cli", "run", str(file)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def start_logged(file: Path) -> tuple[subprocess.Popen[bytes], list[str]]:
    """``cdcflow run`` whose log lines collect in the returned list."""
    process = start_worker(file)
    lines: list[str] = []

    def collect() -> None:
        assert process.stderr is not None
        for raw in process.stderr:
            lines.append(raw.decode(errors="replace"))

    threading.Thread(target=collect, daemon=True).start()
    return process, lines


def run_cdcflow(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cdcflow.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
