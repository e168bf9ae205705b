"""One base write, split into log rows as ScyllaDB splits it, read back as one event per row per
base write: the same events the cassandra_commitlog source makes of the same write on the real
node (its base table has ``cdc = true``: the commit log holds each write once, unsplit)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cdcflow.events import ChangeEvent
from cdcflow.sources.scylla_cdc.timeuuids import micros_of
from tests.integration.commitlog_helpers import wait_for_changes
from tests.integration.scylla_helpers import scylla_writer
from tests.integration.test_scylla_source import drain, open_source
from tests.integration.test_scylla_writer import log_rows
from tests.standins.scylla.writer import (
    Add,
    DeleteColumns,
    DeletePartition,
    DeleteRange,
    DeleteRow,
    Insert,
    Operation,
    Overwrite,
    Remove,
    ScyllaCdcWriter,
    SetFields,
    Update,
)

__all__ = ["scylla_writer"]  # the fixture, for pytest

Key = dict[str, Any]
# Base writes by number in /work/notes/12-scylla.md's table (cdc/split.cc behaviour), each on a
# partition of its own: (operations for that partition, TTL).
CASES: dict[int, tuple[Callable[[Key, int], list[Operation]], int | None]] = {
    1: (lambda k, ts: [Insert({**k, "v": 1})], None),
    2: (lambda k, ts: [Insert({**k, "v": 1})], 5),
    3: (lambda k, ts: [Insert(k)], 5),
    4: (lambda k, ts: [Insert({**k, "v": 1, "w": None})], None),
    5: (lambda k, ts: [Insert({**k, "v": 1, "w": None})], 5),
    6: (lambda k, ts: [Insert({**k, "v": 1, "m": {1: 1}})], None),
    7: (lambda k, ts: [Insert({**k, "v": 1, "m": {1: 1}})], 5),
    8: (lambda k, ts: [Insert({**k, "m": {1: 1}, "st": {2}})], 5),
    9: (lambda k, ts: [Insert({**k, "u": {"a": 1}})], 5),
    10: (lambda k, ts: [Update(k, {"v": 0, "w": None})], 5),
    11: (lambda k, ts: [Update(k, {"w": None})], 5),
    12: (lambda k, ts: [Update(k, {"m": {1: 1}, "v": 2})], None),
    13: (lambda k, ts: [Update(k, {"m": Overwrite({1: 1})})], 5),
    14: (lambda k, ts: [Update(k, {"m": None})], None),
    15: (lambda k, ts: [DeleteColumns(k, ("m",))], None),
    17: (lambda k, ts: [Update(k, {"m": Add({2: 2})})], 5),
    18: (lambda k, ts: [Update(k, {"m": Remove({1})})], None),
    20: (lambda k, ts: [Update(k, {"u": SetFields({"a": 1})})], None),
    21: (lambda k, ts: [Update(k, {"u": SetFields({"b": None})})], None),
    22: (lambda k, ts: [Update(k, {"u": Overwrite({"a": 1})})], None),
    23: (lambda k, ts: [Update(k, {"u": None})], None),
    24: (lambda k, ts: [Update({"pk": k["pk"]}, {"s": 1})], None),
    25: (lambda k, ts: [Insert({**k, "s": 1, "v": 1})], None),
    26: (lambda k, ts: [DeleteRow(k)], None),
    27: (lambda k, ts: [DeleteRange({"pk": k["pk"]}, start=(0, False), end=(2, True))], None),
    28: (lambda k, ts: [DeleteRange({"pk": k["pk"]}, end=(3, False))], None),
    29: (lambda k, ts: [DeletePartition({"pk": k["pk"]})], None),
    31: (lambda k, ts: [Update({**k, "ck": 2}, {"v": 1}), Update({**k, "ck": 1}, {"v": 2})], None),
    32: (
        lambda k, ts: [Insert({**k, "ck": 1, "v": 1}), DeleteRow({**k, "ck": 2}), Insert({**k, "ck": 3, "v": 3})],
        None,
    ),
    33: (lambda k, ts: [Insert({**k, "ck": 2, "v": 2}), DeleteRow({**k, "ck": 1})], None),
    # (34 at one timestamp is left to the unit test: Cassandra's coordinator drops the row its own
    # partition tombstone shadows, ScyllaDB's mutation keeps and logs it.)
    34: (lambda k, ts: [DeletePartition({"pk": k["pk"]}), Insert({**k, "ck": 1, "v": 1}, timestamp_us=ts + 1)], None),
    35: (lambda k, ts: [Update({**k, "ck": 2}, {"v": 2}, timestamp_us=ts + 5), Update({**k, "ck": 1}, {"v": 1})], None),
    # two statements with TTLs of their own on one row: one row per TTL, one event
    37: (lambda k, ts: [Update(k, {"v": 1}, ttl_s=9), Update(k, {"m": Add({3: 3})}, ttl_s=3)], None),
}


def split_table(writer: ScyllaCdcWriter, session: Any, keyspace: str, **options: Any) -> str:
    session.execute(f"CREATE TYPE {keyspace}.ut (a int, b text)")
    writer.create_table(
        keyspace,
        "t",
        [("pk", "int")],
        [("ck", "int")],
        [("s", "int"), ("v", "int"), ("w", "int"), ("m", "map<int, int>"), ("st", "set<int>"), ("u", "ut")],
        static=["s"],
        **options,
    )
    return f"{keyspace}.t"


def comparable(op: str, key: Key, after: Key | None, headers: dict[str, str] | None, ts_us: int) -> tuple[Any, ...]:
    """An event as both sources must agree on it (header lists as sets: their order is free)."""
    parsed: dict[str, Any] = {}
    for name, text in (headers or {}).items():
        value = json.loads(text) if name != "cdc.deletion" else text
        if name == "cdc.replaced":
            value = sorted(value)
        if name == "cdc.removed":
            value = {column: sorted(items, key=str) for column, items in value.items()}
        parsed[name] = value
    return (json.dumps(key, sort_keys=True), op, json.dumps(after, sort_keys=True, default=str), parsed, ts_us)


def test_each_base_write_is_one_event_per_row_as_the_commitlog_source_sees_it(
    cassandra_session: Any, cdc_raw_dir: Path, keyspace: str, scylla_writer: ScyllaCdcWriter
) -> None:
    writer = scylla_writer
    writer.bootstrap(vnodes=2, timestamp_us=writer.coordinator_now_us() - 60_000_000)
    table = split_table(writer, cassandra_session, keyspace)
    cassandra_session.execute(f"ALTER TABLE {table} WITH cdc = true")
    for number, (operations, ttl) in CASES.items():
        # a second in the past (inside the 2 s leeway): readable at once with a 1 s confidence window
        stamp = writer.coordinator_now_us() - 1_000_000
        operations_of_write = operations({"pk": number, "ck": 0}, stamp)
        writer.write(table, operations_of_write, timestamp_us=stamp, ttl_s=ttl)

    source = open_source(writer, [table], f"split-{keyspace}", confidence_window_ms=1000)
    try:
        events = drain(source)
    finally:
        source.close()
    changes = wait_for_changes(
        cdc_raw_dir,
        cassandra_session,
        keyspace,
        lambda found: {c.key["pk"] for c in found if c.table == "t"} >= set(CASES),
    )
    commitlog: dict[int, list[tuple[Any, ...]]] = {}
    for change in changes:
        if change.table == "t":
            after = None if change.after is None else {**change.key, **change.after}
            headers = {
                f"cdc.{name}": value if isinstance(value, str) else json.dumps(value, default=str)
                for name in ("deletion", "range", "replaced", "removed", "ttl")
                if (value := getattr(change, name))
            }
            commitlog.setdefault(change.key["pk"], []).append(
                comparable(change.op, change.key, after, headers, change.ts_us)
            )
    scylla: dict[int, list[tuple[Any, ...]]] = {}
    for event in events:
        assert isinstance(event, ChangeEvent)
        scylla.setdefault(event.key["pk"], []).append(
            comparable(event.op.value, event.key, event.after, event.headers, event.source.ts_us)
        )
    differing = {}
    for number, (_, ttl) in CASES.items():
        expected = sorted(commitlog[number], key=str)
        if number in (14, 15, 23):
            # A difference of ScyllaDB's: a collection's tombstone is logged one microsecond after
            # its own timestamp (split.cc collection_tombstone: "cdc$time using timestamp T + 1"),
            # where the commit log's event carries the tombstone's (SET m = null: T - 1; DELETE m: T).
            expected = [(*e[:4], e[4] + 1) for e in expected]
        if ttl is not None:
            # One of the commit-log source's: it does not carry the TTL of an INSERT's row marker,
            # which the ScyllaDB log holds as the insert row's cdc$ttl (log.cc lines 1540-1541) and
            # the scylla_cdc source gives the key columns in cdc.ttl.
            expected = sorted(
                ((*e[:3], {**e[3], "cdc.ttl": {"pk": ttl, "ck": ttl, **e[3].get("cdc.ttl", {})}}, e[4])
                 if e[1] == "c" else e for e in expected),
                key=str,
            )  # fmt: skip
        if sorted(scylla.get(number, []), key=str) != expected:
            differing[number] = (scylla.get(number), expected)
    assert not differing, "\n".join(f"write {n}: {got}\n  commitlog: {want}" for n, (got, want) in differing.items())


def test_a_collection_insert_with_ttl_is_three_rows_of_one_record(
    cassandra_session: Any, keyspace: str, scylla_writer: ScyllaCdcWriter
) -> None:
    writer = scylla_writer
    writer.bootstrap(vnodes=2, timestamp_us=writer.coordinator_now_us() - 60_000_000)
    table = split_table(writer, cassandra_session, keyspace)
    stamp = writer.write(table, [Insert({"pk": 7, "ck": 0, "v": 1, "m": {1: 1}})], ttl_s=5)
    rows = log_rows(cassandra_session, table)
    assert [(r["cdc$batch_seq_no"], r["cdc$operation"], r.get("cdc$ttl")) for r in rows] == [
        (0, 2, 5),
        (1, 1, None),
        (2, 1, 5),
    ]
    assert len({r["cdc$time"] for r in rows}) == 1 and len({r["cdc$stream_id"] for r in rows}) == 1
    assert [r.get("cdc$end_of_batch") for r in rows] == [None, None, True]
    assert (rows[1].get("cdc$deleted_m"), rows[2]["m"]) == (True, {1: 1})
    # DELETE v, m: two records, T and T + 1, each with its own sequence and end of batch.
    writer.write(table, [DeleteColumns({"pk": 8, "ck": 0}, ("v", "m"))], timestamp_us=stamp + 10)
    later = [r for r in log_rows(cassandra_session, table) if r["pk"] == 8]
    assert [(r["cdc$time"].time, r["cdc$batch_seq_no"], r.get("cdc$end_of_batch")) for r in later] == [
        (later[0]["cdc$time"].time, 0, True),
        (later[1]["cdc$time"].time, 0, True),
    ]
    assert [r.get("cdc$deleted_v") for r in later] == [True, None] and later[1]["cdc$deleted_m"] is True
    assert [micros_of(r["cdc$time"]) for r in later] == [stamp + 10, stamp + 11]


def read_on(source: Any, offsets: dict[str, Any]) -> list[Any]:
    """Every event and rejected row each partition has up to its watermark now, in order, from
    ``offsets`` (a partition not in it from its start; moved along)."""
    found: list[Any] = []
    for partition in source.partitions():
        start = offsets.setdefault(partition.id, source.initial_offset(partition))
        while (end := source.latest_offset(partition, start, 10_000)) != start:
            found.extend(source.read(partition, start, end))
            start = offsets[partition.id] = end
    return found


def read_all(writer: ScyllaCdcWriter, table: str, pipeline: str, **overrides: Any) -> list[Any]:
    """Every event and rejected row the source reads now, in order (``overrides``: source fields)."""
    source = open_source(writer, [table], pipeline, **{"confidence_window_ms": 1000, **overrides})
    try:
        return read_on(source, {})
    finally:
        source.close()


def test_a_partition_delete_pairs_with_its_pre_image_where_scylladb_writes_one(
    cassandra_session: Any, keyspace: str, scylla_writer: ScyllaCdcWriter
) -> None:
    writer = scylla_writer
    writer.bootstrap(vnodes=2, timestamp_us=writer.coordinator_now_us() - 60_000_000)
    # cdc/split.cc (scylladb#26382, 2026.1): without clustering columns a partition delete is
    # preceded by a pre-image of every column; with them, by none.
    writer.create_table(keyspace, "flat", [("pk", "int")], [], [("v", "int"), ("w", "int")], preimage=True)
    writer.create_table(keyspace, "wide", [("pk", "int")], [("ck", "int")], [("v", "int")], preimage=True)
    flat, wide = f"{keyspace}.flat", f"{keyspace}.wide"
    past = writer.coordinator_now_us() - 1_500_000
    writer.insert(flat, {"pk": 1, "v": 1}, timestamp_us=past)
    writer.delete_row(flat, {"pk": 1}, timestamp_us=past + 1)  # DELETE WHERE pk = 1: op 4
    writer.delete_partition(flat, {"pk": 2}, timestamp_us=past + 2)  # no row: no pre-image
    writer.insert(flat, {"pk": 3, "v": 3, "w": 3}, timestamp_us=past + 3)
    writer.expire_row(flat, {"pk": 3}, timestamp_us=past + 4)  # per-row TTL: -4, with pre-image
    writer.insert(wide, {"pk": 1, "ck": 1, "v": 1}, timestamp_us=past)
    writer.delete_partition(wide, {"pk": 1}, timestamp_us=past + 1)
    writer.insert(wide, {"pk": 2, "ck": 2, "v": 2}, timestamp_us=past + 2)
    writer.expire_row(wide, {"pk": 2, "ck": 2}, timestamp_us=past + 3)  # -3, with pre-image

    raw = log_rows(cassandra_session, flat)
    assert sorted((r["pk"], r["cdc$operation"]) for r in raw) == sorted(
        [(1, 0), (1, 2), (1, 4), (2, 4), (3, 0), (3, 2), (3, -4)]
    )
    assert [r["cdc$operation"] for r in log_rows(cassandra_session, wide) if r["pk"] == 1] == [2, 4]

    flat_events = read_all(writer, flat, f"flat-{keyspace}")
    assert all(isinstance(e, ChangeEvent) for e in flat_events), [
        e for e in flat_events if not isinstance(e, ChangeEvent)
    ]
    deletes = {e.key["pk"]: e for e in flat_events if e.op.value == "d"}
    assert deletes[1].before == {"pk": 1, "v": 1, "w": None}
    assert deletes[1].headers == {"cdc.deletion": "partition"}
    assert deletes[2].before is None
    assert deletes[3].before == {"pk": 3, "v": 3, "w": 3}
    assert deletes[3].headers == {"cdc.deletion": "partition", "cdc.origin": "service"}

    wide_events = read_all(writer, wide, f"wide-{keyspace}")
    assert all(isinstance(e, ChangeEvent) for e in wide_events)
    [partition_delete] = [e for e in wide_events if e.op.value == "d" and e.key == {"pk": 1}]
    assert partition_delete.before is None
    [expired] = [e for e in wide_events if e.op.value == "d" and e.key == {"pk": 2, "ck": 2}]
    assert expired.before == {"pk": 2, "ck": 2, "v": 2}
    assert expired.headers == {"cdc.deletion": "row", "cdc.origin": "service"}


def test_images_of_a_split_write_pair_with_its_one_event(
    cassandra_session: Any, keyspace: str, scylla_writer: ScyllaCdcWriter
) -> None:
    writer = scylla_writer
    writer.bootstrap(vnodes=2, timestamp_us=writer.coordinator_now_us() - 60_000_000)
    table = split_table(writer, cassandra_session, keyspace, preimage=True, postimage=True)
    past = writer.coordinator_now_us() - 1_500_000
    writer.insert(table, {"pk": 1, "ck": 0, "v": 0, "m": {9: 9}, "u": {"a": 1, "b": "x"}}, timestamp_us=past)
    # split into an insert, the collection's tombstone and its cells (TTL 5); the user type's field
    writer.write(
        table,
        [Insert({"pk": 1, "ck": 0, "v": 1, "m": {1: 1}}), Update({"pk": 1, "ck": 0}, {"u": SetFields({"b": None})})],
        timestamp_us=past + 1,
        ttl_s=5,
    )
    events = read_all(writer, table, f"images-{keyspace}")
    assert all(isinstance(e, ChangeEvent) for e in events), events
    assert [e.op.value for e in events] == ["c", "c"]
    second = events[1]
    assert second.before == {"pk": 1, "ck": 0, "v": 0, "m": {9: 9}, "u": {"a": 1, "b": "x"}}
    # the post-image: the whole row after every part of the write, its regular columns (the
    # static s is not in a clustered row's image: cdc/log.cc line 1909)
    assert second.after == {
        "pk": 1,
        "ck": 0,
        "v": 1,
        "w": None,
        "m": {1: 1},
        "st": None,
        "u": {"a": 1, "b": None},
    }
    assert second.headers is not None
    assert json.loads(second.headers["cdc.removed"]) == {"u": ["b"]}
    assert json.loads(second.headers["cdc.replaced"]) == ["m"]
    assert json.loads(second.headers["cdc.absent"]) == {"before": ["s", "st", "w"], "after": ["s"]}
