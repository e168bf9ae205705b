"""A source read through Spark's own connector (the kafka source's ``spark-sql-kafka``) on a Spark
without that connector: the engine says which connector is missing and how to install it. It tells
by Spark's error condition, never by the error's wording, which differs by connector ("Failed to
find data source: kafka. Please deploy ...", "Failed to find the data source: ... Make sure ...")."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from cdcflow.capabilities import SparkNativeSource
from cdcflow.config import load_pipeline
from cdcflow.contract import Offset, PluginContext
from cdcflow.errors import EngineUnavailableError
from cdcflow.events import Record
from cdcflow.plugins import PluginRegistry
from tests.paths import REPO

pytestmark = [pytest.mark.spark]


class ReadsThroughAConnectorNoSparkHas:
    """A source whose Spark stream is read by a connector that is not installed anywhere: a
    ``SparkNativeSource`` (the engine asks only those for a stream) whose other methods are never
    reached, since the stream fails to start."""

    def spark_native_stream(self, session: Any, max_records_per_read: int) -> Any:
        return session.readStream.format("cdcflow.tests.no_such_connector").load()

    def decode_spark_row(self, row: Mapping[str, Any]) -> Record | None:
        raise AssertionError("no row is read from a stream that never started")

    def spark_native_offsets(self, logged: Mapping[str, Any]) -> dict[str, Offset]:
        raise AssertionError("no offset is logged by a stream that never started")

    def spark_native_log(self, offsets: Mapping[str, Offset]) -> dict[str, Any]:
        raise AssertionError("no offset is logged by a stream that never started")


def check_in_this_process(directory: Path, connector: str) -> None:
    """Starts a Spark without connector jars and asks the engine for the source's stream: raises
    unless the engine names the kafka connector as missing."""
    from cdcflow.spark_engine.runner import _native_stream
    from cdcflow.spark_engine.session import spark_session

    file = directory / "p.yaml"
    file.write_text(
        "name: p\n"
        # max_records_per_batch: the source plans without asking Kafka for its partitions
        "source: {type: kafka, bootstrap_servers: '127.0.0.1:1', topics: [t], max_records_per_batch: 10}\n"
        "sink: {type: file, path: out.jsonl}\n"
        "checkpoint: {type: file, path: ck}\n"
        "engine: {type: spark, master: 'local[1]'}\n"
    )
    registry = PluginRegistry.from_entry_points()
    spec = load_pipeline(file, registry)
    source = (
        registry.create(spec.source, PluginContext(spec.name, spec.file))
        if connector == "kafka"
        else ReadsThroughAConnectorNoSparkHas()
    )
    assert isinstance(source, SparkNativeSource)  # else the engine would not ask it for a stream
    session = spark_session("cdcflow-connector-missing", "local[1]", {}, jars=[])  # no connector jars
    try:
        with pytest.raises(EngineUnavailableError, match="Spark's connector for source type 'kafka' is not installed"):
            _native_stream(session, source, spec)
    finally:
        session.stop()


@pytest.mark.parametrize("connector", ["kafka", "any other"])
def test_a_spark_without_the_sources_connector_is_named_as_such(tmp_path: Path, connector: str) -> None:
    # In a process of its own: Spark's driver JVM keeps the jars of the first session a process
    # started (the parquet and delta tests start theirs in the test process, with the kafka
    # connector), and a later session without them still finds the connector there.
    script = (
        "import sys; from pathlib import Path; "
        "from tests.integration.test_spark_connector_missing import check_in_this_process; "
        "check_in_this_process(Path(sys.argv[1]), sys.argv[2])"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path), connector],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
