"""The compiled core's Kafka JSON envelopes -> spark engine rows (Arrow buffers) give exactly the
rows the Python path gives (``decode_spark_row``, ``infer_row_schema``, ``record_to_row``), or
decline the batch.

Random envelopes (values of every JSON type, text with escapes, unicode and astral characters,
floats at repr's edges, integers at and beyond 64 bits, missing and mistyped source fields,
positions, tombstones) written with random ``json.dumps`` settings, and random bytes: whenever the
compiled path answers, its record batch equals the Python path's. cdcflow's own envelopes (the
kafka sink's ``json`` converter) are always answered. Skipped without the compiled core.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import cdcflow.sources.kafka.source as kafka_source
from cdcflow.config import parse_pipeline
from cdcflow.contract import PluginContext
from cdcflow.converters import JsonConverter, JsonConverterConfig
from cdcflow.events import RowSchema
from cdcflow.kafka_client import TOMBSTONE_HEADER
from cdcflow.native import native_module
from cdcflow.plugins import PluginRegistry
from cdcflow.sources.datagen import DatagenConfig, DatagenSource
from cdcflow.spark_engine.datasource import SourceJob, decode_native_batches
from cdcflow.spark_rows import RowsNotTypedError, RowTyping, stream_arrow_schema

NATIVE = native_module()
pytestmark = pytest.mark.skipif(NATIVE is None, reason="the compiled core (cdcflow._native) is not built")

_KAFKA_ROWS = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    ]
)


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> SourceJob:
    folder = tmp_path_factory.mktemp("spark-rows")
    data = {
        "name": "rows",
        "source": {
            "type": "kafka",
            "bootstrap_servers": "127.0.0.1:1",
            "topics": ["t"],
            "converter": {"type": "json", "schemas_enable": False},
        },
        "sink": {"type": "parquet", "path": str(folder / "out")},
        "checkpoint": {"type": "file", "path": str(folder / "ckpt")},
        "engine": {"type": "spark"},
    }
    registry = PluginRegistry.from_entry_points()
    spec = parse_pipeline(data, folder / "p.yaml", registry)
    return SourceJob.of(spec, with_record=False)


def _batch(messages: list[tuple[bytes | None, bytes | None, bool]], topics: int = 2) -> Any:
    when = datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC)
    rows = [
        {
            "topic": f"topic-{n % topics}",
            "partition": n % 3,
            "offset": 1000 + n,
            "timestamp": when,
            "key": key,
            "value": value,
            "headers": [{"key": TOMBSTONE_HEADER, "value": b"after-delete"}] if tombstone else [],
        }
        for n, (key, value, tombstone) in enumerate(messages)
    ]
    return pa.RecordBatch.from_pylist(rows, schema=_KAFKA_ROWS)


def _both(job: SourceJob, batch: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """(compiled, Python) record batches for ``batch``: compiled None when it declined."""
    from cdcflow.spark_engine.datasource import _source_side

    source, _ = _source_side(job, open_source=False)
    compiled = source.decode_spark_batch(batch)
    with monkeypatch.context() as patched:
        patched.setattr(kafka_source, "native_module", lambda: None)
        python = pa.Table.from_batches(list(decode_native_batches(job, iter([batch]))), schema=stream_arrow_schema())
    return compiled, python


_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(2**63, 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0.1, -0.0, 1e16, 1e-7, 123456789012345680.0, 5e-324, 1.7976931348623157e308]),
    _TEXT,
)
_VALUES = st.recursive(
    _SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3), max_leaves=6
)
_ROWS = st.dictionaries(_TEXT, _VALUES, max_size=5)
_SOURCE = st.fixed_dictionaries(
    {},
    optional={
        "connector": st.one_of(st.just("cassandra"), _TEXT, st.none()),
        "name": st.just("cluster"),
        "keyspace": _TEXT,
        "table": _TEXT,
        "partition": st.one_of(_TEXT, st.integers()),
        "position": st.one_of(_ROWS.map(json.dumps), st.just("[1]"), st.integers()),
        "ts_us": st.one_of(st.integers(0, 2**62), st.floats()),
        "snapshot": st.one_of(st.booleans(), st.integers(0, 1)),
        "version": _TEXT,
    },
)
_ENVELOPES = st.fixed_dictionaries(
    {"op": st.sampled_from(["c", "u", "d", "r", "x"]), "source": _SOURCE},
    optional={
        "before": st.one_of(st.none(), _ROWS, st.just([])),
        "after": st.one_of(st.none(), _ROWS),
        "ts_ms": st.one_of(st.integers(1, 2**50), st.just(0)),
    },
)
_DUMPS = st.fixed_dictionaries(
    {
        "ensure_ascii": st.booleans(),
        "separators": st.sampled_from([(",", ":"), (", ", ": ")]),
        "indent": st.sampled_from([None, 1]),
    }
)


def _text(document: Any, dumps: dict[str, Any]) -> bytes:
    return json.dumps(document, **dumps).encode()


_MESSAGES = st.lists(
    st.tuples(
        st.one_of(st.none(), st.tuples(_ROWS, _DUMPS).map(lambda d: _text(*d)), st.binary(max_size=8)),
        st.one_of(
            st.tuples(_ENVELOPES, _DUMPS).map(lambda d: _text(*d)),
            st.tuples(_ROWS, _DUMPS).map(lambda d: _text(*d)),
            st.none(),
            st.binary(max_size=16),
        ),
        st.booleans(),
    ),
    min_size=1,
    max_size=4,
)


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(messages=_MESSAGES)
def test_compiled_rows_equal_the_python_rows_or_decline(
    job: SourceJob, messages: list[tuple[bytes | None, bytes | None, bool]], monkeypatch: pytest.MonkeyPatch
) -> None:
    batch = _batch([(k, v, t and v is None) for k, v, t in messages])
    try:
        compiled, python = _both(job, batch, monkeypatch)
    except Exception:  # the Python path rejects a message (not JSON...): the compiled one must decline
        from cdcflow.spark_engine.datasource import _source_side

        assert _source_side(job, open_source=False)[0].decode_spark_batch(batch) is None
        return
    if compiled is not None:
        assert pa.Table.from_batches([compiled]).equals(python)


_INT64 = st.integers(-(2**63), 2**63 - 1)
_GOOD_SCALARS = st.one_of(st.none(), st.booleans(), _INT64, st.floats(allow_nan=False, allow_infinity=False), _TEXT)
_GOOD_VALUES = st.recursive(
    _GOOD_SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3), max_leaves=6
)
_GOOD_ROWS = st.dictionaries(_TEXT, _GOOD_VALUES, max_size=5)
_GOOD_ENVELOPES = st.fixed_dictionaries(
    {
        "op": st.sampled_from(["c", "u", "d", "r"]),
        "source": st.fixed_dictionaries(
            {},
            optional={
                "connector": _TEXT,
                "name": _TEXT,
                "keyspace": _TEXT,
                "table": _TEXT,
                "partition": _TEXT,
                "position": _GOOD_ROWS.map(json.dumps),
                "ts_us": _INT64,
                "snapshot": st.booleans(),
                "version": _GOOD_VALUES,
            },
        ),
        "ts_ms": st.integers(1, 2**62),
    },
    optional={"before": st.one_of(st.none(), _GOOD_ROWS), "after": st.one_of(st.none(), _GOOD_ROWS)},
)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(
    messages=st.lists(
        st.tuples(
            st.one_of(st.none(), st.tuples(_GOOD_ROWS, _DUMPS).map(lambda d: _text(*d))),
            st.tuples(_GOOD_ENVELOPES, _DUMPS).map(lambda d: _text(*d)),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_envelopes_within_64_bit_numbers_are_all_decoded_by_the_compiled_core(
    job: SourceJob, messages: list[tuple[bytes | None, bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    compiled, python = _both(job, _batch([(k, v, False) for k, v in messages]), monkeypatch)
    assert compiled is not None
    assert pa.Table.from_batches([compiled]).equals(python)


def test_cdcflows_own_envelopes_are_decoded_by_the_compiled_core(
    job: SourceJob, monkeypatch: pytest.MonkeyPatch
) -> None:
    context = PluginContext("rows", Path("rows.yaml"))
    converter = JsonConverter(JsonConverterConfig.model_validate({"type": "json", "schemas_enable": False}), context)
    source = DatagenSource(
        DatagenConfig.model_validate({"type": "datagen", "count": 300, "partitions": 1, "event_size": 40}), context
    )
    (partition,) = source.partitions()
    start = source.initial_offset(partition)
    events = list(source.read(partition, start, source.latest_offset(partition, start, 300)))
    messages: list[tuple[bytes | None, bytes | None, bool]] = []
    for change in events:
        messages.append((converter.serialize_key(change, "t"), converter.serialize_value(change, "t"), False))
        if change.op.value == "d":
            messages.append((converter.serialize_key(change, "t"), None, True))  # the sink's tombstone
    compiled, python = _both(job, _batch(messages), monkeypatch)
    assert compiled is not None and compiled.num_rows == len(events)
    assert pa.Table.from_batches([compiled]).equals(python)


# A table's rows: each column mostly of its type (as one source writes them), sometimes null or
# missing, rarely of another type.
_TABLE_ROWS = st.fixed_dictionaries(
    {"id": _INT64},
    optional={
        "name": st.one_of(_TEXT, st.text(), st.sampled_from(['"\\/\n', "\u2028", "😀é"])),
        "amount": st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.sampled_from([0.1, 5e-324, -0.0])),
        "ok": st.booleans(),
        "n": st.one_of(st.integers(-(2**31), 2**31 - 1), st.sampled_from([127, -128, 2**31])),
        "odd": st.one_of(st.none(), _GOOD_SCALARS),
    },
)
_TABLE_KEYS = st.fixed_dictionaries({"id": _INT64})
_TABLE_ENVELOPES = st.fixed_dictionaries(
    {
        "op": st.sampled_from(["c", "u", "d", "r"]),
        "source": st.fixed_dictionaries(
            {"connector": st.just("cassandra"), "name": st.just("c"), "keyspace": st.just("ks"), "table": st.just("t")},
            optional={"partition": _TEXT, "position": _GOOD_ROWS.map(json.dumps), "ts_us": _INT64},
        ),
        "ts_ms": st.integers(1, 2**62),
        # Mostly a row after the change; a delete's before, or nothing, now and then.
        "after": st.one_of(_TABLE_ROWS, _TABLE_ROWS, _TABLE_ROWS, st.none(), st.just({})),
    },
    optional={"before": st.one_of(st.none(), _TABLE_ROWS)},
)
_ARROW_TYPES = {"bigint": ["int64", "int32", "int8"], "double": ["float64"], "text": ["string"], "boolean": ["bool_"]}


def _typing_of(python: Any, draw_type: Any) -> RowTyping | None:
    """A typing as the parquet sink asks it of a batch like ``python`` (the stream rows): its
    destination, its row schemas, the first row's typed columns (an integer column maybe
    narrower than its values)."""
    if not python.num_rows:
        return None
    schemas = sorted(set(python.column("row_schema").to_pylist()))
    first = RowSchema.from_json(python.column("row_schema")[0].as_py())
    columns = tuple((c.name, draw_type(_ARROW_TYPES[c.type])) for c in first.value_columns if c.type in _ARROW_TYPES)
    if not columns:
        return None
    envelope = ("op", "ts_ms", "source_ts_us", "source_partition", "source_position", "snapshot")
    return RowTyping(python.column("destination")[0].as_py(), tuple(schemas), envelope, columns)


@settings(
    max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(data=st.data(), good=st.sampled_from([True, True, True, False]))
def test_compiled_typed_rows_equal_the_typed_python_rows_or_decline(
    job: SourceJob, data: st.DataObject, good: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compiled core's typed rows (without stream rows) are what :class:`RowTyping` makes of
    the Python path's stream rows, or it declines; where that typing answers for envelopes within
    64-bit numbers, so does the compiled core."""
    from cdcflow.spark_engine.datasource import _source_side

    if good:
        messages = data.draw(
            st.lists(
                st.tuples(
                    st.one_of(st.none(), st.tuples(_TABLE_KEYS, _DUMPS).map(lambda d: _text(*d))),
                    st.tuples(_TABLE_ENVELOPES, _DUMPS).map(lambda d: _text(*d)),
                    st.just(False),
                ),
                min_size=1,
                max_size=6,
            )
        )
    else:
        messages = data.draw(_MESSAGES)
    batch = _batch([(k, v, t and v is None) for k, v, t in messages], topics=data.draw(st.sampled_from([1, 1, 2])))
    try:
        _, python = _both(job, batch, monkeypatch)
    except Exception:  # the Python path rejects a message: nothing to type
        event("rejected by the Python path")
        return
    typing = _typing_of(python, lambda choices: data.draw(st.sampled_from(choices)))
    if typing is None:
        event("nothing to type")
        return
    source, _ = _source_side(job, open_source=False)
    compiled = source.decode_typed_spark_batch(batch, typing)
    try:
        expected = pa.Table.from_batches(list(typing(iter(python.to_batches()))))
    except RowsNotTypedError:
        assert compiled is None
        event("refused by the typing")
        return
    if good:
        assert compiled is not None, "declined envelopes the typing types"
    if compiled is not None:
        event("typed by the compiled core")
        assert pa.Table.from_batches([compiled]).equals(expected.combine_chunks())
