"""cdcflow_checkpoint_lag_seconds means something: 0 for a caught-up kafka-to-kafka pipeline on a
quiet topic, growing only while work waits (the sink broker frozen with new records in), back to 0
once they are delivered; `offsets show` agrees."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.integration.kafka_helpers import read_topics, run_cdcflow, start_logged
from tests.integration.secure_kafka import SecureKafka

pytestmark = pytest.mark.kafka


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def lag_seconds(port: int, pipeline: str) -> float | None:
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:
        return None  # not serving yet
    for line in text.splitlines():
        if line.startswith(f'cdcflow_checkpoint_lag_seconds{{pipeline="{pipeline}"}}'):
            return float(line.rsplit(" ", 1)[1])
    return None


def wait_for(condition: object, what: str, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def produce(bootstrap: str, topic: str, numbers: range) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for n in numbers:
        producer.produce(topic, key=json.dumps({"payload": {"n": n}}), value=json.dumps({"payload": {"n": n}}))
    assert producer.flush(30) == 0


def test_lag_is_zero_when_caught_up_and_grows_only_while_work_waits(
    tmp_path: Path, kafka_bootstrap: str, secure_kafka: SecureKafka, topic_prefix: str
) -> None:
    source_topic, out_topic, name = f"{topic_prefix}.in", f"{topic_prefix}.out", f"lag-{topic_prefix}"
    produce(kafka_bootstrap, source_topic, range(300))
    port = free_port()
    file = tmp_path / "p.yaml"
    file.write_text(
        f"name: {name}\n"
        f"source: {{type: kafka, bootstrap_servers: '{kafka_bootstrap}', topics: ['{source_topic}']}}\n"
        # The sink is the second broker, which the test can freeze.
        f"sink: {{type: kafka, bootstrap_servers: '{secure_kafka.plaintext}', topic: '{out_topic}'}}\n"
        "checkpoint: {type: file, path: ckpt, interval_ms: 300}\n"
        f"engine: {{metrics_port: {port}}}\n"
    )
    process, log = start_logged(file)
    frozen = False
    try:
        wait_for(lambda: lag_seconds(port, name) == 0.0, "lag 0 once the 300 records are delivered")
        # A quiet, caught-up topic stays at 0 (now minus the last record's time would climb).
        time.sleep(2)
        assert [lag_seconds(port, name) for _ in range(3)] == [0.0, 0.0, 0.0]

        os.kill(secure_kafka.pid, signal.SIGSTOP)
        frozen = True
        produce(kafka_bootstrap, source_topic, range(300, 400))
        wait_for(lambda: (lag_seconds(port, name) or 0.0) > 0.0, "lag above 0 while records wait")
        first = lag_seconds(port, name)
        wait_for(lambda: (lag_seconds(port, name) or 0.0) > (first or 0.0) + 1.0, "lag growing while they wait")

        os.kill(secure_kafka.pid, signal.SIGCONT)
        frozen = False
        wait_for(lambda: lag_seconds(port, name) == 0.0, "lag back to 0 once delivered", timeout_s=120)
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
    finally:
        if frozen:
            os.kill(secure_kafka.pid, signal.SIGCONT)
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, "".join(log)[-3000:]
    delivered = {json.loads(r.value)["payload"]["n"] for r in read_topics(secure_kafka.plaintext, [out_topic])}
    assert delivered == set(range(400))

    shown = run_cdcflow("offsets", "show", str(file))
    assert shown.returncode == 0, shown.stderr
    partitions = json.loads(shown.stdout)["partitions"]
    assert partitions and all(p["caught_up"] and p["lag_s"] == 0 for p in partitions.values())
