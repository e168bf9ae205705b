"""ScyllaDB's CDC, written from the seed into the real Cassandra node, through ``cdcflow run`` into
the real Kafka: every base write arrives with its op, content and stream, in per-stream order,
across generation switches, tablet stream-set changes, SIGKILLs and a client clock 5 s behind."""

from __future__ import annotations

import functools
import json
import random
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.kafka_helpers import kill_mid_stream, log_end, replays_by_run, start_logged
from tests.integration.scylla_helpers import (
    Expectations,
    arrived,
    orders_table,
    pipeline,
    scylla_writer,
    source_section,
    wait_for,
)
from tests.standins.scylla.writer import Add, DeleteRange, ScyllaCdcWriter

__all__ = ["scylla_writer"]  # the fixture, for pytest

pytestmark = [pytest.mark.kafka]


def stop(process: Any) -> None:
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 0


def test_steady_stream_over_many_streams_and_two_tables(
    tmp_path: Path,
    kafka_bootstrap: str,
    topic_prefix: str,
    cassandra_session: Any,
    keyspace: str,
    scylla_writer: ScyllaCdcWriter,
) -> None:
    writer = scylla_writer
    writer.bootstrap(vnodes=16)  # 16 vnodes x 4 shards: 64 streams per table, 16 partitions
    orders, events_table = f"{keyspace}.orders", f"{keyspace}.events"
    writer.create_table(keyspace, "orders", [("id", "int")], [], [("total", "int"), ("note", "text")])
    writer.create_table(
        keyspace,
        "events",
        [("device", "text"), ("day", "int")],
        [("seq", "int")],
        [("reading", "double"), ("tags", "set<text>")],
        preimage=True,
        postimage=True,
    )
    expected = Expectations(writer)
    rng = random.Random(3)
    # Two worker processes split the stream groups of both tables.
    file = pipeline(
        tmp_path, topic_prefix, kafka_bootstrap, source_section(writer, [orders, events_table]), ", workers: 2"
    )
    process, log = start_logged(file)
    try:
        wait_for(lambda: sum(" running: " in line for line in log) >= 2, 60, "both workers to start", process)
        for i in range(300):
            expected.write(orders, "c", {"id": i}, {"total": i, "note": f"order {i}"})
            if i % 3 == 0:
                expected.write(orders, "u", {"id": rng.randrange(i + 1)}, {"total": -i, "note": None})
            if i % 7 == 0:
                expected.write(orders, "d", {"id": rng.randrange(i + 1)})
        for i in range(100):
            key = {"device": f"d{i % 10}", "day": i % 3, "seq": i}
            expected.write(events_table, "c", key, {"reading": i / 4})
        # The schema of the base table changes under the running worker; the log table with it.
        writer.add_column(orders, "coupon", "text")
        for i in range(300, 320):
            expected.write(orders, "c", {"id": i}, {"total": i, "coupon": f"SAVE{i}"})
        writer.update(events_table, {"device": "d1", "day": 1, "seq": 1}, {"tags": Add({"hot"})})
        writer.write(events_table, [DeleteRange({"device": "d2", "day": 2}, start=(10, True), end=(50, False))])

        total = len(expected.written) + 2
        wait_for(lambda: len(arrived(kafka_bootstrap, topic_prefix)) >= total, 60, f"{total} events", process)
    finally:
        stop(process)

    events = arrived(kafka_bootstrap, topic_prefix)
    expected.check(events, exactly_once=True)
    assert len(events) == total
    assert len({e.stream for e in events}) > 32  # spread over many streams
    # The set update got the pre-image of its row as before (preimage: true shows the columns the
    # write modified) and the post-image as after (the whole row).
    [tagged] = [e for e in events if e.table == "events" and e.op == "u"]
    assert tagged.before == {"device": "d1", "day": 1, "seq": 1, "tags": None}
    assert tagged.after == {"device": "d1", "day": 1, "seq": 1, "reading": 0.25, "tags": ["hot"]}
    [ranged] = [e for e in events if e.table == "events" and e.op == "d"]
    assert ranged.key == {"device": "d2", "day": 2} and ranged.headers["cdc.deletion"] == b"range"
    # Murmur3 tokens computed for the streams are the node's own token() values.
    stored = list(cassandra_session.execute(f"SELECT id, token(id) FROM {orders}"))
    assert len(stored) > 250
    assert all(writer.token_of(orders, {"id": i}) == token for i, token in stored)
    stored = list(cassandra_session.execute(f"SELECT DISTINCT device, day, token(device, day) FROM {events_table}"))
    assert len(stored) == 30
    assert all(writer.token_of(events_table, {"device": d, "day": day}) == token for d, day, token in stored)


def test_generation_switch_with_writes_inside_the_leeway(
    tmp_path: Path, kafka_bootstrap: str, topic_prefix: str, keyspace: str, scylla_writer: ScyllaCdcWriter
) -> None:
    writer = scylla_writer
    table = orders_table(writer, keyspace)
    expected = Expectations(writer)
    file = pipeline(tmp_path, topic_prefix, kafka_bootstrap, source_section(writer, [table]))
    process, log = start_logged(file)
    try:
        wait_for(lambda: any(" running: " in line for line in log), 60, "the worker to start", process)
        for i in range(50):
            expected.write(table, "c", {"id": i}, {"total": i})
        switch = writer.join_node(vnodes=4)  # operates 2 x ring_delay from now
        leeway = writer.metadata.generation_leeway_us
        i = 50
        early_written = False
        while writer.coordinator_now_us() < switch + leeway // 2:
            if not early_written and writer.coordinator_now_us() >= switch - leeway // 2:
                # Before the switch: a write stamped just after it goes to the new generation.
                expected.write(table, "c", {"id": 1000}, {"total": 1}, timestamp_us=switch + leeway // 4)
                early_written = True
            expected.write(table, "c", {"id": i}, {"total": i})
            i += 1
            time.sleep(0.01)
        # After the switch: a write stamped just before it still goes to the old generation.
        expected.write(table, "c", {"id": 1001}, {"total": 2}, timestamp_us=switch - leeway // 4)
        for j in range(i, i + 50):
            expected.write(table, "c", {"id": j}, {"total": j})
        total = len(expected.written)
        wait_for(lambda: len(arrived(kafka_bootstrap, topic_prefix)) >= total, 60, f"{total} events", process)
    finally:
        stop(process)
    events = arrived(kafka_bootstrap, topic_prefix)
    expected.check(events, exactly_once=True)
    old_partitions = {e.source_partition for e in events if e.ts_us < switch}
    new_partitions = {e.source_partition for e in events if e.ts_us >= switch}
    assert old_partitions and new_partitions and not old_partitions & new_partitions
    assert all(f"/g{switch // 1000}/" in p for p in new_partitions)
    late = next(e for e in events if e.key == {"id": 1001})
    early = next(e for e in events if e.key == {"id": 1000})
    assert f"/g{switch // 1000}/" not in late.source_partition
    assert f"/g{switch // 1000}/" in early.source_partition


def test_tablet_stream_sets_that_split_and_merge(
    tmp_path: Path,
    kafka_bootstrap: str,
    topic_prefix: str,
    cassandra_session: Any,
    keyspace: str,
    scylla_writer: ScyllaCdcWriter,
) -> None:
    writer = scylla_writer
    table = f"{keyspace}.readings"
    writer.create_table(keyspace, "readings", [("id", "int")], [], [("value", "int")], tablets=2)
    expected = Expectations(writer)
    file = pipeline(tmp_path, topic_prefix, kafka_bootstrap, source_section(writer, [table]))
    process, log = start_logged(file)
    changes = []
    try:
        wait_for(lambda: any(" running: " in line for line in log), 60, "the worker to start", process)
        i = 0
        for tablets in (8, 1):
            changes.append(writer.change_tablets(table, tablets, delay_s=1.0))
            # Writes on both sides of the change: each is logged in exactly one stream, that of
            # the newest stream set at or before its timestamp (cdc/metadata.cc).
            while writer.coordinator_now_us() < changes[-1] + 1_500_000:
                expected.write(table, "c", {"id": i}, {"value": i})
                i += 1
                time.sleep(0.01)
        total = len(expected.written)
        wait_for(lambda: len(arrived(kafka_bootstrap, topic_prefix)) >= total, 60, f"{total} events", process)
        time.sleep(1)  # a duplicate would show up within a poll interval
    finally:
        stop(process)
    events = arrived(kafka_bootstrap, topic_prefix)
    expected.check(events, exactly_once=True)
    logged = cassandra_session.execute(f"SELECT COUNT(*) FROM {table}_scylla_cdc_log")
    assert next(iter(logged))[0] == total, "every write is logged once, in one stream"
    opened = {e.source_partition.split("/")[1] for e in events}
    assert {f"t{c // 1000}" for c in changes} <= opened


def test_sigkill_mid_window_and_mid_switch_loses_nothing(
    tmp_path: Path, kafka_bootstrap: str, topic_prefix: str, keyspace: str, scylla_writer: ScyllaCdcWriter
) -> None:
    writer = scylla_writer
    table = orders_table(writer, keyspace)
    expected = Expectations(writer)
    # Read cycles of at most 40 rows: windows are cut between base writes, so kills land mid-window.
    file = pipeline(
        tmp_path,
        topic_prefix,
        kafka_bootstrap,
        source_section(writer, [table], confidence_window_ms=2000),
        engine=", max_records_per_read: 40",
        # Records wait in the producer until the checkpoint's flush sends them: a checkpoint
        # committed before its records were delivered would lose them at the next kill.
        linger_ms=1000,
    )
    done = threading.Event()
    switches: list[int] = []

    def write() -> None:
        for i in range(1500):
            expected.write(table, "c", {"id": i}, {"total": i})
            if i == 500:
                switches.append(writer.join_node(vnodes=4))
            time.sleep(0.004)
        done.set()

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    rng = random.Random(9)
    in_kafka = functools.partial(log_end, kafka_bootstrap, topic_prefix)
    runs = []
    while not done.is_set() or len(runs) < 4:  # each kill mid-stream, after a checkpoint of its own
        runs.append(kill_mid_stream(file, tmp_path / "ckpt", in_kafka, rng.uniform(0, 1)))
    kills = len(runs)
    thread.join()
    process, log = start_logged(file)
    try:
        # The last run must be up (its signal handlers in place) and Kafka must hold every write.
        wait_for(lambda: any(" running: " in line for line in log), 60, "the last run to start", process)
        total = len(expected.written)
        wait_for(lambda: not expected.missing(arrived(kafka_bootstrap, topic_prefix)), 90, f"{total} writes", process)
    finally:
        stop(process)
    events = arrived(kafka_bootstrap, topic_prefix)
    expected.check(events)
    assert kills >= 4 and switches
    copies = [((e.table, e.stream, e.ts_us, json.dumps(e.key, sort_keys=True)), e.ts_ms) for e in events]
    assert not replays_by_run(copies, runs, 300)  # the pipeline's checkpoint interval_ms
    assert any(e.ts_us >= switches[0] for e in events) and any(e.ts_us < switches[0] for e in events)


def test_a_client_clock_five_seconds_behind_loses_nothing(
    tmp_path: Path, kafka_bootstrap: str, topic_prefix: str, keyspace: str, scylla_writer: ScyllaCdcWriter
) -> None:
    writer = scylla_writer
    writer.bootstrap(vnodes=4, timestamp_us=writer.coordinator_now_us() - 60_000_000)
    writer.metadata.generation_leeway_us = 5_000_000
    writer.client_clock_offset_s = -5.0
    table = f"{keyspace}.orders"
    writer.create_table(keyspace, "orders", [("id", "int")], [], [("total", "int")])
    expected = Expectations(writer)
    # The confidence window covers the skew: rows stamped 5 s in the past still land before their
    # window is read.
    file = pipeline(tmp_path, topic_prefix, kafka_bootstrap, source_section(writer, [table], confidence_window_ms=6000))
    process, log = start_logged(file)
    try:
        wait_for(lambda: any(" running: " in line for line in log), 60, "the worker to start", process)
        lags = []
        for i in range(300):
            before = writer.coordinator_now_us()
            stamp = expected.write(table, "c", {"id": i}, {"total": i})
            lags.append(before - stamp)
            time.sleep(0.01)
        total = len(expected.written)
        wait_for(lambda: len(arrived(kafka_bootstrap, topic_prefix)) >= total, 60, f"{total} events", process)
    finally:
        stop(process)
    expected.check(arrived(kafka_bootstrap, topic_prefix), exactly_once=True)
    assert min(lags) >= 4_900_000  # every write was stamped about 5 s in the past
