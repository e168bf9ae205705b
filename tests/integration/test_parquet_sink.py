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

from connector_core.contract import PluginContext
from connector_core.errors import EngineUnavailableError
from connector_core.events import ChangeEvent, Column, Op, RowSchema, SourceInfo
from connector_core.spark_engine.rows import STREAM_SCHEMA_DDL, record_to_row
from connector_core.spark_engine.session import spark_session
from sinks.parquet_spark import ParquetSink, ParquetSinkConfig

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


def batch(spark: Any, events: list[ChangeEvent]) -> Any:
    return spark.createDataFrame([record_to_row(e, False) for e in events], STREAM_SCHEMA_DDL)


def read(path: Path) -> pa.Table:
    """Every file under ``path``, with the union of their columns (as a reader of an evolving table does)."""
    files = ds.dataset(path, format="parquet", partitioning="hive")
    partition_columns = pa.schema([("table", pa.string()), ("event_date", pa.string())])
    schema = pa.unify_schemas([*(f.physical_schema for f in files.get_fragments()), partition_columns])
    return ds.dataset(
        path, format="parquet", partitioning=ds.partitioning(partition_columns, flavor="hive"), schema=schema
    ).to_table()


def test_a_batch_run_twice_is_written_once(spark: Any, tmp_path: Path) -> None:
    out = sink(tmp_path)
    rows = batch(spark, [event(n, V1) for n in range(50)])
    out.write_batch(rows, 7, None)
    out.write_batch(rows, 7, None)  # Spark re-runs a batch whose commit a crash prevented
    assert sorted(read(tmp_path).column("id").to_pylist()) == list(range(50))


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
    assert sorted(read(tmp_path).column("id").to_pylist()) == list(range(10))
    assert not staging.exists()
    assert json.loads((tmp_path / "_cdcflow" / "manifests" / "3.json").read_text()) == manifest


def test_an_added_column_merges_and_deletes_are_rows(spark: Any, tmp_path: Path) -> None:
    out = sink(tmp_path)
    out.write_batch(batch(spark, [event(n, V1) for n in range(5)]), 0, None)
    out.write_batch(batch(spark, [event(n, V2) for n in range(5, 8)] + [event(1, V1, Op.DELETE)]), 1, None)
    table = read(tmp_path)
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
    assert sorted(read(tmp_path).column("id").to_pylist()) == list(range(40))


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
    rows = batch(spark, [event(n, V1) for n in range(100)]).repartition(6)  # as if read by six tasks
    out.write_batch(rows, 1, None)
    written = list(tmp_path.glob("table=*/event_date=*/*.parquet"))
    assert len(written) == expected_files
    assert sorted(read(tmp_path).column("id").to_pylist()) == list(range(100))
