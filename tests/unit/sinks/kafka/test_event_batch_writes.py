"""The kafka sink's event-batch path (``write_event_batch``: the compiled core's compact batches,
encoded in one call) through its producer seam, with the record path (``write``) as its
reference: the same batch written either way gives the same messages in the same order, and the
same rejections, whatever the delivery reports say."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError

from cdcflow.batches import EventBatch
from cdcflow.contract import PluginContext, Rejected
from cdcflow.errors import RecordRejectedError
from cdcflow.native import native_module
from cdcflow.sinks.kafka.exceptions import TombstoneWithheldError
from cdcflow.sinks.kafka.sink import KafkaSink
from cdcflow.sources.datagen import DatagenConfig, DatagenSource
from tests.unit.sinks.kafka.recording_producer import Produced, RecordingProducers
from tests.unit.sinks.kafka.test_sink_logic import sink_with, what

pytestmark = pytest.mark.skipif(native_module() is None, reason="the compiled core (cdcflow._native) is not built")

# Few keys and many deletes: most messages find their key's tombstone pending.
DATAGEN = {"count": 400, "partitions": 1, "tables": 2, "keys": 6, "event_size": 16, "op_mix": {"c": 1, "u": 1, "d": 1}}


def datagen_batches(batch_size: int, **changes: Any) -> list[EventBatch]:
    config = DatagenConfig.model_validate({"type": "datagen", **DATAGEN, **changes})
    source = DatagenSource(config, PluginContext("unit", Path("unit.yaml")), clock=lambda: 1.7e9)
    (partition,) = source.partitions()
    start = source.initial_offset(partition)
    batches = source.read_event_batches(partition, start, source.latest_offset(partition, start, None), batch_size)
    assert batches is not None
    return list(batches)


Report = Callable[[Produced], KafkaError | None]


def written(
    batches: list[EventBatch], as_batches: bool, report: Report = lambda message: None, **fields: Any
) -> tuple[list[Produced], list[Rejected]]:
    """What the producer was given and what the sink rejected, writing ``batches`` either way."""
    producers = RecordingProducers(prepare=lambda producer: setattr(producer, "delivery_error", report))
    sink: KafkaSink = sink_with(producers, **fields)
    sink.open()
    assert sink.takes_event_batches
    rejected: list[Rejected] = []
    for batch in batches:
        if as_batches:
            from_batch = sink.write_event_batch(batch)
            assert from_batch is not None  # the batch was not declined
            rejected += from_batch
        else:
            rejected += sink.write(batch.records())
    rejected += sink.flush()
    (producer,) = producers.made
    return producer.produced, rejected


def as_compared(messages: list[Produced]) -> list[tuple[str, bytes | None, bytes | None, Any]]:
    return [(m.topic, m.key, m.value, m.headers) for m in messages]


def test_a_batch_gives_the_messages_its_records_give_in_the_same_order() -> None:
    # Mutants killed: write_event_batch taking the message after a delete as the one its tombstone
    # follows (values[index + 2] for values[index + 1]), or a delete as a plain message: deletes
    # without tombstones, or tombstones after the wrong message.
    batches = datagen_batches(batch_size=37)
    from_batches, rejected = written(batches, as_batches=True)
    from_records, _ = written(batches, as_batches=False)
    assert rejected == []
    assert as_compared(from_batches) == as_compared(from_records)
    kinds = [what(m) for m in from_batches]
    assert kinds.count("tombstone") == kinds.count("d") > 20


def test_a_delete_refused_in_the_middle_of_a_batch_is_rejected_once_and_its_tombstone_withheld() -> None:
    # Mutant killed: write_event_batch producing a delete as a plain message (no tombstone pending,
    # its report to the lane's callback): rejected without its tombstone's dead letter, and the
    # other deletes get no tombstone either.
    batches = datagen_batches(batch_size=400)
    deletes = [m for m in written(batches, as_batches=True)[0] if m.value is not None and what(m) == "d"]
    refused = deletes[len(deletes) // 2]  # a delete in the middle of the one batch

    def refuse_once(message: Produced) -> KafkaError | None:
        return KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "refused") if message.value == refused.value else None

    from_batches, rejected = written(batches, as_batches=True, report=refuse_once)
    from_records, rejected_from_records = written(batches, as_batches=False, report=refuse_once)
    assert [type(r.error) for r in rejected] == [RecordRejectedError, TombstoneWithheldError]
    assert rejected[0].record.key == {"raw_key": refused.key}
    assert rejected[0].record.after == {"raw_value": refused.value}
    assert [(type(r.error), r.record.key, r.record.after) for r in rejected] == [
        (type(r.error), r.record.key, r.record.after) for r in rejected_from_records
    ]
    assert as_compared(from_batches) == as_compared(from_records)
    kinds = [what(m) for m in from_batches]
    assert kinds.count("tombstone") == kinds.count("d") - 1


def test_a_full_producer_buffer_in_the_middle_of_a_batch_is_waited_out_in_order() -> None:
    # Mutant killed: the batch loop's plain produce dropping the message on BufferError (continue
    # instead of falling through to _send, which polls and produces it again).
    batches = datagen_batches(batch_size=37, keys=1000)[:2]  # keys seldom repeat: produced at once
    producers = RecordingProducers()
    sink = sink_with(producers)
    sink.open()
    assert sink.write_event_batch(batches[0]) == []
    (producer,) = producers.made
    before = len(producer.calls)
    producer.fail_next("produce", *[BufferError()] * 3)
    assert sink.write_event_batch(batches[1]) == []
    assert sink.flush() == []
    assert as_compared(producer.produced) == as_compared(written(batches, as_batches=False)[0])
    # Refused by the loop, then by _produce twice, polling for room each time.
    assert producer.calls[before : before + 6] == ["produce", "produce", "poll", "produce", "poll", "produce"]
    assert producer.calls.count("produce") == len(producer.produced) + 3
