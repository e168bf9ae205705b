"""What exact types cost the converters, per event, side by side with a peer in one run.

Two tables: datagen's (bigint, text, double: nothing to rewrite, the converters' fast path) and a
typed one (decimals, varints, a user type with a decimal, a list of user types, a map of decimals).
For each: the json converter, and the avro converter's work per record (the value rewrite plus
the Avro writer the converter uses: the compiled core's, taking the envelope as a row, when it is
built, else cdcflow's generated Python writer) against the same rewrite plus fastavro's writer
(the peer), as a ratio. No registry is involved: the Avro schema is built as the converter builds
it. ``CDCFLOW_PURE_PYTHON=1`` measures the pure-Python core.

    python benchmarks/typed_values.py [--events 20000]
"""

from __future__ import annotations

import argparse
import io
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro

from cdcflow._avro_writer import avro_encoder
from cdcflow.contract import PluginContext
from cdcflow.converters import JsonConverter, JsonConverterConfig
from cdcflow.events import ChangeEvent, Column, Op, RowSchema, SourceInfo, UserType
from cdcflow.native import core_description
from cdcflow.schemas import avro_envelope_row, avro_value_schema
from cdcflow.wire_values import row_encoder

SOURCE = SourceInfo("cassandra", "c1", "shop", "t", "node1", {"segment": 1, "position": 7, "index": 0}, 1_700_000_000)
KEY = (Column("id", "bigint", False),)
DATAGEN = RowSchema(
    "c1.shop.orders",
    KEY,
    (*KEY, Column("seq", "bigint"), Column("name", "text"), Column("amount", "double"), Column("payload", "text")),
)
ADDRESS = UserType("address", (("street", "text"), ("zip", "int"), ("cost", "decimal")))
TYPED = RowSchema(
    "c1.shop.ledger",
    KEY,
    (
        *KEY,
        Column("amount", "decimal"),
        Column("fee", "decimal"),
        Column("big", "varint"),
        Column("home", "frozen<address>"),
        Column("stops", "list<frozen<address>>"),
        Column("rates", "map<int, decimal>"),
        Column("note", "text"),
    ),
    user_types=(ADDRESS,),
)


def _events(schema: RowSchema, count: int) -> list[ChangeEvent]:
    events = []
    for n in range(count):
        if schema is DATAGEN:
            row: dict[str, Any] = {
                "id": n,
                "seq": n,
                "name": f"customer-{n % 1000}",
                "amount": n / 7,
                "payload": "x" * 64,
            }
        else:
            address = {"street": f"street {n}", "zip": n % 99999, "cost": Decimal(n) / 100}
            row = {
                "id": n,
                "amount": Decimal(f"{n}.{n % 1000:03d}"),
                "fee": Decimal("-12345.678901234567890"),
                "big": 2**70 + n,
                "home": address,
                "stops": [address, address],
                "rates": {1: Decimal("1.50"), 2: Decimal(n)},
                "note": "x" * 32,
            }
        events.append(ChangeEvent(Op.UPDATE, {"id": n}, None, row, SOURCE, 1_700_000_000_000, schema))
    return events


def _per_event_us(work: Any, events: list[ChangeEvent]) -> float:
    started = time.perf_counter()
    for event in events:
        work(event)
    return (time.perf_counter() - started) / len(events) * 1e6


def _avro_work(schema: RowSchema, compiled: bool) -> Any:
    probe = ChangeEvent(Op.UPDATE, {"id": 0}, None, {}, SOURCE, 0, schema)
    avro = avro_value_schema(probe)
    encode = row_encoder(schema, schema.value_columns, "precise", "avro")
    encoder = avro_encoder(avro)
    parsed = fastavro.parse_schema(avro)

    def payload(event: ChangeEvent) -> Any:
        value = event.value_payload()
        assert value is not None
        if encode is not None:
            value["after"] = encode(value["after"])
        return value

    def with_compiled(event: ChangeEvent) -> bytes:
        if encoder.takes_rows:  # as the converter does: the envelope as a row, no payload dicts
            return encoder.encode(avro_envelope_row(event, encode))
        return encoder.encode(payload(event))

    def with_fastavro(event: ChangeEvent) -> bytes:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, payload(event))
        return out.getvalue()

    return with_compiled if compiled else with_fastavro


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=20_000)
    args = parser.parse_args()
    json_converter = JsonConverter(JsonConverterConfig(type="json"), PluginContext("bench", Path("bench.yaml")))
    print(f"core: {core_description()}")
    print(f"{'table':10} {'json µs':>8} {'avro µs (cdcflow)':>18} {'avro µs (fastavro)':>19} {'ratio':>6}")
    for name, schema in (("datagen", DATAGEN), ("typed", TYPED)):
        events = _events(schema, args.events)
        for warm in events[:500]:  # build the caches (schemas, writers) outside the timing
            json_converter.serialize_value(warm, "t")
        json_us = _per_event_us(lambda e: json_converter.serialize_value(e, "t"), events)
        ours = _per_event_us(_avro_work(schema, compiled=True), events)
        peer = _per_event_us(_avro_work(schema, compiled=False), events)
        print(f"{name:10} {json_us:8.1f} {ours:18.1f} {peer:19.1f} {peer / ours:5.2f}x")


if __name__ == "__main__":
    main()
