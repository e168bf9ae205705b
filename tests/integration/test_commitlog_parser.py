"""The commit-log parser against segments the real Cassandra node wrote: every type, every operation.

Each test writes through cassandra-driver, then reads cdc_raw until its last write shows up, and
compares the decoded changes with what it wrote.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

from cassandra.util import Duration

from sources.cassandra_commitlog.changes import RowChange
from tests.integration.commitlog_helpers import has_row, wait_for_changes

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _finish(session: Any, keyspace: str) -> None:
    session.execute(f"CREATE TABLE IF NOT EXISTS {keyspace}.done (k int PRIMARY KEY) WITH cdc = true")
    session.execute(f"INSERT INTO {keyspace}.done (k) VALUES (1)")


def _changes(cdc_raw: Path, session: Any, keyspace: str, cdc_only: bool = False) -> list[RowChange]:
    changes = wait_for_changes(cdc_raw, session, keyspace, has_row("done", k=1), cdc_only=cdc_only)
    assert has_row("done", k=1)(changes), "the final write never reached cdc_raw"
    return [c for c in changes if c.table != "done"]


def test_every_cql_type_decodes_to_the_value_written(cassandra_session: Any, cdc_raw_dir: Path, keyspace: str) -> None:
    session = cassandra_session
    session.execute(f"CREATE TYPE {keyspace}.address (street text, number int)")
    session.execute(
        f"""CREATE TABLE {keyspace}.every_type (
            k uuid PRIMARY KEY, a ascii, b bigint, bl blob, bo boolean, d date, de decimal, do double,
            du duration, f float, i inet, n int, s smallint, t text, ti time, ts timestamp, tu timeuuid,
            ty tinyint, v varint, fl frozen<list<int>>, fs frozen<set<text>>, fm frozen<map<text, int>>,
            tp tuple<int, text>, fu frozen<address>, ve vector<float, 3>, vt vector<text, 2>,
            l list<text>, st set<int>, m map<int, text>, u address
        ) WITH cdc = true"""
    )
    key = uuid.uuid4()
    timeuuid = uuid.uuid1()
    written = {
        "a": "ascii text",
        "b": -(2**62),
        "bl": b"\x00\x01\xfe\xff",
        "bo": True,
        "d": dt.date(2024, 2, 29),
        "de": Decimal("-12345.678"),
        "do": 3.141592653589793,
        "du": Duration(1, 2, 3_000_000_004),
        "f": 1.5,
        "i": ipaddress.ip_address("2001:db8::1"),
        "n": -123456,
        "s": -32768,
        "t": "unicodé ✓",
        "ti": 45_296_000_000_123,
        "ts": dt.datetime(2026, 11, 22, 12, 30, 45, 123000),
        "tu": timeuuid,
        "ty": -128,
        "v": -(2**100) + 7,
        "fl": [3, 1, 2],
        "fs": {"x", "y"},
        "fm": {"one": 1, "two": 2},
        "tp": (7, "seven"),
        "ve": [0.5, -1.0, 2.25],
        "vt": ["first", "second"],
        "l": ["p", "q"],
        "st": {5, 6},
        "m": {1: "one", 2: "two"},
    }
    columns = ", ".join(["k", *written, "fu", "u"])
    marks = ", ".join(["?"] * (len(written) + 1))
    insert = session.prepare(
        f"INSERT INTO {keyspace}.every_type ({columns}) VALUES ({marks}, {{street: 'Main', number: 5}}, "
        "{street: 'Side', number: null})"
    )
    session.execute(insert, [key, *written.values()])
    _finish(session, keyspace)

    [change] = _changes(cdc_raw_dir, session, keyspace)
    assert change.op == "c" and change.key == {"k": str(key)}
    after = change.after
    assert after is not None
    expected = {
        "a": "ascii text",
        "b": -(2**62),
        "bl": b"\x00\x01\xfe\xff",
        "bo": True,
        "d": (dt.date(2024, 2, 29) - dt.date(1970, 1, 1)).days,
        "de": -12345.678,
        "do": 3.141592653589793,
        "du": "1mo2d3000000004ns",
        "f": 1.5,
        "i": "2001:db8::1",
        "n": -123456,
        "s": -32768,
        "t": "unicodé ✓",
        "ti": 45_296_000_000_123,
        "ts": int((dt.datetime(2026, 11, 22, 12, 30, 45, 123000, tzinfo=dt.UTC) - EPOCH).total_seconds() * 1000),
        "tu": str(timeuuid),
        "ty": -128,
        "v": -(2**100) + 7,
        "fl": [3, 1, 2],
        "fs": ["x", "y"],
        "fm": {"one": 1, "two": 2},
        "tp": {"f0": 7, "f1": "seven"},
        "fu": '{"street":"Main","number":5}',
        "ve": [0.5, -1.0, 2.25],
        "vt": ["first", "second"],
        "l": ["p", "q"],
        "st": [5, 6],
        "m": {1: "one", 2: "two"},
        "u": '{"street":"Side","number":null}',
    }
    assert after == expected
    # INSERT replaces every non-frozen collection and user type as a whole.
    assert sorted(change.replaced) == ["l", "m", "st", "u"]
    assert change.ts_us > 0


def test_insert_update_and_deletes_of_cells_rows_partitions_and_ranges(
    cassandra_session: Any, cdc_raw_dir: Path, keyspace: str
) -> None:
    session = cassandra_session
    table = f"{keyspace}.events"
    session.execute(
        f"""CREATE TABLE {table} (
            tenant text, day int, seq int, at bigint, note text, owner text STATIC,
            PRIMARY KEY ((tenant, day), seq, at)
        ) WITH cdc = true"""
    )
    session.execute(f"INSERT INTO {table} (tenant, day, seq, at, note) VALUES ('acme', 1, 1, 10, 'first')")
    session.execute(f"UPDATE {table} SET note = 'changed' WHERE tenant = 'acme' AND day = 1 AND seq = 1 AND at = 10")
    session.execute(f"DELETE note FROM {table} WHERE tenant = 'acme' AND day = 1 AND seq = 1 AND at = 10")
    session.execute(f"DELETE FROM {table} WHERE tenant = 'acme' AND day = 1 AND seq = 1 AND at = 10")
    session.execute(f"DELETE FROM {table} WHERE tenant = 'acme' AND day = 1 AND seq > 2 AND seq <= 5")
    session.execute(f"DELETE FROM {table} WHERE tenant = 'acme' AND day = 1 AND seq = 7")
    session.execute(f"UPDATE {table} SET owner = 'ops' WHERE tenant = 'acme' AND day = 1")
    session.execute(f"DELETE FROM {table} WHERE tenant = 'acme' AND day = 2")
    session.execute(f"INSERT INTO {table} (tenant, day, seq, at, note) VALUES ('acme', 3, 1, 1, 'ttl') USING TTL 3600")
    _finish(session, keyspace)

    changes = _changes(cdc_raw_dir, session, keyspace)
    row_key = {"tenant": "acme", "day": 1, "seq": 1, "at": 10}
    partition_key = {"tenant": "acme", "day": 1}
    summary = [(c.op, c.deletion, c.key, c.after) for c in changes]
    assert summary == [
        ("c", None, row_key, {"note": "first"}),
        ("u", None, row_key, {"note": "changed"}),
        ("u", None, row_key, {"note": None}),
        ("d", "row", row_key, None),
        ("d", "range", partition_key, None),
        ("d", "range", partition_key, None),
        ("u", None, partition_key, {"owner": "ops"}),
        ("d", "partition", {"tenant": "acme", "day": 2}, None),
        ("c", None, {"tenant": "acme", "day": 3, "seq": 1, "at": 1}, {"note": "ttl"}),
    ]
    assert changes[4].range == {"start": {"seq": 2}, "start_inclusive": False, "end": {"seq": 5}, "end_inclusive": True}
    # A delete of a clustering prefix is a range over the remaining clustering columns.
    assert changes[5].range == {"start": {"seq": 7}, "start_inclusive": True, "end": {"seq": 7}, "end_inclusive": True}
    assert changes[8].ttl == {"note": 3600}
    timestamps = [c.ts_us for c in changes]
    assert timestamps == sorted(timestamps), "each statement was written after the one before"


def test_collection_additions_removals_and_replacements(cassandra_session: Any, cdc_raw_dir: Path, keyspace: str) -> None:
    session = cassandra_session
    table = f"{keyspace}.bags"
    session.execute(f"CREATE TYPE {keyspace}.point (x int, y int)")
    session.execute(
        f"CREATE TABLE {table} (k int PRIMARY KEY, l list<int>, s set<text>, m map<text, int>, p point) WITH cdc = true"
    )
    session.execute(f"UPDATE {table} SET l = l + [1, 2], s = s + {{'a', 'b'}}, m = m + {{'x': 1}} WHERE k = 1")
    session.execute(f"UPDATE {table} SET s = s - {{'a'}}, m = m - {{'x'}} WHERE k = 1")
    session.execute(f"UPDATE {table} SET s = {{'z'}}, l = [9] WHERE k = 1")
    session.execute(f"UPDATE {table} SET m['y'] = 2, p.x = 3 WHERE k = 1")
    session.execute(f"UPDATE {table} SET l = null WHERE k = 1")
    _finish(session, keyspace)

    changes = _changes(cdc_raw_dir, session, keyspace)
    assert [(c.op, c.after, c.replaced, c.removed) for c in changes] == [
        ("u", {"l": [1, 2], "s": ["a", "b"], "m": {"x": 1}}, [], {}),
        ("u", {}, [], {"s": ["a"], "m": ["x"]}),
        ("u", {"l": [9], "s": ["z"]}, ["l", "s"], {}),
        ("u", {"m": {"y": 2}, "p": '{"x":3,"y":null}'}, [], {}),
        ("u", {"l": None}, ["l"], {}),
    ]


def test_batch_over_tables_keeps_cdc_tables_and_skips_the_others(
    cassandra_session: Any, cdc_raw_dir: Path, keyspace: str
) -> None:
    session = cassandra_session
    session.execute(f"CREATE TABLE {keyspace}.orders (id int PRIMARY KEY, total int) WITH cdc = true")
    session.execute(f"CREATE TABLE {keyspace}.order_lines (id int PRIMARY KEY, item text) WITH cdc = true")
    session.execute(f"CREATE TABLE {keyspace}.scratch (id int PRIMARY KEY, junk text)")  # no cdc
    session.execute(
        f"""BEGIN BATCH
            INSERT INTO {keyspace}.orders (id, total) VALUES (1, 100);
            INSERT INTO {keyspace}.scratch (id, junk) VALUES (1, 'ignored');
            INSERT INTO {keyspace}.order_lines (id, item) VALUES (1, 'widget');
        APPLY BATCH"""
    )
    _finish(session, keyspace)

    every_table = _changes(cdc_raw_dir, session, keyspace)
    assert sorted((c.table, c.after) for c in every_table) == [
        ("order_lines", {"item": "widget"}),
        ("orders", {"total": 100}),
        ("scratch", {"junk": "ignored"}),
    ]
    cdc_tables = _changes(cdc_raw_dir, session, keyspace, cdc_only=True)
    assert sorted(c.table for c in cdc_tables) == ["order_lines", "orders"]
