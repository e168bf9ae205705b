"""The one Spark row shape every cdcflow stream has, whatever its source and tables: the public
module for Spark plugins (a sink that writes whole micro-batches, a source with a native Spark
stream), which import it rather than anything of :mod:`cdcflow.spark_engine`.

A stream mixes tables whose columns differ, and Spark fixes a stream's schema when the query
starts, so rows carry the envelope as columns and the row images as JSON text together with the
table's schema (``row_schema``). Sinks that want typed columns (``parquet``) parse the images per
table with that schema, or, for a batch whose destination and schemas they know before it runs,
ask :func:`typed_change_rows` for them typed beside the Python code that built the rows; sinks
that want the cdcflow record back (every other sink) unpickle ``record``, which is only filled
when such a sink runs.

A :class:`~cdcflow.capabilities.SparkBatchWriter` gets each micro-batch as a :class:`StreamBatch`
(:meth:`StreamBatch.rows` is the DataFrame of stream rows). Importing this module imports neither
pyspark nor pyarrow: they load when a function that needs them runs.
"""

from __future__ import annotations

import functools
import pickle
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cdcflow.events import ChangeEvent, Record, RowSchema, SchemaChangeEvent
from cdcflow.jsontext import compact_json
from cdcflow.schemas import spark_ddl_type

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, Observation, SparkSession

__all__ = [
    "MISFITS_COLUMN",
    "ROWS_NOT_TYPED",
    "STREAM_COLUMNS",
    "STREAM_SCHEMA_DDL",
    "TYPED_IMAGE_TYPES",
    "ColumnSelection",
    "DecodedBatch",
    "RowTyping",
    "RowsNotTypedError",
    "StreamBatch",
    "TypedChangeRows",
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
"""How :class:`RowsNotTypedError`'s message begins."""

MISFITS_COLUMN = "_cdcflow_misfits"
"""The column in which a :class:`RowTyping` that marks misfits counts the rows it could not type."""


class RowsNotTypedError(ValueError):
    """A row of the batch is not of the destination and row schemas asked for, or a value does not
    read exactly as its column's type: :func:`typed_change_rows` cannot type this batch."""


class TypedChangeRows:
    """The typed rows :func:`typed_change_rows` gives, and how many change rows could not be typed.

    Run exactly one Spark action on :attr:`rows` (a write), or on a :class:`ColumnSelection` of
    :attr:`counted` (the same rows with the :data:`MISFITS_COLUMN` the count is taken from), then
    ask :meth:`misfits`: 0 means the action's output is exactly what ``from_json`` with the columns'
    types gives; any other count means a row was of another destination or row schema, or a value
    did not read exactly as its column's type, and the action's output holds rows of nulls in their
    place: discard it and type the batch another way."""

    __slots__ = ("_observation", "counted")

    def __init__(self, counted: DataFrame, observation: Observation) -> None:
        self.counted = counted
        self._observation = observation

    @property
    def rows(self) -> DataFrame:
        """The typed rows, without the :data:`MISFITS_COLUMN`."""
        return self.counted.drop(MISFITS_COLUMN)

    def misfits(self) -> int:
        """How many change rows the action on :attr:`rows` could not type (waits for the action)."""
        return int(self._observation.get.get("misfits") or 0)


def typed_change_rows(
    batch: StreamBatch,
    destination: str,
    row_schemas: Sequence[str],
    columns: Sequence[tuple[str, str]],
    envelope: Sequence[str],
) -> TypedChangeRows | None:
    """The change rows of the stream batch ``batch`` with the ``envelope`` columns as they are
    and each of ``columns`` (``(name, CQL type)``) typed from the row image (after, else before,
    else key), as ``_c0``, ``_c1``...: what ``from_json`` with those Spark types gives, read by
    Arrow's JSON reader next to the Python side that built the rows, not again in the JVM.

    Every row must be of ``destination`` with one of ``row_schemas``, and every value read exactly;
    the rows that are not are counted, not typed (:meth:`TypedChangeRows.misfits`). None when a
    column's type is not one typed here."""
    if not columns or any(kind not in TYPED_IMAGE_TYPES for _, kind in columns):
        return None
    from pyspark.sql import Observation
    from pyspark.sql import functions as F  # noqa: N812 - Spark's own idiom

    stream_types = dict(STREAM_COLUMNS)
    ddl = ", ".join(
        [f"`{name}` {stream_types[name]}" for name in envelope]
        + [f"`_c{i}` {spark_ddl_type(kind)}" for i, (_, kind) in enumerate(columns)]
        + [f"`{MISFITS_COLUMN}` bigint"]
    )
    typing = RowTyping(
        destination,
        tuple(row_schemas),
        tuple(envelope),
        tuple((name, TYPED_IMAGE_TYPES[kind]) for name, kind in columns),
        mark_misfits=True,
    )
    global _misfits_sum  # noqa: PLW0603 - one a process, like the JVM it belongs to
    rows = batch.typed_rows(typing, ddl)
    jvm = rows.sparkSession.sparkContext._jvm
    if _misfits_sum is None or _misfits_sum[0] is not jvm:
        # Made once a JVM: building the sum and its alias is some eight calls into the JVM.
        _misfits_sum = (jvm, F.sum(MISFITS_COLUMN).alias("misfits"))
    observation = Observation()
    return TypedChangeRows(rows.observe(observation, _misfits_sum[1]), observation)


_misfits_sum: tuple[Any, Column] | None = None  # (the JVM it was made in, the sum of the misfits column)


class ColumnSelection:
    """``frame.select(*columns)`` for frame after frame, with the columns sent to the JVM once:
    pyspark sends a select's columns anew each time (about two calls into the JVM a column: 0.3 ms
    each on the 2-core machine under a load average of 4, 0.9 ms under 10, all of them on the
    micro-batch's serial path). ``columns`` must name columns by name (``F.col``), not columns
    resolved against one frame."""

    __slots__ = ("_java_columns", "columns")

    def __init__(self, columns: Sequence[Column]) -> None:
        self.columns = list(columns)
        self._java_columns: Any = None

    def of(self, frame: DataFrame) -> DataFrame:
        """``frame.select(*columns)``."""
        from pyspark.sql import DataFrame

        if self._java_columns is None:
            context = frame.sparkSession.sparkContext
            self._java_columns = context._jvm.PythonUtils.toSeq([c._jc for c in self.columns])  # type: ignore[union-attr]
        return DataFrame(frame._jdf.select(self._java_columns), frame.sparkSession)


class StreamBatch:
    """A micro-batch of the stream as the spark engine hands it to a
    :class:`~cdcflow.capabilities.SparkBatchWriter`: the stream rows (:data:`STREAM_COLUMNS`) as a
    DataFrame, :meth:`rows`, and the same rows typed as a :class:`RowTyping` asks,
    :meth:`typed_rows` (what :func:`typed_change_rows` uses)."""

    __slots__ = ("_frame",)

    def __init__(self, frame: DataFrame) -> None:
        self._frame = frame

    @property
    def session(self) -> SparkSession:
        """The Spark session the batch runs in (``foreachBatch`` gives each batch its own)."""
        return self._frame.sparkSession

    def rows(self) -> DataFrame:
        """The batch's stream rows."""
        return self._frame

    def typed_rows(self, typing: RowTyping, ddl: str) -> DataFrame:
        """The rows ``typing`` makes of the batch's stream rows, as Spark columns ``ddl`` (what
        ``typing`` does with a row it cannot type: see :class:`RowTyping`)."""
        return self._frame.mapInArrow(typing, ddl)


class DecodedBatch(StreamBatch):
    """The stream batch of a source that decodes Spark's own rows (its native stream): ``raw``,
    Spark's rows, and ``decode``, the ``mapInArrow`` function that turns them into stream rows
    (as ``decode(batches)``) or typed rows (as ``decode(batches, typing=RowTyping)``).

    :meth:`rows` plans ``raw.mapInArrow(decode, ddl)`` once, when first asked (each plan sends
    the decoding function to the JVM again: tens of milliseconds a batch), so a sink that takes
    :meth:`typed_rows` (decoded and typed in one pass) never plans the untyped stream rows."""

    __slots__ = ("_decoded", "_raw", "ddl", "decode")

    def __init__(self, raw: DataFrame, decode: Callable[..., Iterator[Any]], ddl: str = STREAM_SCHEMA_DDL) -> None:
        super().__init__(raw)
        self._raw = raw
        self.decode = decode
        self.ddl = ddl
        self._decoded: DataFrame | None = None

    def rows(self) -> DataFrame:
        if self._decoded is None:
            self._decoded = self._raw.mapInArrow(self.decode, self.ddl)
        return self._decoded

    def typed_rows(self, typing: RowTyping, ddl: str) -> DataFrame:
        # Typed where the rows are decoded: only the typed columns go back to the JVM, not the
        # stream rows with their images.
        return _typed_map(self.decode, typing, ddl, self._raw).of(self._raw)


_TYPED_MAPS_KEPT = 16


@dataclass
class _TypedMap:
    """``raw.mapInArrow(decode(batches, typing=...), ddl)`` for the raw frames of one native
    stream, whose columns are the same batch after batch: the Python function and the JVM column
    applying it to the stream's columns are made once (``mapInArrow`` makes and sends both anew
    on every call: some 20 calls into the JVM, 0.02-0.035 s of a batch's planning on the 2-core
    machine under load). What pyspark 4.2's ``DataFrame.mapInArrow`` does, in
    ``pyspark/sql/pandas/map_ops.py``, with the function made once."""

    decode: Callable[..., Iterator[Any]]
    applied: Any  # the JVM column: the function applied to the stream's columns by name

    def of(self, raw: DataFrame) -> DataFrame:
        from pyspark.sql import DataFrame

        return DataFrame(raw._jdf.mapInArrow(self.applied, False, None), raw.sparkSession)


_typed_maps: dict[tuple[int, RowTyping, str], _TypedMap] = {}


def _typed_map(decode: Callable[..., Iterator[Any]], typing: RowTyping, ddl: str, raw: DataFrame) -> _TypedMap:
    from pyspark.sql import functions as F  # noqa: N812 - Spark's own idiom
    from pyspark.sql.pandas.functions import pandas_udf
    from pyspark.util import PythonEvalType

    key = (id(decode), typing, ddl)
    kept = _typed_maps.get(key)
    if kept is not None and kept.decode is decode:  # the same function, not one with a reused id
        return kept
    if len(_typed_maps) >= _TYPED_MAPS_KEPT:
        _typed_maps.clear()
    function = pandas_udf(  # type: ignore[call-overload]
        functools.partial(decode, typing=typing), returnType=ddl, functionType=PythonEvalType.SQL_MAP_ARROW_ITER_UDF
    )
    # By name, not resolved against this batch's frame: the next batch's frame has the same names.
    applied = function(*[F.col("`{}`".format(name.replace("`", "``"))) for name in raw.columns])._jc
    made = _typed_maps[key] = _TypedMap(decode, applied)
    return made


@dataclass(frozen=True)
class RowTyping:
    """What :func:`typed_change_rows` asks of a batch: its rows of ``destination`` with one of
    ``row_schemas``, as the ``envelope`` columns and ``columns`` (``(name, Arrow type)``: ``int64``,
    ``int32``, ``int16``, ``int8``, ``float64``, ``bool_``, ``string``) typed from the row images.

    Called on stream-row record batches, it types them with Arrow's JSON reader (the reference);
    a source that decodes Spark's rows itself may build the same batch without the stream rows
    (:meth:`~cdcflow.capabilities.DecodesSparkBatches.decode_typed_spark_batch`, with
    :meth:`arrow_batch`).

    A record batch it cannot type raises :class:`RowsNotTypedError`; with ``mark_misfits`` it
    yields instead one row of nulls with the number of change rows it stands for in a last column,
    :data:`MISFITS_COLUMN` (0 in every typed row), which :func:`typed_change_rows` counts.
    """

    destination: str
    row_schemas: tuple[str, ...]
    envelope: tuple[str, ...]
    columns: tuple[tuple[str, str], ...]
    mark_misfits: bool = False

    def names(self) -> list[str]:
        names = [*self.envelope, *(f"_c{i}" for i in range(len(self.columns)))]
        return [*names, MISFITS_COLUMN] if self.mark_misfits else names

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
        return pa.RecordBatch.from_arrays(self._marked(out, rows, 0), names=self.names())

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.compute as pc

        for batch in batches:
            changes = batch.filter(pc.equal(batch.column("kind"), "change"))
            if not changes.num_rows:
                continue
            try:
                fits = pc.and_(
                    pc.equal(changes.column("destination"), self.destination),
                    pc.is_in(changes.column("row_schema"), value_set=pa.array(self.row_schemas, pa.string())),
                )
                if not pc.all(pc.fill_null(fits, False)).as_py():
                    raise RowsNotTypedError(f"{ROWS_NOT_TYPED}: another destination or row schema")
                typed = self._typed(changes)
            except RowsNotTypedError:
                if not self.mark_misfits:
                    raise
                yield self._misfit_batch(changes.num_rows)
                continue
            arrays = [changes.column(name) for name in self.envelope] + typed.columns
            yield pa.RecordBatch.from_arrays(self._marked(arrays, changes.num_rows, 0), names=self.names())

    def _marked(self, arrays: list[Any], rows: int, misfits: int) -> list[Any]:
        """``arrays`` and, with ``mark_misfits``, the :data:`MISFITS_COLUMN` of ``rows`` rows."""
        if not self.mark_misfits:
            return arrays
        import pyarrow as pa

        return [*arrays, pa.array([misfits] * rows, pa.int64())]

    def _misfit_batch(self, misfits: int) -> Any:
        """One row of nulls standing for ``misfits`` change rows this typing could not type."""
        import pyarrow as pa

        stream_types = stream_arrow_schema()
        types = [stream_types.field(name).type for name in self.envelope]
        types += [getattr(pa, kind)() for _, kind in self.columns]
        arrays = self._marked([pa.nulls(1, type=kind) for kind in types], 1, misfits)
        return pa.RecordBatch.from_arrays(arrays, names=self.names())

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
