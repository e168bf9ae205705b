"""Writes to the real Cassandra node → cassandra_commitlog source → the real Kafka: every write arrives.

The source reads the node's cdc_raw as Cassandra syncs it; the crash test kills the worker with
SIGKILL while writes keep coming and restarts it on the same checkpoint: nothing is lost.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import functools
import json
import random
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.integration.kafka_helpers import (
    Received,
    kill_mid_stream,
    log_end,
    read_topics,
    replays_by_run,
    start_logged,
    topics_with_prefix,
)

pytestmark = [pytest.mark.kafka]


def _pipeline(folder: Path, prefix: str, bootstrap: str, cdc_raw: Path, keyspace: str, linger_ms: int = 20) -> Path:
    file = folder / "commitlog.yaml"
    file.write_text(
        f"name: commitlog-{prefix}\n"
        f"source: {{type: cassandra_commitlog, cdc_raw: '{cdc_raw}', cluster: {prefix}, node: node1,"
        f" tables: [{keyspace}.orders], error_store: {{type: file, path: errors.jsonl}}}}\n"
        f"sink: {{type: kafka, bootstrap_servers: '{bootstrap}', linger_ms: {linger_ms}}}\n"
        "checkpoint: {type: file, path: ckpt, interval_ms: 300}\n"
    )
    return file


def _payloads(bootstrap: str, prefix: str) -> list[tuple[Received, dict[str, Any]]]:
    received = read_topics(bootstrap, topics_with_prefix(bootstrap, prefix))
    return [(r, json.loads(r.value)["payload"]) for r in received if r.value is not None]


def _wait_for(condition: Callable[[], bool], timeout_s: float, what: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if process.poll() is not None:
            pytest.fail(
                f"the worker exited with {process.returncode} before {what}: {process.stderr.read().decode()[-3000:]}"
            )  # type: ignore[union-attr]
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.5)


def test_every_write_reaches_kafka_with_its_values_and_op(
    tmp_path: Path, kafka_bootstrap: str, topic_prefix: str, cassandra_session: Any, cdc_raw_dir: Path, keyspace: str
) -> None:
    session = cassandra_session
    session.execute(f"CREATE TABLE {keyspace}.orders (id int PRIMARY KEY, total int, note text) WITH cdc = true")
    session.execute(f"CREATE TABLE {keyspace}.other (id int PRIMARY KEY) WITH cdc = true")  # not in `tables`
    insert = session.prepare(f"INSERT INTO {keyspace}.orders (id, total, note) VALUES (?, ?, ?)")
    for i in range(200):
        session.execute(insert, (i, i * 10, f"order {i}"))
        session.execute(f"INSERT INTO {keyspace}.other (id) VALUES ({i})")
    session.execute(f"UPDATE {keyspace}.orders SET total = 7 WHERE id = 3")
    session.execute(f"DELETE FROM {keyspace}.orders WHERE id = 4")

    process, log = start_logged(_pipeline(tmp_path, topic_prefix, kafka_bootstrap, cdc_raw_dir, keyspace))
    try:
        _wait_for(lambda: any(" running: " in line for line in log), 120, "the worker to start", process)
        _wait_for(lambda: len(_payloads(kafka_bootstrap, topic_prefix)) >= 202, 90, "202 changes in Kafka", process)
        session.execute(f"ALTER TABLE {keyspace}.orders ADD coupon text")
        session.execute(f"INSERT INTO {keyspace}.orders (id, total, coupon) VALUES (500, 1, 'SAVE')")
        # The ALTER's schema-change event can arrive before the insert after it: wait for the row itself.
        _wait_for(
            lambda: any((p.get("after") or {}).get("id") == 500 for _, p in _payloads(kafka_bootstrap, topic_prefix)),
            90,
            "the insert after the schema change",
            process,
        )
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0

    everything = _payloads(kafka_bootstrap, topic_prefix)
    # Seed 001's <server> topic: the CREATE TABLE and the ALTER, each once, with the table's DDL after it.
    created, altered = [p for r, p in everything if r.topic == topic_prefix]
    assert {(p["keyspace"], p["table"]) for p in (created, altered)} == {(keyspace, "orders")}
    assert all(p["ddl"].startswith(f"CREATE TABLE {keyspace}.orders") for p in (created, altered))
    assert "coupon text" in altered["ddl"]
    payloads = [(r, p) for r, p in everything if r.topic != topic_prefix]
    assert {r.topic for r, _ in payloads} == {f"{topic_prefix}.{keyspace}.orders"}
    inserts = {p["after"]["id"]: p["after"] for _, p in payloads if p["op"] == "c"}
    assert inserts == {
        **{i: {"id": i, "total": i * 10, "note": f"order {i}"} for i in range(200)},
        500: {"id": 500, "total": 1, "coupon": "SAVE"},
    }
    [update] = [p for _, p in payloads if p["op"] == "u"]
    assert update["after"] == {"id": 3, "total": 7}  # delta: only what the UPDATE carried
    [delete] = [(r, p) for r, p in payloads if p["op"] == "d"]
    assert delete[1]["after"] is None and json.loads(delete[0].key)["payload"] == {"id": 4}  # type: ignore[arg-type]
    assert delete[0].headers["cdc.deletion"] == b"partition"  # no clustering columns: the row is the partition
    source = update["source"]
    assert (source["connector"], source["name"], source["keyspace"], source["partition"]) == (
        "cassandra",
        topic_prefix,
        keyspace,
        "node1",
    )
    assert not (tmp_path / "errors.jsonl").exists()


def test_sigkill_mid_stream_loses_nothing(
    tmp_path: Path, kafka_bootstrap: str, topic_prefix: str, cassandra_session: Any, cdc_raw_dir: Path, keyspace: str
) -> None:
    session = cassandra_session
    session.execute(f"CREATE TABLE {keyspace}.orders (id int PRIMARY KEY, total int, note text) WITH cdc = true")
    insert = session.prepare(f"INSERT INTO {keyspace}.orders (id, total, note) VALUES (?, ?, ?)")
    count = 3000
    written = threading.Event()

    def write() -> None:
        for i in range(count):
            session.execute(insert, (i, i, "x" * 200))  # ~1 KiB per mutation: several segments
            if i % 100 == 0:
                time.sleep(1.2)  # spread the writes over the kills below (a 1 MiB segment every ~10 s)
        written.set()

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    # Records wait in the producer until the checkpoint's flush sends them (linger 1 s): a checkpoint
    # committed before its records were delivered would lose them at the next kill.
    file = _pipeline(tmp_path, topic_prefix, kafka_bootstrap, cdc_raw_dir, keyspace, linger_ms=1000)
    rng = random.Random(4)
    in_kafka = functools.partial(log_end, kafka_bootstrap, topic_prefix)
    runs = []
    for _ in range(4):  # each mid-stream, after a checkpoint of its own
        runs.append(kill_mid_stream(file, tmp_path / "ckpt", in_kafka, rng.uniform(0, 1)))
        assert not written.is_set(), "the writes ended before this kill: it did not land mid-stream"
    writer.join(timeout=120)
    assert written.is_set()

    def ids() -> set[int]:
        return {p["after"]["id"] for _, p in _payloads(kafka_bootstrap, topic_prefix) if p.get("after")}

    process, log = start_logged(file)
    try:
        # The last run must be up (its signal handlers in place) and Kafka must hold every write.
        _wait_for(lambda: any(" running: " in line for line in log), 120, "the last run to start", process)
        _wait_for(lambda: len(ids()) >= count, 120, f"all {count} writes in Kafka", process)
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
    assert ids() == set(range(count))
    copies = [(p["after"]["id"], p["ts_ms"]) for _, p in _payloads(kafka_bootstrap, topic_prefix) if p.get("after")]
    assert not replays_by_run(copies, runs, 300)  # the pipeline's checkpoint interval_ms


def test_full_row_images_after_the_bucket_closes_and_late_changes_through_the_store(
    tmp_path: Path, kafka_bootstrap: str, topic_prefix: str, cassandra_session: Any, cdc_raw_dir: Path, keyspace: str
) -> None:
    session = cassandra_session
    session.execute(f"CREATE TABLE {keyspace}.orders (id int PRIMARY KEY, total int, note text) WITH cdc = true")
    file = _pipeline(tmp_path, topic_prefix, kafka_bootstrap, cdc_raw_dir, keyspace)
    # Three open buckets of one second: a change is read back once it is two to three seconds old.
    file.write_text(
        file.read_text().replace(
            "error_store:", "row_image: full, window_count: 3, window_interval_ms: 1000, error_store:"
        )
    )
    insert = session.prepare(f"INSERT INTO {keyspace}.orders (id, total, note) VALUES (?, ?, ?)")
    for i in range(50):
        session.execute(insert, (i, i * 10, f"order {i}"))
    session.execute(f"UPDATE {keyspace}.orders SET total = 7 WHERE id = 3")
    session.execute(f"DELETE FROM {keyspace}.orders WHERE id = 4")

    def last_by_id() -> dict[int, dict[str, Any]]:
        latest: dict[int, dict[str, Any]] = {}
        for record, payload in _payloads(kafka_bootstrap, topic_prefix):
            if record.topic != topic_prefix and record.key is not None:
                latest[json.loads(record.key)["payload"]["id"]] = payload
        return latest

    process, log = start_logged(file)
    try:
        _wait_for(lambda: any(" running: " in line for line in log), 120, "the worker to start", process)
        _wait_for(lambda: set(last_by_id()) >= set(range(50)), 90, "50 rows read back", process)
        # Written with a timestamp an hour old: its bucket closed long ago, so it goes through the
        # out-of-sequence store and is read back at QUORUM.
        late_us = int((time.time() - 3600) * 1_000_000)
        session.execute(
            f"INSERT INTO {keyspace}.orders (id, total, note) VALUES (99, 1, 'late') USING TIMESTAMP {late_us}"
        )
        _wait_for(lambda: 99 in last_by_id(), 90, "the late row", process)
        assert any("arrived after its time bucket closed" in line for line in log)
        stored = "SELECT count(*) FROM cdcflow.commitlog_out_of_sequence WHERE node = 'node1'"
        _wait_for(
            lambda: session.execute(stored).one()[0] == 0, 60, "the store to be emptied after the checkpoint", process
        )
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0

    latest = last_by_id()
    assert latest[3]["op"] in ("c", "u") and latest[3]["after"] == {"id": 3, "total": 7, "note": "order 3"}  # full row
    assert latest[4]["op"] == "d" and latest[4]["after"] is None
    assert all(latest[i]["after"] == {"id": i, "total": i * 10, "note": f"order {i}"} for i in range(5, 50))
    assert latest[99]["after"] == {"id": 99, "total": 1, "note": "late"}


def test_counter_tables_are_skipped_and_counted_in_process(
    tmp_path: Path, cassandra_session: Any, cdc_raw_dir: Path, keyspace: str
) -> None:
    from cdcflow.contract import PluginContext
    from cdcflow.metrics import source_counter
    from cdcflow.sources.cassandra_commitlog import CassandraCommitLogSource, CassandraCommitLogSourceConfig

    session = cassandra_session
    session.execute(f"CREATE TABLE {keyspace}.hits (page text PRIMARY KEY, n counter) WITH cdc = true")
    session.execute(f"CREATE TABLE {keyspace}.pages (page text PRIMARY KEY, title text) WITH cdc = true")
    for _ in range(5):
        session.execute(f"UPDATE {keyspace}.hits SET n = n + 1 WHERE page = 'home'")
    session.execute(f"INSERT INTO {keyspace}.pages (page, title) VALUES ('home', 'Home')")

    context = PluginContext(f"counters-{keyspace}", tmp_path / "p.yaml")
    config = CassandraCommitLogSourceConfig.model_validate(
        {
            "type": "cassandra_commitlog",
            "cdc_raw": str(cdc_raw_dir),
            "node": "node1",
            "tables": [f"{keyspace}.hits", f"{keyspace}.pages"],
            "processed_segments": "keep",
            "error_store": {"type": "file", "path": str(tmp_path / "errors.jsonl")},
        }
    )
    source = CassandraCommitLogSource(config, context)
    skipped = source_counter(context.pipeline, "skipped_counter_table_update")
    source.open()
    try:
        [partition] = source.partitions()
        events: list[Any] = []
        offset = source.initial_offset(partition)
        deadline = time.monotonic() + 30
        while not any(e.source.table == "pages" for e in events) and time.monotonic() < deadline:
            end = source.latest_offset(partition, offset, None)
            events += [e for e in source.read(partition, offset, end) if e.source.keyspace == keyspace]
            offset = end
            time.sleep(0.3)
    finally:
        source.close()
    assert [(e.source.table, e.after) for e in events if hasattr(e, "after")] == [
        ("pages", {"page": "home", "title": "Home"})
    ]
    assert skipped._value.get() >= 5  # one per counter update


def test_compact_batches_are_what_read_gives_for_every_range(
    tmp_path: Path, cassandra_session: Any, cdc_raw_dir: Path, keyspace: str
) -> None:
    """The source's compact batches (read_event_batches) against its own read, range by range, over
    segments the node wrote: plain writes travel compact, and a range holding what compact rows do
    not carry (a range deletion, a collection) is left to read."""
    from cdcflow.contract import PluginContext
    from cdcflow.sources.cassandra_commitlog import CassandraCommitLogSource, CassandraCommitLogSourceConfig

    session = cassandra_session
    session.execute(
        f"CREATE TABLE {keyspace}.orders (customer uuid, id int, total decimal, note text, paid boolean,"
        " at timestamp, tags set<text>, PRIMARY KEY (customer, id)) WITH cdc = true"
    )
    context = PluginContext(f"compact-{keyspace}", tmp_path / "p.yaml")
    config = CassandraCommitLogSourceConfig.model_validate(
        {
            "type": "cassandra_commitlog",
            "cdc_raw": str(cdc_raw_dir),
            "node": "node1",
            "tables": [f"{keyspace}.orders"],
            "processed_segments": "keep",
            "error_store": {"type": "file", "path": str(tmp_path / "errors.jsonl")},
        }
    )
    source = CassandraCommitLogSource(config, context)
    source.open()
    compact_ranges, ranges_by_record, events = 0, 0, []
    try:
        [partition] = source.partitions()
        # From what cdc_raw holds now (other tests' segments are not this test's business).
        offset = source.latest_offset(partition, source.initial_offset(partition), None)
        insert = session.prepare(
            f"INSERT INTO {keyspace}.orders (customer, id, total, note, paid, at) VALUES (?, ?, ?, ?, ?, ?) USING TTL ?"
        )
        customer = uuid.UUID("2bb71c68-2097-798c-8cd3-e418ed4142ba")
        for i in range(300):
            ttl = 86_400 if i % 7 == 0 else 0
            when = datetime.datetime(2026, 11, 24, tzinfo=datetime.UTC)
            session.execute(insert, (customer, i, decimal.Decimal(f"{i}.{i:02d}"), f"order {i}", i % 2 == 0, when, ttl))
        session.execute(f"UPDATE {keyspace}.orders SET note = null WHERE customer = {customer} AND id = 3")
        session.execute(f"DELETE FROM {keyspace}.orders WHERE customer = {customer} AND id = 4")
        session.execute(f"DELETE FROM {keyspace}.orders WHERE customer = {customer} AND id > 250 AND id < 260")
        session.execute(f"UPDATE {keyspace}.orders SET tags = tags + {{'gift'}} WHERE customer = {customer} AND id = 5")
        session.execute(f"INSERT INTO {keyspace}.orders (customer, id, note) VALUES ({customer}, 1000, 'last')")
        deadline = time.monotonic() + 120
        while not any(_written_id(e) == 1000 for e in events) and time.monotonic() < deadline:
            end = source.latest_offset(partition, offset, 100)  # ranges of about 100 entries
            read = [e for e in source.read(partition, offset, end)]
            batches = source.read_event_batches(partition, offset, end, 16)
            if batches is None:
                ranges_by_record += 1
            else:
                compact = [event for batch in batches for event in batch.records()]
                assert [_comparable(e) for e in compact] == [_comparable(e) for e in read]
                compact_ranges += bool(compact)
            events += read
            offset = end
            if not read:
                time.sleep(0.3)
    finally:
        source.close()
    assert any(_written_id(e) == 1000 for e in events), "every write read"
    assert compact_ranges > 0, "plain writes travel compact"
    assert ranges_by_record > 0, "the range deletion and the collection update are left to read"


def test_a_dropped_tables_mutations_are_skipped_compact_once_read_found_it_dropped(
    tmp_path: Path, cassandra_session: Any, cdc_raw_dir: Path, keyspace: str
) -> None:
    """cdc_raw keeps a dropped table's mutations: read skips them (and counts them) once a schema
    refresh shows the table gone; compact batches then skip them too, instead of leaving every
    range that holds one to read. Each range is one entry: other tests' schema changes on the
    shared node (read's to give) fall outside them."""
    from cdcflow.contract import PluginContext
    from cdcflow.metrics import source_counter
    from cdcflow.sources.cassandra_commitlog import CassandraCommitLogSource, CassandraCommitLogSourceConfig

    session = cassandra_session

    def config(*tables: str) -> CassandraCommitLogSourceConfig:
        return CassandraCommitLogSourceConfig.model_validate(
            {
                "type": "cassandra_commitlog",
                "cdc_raw": str(cdc_raw_dir),
                "node": "node1",
                "tables": [f"{keyspace}.{table}" for table in tables],
                "processed_segments": "keep",
                "error_store": {"type": "file", "path": str(tmp_path / "errors.jsonl")},
            }
        )

    session.execute(f"CREATE TABLE {keyspace}.kept (id int PRIMARY KEY, note text) WITH cdc = true")
    session.execute(f"CREATE TABLE {keyspace}.gone (id int PRIMARY KEY, note text) WITH cdc = true")
    before = CassandraCommitLogSource(config("kept", "gone"), PluginContext(f"before-{keyspace}", tmp_path / "p.yaml"))
    before.open()
    try:
        [partition] = before.partitions()
        start = before.latest_offset(partition, before.initial_offset(partition), None)
        for i in range(5):
            session.execute(f"INSERT INTO {keyspace}.gone (id, note) VALUES ({i}, 'gone {i}')")
            session.execute(f"INSERT INTO {keyspace}.kept (id, note) VALUES ({i}, 'kept {i}')")
        written: list[Any] = []
        deadline = time.monotonic() + 120
        while len(written) < 10 and time.monotonic() < deadline:
            time.sleep(0.5)
            end = before.latest_offset(partition, start, None)
            written = [e for e in before.read(partition, start, end) if getattr(e, "after", None)]
            written = [e for e in written if e.source.keyspace == keyspace]
    finally:
        before.close()
    assert sorted((e.source.table, _written_id(e)) for e in written) == sorted(
        (table, i) for table in ("gone", "kept") for i in range(5)
    )
    session.execute(f"DROP TABLE {keyspace}.gone")

    context = PluginContext(f"dropped-{keyspace}", tmp_path / "p.yaml")
    source = CassandraCommitLogSource(config("kept"), context)  # its schema has no gone table
    skipped = source_counter(context.pipeline, "skipped_dropped_table_mutation")
    source.open()
    try:
        for event in written:
            at = event.source.position
            entry = ({"segment": at["segment"], "position": at["position"] - 1}, {**at})
            entry[1].pop("index")
            if event.source.table == "kept":
                [read] = source.read(partition, *entry)
                batches = source.read_event_batches(partition, *entry, 16)
                assert batches is not None
                assert [_comparable(e) for batch in batches for e in batch.records()] == [_comparable(read)]
                continue
            counted = skipped._value.get()
            if counted == 0:
                # Not known dropped yet: read decides (a schema refresh could find the table).
                assert source.read_event_batches(partition, *entry, 16) is None
            assert list(source.read(partition, *entry)) == []
            assert skipped._value.get() == counted + 1, "read skips a dropped table's mutation, and counts it"
            batches = source.read_event_batches(partition, *entry, 16)
            assert batches is not None and not any(len(batch) for batch in batches), "so do compact batches"
            assert skipped._value.get() == counted + 2
    finally:
        source.close()


def _written_id(event: Any) -> Any:
    return (getattr(event, "after", None) or {}).get("id")


def _comparable(event: Any) -> str:
    # Every field with its type (repr), the position's keys sorted: it travels as canonical text;
    # ts_ms is the time each was read, not data.
    source = dataclasses.replace(event.source, position=dict(sorted(event.source.position.items())))
    return repr(event.with_changes(source=source, ts_ms=0))
