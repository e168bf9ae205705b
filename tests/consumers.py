"""How a consumer that knows only the wire formats reads cdcflow's records back into values.

Written from the formats' documentation, independently of ``cdcflow.wire_values``: Kafka
Connect's JSON converter (bytes in base64, maps with non-text keys as ``[key, value]`` pairs,
``org.apache.kafka.connect.data.Decimal``), Debezium's ``io.debezium.data.VariableScaleDecimal``
(a scale and the unscaled two's-complement bytes) and Avro as fastavro (through confluent-kafka's
``AvroDeserializer``) returns it. Tests compare what these give with what was written, exactly
(:func:`same`: a decimal's scale, an int's type and a map's order count).
"""

from __future__ import annotations

import base64
import datetime as dt
import uuid
from collections.abc import Mapping
from decimal import Context, Decimal
from typing import Any

_EXACT = Context(prec=100_000)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _scaled(unscaled: int, scale: int) -> Decimal:
    return Decimal(unscaled).scaleb(-scale, _EXACT)


def connect_value(schema: Mapping[str, Any], value: Any) -> Any:
    """A Kafka Connect JSON payload value, read with its schema."""
    if value is None:
        return None
    kind, name = schema["type"], schema.get("name")
    if kind == "bytes":
        raw = base64.b64decode(value)
        if name == "org.apache.kafka.connect.data.Decimal":
            scale = int(schema["parameters"]["scale"])
            unscaled = int.from_bytes(raw, "big", signed=True)
            return unscaled if scale == 0 else _scaled(unscaled, scale)
        return raw
    if kind == "struct":
        if name == "io.debezium.data.VariableScaleDecimal":
            return _scaled(int.from_bytes(base64.b64decode(value["value"]), "big", signed=True), value["scale"])
        return {f["field"]: connect_value(f, value[f["field"]]) for f in schema["fields"] if f["field"] in value}
    if kind == "array":
        return [connect_value(schema["items"], v) for v in value]
    if kind == "map":
        if schema["keys"]["type"] == "string":
            return {k: connect_value(schema["values"], v) for k, v in value.items()}
        pairs = [(connect_value(schema["keys"], k), connect_value(schema["values"], v)) for k, v in value]
        try:
            return dict(pairs)
        except TypeError:  # keys that are structs or arrays: cdcflow's events hold such maps as entries
            return [{"key": k, "value": v} for k, v in pairs]
    return value


class AvroReader:
    """Values fastavro decoded with a writer's schema (its JSON form), read the way the schema says."""

    def __init__(self, schema: Any) -> None:
        self.schema = schema
        self.named: dict[str, Any] = {}
        self._declare(schema, "")

    def _declare(self, schema: Any, namespace: str) -> None:
        """Every named record, by full name: later fields refer to them by name."""
        if isinstance(schema, list):
            for branch in schema:
                self._declare(branch, namespace)
        elif isinstance(schema, Mapping):
            kind = schema["type"]
            if kind == "record":
                namespace = schema.get("namespace", namespace)
                self.named[f"{namespace}.{schema['name']}".strip(".")] = schema
                for field in schema["fields"]:
                    self._declare(field["type"], namespace)
            elif kind == "array":
                self._declare(schema["items"], namespace)
            elif kind == "map":
                self._declare(schema["values"], namespace)
            elif isinstance(kind, dict | list):
                self._declare(kind, namespace)

    def read(self, value: Any) -> Any:
        return self.value(self.schema, value, "")

    def value(self, schema: Any, value: Any, namespace: str) -> Any:
        if value is None:
            return None
        if isinstance(schema, str):
            full = schema if "." in schema else f"{namespace}.{schema}".strip(".")
            if full in self.named:
                return self.value(self.named[full], value, full.rpartition(".")[0])
            return value
        if isinstance(schema, list):
            (branch,) = [b for b in schema if b != "null"]
            return self.value(branch, value, namespace)
        logical = schema.get("logicalType")
        if logical == "timestamp-millis":
            return (value - _EPOCH) // dt.timedelta(milliseconds=1)
        if logical == "uuid":
            return str(value) if isinstance(value, uuid.UUID) else value
        if logical == "decimal":
            return int(value) if schema.get("scale", 0) == 0 else value
        kind = schema["type"]
        if kind == "record":
            record_namespace = schema.get("namespace", namespace)
            if schema.get("connect.name") == "io.debezium.data.VariableScaleDecimal":
                return _scaled(int.from_bytes(value["value"], "big", signed=True), value["scale"])
            return {f["name"]: self.value(f["type"], value[f["name"]], record_namespace) for f in schema["fields"]}
        if kind == "array":
            items = schema["items"]
            if isinstance(items, Mapping) and items.get("connect.internal.type") == "MapEntry":
                entry_namespace = items.get("namespace", namespace)
                types = {f["name"]: f["type"] for f in items["fields"]}
                pairs = [
                    (
                        self.value(types["key"], e["key"], entry_namespace),
                        self.value(types["value"], e["value"], entry_namespace),
                    )
                    for e in value
                ]
                try:
                    return dict(pairs)
                except TypeError:  # keys that are records or arrays: cdcflow's events hold such maps as entries
                    return [{"key": k, "value": v} for k, v in pairs]
            return [self.value(items, v, namespace) for v in value]
        if kind == "map":
            return {k: self.value(schema["values"], v, namespace) for k, v in value.items()}
        if isinstance(kind, dict | list):
            return self.value(kind, value, namespace)
        return value


def same(a: Any, b: Any) -> bool:
    """Equal, and of the same type all the way down: ``Decimal("1.50")`` is not ``Decimal("1.5")``,
    ``True`` is not ``1``, maps keep their order."""
    if type(a) is not type(b):
        return False
    if isinstance(a, Decimal):
        return a.as_tuple() == b.as_tuple()
    if isinstance(a, dict):
        return list(a) == list(b) and all(
            same(k, kb) and same(v, b[kb]) for (k, v), kb in zip(a.items(), b, strict=True)
        )
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)
