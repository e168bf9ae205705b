"""CDC metadata read at ScyllaDB's own consistency, on the real Cassandra node, with the stand-in
keeping ``system_distributed`` at RF 3 as ScyllaDB does (``db/system_distributed_keyspace.cc``
lines 343-346).

ScyllaDB reads and writes its CDC description tables at ``quorum_if_many``: QUORUM when more than
one node owns tokens, ONE on a single node (lines 404-423); so do its consumers (scylla-cdc-java
``computeCL``, -go ``tryFetchGenerations``, -rust ``select_consistency``). The user's
``consistency`` is for the log tables, which live in the user's keyspaces.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cdcflow.sources.scylla_cdc.connection import connect
from cdcflow.sources.scylla_cdc.exceptions import CdcMetadataUnavailableError
from cdcflow.sources.scylla_cdc.metadata import GenerationReader, MetadataQueries
from tests.integration.kafka_helpers import start_logged
from tests.integration.scylla_helpers import Expectations, arrived, pipeline, source_section, wait_for
from tests.integration.test_scylla_pipelines import stop
from tests.standins.scylla.writer import ScyllaCdcWriter, SimulatedKeyspaces


def rf3_writer(session: Any, keyspace: str) -> ScyllaCdcWriter:
    """The stand-in as ScyllaDB keeps its metadata: system_distributed at RF 3 (the default)."""
    writer = ScyllaCdcWriter(
        session, SimulatedKeyspaces.prefixed(keyspace), shards=4, ring_delay_s=1.0, generation_leeway_us=2_000_000
    )
    writer.create_metadata_tables()
    return writer


@pytest.mark.kafka
def test_a_single_node_delivers_every_change_at_the_default_consistency(
    tmp_path: Path, kafka_bootstrap: str, topic_prefix: str, cassandra_session: Any, keyspace: str
) -> None:
    # The reproduction: one node, system_distributed at RF 3, the source's consistency
    # left at its default (QUORUM). QUORUM of RF 3 needs 2 replicas: the metadata must be read
    # at ONE, as ScyllaDB reads it on one node; the log (the user's RF 1 keyspace) at QUORUM.
    writer = rf3_writer(cassandra_session, keyspace)
    try:
        writer.bootstrap(vnodes=4)
        writer.create_table(keyspace, "orders", [("id", "int")], [], [("total", "int")])
        table = f"{keyspace}.orders"
        expected = Expectations(writer)
        section = source_section(writer, [table])
        assert "consistency" not in section  # the default
        process, log = start_logged(pipeline(tmp_path, topic_prefix, kafka_bootstrap, section))
        try:
            wait_for(lambda: any(" running: " in line for line in log), 60, "the worker to start", process)
            for i in range(40):
                expected.write(table, "c", {"id": i}, {"total": i})
            expected.write(table, "u", {"id": 3}, {"total": 30})
            expected.write(table, "d", {"id": 4})
            total = len(expected.written)
            wait_for(lambda: len(arrived(kafka_bootstrap, topic_prefix)) >= total, 60, f"{total} events", process)
        finally:
            stop(process)
        expected.check(arrived(kafka_bootstrap, topic_prefix), exactly_once=True)
    finally:
        writer.drop_keyspaces()


def reader(session_profile: tuple[Any, object], writer: ScyllaCdcWriter, owners: Callable[[], int]) -> GenerationReader:
    session, profile = session_profile
    return GenerationReader(
        MetadataQueries(session, profile, owners), writer.keyspaces.distributed, writer.keyspaces.local
    )


def test_with_several_token_owners_the_metadata_is_read_at_quorum(cassandra_session: Any, keyspace: str) -> None:
    writer = rf3_writer(cassandra_session, keyspace)
    connection = connect(["127.0.0.1"], 9042, consistency="ONE")
    try:
        writer.bootstrap(vnodes=2)
        session = (connection.session, connection.metadata_profile)
        assert [g.timestamp_us for g in reader(session, writer, lambda: 1).generations()]
        # Two owners: QUORUM of RF 3, which this one node cannot give; the user's ONE is not used.
        with pytest.raises(CdcMetadataUnavailableError, match="QUORUM"):
            reader(session, writer, lambda: 2).generations()
    finally:
        connection.cluster.shutdown()
        writer.drop_keyspaces()


def test_a_stream_list_read_below_quorum_on_several_nodes_is_read_again(cassandra_session: Any, keyspace: str) -> None:
    # A node that joined a moment ago: the driver still sees one token owner, so the generation's
    # streams are read at ONE, from a replica that has not received every row yet (rows deleted
    # here stand for those). Once the driver sees two owners, that list is not final: it is read
    # again (at QUORUM, which RF 1 lets this one node answer) and the missing ranges appear.
    writer = ScyllaCdcWriter(cassandra_session, SimulatedKeyspaces.prefixed(keyspace), distributed_replication_factor=1)
    writer.create_metadata_tables()
    connection = connect(["127.0.0.1"], 9042, consistency="ONE")
    owners = [1]
    try:
        generation = writer.bootstrap(vnodes=4)
        descriptions = f"{writer.keyspaces.distributed}.cdc_streams_descriptions_v2"
        ends = sorted(r[0] for r in cassandra_session.execute(f"SELECT range_end FROM {descriptions}"))
        kept = {row[0]: row[1] for row in cassandra_session.execute(f"SELECT range_end, streams FROM {descriptions}")}
        for end in ends[2:]:
            cassandra_session.execute(
                f"DELETE FROM {descriptions} WHERE time = %s AND range_end = %s", (generation // 1000, end)
            )
        generations = reader((connection.session, connection.metadata_profile), writer, lambda: owners[0])
        [partial] = generations.generations()
        assert len(partial.ranges) == 2
        for end in ends[2:]:
            cassandra_session.execute(
                f"INSERT INTO {descriptions} (time, range_end, streams) VALUES (%s, %s, %s)",
                (generation // 1000, end, kept[end]),
            )
        owners[0] = 2
        [complete] = generations.generations()
        assert len(complete.ranges) == 4
    finally:
        connection.cluster.shutdown()
        writer.drop_keyspaces()
