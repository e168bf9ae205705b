"""cdcflow.testing's checkers over the built-ins that need a service: the kafka sink against the
real broker (with a record the topic refuses), the avro converter against the real registry."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from cdcflow.contract import PluginContext
from cdcflow.converters import AvroConverter, AvroConverterConfig
from cdcflow.events import ChangeEvent, Op
from cdcflow.plugins import PluginRegistry
from cdcflow.sinks.kafka import KafkaSink, KafkaSinkConfig
from cdcflow.testing import check_converter_contract, check_sink_contract
from cdcflow.transforms import UnwrapConfig, UnwrapTransform
from tests.integration.kafka_helpers import datagen, read_topics

pytestmark = pytest.mark.kafka

CONTEXT = PluginContext("checkers", Path("checkers.yaml"))


def events(count: int) -> list[ChangeEvent]:
    config = {"partitions": 1, "tables": 1, "keys": 10, "op_mix": {"c": 0.5, "u": 0.3, "d": 0.2}, "event_size": 64}
    source = datagen(config)
    return [source.event(0, seq, 1_000_000 * seq) for seq in range(1, count + 1)]


def test_the_kafka_sink_keeps_the_sink_contract_with_a_record_kafka_refuses(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    topic = f"{topic_prefix}.checked"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    small = NewTopic(topic, num_partitions=1, replication_factor=1, config={"max.message.bytes": "4096"})
    admin.create_topics([small])[topic].result(timeout=30)
    written = events(40)
    at = next(i for i, e in enumerate(written) if e.after is not None)
    oversized = {**(written[at].after or {}), "payload": random.Random(7).randbytes(20_000).hex()}  # compresses ~2:1
    written[at] = written[at].with_changes(after=oversized)
    config = KafkaSinkConfig(type="kafka", bootstrap_servers=kafka_bootstrap, topic=topic)
    context = PluginContext("checkers", Path("checkers.yaml"), factory=PluginRegistry.from_entry_points())
    sink = KafkaSink(config, context)
    sink.open()
    try:
        report = check_sink_contract(sink, written)
    finally:
        sink.close()
    assert report.rejected  # the oversized record (and what shared its produce request), for the dead letters
    received = [json.loads(r.value) for r in read_topics(kafka_bootstrap, [topic]) if r.value is not None]
    refused = [r.record for r in report.rejected if isinstance(r.record, ChangeEvent)]
    refused_values = [json.loads(e.after["raw_value"]) for e in refused if e.after and e.after.get("raw_value")]
    landed = {seq_of(value) for value in received} | {seq_of(value) for value in refused_values}
    assert landed == {e.source.position["seq"] for e in written}  # each change in Kafka or in the dead letters


def seq_of(value: dict[str, Any]) -> int:
    return int(json.loads(value["payload"]["source"]["position"])["seq"])


def test_the_avro_converter_keeps_the_converter_contract(registry_url: str, topic_prefix: str) -> None:
    converter = AvroConverter(AvroConverterConfig(type="avro", schema_registry_url=registry_url), CONTEXT)
    envelopes = events(40)
    unwrap = UnwrapTransform(UnwrapConfig(type="unwrap"), CONTEXT)
    rows = [e for e in (unwrap.transform_event(event) for event in envelopes) if e is not None]
    report = check_converter_contract(converter, envelopes, f"{topic_prefix}.envelopes")
    assert report.records == 40 and report.tombstones == 0
    report = check_converter_contract(converter, rows, f"{topic_prefix}.rows")
    assert report.tombstones == sum(e.op is Op.DELETE for e in envelopes) > 0
