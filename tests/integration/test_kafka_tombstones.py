"""Tombstones after deletes the broker refuses, against the real broker (issue 21, item 3).

A tombstone makes a compacted topic forget its key, so it may follow only a delete the broker
took: a delete refused for good goes to the dead letters with its tombstone, and neither reaches
the topic. Both ways a pipeline writes to Kafka are run: compact event batches (datagen and
route, all encoded by the compiled core) and records (a filter, which has no batch form, in front).
"""

from __future__ import annotations

import base64
import json
import signal
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cdcflow.contract import PluginContext
from cdcflow.errors import SinkDeliveryError
from cdcflow.events import ChangeEvent, Op
from cdcflow.kafka_client import TOMBSTONE_HEADER
from cdcflow.native import native_module
from cdcflow.plugins import PluginRegistry
from cdcflow.sinks.kafka import KafkaSink, KafkaSinkConfig
from tests.integration.kafka_helpers import Received, datagen, read_topics, run_cdcflow, start_logged

pytestmark = pytest.mark.kafka

# Keys repeat (20 per table), so a key is changed again after its delete and must keep its order.
DATAGEN = {
    "count": 400,
    "partitions": 2,
    "tables": 2,
    "keys": 40,
    "event_size": 3000,
    "op_mix": {"c": 0.4, "u": 0.2, "d": 0.4},
    "seed": 11,
}
# table_0's topic refuses any of its events (3,000 random characters even compressed), never a
# lone tombstone; table_1's takes everything.
REFUSING_LIMIT = 1500


def _create_topics(bootstrap: str, prefix: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [
            NewTopic(f"{prefix}.table_0", 2, 1, config={"max.message.bytes": str(REFUSING_LIMIT)}),
            NewTopic(f"{prefix}.table_1", 2, 1),
            NewTopic(f"{prefix}-dlq", 2, 1),
        ]
    )
    for future in futures.values():
        future.result(30)


def _pipeline(tmp_path: Path, prefix: str, path: str, config: dict[str, Any], sink: str, dead_letter: str) -> Path:
    """datagen -> route -> kafka with ``errors.tolerance: all``; ``path`` "records" puts a filter
    (no batch form) in front, so the sink gets records instead of compact batches."""
    fields = ", ".join(f"{k}: {json.dumps(v)}" for k, v in config.items())
    records_only = "{type: filter, ops: [c, u, d]}, " if path == "records" else ""
    file = tmp_path / f"{path}.yaml"
    file.write_text(
        f"name: tombstones-{prefix}\n"
        f"source: {{type: datagen, {fields}}}\n"
        f"transforms: [{records_only}"
        f'{{type: route, regex: "datagen\\\\.shop\\\\.(.*)", replacement: "{prefix}.$1"}}]\n'
        f"sink: {{type: kafka, {sink}}}\n"
        "checkpoint: {type: file, path: ckpt}\n"
        f"errors: {{tolerance: all, dead_letter: {dead_letter}}}\n"
    )
    return file


def _expected_deletes(config: dict[str, Any], table: str | None = None) -> set[int]:
    """Ids (``seq``) of the deletes datagen makes (in ``table``)."""
    source = datagen(config)
    ids = set()
    for partition in range(config["partitions"]):
        for seq in range(1, config["count"] // config["partitions"] + 1):
            event = source.event(partition, seq, 0)
            if event.op is Op.DELETE and table in (None, event.source.table):
                assert event.before is not None
                ids.add(event.before["seq"])
    return ids


def _by_key(records: list[Received]) -> dict[tuple[str, int, bytes | None], list[Received]]:
    """Each key's records in the order their partition holds them."""
    keyed: dict[tuple[str, int, bytes | None], list[Received]] = defaultdict(list)
    for record in sorted(records, key=lambda r: (r.topic, r.partition, r.offset)):
        keyed[(record.topic, record.partition, record.key)].append(record)
    return keyed


def _payload(value: bytes) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads(value)["payload"]
    return payload


@pytest.mark.parametrize("path", ["batches", "records"])
def test_a_refused_delete_and_its_tombstone_go_to_the_dead_letters_together(
    tmp_path: Path, kafka_bootstrap: str, topic_prefix: str, path: str
) -> None:
    if path == "batches" and native_module() is None:
        pytest.skip("compact batches need the compiled core")
    _create_topics(kafka_bootstrap, topic_prefix)
    # One message per produce request: the broker judges a delete and its tombstone apart, as it
    # does when a delete fills a batch on its own (the 1 MB deletes).
    sink = f"bootstrap_servers: '{kafka_bootstrap}', producer: {{batch.num.messages: 1}}"
    dead_letter = f"{{type: kafka, bootstrap_servers: '{kafka_bootstrap}', topic: {topic_prefix}-dlq}}"
    result = run_cdcflow("run", str(_pipeline(tmp_path, topic_prefix, path, DATAGEN, sink, dead_letter)))
    assert result.returncode == 0, result.stderr

    refusing = read_topics(kafka_bootstrap, [f"{topic_prefix}.table_0"])
    assert refusing == [], "the refusing topic holds records (a tombstone of a refused delete)"

    # Every delete the broker took is followed, among its key's records, by its tombstone. (A run
    # that retried after a transient failure writes again from its checkpoint: a delete whose
    # tombstone was still waiting then comes again, followed by it.)
    accepted_deletes = set()
    for records in _by_key(read_topics(kafka_bootstrap, [f"{topic_prefix}.table_1"])).values():
        for index, record in enumerate(records):
            if record.value is None:
                previous = records[index - 1] if index > 0 else None
                assert previous is not None and previous.value is not None
                assert _payload(previous.value)["op"] == "d", f"a tombstone after a {_payload(previous.value)['op']}"
                assert record.headers == {TOMBSTONE_HEADER: b"after-delete"}
                continue
            payload = _payload(record.value)
            if payload["op"] == "d":
                seq = payload["before"]["seq"]
                accepted_deletes.add(seq)
                following = records[index + 1] if index + 1 < len(records) else None
                later = [_payload(r.value) for r in records[index + 1 :] if r.value is not None]
                written_again = any(p["op"] == "d" and p["before"]["seq"] == seq for p in later)
                assert (following is not None and following.value is None) or written_again, f"delete {seq}"
    assert accepted_deletes == _expected_deletes(DATAGEN, "table_1")

    # Every refused delete is in the dead letters, its tombstone next among its key's.
    refused_deletes, tombstones = set(), 0
    dead = read_topics(kafka_bootstrap, [f"{topic_prefix}-dlq"])
    for records in _by_key(dead).values():
        for index, record in enumerate(records):
            assert record.headers["cdcflow.error.stage"] == b"sink"
            assert record.headers["cdcflow.error.original_topic"] == f"{topic_prefix}.table_0".encode()
            assert record.value is not None
            raw_value = _payload(record.value)["raw_value"]
            if raw_value is None:
                assert TOMBSTONE_HEADER in record.headers, "a dead letter with a null value that is no tombstone"
                tombstones += 1
                continue
            refused = _payload(base64.b64decode(raw_value))
            if refused["op"] != "d":
                continue
            refused_deletes.add(refused["before"]["seq"])
            following = records[index + 1] if index + 1 < len(records) else None
            assert following is not None and TOMBSTONE_HEADER in following.headers, f"delete {refused['before']}"
            assert following.headers["cdcflow.error.class"] == b"TombstoneWithheldError"
            assert _payload(following.value or b"")["raw_value"] is None
            tombstones -= 1  # counted as its delete's
    assert refused_deletes == _expected_deletes(DATAGEN, "table_0")
    assert tombstones == 0, "a tombstone in the dead letters without its delete"


@pytest.mark.parametrize("path", ["batches", "records"])
def test_a_delete_the_producer_refuses_at_once_takes_its_tombstone_to_the_dead_letters(
    tmp_path: Path, kafka_bootstrap: str, topic_prefix: str, path: str
) -> None:
    # Over the producer's own message.max.bytes, a record is refused by produce() itself.
    if path == "batches" and native_module() is None:
        pytest.skip("compact batches need the compiled core")
    config = {**DATAGEN, "count": 60, "op_mix": {"c": 0.5, "d": 0.5}}
    sink = f"bootstrap_servers: '{kafka_bootstrap}', producer: {{message.max.bytes: 2000}}"
    file = _pipeline(tmp_path, topic_prefix, path, config, sink, "{type: file, path: dlq.jsonl}")
    result = run_cdcflow("run", str(file))
    assert result.returncode == 0, result.stderr

    topics = [f"{topic_prefix}.table_0", f"{topic_prefix}.table_1"]
    assert read_topics(kafka_bootstrap, topics) == [], "a tombstone of a refused delete reached Kafka"
    dead = [json.loads(line) for line in (tmp_path / "dlq.jsonl").read_text().splitlines()]
    deletes = [index for index, d in enumerate(dead) if d["value"].get("op") == "d"]
    assert {dead[index]["value"]["before"]["seq"] for index in deletes} == _expected_deletes(config) != set()
    assert sum(TOMBSTONE_HEADER in d.get("headers", {}) for d in dead) == len(deletes)
    for index in deletes:
        tombstone = dead[index + 1]  # right after its delete
        assert tombstone["headers"][TOMBSTONE_HEADER] == "after-delete"
        assert tombstone["headers"]["cdcflow.error.class"] == "TombstoneWithheldError"
        assert tombstone["value"] == {"raw_value": None}
        key = json.loads(base64.b64decode(tombstone["key"]["raw_key"]))["payload"]
        assert key == dead[index]["key"]


# --- tombstones written at a flush of the producer (a delete's fate is known only then) -------------


def _sink(bootstrap: str, topic: str, **fields: Any) -> KafkaSink:
    """A kafka sink writing every record to ``topic``, json, opened."""
    config = KafkaSinkConfig.model_validate({"type": "kafka", "bootstrap_servers": bootstrap, "topic": topic, **fields})
    context = PluginContext("tombstones", Path("tombstones.yaml"), factory=PluginRegistry.from_entry_points())
    sink = KafkaSink(config, context)
    sink.open()
    return sink


def _one_key_events(count: int, op_mix: dict[str, float], event_size: int = 64, seed: int = 3) -> list[ChangeEvent]:
    """``count`` changes of a single key (datagen, one partition, one table, one key), in order."""
    config = {"partitions": 1, "tables": 1, "keys": 1, "op_mix": op_mix, "event_size": event_size, "seed": seed}
    source = datagen(config)
    return [source.event(0, seq, 1_000_000 * seq) for seq in range(1, count + 1)]


def _written_as(events: list[ChangeEvent]) -> list[str]:
    """What a topic holds for these events of one key: each op, and "tombstone" after each delete."""
    return [kind for e in events for kind in ([e.op.value, "tombstone"] if e.op is Op.DELETE else [e.op.value])]


def _held_as(records: list[Received]) -> list[str]:
    return [_payload(r.value)["op"] if r.value is not None else "tombstone" for r in records]


def test_a_failed_flush_writes_no_tombstone_and_the_replay_comes_out_in_order(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    # The topic is not there and the producer may not have the broker create it: every message,
    # deletes included, waits for it until delivery_timeout_ms and then fails, so the fate of
    # each delete is unknown to the sink. The flush fails; nothing of the interval may linger in
    # the sink (a pending tombstone, a held message) when the pipeline writes it all again.
    topic = f"{topic_prefix}.later"
    events = _one_key_events(30, {"c": 0.5, "d": 0.5})  # a key deleted and created again, several times
    assert sum(e.op is Op.DELETE for e in events) > 3

    sink = _sink(kafka_bootstrap, topic, delivery_timeout_ms=3000, producer={"allow.auto.create.topics": False})
    try:
        assert sink.write(events) == []
        with pytest.raises(SinkDeliveryError):
            sink.flush()
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        assert read_topics(kafka_bootstrap, [topic]) == []
        assert sink.write(events) == []  # the replay from the last checkpoint
        assert sink.flush() == []
    finally:
        sink.close()
    assert _held_as(read_topics(kafka_bootstrap, [topic])) == _written_as(events)


def test_messages_held_behind_a_tombstone_are_written_before_the_checkpoint_past_a_bound(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    # Messages of a key whose tombstone waits are held in the sink, outside the producer's bounded
    # buffer: past a bound (a few hundred KiB) the write itself writes the tombstone and what
    # waits behind it, so memory does not grow with the checkpoint interval.
    topic = f"{topic_prefix}.held"
    delete = next(e for e in _one_key_events(20, {"c": 0.5, "d": 0.5}) if e.op is Op.DELETE)
    updates = _one_key_events(2000, {"u": 1.0}, event_size=1000, seed=4)  # ~2.5 MB behind the delete
    sink = _sink(kafka_bootstrap, topic)
    try:
        assert sink.write([delete, *updates]) == []
        before_the_checkpoint = read_topics(kafka_bootstrap, [topic])
        assert sink.flush() == []
    finally:
        sink.close()
    assert _held_as(before_the_checkpoint) == _written_as([delete, *updates])


def test_a_stop_writes_what_waits_behind_tombstones(tmp_path: Path, kafka_bootstrap: str, topic_prefix: str) -> None:
    # SIGTERM ends a run with a flush and a checkpoint: the messages held behind pending tombstones
    # then are written with them, so no event the checkpoint covers is missing.
    config = {"partitions": 2, "tables": 1, "keys": 12, "rate": 3000, "op_mix": {"c": 0.3, "u": 0.2, "d": 0.5}}
    fields = ", ".join(f"{k}: {json.dumps(v)}" for k, v in config.items())
    file = tmp_path / "endless.yaml"
    file.write_text(
        f"name: held-{topic_prefix}\n"
        f"source: {{type: datagen, {fields}, event_size: 32, seed: 5}}\n"
        f'transforms: [{{type: route, regex: "datagen\\\\.shop\\\\.(.*)", replacement: "{topic_prefix}.$1"}}]\n'
        f"sink: {{type: kafka, bootstrap_servers: '{kafka_bootstrap}'}}\n"
        # Past the run's length: the stop's flush is the only one after the first read's.
        "checkpoint: {type: file, path: ckpt, interval_ms: 600000}\n"
    )
    process, log = start_logged(file)
    topic = f"{topic_prefix}.table_0"
    deadline = time.monotonic() + 60
    while _records_in(kafka_bootstrap, topic) < 3000 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    assert process.wait(60) == 0, "".join(log)

    records = read_topics(kafka_bootstrap, [topic])
    seqs: dict[int, set[int]] = defaultdict(set)
    for key_records in _by_key(records).values():
        kinds = _held_as(key_records)
        for index, kind in enumerate(kinds):  # each delete followed by its tombstone, and only a delete by one
            assert (kind == "tombstone") == (index > 0 and kinds[index - 1] == "d"), kinds
        assert kinds[-1] != "d", kinds
        for record in key_records:
            if record.value is not None:
                source = _payload(record.value)["source"]
                seqs[int(source["partition"].rsplit("-", 1)[1])].add(json.loads(source["position"])["seq"])
    assert len(records) > 3000
    for partition, written in seqs.items():  # a held message lost would leave a gap below the last
        assert written == set(range(1, max(written) + 1)), f"partition {partition}"


def _records_in(bootstrap: str, topic: str) -> int:
    """How many records ``topic`` holds; 0 while it is not there or its partitions have no leader yet."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cdcflow-tests-counter"})
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if metadata is None or metadata.error is not None:
            return 0
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic, number), timeout=10)[1]
            for number in metadata.partitions
        )
    except KafkaException:
        return 0
    finally:
        consumer.close()
