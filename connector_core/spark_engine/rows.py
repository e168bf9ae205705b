"""The one Spark row shape every cdcflow stream has, whatever its source and tables.

A stream mixes tables whose columns differ, and Spark fixes a stream's schema when the query
starts, so rows carry the envelope as columns and the row images as JSON text together with the
table's schema (``row_schema``). Sinks that want typed columns (``parquet``) parse the images per
table with that schema, or, for a batch whose destination and schemas they know before it runs,
ask :func:`typed_change_rows` for them typed beside the Python code that built the rows; sinks
that want the cdcflow record back (every other sink) unpickle ``record``, which is only filled
when such a sink runs.
"""

from __future__ import annotations

import functools
import pickle
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from cdcflow.events import ChangeEvent, Record, RowSchema, SchemaChangeEvent
from cdcflow.jsontext import compact_json
from cdcflow.schemas import spark_ddl_type

__all__ = [
    "ROWS_NOT_TYPED",
    "STREAM_COLUMNS",
    "STREAM_SCHEMA_DDL",
    "TYPED_IMAGE_TYPES",
    "DecodedBatch",
    "RowTyping",
    "RowsNotTypedError",
    "record_from_row",
    "record_to_row",
    "stream_arrow_batch",
    "stream_arrow_schema",
    "typed_change_rows",
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
        else:
            arrays.append(_arrow_array(field.type, rows, next(given)))
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


TYPED_IMAGE_TYPES = {
    "bigint": "int64",
    "counter": "int64",
    "int": "int32",
    "smallint": "int16",
    "tinyint": "int8",
    "double": "float64",
    "text": "string",
    "varchar": "string",
    "ascii": "string",
    "boolean": "bool_",
}
"""The CQL types :func:`typed_change_rows` types, with the Arrow type of each: those whose row-JSON
values Arrow's JSON reader turns into exactly what Spark's ``from_json`` gives, and refuses where
they differ (a float in an integer column, a number in a text column, an integer beyond the
type's range, a lone surrogate)."""

ROWS_NOT_TYPED = "cdcflow: a row does not fit the batch's typed columns"
"""In the error of a Spark job that :func:`typed_change_rows` made fail: type the batch another way."""


class RowsNotTypedError(ValueError):
    """A row of the batch is not of the destination and row schemas asked for, or a value does not
    read exactly as its column's type: :func:`typed_change_rows` cannot type this batch."""


def typed_change_rows(
    batch: Any,
    destination: str,
    row_schemas: Sequence[str],
    columns: Sequence[tuple[str, str]],
    envelope: Sequence[str],
) -> Any | None:
    """The change rows of the stream DataFrame ``batch`` with the ``envelope`` columns as they are
    and each of ``columns`` (``(name, CQL type)``) typed from the row image (after, else before,
    else key), as ``_c0``, ``_c1``...: what ``from_json`` with those Spark types gives, read by
    Arrow's JSON reader next to the Python side that built the rows, not again in the JVM.

    Every row must be of ``destination`` with one of ``row_schemas``, and every value read exactly:
    otherwise the job fails with :data:`ROWS_NOT_TYPED` in its error (the caller types the batch
    another way). None when a column's type is not one typed here."""
    if not columns or any(kind not in TYPED_IMAGE_TYPES for _, kind in columns):
        return None
    stream_types = dict(STREAM_COLUMNS)
    ddl = ", ".join(
        [f"`{name}` {stream_types[name]}" for name in envelope]
        + [f"`_c{i}` {spark_ddl_type(kind)}" for i, (_, kind) in enumerate(columns)]
    )
    typing = RowTyping(
        destination,
        tuple(row_schemas),
        tuple(envelope),
        tuple((name, TYPED_IMAGE_TYPES[kind]) for name, kind in columns),
    )
    if isinstance(batch, DecodedBatch):
        # Rows a source decodes in the same pass: typed there, and only the typed columns go back
        # to the JVM, not the stream rows with their images.
        return batch.raw.mapInArrow(functools.partial(batch.decode, typing=typing), ddl)
    return batch.mapInArrow(typing, ddl)


class DecodedBatch:
    """The stream batch of a source that decodes Spark's own rows (its native stream):
    ``raw.mapInArrow(decode, ddl)``, planned only when a DataFrame method is first asked of it
    (each plan sends the decoding function to the JVM again: tens of milliseconds a batch), so a
    sink that takes :func:`typed_change_rows` of it (decoded and typed in one pass, as
    ``decode(batches, typing=RowTyping)``) never plans the untyped stream rows."""

    __slots__ = ("_rows", "ddl", "decode", "raw")

    def __init__(self, raw: Any, decode: Callable[..., Iterator[Any]], ddl: str) -> None:
        self.raw = raw
        self.decode = decode
        self.ddl = ddl
        self._rows: Any = None

    @property
    def sparkSession(self) -> Any:  # noqa: N802 - the DataFrame attribute it stands for
        return self.raw.sparkSession

    def __getattr__(self, name: str) -> Any:
        if self._rows is None:
            self._rows = self.raw.mapInArrow(self.decode, self.ddl)
        return getattr(self._rows, name)


@dataclass(frozen=True)
class RowTyping:
    """What :func:`typed_change_rows` asks of a batch: its rows of ``destination`` with one of
    ``row_schemas``, as the ``envelope`` columns and ``columns`` (``(name, Arrow type)``: ``int64``,
    ``int32``, ``int16``, ``int8``, ``float64``, ``bool_``, ``string``) typed from the row images.

    Called on stream-row record batches, it types them with Arrow's JSON reader (the reference);
    a source that decodes Spark's rows itself may build the same batch without the stream rows
    (:meth:`~cdcflow.contract.Source.decode_typed_spark_batch`, with :meth:`arrow_batch`).
    """

    destination: str
    row_schemas: tuple[str, ...]
    envelope: tuple[str, ...]
    columns: tuple[tuple[str, str], ...]

    def names(self) -> list[str]:
        return [*self.envelope, *(f"_c{i}" for i in range(len(self.columns)))]

    def arrow_batch(self, built: Sequence[Any]) -> Any:
        """The typed record batch the compiled core built as Arrow buffers: the stream columns
        ``op`` to ``ts_ms`` (as :func:`stream_arrow_batch` takes them), each of :attr:`columns`
        (``(values, validity or None, null count)``, a string column as ``(offsets, data,
        validity or None, null count)``), then the row count."""
        import pyarrow as pa

        *given, rows = built
        stream_types = stream_arrow_schema()
        envelope_names = [name for name, _ in STREAM_COLUMNS[1 : STREAM_COLUMNS.index(("ts_ms", "bigint")) + 1]]
        arrays = dict(zip(envelope_names, given, strict=False))
        typed = given[len(envelope_names) :]
        out = [_arrow_array(stream_types.field(name).type, rows, arrays[name]) for name in self.envelope]
        out += [
            _arrow_array(getattr(pa, kind)(), rows, parts) for (_, kind), parts in zip(self.columns, typed, strict=True)
        ]
        return pa.RecordBatch.from_arrays(out, names=self.names())

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.compute as pc

        for batch in batches:
            changes = batch.filter(pc.equal(batch.column("kind"), "change"))
            if not changes.num_rows:
                continue
            fits = pc.and_(
                pc.equal(changes.column("destination"), self.destination),
                pc.is_in(changes.column("row_schema"), value_set=pa.array(self.row_schemas, pa.string())),
            )
            if not pc.all(pc.fill_null(fits, False)).as_py():
                raise RowsNotTypedError(f"{ROWS_NOT_TYPED}: another destination or row schema")
            typed = self._typed(changes)
            arrays = [changes.column(name) for name in self.envelope] + typed.columns
            yield pa.RecordBatch.from_arrays(arrays, names=self.names())

    def _typed(self, changes: Any) -> Any:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.json as pj

        image = pc.fill_null(
            pc.coalesce(changes.column("after"), changes.column("before"), changes.column("key")), "{}"
        )
        # One line per image (row JSON has no raw line breaks): the lines are the values buffer
        # of "image + newline" strings, without a Python object per row.
        lines = pc.binary_join_element_wise(image, "", "\n")
        schema = pa.schema([(name, getattr(pa, kind)()) for name, kind in self.columns])
        offsets = memoryview(lines.buffers()[1]).cast("i")  # int32, as a string array's are
        data = lines.buffers()[2][offsets[lines.offset] : offsets[lines.offset + len(lines)]]
        try:
            table = pj.read_json(
                pa.BufferReader(data),
                read_options=pj.ReadOptions(use_threads=False, block_size=max(len(data), 1 << 16) + 1),
                parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"),
            )
        except pa.ArrowInvalid as exc:
            raise RowsNotTypedError(f"{ROWS_NOT_TYPED}: {exc}") from exc
        if table.num_rows != changes.num_rows:
            raise RowsNotTypedError(f"{ROWS_NOT_TYPED}: {table.num_rows} rows typed of {changes.num_rows}")
        return table.combine_chunks().to_batches()[0]


def _arrow_array(kind: Any, rows: int, parts: Any) -> Any:
    """An Arrow array of ``rows`` values of type ``kind`` from the compiled core's buffers: a
    string column as ``(offsets, data, validity or None, null count)``, any other as its raw
    values, or ``(values, validity or None, null count)``."""
    import pyarrow as pa

    if kind == pa.string():
        offsets, data, validity, nulls = parts
        buffers = [None if validity is None else pa.py_buffer(validity), pa.py_buffer(offsets), pa.py_buffer(data)]
        return pa.Array.from_buffers(kind, rows, buffers, null_count=nulls)
    values, validity, nulls = parts if isinstance(parts, tuple) else (parts, None, 0)
    buffers = [None if validity is None else pa.py_buffer(validity), pa.py_buffer(values)]
    return pa.Array.from_buffers(kind, rows, buffers, null_count=nulls)
