"""The ScyllaDB stand-in writes what ScyllaDB writes: its tables, timestamps and log rows checked
against ScyllaDB's own code (scylladb/scylladb, the file named beside each test), on the real
Cassandra node."""

from __future__ import annotations

import uuid
from typing import Any

from tests.integration.scylla_helpers import scylla_writer
from tests.standins.scylla.writer import ScyllaCdcWriter

__all__ = ["scylla_writer"]  # the fixture, for pytest


def log_rows(session: Any, table: str) -> list[dict[str, Any]]:
    """Every row of the table's log, in read order per stream, as column -> value (nulls dropped)."""
    rows = session.execute(f"SELECT * FROM {table}_scylla_cdc_log")
    found = [{k: v for k, v in zip(rows.column_names, row, strict=True) if v is not None} for row in rows]
    return sorted(found, key=lambda r: (r["cdc$time"].time, r["cdc$batch_seq_no"]))


def test_tablet_logs_have_no_closed_time_and_stream_sets_are_keyed_by_the_log_table(
    cassandra_session: Any, keyspace: str, scylla_writer: ScyllaCdcWriter
) -> None:
    writer = scylla_writer
    writer.create_table(keyspace, "t", [("id", "int")], [], [("v", "int")], tablets=2)
    # cdc/log.cc add_columns_to_cdc_log(): no cdc$closed_time, nothing static.
    columns = cassandra_session.execute(
        "SELECT column_name, kind FROM system_schema.columns WHERE keyspace_name = %s AND table_name = %s",
        (keyspace, "t_scylla_cdc_log"),
    )
    kinds = {name: kind for name, kind in columns}
    assert "cdc$closed_time" not in kinds and "static" not in kinds.values()
    # cdc/log.cc on_before_allocate_tablet_map(): only for the log schema, with its id.
    [log_id] = cassandra_session.execute(
        "SELECT id FROM system_schema.tables WHERE keyspace_name = %s AND table_name = %s",
        (keyspace, "t_scylla_cdc_log"),
    )
    state = cassandra_session.execute(f"SELECT DISTINCT table_id FROM {writer.keyspaces.local}.cdc_streams_state")
    assert [row[0] for row in state] == [log_id[0]]


def test_the_first_tablet_stream_set_starts_a_leeway_ago_and_a_resize_after_the_delay(
    cassandra_session: Any, keyspace: str, scylla_writer: ScyllaCdcWriter
) -> None:
    writer = scylla_writer
    now_s = 1_800_000_000.0
    writer.clock = lambda: now_s
    leeway = writer.metadata.generation_leeway_us
    writer.create_table(keyspace, "t", [("id", "int")], [], [("v", "int")], tablets=2)
    history = writer._tables[f"{keyspace}.t"].tablets
    assert history is not None
    # cdc/log.cc on_before_allocate_tablet_map(): db_clock::now() - generation_leeway.
    first = int(now_s * 1_000_000) - leeway
    assert history.timestamps() == [first]
    # A write from a client whose clock is behind lands in that first set.
    stamp = writer.insert(f"{keyspace}.t", {"id": 1, "v": 1}, timestamp_us=first + 1)
    [row] = log_rows(cassandra_session, f"{keyspace}.t")
    assert (
        row["cdc$stream_id"]
        == writer.stream_for(f"{keyspace}.t", stamp, writer.token_of(f"{keyspace}.t", {"id": 1})).raw
    )
    # cdc/generation.cc generate_tablet_resize_update(): new_generation_timestamp(true, ring_delay).
    resized = writer.change_tablets(f"{keyspace}.t", 4)
    assert resized == int(now_s * 1_000_000) + int(2 * writer.ring_delay_s * 1_000_000) + leeway


def test_a_joining_node_s_generation_starts_two_ring_delays_and_a_leeway_later(
    keyspace: str, scylla_writer: ScyllaCdcWriter
) -> None:
    writer = scylla_writer
    now_s = 1_800_000_000.0005  # the timestamp is cut to whole milliseconds
    writer.clock = lambda: now_s
    assert writer.bootstrap(vnodes=2) == 1_800_000_000_000_000  # the first generation: no delay
    # cdc/generation.cc new_generation_timestamp(): now + 2 x ring_delay + leeway.
    expected = 1_800_000_000_000_000 + int(2 * writer.ring_delay_s * 1_000_000) + writer.metadata.generation_leeway_us
    assert writer.join_node(vnodes=2) == expected
    writer.ring_delay_s = 0.0  # ... and no delay at all when ring_delay is 0
    assert writer.join_node(vnodes=2) == 1_800_000_000_000_000


def test_post_images_flag_no_deleted_columns_pre_images_do(
    cassandra_session: Any, keyspace: str, scylla_writer: ScyllaCdcWriter
) -> None:
    writer = scylla_writer
    writer.bootstrap(vnodes=2, timestamp_us=writer.coordinator_now_us() - 10_000_000)
    table = f"{keyspace}.t"
    writer.create_table(
        keyspace, "t", [("id", "int")], [], [("v", "int"), ("w", "int")], preimage="full", postimage=True
    )
    writer.insert(table, {"id": 1, "v": 1})
    writer.update(table, {"id": 1}, {"v": 2})
    rows = [r for r in log_rows(cassandra_session, table) if r["cdc$operation"] in (0, 9)]
    # cdc/log.cc transformer::generate_image(): only a pre-image sets cdc$deleted_X for a null.
    pre = [r for r in rows if r["cdc$operation"] == 0]
    post = [r for r in rows if r["cdc$operation"] == 9]
    assert [r.get("cdc$deleted_w") for r in pre] == [True]
    assert post and all("cdc$deleted_w" not in r and "w" not in r for r in post)


def test_every_tablet_write_is_logged_in_one_stream_the_newest_set_s_at_or_before_it(
    cassandra_session: Any, keyspace: str, scylla_writer: ScyllaCdcWriter
) -> None:
    writer = scylla_writer
    writer.create_table(keyspace, "t", [("id", "int")], [], [("v", "int")], tablets=1)
    change = writer.change_tablets(f"{keyspace}.t", 2, delay_s=0.5)
    leeway = writer.metadata.generation_leeway_us
    stamps = [change - leeway // 2, change - 1, change, change + leeway // 2]
    for i, stamp in enumerate(stamps):
        writer.insert(f"{keyspace}.t", {"id": i, "v": i}, timestamp_us=stamp)
    rows = log_rows(cassandra_session, f"{keyspace}.t")
    # cdc/metadata.cc get_tablet_stream_set(): the newest set at or before the write, never two.
    assert len(rows) == len(stamps)
    history = writer._tables[f"{keyspace}.t"].tablets
    assert history is not None
    for row in rows:
        stamp = stamps[row["id"]]
        token = writer.token_of(f"{keyspace}.t", {"id": row["id"]})
        assert row["cdc$stream_id"] == history.get_stream(stamp, token).raw
        assert uuid.UUID(str(row["cdc$time"])).version == 1
