"""The log's TTL, from where ScyllaDB keeps it: each table's ``system_schema.tables.extensions['cdc']``
(``cdc/cdc_extension.hh``; ``system_schema.scylla_tables.cdc`` is always empty since 4.0:
``db/schema_tables.cc`` line 1663), served by the stand-in from its own schema keyspace, with no
``log_ttl_s`` in the source's configuration. With it the snapshot guard fires, generations whose
rows all expired are no longer listed, and a reader that fell behind past it fails loudly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cdcflow.sources.cql.snapshot import SnapshotOutlivedLogError
from cdcflow.sources.scylla_cdc.exceptions import LogExpiredError
from tests.integration.scylla_helpers import scylla_writer
from tests.integration.snapshot_helpers import runner_for, running, written
from tests.integration.test_scylla_snapshot import _pipeline, _with_rows
from tests.integration.test_scylla_source import counted, drain, open_source
from tests.standins.scylla.writer import ScyllaCdcWriter

__all__ = ["scylla_writer"]  # the fixture, for pytest

HOUR_US = 3_600_000_000


def test_history_older_than_the_table_s_cdc_ttl_is_not_read_from_a_fresh_start(
    keyspace: str, scylla_writer: ScyllaCdcWriter
) -> None:
    writer = scylla_writer
    now = writer.coordinator_now_us()
    writer.bootstrap(vnodes=2, timestamp_us=now - 3 * HOUR_US)
    table = f"{keyspace}.t"
    writer.create_table(keyspace, "t", [("id", "int")], [], [("v", "int")], ttl_s=3600)
    writer.insert(table, {"id": 1, "v": 1}, timestamp_us=now - 2 * HOUR_US)  # expired on ScyllaDB
    writer.insert(table, {"id": 2, "v": 2}, timestamp_us=now - 600_000_000)
    source = open_source(writer, [table], f"ttl-{keyspace}", start="earliest")
    try:
        events = drain(source)
    finally:
        source.close()
    # A new reader starts at the TTL horizon: the row older than it (still on this Cassandra
    # node, gone on ScyllaDB) is not read, and nothing fails: nothing was owed yet.
    assert [e.after["id"] for e in events if e.after] == [2]


def test_generations_whose_rows_all_expired_are_not_listed(keyspace: str, scylla_writer: ScyllaCdcWriter) -> None:
    writer = scylla_writer
    now = writer.coordinator_now_us()
    writer.ring_delay_s = 0  # a node's generation operates at once
    first = writer.bootstrap(vnodes=2, timestamp_us=now - 3 * HOUR_US)
    clock = writer.clock
    writer.clock = lambda: (now - 2 * HOUR_US) / 1_000_000
    second = writer.join_node(vnodes=2)  # the first generation ended two hours ago
    writer.clock = clock
    table = f"{keyspace}.t"
    writer.create_table(keyspace, "t", [("id", "int")], [], [("v", "int")], ttl_s=3600)
    source = open_source(writer, [table], f"pruned-{keyspace}")
    try:
        listed = {p.id.split("/")[1] for p in source.partitions()}
    finally:
        source.close()
    assert listed == {f"g{second // 1000}"}, (first, second, listed)


def test_a_reader_behind_the_log_ttl_fails_naming_table_lag_and_ttl(
    keyspace: str, scylla_writer: ScyllaCdcWriter
) -> None:
    writer = scylla_writer
    now = writer.coordinator_now_us()
    writer.bootstrap(vnodes=1, timestamp_us=now - 3 * HOUR_US)
    table = f"{keyspace}.t"
    writer.create_table(keyspace, "t", [("id", "int")], [], [("v", "int")], ttl_s=3600)
    pipeline = f"behind-{keyspace}"
    source = open_source(writer, [table], pipeline)
    try:
        [partition] = source.partitions()
        # a checkpoint two hours old: the rows of the hour after it have expired unread
        checkpoint = {"ts": now - 2 * HOUR_US}
        before = counted(pipeline, "log_expired")
        with pytest.raises(LogExpiredError) as failure:
            source.latest_offset(partition, checkpoint, 1000)
    finally:
        source.close()
    message = str(failure.value)
    assert table in message and "TTL of 3600 s" in message
    assert 7150 <= failure.value.lag_s <= 7300 and failure.value.ttl_s == 3600
    assert counted(pipeline, "log_expired") == before + 1


def test_the_snapshot_hand_off_fails_when_the_table_s_ttl_expired_what_the_stream_needs(
    tmp_path: Path, cassandra_session: Any, keyspace: str, scylla_writer: ScyllaCdcWriter
) -> None:
    """The table's cdc ttl is 1 s, under a 3 s confidence window: by the time the snapshot is
    delivered, changes from within the window before its start have expired. The source's
    configuration says nothing of the TTL: it comes from the table's cdc extension."""
    table, _ = _with_rows(scylla_writer, keyspace, cassandra_session, 20)
    scylla_writer.alter_cdc_options(table, ttl_s=1)
    runner = runner_for(_pipeline(tmp_path, scylla_writer, table, snapshot="initial"))
    with running(runner) as pipeline:
        pipeline.thread.join(timeout=60)
    [failure] = pipeline.failure
    assert isinstance(failure, SnapshotOutlivedLogError), failure
    assert {e.op for e in written(tmp_path / "out" / "changes.jsonl")} == {"r"}
