"""The spark engine on local Spark: datagen to Parquet exactly once, through crashes, and the same
source giving the same events under both engines."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from tests.integration.conftest import REPO
from tests.integration.kafka_helpers import datagen, run_cdcflow

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def read_parquet(folder: Path) -> pa.Table:
    dataset = ds.dataset(folder, format="parquet", partitioning="hive")
    return dataset.to_table()


def expected_ops(config: dict[str, Any]) -> dict[int, str]:
    """Global id -> op, as datagen generates them."""
    source = datagen(config)
    per_partition = {p.id: p for p in source.partitions()}
    ops = {}
    for partition in per_partition.values():
        start = source.initial_offset(partition)
        end = source.latest_offset(partition, start, None)
        for event in source.read(partition, start, end):
            row = event.after if event.after is not None else event.before
            ops[int(row["seq"])] = event.op.value
    return ops


def test_the_issue_pipeline_writes_every_event_once_with_types(tmp_path: Path) -> None:
    # The issue's "done when" file, as it is, plus local[2] as the tests' master.
    file = tmp_path / "datagen-to-parquet.yaml"
    file.write_text(
        "name: datagen-to-parquet\n"
        "source: {type: datagen, count: 20000}\n"
        "sink: {type: parquet, path: out}\n"
        "checkpoint: {type: file, path: ckpt}\n"
        "engine: {type: spark, master: 'local[2]'}\n"
    )
    result = run_cdcflow("run", str(file))
    assert result.returncode == 0, result.stderr[-3000:]

    table = read_parquet(tmp_path / "out")
    assert table.num_rows == 20000
    schema = table.schema
    assert schema.field("seq").type == pa.int64()
    assert schema.field("amount").type == pa.float64()
    assert schema.field("name").type == pa.string()
    assert schema.field("op").type == pa.string()
    assert schema.field("source_ts_us").type == pa.int64()
    rows = table.select(["seq", "op"]).to_pylist()
    got = {r["seq"]: r["op"] for r in rows}
    assert len(got) == 20000  # each event once
    assert got == expected_ops({"count": 20000})  # with its op: deletes are rows with op = d
    # The bounded source drained, so every date partition is complete.
    partitions = {p.parent for p in (tmp_path / "out").rglob("*.parquet")}
    assert partitions and all((p / "_SUCCESS").exists() for p in partitions)


def test_driver_killed_mid_stream_leaves_no_loss_and_no_duplicate_rows(tmp_path: Path) -> None:
    count = 40_000
    file = tmp_path / "crash.yaml"
    file.write_text(
        "name: spark-crash\n"
        f"source: {{type: datagen, count: {count}, partitions: 3, rate: 1000, event_size: 64}}\n"
        "sink: {type: parquet, path: out}\n"
        "checkpoint: {type: file, path: ckpt}\n"
        "engine: {type: spark, master: 'local[2]', trigger_interval_ms: 500, max_records_per_read: 1000}\n"
    )
    rng = random.Random(3)
    kills = 0
    for _ in range(4):
        process = subprocess.Popen(
            [sys.executable, "-m", "connector_core.cli", "run", str(file)],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # the driver, its JVM and Spark's Python workers: one group to kill
        )
        # Wait until some batch committed, then crash at a random moment after it.
        deadline = time.monotonic() + 120
        committed_before = len(list((tmp_path / "ckpt" / "commits").glob("[0-9]*")))
        while time.monotonic() < deadline and process.poll() is None:
            if len(list((tmp_path / "ckpt" / "commits").glob("[0-9]*"))) > committed_before:
                break
            time.sleep(0.2)
        time.sleep(rng.uniform(0.0, 1.5))
        if process.poll() is not None:
            break
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        kills += 1
    final = run_cdcflow("run", str(file))
    assert final.returncode == 0, final.stderr[-3000:]

    seqs = Counter(read_parquet(tmp_path / "out").column("seq").to_pylist())
    missing = set(range(count)) - set(seqs)
    duplicated = {s: n for s, n in seqs.items() if n > 1}
    print(f"\nspark crash test: {kills} kills, {count} events, {len(missing)} lost, {len(duplicated)} duplicated")
    assert kills >= 3
    assert not missing
    assert not duplicated


def test_one_source_gives_the_same_events_under_both_engines(tmp_path: Path) -> None:
    def pipeline(engine: str) -> Path:
        file = tmp_path / f"{engine}.yaml"
        file.write_text(
            f"name: both-{engine}\n"
            "source: {type: datagen, count: 3000, partitions: 3, tables: 2}\n"
            f'transforms: [{{type: route, regex: "datagen\\\\.shop\\\\.(.*)", replacement: "both.$1"}}]\n'
            f"sink: {{type: file, path: {engine}.jsonl}}\n"
            f"checkpoint: {{type: file, path: {engine}-ckpt}}\n"
            + ("engine: {type: spark, master: 'local[2]'}\n" if engine == "spark" else "engine: {type: worker}\n")
        )
        return file

    for engine in ("worker", "spark"):
        result = run_cdcflow("run", str(pipeline(engine)))
        assert result.returncode == 0, result.stderr[-3000:]

    def events(engine: str) -> Counter[tuple[Any, ...]]:
        lines = [json.loads(line) for line in (tmp_path / f"{engine}.jsonl").read_text().splitlines()]
        found: Counter[tuple[Any, ...]] = Counter()
        for line in lines:
            value = line["value"]
            if "op" not in value:
                continue  # schema-change events
            # Event times come from the wall clock at the first read, so they differ between runs.
            images = [{k: v for k, v in (value[i] or {}).items() if k != "updated_at_us"} for i in ("before", "after")]
            found[(line["destination"], json.dumps(line["key"]), value["op"], *map(json.dumps, images))] += 1
        return found

    worker, spark = events("worker"), events("spark")
    assert sum(worker.values()) == 3000
    assert spark == worker


@pytest.mark.kafka
@pytest.mark.registry
def test_kafka_avro_to_parquet_on_spark(
    tmp_path: Path, kafka_bootstrap: str, registry_url: str, topic_prefix: str
) -> None:
    count = 4000
    to_kafka = tmp_path / "to-kafka.yaml"
    to_kafka.write_text(
        f"name: to-kafka-{topic_prefix}\n"
        f"source: {{type: datagen, count: {count}, partitions: 2, tables: 2}}\n"
        f'transforms: [{{type: route, regex: "datagen\\\\.shop\\\\.(.*)", replacement: "{topic_prefix}.$1"}}]\n'
        f"sink: {{type: kafka, bootstrap_servers: '{kafka_bootstrap}', converter: avro, "
        f"schema_registry_url: '{registry_url}'}}\n"
    )
    result = run_cdcflow("run", str(to_kafka))
    assert result.returncode == 0, result.stderr[-3000:]

    to_parquet = tmp_path / "to-parquet.yaml"
    to_parquet.write_text(
        "name: kafka-to-parquet\n"
        f"source: {{type: kafka, bootstrap_servers: '{kafka_bootstrap}', "
        f"topics: ['{topic_prefix}.table_0', '{topic_prefix}.table_1'], converter: avro, "
        f"schema_registry_url: '{registry_url}'}}\n"
        "sink: {type: parquet, path: out}\n"
        "checkpoint: {type: file, path: ckpt}\n"
        "engine: {type: spark, master: 'local[2]', trigger_interval_ms: 500}\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "connector_core.cli", "run", str(to_parquet)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 240
        rows = 0
        while time.monotonic() < deadline and process.poll() is None:
            if list((tmp_path / "out").rglob("*.parquet")):
                rows = read_parquet(tmp_path / "out").num_rows
                if rows >= count:
                    break
            time.sleep(1)
        process.send_signal(signal.SIGTERM)  # a Kafka source never ends: stop it as an operator would
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr.decode()[-3000:]

    table = read_parquet(tmp_path / "out")
    seqs = Counter(table.column("seq").to_pylist())
    assert set(seqs) == set(range(count))
    assert all(n == 1 for n in seqs.values())
    assert table.schema.field("seq").type == pa.int64()
    assert table.schema.field("amount").type == pa.float64()
    ops = dict(zip(table.column("seq").to_pylist(), table.column("op").to_pylist(), strict=True))
    assert ops == expected_ops({"count": count, "partitions": 2, "tables": 2})
    assert {t.rsplit(".", 1)[1] for t in table.column("table").to_pylist()} == {"table_0", "table_1"}
