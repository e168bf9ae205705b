"""The one Spark row shape every cdcflow stream has, whatever its source and tables.

A stream mixes tables whose columns differ, and Spark fixes a stream's schema when the query
starts, so rows carry the envelope as columns and the row images as JSON text together with the
table's schema (``row_schema``). Sinks that want typed columns (``parquet``) parse the images per
table with that schema; sinks that want the cdcflow record back (every other sink) unpickle
``record``, which is only filled when such a sink runs.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import Any

from cdcflow.events import ChangeEvent, Record, RowSchema, SchemaChangeEvent
from cdcflow.jsontext import compact_json

__all__ = [
    "STREAM_COLUMNS",
    "STREAM_SCHEMA_DDL",
    "record_from_row",
    "record_to_row",
    "stream_arrow_batch",
    "stream_arrow_schema",
]

STREAM_COLUMNS: tuple[tuple[str, str], ...] = (
    ("kind", "string"),  # change | schema_change
    ("op", "string"),
    ("destination", "string"),
    ("system", "string"),
    ("cluster", "string"),
    ("keyspace", "string"),
    ("table", "string"),
    ("source_partition", "string"),
    ("source_position", "string"),
    ("source_ts_us", "bigint"),
    ("snapshot", "boolean"),
    ("ts_ms", "bigint"),
    ("key", "string"),
    ("before", "string"),
    ("after", "string"),
    ("row_schema", "string"),
    ("ddl", "string"),
    ("headers", "map<string,string>"),
    ("record", "binary"),
)
STREAM_SCHEMA_DDL = ", ".join(f"`{name}` {kind}" for name, kind in STREAM_COLUMNS)


def stream_arrow_schema() -> Any:
    """:data:`STREAM_COLUMNS` as an Arrow schema (for sources that build Arrow batches)."""
    import pyarrow as pa

    types = {
        "string": pa.string(),
        "bigint": pa.int64(),
        "boolean": pa.bool_(),
        "binary": pa.binary(),
        "map<string,string>": pa.map_(pa.string(), pa.string()),
    }
    return pa.schema([(name, types[kind]) for name, kind in STREAM_COLUMNS])


def stream_arrow_batch(built: Sequence[Any]) -> Any:
    """The record batch of change rows the compiled core built as Arrow buffers: the columns
    ``op`` to ``row_schema`` (in :data:`STREAM_COLUMNS` order; a string column as ``(offsets,
    data, validity or None, null count)``, int64 and boolean columns as their raw values), then
    the row count; ``kind`` is ``change``, and ``ddl``, ``headers`` and ``record`` are null."""
    import pyarrow as pa

    schema = stream_arrow_schema()
    *columns, rows = built
    given = iter(columns)
    arrays = []
    for field in schema:
        if field.name == "kind":
            arrays.append(pa.array(["change"] * rows, type=field.type))
        elif field.name in ("ddl", "headers", "record"):
            arrays.append(pa.nulls(rows, type=field.type))
        elif field.type == pa.string():
            offsets, data, validity, nulls = next(given)
            buffers = [None if validity is None else pa.py_buffer(validity), pa.py_buffer(offsets), pa.py_buffer(data)]
            arrays.append(pa.Array.from_buffers(field.type, rows, buffers, null_count=nulls))
        else:
            arrays.append(pa.Array.from_buffers(field.type, rows, [None, pa.py_buffer(next(given))], null_count=0))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _json(value: Any) -> str | None:
    if value is None:
        return None
    return compact_json(value)


_schema_texts: dict[str, str] = {}


def _schema_json(schema: RowSchema) -> str:
    # By fingerprint: hashing the schema itself walks every column, per row.
    text = _schema_texts.get(schema.fingerprint)
    if text is None:
        text = _schema_texts[schema.fingerprint] = schema.to_json()
    return text


def record_to_row(record: Record, with_record: bool) -> tuple[Any, ...]:
    """``record`` as a tuple in :data:`STREAM_COLUMNS` order."""
    s = record.source
    position = s.position_text()
    schema = _schema_json(record.schema) if record.schema is not None else None
    blob = pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL) if with_record else None
    if isinstance(record, ChangeEvent):
        return (
            "change",
            record.op.value,
            record.destination(),
            s.system,
            s.cluster,
            s.keyspace,
            s.table,
            s.partition,
            position,
            s.ts_us,
            s.snapshot,
            record.ts_ms,
            _json(record.key),
            _json(record.before),
            _json(record.after),
            schema,
            None,
            record.headers,
            blob,
        )
    assert isinstance(record, SchemaChangeEvent)
    return (
        "schema_change",
        None,
        record.destination(),
        s.system,
        s.cluster,
        record.keyspace,
        record.table,
        s.partition,
        position,
        s.ts_us,
        s.snapshot,
        record.ts_ms,
        None,
        None,
        None,
        schema,
        record.ddl,
        record.headers,
        blob,
    )


def record_from_row(blob: bytes | bytearray) -> Record:
    """The record a row's ``record`` column holds (written by this engine, never by outsiders)."""
    record: Record = pickle.loads(blob)
    return record
