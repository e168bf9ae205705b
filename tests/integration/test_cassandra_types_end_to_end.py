"""Every CQL type, from a CQL write on the real Cassandra node to a consumer of Kafka (json, and avro
with the real registry) and to Parquet (spark engine), compared value by value: decimals of any
scale, varints beyond 64 bits, user types frozen and not (nested, in collections), a non-frozen
user type's field updates (only the fields written), and the tombstone after a delete."""

from __future__ import annotations

import datetime as dt
import json
import signal
import time
import uuid
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from cassandra.util import Duration

from tests.consumers import AvroReader, connect_value, same
from tests.integration.kafka_helpers import Received, read_topics, start_logged, topics_with_prefix
from tests.integration.parquet_helpers import read_parquet, read_parquet_while_written

pytestmark = [pytest.mark.kafka, pytest.mark.registry]

KEY = uuid.UUID("00000000-0000-4000-8000-000000000001")
TIMEUUID = uuid.UUID("a77ab69e-e6a4-11f1-bd5c-02fc00000001")
UTC = dt.UTC

# column -> (CQL type, value as bound through the driver, value the event carries)
BOUND: dict[str, tuple[str, Any, Any]] = {
    "a": ("ascii", "ascii text", "ascii text"),
    "b": ("bigint", -(2**62), -(2**62)),
    "bl": ("blob", b"\x00\x01\xfe\xff", b"\x00\x01\xfe\xff"),
    "bo": ("boolean", True, True),
    "d": ("date", dt.date(2024, 2, 29), 19782),
    "de": ("decimal", Decimal("-12345.678901234567890"), Decimal("-12345.678901234567890")),
    "dz": ("decimal", Decimal("12345678901234567890.123456789"), Decimal("12345678901234567890.123456789")),
    "do": ("double", 3.141592653589793, 3.141592653589793),
    "du": ("duration", Duration(1, 2, 3_000_000_004), "1mo2d3000000004ns"),
    "f": ("float", 1.5, 1.5),
    "i": ("inet", "2001:db8::1", "2001:db8::1"),
    "n": ("int", -123456, -123456),
    "s": ("smallint", -32768, -32768),
    "t": ("text", "unicodé ✓", "unicodé ✓"),
    "ti": ("time", 45_296_000_000_123, 45_296_000_000_123),
    "ts": ("timestamp", dt.datetime(2026, 11, 22, 12, 30, 45, 123000), 1_795_350_645_123),
    "tu": ("timeuuid", TIMEUUID, str(TIMEUUID)),
    "ty": ("tinyint", -128, -128),
    "uu": ("uuid", KEY, str(KEY)),
    "v": ("varint", 2**70, 2**70),
    "vn": ("varint", -(2**100) + 7, -(2**100) + 7),
    "vh": ("varint", 10**40 + 1, 10**40 + 1),  # 41 digits: more than a Parquet decimal holds
    "fl": ("frozen<list<int>>", [3, 1, 2], [3, 1, 2]),
    "fs": ("frozen<set<text>>", {"x", "y"}, ["x", "y"]),
    "fm": ("frozen<map<text, int>>", {"one": 1, "two": 2}, {"one": 1, "two": 2}),
    "md": ("map<int, decimal>", {1: Decimal("1.50"), 2: Decimal("-2E+3")}, {1: Decimal("1.50"), 2: Decimal("-2E+3")}),
    "ve": ("vector<float, 3>", [0.5, -1.0, 2.25], [0.5, -1.0, 2.25]),
    "l": ("list<text>", ["p", "q"], ["p", "q"]),
    "st": ("set<int>", {5, 6}, [5, 6]),
    "m": ("map<int, text>", {1: "one", 2: "two"}, {1: "one", 2: "two"}),
}
MAIN = {"street": "Main", "zip": 5, "cost": Decimal("9.99"), "big": 2**80}
# column -> (CQL type, CQL literal, value the event carries): user types and tuples, written as literals
LITERAL: dict[str, tuple[str, str, Any]] = {
    "tp": ("tuple<int, text, decimal>", "(7, 'seven', 0.10)", {"f0": 7, "f1": "seven", "f2": Decimal("0.10")}),
    "fu": ("frozen<address>", "{street: 'Main', zip: 5, cost: 9.99, big: 1208925819614629174706176}", MAIN),
    "pl": (
        "frozen<place>",
        "{label: 'home', home: {street: 'Main', zip: 5, cost: 9.99, big: 1208925819614629174706176}}",
        {"label": "home", "home": MAIN},
    ),
    "lu": ("list<frozen<address>>", "[{street: 'Main', zip: 5, cost: 9.99, big: 1208925819614629174706176}]", [MAIN]),
    "mu": (
        "map<text, frozen<address>>",
        "{'a': {street: 'Main', zip: 5, cost: 9.99, big: 1208925819614629174706176}}",
        {"a": MAIN},
    ),
    "u": (
        "address",
        "{street: 'Side', cost: 1.5}",
        {"street": "Side", "zip": None, "cost": Decimal("1.5"), "big": None},
    ),
}
ADDRESS_FIELDS = ("street", "zip", "cost", "big")
COLUMNS = sorted({**BOUND, **LITERAL})  # the row schema's order: the key, then the rest by name


def _write(session: Any, keyspace: str) -> None:
    session.execute(f"CREATE TYPE {keyspace}.address (street text, zip int, cost decimal, big varint)")
    session.execute(f"CREATE TYPE {keyspace}.place (label text, home frozen<address>)")
    columns = ", ".join(f"{name} {kind}" for name, (kind, _, _) in {**BOUND, **LITERAL}.items())
    session.execute(f"CREATE TABLE {keyspace}.every_type (k int PRIMARY KEY, {columns}) WITH cdc = true")
    names = ", ".join(["k", *BOUND, *LITERAL])
    values = ", ".join(["1", *("?" * len(BOUND)), *(literal for _, literal, _ in LITERAL.values())])
    insert = session.prepare(f"INSERT INTO {keyspace}.every_type ({names}) VALUES ({values})")
    session.execute(insert, [bound for _, bound, _ in BOUND.values()])
    session.execute(f"UPDATE {keyspace}.every_type SET u.street = 'Side street' WHERE k = 1")
    session.execute(f"UPDATE {keyspace}.every_type SET u.zip = null, u.cost = 2.50 WHERE k = 1")
    session.execute(f"INSERT INTO {keyspace}.every_type (k, t) VALUES (2, 'two')")
    session.execute(f"DELETE FROM {keyspace}.every_type WHERE k = 2")


def _expected() -> list[tuple[str, dict[str, Any], dict[str, Any] | None]]:
    """(op, key, after) of each change, the after image in the row schema's column order."""
    full = {"k": 1, **{c: ({**BOUND, **LITERAL}[c][2]) for c in COLUMNS}}
    return [
        ("c", {"k": 1}, full),
        ("u", {"k": 1}, {"k": 1, "u": {"street": "Side street"}}),  # a field update: only what it wrote
        ("u", {"k": 1}, {"k": 1, "u": {"zip": None, "cost": Decimal("2.50")}}),  # zip set to null
        ("c", {"k": 2}, {"k": 2, "t": "two"}),
        ("d", {"k": 2}, None),
    ]


def _pipeline(folder: Path, name: str, cluster: str, cdc_raw: Path, keyspace: str, sink: str, engine: str) -> Path:
    file = folder / f"{name}.yaml"
    file.write_text(
        f"name: {name}\n"
        f"source: {{type: cassandra_commitlog, cdc_raw: '{cdc_raw}', cluster: {cluster}, node: node1,"
        f" tables: [{keyspace}.every_type], processed_segments: keep,"
        " error_store: {type: file, path: errors.jsonl}}\n"
        f"sink: {sink}\n"
        f"checkpoint: {{type: file, path: ckpt-{name}, interval_ms: 300}}\n"
        f"engine: {engine}\n"
    )
    return file


def _run_until(*runs: tuple[Path, Callable[[], bool]], timeout_s: float = 400) -> None:
    """``cdcflow run`` of each pipeline file, side by side, each until its ``done``, then SIGTERM as
    an operator stops it: each must exit 0."""
    started = [(file, done, *start_logged(file)) for file, done in runs]
    try:
        deadline = time.monotonic() + timeout_s
        running = list(started)
        while running:
            for run in list(running):
                file, done, process, log = run
                if done():
                    process.send_signal(signal.SIGTERM)
                    running.remove(run)
                    continue
                assert process.poll() is None, "".join(log)[-3000:]
                assert time.monotonic() < deadline, f"timed out running {file.name}: {''.join(log)[-3000:]}"
            time.sleep(1)
        for _, _, process, log in started:
            process.wait(timeout=120)
            assert process.returncode == 0, "".join(log)[-3000:]
    finally:
        for _, _, process, _ in started:
            if process.poll() is None:
                process.kill()


def _records(bootstrap: str, prefix: str) -> list[Received]:
    topics = topics_with_prefix(bootstrap, f"{prefix}.")
    return read_topics(bootstrap, topics) if topics else []


Decode = Callable[[Received], tuple[dict[str, Any], dict[str, Any]]]


def _check_kafka(records: list[Received], decode: Decode, whole_records: bool) -> None:
    """Each change exact (key, op, values) in its key's order, and a tombstone after the delete."""
    ordered = sorted(records, key=lambda r: (r.partition, r.offset))
    changes = [r for r in ordered if r.value is not None]
    decoded = [decode(r) for r in changes]
    by_key: dict[str, list[dict[str, Any]]] = {}
    for value, key in decoded:
        by_key.setdefault(json.dumps(key), []).append(value)
    expected: dict[str, list[tuple[str, dict[str, Any] | None]]] = {}
    for op, key, image in _expected():
        after = image
        if image is not None and whole_records:  # an Avro record has every field: absent ones are null
            after = {c: _whole(c, image.get(c)) for c in ["k", *COLUMNS]}
        expected.setdefault(json.dumps(key), []).append((op, after))
    assert set(by_key) == set(expected)
    for key, values in by_key.items():
        assert [v["op"] for v in values] == [op for op, _ in expected[key]]
        for value, (_, after) in zip(values, expected[key], strict=True):
            assert same(value["after"], after), (value["after"], after)
    first_row = [r for r, (_, key) in zip(changes, decoded, strict=True) if key == {"k": 1}]
    field_update = first_row[2]  # SET u.zip = null, u.cost = 2.50
    assert json.loads(field_update.headers["cdc.removed"]) == {"u": ["zip"]}  # the field set to null, by name
    [delete] = [r for r, (v, _) in zip(changes, decoded, strict=True) if v["op"] == "d"]
    # The key's next record is the tombstone (other keys' may come between: it waits for the delete's report).
    following = [
        r for r in ordered if (r.partition, r.key) == (delete.partition, delete.key) and r.offset > delete.offset
    ]
    assert following and following[0].value is None  # the tombstone
    assert sum(r.value is None for r in ordered) == 1


def _whole(column: str, value: Any) -> Any:
    if column == "u" and value is not None:
        return {f: value.get(f) for f in ADDRESS_FIELDS}
    return value


def _json(record: Received) -> tuple[dict[str, Any], dict[str, Any]]:
    value, key = json.loads(record.value or b""), json.loads(record.key or b"")
    return connect_value(value["schema"], value["payload"]), connect_value(key["schema"], key["payload"])


def _avro_decoder(registry_url: str) -> Decode:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": registry_url, "timeout": 10})
    deserializer = AvroDeserializer(client)

    def read(data: bytes, field: str) -> dict[str, Any]:
        schema = json.loads(client.get_schema(int.from_bytes(data[1:5], "big")).schema_str)
        datum = deserializer(data, SerializationContext("t", field))
        result: dict[str, Any] = AvroReader(schema).read(datum)
        return result

    return lambda record: (read(record.value or b"", MessageField.VALUE), read(record.key or b"", MessageField.KEY))


# --- Parquet ------------------------------------------------------------------------------------------

_PARQUET_MAIN = {"street": "Main", "zip": 5, "cost": "9.99", "big": str(2**80)}  # nested decimals: exact text
_PARQUET_ROW = {
    **{c: v for c, (_, _, v) in BOUND.items()},
    "d": dt.date(2024, 2, 29),
    "ts": dt.datetime(2026, 11, 22, 12, 30, 45, 123000, tzinfo=UTC),
    "v": Decimal(2**70),  # decimal(38, 0)
    "vn": Decimal(-(2**100) + 7),
    "vh": str(10**40 + 1),  # more digits than a Parquet decimal: its exact text
    "fm": [("one", 1), ("two", 2)],
    "md": [(1, "1.50"), (2, "-2000")],
    "m": [(1, "one"), (2, "two")],
    "tp": {"f0": 7, "f1": "seven", "f2": "0.10"},
    "fu": _PARQUET_MAIN,
    "pl": {"label": "home", "home": _PARQUET_MAIN},
    "lu": [_PARQUET_MAIN],
    "mu": [("a", _PARQUET_MAIN)],
    "u": {"street": "Side", "zip": None, "cost": "1.5", "big": None},
}


def _check_parquet(rows: list[dict[str, Any]]) -> None:
    rows = sorted(rows, key=lambda r: r["source_ts_us"])
    assert [(r["op"], r["k"]) for r in rows] == [("c", 1), ("u", 1), ("u", 1), ("c", 2), ("d", 2)]
    differ = {c: (rows[0][c], _PARQUET_ROW[c]) for c in COLUMNS if not same(rows[0][c], _PARQUET_ROW[c])}
    assert not differ, differ
    # decimal columns whose values fix the scale are Parquet decimals: the values exactly
    assert same(rows[0]["de"], Decimal("-12345.678901234567890")) and same(
        rows[0]["dz"], Decimal("12345678901234567890.123456789")
    )
    nothing = dict.fromkeys(ADDRESS_FIELDS)
    assert rows[1]["u"] == {**nothing, "street": "Side street"}
    assert rows[2]["u"] == {**nothing, "cost": "2.50"}
    assert rows[3]["t"] == "two" and all(rows[4][c] is None for c in COLUMNS)


def test_every_cql_type_reaches_kafka_json_and_avro_and_parquet_exactly(
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
    json_prefix, avro_prefix = f"{topic_prefix}j", f"{topic_prefix}a"
    on_json = _pipeline(tmp_path, "json", json_prefix, cdc_raw_dir, keyspace, kafka + "}", "{type: worker}")
    avro_sink = kafka + f", converter: avro, schema_registry_url: '{registry_url}'}}"
    on_avro = _pipeline(tmp_path, "avro", avro_prefix, cdc_raw_dir, keyspace, avro_sink, "{type: worker}")
    out = tmp_path / "out"
    spark = "{type: spark, master: 'local[1]', trigger_interval_ms: 500}"
    parquet = _pipeline(
        tmp_path, "parquet", f"{topic_prefix}p", cdc_raw_dir, keyspace, "{type: parquet, path: out}", spark
    )

    def five_rows() -> bool:
        table = read_parquet_while_written(out)
        return table is not None and table.num_rows >= 5

    # The three pipelines side by side (each reads the segments on its own): Spark's start-up is
    # most of the time.
    _run_until(
        (on_json, lambda: len(_records(kafka_bootstrap, json_prefix)) >= 6),  # 5 changes, 1 tombstone
        (on_avro, lambda: len(_records(kafka_bootstrap, avro_prefix)) >= 6),
        (parquet, five_rows),
    )
    _check_kafka(_records(kafka_bootstrap, json_prefix), _json, whole_records=False)
    _check_kafka(_records(kafka_bootstrap, avro_prefix), _avro_decoder(registry_url), whole_records=True)
    _check_parquet(read_parquet(out).to_pylist())
    assert not (tmp_path / "errors.jsonl").exists()
