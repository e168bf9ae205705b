"""``cdcflow doctor`` of the ``scylla_cdc`` source, on the ScyllaDB stand-in writer over the real
Cassandra node (issue 27, item 1), and its data-loss headroom: the log's TTL less the lag (item 2)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cdcflow.metrics import METRICS_REGISTRY
from tests.integration.doctor_helpers import doctor
from tests.integration.scylla_helpers import scylla_writer, source_section
from tests.integration.snapshot_helpers import runner_for, running
from tests.integration.test_scylla_source import open_source
from tests.standins.scylla.writer import ScyllaCdcWriter

__all__ = ["scylla_writer"]  # the fixture, for pytest

TTL_S = 3600


def _pipeline(folder: Path, writer: ScyllaCdcWriter, tables: list[str], engine: str = "", **source: Any) -> Path:
    file = folder / "scylla.yaml"
    file.write_text(
        f"name: doctor-scylla-{folder.name[-12:].replace('_', '-')}\n"
        f"source: {json.dumps(source_section(writer, tables, **source))}\n"
        "sink: {type: file, path: out.jsonl}\n"
        "checkpoint: {type: file, path: ckpt, fsync: false, interval_ms: 200}\n"
        f"engine: {{poll_interval_ms: 100{engine}}}\n"
    )
    return file


@pytest.fixture
def rf3_keyspace(cassandra_session: Any, keyspace: str) -> Iterator[str]:
    """A keyspace at RF 3 on the one real node: QUORUM reads of it cannot be answered."""
    name = f"{keyspace}_rf3"
    cassandra_session.execute(
        f"CREATE KEYSPACE {name} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 3}}"
    )
    yield name
    cassandra_session.execute(f"DROP KEYSPACE IF EXISTS {name}")


def test_doctor_checks_each_tables_cdc_options_and_the_metadata(
    keyspace: str, scylla_writer: ScyllaCdcWriter, tmp_path: Path
) -> None:
    writer = scylla_writer
    writer.bootstrap(vnodes=2)
    columns = ([("id", "int")], [], [("v", "int")])
    writer.create_table(keyspace, "live", *columns, ttl_s=TTL_S)
    writer.create_table(keyspace, "keys_only", *columns, delta="keys")
    writer.create_table(keyspace, "stopped", *columns)
    writer.disable_cdc(f"{keyspace}.stopped")
    tables = [f"{keyspace}.live", f"{keyspace}.keys_only", f"{keyspace}.stopped"]

    code, checks, _ = doctor(_pipeline(tmp_path, writer, tables))

    assert code == 1
    assert checks[f"CDC on for {keyspace}.live"]["status"] == "ok"
    assert checks[f"delta mode of {keyspace}.live"]["status"] == "ok"
    assert checks[f"log TTL of {keyspace}.live"]["status"] == "ok"
    assert checks[f"log TTL of {keyspace}.live"]["detail"].startswith(f"{TTL_S} s")
    off = checks[f"CDC on for {keyspace}.stopped"]
    assert off["status"] == "fail" and "'enabled': false" in off["detail"], off
    assert f"ALTER TABLE {keyspace}.stopped WITH cdc = {{'enabled': true}}" in off["fix"]
    keys_only = checks[f"delta mode of {keyspace}.keys_only"]
    assert keys_only["status"] == "fail" and "'delta': 'keys'" in keys_only["detail"], keys_only
    # system_distributed is at RF 3 on this one node: read at ONE, as ScyllaDB reads it there.
    metadata = next(c for name, c in checks.items() if name.startswith("CDC metadata readable"))
    assert metadata["status"] == "ok" and "1 generation(s)" in metadata["detail"], metadata
    assert "at ONE" in metadata["detail"]
    assert checks[f"{keyspace}.live_scylla_cdc_log readable at QUORUM"]["status"] == "ok"
    assert f"{keyspace}.stopped_scylla_cdc_log readable at QUORUM" not in checks  # no log to read


def test_doctor_fails_log_reads_the_configured_consistency_cannot_answer(
    rf3_keyspace: str, scylla_writer: ScyllaCdcWriter, tmp_path: Path
) -> None:
    writer = scylla_writer
    writer.bootstrap(vnodes=2)
    writer.create_table(rf3_keyspace, "t", [("id", "int")], [], [("v", "int")])
    table = f"{rf3_keyspace}.t"

    code, checks, _ = doctor(_pipeline(tmp_path, writer, [table], consistency="QUORUM"))
    assert code == 1
    quorum = checks[f"{table}_scylla_cdc_log readable at QUORUM"]
    assert quorum["status"] == "fail" and "Unavailable" in quorum["detail"], quorum

    code, checks, _ = doctor(_pipeline(tmp_path, writer, [table], consistency="ONE"))
    assert code == 0, checks
    assert checks[f"{table}_scylla_cdc_log readable at ONE"]["status"] == "ok"


def test_the_headroom_is_the_log_ttl_less_the_partitions_lag(
    keyspace: str, scylla_writer: ScyllaCdcWriter, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    writer = scylla_writer
    writer.bootstrap(vnodes=1)
    writer.create_table(keyspace, "t", [("id", "int")], [], [("v", "int")], ttl_s=TTL_S)
    table = f"{keyspace}.t"

    source = open_source(writer, [table], f"headroom-{keyspace}")
    try:
        [partition] = source.partitions()
        behind = {"ts": writer.coordinator_now_us() - 2000 * 1_000_000}
        headroom = source.data_loss_headroom(partition, behind)
    finally:
        source.close()
    assert headroom is not None and headroom.reason == "log_ttl"
    assert TTL_S - 2000 - 5 < headroom.seconds <= TTL_S - 2000, headroom

    # Through the delivery loop, on the metrics port: a partition just started has about the
    # whole TTL left; below engine.data_loss_warn_s, a WARN names it.
    file = _pipeline(tmp_path, writer, [table], engine=", data_loss_warn_s: 4000")
    runner = runner_for(file)
    labels = {"pipeline": runner.spec.name, "partition": partition.id, "reason": "log_ttl"}
    with caplog.at_level(logging.WARNING, logger="cdcflow.pipeline"), running(runner) as run:
        deadline = time.monotonic() + 30
        while (value := METRICS_REGISTRY.get_sample_value("cdcflow_data_loss_headroom_seconds", labels)) is None:
            assert not run.failure and time.monotonic() < deadline, run.failure or "no headroom gauge within 30 s"
            time.sleep(0.2)
    assert TTL_S - 60 < value <= TTL_S, value
    warned = [r.getMessage() for r in caplog.records if "may lose changes" in r.getMessage()]
    assert warned and partition.id in warned[0] and "log_ttl" in warned[0], warned
    # Stopped: the pipeline's gauges go with it.
    assert METRICS_REGISTRY.get_sample_value("cdcflow_data_loss_headroom_seconds", labels) is None
