"""datagen -> Kafka (json, avro) and Kafka -> Kafka through the real broker."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from cdcflow.contract import PluginContext
from cdcflow.converters import AvroConverter, AvroConverterConfig
from tests.integration.kafka_helpers import (
    Received,
    assert_per_key_order,
    check_against_datagen,
    datagen,
    event_id,
    read_topics,
    run_cdcflow,
    topics_with_prefix,
)

pytestmark = pytest.mark.kafka

DATAGEN = {"count": 6000, "partitions": 3, "tables": 2, "keys": 300, "event_size": 64, "seed": 7}


def write_pipeline(folder: Path, name: str, body: str) -> Path:
    file = folder / f"{name}.yaml"
    file.write_text(body)
    return file


def datagen_yaml(prefix: str) -> str:
    fields = ", ".join(f"{k}: {v}" for k, v in DATAGEN.items())
    return (
        f"source: {{type: datagen, {fields}}}\n"
        f'transforms: [{{type: route, regex: "datagen\\\\.shop\\\\.(.*)", replacement: "{prefix}.$1"}}]\n'
    )


def test_datagen_to_kafka_json_delivers_every_event_once_in_key_order(
    tmp_path: Path, kafka_bootstrap: str, topic_prefix: str
) -> None:
    file = write_pipeline(
        tmp_path,
        "json",
        (
            f"name: json-{topic_prefix}\n"
            + datagen_yaml(topic_prefix)
            + f"sink: {{type: kafka, bootstrap_servers: '{kafka_bootstrap}', converter: json}}\n"
            + "checkpoint: {type: file, path: ckpt}\n"
        ),
    )
    result = run_cdcflow("run", str(file))
    assert result.returncode == 0, result.stderr

    topics = topics_with_prefix(kafka_bootstrap, topic_prefix)
    assert topics == [f"{topic_prefix}.table_0", f"{topic_prefix}.table_1"]
    everything = read_topics(kafka_bootstrap, topics)
    assert_tombstone_after_each_delete(everything)
    received = [r for r in everything if r.value is not None]
    payloads = [json.loads(r.value)["payload"] for r in received]  # type: ignore[arg-type]
    counts = Counter(event_id(p) for p in payloads)
    assert set(counts) == set(range(DATAGEN["count"]))
    assert max(counts.values()) == 1
    check_against_datagen(datagen(DATAGEN), payloads)
    for r, p in zip(received, payloads, strict=True):
        assert json.loads(r.key)["payload"] == {"id": (p["after"] or p["before"])["id"]}  # type: ignore[arg-type]
        assert r.topic.endswith(p["source"]["table"])
    assert_per_key_order(list(zip(received, payloads, strict=True)))


def assert_tombstone_after_each_delete(received: list[Received]) -> None:
    """tombstones_on_delete (on by default): each delete is followed, among its key's records in
    its partition, by a tombstone (the same key, a null value), and there is no other null value.
    Other keys' records may come between: a tombstone waits for its delete's delivery report."""
    by_key: dict[tuple[str, int, bytes | None], list[Received]] = {}
    for record in sorted(received, key=lambda r: (r.topic, r.partition, r.offset)):
        by_key.setdefault((record.topic, record.partition, record.key), []).append(record)
    deletes = tombstones = 0
    for records in by_key.values():
        for index, record in enumerate(records):
            if record.value is None:
                tombstones += 1
                continue
            if json.loads(record.value)["payload"]["op"] == "d":
                deletes += 1
                following = records[index + 1]
                assert following.value is None and following.key == record.key
                assert following.headers == {"cdcflow.tombstone": b"after-delete"}
    assert deletes == tombstones > 0


@pytest.mark.registry
def test_datagen_to_kafka_avro_in_confluent_wire_format(
    tmp_path: Path, kafka_bootstrap: str, registry_url: str, topic_prefix: str
) -> None:
    file = write_pipeline(
        tmp_path,
        "avro",
        (
            f"name: avro-{topic_prefix}\n"
            + datagen_yaml(topic_prefix)
            + f"sink: {{type: kafka, bootstrap_servers: '{kafka_bootstrap}', converter: avro, "
            + "schema_registry_url: '${REGISTRY_URL}'}\n"
            + "checkpoint: {type: file, path: ckpt}\n"
        ),
    )
    import os
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "cdcflow.cli", "run", str(file)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "REGISTRY_URL": registry_url},
        check=False,
    )
    assert result.returncode == 0, result.stderr

    decoder = AvroConverter(
        AvroConverterConfig(type="avro", schema_registry_url=registry_url),
        PluginContext("reader", tmp_path / "reader.yaml"),
    )
    topics = topics_with_prefix(kafka_bootstrap, topic_prefix)
    received = [r for r in read_topics(kafka_bootstrap, topics) if r.value is not None]  # tombstones aside
    assert all(r.value is not None and r.value[0] == 0 for r in received)  # magic byte
    payloads = [decoder.deserialize(r.topic, r.value) for r in received if r.value is not None]
    counts = Counter(event_id(p) for p in payloads)
    assert set(counts) == set(range(DATAGEN["count"])) and max(counts.values()) == 1
    check_against_datagen(datagen(DATAGEN), payloads)
    keys = [decoder.deserialize(r.topic, r.key) for r in received if r.key is not None]
    assert [k["id"] for k in keys] == [(p["after"] or p["before"])["id"] for p in payloads]


def test_kafka_to_kafka_copies_every_event_and_commits_the_group(
    tmp_path: Path, kafka_bootstrap: str, topic_prefix: str
) -> None:
    upstream = write_pipeline(
        tmp_path,
        "up",
        (
            f"name: up-{topic_prefix}\n"
            + datagen_yaml(topic_prefix)
            + f"sink: {{type: kafka, bootstrap_servers: '{kafka_bootstrap}'}}\n"
            + "checkpoint: {type: file, path: ck-up}\n"
        ),
    )
    assert run_cdcflow("run", str(upstream)).returncode == 0
    source_topics = topics_with_prefix(kafka_bootstrap, topic_prefix)
    copy = write_pipeline(
        tmp_path,
        "copy",
        (
            f"name: copy-{topic_prefix}\n"
            f"source: {{type: kafka, bootstrap_servers: '{kafka_bootstrap}', topics: {json.dumps(source_topics)}}}\n"
            f'transforms: [{{type: route, regex: "{topic_prefix}\\\\.(.*)", replacement: "copy-{topic_prefix}.$1"}}]\n'
            f"sink: {{type: kafka, bootstrap_servers: '{kafka_bootstrap}'}}\n"
            "checkpoint: {type: file, path: ck-copy}\n"
        ),
    )
    import signal
    import subprocess
    import sys
    import time

    # The kafka source never ends by itself: stop it once the group has committed everything.
    process = subprocess.Popen(
        [sys.executable, "-m", "cdcflow.cli", "run", str(copy)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    from confluent_kafka import Consumer, TopicPartition

    group = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"cdcflow-copy-{topic_prefix}"})
    ends = {}
    for topic in source_topics:
        for number in group.list_topics(topic, timeout=30).topics[topic].partitions:
            ends[(topic, number)] = group.get_watermark_offsets(TopicPartition(topic, number), timeout=30)[1]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        committed = group.committed([TopicPartition(t, n) for t, n in ends], timeout=30)
        if all(tp.offset == ends[(tp.topic, tp.partition)] for tp in committed):
            break
        time.sleep(0.5)
    group.close()
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert all(tp.offset == ends[(tp.topic, tp.partition)] for tp in committed), "group never caught up"

    copied = read_topics(kafka_bootstrap, topics_with_prefix(kafka_bootstrap, f"copy-{topic_prefix}"))
    # The source skipped the tombstones it read; the copy's sink wrote its own after each delete.
    assert_tombstone_after_each_delete(copied)
    payloads = [json.loads(r.value)["payload"] for r in copied if r.value is not None]
    counts = Counter(event_id(p) for p in payloads)
    assert set(counts) == set(range(DATAGEN["count"])) and max(counts.values()) == 1
    check_against_datagen(datagen(DATAGEN), payloads)


def test_two_worker_processes_split_the_partitions(tmp_path: Path, kafka_bootstrap: str, topic_prefix: str) -> None:
    file = write_pipeline(
        tmp_path,
        "workers",
        (
            f"name: workers-{topic_prefix}\n"
            + datagen_yaml(topic_prefix).replace("partitions: 3", "partitions: 8")
            + f"sink: {{type: kafka, bootstrap_servers: '{kafka_bootstrap}'}}\n"
            + "checkpoint: {type: file, path: ckpt}\n"
            + "engine: {workers: 2}\n"
        ),
    )
    result = run_cdcflow("run", str(file))
    assert result.returncode == 0, result.stderr
    payloads = [
        json.loads(r.value)["payload"]
        for r in read_topics(kafka_bootstrap, topics_with_prefix(kafka_bootstrap, topic_prefix))
        if r.value is not None
    ]
    counts = Counter(event_id(p) for p in payloads)
    assert set(counts) == set(range(DATAGEN["count"])) and max(counts.values()) == 1
    checkpoints = sorted(p.name for p in (tmp_path / "ckpt").glob("*.checkpoint.json"))
    assert checkpoints == sorted(f"datagen-{i}.checkpoint.json" for i in range(8))
