"""Edge values not in the every-type test (first run as a held-out check of issue 13): decimals of
a negative scale, of 39 digits, zero with scale 30, trailing zeros; varints at the 64-bit edges and
of 61 digits; maps keyed by tuples (entries in events); user types nested in sets, maps and lists
of user types; a non-frozen user type's field updates. A real Cassandra write -> commit log ->
Kafka json and avro (the registry) -> consumers decoding from the wire formats alone, compared
value by value and type by type."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tests.consumers import same
from tests.integration.test_cassandra_types_end_to_end import (
    _avro_decoder,
    _json,
    _pipeline,
    _records,
    _run_until,
)

pytestmark = [pytest.mark.kafka, pytest.mark.registry]

BOUND: dict[str, tuple[str, Any, Any]] = {
    "d1": ("decimal", Decimal("-0.000000000000000000000000000000000001"), None),
    "d2": ("decimal", Decimal("1E+5"), None),  # a negative scale
    "d3": ("decimal", Decimal("99999999999999999999999999999999999999.9"), None),  # 39 digits
    "d4": ("decimal", Decimal("0E-30"), None),
    "d5": ("decimal", Decimal("-1.10"), None),  # a trailing zero kept
    "v1": ("varint", 0, None),
    "v2": ("varint", -1, None),
    "v3": ("varint", 2**63, None),
    "v4": ("varint", -(2**63) - 1, None),
    "v5": ("varint", 10**60, None),
    "lm": ("list<frozen<map<text, decimal>>>", [{"a": Decimal("1.000"), "b": Decimal("-3E-7")}], None),
    "sv": ("set<varint>", {-(2**70), 3}, None),
}
LITERAL: dict[str, tuple[str, str, Any]] = {
    "mt": (
        "map<frozen<tuple<int, text>>, decimal>",
        "{(1, 'a'): 1.5, (2, null): -0.001}",
        [
            {"key": {"f0": 1, "f1": "a"}, "value": Decimal("1.5")},
            {"key": {"f0": 2, "f1": None}, "value": Decimal("-0.001")},
        ],
    ),
    "su": (
        "set<frozen<money>>",
        "{{amount: 12.345, units: 100000000000000000000000}}",
        [{"amount": Decimal("12.345"), "units": 10**23}],
    ),
    "mu": (
        "map<int, frozen<wallet>>",
        "{7: {owner: 'z', coins: [{amount: 0.01, units: -5}]}}",
        {7: {"owner": "z", "coins": [{"amount": Decimal("0.01"), "units": -5}]}},
    ),
    "w": ("wallet", "{owner: 'q'}", {"owner": "q", "coins": None}),
}


def _write(session: Any, keyspace: str) -> None:
    session.execute(f"CREATE TYPE {keyspace}.money (amount decimal, units varint)")
    session.execute(f"CREATE TYPE {keyspace}.wallet (owner text, coins frozen<list<frozen<money>>>)")
    columns = ", ".join(f"{name} {kind}" for name, (kind, _, _) in {**BOUND, **LITERAL}.items())
    session.execute(f"CREATE TABLE {keyspace}.every_type (k int PRIMARY KEY, {columns}) WITH cdc = true")
    names = ", ".join(["k", *BOUND, *LITERAL])
    values = ", ".join(["1", *("?" * len(BOUND)), *(literal for _, literal, _ in LITERAL.values())])
    session.execute(
        session.prepare(f"INSERT INTO {keyspace}.every_type ({names}) VALUES ({values})"),
        [b for _, b, _ in BOUND.values()],
    )
    session.execute(f"UPDATE {keyspace}.every_type SET w.coins = [{{amount: -7.70, units: 1}}] WHERE k = 1")
    session.execute(f"UPDATE {keyspace}.every_type SET w.owner = null WHERE k = 1")


def _event_value(name: str) -> Any:
    if name in BOUND:
        value = BOUND[name][1]
        if isinstance(value, set):
            return sorted(value)
        return value
    return LITERAL[name][2]


def _check(records: Any, decode: Any, whole: bool) -> list[str]:
    ordered = sorted((r for r in records if r.value is not None), key=lambda r: r.offset)
    values = [decode(r)[0] for r in ordered]
    assert [v["op"] for v in values] == ["c", "u", "u"]
    mismatches = []
    first = values[0]["after"]
    for name in [*BOUND, *LITERAL]:
        if not same(first[name], _event_value(name)):
            mismatches.append(f"{name}: {first[name]!r} != {_event_value(name)!r}")
    coins = (
        {"owner": None, "coins": [{"amount": Decimal("-7.70"), "units": 1}]}
        if whole
        else {"coins": [{"amount": Decimal("-7.70"), "units": 1}]}
    )
    owner = {"owner": None, "coins": None} if whole else {"owner": None}
    for got, want in ((values[1]["after"]["w"], coins), (values[2]["after"]["w"], owner)):
        if not same(got, want):
            mismatches.append(f"w update: {got!r} != {want!r}")
    return mismatches


def test_edge_values_reach_kafka_json_and_avro_exactly(
    tmp_path: Path,
    kafka_bootstrap: str,
    registry_url: str,
    topic_prefix: str,
    cassandra_session: Any,
    cdc_raw_dir: Path,
    keyspace: str,
) -> None:
    _write(cassandra_session, keyspace)
    kafka = f"{{type: kafka, bootstrap_servers: '{kafka_bootstrap}', linger_ms: 20"
    jp, ap = f"{topic_prefix}j", f"{topic_prefix}a"
    on_json = _pipeline(tmp_path, "json", jp, cdc_raw_dir, keyspace, kafka + "}", "{type: worker}")
    on_avro = _pipeline(
        tmp_path,
        "avro",
        ap,
        cdc_raw_dir,
        keyspace,
        kafka + f", converter: avro, schema_registry_url: '{registry_url}'}}",
        "{type: worker}",
    )
    _run_until(
        (on_json, lambda: len(_records(kafka_bootstrap, jp)) >= 3),
        (on_avro, lambda: len(_records(kafka_bootstrap, ap)) >= 3),
    )
    report = {
        "json": _check(_records(kafka_bootstrap, jp), _json, whole=False),
        "avro": _check(_records(kafka_bootstrap, ap), _avro_decoder(registry_url), whole=True),
    }
    print(json.dumps(report, indent=1))
    assert report == {"json": [], "avro": []}
    assert not (tmp_path / "errors.jsonl").exists()
