"""The parquet sink's per-batch protocol on a real local Spark: re-runs, crash leftovers, added
columns, and a clear error when Java is too old."""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from cdcflow.contract import PluginContext
from cdcflow.errors import EngineUnavailableError
from cdcflow.events import ChangeEvent, Column, Op, RowSchema, SourceInfo
from cdcflow.schemas import infer_row_schema
from cdcflow.sinks.parquet_spark import ParquetSchemaConflictError, ParquetSink, ParquetSinkConfig
from cdcflow.spark_engine.session import spark_session
from cdcflow.spark_rows import STREAM_SCHEMA_DDL, StreamBatch, record_to_row
from tests.integration.parquet_helpers import read_parquet

pytestmark = [pytest.mark.spark]

DAY_US = 86_400_000_000
NOV_22_US = 1_795_305_600_000_000  # 2026-11-22T00:00:00Z


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = spark_session("cdcflow-tests", "local[1]", {})
    yield session
    session.stop()


def event(n: int, schema: RowSchema, op: Op = Op.CREATE, ts_us: int = NOV_22_US + 1000) -> ChangeEvent:
    row = {"id": n, "name": f"n{n}"}
    if any(c.name == "email" for c in schema.value_columns):
        row["email"] = f"{n}@example.com"
    return ChangeEvent(
        op=op,
        key={"id": n},
        before=row if op is Op.DELETE else None,
        after=None if op is Op.DELETE else row,
        source=SourceInfo("test", "c", "ks", "users", "p0", {"n": n}, ts_us),
        ts_ms=ts_us // 1000,
        schema=schema,
    )


V1 = RowSchema("c.ks.users", (Column("id", "bigint", False),), (Column("id", "bigint", False), Column("name", "text")))
V2 = RowSchema(
    "c.ks.users",
    (Column("id", "bigint", False),),
    (Column("id", "bigint", False), Column("name", "text"), Column("email", "text")),
    version=2,
)


def sink(path: Path) -> ParquetSink:
    return ParquetSink(ParquetSinkConfig(type="parquet", path=str(path)), PluginContext("t", path / "t.yaml"))


def frame(spark: Any, events: list[ChangeEvent]) -> Any:
    return spark.createDataFrame([record_to_row(e, False) for e in events], STREAM_SCHEMA_DDL)


def batch(spark: Any, events: list[ChangeEvent]) -> StreamBatch:
    return StreamBatch(frame(spark, events))


def test_a_batch_run_twice_is_written_once(spark: Any, tmp_path: Path) -> None:
    out = sink(tmp_path)
    rows = batch(spark, [event(n, V1) for n in range(50)])
    out.write_batch(rows, 7, None)
    out.write_batch(rows, 7, None)  # Spark re-runs a batch whose commit a crash prevented
    assert sorted(read_parquet(tmp_path).column("id").to_pylist()) == list(range(50))


def test_leftovers_of_a_crashed_attempt_are_removed_by_the_rerun(spark: Any, tmp_path: Path) -> None:
    out = sink(tmp_path)
    out.write_batch(batch(spark, [event(n, V1) for n in range(10)]), 3, None)
    # A crash between the manifest and the last rename leaves the manifest, one renamed file,
    # and a staging folder: the re-run must end with the batch's rows exactly once.
    manifest = json.loads((tmp_path / "_cdcflow" / "manifests" / "3.json").read_text())
    staging = tmp_path / "_cdcflow" / "staging" / "3"
    staging.mkdir(parents=True)
    (staging / "part-x.parquet").write_bytes(b"half")
    out.write_batch(batch(spark, [event(n, V1) for n in range(10)]), 3, None)
    assert sorted(read_parquet(tmp_path).column("id").to_pylist()) == list(range(10))
    assert not staging.exists()
    assert json.loads((tmp_path / "_cdcflow" / "manifests" / "3.json").read_text()) == manifest


def test_an_added_column_merges_and_deletes_are_rows(spark: Any, tmp_path: Path) -> None:
    out = sink(tmp_path)
    out.write_batch(batch(spark, [event(n, V1) for n in range(5)]), 0, None)
    out.write_batch(batch(spark, [event(n, V2) for n in range(5, 8)] + [event(1, V1, Op.DELETE)]), 1, None)
    table = read_parquet(tmp_path)
    rows = {(r["id"], r["op"]): r for r in table.to_pylist()}
    assert rows[(6, "c")]["email"] == "6@example.com"
    assert rows[(2, "c")]["email"] is None
    assert rows[(1, "d")]["name"] == "n1"  # a delete carries the row as it was
    assert len(rows) == 9


def test_a_date_partition_is_marked_complete_once_the_watermark_passes_its_end(spark: Any, tmp_path: Path) -> None:
    out = sink(tmp_path)
    day = tmp_path / "table=c.ks.users" / "event_date=2026-11-22"
    out.write_batch(batch(spark, [event(1, V1)]), 0, NOV_22_US + DAY_US - 1)
    assert not (day / "_SUCCESS").exists()
    out.write_batch(batch(spark, [event(2, V1, ts_us=NOV_22_US + DAY_US + 5)]), 1, NOV_22_US + DAY_US)
    assert (day / "_SUCCESS").exists()
    assert not (tmp_path / "table=c.ks.users" / "event_date=2026-11-23" / "_SUCCESS").exists()


def test_compaction_rewrites_a_partition_into_one_file_without_losing_rows(spark: Any, tmp_path: Path) -> None:
    out = ParquetSink(
        ParquetSinkConfig(type="parquet", path=str(tmp_path), compact_min_files=3), PluginContext("t", tmp_path / "t")
    )
    for batch_id in range(4):
        out.write_batch(batch(spark, [event(batch_id * 10 + n, V1) for n in range(10)]), batch_id, None)
    day = tmp_path / "table=c.ks.users" / "event_date=2026-11-22"
    assert len(list(day.glob("*.parquet"))) < 3
    assert sorted(read_parquet(tmp_path).column("id").to_pylist()) == list(range(40))


def test_a_too_old_java_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\necho 'openjdk version \"11.0.22\" 2024-01-16' >&2\n")
    java.chmod(java.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    with pytest.raises(EngineUnavailableError, match=r"needs Java 17 or newer; .* is Java 11"):
        spark_session("never-starts", "local[1]", {})


@pytest.mark.parametrize(("rows_per_file", "expected_files"), [(100_000, 1), (40, 3)])
def test_a_batch_writes_about_rows_per_file_rows_a_file(
    spark: Any, tmp_path: Path, rows_per_file: int, expected_files: int
) -> None:
    out = ParquetSink(
        ParquetSinkConfig(type="parquet", path=str(tmp_path), rows_per_file=rows_per_file),
        PluginContext("t", tmp_path / "t.yaml"),
    )
    rows = StreamBatch(frame(spark, [event(n, V1) for n in range(100)]).repartition(6))  # as if read by six tasks
    out.write_batch(rows, 1, None)
    written = list(tmp_path.glob("table=*/event_date=*/*.parquet"))
    assert len(written) == expected_files
    assert sorted(read_parquet(tmp_path).column("id").to_pylist()) == list(range(100))


def test_a_small_batch_gets_a_write_task_for_each_core(spark: Any, tmp_path: Path) -> None:
    """A batch that fits one file is still written by as many tasks as Spark runs at once (here 3,
    its default parallelism), in the grouping first batch and in the one-job batches after it: one
    task would read every input partition in turn while the other cores wait."""
    conf = spark.sparkContext._jsc.sc().conf()  # the live conf the local scheduler reads its parallelism from
    conf.set("spark.default.parallelism", "3")
    try:
        out = sink(tmp_path)
        for batch_id in (1, 2):
            rows = frame(spark, [event(batch_id * 100 + n, V1) for n in range(100)]).repartition(6)
            out.write_batch(StreamBatch(rows), batch_id, None)
            written = list(tmp_path.glob(f"table=*/event_date=*/part-b{batch_id:010d}-*.parquet"))
            assert len(written) == 3, f"batch {batch_id}"
    finally:
        conf.remove("spark.default.parallelism")
    assert sorted(read_parquet(tmp_path).column("id").to_pylist()) == [*range(100, 200), *range(200, 300)]


# --- one destination, several schemas in one batch (issue 16) --------------------------------------


def table_event(
    table: str, n: int, row: dict[str, Any], schema: RowSchema | None, topic: str = "shared"
) -> ChangeEvent:
    """A change of ``table`` routed to ``topic``; without a schema the engine reads one off the values."""
    event = ChangeEvent(
        op=Op.CREATE,
        key={"id": n},
        before=None,
        after={"id": n, **row},
        source=SourceInfo("test", "c", "ks", table, "p0", {"n": n}, NOV_22_US + n),
        ts_ms=NOV_22_US // 1000,
        schema=schema,
        topic=topic,
    )
    return event if schema is not None else event.with_changes(schema=infer_row_schema(event))


def table_schema(table: str, *columns: tuple[str, str]) -> RowSchema:
    key = (Column("id", "bigint", False),)
    return RowSchema(f"c.ks.{table}", key, key + tuple(Column(name, kind) for name, kind in columns))


def test_tables_routed_to_one_destination_are_written_as_one_table(spark: Any, tmp_path: Path) -> None:
    schemas = {
        "orders": table_schema("orders", ("amount", "double"), ("qty", "int")),
        "refunds": table_schema("refunds", ("amount", "double"), ("reason", "text")),
        "audits": table_schema("audits", ("qty", "bigint"), ("flag", "boolean")),
    }
    rows = {
        "orders": lambda n: {"amount": n / 4, "qty": n},
        "refunds": lambda n: {"amount": -n / 4, "reason": f"r{n}"},
        "audits": lambda n: {"qty": 2**40 + n, "flag": n % 2 == 0},
    }
    tables = ("orders", "refunds", "audits")
    events = [table_event(tables[n % 3], n, rows[tables[n % 3]](n), schemas[tables[n % 3]]) for n in range(3000)]
    sink(tmp_path).write_batch(StreamBatch(frame(spark, events).repartition(4)), 0, None)

    table = read_parquet(tmp_path)
    assert set(table.column("table").to_pylist()) == {"shared"}
    assert sorted(table.column("id").to_pylist()) == list(range(3000))  # every row, once
    assert table.schema.field("amount").type == pa.float64()
    assert table.schema.field("qty").type == pa.int64()  # int in orders, bigint in audits: widened
    assert table.schema.field("reason").type == pa.string()
    assert table.schema.field("flag").type == pa.bool_()
    columns = ("amount", "qty", "reason", "flag")
    expected = {e.key["id"]: {c: (e.after or {}).get(c) for c in columns} for e in events}
    got = {r["id"]: {c: r[c] for c in columns} for r in table.to_pylist()}
    assert got == expected  # a column a table lacks is null in its rows


def test_a_column_null_in_some_rows_takes_its_type_from_the_rows_with_a_value(spark: Any, tmp_path: Path) -> None:
    # Schemas read off values (as the engine does for records read back from Kafka): a null
    # value says nothing about the column's type.
    values = {n: (None if n % 3 else n * 1000) for n in range(30)}
    notes = {n: (None if n % 2 else f"note {n}") for n in range(30)}
    events = [table_event("orders", n, {"code": values[n], "note": notes[n], "ratio": None}, None) for n in range(30)]
    assert len({e.schema.fingerprint for e in events if e.schema is not None}) > 1  # one per null pattern
    out = sink(tmp_path)
    out.write_batch(batch(spark, events), 0, None)

    table = read_parquet(tmp_path)
    assert table.schema.field("code").type == pa.int64()
    assert table.schema.field("note").type == pa.string()
    assert "ratio" not in table.schema.names  # null in every row and nothing types it: no column yet
    got = {r["id"]: (r["code"], r["note"]) for r in table.to_pylist()}
    assert got == {n: (values[n], notes[n]) for n in range(30)}

    # A later batch where the column is only null keeps the type an earlier batch wrote.
    out.write_batch(batch(spark, [table_event("orders", 99, {"code": None, "note": None}, None)]), 1, None)
    second = [f for f in ds.dataset(tmp_path, format="parquet").get_fragments() if "part-b0000000001" in f.path]
    assert second[0].physical_schema.field("code").type == pa.int64()


def test_a_real_type_conflict_in_one_destination_is_an_error_naming_both(spark: Any, tmp_path: Path) -> None:
    events = [
        table_event("orders", 1, {"code": 7}, table_schema("orders", ("code", "bigint"))),
        table_event("tags", 2, {"code": "x7"}, table_schema("tags", ("code", "text"))),
    ]
    with pytest.raises(ParquetSchemaConflictError, match=r"'code' is bigint in c\.ks\.orders but text in c\.ks\.tags"):
        sink(tmp_path).write_batch(batch(spark, events), 0, None)
    assert not list(tmp_path.rglob("*.parquet"))  # nothing of the batch is visible


def test_a_batch_mixing_destinations_schemas_and_nulls(spark: Any, tmp_path: Path) -> None:
    v1 = table_schema("users", ("name", "text"))
    v2 = table_schema("users", ("name", "text"), ("email", "text"))
    events = []
    for n in range(600):
        kind = n % 4
        if kind == 0:
            events.append(table_event("users", n, {"name": f"u{n}"}, v1, topic="people"))
        elif kind == 1:
            events.append(table_event("users", n, {"name": f"u{n}", "email": None}, v2, topic="people"))
        elif kind == 2:
            events.append(table_event("admins", n, {"name": None, "level": n}, None, topic="people"))
        else:
            events.append(table_event("orders", n, {"amount": n / 8 if n % 7 else None}, None, topic="sales"))
    sink(tmp_path).write_batch(StreamBatch(frame(spark, events).repartition(3)), 0, None)

    table = read_parquet(tmp_path)
    by_table = {t: sorted(r["id"] for r in table.to_pylist() if r["table"] == t) for t in ("people", "sales")}
    assert by_table == {
        "people": [n for n in range(600) if n % 4 != 3],
        "sales": [n for n in range(600) if n % 4 == 3],
    }
    people = destination_table(tmp_path / "table=people")
    assert people.schema.field("name").type == pa.string()
    assert people.schema.field("email").type == pa.string()
    assert people.schema.field("level").type == pa.int64()
    assert {r["id"]: r["name"] for r in people.to_pylist()} == {
        n: (None if n % 4 == 2 else f"u{n}") for n in range(600) if n % 4 != 3
    }
    assert {r["id"]: r["level"] for r in people.to_pylist() if r["level"] is not None} == {
        n: n for n in range(600) if n % 4 == 2
    }
    sales = destination_table(tmp_path / "table=sales")
    assert sales.schema.field("amount").type == pa.float64()
    assert {r["id"]: r["amount"] for r in sales.to_pylist()} == {
        n: (n / 8 if n % 7 else None) for n in range(600) if n % 4 == 3
    }


def destination_table(folder: Path) -> pa.Table:
    """One destination's files as one table, with no schema unification: each destination is
    written by one job, so every file of a batch has the destination's merged columns."""
    return ds.dataset(folder, format="parquet", partitioning="hive").to_table()


_EDGE_ROWS = [
    {"i": 2**31 - 1, "s": -(2**15), "t": 127, "d": 5e-324, "name": 'é😀"\\\n\x00', "ok": True},
    {"i": -(2**31), "s": 2**15 - 1, "t": -128, "d": 0.1, "name": "", "ok": False},
    {"i": None, "s": None, "t": None, "d": -0.0, "name": None, "ok": None},
    {"i": 7, "d": 1.7976931348623157e308, "name": "\u2028/"},
    {"d": 2**53 + 1, "name": "x" * 5000},  # an integer in a double column, a long text
]
_EDGE_SCHEMA = table_schema(
    "edges", ("i", "int"), ("s", "smallint"), ("t", "tinyint"), ("d", "double"), ("name", "text"), ("ok", "boolean")
)


def test_rows_typed_beside_python_hold_what_from_json_reads_in_spark(spark: Any) -> None:
    from pyspark.sql import functions as F  # noqa: N812

    from cdcflow.schemas import spark_ddl_type
    from cdcflow.sinks.parquet_spark.sink import ENVELOPE_COLUMNS
    from cdcflow.spark_rows import typed_change_rows

    events = [table_event("edges", n, row, _EDGE_SCHEMA, topic="edges") for n, row in enumerate(_EDGE_ROWS)]
    deleted = events[1]
    events[1] = deleted.with_changes(op=Op.DELETE, before=deleted.after, after=None)
    rows = frame(spark, events).coalesce(1)
    columns = [(c.name, c.type) for c in _EDGE_SCHEMA.value_columns]
    typed = typed_change_rows(StreamBatch(rows), "edges", [_EDGE_SCHEMA.to_json()], columns, ENVELOPE_COLUMNS)
    assert typed is not None
    ddl = ", ".join(f"`{name}` {spark_ddl_type(kind)}" for name, kind in columns)
    image = F.coalesce(F.col("after"), F.col("before"), F.col("key"))
    from_json = rows.select(*ENVELOPE_COLUMNS, F.from_json(image, ddl).alias("r")).select(*ENVELOPE_COLUMNS, "r.*")
    assert [f.dataType for f in typed.rows.schema.fields] == [f.dataType for f in from_json.schema.fields]
    assert [tuple(r) for r in typed.rows.collect()] == [tuple(r) for r in from_json.collect()]
    assert typed.misfits() == 0


def test_a_batch_like_the_last_with_a_value_its_column_cannot_type_is_written_as_a_first_batch_would_be(
    spark: Any, tmp_path: Path
) -> None:
    fitting = [table_event("edges", n, row, _EDGE_SCHEMA, topic="edges") for n, row in enumerate(_EDGE_ROWS)]
    # The same row schema, but a value of another type (a source that mistypes one): Spark's
    # from_json decides what it becomes, as it does in a first batch.
    odd = [
        table_event("edges", 10 + n, {**row, "i": 1.5 if n == 2 else row.get("i")}, _EDGE_SCHEMA, topic="edges")
        for n, row in enumerate(_EDGE_ROWS)
    ]
    steady = sink(tmp_path / "steady")
    steady.write_batch(batch(spark, fitting), 0, None)
    steady.write_batch(batch(spark, odd), 1, None)
    first = sink(tmp_path / "first")
    first.write_batch(batch(spark, odd), 0, None)

    def rows(folder: Path) -> list[dict[str, Any]]:
        return sorted((r for r in read_parquet(folder).to_pylist() if r["id"] >= 10), key=lambda r: r["id"])

    assert rows(tmp_path / "steady") == rows(tmp_path / "first")
    assert [r["i"] for r in rows(tmp_path / "first")][2] is None  # what from_json makes of 1.5 in an int column


@pytest.mark.parametrize("image_columns", [(), (("tags", "list<int>"),)], ids=["typed", "parsed-by-spark"])
def test_a_batch_with_rows_the_last_batch_had_not_is_written_whole(
    spark: Any, tmp_path: Path, image_columns: tuple[tuple[str, str], ...]
) -> None:
    # A batch like the last one is written in one job that counts the rows it cannot take (another
    # destination, another row schema); any such row sends the batch the grouping way. Were they
    # not noticed, the orders would be lost and the users' new column missing. Both one-job
    # paths: columns typed beside Python (text), and images Spark parses (a list column).
    v1 = table_schema("users", ("name", "text"), *image_columns)
    v2 = table_schema("users", ("name", "text"), *image_columns, ("email", "text"))
    orders = table_schema("orders", ("amount", "double"))

    def user(n: int, schema: RowSchema, **more: Any) -> ChangeEvent:
        tags = {"tags": [n, n + 1]} if image_columns else {}
        return table_event("users", n, {"name": f"u{n}", **tags, **more}, schema, topic="people")

    out = sink(tmp_path)
    out.write_batch(batch(spark, [user(n, v1) for n in range(5)]), 0, None)
    second = [user(n, v1) for n in range(5, 8)] + [user(n, v2, email=f"{n}@x") for n in (8, 9)]
    second += [table_event("orders", n, {"amount": n / 4}, orders, topic="sales") for n in (10, 11)]
    out.write_batch(batch(spark, second), 1, None)

    rows = read_parquet(tmp_path).to_pylist()
    people = {r["id"]: r["email"] for r in rows if r["table"] == "people"}
    assert people == {**{n: None for n in range(8)}, 8: "8@x", 9: "9@x"}
    assert {r["id"]: r["amount"] for r in rows if r["table"] == "sales"} == {10: 2.5, 11: 2.75}
    if image_columns:
        assert {r["id"]: r["tags"] for r in rows if r["table"] == "people"} == {n: [n, n + 1] for n in range(10)}
