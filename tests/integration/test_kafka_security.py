"""One ``kafka`` block, every Kafka client: the sink, the dead-letter sink, the checkpoint store and
the source against a real broker's SASL_SSL listener (SCRAM over TLS with client certificates, made
by the test). Spark's Java connector reads the same listener, from executors on a standalone
cluster, in test_spark_cluster.py."""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.integration.kafka_helpers import event_id, read_topics, run_cdcflow, start_worker, topics_with_prefix
from tests.integration.secure_kafka import PASSWORD, SecureKafka

pytestmark = pytest.mark.kafka


@pytest.fixture(autouse=True)
def kafka_password(monkeypatch: pytest.MonkeyPatch) -> None:
    # The pipelines read the password from ${KAFKA_PASSWORD}; `cdcflow run` inherits it.
    monkeypatch.setenv("KAFKA_PASSWORD", PASSWORD)


def datagen_to_secure_kafka(folder: Path, broker: SecureKafka, prefix: str, count: int) -> Path:
    """datagen -> kafka sink, kafka checkpoint store and kafka dead letters, all over SASL_SSL.
    table_2's events lose their key column to a mask and so go to the dead letters."""
    file = folder / "to-kafka.yaml"
    file.write_text(
        f"name: secure-{prefix}\n"
        f"source: {{type: datagen, count: {count}, partitions: 2, tables: 3, event_size: 16}}\n"
        "transforms:\n"
        "  - {type: mask, columns: [table_2.id], mode: drop}\n"
        f'  - {{type: route, regex: "datagen\\\\.shop\\\\.(.*)", replacement: "{prefix}.$1"}}\n'
        f"sink: {{type: kafka, bootstrap_servers: '{broker.sasl_ssl}', kafka: {broker.client_block()}}}\n"
        f"checkpoint: {{type: kafka, bootstrap_servers: '{broker.sasl_ssl}', topic: {prefix}-offsets, "
        f"kafka: {broker.client_block('SCRAM-SHA-256', encrypted_key=True)}}}\n"
        f"errors: {{tolerance: all, dead_letter: {{type: kafka, bootstrap_servers: '{broker.sasl_ssl}', "
        f"topic: {prefix}-dlq, kafka: {broker.client_block()}}}}}\n"
    )
    return file


def test_worker_engine_clients_reach_a_sasl_ssl_broker(
    tmp_path: Path, secure_kafka: SecureKafka, topic_prefix: str
) -> None:
    count = 3000
    to_kafka = datagen_to_secure_kafka(tmp_path, secure_kafka, topic_prefix, count)
    result = run_cdcflow("run", str(to_kafka))
    assert result.returncode == 0, result.stderr[-3000:]
    # The checkpoints are in the offsets topic, read back over SASL_SSL by `offsets show`.
    shown = run_cdcflow("offsets", "show", str(to_kafka))
    assert shown.returncode == 0, shown.stderr[-3000:]
    offsets = {pid: c["offset"]["seq"] for pid, c in json.loads(shown.stdout)["partitions"].items()}
    assert offsets == {"datagen-0": count // 2, "datagen-1": count // 2}

    client = secure_kafka.librdkafka()
    topics = topics_with_prefix(secure_kafka.sasl_ssl, f"{topic_prefix}.", client)
    delivered = read_topics(secure_kafka.sasl_ssl, topics, client=client)
    dead = read_topics(secure_kafka.sasl_ssl, [f"{topic_prefix}-dlq"], client=client)
    delivered_ids = Counter(event_id(json.loads(r.value)["payload"]) for r in delivered if r.value)
    dead_ids = Counter(event_id(json.loads(r.value)["payload"]) for r in dead if r.value)
    assert dead_ids and max(delivered_ids.values()) == 1 and max(dead_ids.values()) == 1
    assert set(delivered_ids) | set(dead_ids) == set(range(count)) and not set(delivered_ids) & set(dead_ids)
    assert {r.headers["cdcflow.error.original_topic"] for r in dead} == {b"datagen.shop.table_2"}

    # The kafka source, over the same listener, reads back every delivered event.
    from_kafka = tmp_path / "from-kafka.yaml"
    from_kafka.write_text(
        f"name: secure-back-{topic_prefix}\n"
        f"source: {{type: kafka, bootstrap_servers: '{secure_kafka.sasl_ssl}', topics: {json.dumps(topics)}, "
        f"kafka: {secure_kafka.client_block()}}}\n"
        "sink: {type: file, path: back.jsonl}\n"
        "checkpoint: {type: file, path: back-state}\n"
    )
    process = start_worker(from_kafka)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:
            if _lines(tmp_path / "back.jsonl") >= len(delivered_ids):
                break
            time.sleep(0.3)
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr.decode()[-3000:]
    back = [json.loads(line) for line in (tmp_path / "back.jsonl").read_text().splitlines()]
    assert Counter(event_id(b["value"]) for b in back) == delivered_ids


def _lines(file: Path) -> int:
    return len(file.read_text().splitlines()) if file.exists() else 0
