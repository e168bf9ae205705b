"""The spark engine on a real standalone cluster (scripts/spark_cluster.sh: a master and two workers
started from pyspark's own spark-class; the driver and every executor separate JVMs): datagen and
Kafka (SASL_SSL, Spark's Java connector on the executors) into Parquet, the driver SIGKILLed
mid-stream and rerun, every row exactly once; and a job no worker can take fails within a bound,
naming the resources asked for."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import REPO
from tests.integration.kafka_helpers import read_topics, run_cdcflow, topics_with_prefix
from tests.integration.parquet_helpers import read_parquet, read_parquet_while_written
from tests.integration.secure_kafka import PASSWORD, SecureKafka

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow]

CLUSTER_SCRIPT = REPO / "scripts" / "spark_cluster.sh"
CLUSTER_DATA = (
    Path(
        os.environ.get(
            "CDCFLOW_DATA", Path(os.environ.get("CDCFLOW_CACHE", Path.home() / ".cache" / "cdcflow")) / "run"
        )
    )
    / "spark-cluster"
)


@pytest.fixture(scope="session")
def spark_master() -> str:
    def script(action: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(CLUSTER_SCRIPT), action], capture_output=True, text=True, timeout=600, check=False
        )

    if script("status").returncode != 0:
        started = script("start")
        if started.returncode != 0:
            pytest.fail(f"spark_cluster.sh start failed:\n{started.stdout}\n{started.stderr}")
    return script("master-url").stdout.strip()


@pytest.fixture(autouse=True)
def kafka_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_PASSWORD", PASSWORD)


def executor_python(folder: Path) -> Path:
    """The Python the executors are told to run (engine.python): the test's interpreter, leaving a
    mark for each process started through it."""
    marks = folder / "python-marks"
    marks.mkdir()
    wrapper = folder / "executor-python"
    wrapper.write_text(f'#!/bin/sh\ntouch "{marks}/$$"\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def start_driver(*files: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "cdcflow.cli", "run", *map(str, files)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # the driver and its JVM: one group to kill; executors belong to the workers
    )


def rows(folder: Path) -> int:
    table = read_parquet_while_written(folder)
    return 0 if table is None else table.num_rows


def wait_for(condition: object, what: str, process: subprocess.Popen[bytes], timeout_s: float = 420) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        if process.poll() is not None:
            raise AssertionError(f"the driver exited ({process.returncode}) before {what}")
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def app_executor_commands(since: float) -> Iterator[str]:
    """The launch command of every executor the workers started since ``since``."""
    for stderr in CLUSTER_DATA.glob("worker*/app-*/*/stderr"):
        if stderr.stat().st_mtime >= since:
            yield stderr.read_text(errors="replace").split("\n", 1)[0]


@pytest.mark.timeout(1200)  # two drivers, each starting a Spark application on a shared 2-core machine
def test_datagen_and_kafka_to_parquet_on_a_standalone_cluster_through_a_driver_kill(
    tmp_path: Path, spark_master: str, secure_kafka: SecureKafka, topic_prefix: str
) -> None:
    started_at = time.time()
    # Kafka topics to read back, written over SASL_SSL by the worker engine.
    count_kafka, count_datagen = 2000, 900
    to_kafka = tmp_path / "to-kafka.yaml"
    to_kafka.write_text(
        f"name: to-kafka-{topic_prefix}\n"
        f"source: {{type: datagen, count: {count_kafka}, partitions: 2, tables: 2, event_size: 16}}\n"
        f'transforms: [{{type: route, regex: "datagen\\\\.shop\\\\.(.*)", replacement: "{topic_prefix}.$1"}}]\n'
        f"sink: {{type: kafka, bootstrap_servers: '{secure_kafka.sasl_ssl}', kafka: {secure_kafka.client_block()}}}\n"
    )
    assert run_cdcflow("run", str(to_kafka)).returncode == 0
    topics = topics_with_prefix(secure_kafka.sasl_ssl, f"{topic_prefix}.", secure_kafka.librdkafka())

    python = executor_python(tmp_path)
    engine = (
        f"engine: {{type: spark, master: '{spark_master}', python: '{python}', trigger_interval_ms: 1000, "
        "executor_timeout_s: 300}\n"
    )
    datagen_file = tmp_path / "datagen.yaml"
    datagen_file.write_text(
        "name: cluster-datagen\n"
        # 15 events/s (60 s of source time): still generating when the driver is killed on a loaded
        # machine (its first rows come 20-40 s after the start).
        f"source: {{type: datagen, count: {count_datagen}, partitions: 2, rate: 15, event_size: 16}}\n"
        "sink: {type: parquet, path: datagen-out}\n"
        "checkpoint: {type: file, path: datagen-ckpt}\n" + engine
    )
    kafka_file = tmp_path / "kafka.yaml"
    kafka_file.write_text(
        "name: cluster-kafka\n"
        f"source: {{type: kafka, bootstrap_servers: '{secure_kafka.sasl_ssl}', topics: {json.dumps(topics)}, "
        f"kafka: {secure_kafka.client_block()}, max_records_per_batch: 1000}}\n"  # two batches at least
        "sink: {type: parquet, path: kafka-out}\n"
        "checkpoint: {type: file, path: kafka-ckpt}\n" + engine
    )

    # Both pipelines in one driver (one Spark application); killed once each has written rows.
    driver = start_driver(datagen_file, kafka_file)
    phase = time.monotonic()
    try:
        wait_for(
            lambda: rows(tmp_path / "datagen-out") > 0 and rows(tmp_path / "kafka-out") > 0,
            "rows from each pipeline",
            driver,
        )
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    killed_at = (rows(tmp_path / "datagen-out"), rows(tmp_path / "kafka-out"), time.monotonic() - phase)
    assert killed_at[0] < count_datagen and killed_at[1] < count_kafka, f"the kill must land mid-stream: {killed_at}"

    # The rerun picks up from Spark's checkpoints; the kafka source never ends, so it is stopped
    # once everything arrived.
    driver = start_driver(datagen_file, kafka_file)
    phase = time.monotonic()
    try:
        wait_for(
            lambda: rows(tmp_path / "datagen-out") >= count_datagen and rows(tmp_path / "kafka-out") >= count_kafka,
            "every row",
            driver,
        )
        rerun_s = time.monotonic() - phase
        # SIGTERM to the driver's whole process group, as systemd does: its JVM shuts Spark down
        # at the same time; still a clean stop.
        os.killpg(driver.pid, signal.SIGTERM)
        _, stderr = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    assert driver.returncode == 0, stderr.decode()[-3000:]

    datagen_seqs = Counter(read_parquet(tmp_path / "datagen-out").column("seq").to_pylist())
    kafka_seqs = Counter(read_parquet(tmp_path / "kafka-out").column("seq").to_pylist())
    expected_kafka = {
        json.loads(r.value)["payload"]["after" if json.loads(r.value)["payload"]["after"] else "before"]["seq"]
        for r in read_topics(secure_kafka.sasl_ssl, topics, client=secure_kafka.librdkafka())
        if r.value
    }
    print(
        f"\nspark cluster: killed after {killed_at[2]:.0f} s at {killed_at[0]} datagen / {killed_at[1]} kafka rows; "
        f"rerun {rerun_s:.0f} s; {sum(datagen_seqs.values())} + {sum(kafka_seqs.values())} rows"
    )
    assert set(datagen_seqs) == set(range(count_datagen)) and max(datagen_seqs.values()) == 1
    assert set(kafka_seqs) == expected_kafka and len(expected_kafka) == count_kafka
    assert max(kafka_seqs.values()) == 1

    # Executors were JVMs the workers started, running engine.python, with no log4j path of the driver's.
    commands = list(app_executor_commands(started_at))
    assert commands and all("CoarseGrainedExecutorBackend" in c for c in commands)
    assert not any("log4j2.configurationFile" in c for c in commands)
    assert list((tmp_path / "python-marks").iterdir()), "executors did not run engine.python"


def test_a_job_no_worker_can_take_fails_naming_the_resources(tmp_path: Path, spark_master: str) -> None:
    file = tmp_path / "too-big.yaml"
    file.write_text(
        "name: too-big\n"
        "source: {type: datagen, count: 100}\n"
        "sink: {type: parquet, path: out}\n"
        "checkpoint: {type: file, path: ckpt}\n"
        # The workers offer 1 GiB each.
        f"engine: {{type: spark, master: '{spark_master}', executor_timeout_s: 15, "
        "conf: {spark.executor.memory: 4g}}\n"
    )
    result = run_cdcflow("run", str(file), timeout=300)
    assert result.returncode == 1
    assert "no executor joined the Spark application on spark://127.0.0.1:7077 within 15 s" in result.stderr
    assert "spark.executor.memory = 4g" in result.stderr
    assert not (tmp_path / "out").exists()
