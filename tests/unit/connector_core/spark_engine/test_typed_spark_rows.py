"""Stream rows typed beside the Python code that built them (``typed_change_rows``) hold exactly
what Spark's ``from_json`` reads from their row images, or refuse the batch.

Random tables (every type the typed path takes, names that collide with envelope columns) and
random row images, with values of the wrong type, integers at and beyond each type's range,
floats at repr's edges, text with escapes and astral characters, missing and extra fields:
where every value fits its column, the typed columns equal the values ``json.loads`` reads
(what ``from_json`` gives for these types); where one does not, the batch is refused (the sink
then parses the images in Spark, which decides as before). Rows of another destination or row
schema are refused too. Pure pyarrow: runs with and without the compiled core.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from cdcflow.spark_rows import (
    MISFITS_COLUMN,
    ROWS_NOT_TYPED,
    TYPED_IMAGE_TYPES,
    RowsNotTypedError,
    RowTyping,
    stream_arrow_schema,
)

_RANGES = {"bigint": 63, "counter": 63, "int": 31, "smallint": 15, "tinyint": 7}
_ARROW = TYPED_IMAGE_TYPES
_ENVELOPE = ("op", "ts_ms", "source_ts_us", "source_partition", "source_position", "snapshot")
_UNFIT = object()


def _read_as(kind: str, value: Any) -> Any:
    """What ``from_json`` gives for ``value`` (as ``json.loads`` read it) in a column of ``kind``,
    or ``_UNFIT`` where it gives null or text that is not the value (the typed path must refuse)."""
    if value is None:
        return None
    if kind in _RANGES:
        bits = _RANGES[kind]
        fits = isinstance(value, int) and not isinstance(value, bool) and -(2**bits) <= value < 2**bits
        return value if fits else _UNFIT
    if kind == "double":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return _UNFIT
        return float(value)
    if kind == "boolean":
        return value if isinstance(value, bool) else _UNFIT
    return value if isinstance(value, str) else _UNFIT


_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([2**7, -(2**7) - 1, 2**15, 2**31, -(2**31) - 1, 2**63 - 1, -(2**63), 2**63, 2**53 + 1]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([5e-324, 1.7976931348623157e308, -0.0, 0.1, 1e16, 1e-7, 123456789012345680.0]),
    st.text(),
    st.text(alphabet=st.sampled_from(['"', "\\", "\n", "\t", "\x00", "/", "é", "😀", "\u2028", "a"])),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


@st.composite
def _tables(draw: st.DrawFn) -> tuple[list[tuple[str, str]], list[dict[str, Any]], bool]:
    names = draw(
        st.lists(
            st.one_of(st.sampled_from(["op", "ts_ms", "id", "name", "Name", "a b", "é"]), st.text(min_size=1)),
            min_size=1,
            max_size=6,
            unique=True,
        )
    )
    columns = [(name, draw(st.sampled_from(sorted(_ARROW)))) for name in names]
    fitting = draw(st.booleans())  # mostly values of each column's type, or anything at all
    rows = []
    for _ in range(draw(st.integers(min_value=1, max_value=8))):
        row: dict[str, Any] = {}
        for name, kind in columns:
            if draw(st.booleans()):
                row[name] = draw(_fitting_value(kind) if fitting else _values)
        if draw(st.integers(0, 5)) == 0:
            row[draw(st.text(max_size=4)) + "_extra"] = draw(_values)
        rows.append(row)
    return columns, rows, draw(st.booleans())


def _fitting_value(kind: str) -> st.SearchStrategy[Any]:
    if kind in _RANGES:
        bits = _RANGES[kind]
        return st.one_of(st.none(), st.integers(min_value=-(2**bits), max_value=2**bits - 1))
    if kind == "double":
        return st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(-(2**60), 2**60))
    if kind == "boolean":
        return st.booleans()
    return st.text()


def _stream_batch(images: list[tuple[str | None, str | None, str | None]], destinations: list[str]) -> pa.RecordBatch:
    schema = stream_arrow_schema()
    rows = [
        {
            "kind": "change",
            "op": "u",
            "destination": destination,
            "source_partition": "p0",
            "source_position": f'{{"seq":{n}}}',
            "source_ts_us": 1_700_000_000_000_000 + n,
            "snapshot": False,
            "ts_ms": 1_700_000_000_000 + n,
            "key": key,
            "before": before,
            "after": after,
            "row_schema": "schema-1",
        }
        for n, ((key, before, after), destination) in enumerate(zip(images, destinations, strict=True))
    ]
    return pa.RecordBatch.from_pylist(rows, schema=schema)


def _typer(columns: list[tuple[str, str]]) -> RowTyping:
    return RowTyping("dest", ("schema-1",), _ENVELOPE, tuple((name, _ARROW[kind]) for name, kind in columns))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_tables(), st.booleans())
def test_typed_columns_hold_what_from_json_reads_or_the_batch_is_refused(
    table: tuple[list[tuple[str, str]], list[dict[str, Any]], bool], ascii_only: bool
) -> None:
    columns, rows, deletes = table
    texts = [json.dumps(row, ensure_ascii=ascii_only, separators=(",", ":")) for row in rows]
    # A delete's image is its before; the key's is the last resort (coalesce(after, before, key)).
    images = [("{}", text, None) if deletes else (None, None, text) for text in texts]
    batch = _stream_batch(images, ["dest"] * len(rows))
    expected = [[_read_as(kind, json.loads(text).get(name)) for name, kind in columns] for text in texts]
    fits = not any(value is _UNFIT for row in expected for value in row)
    try:
        (typed,) = list(_typer(columns)([batch]))
    except RowsNotTypedError as refused:
        assert ROWS_NOT_TYPED in str(refused)
        assert not fits, f"refused a batch whose values all fit: {refused}"
        event("refused")
        return
    assert fits, "typed a batch with a value from_json does not read as it is"
    event("typed")
    assert typed.schema.names == [*_ENVELOPE, *(f"_c{i}" for i in range(len(columns)))]
    for name in _ENVELOPE:
        assert typed.column(name).equals(batch.column(name))
    for index in range(len(columns)):
        got = typed.column(f"_c{index}").to_pylist()
        want = [row[index] for row in expected]
        assert [_same(g, w) for g, w in zip(got, want, strict=True)] == [True] * len(rows), (got, want)


def _same(got: Any, want: Any) -> bool:
    if isinstance(want, float):
        return isinstance(got, float) and (got == want and math.copysign(1, got) == math.copysign(1, want))
    return type(got) is type(want) and got == want


def test_rows_of_another_destination_or_row_schema_are_refused() -> None:
    columns = [("id", "bigint")]
    batch = _stream_batch([(None, None, '{"id":1}'), (None, None, '{"id":2}')], ["dest", "other"])
    with pytest.raises(RowsNotTypedError, match="another destination or row schema"):
        list(_typer(columns)([batch]))
    other_schema = batch.set_column(
        batch.schema.get_field_index("row_schema"), "row_schema", pa.array(["schema-1", "schema-2"])
    )
    with pytest.raises(RowsNotTypedError, match="another destination or row schema"):
        list(_typer(columns)([other_schema.filter(pa.array([True, True]))]))


def test_a_typing_that_marks_misfits_counts_the_rows_it_could_not_type_instead_of_raising() -> None:
    # What typed_change_rows asks for: the count travels in a column (summed by a Spark
    # Observation), so the parquet sink needs no error text to know its one-job path failed.
    fitting = _stream_batch([(None, None, '{"id":1}'), (None, None, '{"id":2}')], ["dest", "dest"])
    unfit = _stream_batch([(None, None, '{"id":1.5}'), (None, None, '{"id":2}'), (None, None, "{}")], ["dest"] * 3)
    elsewhere = _stream_batch([(None, None, '{"id":3}'), (None, None, '{"id":4}')], ["dest", "other"])
    typing = RowTyping("dest", ("schema-1",), _ENVELOPE, (("id", "int64"),), mark_misfits=True)
    typed, misfit, moved = list(typing([fitting, unfit, elsewhere]))
    assert typed.schema.names == [*_ENVELOPE, "_c0", MISFITS_COLUMN]
    assert typed.column("_c0").to_pylist() == [1, 2] and typed.column(MISFITS_COLUMN).to_pylist() == [0, 0]
    for batch, rows in ((misfit, 3), (moved, 2)):
        assert batch.schema.names == typed.schema.names and batch.num_rows == 1
        assert batch.column(MISFITS_COLUMN).to_pylist() == [rows]
        assert all(batch.column(name).to_pylist() == [None] for name in [*_ENVELOPE, "_c0"])


@pytest.mark.parametrize("text", ['"\\ud800"', '"a\\udc00"', '"\\ud83dx"'])
def test_a_lone_surrogate_is_refused(text: str) -> None:
    batch = _stream_batch([(None, None, f'{{"name":{text}}}')], ["dest"])
    with pytest.raises(RowsNotTypedError):
        list(_typer([("name", "text")])([batch]))


def test_schema_change_rows_are_left_out() -> None:
    batch = _stream_batch([(None, None, '{"id":1}'), (None, None, '{"id":2}')], ["dest", "dest"])
    kinds = batch.schema.get_field_index("kind")
    mixed = batch.set_column(kinds, "kind", pa.array(["schema_change", "change"]))
    (typed,) = list(_typer([("id", "bigint")])([mixed]))
    assert typed.column("_c0").to_pylist() == [2]
    assert typed.column("source_position").to_pylist() == ['{"seq":1}']
