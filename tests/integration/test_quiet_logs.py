"""A run's INFO log says what the run does, not what every request or every old table does.

Issue 21, item 7: each schema registry request was an INFO line (httpx's request log, through
confluent-kafka's registry client), and so was each dropped table the commit-log source met in
cdc_raw (the shared node's cdc_raw holds every table dropped since its segments were written).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cdcflow.cli import _configure_logging


class _Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def logging_restored() -> Iterator[None]:
    """_configure_logging replaces the root handlers and sets library levels: put them back."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    libraries = {name: logging.getLogger(name).level for name in ("httpx", "httpx2", "py4j")}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, library_level in libraries.items():
        logging.getLogger(name).setLevel(library_level)


def _register_two_schemas(registry_url: str, prefix: str) -> None:
    from cdcflow.converters import SchemaRegistryClient

    client = SchemaRegistryClient({"url": registry_url})
    for name in ("a", "b"):
        schema = {"type": "record", "name": f"{prefix}_{name}", "fields": [{"name": "id", "type": "int"}]}
        client.register(f"{prefix}-{name}-value", schema)


@pytest.mark.kafka
def test_schema_registry_requests_are_not_info_lines(
    registry_url: str, topic_prefix: str, capsys: pytest.CaptureFixture[str], logging_restored: None
) -> None:
    capsys.readouterr()
    _configure_logging("text", "info")  # as `cdcflow run` sets it up
    _register_two_schemas(registry_url, topic_prefix)
    info_run = capsys.readouterr().err
    assert "HTTP Request" not in info_run, info_run

    _configure_logging("text", "debug")  # still there for whoever asks for them
    _register_two_schemas(registry_url, f"{topic_prefix}_debug")
    assert capsys.readouterr().err.count("HTTP Request") >= 2


def test_dropped_tables_in_cdc_raw_make_one_info_line(
    tmp_path: Path, cassandra_session: Any, cdc_raw_dir: Path, keyspace: str
) -> None:
    from cdcflow.contract import PluginContext
    from cdcflow.sources.cassandra_commitlog import CassandraCommitLogSource, CassandraCommitLogSourceConfig

    session = cassandra_session
    kept = _Kept()
    logger = logging.getLogger(f"test.quiet.{keyspace}")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    logger.addHandler(kept)
    context = PluginContext(f"dropped-{keyspace}", tmp_path / "p.yaml", logger=logger)
    config = CassandraCommitLogSourceConfig.model_validate(
        {
            "type": "cassandra_commitlog",
            "cdc_raw": str(cdc_raw_dir),
            "node": "node1",
            "tables": [f"{keyspace}.marker"],
            "processed_segments": "keep",  # the node's cdc_raw is shared with other tests
            "error_store": {"type": "file", "path": str(tmp_path / "errors.jsonl")},
        }
    )
    # Where cdc_raw ends before this test writes (other tests' segments are not its business).
    before = CassandraCommitLogSource(config, context)
    before.open()
    try:
        [partition] = before.partitions()
        start = before.latest_offset(partition, before.initial_offset(partition), None)
    finally:
        before.close()

    dropped_ids = []
    for name in ("gone_a", "gone_b", "gone_c"):
        session.execute(f"CREATE TABLE {keyspace}.{name} (id int PRIMARY KEY, v text) WITH cdc = true")
        session.execute(f"INSERT INTO {keyspace}.{name} (id, v) VALUES (1, 'x')")
        row = session.execute(
            "SELECT id FROM system_schema.tables WHERE keyspace_name = %s AND table_name = %s", (keyspace, name)
        ).one()
        dropped_ids.append(str(row.id))
        session.execute(f"DROP TABLE {keyspace}.{name}")
    session.execute(f"CREATE TABLE {keyspace}.marker (id uuid PRIMARY KEY) WITH cdc = true")
    session.execute(f"INSERT INTO {keyspace}.marker (id) VALUES ({uuid.uuid4()})")

    source = CassandraCommitLogSource(config, context)  # its schema has none of the dropped tables
    source.open()
    try:
        offset, seen = start, False
        deadline = time.monotonic() + 30
        while not seen and time.monotonic() < deadline:
            end = source.latest_offset(partition, offset, None)
            read = list(source.read(partition, offset, end))
            seen = seen or any(e.source.keyspace == keyspace and e.source.table == "marker" for e in read)
            offset = end
            time.sleep(0.3)
    finally:
        source.close()
    assert seen, "the marker row never arrived"

    notices = [r for r in kept.records if "not in the schema (dropped)" in r.getMessage()]
    assert all(any(table_id in r.getMessage() for r in notices) for table_id in dropped_ids), notices
    assert len([r for r in notices if r.levelno >= logging.INFO]) == 1, [r.getMessage() for r in notices]
