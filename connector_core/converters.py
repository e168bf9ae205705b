"""The built-in converters: ``json`` (Kafka Connect's schema+payload) and ``avro`` (Confluent wire format)."""

from __future__ import annotations

import io
import json
import struct
import threading
from dataclasses import replace
from typing import Any

import fastavro
import requests
from pydantic import Field

from cdcflow._avro_writer import AvroEncoder, avro_encoder
from cdcflow.contract import Converter, PluginConfig, PluginContext
from cdcflow.errors import ConverterError, SchemaRegistryError
from cdcflow.events import ChangeEvent, Record, SchemaChangeEvent
from cdcflow.jsontext import json_default, json_envelope
from cdcflow.schemas import (
    avro_envelope_row,
    avro_key_schema,
    avro_value_schema,
    connect_key_schema,
    connect_value_schema,
)

__all__ = [
    "AvroConverter",
    "AvroConverterConfig",
    "JsonConverter",
    "JsonConverterConfig",
    "SchemaRegistryClient",
    "converter_from_fields",
    "json_default",
]


def _schema_cache_key(record: Record, part: str) -> tuple[Any, ...]:
    if isinstance(record, SchemaChangeEvent):
        return ("schema-change", part)
    fingerprint = record.schema.fingerprint if record.schema is not None else None
    if fingerprint is not None:
        return (fingerprint, None, record.envelope, part)
    # Schemaless events are inferred from their values: cache them by the columns they carry and
    # their values' types (a column null in one record and a number in the next has two schemas).
    row = record.after or record.before or {}
    shape = (
        tuple((name, type(value)) for name, value in record.key.items()),
        tuple((name, type(value)) for name, value in row.items()),
    )
    return (None, shape, record.envelope, part)


# --- json ----------------------------------------------------------------------------------


class JsonConverterConfig(PluginConfig):
    schemas_enable: bool = Field(default=True, description="wrap as {schema, payload} (seed 001); false: payload only")


class JsonConverter(Converter[JsonConverterConfig]):
    """``json``: Debezium-style ``{"schema": ..., "payload": ...}``; bytes are base64 text."""

    type_name = "json"
    config_model = JsonConverterConfig

    def __init__(self, config: JsonConverterConfig, context: PluginContext) -> None:
        super().__init__(config, context)
        self._schema_text: dict[tuple[Any, ...], str] = {}

    def _encode(self, record: Record, part: str, payload: Any) -> bytes:
        if not self.config.schemas_enable:
            return json_envelope(payload, None)
        cache_key = _schema_cache_key(record, part)
        schema = self._schema_text.get(cache_key)
        if schema is None:
            builder = connect_key_schema if part == "key" else connect_value_schema
            schema = json.dumps(builder(record), separators=(",", ":"))
            self._schema_text[cache_key] = schema
        # The schema text is built once per table; only the payload is serialised per record.
        return json_envelope(payload, schema)

    def serialize_key(self, record: Record, destination: str) -> bytes | None:
        return self._encode(record, "key", record.key_payload())

    def serialize_value(self, record: Record, destination: str) -> bytes | None:
        payload = record.value_payload()
        return None if payload is None else self._encode(record, "value", payload)

    def deserialize(self, destination: str, data: bytes) -> dict[str, Any]:
        try:
            document = json.loads(data)
        except ValueError as exc:
            raise ConverterError(f"payload on {destination} is not JSON: {exc}") from exc
        payload = document.get("payload") if self.config.schemas_enable and isinstance(document, dict) else document
        if not isinstance(payload, dict):
            raise ConverterError(f"payload on {destination} has no object payload")
        return payload


# --- schema registry -----------------------------------------------------------------------


class SchemaRegistryClient:
    """The part of the Confluent Schema Registry REST API the avro converter needs."""

    def __init__(self, url: str, timeout_s: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self._session = requests.Session()
        self._session.headers["Content-Type"] = "application/vnd.schemaregistry.v1+json"
        self._ids: dict[tuple[str, str], int] = {}
        self._schemas: dict[int, Any] = {}
        self._lock = threading.Lock()

    def register(self, subject: str, schema: dict[str, Any]) -> int:
        text = json.dumps(schema, sort_keys=True, separators=(",", ":"))
        with self._lock:
            known = self._ids.get((subject, text))
        if known is not None:
            return known
        answer = self._call("POST", f"/subjects/{subject}/versions", {"schema": text})
        schema_id = int(answer["id"])
        with self._lock:
            self._ids[(subject, text)] = schema_id
            self._schemas[schema_id] = fastavro.parse_schema(schema)
        return schema_id

    def parsed_schema(self, schema_id: int) -> Any:
        with self._lock:
            parsed = self._schemas.get(schema_id)
        if parsed is None:
            answer = self._call("GET", f"/schemas/ids/{schema_id}", None)
            parsed = fastavro.parse_schema(json.loads(answer["schema"]))
            with self._lock:
                self._schemas[schema_id] = parsed
        return parsed

    def _call(self, method: str, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
        try:
            response = self._session.request(method, self.url + path, json=body, timeout=self.timeout_s)
        except requests.RequestException as exc:
            raise SchemaRegistryError(f"schema registry {self.url} unreachable: {exc}") from exc
        if response.status_code >= 400:
            raise SchemaRegistryError(
                f"schema registry {self.url}{path} answered {response.status_code}: {response.text[:500]}"
            )
        result: dict[str, Any] = response.json()
        return result


# --- avro ----------------------------------------------------------------------------------

_WIRE_HEADER = struct.Struct(">bI")  # magic byte 0, then the 4-byte schema id
# What a datum that does not fit its schema raises, whichever writer encodes it.
_DOES_NOT_FIT = (ValueError, TypeError, KeyError, AttributeError, ArithmeticError, RecursionError, struct.error)


class AvroConverterConfig(PluginConfig):
    schema_registry_url: str = Field(description="Confluent-compatible schema registry base URL")


class AvroConverter(Converter[AvroConverterConfig]):
    """``avro``: Avro binary in the Confluent wire format, schemas registered under
    ``<topic>-key`` and ``<topic>-value`` (the topic-name strategy)."""

    type_name = "avro"
    config_model = AvroConverterConfig

    def __init__(self, config: AvroConverterConfig, context: PluginContext) -> None:
        super().__init__(config, context)
        self.registry = SchemaRegistryClient(config.schema_registry_url)
        self._encoders: dict[tuple[Any, ...], AvroEncoder] = {}

    def _encoder(self, record: Record, part: str, destination: str) -> AvroEncoder:
        cache_key = (*_schema_cache_key(record, part), destination)
        encoder = self._encoders.get(cache_key)
        if encoder is None:
            schema = avro_key_schema(record) if part == "key" else avro_value_schema(record)
            schema_id = self.registry.register(f"{destination}-{part}", schema)
            encoder = self._encoders[cache_key] = avro_encoder(schema, _WIRE_HEADER.pack(0, schema_id))
        return encoder

    def _encode(self, encoder: AvroEncoder, part: str, destination: str, payload: Any) -> bytes:
        try:
            return encoder.encode(payload)
        except _DOES_NOT_FIT as exc:
            raise ConverterError(f"record for {destination} does not fit its Avro {part} schema: {exc}") from exc

    def serialize_key(self, record: Record, destination: str) -> bytes | None:
        return self._encode(self._encoder(record, "key", destination), "key", destination, record.key_payload())

    def serialize_value(self, record: Record, destination: str) -> bytes | None:
        encoder = self._encoder(record, "value", destination)
        if encoder.takes_rows and isinstance(record, ChangeEvent) and record.envelope:
            # The compiled writer takes the envelope as a row: no dicts built per event.
            return self._encode(encoder, "value", destination, avro_envelope_row(record))
        payload = record.value_payload()
        if payload is None:
            return None
        return self._encode(encoder, "value", destination, payload)

    def deserialize(self, destination: str, data: bytes) -> dict[str, Any]:
        if len(data) < _WIRE_HEADER.size or data[0] != 0:
            raise ConverterError(f"payload on {destination} is not in the Confluent Avro wire format")
        _, schema_id = _WIRE_HEADER.unpack_from(data)
        parsed = self.registry.parsed_schema(schema_id)
        try:
            decoded = fastavro.schemaless_reader(io.BytesIO(data[_WIRE_HEADER.size :]), parsed, None)
        except (ValueError, EOFError, IndexError) as exc:
            raise ConverterError(f"payload on {destination} does not decode with schema {schema_id}: {exc}") from exc
        if not isinstance(decoded, dict):
            raise ConverterError(f"payload on {destination} is not an Avro record")
        return decoded


def converter_from_fields(
    converter: str | dict[str, Any], schema_registry_url: str | None, context: PluginContext
) -> Converter[Any]:
    """The converter a plugin's ``converter`` (+ ``schema_registry_url``) fields name.

    ``converter: avro`` with ``schema_registry_url`` beside it is the short form of
    ``converter: {type: avro, schema_registry_url: ...}``; any registered converter type works.
    """
    if context.factory is None:
        raise ConverterError("building a converter needs the plugin registry in the plugin context")
    section: str | dict[str, Any] = converter
    if isinstance(section, str) and schema_registry_url is not None:
        section = {"type": section, "schema_registry_url": schema_registry_url}
    path = f"{context.field_path}.converter" if context.field_path else "converter"
    return context.factory.create_converter(section, replace(context, field_path=path))
