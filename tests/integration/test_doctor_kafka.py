"""``cdcflow doctor`` of the Kafka plugins and the schema registry on the real broker and registry
(issue 27, item 1): the checkpoint topic compacted, transactions for a worker group, the topics a
sink writes and a source reads, the registry's compatibility rule."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
import requests
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from tests.integration.doctor_helpers import doctor
from tests.integration.group_helpers import group_section

pytestmark = [pytest.mark.kafka, pytest.mark.registry]


def _create_topic(bootstrap: str, name: str, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1, config=config)])[name].result(30)


def _pipeline(folder: Path, body: str) -> Path:
    file = folder / "pipeline.yaml"
    file.write_text(f"name: doctor-kafka\n{body}")
    return file


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_doctor_fails_a_checkpoint_topic_that_deletes_checkpoints(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    offsets = f"{topic_prefix}-offsets"
    _create_topic(kafka_bootstrap, offsets, **{"cleanup.policy": "delete", "retention.ms": "3600000"})
    body = (
        "source: {type: datagen, count: 1}\n"
        "sink: {type: file, path: out.jsonl}\n"
        f"checkpoint: {{type: kafka, bootstrap_servers: '{kafka_bootstrap}', topic: {offsets}}}\n"
    )
    code, checks, errors = doctor(_pipeline(tmp_path, body))
    assert code == 1, errors
    compacted = checks[f"checkpoint topic {offsets} compacted"]
    assert compacted["status"] == "fail" and "cleanup.policy=delete" in compacted["detail"], compacted
    assert "retention.ms (3600000 ms)" in compacted["detail"]
    assert "cleanup.policy=compact" in compacted["fix"]

    fresh = f"{topic_prefix}-fresh-offsets"  # not there: the first start creates it compacted
    code, checks, errors = doctor(_pipeline(tmp_path, body.replace(offsets, fresh)))
    assert code == 0, errors
    assert checks[f"checkpoint topic {fresh} compacted"]["status"] == "ok"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    assert fresh not in admin.list_topics(timeout=30).topics  # doctor created nothing


def test_doctor_checks_transactions_for_a_worker_group_and_exactly_once(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    offsets = f"{topic_prefix}-offsets"
    _create_topic(kafka_bootstrap, offsets, **{"cleanup.policy": "compact"})
    body = (
        "source: {type: datagen, count: 1}\n"
        f"sink: {{type: kafka, bootstrap_servers: '{kafka_bootstrap}', topic: {topic_prefix}-out}}\n"
        f"checkpoint: {{type: kafka, bootstrap_servers: '{kafka_bootstrap}', topic: {offsets}}}\n"
        f"engine:\n  group: {group_section(kafka_bootstrap, f'grp-{topic_prefix}', 'kafka', 4)}\n"
    )
    code, checks, errors = doctor(_pipeline(tmp_path, body))
    assert code == 0, (checks, errors)
    assert checks[f"checkpoint topic {offsets} compacted"]["status"] == "ok"
    assert checks["transactions available"]["status"] == "ok"
    limit = checks["checkpoint transaction_timeout_s within the broker's transaction.max.timeout.ms"]
    assert limit["status"] == "ok" and limit["detail"] == "30000 ms of at most 900000 ms", limit
    assert checks[f"topic {topic_prefix}-out"]["status"] == "ok"  # created on first write by this broker

    # One process with exactly-once delivery commits in transactions too; at least once does not.
    alone = body.split("engine:", maxsplit=1)[0]
    exactly_once = alone.replace(f"topic: {topic_prefix}-out}}", f"topic: {topic_prefix}-out, delivery: exactly_once}}")
    code, checks, errors = doctor(_pipeline(tmp_path, exactly_once))
    assert code == 0 and checks["transactions available"]["status"] == "ok", (checks, errors)
    code, checks, errors = doctor(_pipeline(tmp_path, alone))
    assert code == 0 and "transactions available" not in checks, (checks, errors)


def test_doctor_fails_a_sink_topic_whose_replicas_cannot_take_acks_all(
    kafka_bootstrap: str, registry_url: str, topic_prefix: str, tmp_path: Path
) -> None:
    topic = f"{topic_prefix}-out"
    _create_topic(kafka_bootstrap, topic, **{"min.insync.replicas": "2"})
    body = (
        "source: {type: datagen, count: 1}\n"
        f"sink: {{type: kafka, bootstrap_servers: '{kafka_bootstrap}', topic: {topic}, converter: avro, "
        f"schema_registry_url: '{registry_url}'}}\n"
    )
    code, checks, errors = doctor(_pipeline(tmp_path, body))
    assert code == 1, errors
    replicas = checks[f"topic {topic}: replicas for acks=all"]
    assert replicas["status"] == "fail", replicas
    assert replicas["detail"].startswith("replication factor 1, min.insync.replicas 2")
    registry = checks[f"schema registry {registry_url}"]
    rule = requests.get(f"{registry_url}/config", timeout=30).json()["compatibilityLevel"]  # asked directly
    assert registry["status"] == ("warn" if rule == "NONE" else "ok")
    assert registry["detail"].endswith(f"compatibility {rule}"), registry


def test_doctor_fails_an_unreachable_registry_and_a_missing_source_topic(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    registry = f"http://127.0.0.1:{_closed_port()}"
    body = (
        f"source: {{type: kafka, bootstrap_servers: '{kafka_bootstrap}', topics: [{topic_prefix}-none], "
        f"converter: avro, schema_registry_url: '{registry}'}}\n"
        "sink: {type: file, path: out.jsonl}\n"
    )
    code, checks, errors = doctor(_pipeline(tmp_path, body))
    assert code == 1, errors
    assert checks[f"topic {topic_prefix}-none"]["status"] == "fail"
    unreachable: dict[str, Any] = checks[f"schema registry {registry}"]
    assert unreachable["status"] == "fail" and "unreachable" in unreachable["detail"], unreachable
