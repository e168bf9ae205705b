"""The ScyllaDB stand-in writes what ScyllaDB writes: its tables, timestamps and log rows checked
against ScyllaDB's own code (scylladb/scylladb, the file named beside each test), on the real
Cassandra node."""

from __future__ import annotations

import datetime
import random
import struct
import uuid
from pathlib import Path
from typing import Any

from cdcflow.sources.scylla_cdc.table_options import CdcOptions, SchemaTablesLookup
from tests.integration.scylla_helpers import DesignStreams, scylla_writer
from tests.standins.scylla.comparator import clustering_sort_key
from tests.standins.scylla.split import Add, DeleteRow, Insert
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
    # cdc/log.cc on_before_allocate_tablet_map(): db_clock::now() - generation_leeway.
    first = int(now_s * 1_000_000) - leeway
    listed = cassandra_session.execute(
        f"SELECT timestamp FROM {writer.keyspaces.local}.cdc_timestamps WHERE keyspace_name = %s AND table_name = 't'",
        (keyspace,),
    )
    assert [r[0].replace(tzinfo=datetime.UTC).timestamp() * 1_000_000 for r in listed] == [first]
    # A write from a client whose clock is behind lands in that first set.
    stamp = writer.insert(f"{keyspace}.t", {"id": 1, "v": 1}, timestamp_us=first + 1)
    [row] = log_rows(cassandra_session, f"{keyspace}.t")
    assert row["cdc$stream_id"] == DesignStreams(cassandra_session, writer.keyspaces).stream(
        f"{keyspace}.t", stamp, {"id": 1}
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
    design = DesignStreams(cassandra_session, writer.keyspaces)
    for row in rows:
        assert row["cdc$stream_id"] == design.stream(f"{keyspace}.t", stamps[row["id"]], {"id": row["id"]})
        assert uuid.UUID(str(row["cdc$time"])).version == 1


def test_metadata_keyspaces_are_replicated_as_scylladb_replicates_its_own(
    cassandra_session: Any, keyspace: str
) -> None:
    # db/system_distributed_keyspace.cc lines 343-346: system_distributed is SimpleStrategy RF 3
    # on every cluster size; system_distributed_everywhere is on every token owner; system and
    # system_schema are node-local.
    from tests.standins.scylla.writer import SimulatedKeyspaces

    writer = ScyllaCdcWriter(cassandra_session, SimulatedKeyspaces.prefixed(keyspace))
    writer.create_metadata_tables()
    try:
        rows = [
            next(
                iter(
                    cassandra_session.execute(
                        "SELECT keyspace_name, replication FROM system_schema.keyspaces WHERE keyspace_name = %s",
                        (name,),
                    )
                )
            )
            for name in writer.keyspaces.all()
        ]
        factors = {name: int(replication["replication_factor"]) for name, replication in rows}
        nodes = len(cassandra_session.cluster.metadata.all_hosts())
        k = writer.keyspaces
        assert factors == {k.distributed: 3, k.everywhere: nodes, k.local: 1, k.schema: 1}
    finally:
        writer.drop_keyspaces()


def test_a_table_s_cdc_options_are_in_its_schema_extension_as_scylladb_stores_them(
    cassandra_session: Any, keyspace: str, scylla_writer: ScyllaCdcWriter
) -> None:
    writer = scylla_writer
    writer.create_table(keyspace, "t", [("id", "int")], [], [("v", "int")], preimage="full", ttl_s=600)
    [(extensions,)] = cassandra_session.execute(
        f"SELECT extensions FROM {writer.keyspaces.schema}.tables WHERE keyspace_name = %s AND table_name = 't'",
        (keyspace,),
    )
    # cdc/cdc_extension.hh: a std::map<sstring, sstring> in the IDL's little-endian framing
    raw = extensions["cdc"]
    (count,) = struct.unpack_from("<I", raw)
    options, offset = {}, 4
    for _ in range(count):
        pair = []
        for _ in range(2):
            (size,) = struct.unpack_from("<I", raw, offset)
            pair.append(raw[offset + 4 : offset + 4 + size].decode())
            offset += 4 + size
        options[pair[0]] = pair[1]
    # cdc/log.cc to_map(): every option, the image mode as false/true/full
    assert options == {"enabled": "true", "preimage": "full", "postimage": "false", "delta": "full", "ttl": "600"}
    assert list(options) == sorted(options)  # a std::map: in key order
    # ... and the source's lookup reads the same options through its seam
    from cassandra.cluster import EXEC_PROFILE_DEFAULT

    lookup = SchemaTablesLookup(cassandra_session, writer.keyspaces.schema, EXEC_PROFILE_DEFAULT)
    assert lookup.cdc_options(keyspace, "t") == CdcOptions(True, "full", False, "full", 600)


def test_tablet_virtual_tables_follow_resizes_and_garbage_collection(
    cassandra_session: Any, keyspace: str, scylla_writer: ScyllaCdcWriter
) -> None:
    writer = scylla_writer
    now_s = 1_800_000_000.0
    writer.clock = lambda: now_s
    writer.create_table(keyspace, "t", [("id", "int")], [], [("v", "int")], tablets=1, ttl_s=60)
    table = f"{keyspace}.t"
    sets = [writer.change_tablets(table, 2, delay_s=10), writer.change_tablets(table, 4, delay_s=20)]
    local = writer.keyspaces.local

    def virtual() -> tuple[list[int], dict[int, dict[int, set[bytes]]]]:
        stamps = [
            int(r[0].replace(tzinfo=datetime.UTC).timestamp() * 1000) * 1000
            for r in cassandra_session.execute(
                f"SELECT timestamp FROM {local}.cdc_timestamps WHERE keyspace_name = %s AND table_name = 't'",
                (keyspace,),
            )
        ]
        streams: dict[int, dict[int, set[bytes]]] = {}
        for ts, state, stream in cassandra_session.execute(
            f"SELECT timestamp, stream_state, stream_id FROM {local}.cdc_streams "
            "WHERE keyspace_name = %s AND table_name = 't'",
            (keyspace,),
        ):
            at = int(ts.replace(tzinfo=datetime.UTC).timestamp() * 1000) * 1000
            streams.setdefault(at, {}).setdefault(state, set()).add(stream)
        return stamps, streams

    stamps, streams = virtual()
    first = stamps[-1]
    assert stamps == sorted(stamps, reverse=True) and stamps[:2] == sets[::-1]  # db/virtual_tables.cc: DESC
    # per timestamp: current (0), closed (1) = the previous set, opened (2) = the new one
    assert streams[sets[0]][1] == streams[first][0] and streams[sets[0]][2] == streams[sets[0]][0]
    assert streams[sets[1]][1] == streams[sets[0]][0] and len(streams[sets[1]][0]) == 4
    # cdc/generation.cc get_new_base_for_gc: with now - ttl between the two resizes, sets[0] is the
    # newest set that began at or before it: every older set (the first) closed more than a TTL
    # ago and is collected, sets[0] becomes the base
    now_s = sets[0] / 1_000_000 + 60 + 1
    assert writer.garbage_collect_stream_sets(table) == [first]
    stamps_after, streams_after = virtual()
    assert stamps_after == sets[::-1]
    # the new base lists its streams as current and opened, nothing closed (query_cdc_streams)
    assert set(streams_after[sets[0]]) == {0, 2} and streams_after[sets[0]][2] == streams[sets[0]][0]
    assert streams_after[sets[1]] == streams[sets[1]]
    [(base,)] = cassandra_session.execute(
        f"SELECT DISTINCT timestamp FROM {local}.cdc_streams_state WHERE table_id = %s",
        (writer._tables[table].table_id,),
    )
    assert int(base.replace(tzinfo=datetime.UTC).timestamp() * 1000) * 1000 == sets[0]
    history = cassandra_session.execute(
        f"SELECT timestamp FROM {local}.cdc_streams_history WHERE table_id = %s", (writer._tables[table].table_id,)
    )
    assert {int(r[0].replace(tzinfo=datetime.UTC).timestamp() * 1000) * 1000 for r in history} == {sets[1]}


def test_the_stand_in_orders_clustering_keys_as_the_real_node_does(cassandra_session: Any, keyspace: str) -> None:
    # types/types.cc compare_visitor and utils/UUID.hh timeuuid_tri_compare: a timeuuid by time,
    # then its low bytes signed; a DESC column reversed. Cassandra orders the same way: the real
    # node is the reference here.
    cassandra_session.execute(
        f"CREATE TABLE {keyspace}.o (pk int, a int, t timeuuid, PRIMARY KEY (pk, a, t)) "
        "WITH CLUSTERING ORDER BY (a DESC, t ASC)"
    )
    rng = random.Random(3)
    micros = 1_700_000_000_000_000
    keys = set()
    for _ in range(60):
        tail = (rng.getrandbits(64) & 0x3FFFFFFFFFFFFFFF) | 0x8000000000000000  # RFC 4122 variant
        intervals = (micros + rng.randrange(3)) * 10 + 0x01B21DD213814000  # a few UUIDs per microsecond
        high = (intervals & 0xFFFFFFFF) << 32 | ((intervals >> 32) & 0xFFFF) << 16 | (intervals >> 48) & 0x0FFF | 0x1000
        keys.add((rng.randrange(3), uuid.UUID(int=(high << 64) | tail)))
    for a, t in keys:
        cassandra_session.execute(f"INSERT INTO {keyspace}.o (pk, a, t) VALUES (0, %s, %s)", (a, t))
    node_order = [(r[0], r[1]) for r in cassandra_session.execute(f"SELECT a, t FROM {keyspace}.o WHERE pk = 0")]
    assert sorted(keys, key=clustering_sort_key(["int", "timeuuid"], [True, False])) == node_order
    assert sorted(keys) != node_order  # Python's tuple order is not the table's


def test_log_rows_of_one_write_follow_the_clustering_order(
    cassandra_session: Any, keyspace: str, scylla_writer: ScyllaCdcWriter
) -> None:
    # cdc/change_visitor.hh: a mutation's rows are visited in clustering order, which numbers them
    # (cdc$batch_seq_no). On a DESC table the rows of one write come newest key first.
    writer = scylla_writer
    writer.bootstrap(vnodes=2, timestamp_us=writer.coordinator_now_us() - 10_000_000)
    writer.create_table(keyspace, "d", [("pk", "int")], [("ck", "int")], [("v", "int")], descending=["ck"])
    table = f"{keyspace}.d"
    writer.write(table, [Insert({"pk": 1, "ck": c, "v": c}) for c in (1, 3, 2)] + [DeleteRow({"pk": 1, "ck": 5})])
    node_order = [r[0] for r in cassandra_session.execute(f"SELECT ck FROM {table} WHERE pk = 1")]
    rows = [r for r in log_rows(cassandra_session, table) if r["cdc$operation"] == 2]
    assert [r["ck"] for r in sorted(rows, key=lambda r: r["cdc$batch_seq_no"])] == node_order == [3, 2, 1]


def test_list_cells_are_logged_under_the_keys_the_base_table_gave_them(
    cassandra_session: Any, cdc_raw_dir: Path, keyspace: str
) -> None:
    # cdc/log.cc logs a list element under its base cell's key (one mutation); the base table here
    # is Cassandra's, whose coordinator picks the keys. The witness: Cassandra's own DELETE l[0]
    # tombstones the first element's key, which its commit log shows as the removed element.
    from tests.integration.commitlog_helpers import wait_for_changes
    from tests.standins.scylla.writer import SimulatedKeyspaces

    writer = ScyllaCdcWriter(cassandra_session, SimulatedKeyspaces.prefixed(keyspace), base_commit_log=cdc_raw_dir)
    writer.create_metadata_tables()
    try:
        writer.bootstrap(vnodes=2, timestamp_us=writer.coordinator_now_us() - 10_000_000)
        table = f"{keyspace}.t"
        writer.create_table(keyspace, "t", [("id", "int")], [], [("l", "list<int>")])
        writer.update(table, {"id": 1}, {"l": Add([5, 6])})
        [row] = [r for r in log_rows(cassandra_session, table) if r.get("l")]
        first = min(row["l"], key=lambda k: (k.time, k.clock_seq))
        assert row["l"][first] == 5
        cassandra_session.execute(f"DELETE l[0] FROM {table} WHERE id = 1")
        changes = wait_for_changes(
            cdc_raw_dir, cassandra_session, keyspace, lambda found: any(c.removed.get("l") for c in found)
        )
        [removed] = [c.removed["l"] for c in changes if c.removed.get("l")]
        assert removed == [str(first)]
    finally:
        writer.drop_keyspaces()
