"""Reading back what a pipeline wrote, and what datagen should have produced."""

from __future__ import annotations

import bisect
import json
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

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


def log_end(bootstrap: str, prefix: str) -> int:
    """Everything written so far to the topics named ``<prefix>.*``, open and aborted
    transactions included (the sum of their end offsets)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cdcflow-tests-ends"})
    try:
        total = 0
        metadata = consumer.list_topics(timeout=30)
        for topic in (t for t in metadata.topics if t.startswith(prefix + ".")):
            for number in metadata.topics[topic].partitions:
                try:
                    total += consumer.get_watermark_offsets(TopicPartition(topic, number), timeout=30)[1]
                except KafkaException:
                    continue  # a topic the pipeline just created, its leader not yet elected: nothing in it
        return total
    finally:
        consumer.close()


def kill_mid_stream(file: Path, checkpoints: Path, written: Callable[[], int], pause_s: float) -> tuple[float, float]:
    """Start ``cdcflow run FILE``; once it has written records of its own (``written()`` grew past
    its value at the start) and then committed a checkpoint (a file in ``checkpoints`` written
    since), wait ``pause_s`` more and SIGKILL it while it still runs. Returns when it started and
    when it was killed (time.time)."""
    before, started = written(), time.time()
    process = start_worker(file)
    deadline = time.monotonic() + 120

    def wait_for(condition: Callable[[], bool], what: str) -> None:
        while not condition():
            assert process.poll() is None, process.communicate()[1].decode()[-3000:]
            assert time.monotonic() < deadline, f"{what} within 120 s"
            time.sleep(0.02)

    wait_for(lambda: written() > before, "no record from this run")
    wrote_at = time.time() - 0.05  # file times are not finer than a few milliseconds
    wait_for(lambda: any(f.stat().st_mtime >= wrote_at for f in checkpoints.glob("*") if f.is_file()), "no checkpoint")
    time.sleep(pause_s)  # a random moment mid-stream to crash at, not a timing assertion
    assert process.poll() is None, "the run ended before its kill: not mid-stream"
    process.kill()
    process.wait()
    return started, time.time()


def replays_by_run(copies: list[tuple[Any, int]], runs: list[tuple[float, float]], interval_ms: int) -> list[str]:
    """What each killed run replayed, charged by the time cdcflow made each copy (``ts_ms``): the
    events it wrote that a later run wrote again. A run commits after each read once an interval
    has passed, and a read takes about one interval, so each is bounded by about two intervals of
    that run's own delivery (its busiest ``interval_ms`` window). ``copies``: (event identity,
    ts_ms). Returns the runs over that bound, described."""
    last_copy: dict[Any, int] = {}
    for event, ts_ms in copies:
        last_copy[event] = max(ts_ms, last_copy.get(event, ts_ms))
    over = []
    for number, (started, killed) in enumerate(runs, 1):
        mine = [(event, ts) for event, ts in copies if started * 1000 <= ts <= killed * 1000]
        made = sorted(ts for _, ts in mine)
        replayed = sum(1 for event, ts in mine if last_copy[event] > killed * 1000)
        busiest = max((bisect.bisect_right(made, t + interval_ms) - i for i, t in enumerate(made)), default=0)
        print(f"run {number}: delivered {len(made)}, busiest {interval_ms} ms {busiest}, replayed {replayed}")
        if replayed > 2 * busiest + 100:
            over.append(f"run {number}: replayed {replayed}, busiest {interval_ms} ms {busiest}")
    return over
