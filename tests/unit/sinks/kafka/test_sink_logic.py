"""The kafka sink's own logic through its producer seam (cdcflow.sinks.kafka.producer): tombstone
ordering, delivery reports, flush failures, backpressure, fatal errors and fences. The producer
records calls and fails on demand; what Kafka does with the messages is tested against the real
broker (tests/integration/test_kafka_tombstones.py, test_exactly_once.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from cdcflow.contract import PluginContext
from cdcflow.errors import RecordRejectedError, SinkDeliveryError, SinkUnavailableError, TransactionFencedError
from cdcflow.events import ChangeEvent, Column, Op, RowSchema, SourceInfo
from cdcflow.kafka_client import TOMBSTONE_HEADER
from cdcflow.plugins import PluginRegistry
from cdcflow.sinks.kafka.exceptions import RecordRefusedInTransactionError, TombstoneWithheldError
from cdcflow.sinks.kafka.sink import KafkaSink, KafkaSinkConfig
from tests.unit.sinks.kafka.recording_producer import Produced, RecordingProducers

SCHEMA = RowSchema("c1.ks.t", (Column("id", "int", optional=False),), (Column("id", "int", optional=False),))
SOURCE = SourceInfo("cassandra", "c1", "ks", "t", "node1", {"pos": 1}, 1_700_000_000_000_000)
TOPIC = "unit.kafka.sink"


def change(op: Op, key: int) -> ChangeEvent:
    row = {"id": key}
    return ChangeEvent(op, row, None, None if op is Op.DELETE else row, SOURCE, 0, SCHEMA)


def sink_with(producers: RecordingProducers, **fields: Any) -> KafkaSink:
    config = KafkaSinkConfig.model_validate(
        {"type": "kafka", "bootstrap_servers": "127.0.0.1:1", "topic": TOPIC, **fields}
    )
    context = PluginContext("unit", Path("unit.yaml"), factory=PluginRegistry.from_entry_points())
    return KafkaSink(config, context, producer_factory=producers)


def key_of(message: Produced) -> int:
    assert message.key is not None
    return int(json.loads(message.key)["payload"]["id"])


def what(message: Produced) -> str:
    """``tombstone`` or the op of the change a produced message carries."""
    if message.value is None:
        assert message.headers is not None and dict(message.headers)[TOMBSTONE_HEADER] == "after-delete"
        return "tombstone"
    return str(json.loads(message.value)["payload"]["op"])


def refusing(code: int, op: str) -> RecordingProducers:
    """Producers whose delivery reports fail each message of ``op`` with ``code``."""

    def report(message: Produced) -> KafkaError | None:
        return KafkaError(code, "refused") if message.value and what(message) == op else None

    return RecordingProducers(prepare=lambda producer: setattr(producer, "delivery_error", report))


def test_a_change_after_a_delete_of_its_key_waits_behind_the_tombstone() -> None:
    # Mutant killed: KafkaSink.write without the `waits` check (a change produced while its key's
    # tombstone is pending) puts the second create before the tombstone.
    producers = RecordingProducers()
    sink = sink_with(producers)
    sink.open()
    assert sink.write([change(Op.CREATE, 1), change(Op.DELETE, 1), change(Op.CREATE, 1), change(Op.CREATE, 2)]) == []
    assert sink.flush() == []
    (producer,) = producers.made
    of_key_1 = [what(m) for m in producer.produced if key_of(m) == 1]
    assert of_key_1 == ["c", "d", "tombstone", "c"]
    assert [what(m) for m in producer.produced if key_of(m) == 2] == ["c"]


def test_a_delete_kafka_refuses_goes_to_the_dead_letters_and_its_tombstone_is_withheld() -> None:
    # Mutant killed: _release_pending writing the tombstone whatever its delete's report said.
    producers = refusing(KafkaError.MSG_SIZE_TOO_LARGE, "d")
    sink = sink_with(producers)
    sink.open()
    sink.write([change(Op.CREATE, 1), change(Op.DELETE, 1), change(Op.CREATE, 1)])
    rejected = sink.flush()
    assert [type(r.error) for r in rejected] == [RecordRejectedError, TombstoneWithheldError]
    (producer,) = producers.made
    refused_delete = next(m for m in producer.produced if m.value is not None and what(m) == "d")
    assert rejected[0].record.key == {"raw_key": refused_delete.key}
    assert [what(m) for m in producer.produced] == ["c", "d", "c"]  # no tombstone; the change held behind goes


def test_a_message_kafka_refuses_for_good_is_rejected_with_the_bytes_it_refused() -> None:
    # Mutant killed: ProducerLane.on_delivery counting every failure as undelivered (the flush
    # would fail and the pipeline replay the poison record forever).
    producers = refusing(KafkaError.MSG_SIZE_TOO_LARGE, "c")
    sink = sink_with(producers)
    sink.open()
    assert sink.write([change(Op.CREATE, 5)]) == []
    rejected = sink.flush()
    (produced,) = producers.made[0].produced
    assert len(rejected) == 1 and isinstance(rejected[0].error, RecordRejectedError)
    assert rejected[0].record.key == {"raw_key": produced.key}
    assert rejected[0].record.after == {"raw_value": produced.value}


def test_an_undelivered_message_fails_the_flush_and_the_next_interval_starts_clean() -> None:
    # Mutant killed: _forget_unflushed not clearing the lane (every later flush fails on the old report).
    failing = {"on": True}
    producers = RecordingProducers(
        prepare=lambda p: setattr(
            p, "delivery_error", lambda m: KafkaError(KafkaError._MSG_TIMED_OUT, "timed out") if failing["on"] else None
        )
    )
    sink = sink_with(producers)
    sink.open()
    sink.write([change(Op.CREATE, 1), change(Op.DELETE, 1)])
    with pytest.raises(SinkDeliveryError, match="records were not delivered"):
        sink.flush()
    failing["on"] = False
    sink.write([change(Op.CREATE, 2)])
    assert sink.flush() == []
    assert not [m for m in producers.made[0].produced if m.value is None]  # the timed-out delete got no tombstone


def test_a_full_producer_buffer_is_waited_out_and_nothing_is_dropped() -> None:
    # Mutant killed: _produce returning on BufferError instead of polling and trying again.
    producers = RecordingProducers(prepare=lambda p: p.fail_next("produce", BufferError(), BufferError()))
    sink = sink_with(producers)
    sink.open()
    assert sink.write([change(Op.CREATE, 1), change(Op.CREATE, 2)]) == []
    assert sink.flush() == []
    (producer,) = producers.made
    assert sorted(key_of(m) for m in producer.produced) == [1, 2]
    assert producer.calls[:4] == ["produce", "produce", "poll", "produce"]  # polled for room, then produced


def test_a_fatal_producer_error_replaces_the_producer() -> None:
    # Mutant killed: _produce raising without _replace_producer (an idempotent producer that hit a
    # fatal error accepts nothing more, so every retry would fail).
    fatal = KafkaException(KafkaError(KafkaError._FATAL, "broken sequence", fatal=True))
    producers = RecordingProducers()
    producers.prepare = lambda p: p.fail_next("produce", fatal, fatal) if not producers.made else None
    sink = sink_with(producers)
    sink.open()
    with pytest.raises(SinkUnavailableError):
        sink.write([change(Op.CREATE, 1)])
    assert len(producers.made) == 2
    sink.write([change(Op.CREATE, 2)])
    assert sink.flush() == []
    assert [key_of(m) for m in producers.made[1].produced] == [2]


def test_a_record_refused_inside_a_transaction_fails_the_flush() -> None:
    # Mutant killed: ProducerLane.on_delivery without its transactional branch (the refused record
    # would go to the dead letters while librdkafka aborts the whole transaction).
    producers = refusing(KafkaError.MSG_SIZE_TOO_LARGE, "c")
    sink = sink_with(producers, delivery="exactly_once")
    sink.open()
    lane = sink.new_transaction_lane("cdcflow-unit-b0", 10.0)
    assert producers.made[0].settings["transactional.id"] == "cdcflow-unit-b0"
    sink.write_into(lane)
    sink.write([change(Op.CREATE, 1)])
    with pytest.raises(RecordRefusedInTransactionError):
        sink.flush()


def test_a_fenced_transactional_producer_fails_the_flush_as_fenced() -> None:
    # Mutant killed: _fence_in not recognising the fatal error (the fence would surface as a raw
    # KafkaException, which the group does not handle as a lost bucket).
    fenced = KafkaException(KafkaError(KafkaError._FENCED, "fenced by a newer producer", fatal=True))
    producers = RecordingProducers(prepare=lambda p: p.fail_next("flush", fenced))
    sink = sink_with(producers, delivery="exactly_once")
    sink.open()
    sink.write_into(sink.new_transaction_lane("cdcflow-unit-b0", 10.0))
    sink.write([change(Op.CREATE, 1)])
    with pytest.raises(TransactionFencedError):
        sink.flush()
