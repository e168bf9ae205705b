"""The built-in converters: ``json`` (Kafka Connect's schema+payload) and ``avro`` (Confluent wire format).

Both write events' exact values the way Debezium does (``decimal_handling``: see
:mod:`cdcflow.schemas`) and read them back into the same values (:mod:`cdcflow.wire_values`).
"""

from __future__ import annotations

import io
import json
import struct
import threading
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal

import fastavro
from pydantic import Field, model_validator

from cdcflow._avro_writer import AvroEncoder, avro_encoder, compiled_avro_writer
from cdcflow.batches import BatchTable, EncodedMessages, EventBatch
from cdcflow.contract import Converter, NestedPluginSection, PluginConfig, PluginContext
from cdcflow.errors import (
    ConfigError,
    ConverterError,
    IncompatibleSchemaError,
    SchemaRegistryError,
    SchemaRegistryUnavailableError,
)
from cdcflow.events import ChangeEvent, Record, SchemaChangeEvent
from cdcflow.jsontext import compiled_json_encoder, json_default, json_envelope
from cdcflow.prerequisites import CheckResult, PrerequisiteScope
from cdcflow.schemas import (
    DecimalHandling,
    avro_envelope_row,
    avro_key_schema,
    avro_value_schema,
    connect_key_schema,
    connect_value_schema,
    record_schema,
)
from cdcflow.wire_values import RowEncoder, Target, avro_decoder, column_encoders, connect_decoder, row_encoder

__all__ = [
    "AvroConverter",
    "AvroConverterConfig",
    "JsonConverter",
    "JsonConverterConfig",
    "SchemaRegistryClient",
    "converter_from_fields",
    "converter_plugin_sections",
    "json_default",
]

_DECIMAL_HANDLING_HELP = (
    "how decimals are written: precise (Debezium's VariableScaleDecimal: scale + unscaled bytes), "
    "double (may lose digits), string (exact plain text); varints are exact unless string (text)"
)


def _schema_cache_key(record: Record, part: str) -> tuple[Any, ...]:
    if isinstance(record, SchemaChangeEvent):
        return ("schema-change", part)
    fingerprint = record.schema.fingerprint if record.schema is not None else None
    if fingerprint is not None:
        return (fingerprint, None, record.envelope, part)
    # Schemaless events are inferred from their values: cache them by the schema read off them.
    return (record_schema(record).fingerprint, "inferred", record.envelope, part)


def _table_samples(batch: EventBatch) -> list[tuple[BatchTable, ChangeEvent | None]]:
    """Each table of ``batch`` with its first event there (None: none): one event stands for its
    table's schema, which is what the converters' caches and the registry key on."""
    samples: list[tuple[BatchTable, ChangeEvent | None]] = []
    for index, table in enumerate(batch.tables):
        first = batch.first_of_table(index)
        samples.append((table, None if first is None else batch.record(first)))
    return samples


def _source_head(table: BatchTable) -> tuple[str, str, str, str, str]:
    """The fixed fields of a table's source block, as the compiled core's batch encoders take them."""
    return (table.version, table.system, table.cluster, table.keyspace, table.table)


class _PayloadWriter:
    """An event's key or value payload with its values in the converter's form: a row encoder
    per (schema, part), and the payload untouched when no column needs it."""

    def __init__(self, decimal_handling: DecimalHandling, target: Target) -> None:
        self.decimal_handling = decimal_handling
        self.target = target

    def encoder(self, record: Record, part: str) -> RowEncoder | None:
        if not isinstance(record, ChangeEvent):
            return None
        schema = record_schema(record)
        columns = schema.key_columns if part == "key" else schema.value_columns
        return row_encoder(schema, columns, self.decimal_handling, self.target)

    def column_encoders(self, table: BatchTable, part: str) -> tuple[Any, ...]:
        """What :meth:`encoder` applies to each column of ``table``'s key or row, by position
        (None: written as it is): how a compact batch's values are rewritten."""
        schema = table.schema
        columns = schema.key_columns if part == "key" else schema.value_columns
        return column_encoders(schema, columns, self.decimal_handling, self.target)

    @staticmethod
    def payload(record: Record, part: str, encode: RowEncoder | None) -> Any:
        if encode is None:  # most tables: the payload as the record gives it
            return record.key_payload() if part == "key" else record.value_payload()
        try:
            return _encoded_payload(record, part, encode)
        except ConverterError as exc:
            raise ConverterError(f"record for {record.destination()}: {exc}") from exc


def _encoded_payload(record: Record, part: str, encode: RowEncoder) -> Any:
    if part == "key":
        return encode(record.key_payload())
    if not isinstance(record, ChangeEvent):
        return record.value_payload()
    if not record.envelope:
        return None if record.after is None else encode(record.after)
    return {
        "op": record.op.value,
        "before": None if record.before is None else encode(record.before),
        "after": None if record.after is None else encode(record.after),
        "source": record.source.to_payload(),
        "ts_ms": record.ts_ms,
    }


# --- json ----------------------------------------------------------------------------------


class JsonConverterConfig(PluginConfig):
    schemas_enable: bool = Field(default=True, description="wrap as {schema, payload} (seed 001); false: payload only")
    decimal_handling: DecimalHandling = Field(default="precise", description=_DECIMAL_HANDLING_HELP)


class JsonConverter(Converter[JsonConverterConfig]):
    """``json``: Debezium-style ``{"schema": ..., "payload": ...}``; bytes are base64 text."""

    type_name = "json"
    config_model = JsonConverterConfig

    def __init__(self, config: JsonConverterConfig, context: PluginContext) -> None:
        super().__init__(config, context)
        self._writers: dict[tuple[Any, ...], tuple[str, RowEncoder | None]] = {}
        self._payloads = _PayloadWriter(config.decimal_handling, "connect")
        self._decoders: dict[str, Any] = {}

    def _encode(self, record: Record, part: str) -> bytes | None:
        schema, encode = self._writer(record, part)
        payload = self._payloads.payload(record, part, encode)
        if payload is None:
            return None
        # The schema text is built once per table; only the payload is serialised per record.
        return json_envelope(payload, schema if self.config.schemas_enable else None)

    def _writer(self, record: Record, part: str) -> tuple[str, RowEncoder | None]:
        cache_key = _schema_cache_key(record, part)
        writer = self._writers.get(cache_key)
        if writer is None:
            builder = connect_key_schema if part == "key" else connect_value_schema
            schema = json.dumps(builder(record, self.config.decimal_handling), separators=(",", ":"))
            writer = self._writers[cache_key] = (schema, self._payloads.encoder(record, part))
        return writer

    @property
    def serializes_event_batches(self) -> bool:
        return compiled_json_encoder is not None  # batches are written by the compiled core's JSON encoder

    def serialize_event_batch(
        self, batch: EventBatch, destinations: Sequence[str], tombstones: bool
    ) -> EncodedMessages | None:
        plans: list[tuple[Any, ...] | None] = []
        for table, sample in _table_samples(batch):
            if sample is None:
                plans.append(None)
                continue
            key_schema, _ = self._writer(sample, "key")
            value_schema, _ = self._writer(sample, "value")
            with_schemas = self.config.schemas_enable
            plans.append(
                (
                    key_schema if with_schemas else None,
                    value_schema if with_schemas else None,
                    [c.name for c in table.schema.key_columns],
                    [c.name for c in table.schema.value_columns],
                    _source_head(table),
                    compiled_json_encoder,
                    # Values the converter rewrites (decimals, user types) are rewritten per value,
                    # but for decimals the compiled core holds: it writes those in this form.
                    self._payloads.column_encoders(table, "key"),
                    self._payloads.column_encoders(table, "value"),
                    self.config.decimal_handling,
                )
            )
        try:
            return EncodedMessages(*batch.events.encode_json(plans, tombstones))
        except ValueError:
            return None  # an event its columns do not describe, a value that does not fit: per record

    def serialize_key(self, record: Record, destination: str) -> bytes | None:
        return self._encode(record, "key")

    def serialize_value(self, record: Record, destination: str) -> bytes | None:
        return self._encode(record, "value")

    def deserialize(self, destination: str, data: bytes) -> dict[str, Any]:
        """The payload, with exact values again when the document carries its schema."""
        try:
            document = json.loads(data)
        except ValueError as exc:
            raise ConverterError(f"payload on {destination} is not JSON: {exc}") from exc
        if not isinstance(document, dict):
            raise ConverterError(f"payload on {destination} is {_json_kind(document)}, not an object")
        if not self.config.schemas_enable:
            payload = document
        elif "payload" not in document:
            raise ConverterError(
                f"payload on {destination} is a JSON object without a payload field: the json converter "
                'reads {"schema": ..., "payload": ...} (schemas_enable: false reads bare objects)'
            )
        else:
            payload = document["payload"]
            schema = document.get("schema")
            if isinstance(schema, dict) and isinstance(payload, dict):
                key = json.dumps(schema, separators=(",", ":"), sort_keys=True)
                decode = self._decoders.get(key)
                if decode is None:
                    decode = self._decoders[key] = connect_decoder(schema)
                try:
                    payload = decode(payload)
                except (ValueError, TypeError, KeyError) as exc:
                    raise ConverterError(f"payload on {destination} does not fit its schema: {exc}") from exc
        if not isinstance(payload, dict):
            raise ConverterError(
                f"payload on {destination} has a payload field that is {_json_kind(payload)}, not an object"
            )
        return payload


def _json_kind(value: Any) -> str:
    """What a decoded JSON value is, in words (for errors about records)."""
    kinds = {list: "a JSON array", str: "a JSON string", bool: "a JSON boolean", type(None): "JSON null"}
    return kinds.get(type(value), "a JSON number" if isinstance(value, int | float) else "a JSON object")


# --- schema registry -----------------------------------------------------------------------


class SchemaRegistryClient:
    """A Confluent-compatible schema registry, through confluent-kafka's client (basic auth, bearer
    tokens, TLS, caching): registers the schemas the avro converter writes, fetches writers'
    schemas by id. Errors become cdcflow's: :class:`~cdcflow.errors.IncompatibleSchemaError` for
    a refused schema, :class:`~cdcflow.errors.SchemaRegistryUnavailableError` (retried) when the
    registry cannot answer."""

    DEFAULT_TIMEOUT_S = 10.0

    def __init__(self, settings: dict[str, Any]) -> None:
        from confluent_kafka.schema_registry import SchemaRegistryClient as ConfluentClient

        # confluent-kafka waits forever without a timeout; a registry that hangs must not hang us.
        conf = {"timeout": self.DEFAULT_TIMEOUT_S, **settings}
        self.url = str(conf.get("url", ""))
        try:
            self._client = ConfluentClient(conf)
        except (ValueError, TypeError, OSError) as exc:  # OSError: an unreadable ssl.* file
            raise SchemaRegistryError(f"schema registry settings: {exc}") from None
        self._ids: dict[tuple[str, str], int] = {}
        self._schemas: dict[int, tuple[Any, Any]] = {}  # id -> (JSON form, parsed)
        self._lock = threading.Lock()

    def register(self, subject: str, schema: dict[str, Any]) -> int:
        """The id of ``schema`` under ``subject``, registering it if the subject lacks it."""
        from confluent_kafka.schema_registry import Schema

        text = json.dumps(schema, separators=(",", ":"))
        with self._lock:
            known = self._ids.get((subject, text))
        if known is not None:
            return known
        schema_id = int(
            self._call(
                f"registering a schema under {subject}", self._client.register_schema, subject, Schema(text, "AVRO")
            )
        )
        with self._lock:
            self._ids[(subject, text)] = schema_id
            self._schemas[schema_id] = (schema, fastavro.parse_schema(schema))
        return schema_id

    def compatibility(self) -> str:
        """The registry's global compatibility rule (``BACKWARD``, ``NONE``...), which decides what
        a new version of a subject may change."""
        return str(self._call("reading the compatibility rule", self._client.get_compatibility))

    def schema(self, schema_id: int) -> tuple[Any, Any]:
        """A writer's schema by id: its JSON form and fastavro's parsed form."""
        with self._lock:
            known = self._schemas.get(schema_id)
        if known is None:
            found = self._call(f"fetching schema {schema_id}", self._client.get_schema, schema_id)
            document = json.loads(found.schema_str)
            known = (document, fastavro.parse_schema(document))
            with self._lock:
                self._schemas[schema_id] = known
        return known

    def _call(self, what: str, call: Any, *args: Any) -> Any:
        from confluent_kafka.schema_registry.error import SchemaRegistryError as ConfluentError

        try:
            return call(*args)
        except ConfluentError as exc:
            status, code, message = exc.http_status_code, exc.error_code, exc.error_message
            text = f"schema registry {self.url}: {what}: HTTP {status}, error {code}: {message}"
            if status == 409:
                raise IncompatibleSchemaError(text) from exc
            if status in (401, 403, 408, 429) or status >= 500:
                raise SchemaRegistryUnavailableError(text) from exc
            raise SchemaRegistryError(text) from exc
        except (OSError, ValueError) as exc:
            raise SchemaRegistryError(f"schema registry {self.url}: {what}: {exc}") from exc
        except Exception as exc:  # httpx's transport errors: connection refused, timeouts
            if type(exc).__module__.startswith(("httpx", "httpcore")):
                raise SchemaRegistryUnavailableError(f"schema registry {self.url} unreachable: {what}: {exc}") from exc
            raise


# --- avro ----------------------------------------------------------------------------------

_WIRE_HEADER = struct.Struct(">bI")  # magic byte 0, then the 4-byte schema id
# What a datum that does not fit its schema raises, whichever writer encodes it.
_DOES_NOT_FIT = (ValueError, TypeError, KeyError, AttributeError, ArithmeticError, RecursionError, struct.error)

SubjectNameStrategy = Literal["topic", "record", "topic_record"]


class AvroConverterConfig(PluginConfig):
    schema_registry_url: str | None = Field(
        default=None, description="registry base URL (short for schema_registry.url)"
    )
    schema_registry: dict[str, str | int | float | bool] = Field(
        default_factory=dict,
        description="confluent-kafka SchemaRegistryClient settings: url, basic.auth.user.info, "
        "bearer.auth.credentials.source, bearer.auth.token, bearer.auth.logical.cluster, "
        "ssl.ca.location, ssl.certificate.location, ssl.key.location, timeout (s, default 10), cache.capacity...",
    )
    subject_name_strategy: SubjectNameStrategy = Field(
        default="topic",
        description="topic: <topic>-key/-value; record: the record's full name; topic_record: <topic>-<record name>",
    )
    decimal_handling: DecimalHandling = Field(default="precise", description=_DECIMAL_HANDLING_HELP)

    @model_validator(mode="after")
    def _registry_url_is_set(self) -> AvroConverterConfig:
        if not (self.schema_registry_url or self.schema_registry.get("url")):
            raise ValueError("the avro converter needs schema_registry_url (or schema_registry: {url: ...})")
        return self

    def registry_settings(self) -> dict[str, Any]:
        settings: dict[str, Any] = dict(self.schema_registry)
        if self.schema_registry_url:
            settings.setdefault("url", self.schema_registry_url)
        return settings


class AvroConverter(Converter[AvroConverterConfig]):
    """``avro``: Avro binary in the Confluent wire format, each schema registered under the subject
    ``subject_name_strategy`` names (``<topic>-key`` and ``<topic>-value`` by default)."""

    type_name = "avro"
    config_model = AvroConverterConfig

    def __init__(self, config: AvroConverterConfig, context: PluginContext) -> None:
        super().__init__(config, context)
        try:  # an unknown setting or a missing bearer field stops the start, naming the setting
            self._registry = SchemaRegistryClient(config.registry_settings())
        except SchemaRegistryError as exc:
            where = f"{context.field_path}.schema_registry" if context.field_path else "schema_registry"
            raise ConfigError(f"{context.pipeline_file}: {where}: {exc}") from None
        self._encoders: dict[tuple[Any, ...], tuple[AvroEncoder, RowEncoder | None]] = {}
        self._payloads = _PayloadWriter(config.decimal_handling, "avro")
        self._decoders: dict[int, Any] = {}

    @property
    def registry(self) -> SchemaRegistryClient:
        return self._registry

    def check_prerequisites(self, scope: PrerequisiteScope) -> Sequence[CheckResult]:
        """The registry answers, and its compatibility rule lets a table's schema evolve safely: a
        column added or dropped is a compatible change under every rule but ``NONE``, which lets
        any schema through, one that readers of older records cannot read included."""
        if not scope.thorough:  # the first registration tells soon enough
            return ()
        check = f"schema registry {self._registry.url}"
        try:
            rule = self._registry.compatibility()
        except SchemaRegistryError as exc:
            return [
                CheckResult.fail(check, str(exc), "start the registry, or fix schema_registry_url and its credentials")
            ]
        if rule.upper() == "NONE":
            return [
                CheckResult.warn(
                    check,
                    "compatibility NONE: the registry takes any new schema, one older records' readers cannot read",
                    "set the registry's compatibility to BACKWARD (its usual default) or stricter",
                )
            ]
        return [CheckResult.ok(check, f"reachable, compatibility {rule}")]

    def subject(self, destination: str, part: str, schema: dict[str, Any]) -> str:
        """The registry subject a schema is registered under (Confluent's subject name strategies)."""
        strategy = self.config.subject_name_strategy
        if strategy == "topic":
            return f"{destination}-{part}"
        name = schema["name"] if "." in schema["name"] else f"{schema.get('namespace', '')}.{schema['name']}"
        name = name.lstrip(".")
        return name if strategy == "record" else f"{destination}-{name}"

    def _encoder(self, record: Record, part: str, destination: str) -> tuple[AvroEncoder, RowEncoder | None]:
        cache_key = (*_schema_cache_key(record, part), destination)
        encoder = self._encoders.get(cache_key)
        if encoder is None:
            builder = avro_key_schema if part == "key" else avro_value_schema
            schema = builder(record, self.config.decimal_handling)
            schema_id = self.registry.register(self.subject(destination, part, schema), schema)
            encoder = (avro_encoder(schema, _WIRE_HEADER.pack(0, schema_id)), self._payloads.encoder(record, part))
            self._encoders[cache_key] = encoder
        return encoder

    def _encode(self, encoder: AvroEncoder, part: str, destination: str, payload: Any) -> bytes:
        try:
            return encoder.encode(payload)
        except _DOES_NOT_FIT as exc:
            raise ConverterError(f"record for {destination} does not fit its Avro {part} schema: {exc}") from exc

    def serialize_key(self, record: Record, destination: str) -> bytes | None:
        encoder, encode = self._encoder(record, "key", destination)
        return self._encode(encoder, "key", destination, self._payloads.payload(record, "key", encode))

    def serialize_value(self, record: Record, destination: str) -> bytes | None:
        encoder, encode = self._encoder(record, "value", destination)
        if encoder.takes_rows and isinstance(record, ChangeEvent) and record.envelope:
            # The compiled writer takes the envelope as a row: no envelope dicts built per event.
            try:
                row = avro_envelope_row(record, encode)
            except ConverterError as exc:
                raise ConverterError(f"record for {record.destination()}: {exc}") from exc
            return self._encode(encoder, "value", destination, row)
        payload = self._payloads.payload(record, "value", encode)
        if payload is None:
            return None
        return self._encode(encoder, "value", destination, payload)

    @property
    def serializes_event_batches(self) -> bool:
        return compiled_avro_writer() is not None  # batches are encoded by the compiled core's writers

    def serialize_event_batch(
        self, batch: EventBatch, destinations: Sequence[str], tombstones: bool
    ) -> EncodedMessages | None:
        plans: list[tuple[Any, ...] | None] = []
        for index, (table, sample) in enumerate(_table_samples(batch)):
            if sample is None:
                plans.append(None)
                continue
            key, _ = self._encoder(sample, "key", destinations[index])
            value, _ = self._encoder(sample, "value", destinations[index])
            if key.native is None or value.native is None:
                return None  # the pure-Python writer: per record
            plans.append(
                (
                    key.native,
                    key.prefix,
                    value.native,
                    value.prefix,
                    _source_head(table),
                    # Values the converter rewrites (decimals, user types) are rewritten per value.
                    self._payloads.column_encoders(table, "key"),
                    self._payloads.column_encoders(table, "value"),
                )
            )
        try:
            return EncodedMessages(*batch.events.encode_avro(plans, tombstones))
        except ValueError:
            return None  # an event that does not fit its schema: the per-record path rejects it

    def deserialize(self, destination: str, data: bytes) -> dict[str, Any]:
        """The payload read with the writer's schema, its values as the event carried them."""
        if len(data) < _WIRE_HEADER.size or data[0] != 0:
            raise ConverterError(f"payload on {destination} is not in the Confluent Avro wire format")
        _, schema_id = _WIRE_HEADER.unpack_from(data)
        document, parsed = self.registry.schema(schema_id)
        try:
            decoded = fastavro.schemaless_reader(io.BytesIO(data[_WIRE_HEADER.size :]), parsed, None)
        except (ValueError, EOFError, IndexError) as exc:
            raise ConverterError(f"payload on {destination} does not decode with schema {schema_id}: {exc}") from exc
        if not isinstance(decoded, dict):
            raise ConverterError(f"payload on {destination} is not an Avro record")
        decode = self._decoders.get(schema_id)
        if decode is None:
            decode = self._decoders[schema_id] = avro_decoder(document)
        result: dict[str, Any] = decode(decoded)
        return result


CONVERTER_SHORTCUTS = ("schema_registry_url", "schema_registry", "subject_name_strategy", "decimal_handling")
"""Converter settings a sink or source may write beside ``converter`` (``converter: avro`` with
``schema_registry_url`` next to it)."""


def converter_from_fields(
    converter: str | dict[str, Any],
    schema_registry_url: str | None,
    context: PluginContext,
    **shortcuts: Any,
) -> Converter[Any]:
    """The converter a plugin's ``converter`` field names, with the :data:`CONVERTER_SHORTCUTS`
    written beside it (``schema_registry_url``, ``decimal_handling``...) filled in where the
    converter takes them and the ``converter`` section does not set them."""
    if context.factory is None:
        raise ConverterError("building a converter needs the plugin registry in the plugin context")
    section, _ = _converter_section(converter, {"schema_registry_url": schema_registry_url, **shortcuts})
    path = f"{context.field_path}.converter" if context.field_path else "converter"
    return context.factory.create_converter(section, replace(context, field_path=path))


def converter_plugin_sections(
    model: type[PluginConfig], plugin_section: Mapping[str, Any]
) -> list[NestedPluginSection]:
    """The converter section a plugin builds with :func:`converter_from_fields`, from its section
    as the file holds it: ``converter`` (else the field's default) and the
    :data:`CONVERTER_SHORTCUTS` the plugin's ``model`` has beside it. What such a plugin's
    ``nested_plugin_sections`` returns, so that its converter's mistakes are reported with the
    rest of the file."""
    fields = model.model_fields
    converter = plugin_section.get("converter", fields["converter"].default)
    if not isinstance(converter, str | Mapping):
        return []  # not a converter at all: the plugin's own model says so
    beside = {name: plugin_section.get(name) for name in CONVERTER_SHORTCUTS if name in fields}
    section, filled = _converter_section(converter, beside)
    written_at = {name: (name,) for name in filled}
    if isinstance(converter, str):
        written_at["type"] = ("converter",)
    return [NestedPluginSection("converter", "converter", section, written_at)]


def _converter_section(
    converter: str | Mapping[str, Any], beside: Mapping[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """``converter`` as a section, with the settings ``beside`` it that the converter takes and
    the section does not set; and the names of those filled in."""
    section: dict[str, Any] = {"type": converter} if isinstance(converter, str) else dict(converter)
    accepted = _converter_fields(section.get("type"))
    filled = []
    for name, value in beside.items():
        if value is not None and value != {} and name in accepted and name not in section:
            section[name] = value
            filled.append(name)
    return section, filled


def _converter_fields(type_name: Any) -> set[str]:
    models: dict[str, type[PluginConfig]] = {"json": JsonConverterConfig, "avro": AvroConverterConfig}
    model = models.get(str(type_name))
    if model is not None:
        return set(model.model_fields)
    return {"schema_registry_url"}  # a third-party converter gets the registry URL, as it always did
