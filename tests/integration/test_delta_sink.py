"""The delta sink on real Spark, read back with delta-rs: the mirror by key (absent is not null, an
older change never wins, delete-then-insert, exactly once per batch id), the change log, schema
changes; Cassandra commit-log deltas from the real node end to end; datagen's change log against
the mirror it makes on local[2]."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cdcflow.contract import PluginContext
from cdcflow.events import ChangeEvent, Column, Op, RowSchema, SourceInfo
from cdcflow.sinks.delta_spark import (
    DELTA_SESSION_CONF,
    DeltaAppIdReusedError,
    DeltaSchemaConflictError,
    DeltaSink,
    DeltaSinkConfig,
)
from cdcflow.sources.datagen.source import DatagenConfig, DatagenSource
from cdcflow.spark_engine.session import spark_session
from cdcflow.spark_rows import STREAM_SCHEMA_DDL, StreamBatch, record_to_row
from tests.integration.conftest import REPO
from tests.integration.delta_helpers import delta_version, read_delta, written_batches
from tests.integration.test_spark_cluster import spark_master  # noqa: F401 - the cluster fixture

pytestmark = [pytest.mark.spark, pytest.mark.timeout(1800)]  # Spark and Delta on two shared cores

USERS = RowSchema(
    "c.ks.users",
    (Column("id", "bigint", False),),
    (Column("id", "bigint", False), Column("name", "text"), Column("visits", "int")),
)


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = spark_session("cdcflow-delta-tests", "local[1]", DELTA_SESSION_CONF)
    yield session
    session.stop()


def change(
    op: str,
    key: int,
    after: dict[str, Any] | None,
    ts: int,
    n: int,
    schema: RowSchema = USERS,
    partition: str = "p0",
) -> ChangeEvent:
    return ChangeEvent(
        Op(op),
        {"id": key},
        None,
        None if after is None else {"id": key, **after},
        SourceInfo("test", "c", "ks", schema.namespace.split(".")[-1], partition, {"n": n}, ts),
        ts // 1000,
        schema,
    )


def delta_sink(path: Path, mode: str = "mirror", app_id: str | None = None) -> DeltaSink:
    config = DeltaSinkConfig(type="delta", path=str(path), mode=mode, app_id=app_id)  # type: ignore[arg-type]
    sink = DeltaSink(config, PluginContext("delta-test", path / "pipeline.yaml"))
    sink.open()
    return sink


def batch(spark: Any, events: list[ChangeEvent]) -> StreamBatch:
    return StreamBatch(spark.createDataFrame([record_to_row(e, False) for e in events], STREAM_SCHEMA_DDL))


def by_id(rows: list[dict[str, Any]], *columns: str) -> dict[int, tuple[Any, ...]]:
    return {r["id"]: tuple(r[c] for c in columns) for r in rows}


def test_the_mirror_keeps_what_a_change_left_out_never_takes_an_older_change_and_writes_a_batch_once(
    spark: Any, tmp_path: Path
) -> None:
    sink = delta_sink(tmp_path)
    table = tmp_path / "c.ks.users"
    whole = [change("c", k, {"name": f"n{k}", "visits": k}, ts=1_000, n=k) for k in range(1, 6)]
    sink.write_batch(batch(spark, whole), 0, None)
    # Whole rows (each key's last change decides): a late older row from another partition (a
    # replica, a key's previous CDC generation), a delete then an insert.
    second = [
        change("u", 1, {"name": "newer", "visits": 10}, ts=2_000, n=10),
        change("u", 2, {"name": "older", "visits": 0}, ts=500, n=11, partition="p1"),
        change("d", 3, None, ts=2_000, n=12),
        change("c", 3, {"name": "again", "visits": 3}, ts=2_100, n=13),
        change("d", 4, None, ts=2_000, n=14),
    ]
    sink.write_batch(batch(spark, second), 1, None)
    version = delta_version(table)
    # Spark re-runs batch 1 after a crash: Delta's transaction id makes it a no-op.
    sink.write_batch(batch(spark, [change("u", 5, {"name": "rerun", "visits": 99}, ts=3_000, n=15)]), 1, None)
    assert delta_version(table) == version
    # Changes of some columns: the others keep their values, a null is written as null; a late
    # partial change of an older time is skipped.
    partial = [
        change("u", 1, {"visits": None}, ts=3_000, n=20),
        change("u", 3, {"name": "partial"}, ts=3_000, n=21),
        change("u", 5, {"name": "stale"}, ts=900, n=22, partition="p1"),
    ]
    sink.write_batch(batch(spark, partial), 2, None)
    assert by_id(read_delta(table), "name", "visits") == {
        1: ("newer", None),
        2: ("n2", 2),
        3: ("partial", 3),
        5: ("n5", 5),
    }
    assert written_batches(table) == [0, 1, 2]


def test_the_change_log_appends_each_change_once_and_takes_added_columns(spark: Any, tmp_path: Path) -> None:
    sink = delta_sink(tmp_path, mode="changelog")
    table = tmp_path / "c.ks.users"
    first = [change("c", k, {"name": f"n{k}", "visits": k}, ts=1_000, n=k) for k in range(3)]
    sink.write_batch(batch(spark, first), 0, None)
    sink.write_batch(batch(spark, first), 0, None)  # a re-run
    wider = RowSchema("c.ks.users", USERS.key_columns, (*USERS.value_columns, Column("email", "text")), version=2)
    sink.write_batch(
        batch(spark, [change("u", 1, {"name": "m", "visits": 2, "email": "e@x"}, 2_000, 5, wider)]), 1, None
    )
    rows = read_delta(table)
    assert sorted((r["op"], r["id"], r["email"]) for r in rows) == [
        ("c", 0, None),
        ("c", 1, None),
        ("c", 2, None),
        ("u", 1, "e@x"),
    ]
    # Another table routed here with the column of another type is refused, naming both.
    clash = RowSchema("c.ks.users", USERS.key_columns, (Column("id", "bigint", False), Column("visits", "text")), 3)
    with pytest.raises(DeltaSchemaConflictError, match=r"'visits' is int.*as string"):
        sink.write_batch(batch(spark, [change("u", 2, {"visits": "many"}, 3_000, 6, clash)]), 2, None)
    # A query whose checkpoint did not write the table (a fresh one, at batch 0) is refused.
    with pytest.raises(DeltaAppIdReusedError, match="batch 1"):
        delta_sink(tmp_path, mode="changelog").write_batch(batch(spark, first), 0, None)


# --- end to end -------------------------------------------------------------------------------


def run_pipeline(file: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "cdcflow.cli", "run", str(file)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # the driver and its JVM: one group to signal
    )


def wait_for(condition: Any, what: str, process: subprocess.Popen[bytes], timeout_s: float = 900) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        if process.poll() is not None:
            _, err = process.communicate()
            raise AssertionError(f"the pipeline exited ({process.returncode}) before {what}:\n{err.decode()[-3000:]}")
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {what}")


def datagen_final_state(config: DatagenConfig) -> dict[int, dict[str, Any]]:
    """Each key's row after the whole change log: a key lives in one partition, so its last
    change there decides; a key whose last change is a delete has no row."""
    source = DatagenSource(config, PluginContext("expected", Path("expected.yaml")))
    final: dict[int, dict[str, Any] | None] = {}
    for partition in range(config.partitions):
        events = config.count // config.partitions + (1 if partition < config.count % config.partitions else 0)
        for seq in range(1, events + 1):
            event = source.event(partition, seq, 0)
            final[event.key["id"]] = None if event.op is Op.DELETE else event.after
    return {k: v for k, v in final.items() if v is not None}


def datagen_pipeline(folder: Path, name: str, count: int, keys: int, master: str, per_read: int) -> Path:
    file = folder / f"{name}.yaml"
    file.write_text(
        f"name: {name}\n"
        f"source: {{type: datagen, count: {count}, keys: {keys}, tables: 1, partitions: 2, event_size: 16}}\n"
        "sink: {type: delta, path: lake, mode: mirror}\n"
        f"checkpoint: {{type: file, path: ckpt-{name}}}\n"
        f"engine: {{type: spark, master: '{master}', trigger_interval_ms: 0, max_records_per_read: {per_read}}}\n"
    )
    return file


def assert_mirror_is_the_final_state(table: Path, expected: dict[int, dict[str, Any]]) -> None:
    rows = read_delta(table)
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)), "a key is in the mirror twice"
    got = {r["id"]: {c: r[c] for c in ("id", "seq", "name", "amount", "payload")} for r in rows}
    want = {k: {c: v[c] for c in ("id", "seq", "name", "amount", "payload")} for k, v in expected.items()}
    assert set(got) - set(want) == set(), "keys the change log deleted or never had"
    assert set(want) - set(got) == set(), "keys missing"
    stale = {k for k in want if got[k] != want[k]}
    assert not stale, f"{len(stale)} keys hold an older change, e.g. {sorted(stale)[:5]}"


@pytest.mark.timeout(3600)  # a Spark pipeline of several micro-batches, on two shared cores
def test_datagen_changes_end_as_the_state_their_change_log_implies_through_a_driver_sigkill(tmp_path: Path) -> None:
    """A bounded datagen into the mirror on local[2], its driver SIGKILLed once a batch is in the
    table, then run again to the end: the mirror is each key's last change, each batch written once."""
    count, keys = 2_000, 200  # two batches of 1,000 (500 a partition): one merged before the kill, one after
    file = datagen_pipeline(tmp_path, "mirror", count, keys, "local[2]", per_read=500)
    table = tmp_path / "lake" / "datagen.shop.table_0"
    process = run_pipeline(file)
    try:
        wait_for(lambda: delta_version(table) >= 1 and written_batches(table), "a batch was merged", process)
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # the driver and its JVM, mid-stream
        process.wait(60)
    killed_at = written_batches(table)
    rerun = run_pipeline(file)
    _, err = rerun.communicate(timeout=1800)
    assert rerun.returncode == 0, err.decode()[-3000:]
    batches = written_batches(table)
    assert batches[: len(killed_at)] == killed_at
    assert len(batches) == len(set(batches)), f"a batch was merged twice: {batches}"
    config = DatagenConfig(type="datagen", count=count, keys=keys, tables=1, partitions=2, event_size=16)
    assert_mirror_is_the_final_state(table, datagen_final_state(config))


def cassandra_rows(session: Any, keyspace: str) -> dict[tuple[Any, Any], dict[str, Any]]:
    """``SELECT *`` on the real node, values as delta-rs gives them (sets sorted, maps as dicts)."""
    rows = {}
    for row in session.execute(f"SELECT * FROM {keyspace}.t"):
        values = row._asdict()
        values["tags"] = sorted(values["tags"]) if values["tags"] else None
        values["attrs"] = dict(values["attrs"]) if values["attrs"] else None
        address = values["addr"]
        values["addr"] = None if address is None else {"street": address.street, "zip": address.zip}
        rows[(values["pk"], values["ck"])] = values
    return rows


def mirror_rows(table: Path) -> dict[tuple[Any, Any], dict[str, Any]]:
    if delta_version(table) < 0:
        return {}
    rows = {}
    for row in read_delta(table):
        values = {c: row[c] for c in ("pk", "ck", "s", "v", "w", "tags", "attrs", "addr")}
        values["tags"] = sorted(values["tags"]) if values["tags"] else None
        values["attrs"] = dict(values["attrs"]) if values["attrs"] else None
        rows[(values["pk"], values["ck"])] = values
    return rows


@pytest.mark.timeout(3600)  # a Spark pipeline of several micro-batches, on two shared cores
def test_cassandra_deltas_mirror_the_table_as_select_shows_it(
    tmp_path: Path, cassandra_session: Any, keyspace: str, cdc_raw_dir: Path
) -> None:
    """Partial updates, collection and user-type field changes, a static column, a range delete,
    a partition delete and a partition with static values alone, written on the real node and
    read from its commit log: the mirror equals ``SELECT *``, across two batches at least (the
    second changes rows the table already holds)."""
    session = cassandra_session
    session.execute(f"CREATE TYPE {keyspace}.address (street text, zip int)")
    session.execute(
        f"CREATE TABLE {keyspace}.t (pk int, ck int, s text static, v text, w int, tags set<int>, "
        f"attrs map<text, int>, addr address, PRIMARY KEY (pk, ck)) WITH cdc = true"
    )
    for ck in range(1, 6):
        session.execute(
            f"INSERT INTO {keyspace}.t (pk, ck, v, w, tags, attrs, addr) VALUES "
            f"(1, {ck}, 'v{ck}', {ck}, {{{ck}, 100}}, {{'a': {ck}, 'b': 10}}, {{street: 'main', zip: {ck}}})"
        )
    file = tmp_path / "cassandra.yaml"
    file.write_text(
        "name: cassandra-mirror\n"
        f"source: {{type: cassandra_commitlog, cdc_raw: '{cdc_raw_dir}', cluster: c, node: node1,"
        f" tables: [{keyspace}.t], processed_segments: keep, error_store: {{type: file, path: errors.jsonl}}}}\n"
        "sink: {type: delta, path: lake, mode: mirror}\n"
        "checkpoint: {type: file, path: ckpt}\n"
        # One batch reads past what other tests left in the node's cdc_raw (kept, not deleted).
        "engine: {type: spark, master: 'local[1]', trigger_interval_ms: 500, max_records_per_read: 10000000}\n"
    )
    table = tmp_path / "lake" / f"c.{keyspace}.t"
    process = run_pipeline(file)
    try:
        wait_for(lambda: mirror_rows(table) == cassandra_rows(session, keyspace), "the inserts are mirrored", process)
        statements = [
            "UPDATE {ks}.t SET v = 'partial' WHERE pk = 1 AND ck = 1",  # w, tags... untouched
            "UPDATE {ks}.t SET tags = tags + {{9}}, attrs['z'] = 26 WHERE pk = 1 AND ck = 2",
            "UPDATE {ks}.t SET tags = tags - {{100}}, attrs = attrs - {{'a'}} WHERE pk = 1 AND ck = 2",
            "UPDATE {ks}.t SET addr.zip = 99 WHERE pk = 1 AND ck = 3",  # one field of a user type
            "UPDATE {ks}.t SET s = 'shared' WHERE pk = 1",  # a static column: every row of the partition
            "DELETE FROM {ks}.t WHERE pk = 1 AND ck >= 4 AND ck < 5",  # a range
            "UPDATE {ks}.t SET w = null WHERE pk = 1 AND ck = 5",
            "INSERT INTO {ks}.t (pk, ck, v) VALUES (2, 1, 'gone soon')",
            "DELETE FROM {ks}.t WHERE pk = 2",  # a partition
            "UPDATE {ks}.t SET s = 'alone' WHERE pk = 3",  # static values and no row
        ]
        for statement in statements:
            session.execute(statement.format(ks=keyspace))
        expected = cassandra_rows(session, keyspace)
        assert expected[(1, 1)]["w"] == 1 and expected[(3, None)]["s"] == "alone"  # what the writes mean
        wait_for(lambda: mirror_rows(table) == expected, "the deltas are mirrored", process)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(120)


@pytest.mark.timeout(3600)  # a Spark pipeline of several micro-batches, on two shared cores
@pytest.mark.slow
def test_the_mirror_on_a_standalone_cluster(tmp_path: Path, spark_master: str) -> None:  # noqa: F811
    """The same mirror with the driver, the fold and the MERGE's tasks in separate JVMs and
    Python workers (scripts/spark_cluster.sh): each key's last change, nothing else."""
    count, keys = 2_000, 150
    file = datagen_pipeline(tmp_path, "cluster", count, keys, spark_master, per_read=700)
    process = run_pipeline(file)
    _, err = process.communicate(timeout=1800)
    assert process.returncode == 0, err.decode()[-3000:]
    config = DatagenConfig(type="datagen", count=count, keys=keys, tables=1, partitions=2, event_size=16)
    assert_mirror_is_the_final_state(tmp_path / "lake" / "datagen.shop.table_0", datagen_final_state(config))
