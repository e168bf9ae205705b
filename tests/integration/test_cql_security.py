"""The Cassandra and ScyllaDB sources on a real node with client encryption (clients present a
certificate) and PasswordAuthenticator: ``ssl: {ca, cert, key, verify}`` and
``username``/``password`` in each source's config, as an ordinary (non-superuser) role; and a
refusal is a config error, not a retry."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from cdcflow.contract import PluginContext, Source
from cdcflow.events import ChangeEvent
from cdcflow.sources.cassandra_commitlog.snapshot import CassandraSnapshotSource, CassandraSnapshotSourceConfig
from cdcflow.sources.cassandra_commitlog.source import CassandraCommitLogSource, CassandraCommitLogSourceConfig
from cdcflow.sources.cql.connection import CqlAccessRefusedError
from cdcflow.sources.scylla_cdc.exceptions import StreamsPerQueryError
from cdcflow.sources.scylla_cdc.source import ScyllaCdcSource, ScyllaCdcSourceConfig
from tests.integration.conftest import REPO
from tests.integration.secure_cassandra import SecureNode, secure_keyspace, secure_node
from tests.standins.scylla.writer import ScyllaCdcWriter, SimulatedKeyspaces

__all__ = ["secure_keyspace", "secure_node"]  # the fixtures, for pytest


def drain(source: Source[Any]) -> list[ChangeEvent]:
    """Everything every partition holds up to its current end."""
    events: list[ChangeEvent] = []
    for partition in source.partitions():
        start = source.initial_offset(partition)
        while (end := source.latest_offset(partition, start, 10_000)) != start:
            events.extend(e for e in source.read(partition, start, end) if isinstance(e, ChangeEvent))
            start = end
    return events


def table_of_rows(node: SecureNode, keyspace: str, rows: int, cdc: bool = False) -> str:
    """``<keyspace>.t (id int PRIMARY KEY, v text)`` holding ``rows`` rows, made by the superuser."""
    table = f"{keyspace}.t"
    node.session.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v text)" + (" WITH cdc = true" if cdc else ""))
    insert = node.session.prepare(f"INSERT INTO {table} (id, v) VALUES (?, ?)")
    for i in range(rows):
        node.session.execute(insert, (i, str(i)))
    return table


def test_the_snapshot_source_reads_over_tls_as_an_ordinary_role(
    secure_node: SecureNode, secure_keyspace: str, tmp_path: Path
) -> None:
    table = table_of_rows(secure_node, secure_keyspace, 40)
    config = CassandraSnapshotSourceConfig.model_validate(
        {"type": "cassandra_snapshot", "table": table, "ranges": 4, "progress": False, **secure_node.reader()}
    )
    source = CassandraSnapshotSource(config, PluginContext("secure-snapshot", tmp_path / "p.yaml"))
    source.open()
    try:
        events = drain(source)
    finally:
        source.close()
    assert sorted(e.after["id"] for e in events if e.after) == list(range(40))


def test_the_commitlog_source_reads_its_node_over_tls_as_an_ordinary_role(
    secure_node: SecureNode, secure_keyspace: str, tmp_path: Path
) -> None:
    table = table_of_rows(secure_node, secure_keyspace, 20, cdc=True)
    config = CassandraCommitLogSourceConfig.model_validate(
        {
            "type": "cassandra_commitlog",
            "cdc_raw": str(secure_node.cdc_raw),
            "node_address": secure_node.host,
            "tables": [table],
            "processed_segments": "keep",
            "error_store": {"type": "file", "path": str(tmp_path / "errors.jsonl")},
            **secure_node.reader(),
        }
    )
    source = CassandraCommitLogSource(config, PluginContext("secure-commitlog", tmp_path / "p.yaml"))
    source.open()
    try:
        found: set[int] = set()
        deadline = time.monotonic() + 60
        while found != set(range(20)) and time.monotonic() < deadline:
            found |= {e.after["id"] for e in drain(source) if e.after and e.source.table == "t"}
            time.sleep(0.5)  # Cassandra syncs the commit log about every second
    finally:
        source.close()
    assert found == set(range(20))


def scylla_config(secure_node: SecureNode, **overrides: Any) -> ScyllaCdcSourceConfig:
    section = {"type": "scylla_cdc", "tables": ["ks.t"], **secure_node.reader(), **overrides}
    return ScyllaCdcSourceConfig.model_validate(section)


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"password": "wrong"}, "authentication failed"),
        ({"username": None, "password": None}, "authentication failed"),
        ({"ssl": "stranger"}, "certificate did not verify"),
    ],
    ids=["wrong password", "no credentials", "a CA that did not sign the node"],
)
def test_a_refused_connection_is_a_config_error_naming_what_to_fix(
    secure_node: SecureNode, tmp_path: Path, overrides: dict[str, Any], reason: str
) -> None:
    if overrides.get("ssl") == "stranger":
        overrides = {"ssl": secure_node.ssl(ca=str(secure_node.tls / "stranger-ca.pem"))}
    context = PluginContext("refused", tmp_path / "p.yaml")
    sources: list[Source[Any]] = [
        ScyllaCdcSource(scylla_config(secure_node, **overrides), context),
        CassandraSnapshotSource(
            CassandraSnapshotSourceConfig.model_validate(
                {"type": "cassandra_snapshot", "table": "ks.t", **secure_node.reader(), **overrides}
            ),
            context,
        ),
    ]
    for source in sources:
        with pytest.raises(CqlAccessRefusedError, match=reason):
            source.open()


def test_verify_false_encrypts_without_checking_the_node(secure_node: SecureNode, tmp_path: Path) -> None:
    # The node's certificate is from a CA the client does not know: only verify: false connects.
    config = CassandraSnapshotSourceConfig.model_validate(
        {
            "type": "cassandra_snapshot",
            "table": "system.local",
            "progress": False,
            **secure_node.reader(),
            "ssl": secure_node.ssl(ca=str(secure_node.tls / "stranger-ca.pem"), verify=False),
        }
    )
    source = CassandraSnapshotSource(config, PluginContext("unverified", tmp_path / "p.yaml"))
    source.open()
    source.close()


def test_a_node_with_128_shards_is_read_in_queries_of_at_most_100_streams(
    secure_node: SecureNode, secure_keyspace: str, tmp_path: Path
) -> None:
    # A vnode generation has one stream per shard of the range's owner (cdc/generation.cc
    # create_stream_ids), and a window query names every stream of its group in one IN. ScyllaDB
    # refuses more than max_partition_key_restrictions_per_query (100) keys
    # (cql3/restrictions/statement_restrictions.cc); this node's guardrail refuses the same.
    writer = ScyllaCdcWriter(
        secure_node.session,
        SimulatedKeyspaces.prefixed(secure_keyspace),
        shards=128,
        seed=12,
    )
    writer.create_metadata_tables()
    try:
        writer.bootstrap(vnodes=2, timestamp_us=writer.coordinator_now_us() - 60_000_000)
        table = f"{secure_keyspace}.t"
        writer.create_table(secure_keyspace, "t", [("id", "int")], [], [("v", "int")])
        past = writer.coordinator_now_us() - 4_000_000
        writer.insert_many(table, [{"id": i, "v": i} for i in range(300)], timestamp_us=past)
        section = {
            "type": "scylla_cdc",
            "tables": [table],
            "confidence_window_ms": 2000,
            "cluster_write_timeout_ms": 1000,
            "generation_leeway_ms": 1000,  # read after every write: no leeway to wait for
            "generations_keyspace": writer.keyspaces.distributed,
            "tablets_keyspace": writer.keyspaces.local,
            **secure_node.reader(),
        }
        context = PluginContext(f"shards-{secure_keyspace}", tmp_path / "p.yaml")
        unchunked = ScyllaCdcSource(
            ScyllaCdcSourceConfig.model_validate({**section, "max_streams_per_query": 128}), context
        )
        unchunked.open()
        try:
            with pytest.raises(StreamsPerQueryError, match="128 streams"):
                drain(unchunked)
        finally:
            unchunked.close()
        source = ScyllaCdcSource(ScyllaCdcSourceConfig.model_validate(section), context)
        source.open()
        try:
            partitions = source.partitions()
            events = drain(source)
        finally:
            source.close()
        assert len(partitions) == 2 and all(len(p.info["streams"]) == 128 for p in partitions)
        assert sorted(e.after["id"] for e in events if e.after) == list(range(300))
    finally:
        writer.drop_keyspaces()


def test_bootstrap_reads_with_the_commitlog_pipeline_s_credentials_and_tls(
    secure_node: SecureNode, secure_keyspace: str, tmp_path: Path
) -> None:
    table = table_of_rows(secure_node, secure_keyspace, 30, cdc=True)
    reader = secure_node.reader()
    file = tmp_path / "secure.yaml"
    file.write_text(
        "name: secure-bootstrap\n"
        f"source: {json.dumps({'type': 'cassandra_commitlog', 'cdc_raw': str(secure_node.cdc_raw), **reader})}\n"
        "sink: {type: file, path: out/changes.jsonl}\n"
        "checkpoint: {type: file, path: ckpt}\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "cdcflow.cli", "bootstrap", str(file), "--table", table, "--ranges", "4"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = (tmp_path / "out" / "changes.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["value"]["after"]["id"] for line in lines) == list(range(30))
