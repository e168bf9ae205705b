"""``sink.delivery: exactly_once`` on the real broker: each checkpoint interval's records and its
checkpoint in one Kafka transaction, so that a ``read_committed`` reader sees every change once
across SIGKILLs. Each test also shows the guarantee was needed: the crashes left records that only
a ``read_uncommitted`` reader sees (what the aborted transactions held)."""

from __future__ import annotations

import json
import random
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from cdcflow.contract import Checkpoint, PluginContext
from cdcflow.plugins import PluginRegistry
from cdcflow.sinks.kafka import KafkaCheckpointConfig, KafkaCheckpointStore, KafkaSink, KafkaSinkConfig
from tests.integration.kafka_helpers import (
    event_id,
    log_end,
    read_topics,
    run_cdcflow,
    start_worker,
    topics_with_prefix,
)
from tests.integration.test_kafka_tombstones import _held_as, _one_key_events, _written_as

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PARTITIONS = 4
READ_UNCOMMITTED = {"isolation.level": "read_uncommitted"}


def exactly_once_pipeline(folder: Path, prefix: str, bootstrap: str, count: int, rate: int, interval_ms: int) -> Path:
    file = folder / "eo.yaml"
    file.write_text(
        f"name: eo-{prefix}\n"
        f"source: {{type: datagen, count: {count}, partitions: {PARTITIONS}, tables: 2, keys: 500, "
        f"event_size: 32, rate: {rate}}}\n"
        f'transforms: [{{type: route, regex: "datagen\\\\.shop\\\\.(.*)", replacement: "{prefix}.$1"}}]\n'
        f"sink: {{type: kafka, bootstrap_servers: '{bootstrap}', linger_ms: 20, delivery: exactly_once}}\n"
        f"checkpoint: {{type: kafka, bootstrap_servers: '{bootstrap}', topic: {prefix}-offsets, "
        f"interval_ms: {interval_ms}}}\n"
        "engine: {max_records_per_read: 2000, batch_size: 500}\n"
    )
    return file


def copies(bootstrap: str, prefix: str, client: dict[str, str] | None = None) -> Counter[int]:
    """How often each datagen event is in the pipeline's topics, as a reader with ``client``'s
    isolation level sees them (librdkafka reads read_committed by default)."""
    received = read_topics(bootstrap, topics_with_prefix(bootstrap, prefix + "."), client=client)
    return Counter(event_id(json.loads(r.value)["payload"]) for r in received if r.value is not None)


def test_every_event_once_for_a_read_committed_reader_across_five_mid_stream_sigkills(
    tmp_path: Path, kafka_bootstrap: str, topic_prefix: str
) -> None:
    """The bar: 100,000 datagen events, five SIGKILLs, each once the run being killed has written
    records of its own, then a run to the end."""
    count = 100_000
    file = exactly_once_pipeline(tmp_path, topic_prefix, kafka_bootstrap, count, rate=5000, interval_ms=1000)
    rng = random.Random(20261125)
    for kill in range(5):
        before = log_end(kafka_bootstrap, topic_prefix)
        process = start_worker(file)
        deadline = time.monotonic() + 120
        while log_end(kafka_bootstrap, topic_prefix) <= before:  # this run's own records reached the broker
            assert process.poll() is None, process.communicate()[1].decode()[-3000:]
            assert time.monotonic() < deadline, f"kill {kill + 1}: no record from this run within 120 s"
            time.sleep(0.05)
        time.sleep(rng.uniform(0, 1.0))  # a random moment mid-stream to crash at, not a timing assertion
        assert process.poll() is None, f"kill {kill + 1} would land after the source was drained"
        process.send_signal(signal.SIGKILL)
        process.wait()
    final = run_cdcflow("run", str(file))
    assert final.returncode == 0, final.stderr[-3000:]

    committed = copies(kafka_bootstrap, topic_prefix)
    missing = set(range(count)) - set(committed)
    duplicated = {event: n for event, n in committed.items() if n > 1}
    everything = copies(kafka_bootstrap, topic_prefix, READ_UNCOMMITTED)
    aborted = sum(everything.values()) - sum(committed.values())
    print(f"\nexactly once, 5 SIGKILLs: {len(missing)} lost, {len(duplicated)} duplicated, {aborted} copies aborted")
    assert not missing, f"{len(missing)} events lost"
    assert not duplicated, f"{len(duplicated)} events seen more than once, e.g. {sorted(duplicated.items())[:5]}"
    assert aborted > 0, "the kills left no open transaction: the test did not test anything"


def test_deletes_and_their_tombstones_commit_together_inside_the_transaction(
    tmp_path: Path, kafka_bootstrap: str, topic_prefix: str
) -> None:
    """Tombstones at flush inside a transaction: the flush delivers the deletes into the open
    transaction, writes each tombstone once its delete was taken, then what waited behind it; a
    read_committed reader sees none of it before the commit, all of it in order after, and nothing
    of an interval whose transaction was aborted."""
    topic, pipeline = f"{topic_prefix}.one", f"tombstones-{topic_prefix}"
    events = _one_key_events(40, {"c": 0.4, "u": 0.3, "d": 0.3})  # one key deleted and made again, often
    context = PluginContext(pipeline, tmp_path / "p.yaml", factory=PluginRegistry.from_entry_points())
    sink = KafkaSink(
        KafkaSinkConfig(type="kafka", bootstrap_servers=kafka_bootstrap, topic=topic, delivery="exactly_once"), context
    )
    store = KafkaCheckpointStore(
        KafkaCheckpointConfig(type="kafka", bootstrap_servers=kafka_bootstrap, topic=f"{topic_prefix}-offsets"), context
    )
    store.open()
    sink.open()
    store.make_lanes_with(sink.new_transaction_lane)
    try:
        store.claim({0}, lambda partition_id: 0)
        sink.write_into(store.transaction_lane(0))
        assert sink.write(events[:30]) == [] and sink.flush() == []
        assert read_topics(kafka_bootstrap, [topic]) == []  # delivered into the open transaction only
        assert store.commit_claimed({0: {"p": Checkpoint({"seq": 30}, None, 1)}}) == frozenset()
        sink.write_into(store.transaction_lane(0))
        assert sink.write(events[30:]) == [] and sink.flush() == []
        store.release({0})  # a failure: the interval's transaction is aborted
    finally:
        sink.close()
        store.close()
    committed = read_topics(kafka_bootstrap, [topic])
    assert _held_as(committed) == _written_as(events[:30])
    assert sum(r.value is None for r in committed) == sum(e.op.value == "d" for e in events[:30]) > 3
    everything = read_topics(kafka_bootstrap, [topic], client=READ_UNCOMMITTED)
    assert _held_as(everything) == _written_as(events)  # the aborted interval is in the log, invisible
