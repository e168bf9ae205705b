"""The scylla_cdc source in process against ScyllaDB's CDC tables on the real Cassandra node: the
source contract, the publication rule of generations, the v1 description table, skipping a day of
empty history, the memory ceiling and ``start: latest``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from cdcflow.contract import Partition, PluginContext
from cdcflow.events import ChangeEvent
from cdcflow.metrics import METRICS_REGISTRY
from cdcflow.sources.scylla_cdc.source import ScyllaCdcSource, ScyllaCdcSourceConfig
from cdcflow.testing import check_source_contract
from tests.integration.scylla_helpers import scylla_writer, source_section
from tests.standins.scylla.writer import ScyllaCdcWriter, SimulatedKeyspaces

__all__ = ["scylla_writer"]  # the fixture, for pytest


def open_source(writer: ScyllaCdcWriter, tables: list[str], pipeline: str, **overrides: Any) -> ScyllaCdcSource:
    config = ScyllaCdcSourceConfig.model_validate(source_section(writer, tables, **overrides))
    source = ScyllaCdcSource(config, PluginContext(pipeline, Path("scylla.yaml")))
    source.open()
    return source


def drain(source: ScyllaCdcSource, max_records: int = 10_000) -> list[ChangeEvent]:
    """Read every partition up to its watermark now."""
    events: list[ChangeEvent] = []
    for partition in source.partitions():
        start = source.initial_offset(partition)
        while True:
            end = source.latest_offset(partition, start, max_records)
            if end == start:
                break
            events.extend(e for e in source.read(partition, start, end) if isinstance(e, ChangeEvent))
            start = end
    return events


def counted(pipeline: str, what: str) -> float:
    value = METRICS_REGISTRY.get_sample_value("cdcflow_source_counted_total", {"pipeline": pipeline, "what": what})
    return value or 0.0


def test_the_source_keeps_the_contract_on_the_real_node(keyspace: str, scylla_writer: ScyllaCdcWriter) -> None:
    writer = scylla_writer
    writer.bootstrap(vnodes=2, timestamp_us=writer.coordinator_now_us() - 10_000_000)
    table = f"{keyspace}.t"
    writer.create_table(keyspace, "t", [("id", "int")], [("c", "int")], [("v", "text")], preimage=True)
    for i in range(60):
        writer.insert(table, {"id": i % 5, "c": i, "v": str(i)})
        writer.update(table, {"id": i % 5, "c": i}, {"v": f"again {i}"})
    time.sleep(3.2)  # past the confidence window
    source = open_source(writer, [table], "contract", confidence_window_ms=3000)
    try:
        # Small read cycles cut windows between base writes: offsets with a cursor must resume
        # exactly, and a range read in two must equal it read at once.
        report = check_source_contract(source, max_records=7, cycles=40)
    finally:
        source.close()
    assert report.records == 120
    assert report.ranges > 10


def test_a_generation_is_read_only_once_its_timestamp_is_published(
    keyspace: str, scylla_writer: ScyllaCdcWriter
) -> None:
    writer = scylla_writer
    writer.bootstrap(vnodes=2)
    table = f"{keyspace}.t"
    writer.create_table(keyspace, "t", [("id", "int")], [], [("v", "int")])
    source = open_source(writer, [table], "publication", metadata_refresh_ms=1)  # re-read at each call
    try:
        first = {p.id for p in source.partitions()}
        assert len(first) == 2
        # The streams of the next generation are in cdc_streams_descriptions_v2, its timestamp not
        # yet in cdc_generation_timestamps (a node stopped between the two): not readable.
        pending = writer.join_node(vnodes=2, publish=False)
        assert {p.id for p in source.partitions()} == first
        old = [p for p in source.partitions()]
        assert not any(source.is_finished(p, {"ts": pending + 10_000_000}) for p in old)
        writer.publish(pending)
        deadline = time.monotonic() + 10
        while (now := {p.id for p in source.partitions()}) == first and time.monotonic() < deadline:
            time.sleep(0.01)  # partitions() re-reads the metadata at most every millisecond
        assert first < now and all(f"/g{pending // 1000}/" in p for p in now - first)
        # the old generation ends where the new one starts
        assert all(source.is_finished(p, {"ts": pending - 1}) for p in old)
        assert not any(source.is_finished(p, {"ts": pending - 2}) for p in old)
    finally:
        source.close()


def test_v1_descriptions_are_read_when_there_is_no_v2_table(cassandra_session: Any, keyspace: str) -> None:
    writer = ScyllaCdcWriter(
        cassandra_session,
        SimulatedKeyspaces.prefixed(keyspace),
        shards=3,
        layout="v1",
        seed=5,
    )
    writer.create_metadata_tables()
    try:
        writer.bootstrap(vnodes=3, timestamp_us=writer.coordinator_now_us() - 10_000_000)
        table = f"{keyspace}.t"
        writer.create_table(keyspace, "t", [("id", "int")], [], [("v", "int")])
        for i in range(30):
            writer.insert(table, {"id": i, "v": i})
        time.sleep(2.2)
        source = open_source(writer, [table], "v1", confidence_window_ms=2000)
        try:
            partitions = source.partitions()
            events = drain(source)
        finally:
            source.close()
        # One partition per vnode, found from the vnode index bits of the stream IDs.
        assert sorted(p.id.rsplit("/", 1)[1] for p in partitions) == ["v0", "v1", "v2"]
        assert sorted(e.after["id"] for e in events if e.after) == list(range(30))
    finally:
        writer.drop_keyspaces()


def test_an_upgraded_cluster_without_the_rewritten_row_still_gets_the_generations_only_v2_has(
    cassandra_session: Any, keyspace: str
) -> None:
    # An old cluster (v1 descriptions), upgraded (its generations rewritten into v2), then a node
    # added: its cdc_local has no 'rewritten' row (raft-topology bootstraps skip it; since 2026.2
    # nothing writes cdc_local), and new generations go to v2 only. scylla-cdc-go/-java would stay
    # on v1 and miss them.
    writer = ScyllaCdcWriter(
        cassandra_session,
        SimulatedKeyspaces.prefixed(keyspace),
        shards=2,
        layout="v1",
        ring_delay_s=0.0,
        seed=8,
    )
    writer.create_metadata_tables()
    try:
        old = writer.bootstrap(vnodes=2, timestamp_us=writer.coordinator_now_us() - 10_000_000)
        table = f"{keyspace}.t"
        writer.create_table(keyspace, "t", [("id", "int")], [], [("v", "int")])
        for i in range(10):
            writer.insert(table, {"id": i, "v": i})
        writer.upgrade_to_v2(rewritten_row=False)
        source = open_source(writer, [table], f"upgraded-{keyspace}", confidence_window_ms=1000, metadata_refresh_ms=1)
        try:
            before = {p.id for p in source.partitions()}
            new = writer.join_node(vnodes=2)  # ring_delay 0: operating now, in v2 only
            for i in range(10, 20):
                writer.insert(table, {"id": i, "v": i})
            time.sleep(1.2)  # past the confidence window
            events = drain(source)
            after = {p.id for p in source.partitions()}
        finally:
            source.close()
        assert all(f"/g{old // 1000}/v" in p for p in before)  # the old generation as v1 lists it
        assert any(f"/g{new // 1000}/r" in p for p in after)
        assert sorted(e.after["id"] for e in events if e.after) == list(range(20))
    finally:
        writer.drop_keyspaces()


def test_a_day_of_mostly_empty_history_costs_a_few_queries(keyspace: str, scylla_writer: ScyllaCdcWriter) -> None:
    writer = scylla_writer
    day_us = 86_400_000_000
    now = writer.coordinator_now_us()
    writer.bootstrap(vnodes=8, timestamp_us=now - day_us)
    table = f"{keyspace}.t"
    writer.create_table(keyspace, "t", [("id", "int")], [], [("v", "int")])
    stamps = [now - day_us + hour * 3_600_000_000 + 17 for hour in range(1, 24, 3)]
    for i, stamp in enumerate(stamps):
        writer.insert(table, {"id": i, "v": i}, timestamp_us=stamp)
    pipeline = f"skip-{keyspace}"
    source = open_source(writer, [table], pipeline, start="earliest")
    try:
        events = drain(source)
    finally:
        source.close()
    assert sorted(e.source.ts_us for e in events) == stamps
    windows, probes = counted(pipeline, "window_query"), counted(pipeline, "probe")
    # 30 s windows would take 2,880 queries per partition over a day; here: a window and a probe
    # around each row and at each partition's start.
    print(f"\n{windows:.0f} window queries and {probes:.0f} probes over a day of 8 partitions")
    assert windows + probes <= 8 * 3 + len(stamps) * 3


def test_history_older_than_the_log_ttl_is_skipped(keyspace: str, scylla_writer: ScyllaCdcWriter) -> None:
    writer = scylla_writer
    now = writer.coordinator_now_us()
    writer.bootstrap(vnodes=2, timestamp_us=now - 2 * 86_400_000_000)
    table = f"{keyspace}.t"
    writer.create_table(keyspace, "t", [("id", "int")], [], [("v", "int")])
    writer.insert(table, {"id": 1, "v": 1}, timestamp_us=now - 30 * 3_600_000_000)  # expired on ScyllaDB
    writer.insert(table, {"id": 2, "v": 2}, timestamp_us=now - 600_000_000)
    source = open_source(writer, [table], "ttl", log_ttl_s=86_400)
    try:
        events = drain(source)
    finally:
        source.close()
    # Reading starts at the TTL horizon: the row older than it (still on this Cassandra node, gone
    # on ScyllaDB) is not read.
    assert [e.after["id"] for e in events if e.after] == [2]


def test_a_window_fuller_than_the_ceiling_is_halved_and_nothing_is_lost(
    keyspace: str, scylla_writer: ScyllaCdcWriter
) -> None:
    writer = scylla_writer
    writer.bootstrap(vnodes=1, timestamp_us=writer.coordinator_now_us() - 10_000_000)
    writer.shards = 1
    table = f"{keyspace}.t"
    writer.create_table(keyspace, "t", [("id", "int")], [], [("v", "int")])
    writer.insert_many(table, [{"id": i, "v": i} for i in range(400)])
    time.sleep(2.2)
    pipeline = f"ceiling-{keyspace}"
    source = open_source(writer, [table], pipeline, confidence_window_ms=2000, page_size=10, max_buffered_rows=50)
    try:
        events = drain(source)
    finally:
        source.close()
    assert sorted(e.after["id"] for e in events if e.after) == list(range(400))
    assert counted(pipeline, "window_split") > 0


def test_start_latest_skips_what_was_written_before(keyspace: str, scylla_writer: ScyllaCdcWriter) -> None:
    writer = scylla_writer
    writer.bootstrap(vnodes=2, timestamp_us=writer.coordinator_now_us() - 60_000_000)
    table = f"{keyspace}.t"
    writer.create_table(keyspace, "t", [("id", "int")], [], [("v", "int")])
    for i in range(10):
        writer.insert(table, {"id": i, "v": i}, timestamp_us=writer.coordinator_now_us() - 5_000_000)
    source = open_source(writer, [table], "latest", start="latest", confidence_window_ms=2000)
    try:
        for i in range(10, 20):
            writer.insert(table, {"id": i, "v": i})
        time.sleep(2.5)
        events = drain(source)
        partition: Partition = source.partitions()[0]
        assert source.initial_offset(partition)["ts"] > writer.coordinator_now_us() - 10_000_000
    finally:
        source.close()
    assert sorted(e.after["id"] for e in events if e.after) == list(range(10, 20))


def test_unknown_tables_and_missing_metadata_are_named(keyspace: str, scylla_writer: ScyllaCdcWriter) -> None:
    from cdcflow.sources.scylla_cdc.exceptions import MetadataTablesMissingError, UnknownCdcTableError

    writer = scylla_writer
    writer.bootstrap(vnodes=1)
    with pytest.raises(UnknownCdcTableError, match=f"{keyspace}.missing"):
        open_source(writer, [f"{keyspace}.missing"], "unknown")
    writer.create_table(keyspace, "t", [("id", "int")], [], [("v", "int")])
    with pytest.raises(MetadataTablesMissingError, match="no_such_keyspace"):
        open_source(writer, [f"{keyspace}.t"], "missing", generations_keyspace="no_such_keyspace")
