"""The ``cdc.*`` headers of commit-log events: JSON text for every value a CQL type can give."""

from __future__ import annotations

import json
import uuid
from decimal import Decimal

from cdcflow.events import RowSchema
from cdcflow.sources.cassandra_commitlog.changes import RowChange, change_event

SCHEMA = RowSchema("c1.ks.t", (), ())


def test_a_range_bounded_by_maps_keyed_by_decimals_and_uuids_is_a_header_not_a_crash() -> None:
    # A range deletion on a frozen<map<decimal, int>> clustering column: its bounds are dicts keyed
    # by Decimal, which json.dumps refuses as keys (the source stopped on such a mutation).
    bounds = {
        "start": {"c": {Decimal("1.50"): 1, Decimal("-2"): 2}},
        "start_inclusive": True,
        "end": {"c": {uuid.UUID(int=7): Decimal("3.0")}},
        "end_inclusive": False,
    }
    change = RowChange("d", "ks", "t", {"k": 1}, None, 5, "range", bounds)
    event = change_event(change, SCHEMA, "c1", "node", 1, 100, 0, 0)
    assert event.headers is not None
    assert event.headers["cdc.deletion"] == "range"
    assert json.loads(event.headers["cdc.range"]) == {
        "start": {"c": {"1.50": 1, "-2": 2}},
        "start_inclusive": True,
        "end": {"c": {"00000000-0000-0000-0000-000000000007": "3.0"}},
        "end_inclusive": False,
    }


def test_headers_of_plain_values_are_the_json_they_always_were() -> None:
    change = RowChange("u", "ks", "t", {"k": 1}, {"v": 2}, 5, ttl={"v": 60, "a": 10})
    event = change_event(change, SCHEMA, "c1", "node", 1, 100, 0, 0)
    assert event.headers == {"cdc.ttl": '{"a": 10, "v": 60}'}
    removed = RowChange("u", "ks", "t", {"k": 1}, {}, 5, removed={"m": [1, "x"]}, replaced=["m"])
    assert change_event(removed, SCHEMA, "c1", "node", 1, 100, 0, 0).headers == {
        "cdc.replaced": '["m"]',
        "cdc.removed": '{"m": [1, "x"]}',
    }


def test_a_removed_map_key_beside_a_null_one_still_sorts() -> None:
    change = RowChange("u", "ks", "t", {"k": 1}, {}, 5, removed={"m": [{2: "a", None: "b"}]})
    headers = change_event(change, SCHEMA, "c1", "node", 1, 100, 0, 0).headers
    assert headers == {"cdc.removed": '{"m": [{"2": "a", "null": "b"}]}'}
