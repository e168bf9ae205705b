"""TiKV into the existing sinks: Parquet on local Spark, Kafka from a worker process."""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.integration.kafka_helpers import read_topics
from tests.integration.parquet_helpers import read_parquet_while_written
from tests.integration.tikv_helpers import (
    REAL_UPSTREAM,
    Batch,
    Change,
    TiKVCluster,
    apply_batch,
    changes_per_key,
    key_range,
    pipeline_file,
    random_batches,
    start_cluster,
    start_worker,
    stop_worker,
    wait_until,
)


@pytest.fixture(scope="module")
def upstream() -> Iterator[TiKVCluster]:
    yield from start_cluster(REAL_UPSTREAM)


def _workload(upstream: TiKVCluster, name: str) -> tuple[bytes, bytes, list[Batch]]:
    """A key range of two partitions and 3,000 random puts, TTL puts and deletes over 600 keys."""
    start, end = key_range(name)
    upstream.split(start + b"k000300")
    return start, end, random_batches(random.Random(name), start, keys=600, writes=3000, batch_size=100)


def _write_after_the_feed_is_live(upstream: TiKVCluster, batches: list[Batch], arrived: object) -> None:
    """The first batch (one write per key, so even an incremental scan gives it whole), then, once
    it shows in the output (so the feed follows the range live), the rest."""
    apply_batch(upstream.kv, batches[0])
    wait_until(lambda: arrived() > 0, 90, "the first writes in the output")  # type: ignore[operator]
    for batch in batches[1:]:
        apply_batch(upstream.kv, batch)


def _by_key_in_ts_order(rows: list[tuple[int, bytes, Change]]) -> dict[bytes, list[Change]]:
    changes: dict[bytes, list[Change]] = {}
    for _, key, change in sorted(rows, key=lambda row: row[0]):
        changes.setdefault(key, []).append(change)
    return changes


@pytest.mark.spark
def test_tikv_to_parquet_on_spark_holds_every_write_per_key_in_ts_order(upstream: TiKVCluster, tmp_path: Path) -> None:
    start, end, batches = _workload(upstream, "parquet")
    expected = changes_per_key(batches)
    out = tmp_path / "out"
    file = pipeline_file(
        tmp_path,
        upstream,
        None,
        start,
        end,
        upstream.ts_before_writes(),
        sink={"type": "parquet", "path": str(out)},
        engine={"type": "spark", "master": "local[2]", "trigger_interval_ms": 500},
    )

    def rows() -> int:
        table = read_parquet_while_written(out)
        return 0 if table is None else table.num_rows

    worker = start_worker(file)
    try:
        _write_after_the_feed_is_live(upstream, batches, rows)
        wait_until(lambda: rows() >= 3000, 90, "3,000 rows in Parquet")
        if upstream.standin is not None:
            # One subscription per partition (each is one region): only the driver follows the
            # range; Spark's tasks get the rows it held, they do not subscribe again.
            assert upstream.control("feed_subscriptions") == 2
    finally:
        log = stop_worker(worker, file)  # the source never ends: SIGTERM, as an operator stops it
    assert worker.returncode == 0, log[-3000:]

    table = read_parquet_while_written(out)
    assert table is not None
    assert table.schema.field("key").type == pa.binary() and table.schema.field("value").type == pa.binary()
    found = [
        (
            json.loads(row["source_position"])["ts"],
            row["key"],
            (row["op"], row["value"] if row["op"] == "c" else None, row["expire_ts"] is not None),
        )
        for row in table.to_pylist()
    ]
    assert {row["table"] for row in table.select(["table"]).to_pylist()} == {"tikv.ks0.rawkv"}
    assert _by_key_in_ts_order(found) == expected


@pytest.mark.kafka
def test_tikv_to_kafka_delivers_every_write_per_key_in_order(
    upstream: TiKVCluster, tmp_path: Path, kafka_bootstrap: str, topic_prefix: str
) -> None:
    start, end, batches = _workload(upstream, "kafka")
    expected = changes_per_key(batches)
    topic = f"{topic_prefix}.ks0.rawkv"
    file = pipeline_file(
        tmp_path,
        upstream,
        None,
        start,
        end,
        upstream.ts_before_writes(),
        sink={"type": "kafka", "bootstrap_servers": kafka_bootstrap},
        cluster=topic_prefix,
    )
    worker = start_worker(file)
    try:
        _write_after_the_feed_is_live(upstream, batches, lambda: len(_changes(kafka_bootstrap, topic)))
        wait_until(lambda: len(_changes(kafka_bootstrap, topic)) >= 3000, 60, "3,000 records in Kafka")
    finally:
        log = stop_worker(worker, file)
    assert worker.returncode == 0, log[-3000:]

    found = []
    for received in sorted(_changes(kafka_bootstrap, topic), key=lambda r: (r.partition, r.offset)):
        assert received.value is not None
        payload = json.loads(received.value)["payload"]
        position = json.loads(payload["source"]["position"])
        key = bytes.fromhex(position["key"])
        assert json.loads(received.key or b"null")["payload"] == {"key": base64.b64encode(key).decode()}
        after = payload["after"]
        value = base64.b64decode(after["value"]) if payload["op"] == "c" else None
        with_ttl = after is not None and after["expire_ts"] is not None
        found.append((position["ts"], key, (payload["op"], value, with_ttl)))
    # Kafka keeps a key's records in one partition in the order they were sent: that is ts order.
    per_key_in_offset_order: dict[bytes, list[int]] = {}
    for ts, key, _ in found:
        per_key_in_offset_order.setdefault(key, []).append(ts)
    assert all(ts == sorted(ts) for ts in per_key_in_offset_order.values())
    assert _by_key_in_ts_order(found) == expected


def _changes(bootstrap: str, topic: str) -> list[Any]:
    """The topic's change records; the tombstone the kafka sink writes after each delete aside."""
    return [r for r in read_topics(bootstrap, [topic]) if r.value is not None]


@pytest.mark.kafka
@pytest.mark.parametrize("converter", ["json", "avro"])
def test_an_empty_value_reaches_kafka_as_a_put_with_an_empty_value(
    converter: str, upstream: TiKVCluster, tmp_path: Path, kafka_bootstrap: str, topic_prefix: str, request: Any
) -> None:
    # RawKV stores b"" as a value: the record is op c with value b"", not a delete, not a tombstone.
    start, end = key_range("emptykafka")
    sink: dict[str, Any] = {"type": "kafka", "bootstrap_servers": kafka_bootstrap}
    if converter == "avro":
        sink |= {"converter": "avro", "schema_registry_url": request.getfixturevalue("registry_url")}
    file = pipeline_file(
        tmp_path, upstream, None, start, end, upstream.ts_before_writes(), sink=sink, cluster=topic_prefix
    )
    # Written before the feed subscribes: its catch-up scan sends each key's newest version.
    upstream.kv.batch_put([(start + b"e", b""), (start + b"f", b"full")])
    topic = f"{topic_prefix}.ks0.rawkv"
    worker = start_worker(file)
    try:
        wait_until(lambda: len(read_topics(kafka_bootstrap, [topic], timeout_s=5)) >= 2, 60, "two records")
    finally:
        log = stop_worker(worker, file)
    assert worker.returncode == 0, log[-3000:]
    received = read_topics(kafka_bootstrap, [topic])
    assert all(r.value is not None for r in received), "an empty value became a tombstone"
    if converter == "json":
        payloads = [json.loads(r.value)["payload"] for r in received]
        got = [(p["op"], base64.b64decode(p["after"]["key"]), base64.b64decode(p["after"]["value"])) for p in payloads]
    else:
        decode = _avro_value_decoder(request.getfixturevalue("registry_url"))
        envelopes = [decode(r.value) for r in received]
        got = [(e["op"], e["after"]["key"], e["after"]["value"]) for e in envelopes]
    assert sorted(got) == [("c", start + b"e", b""), ("c", start + b"f", b"full")]


def _avro_value_decoder(registry_url: str) -> Any:
    """Confluent's own Avro deserializer over the registry: the record as any consumer reads it."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    deserializer = AvroDeserializer(SchemaRegistryClient({"url": registry_url, "timeout": 10}))
    return lambda data: deserializer(data, SerializationContext("t", MessageField.VALUE))
