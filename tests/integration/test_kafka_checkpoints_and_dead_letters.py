"""The compacted-topic checkpoint store and the Kafka dead-letter topic, against the real broker."""

from __future__ import annotations

import base64
import json
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from cdcflow.contract import Checkpoint, PluginContext
from cdcflow.plugins import PluginRegistry
from cdcflow.sinks.kafka import KafkaCheckpointConfig, KafkaCheckpointStore, KafkaSink, KafkaSinkConfig
from tests.integration.group_helpers import committed_history
from tests.integration.kafka_helpers import (
    datagen,
    event_id,
    read_topics,
    run_cdcflow,
    start_worker,
    topics_with_prefix,
)

pytestmark = pytest.mark.kafka


def store(bootstrap: str, topic: str, pipeline: str) -> KafkaCheckpointStore:
    s = KafkaCheckpointStore(
        KafkaCheckpointConfig(type="kafka", bootstrap_servers=bootstrap, topic=topic),
        PluginContext(pipeline, Path("p.yaml")),
    )
    s.open()
    return s


def test_checkpoints_round_trip_keep_the_newest_and_reset(kafka_bootstrap: str, topic_prefix: str) -> None:
    topic = f"{topic_prefix}-offsets"
    first, other = store(kafka_bootstrap, topic, "orders"), store(kafka_bootstrap, topic, "payments")
    try:
        first.commit({"p/0": Checkpoint({"seq": 1}, 10, 100), "p/1": Checkpoint({"seq": 5}, 50, 100)})
        first.commit({"p/0": Checkpoint({"seq": 2}, 20, 200)})
        other.commit({"p/0": Checkpoint({"seq": 99}, 990, 300)})
        reloaded = store(kafka_bootstrap, topic, "orders")
        assert reloaded.load() == {"p/0": Checkpoint({"seq": 2}, 20, 200), "p/1": Checkpoint({"seq": 5}, 50, 100)}
        reloaded.reset(["p/1"])
        assert store(kafka_bootstrap, topic, "orders").load() == {"p/0": Checkpoint({"seq": 2}, 20, 200)}
        assert store(kafka_bootstrap, topic, "payments").load() == {"p/0": Checkpoint({"seq": 99}, 990, 300)}
    finally:
        first.close()
        other.close()


def test_a_settled_load_does_not_wait_on_a_commit_left_open(kafka_bootstrap: str, topic_prefix: str) -> None:
    # A group member killed mid-commit leaves a transaction open in every partition it wrote to;
    # a read_committed read stops there until the broker aborts it or its bucket is claimed.
    from confluent_kafka import Producer

    topic = f"{topic_prefix}-offsets"
    writer = store(kafka_bootstrap, topic, "orders")
    writer.commit({"p/0": Checkpoint({"seq": 1}, 10, 100)})
    writer.close()
    dead = Producer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "transactional.id": f"{topic_prefix}-dead",
            "transaction.timeout.ms": 60_000,
        }
    )
    dead.init_transactions(30)
    dead.begin_transaction()
    for partition in range(KafkaCheckpointConfig(type="kafka", bootstrap_servers=kafka_bootstrap).partitions):
        dead.produce(topic, key=b'["orders","p/1"]', value=b'{"offset": {"seq": 7}}', partition=partition)
    dead.flush(30)
    # Short timeouts: waiting past the open transaction would end in CheckpointUnavailableError.
    reader = KafkaCheckpointStore(
        KafkaCheckpointConfig(
            type="kafka", bootstrap_servers=kafka_bootstrap, topic=topic, timeout_s=2, transaction_timeout_s=1
        ),
        PluginContext("orders", Path("p.yaml")),
    )
    reader.open()
    try:
        assert reader.load_settled() == {"p/0": Checkpoint({"seq": 1}, 10, 100)}
    finally:
        reader.close()
        dead.abort_transaction(30)


def _in_bucket_0(partition_id: str) -> int:
    return 0


def test_a_second_owner_fences_the_first_and_checkpoints_never_go_back(kafka_bootstrap: str, topic_prefix: str) -> None:
    """The real store's fence (issue 24, item 5c): a claim by a second owner refuses the first
    owner's next commit, and what a reader loads only ever moves forward."""
    topic, pipeline = f"{topic_prefix}-offsets", f"fence-{topic_prefix}"
    first, second = store(kafka_bootstrap, topic, pipeline), store(kafka_bootstrap, topic, pipeline)
    try:
        assert first.claim({0}, _in_bucket_0) == {}
        assert first.commit_claimed({0: {"p/0": Checkpoint({"seq": 5}, 50, 100)}}) == frozenset()
        assert second.claim({0}, _in_bucket_0) == {"p/0": Checkpoint({"seq": 5}, 50, 100)}
        # The first owner was frozen while the second took over: what it commits now is refused.
        assert first.commit_claimed({0: {"p/0": Checkpoint({"seq": 3}, 30, 200)}}) == frozenset({0})
        assert first.claimed() == frozenset()
        assert second.load() == {"p/0": Checkpoint({"seq": 5}, 50, 100)}
        assert second.commit_claimed({0: {"p/0": Checkpoint({"seq": 9}, 90, 300)}}) == frozenset()
        assert store(kafka_bootstrap, topic, pipeline).load() == {"p/0": Checkpoint({"seq": 9}, 90, 300)}
        assert committed_history(kafka_bootstrap, pipeline, topic) == {"p/0": [5, 9]}
    finally:
        first.close()
        second.close()


def test_a_claim_aborts_the_records_the_previous_owner_wrote_in_its_open_transaction(
    tmp_path: Path, kafka_bootstrap: str, topic_prefix: str
) -> None:
    """Exactly once: records written into a bucket's open transaction by an owner that is then
    fenced never become visible to a read_committed reader, and its commit of them is refused."""
    topic, pipeline, out = f"{topic_prefix}-offsets", f"fence-{topic_prefix}", f"{topic_prefix}.out"
    source = datagen({"count": 100, "partitions": 1, "op_mix": {"c": 0.5, "u": 0.5}})
    events = [source.event(0, seq, 1_000_000 + seq) for seq in range(1, 101)]
    owners = []
    for _ in range(2):
        sink = KafkaSink(
            KafkaSinkConfig(type="kafka", bootstrap_servers=kafka_bootstrap, topic=out, delivery="exactly_once"),
            PluginContext(pipeline, tmp_path / "p.yaml", factory=PluginRegistry.from_entry_points()),
        )
        sink.open()
        owner = store(kafka_bootstrap, topic, pipeline)
        owner.make_lanes_with(sink.new_transaction_lane)
        owners.append((sink, owner))
    (first_sink, first), (second_sink, second) = owners
    try:
        first.claim({0}, _in_bucket_0)
        first_sink.write_into(first.transaction_lane(0))
        assert first_sink.write(events[:60]) == [] and first_sink.flush() == []  # delivered, not committed
        assert len(read_topics(kafka_bootstrap, [out], client={"isolation.level": "read_uncommitted"})) == 60

        assert second.claim({0}, _in_bucket_0) == {}  # fences the first owner, aborting its transaction
        assert first.commit_claimed({0: {"p/0": Checkpoint({"seq": 60}, 60, 100)}}) == frozenset({0})
        second_sink.write_into(second.transaction_lane(0))
        assert second_sink.write(events) == [] and second_sink.flush() == []
        assert second.commit_claimed({0: {"p/0": Checkpoint({"seq": 100}, 100, 200)}}) == frozenset()

        seen = [json.loads(r.value)["payload"] for r in read_topics(kafka_bootstrap, [out]) if r.value is not None]
        positions = sorted(json.loads(p["source"]["position"])["seq"] for p in seen)
        assert positions == list(range(1, 101))  # each once: none of the first owner's 60
        assert store(kafka_bootstrap, topic, pipeline).load() == {"p/0": Checkpoint({"seq": 100}, 100, 200)}
    finally:
        for sink, owner in owners:
            sink.close()
            owner.close()


def test_pipeline_resumes_from_kafka_checkpoints_and_dead_letters_go_to_a_topic(
    tmp_path: Path, kafka_bootstrap: str, topic_prefix: str
) -> None:
    file = tmp_path / "p.yaml"
    file.write_text(
        f"name: dl-{topic_prefix}\n"
        "source: {type: datagen, count: 3000, partitions: 2, tables: 3, event_size: 16}\n"
        "transforms:\n"
        "  - {type: mask, columns: [table_2.id], mode: drop}\n"
        f'  - {{type: route, regex: "datagen\\\\.shop\\\\.(.*)", replacement: "{topic_prefix}.$1"}}\n'
        f"sink: {{type: kafka, bootstrap_servers: '{kafka_bootstrap}'}}\n"
        f"checkpoint: {{type: kafka, bootstrap_servers: '{kafka_bootstrap}', topic: {topic_prefix}-offsets}}\n"
        f"errors: {{tolerance: all, dead_letter: {{type: kafka, bootstrap_servers: '{kafka_bootstrap}', "
        f"topic: {topic_prefix}-dlq}}}}\n"
    )
    assert run_cdcflow("run", str(file)).returncode == 0
    shown = json.loads(run_cdcflow("offsets", "show", str(file)).stdout)["partitions"]
    assert {pid: c["offset"]["seq"] for pid, c in shown.items()} == {"datagen-0": 1500, "datagen-1": 1500}
    # A second run starts from the committed offsets: nothing is written again.
    assert run_cdcflow("run", str(file)).returncode == 0

    delivered = read_topics(kafka_bootstrap, [t for t in topics_with_prefix(kafka_bootstrap, f"{topic_prefix}.")])
    dead = read_topics(kafka_bootstrap, [f"{topic_prefix}-dlq"])
    delivered_ids = Counter(event_id(json.loads(r.value)["payload"]) for r in delivered if r.value)
    dead_ids = Counter(event_id(json.loads(r.value)["payload"]) for r in dead if r.value)
    assert max(delivered_ids.values()) == 1 and max(dead_ids.values()) == 1
    assert set(delivered_ids) | set(dead_ids) == set(range(3000)) and not set(delivered_ids) & set(dead_ids)
    assert all(r.headers["cdcflow.error.stage"] == b"transform:mask" for r in dead)
    assert {r.headers["cdcflow.error.original_topic"] for r in dead} == {b"datagen.shop.table_2"}


def test_records_too_large_for_kafka_go_to_dead_letters_and_do_not_block(
    tmp_path: Path, kafka_bootstrap: str, topic_prefix: str
) -> None:
    file = tmp_path / "big.yaml"
    file.write_text(
        f"name: big-{topic_prefix}\n"
        "source: {type: datagen, count: 300, partitions: 2, event_size: 60000, op_mix: {c: 0.5, u: 0.5}}\n"
        f'transforms: [{{type: route, regex: "datagen\\\\.shop\\\\.(.*)", replacement: "{topic_prefix}.$1"}}]\n'
        # An update carries two 60 kB images: over this producer's 100 kB message limit.
        f"sink: {{type: kafka, bootstrap_servers: '{kafka_bootstrap}', producer: {{message.max.bytes: 100000}}}}\n"
        "errors: {tolerance: all, dead_letter: {type: file, path: dlq.jsonl}}\n"
    )
    result = run_cdcflow("run", str(file))
    assert result.returncode == 0, result.stderr
    delivered = read_topics(kafka_bootstrap, topics_with_prefix(kafka_bootstrap, f"{topic_prefix}."))
    delivered_payloads = [json.loads(r.value)["payload"] for r in delivered if r.value]
    dead = [json.loads(line) for line in (tmp_path / "dlq.jsonl").read_text().splitlines()]
    assert {p["op"] for p in delivered_payloads} == {"c"}
    assert dead and {d["value"]["op"] for d in dead} == {"u"}
    assert all(d["headers"]["cdcflow.error.stage"] == "sink" for d in dead)
    ids = [event_id(p) for p in delivered_payloads] + [event_id(d["value"]) for d in dead]
    assert sorted(ids) == list(range(300))


# Each malformed record, and what its dead letter must say is wrong with it.
MALFORMED_RECORDS: dict[int, tuple[bytes, bytes, str]] = {
    3: (b'{"payload": {"n": 3}}', b"\xff\x00not json", "value: payload on {topic} is not JSON"),
    4: (b"k4 is not json", json.dumps({"payload": {"n": 4}}).encode(), "key: payload on {topic} is not JSON"),
    6: (b'{"payload": {"n": 6}}', b"[1,2,3]", "value: payload on {topic} is a JSON array, not an object"),
    8: (b'{"payload": {"n": 8}}', b"{}", "value: payload on {topic} is a JSON object without a payload field"),
    11: (
        b'{"payload": {"n": 11}}',
        json.dumps({"payload": {"op": "x", "source": {}, "after": {"n": 11}}}).encode(),
        "value is a change envelope whose op is 'x'; expected one of c, d, r, u",
    ),
    12: (
        b'{"payload": {"n": 12}}',
        json.dumps({"payload": {"op": "c", "source": "cassandra", "after": {"n": 12}}}).encode(),
        "value is a change envelope whose source is a string; expected an object",
    ),
    13: (
        b'{"payload": {"n": 13}}',
        json.dumps({"payload": {"op": "u", "source": {}, "after": [13]}}).encode(),
        "value is a change envelope whose after is an array; expected an object or null",
    ),
}


def test_a_record_the_kafka_source_cannot_decode_goes_to_dead_letters_and_the_partition_goes_on(
    tmp_path: Path, kafka_bootstrap: str, topic_prefix: str
) -> None:
    from confluent_kafka import Producer

    topic = f"{topic_prefix}.in"
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for n in range(15):
        key, value, _ = MALFORMED_RECORDS.get(
            n, (json.dumps({"payload": {"n": n}}).encode(), json.dumps({"payload": {"n": n}}).encode(), "")
        )
        producer.produce(topic, key=key, value=value, partition=0)
    assert producer.flush(30) == 0
    file = tmp_path / "poison.yaml"
    file.write_text(
        f"name: poison-{topic_prefix}\n"
        f"source: {{type: kafka, bootstrap_servers: '{kafka_bootstrap}', topics: [{topic}]}}\n"
        "sink: {type: file, path: out.jsonl}\n"
        "errors: {tolerance: all, dead_letter: {type: file, path: dlq.jsonl}}\n"
    )
    process = start_worker(file)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:
            out, dead = _json_lines(tmp_path / "out.jsonl"), _json_lines(tmp_path / "dlq.jsonl")
            if len(out) + len(dead) >= 15:
                break
            time.sleep(0.2)
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr.decode()
    out, dead = _json_lines(tmp_path / "out.jsonl"), _json_lines(tmp_path / "dlq.jsonl")
    assert [line["value"]["n"] for line in out] == [n for n in range(15) if n not in MALFORMED_RECORDS]
    assert len(dead) == len(MALFORMED_RECORDS)
    for letter, (n, (key, value, says)) in zip(dead, sorted(MALFORMED_RECORDS.items()), strict=True):
        # the bytes as they were, what is wrong with this record, and where it was read, field by field
        assert base64.b64decode(letter["key"]["raw_key"]) == key
        assert base64.b64decode(letter["value"]["raw_value"]) == value
        headers = letter["headers"]
        assert headers["cdcflow.error.stage"] == "source"
        assert f"{topic} partition 0 offset {n}: " in headers["cdcflow.error.message"]
        assert says.format(topic=topic) in headers["cdcflow.error.message"]
        assert (headers["cdcflow.error.topic"], headers["cdcflow.error.partition"]) == (topic, "0")
        assert headers["cdcflow.error.offset"] == str(n)
    assert len({d["headers"]["cdcflow.error.message"].split(": ", 1)[1] for d in dead}) == len(MALFORMED_RECORDS)


def _json_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_load_waits_out_a_partition_whose_leader_is_not_serving_yet(
    kafka_bootstrap: str, topic_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A topic created a moment ago (by this open() or another worker's) can answer
    NOT_LEADER_FOR_PARTITION to the first reads (CI: `cdcflow offsets set` right after the store
    created its topic failed with it). The broker's answer is made to come twice here, as the read
    itself raises it: the load tries again and returns the checkpoints; an error that is not
    transient still fails at once, naming the topic."""
    from confluent_kafka import KafkaError, KafkaException

    from cdcflow.errors import CheckpointUnavailableError

    topic = f"{topic_prefix}-offsets"
    writer = store(kafka_bootstrap, topic, "orders")
    try:
        writer.commit({"p/0": Checkpoint({"seq": 3}, 30, 300)})
        reader = store(kafka_bootstrap, topic, "orders")
        real = KafkaCheckpointStore._read_to_end
        answers = iter([KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.NOT_LEADER_FOR_PARTITION])
        tries = []

        def not_led_at_first(self: KafkaCheckpointStore, *args: Any) -> Any:
            tries.append(1)
            code = next(answers, None)
            if code is not None:
                raise KafkaException(KafkaError(code, "Broker: Not leader for partition", retriable=True))
            return real(self, *args)

        monkeypatch.setattr(KafkaCheckpointStore, "_read_to_end", not_led_at_first)
        assert reader.load() == {"p/0": Checkpoint({"seq": 3}, 30, 300)}
        assert len(tries) == 3

        def refused(self: KafkaCheckpointStore, *args: Any) -> Any:
            raise KafkaException(
                KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "Broker: Topic authorization failed")
            )

        monkeypatch.setattr(KafkaCheckpointStore, "_read_to_end", refused)
        with pytest.raises(CheckpointUnavailableError, match=f"cannot read offsets topic {topic}"):
            reader.load()
        reader.close()
    finally:
        writer.close()
