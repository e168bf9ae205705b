"""``cdcflow offsets reset`` really replays: from a kafka source (whose consumer group remembers
where it was) on the worker engine, and from a Spark query's own offset log."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.integration.conftest import REPO
from tests.integration.group_helpers import delivered
from tests.integration.kafka_helpers import run_cdcflow, topics_with_prefix

pytestmark = [pytest.mark.kafka]

COUNT = 3000


def upstream(tmp_path: Path, bootstrap: str, prefix: str) -> list[str]:
    file = tmp_path / "up.yaml"
    file.write_text(
        f"name: up-{prefix}\n"
        f"source: {{type: datagen, count: {COUNT}, partitions: 3, tables: 2, event_size: 16}}\n"
        f'transforms: [{{type: route, regex: "datagen\\\\.shop\\\\.(.*)", replacement: "{prefix}.$1"}}]\n'
        # No tombstones upstream: the topics then hold exactly COUNT records, the offsets' sum.
        f"sink: {{type: kafka, bootstrap_servers: '{bootstrap}', tombstones_on_delete: false}}\n"
        "checkpoint: {type: file, path: ck-up}\n"
    )
    assert run_cdcflow("run", str(file)).returncode == 0
    return topics_with_prefix(bootstrap, prefix + ".")


def copy_until(file: Path, bootstrap: str, prefix: str, total: int) -> None:
    """Run the copy pipeline until ``total`` records arrived, then stop it with SIGTERM."""
    import time

    process = subprocess.Popen(
        [sys.executable, "-m", "cdcflow.cli", "run", str(file)], cwd=REPO, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 120
        while sum(delivered(bootstrap, f"copy-{prefix}").values()) < total:
            assert process.poll() is None, process.communicate()[1].decode()[-2000:]
            assert time.monotonic() < deadline, f"fewer than {total} records were copied in 120 s"
            time.sleep(0.5)
        # Running: a reset would be overwritten by the next checkpoint, so it is refused.
        refused = run_cdcflow("offsets", "reset", str(file))
        assert refused.returncode == 1 and "is running" in refused.stderr, refused.stderr
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr.decode()[-2000:]


def test_reset_replays_a_kafka_source_from_the_start(tmp_path: Path, kafka_bootstrap: str, topic_prefix: str) -> None:
    topics = upstream(tmp_path, kafka_bootstrap, topic_prefix)
    copy = tmp_path / "copy.yaml"
    copy.write_text(
        f"name: copy-{topic_prefix}\n"
        f"source: {{type: kafka, bootstrap_servers: '{kafka_bootstrap}', topics: {json.dumps(topics)}}}\n"
        f'transforms: [{{type: route, regex: "{topic_prefix}\\\\.(.*)", replacement: "copy-{topic_prefix}.$1"}}]\n'
        f"sink: {{type: kafka, bootstrap_servers: '{kafka_bootstrap}'}}\n"
        "checkpoint: {type: file, path: ck-copy}\n"
    )
    copy_until(copy, kafka_bootstrap, topic_prefix, COUNT)
    shown = json.loads(run_cdcflow("offsets", "show", str(copy)).stdout)["partitions"]
    assert sum(c["offset"]["next"] for c in shown.values()) == COUNT

    reset = run_cdcflow("offsets", "reset", str(copy))
    assert reset.returncode == 0, reset.stderr
    assert json.loads(run_cdcflow("offsets", "show", str(copy)).stdout)["partitions"] == {}
    # Without a checkpoint the source starts where its consumer group stands: the reset moved it too.
    copy_until(copy, kafka_bootstrap, topic_prefix, 2 * COUNT)
    counts = delivered(kafka_bootstrap, f"copy-{topic_prefix}")
    assert set(counts) == set(range(COUNT)) and set(counts.values()) == {2}


@pytest.mark.spark
def test_spark_offsets_show_and_a_partition_reset_replays_it(
    tmp_path: Path, kafka_bootstrap: str, topic_prefix: str
) -> None:
    file = tmp_path / "spark.yaml"
    file.write_text(
        f"name: spark-{topic_prefix}\n"
        f"source: {{type: datagen, count: {COUNT}, partitions: 3, tables: 2, event_size: 16}}\n"
        f'transforms: [{{type: route, regex: "datagen\\\\.shop\\\\.(.*)", replacement: "{topic_prefix}.$1"}}]\n'
        f"sink: {{type: kafka, bootstrap_servers: '{kafka_bootstrap}'}}\n"
        "checkpoint: {type: file, path: ck-spark}\n"
        "engine: {type: spark, master: 'local[2]', trigger_interval_ms: 500}\n"
    )
    assert run_cdcflow("run", str(file), timeout=600).returncode == 0
    shown = json.loads(run_cdcflow("offsets", "show", str(file)).stdout)["partitions"]
    assert {pid: c["offset"]["seq"] for pid, c in shown.items()} == {f"datagen-{i}": COUNT // 3 for i in range(3)}

    unknown = run_cdcflow("offsets", "reset", str(file), "--partition", "datagen-9")
    assert unknown.returncode == 1 and "no partition datagen-9" in unknown.stderr
    assert run_cdcflow("offsets", "reset", str(file), "--partition", "datagen-0").returncode == 0
    shown = json.loads(run_cdcflow("offsets", "show", str(file)).stdout)["partitions"]
    assert shown["datagen-0"]["offset"]["seq"] == 0 and shown["datagen-1"]["offset"]["seq"] == COUNT // 3

    assert run_cdcflow("run", str(file), timeout=600).returncode == 0
    counts = delivered(kafka_bootstrap, topic_prefix)
    # datagen event ids of partition p are p, p + 3, p + 6...: only datagen-0's arrived twice.
    assert Counter(counts.values()) == Counter({1: 2 * COUNT // 3, 2: COUNT // 3})
    assert all((times == 2) == (event % 3 == 0) for event, times in counts.items())
