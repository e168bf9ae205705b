"""Writes to a real Cassandra node, each with the changes the commit-log parser must decode from it.

Shared by the integration tests (which read the live node's cdc_raw) and by the fixture generator
(``tests/fixtures/commitlog/generate.py``), which saves the segments and these expectations so the
parser tests also run without a node. Expectations come from the values written, never from the
parser's own output.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from cassandra.util import Duration

from cdcflow.converters import json_default

Expected = list[dict[str, Any]]
COMPARED = ("op", "table", "key", "after", "deletion", "range", "replaced", "removed", "ttl")


def normalized(document: Any) -> Any:
    """The JSON form (map keys become text, bytes base64), so expectations survive a round trip."""
    return json.loads(json.dumps(document, default=json_default, sort_keys=True))


def comparable(change: dict[str, Any]) -> dict[str, Any]:
    """The parts of a decoded change (``RowChange.to_json()``) the cases state."""
    return normalized({k: change[k] for k in COMPARED if k in change})


def every_type(session: Any, keyspace: str) -> Expected:
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
    key, timeuuid = uuid.uuid4(), uuid.uuid1()
    written: dict[str, Any] = {
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
    epoch = dt.datetime(1970, 1, 1)
    after = {
        **written,
        "d": (dt.date(2024, 2, 29) - dt.date(1970, 1, 1)).days,
        "de": Decimal("-12345.678"),
        "du": "1mo2d3000000004ns",
        "i": "2001:db8::1",
        "ts": (written["ts"] - epoch) // dt.timedelta(milliseconds=1),
        "tu": str(timeuuid),
        "fs": ["x", "y"],
        "tp": {"f0": 7, "f1": "seven"},
        "st": [5, 6],
        "fu": {"street": "Main", "number": 5},
        "u": {"street": "Side", "number": None},
    }
    # INSERT replaces every non-frozen collection and user type as a whole.
    replaced = ["l", "m", "st", "u"]
    return [
        normalized({"op": "c", "table": "every_type", "key": {"k": str(key)}, "after": after, "replaced": replaced})
    ]


def row_operations(session: Any, keyspace: str) -> Expected:
    table = f"{keyspace}.events"
    session.execute(
        f"""CREATE TABLE {table} (
            tenant text, day int, seq int, at bigint, note text, owner text STATIC,
            PRIMARY KEY ((tenant, day), seq, at)
        ) WITH cdc = true"""
    )
    row = "tenant = 'acme' AND day = 1 AND seq = 1 AND at = 10"
    for statement in (
        f"INSERT INTO {table} (tenant, day, seq, at, note) VALUES ('acme', 1, 1, 10, 'first')",
        f"UPDATE {table} SET note = 'changed' WHERE {row}",
        f"DELETE note FROM {table} WHERE {row}",
        f"DELETE FROM {table} WHERE {row}",
        f"DELETE FROM {table} WHERE tenant = 'acme' AND day = 1 AND seq > 2 AND seq <= 5",
        f"DELETE FROM {table} WHERE tenant = 'acme' AND day = 1 AND seq = 7",
        f"UPDATE {table} SET owner = 'ops' WHERE tenant = 'acme' AND day = 1",
        f"DELETE FROM {table} WHERE tenant = 'acme' AND day = 2",
        f"INSERT INTO {table} (tenant, day, seq, at, note) VALUES ('acme', 3, 1, 1, 'ttl') USING TTL 3600",
    ):
        session.execute(statement)
    row_key = {"tenant": "acme", "day": 1, "seq": 1, "at": 10}
    partition = {"tenant": "acme", "day": 1}

    def change(op: str, key: dict[str, Any], after: dict[str, Any] | None, **extra: Any) -> dict[str, Any]:
        return normalized({"op": op, "table": "events", "key": key, "after": after, **extra})

    return [
        change("c", row_key, {"note": "first"}),
        change("u", row_key, {"note": "changed"}),
        change("u", row_key, {"note": None}),
        change("d", row_key, None, deletion="row"),
        change(
            "d",
            partition,
            None,
            deletion="range",
            range={"start": {"seq": 2}, "start_inclusive": False, "end": {"seq": 5}, "end_inclusive": True},
        ),
        # A delete of a clustering prefix is a range over the clustering columns after it.
        change(
            "d",
            partition,
            None,
            deletion="range",
            range={"start": {"seq": 7}, "start_inclusive": True, "end": {"seq": 7}, "end_inclusive": True},
        ),
        change("u", partition, {"owner": "ops"}),
        change("d", {"tenant": "acme", "day": 2}, None, deletion="partition"),
        change("c", {"tenant": "acme", "day": 3, "seq": 1, "at": 1}, {"note": "ttl"}, ttl={"note": 3600}),
    ]


def collections(session: Any, keyspace: str) -> Expected:
    table = f"{keyspace}.bags"
    session.execute(f"CREATE TYPE {keyspace}.point (x int, y int)")
    session.execute(
        f"CREATE TABLE {table} (k int PRIMARY KEY, l list<int>, s set<text>, m map<text, int>, p point) WITH cdc = true"
    )
    for statement in (
        f"UPDATE {table} SET l = l + [1, 2], s = s + {{'a', 'b'}}, m = m + {{'x': 1}} WHERE k = 1",
        f"UPDATE {table} SET s = s - {{'a'}}, m = m - {{'x'}} WHERE k = 1",
        f"UPDATE {table} SET s = {{'z'}}, l = [9] WHERE k = 1",
        f"UPDATE {table} SET m['y'] = 2, p.x = 3 WHERE k = 1",
        f"UPDATE {table} SET l = null WHERE k = 1",
        # One collection replaced, another added to: only the first is "replaced".
        f"UPDATE {table} SET l = [7], s = s + {{'w'}} WHERE k = 1",
    ):
        session.execute(statement)

    def change(after: dict[str, Any], **extra: Any) -> dict[str, Any]:
        return normalized({"op": "u", "table": "bags", "key": {"k": 1}, "after": after, **extra})

    return [
        change({"l": [1, 2], "s": ["a", "b"], "m": {"x": 1}}),
        change({}, removed={"s": ["a"], "m": ["x"]}),
        change({"l": [9], "s": ["z"]}, replaced=["l", "s"]),
        change({"m": {"y": 2}, "p": {"x": 3}}),  # a field update carries only the fields it wrote
        change({"l": None}, replaced=["l"]),
        change({"l": [7], "s": ["w"]}, replaced=["l"]),
    ]


def batch_over_tables(session: Any, keyspace: str) -> Expected:
    """A logged batch over three tables of one partition: one mutation, three partition updates."""
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
    return [
        normalized({"op": "c", "table": table, "key": {"id": 1}, "after": after})
        for table, after in (
            ("orders", {"total": 100}),
            ("scratch", {"junk": "ignored"}),
            ("order_lines", {"item": "widget"}),
        )
    ]


CASES: dict[str, Callable[[Any, str], Expected]] = {
    "every_type": every_type,
    "row_operations": row_operations,
    "collections": collections,
    "batch_over_tables": batch_over_tables,
}


# The tables each case writes, and the cases whose changes have no defined order: a batch's
# partition updates are ordered by Cassandra's table map, not by the statements.
CASE_TABLES = {
    "every_type": {"every_type"},
    "row_operations": {"events"},
    "collections": {"bags"},
    "batch_over_tables": {"orders", "order_lines", "scratch"},
}
UNORDERED = {"batch_over_tables"}


def by_case(changes: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Decoded changes (``RowChange.to_json()``) grouped into the cases that wrote them, comparable."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for change in changes:
        case = next((c for c, tables in CASE_TABLES.items() if change["table"] in tables), None)
        if case is not None:
            grouped.setdefault(case, []).append(comparable(change))
    return {case: in_order(case, found) for case, found in grouped.items()}


def in_order(case: str, changes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(changes, key=lambda c: json.dumps(c, sort_keys=True)) if case in UNORDERED else changes


def finish(session: Any, keyspace: str) -> None:
    """A last write the readers wait for: once it is in cdc_raw, everything before it is too."""
    session.execute(f"CREATE TABLE IF NOT EXISTS {keyspace}.done (k int PRIMARY KEY) WITH cdc = true")
    session.execute(f"INSERT INTO {keyspace}.done (k) VALUES (1)")
