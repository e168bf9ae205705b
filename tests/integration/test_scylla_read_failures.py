"""The scylla_cdc source when a log query fails, and when a stream group is idle (issue 22, items
6 and 9), against ScyllaDB's CDC tables on the real Cassandra node.

A read timeout is made by cassandra-driver itself: a request-init listener (the driver's hook,
called as a request is sent) re-arms one log query's client timeout to a microsecond, so the
driver gives up on it with its own ``OperationTimedOut`` while the node answers as usual. Nothing
of Cassandra is imitated; the driver's timer is private API (``ResponseFuture._start_timer``), which
is why it is set in one helper here.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from cdcflow.config import parse_pipeline
from cdcflow.contract import PluginContext
from cdcflow.errors import TransientError
from cdcflow.events import ChangeEvent
from cdcflow.pipeline import PipelineRunner, build_runner
from cdcflow.plugins import PluginRegistry
from cdcflow.sources.scylla_cdc.exceptions import LogTableGoneError
from cdcflow.sources.scylla_cdc.source import ScyllaCdcSource, ScyllaCdcSourceConfig
from tests.integration.scylla_helpers import (
    Expectations,
    arrived,
    orders_table,
    scylla_writer,
    source_section,
    wait_for,
)
from tests.standins.scylla.writer import ScyllaCdcWriter

__all__ = ["scylla_writer"]  # the fixture, for pytest


_FIRST_STREAM = re.compile(r"IN \((0x[0-9a-f]+)")


class LogQueries:
    """A request-init listener: records the first stream of each log query a session sends (the
    first of its ``IN`` list) and makes the driver time out the ``time_out``-th one."""

    def __init__(self, time_out: int | None = None) -> None:
        self.time_out = time_out
        self.first_streams: list[str] = []
        self.statements: list[Any] = []
        self.failures: list[str] = []

    @property
    def sent(self) -> int:
        return len(self.first_streams)

    def __call__(self, response_future: Any) -> None:
        text = str(getattr(response_future.message, "query", ""))  # as sent, values in place
        if "_scylla_cdc_log" not in text:
            return
        found = _FIRST_STREAM.search(text)
        self.first_streams.append(found.group(1)[2:] if found else "")
        self.statements.append(response_future.query)
        if self.sent == self.time_out:
            response_future.add_errback(lambda exc: self.failures.append(type(exc).__name__))
            # the driver armed the request's timer when it made the future: re-arm it short
            response_future._cancel_timer()
            response_future._timer = None
            response_future.timeout = 1e-6
            response_future._start_timer()


def run_in_thread(runner: PipelineRunner) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            runner.run()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, errors


def session_of(runner: PipelineRunner, errors: list[BaseException]) -> Any:
    source: Any = runner.source
    deadline = time.monotonic() + 60
    while source._session is None:
        assert not errors, errors
        assert time.monotonic() < deadline, "the source never connected"
        time.sleep(0.02)
    return source._session


def test_one_read_timeout_is_retried_for_its_stream_group_alone(
    keyspace: str, scylla_writer: ScyllaCdcWriter, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    writer = scylla_writer
    table = orders_table(writer, keyspace, vnodes=8)
    expectations = Expectations(writer)
    for i in range(400):
        expectations.write(table, "c", {"id": i}, {"total": i})
    time.sleep(3.2)  # past the confidence window: a backlog in every stream group
    registry = PluginRegistry.from_entry_points()
    data = {
        "name": f"timeout-{keyspace}",
        "source": {**source_section(writer, [table]), "cluster": topic_prefix},
        "sink": {"type": "kafka", "bootstrap_servers": kafka_bootstrap, "linger_ms": 5},
        # one checkpoint early in the run (the first read's), then none until the stop: what a
        # rewind replays is everything delivered after it
        "checkpoint": {"type": "file", "path": str(tmp_path / "ckpt"), "interval_ms": 600_000},
        "engine": {"max_records_per_read": 20, "batch_size": 20, "poll_interval_ms": 20},
        "errors": {"retry": {"initial_backoff_ms": 50, "max_backoff_ms": 200}},
    }
    runner = build_runner(parse_pipeline(data, tmp_path / "p.yaml", registry), registry)
    thread, errors = run_in_thread(runner)
    queries = LogQueries(time_out=12)  # a dozen reads in: several groups delivered since the checkpoint
    session_of(runner, errors).add_request_init_listener(queries)
    try:
        wait_for(lambda: not expectations.missing(arrived(kafka_bootstrap, topic_prefix)), 90, "every write", None)
    finally:
        runner.stop.set()
        thread.join(timeout=60)
    assert not errors, errors
    assert queries.failures == ["OperationTimedOut"]  # the driver's own timeout happened, once
    events = arrived(kafka_bootstrap, topic_prefix)
    duplicates = len(events) - len({e.identity for e in events})
    print(f"\none read timeout: {len(events)} events for 400 writes, {duplicates} duplicates")
    assert duplicates == 0


@pytest.mark.parametrize("dropped", ["table", "keyspace"])
def test_a_dropped_table_stops_the_source_at_once_naming_it(
    keyspace: str, scylla_writer: ScyllaCdcWriter, cassandra_session: Any, dropped: str
) -> None:
    writer = scylla_writer
    table = orders_table(writer, keyspace, vnodes=2)
    writer.insert(table, {"id": 1, "total": 1})
    config = ScyllaCdcSourceConfig.model_validate(source_section(writer, [table], confidence_window_ms=3000))
    source = ScyllaCdcSource(config, PluginContext(f"dropped-{keyspace}", Path("scylla.yaml")))
    source.open()
    try:
        partition = source.partitions()[0]
        start = source.initial_offset(partition)
        if dropped == "table":  # ScyllaDB drops a table's CDC log with it
            cassandra_session.execute(f"DROP TABLE {table}_scylla_cdc_log")
            cassandra_session.execute(f"DROP TABLE {table}")
        else:
            cassandra_session.execute(f"DROP KEYSPACE {keyspace}")
        time.sleep(3.2)  # the group has a window to read
        with pytest.raises(LogTableGoneError) as caught:
            source.latest_offset(partition, start, 100)
    finally:
        source.close()
    assert not isinstance(caught.value, TransientError)  # not retried for the whole retry budget
    message = str(caught.value)
    assert f"{table}_scylla_cdc_log" in message and "remove it from tables" in message


def test_an_idle_stream_group_is_queried_less_and_less_until_a_change_comes(
    keyspace: str, scylla_writer: ScyllaCdcWriter
) -> None:
    """The source's clock (``_now_us``, its one seam for time) runs here in 250 ms steps, so the
    waits are counted in queries, not measured in seconds; it runs behind the node's clock, and
    the change is written with a timestamp of the source's time."""
    writer = scylla_writer
    real_now = writer.coordinator_now_us()
    writer.bootstrap(vnodes=2, timestamp_us=real_now - 600_000_000)
    writer.create_table(keyspace, "orders", [("id", "int")], [], [("total", "int")])
    table = f"{keyspace}.orders"
    clock = [real_now - 300_000_000]
    config = ScyllaCdcSourceConfig.model_validate(
        source_section(writer, [table], confidence_window_ms=3000, poll_interval_ms=500, metadata_refresh_ms=600_000)
    )
    source = ScyllaCdcSource(config, PluginContext(f"idle-{keyspace}", Path("scylla.yaml")))
    source._now_us = lambda: clock[0]  # type: ignore[method-assign]
    source.open()
    queries = LogQueries()
    source._session.add_request_init_listener(queries)
    positions: dict[str, Any] = {}

    def run_for(seconds: float, until_events: bool = False) -> tuple[int, list[ChangeEvent]]:
        """Cycle over the groups as the worker engine does, the clock moving 250 ms a cycle: the
        log queries sent and the events read (stopping after the first cycle with events)."""
        sent, events = queries.sent, []
        for _ in range(int(seconds * 4)):
            clock[0] += 250_000
            for partition in source.partitions():
                start = positions.setdefault(partition.id, source.initial_offset(partition))
                end = source.latest_offset(partition, start, 1000)
                if end != start:
                    events += [e for e in source.read(partition, start, end) if isinstance(e, ChangeEvent)]
                    positions[partition.id] = end
            if until_events and events:
                break
        return queries.sent - sent, events

    try:
        run_for(5)  # the history since the generation's start is read, then the groups idle
        groups = source.partitions()
        idle_queries, _ = run_for(60)
        # Each group at most every 10 s once its wait has doubled up from 0.5 s (0.5, 1, 2, 4, 8 s
        # in the first 5 s); polling every 0.5 s would be 120 queries a group.
        print(f"\n{idle_queries} log queries from {len(groups)} idle groups in 60 s of the source's time")
        assert idle_queries <= len(groups) * (60 // 10 + 2)
        writer.insert(table, {"id": 7, "total": 7}, timestamp_us=clock[0])
        _, events = run_for(14, until_events=True)  # the confidence window plus the longest wait
        assert [e.after["id"] for e in events if e.after] == [7]
        hit = next(p for p in groups if str(events[0].source.partition) == p.id)
        before = queries.sent
        run_for(1)
        # the hit reset its group's wait to poll_interval_ms: queried again within a second
        assert set(queries.first_streams[before:]) & set(hit.info["streams"])
    finally:
        source.close()


def three_node_ring(keyspace: str) -> tuple[Any, list[Any]]:
    """cassandra-driver's own metadata of a ring of three nodes owning a third of the Murmur3
    ring each (RF 1): the token map a token-aware policy reads on a real multi-node cluster."""
    from cassandra.connection import DefaultEndPoint
    from cassandra.metadata import KeyspaceMetadata, Metadata
    from cassandra.policies import SimpleConvictionPolicy
    from cassandra.pool import Host

    hosts = [Host(DefaultEndPoint(f"10.0.0.{n}"), SimpleConvictionPolicy, "dc1", "r1") for n in (1, 2, 3)]
    for host in hosts:
        host.set_up()
    metadata = Metadata()
    metadata.keyspaces[keyspace] = KeyspaceMetadata(keyspace, True, "SimpleStrategy", {"replication_factor": "1"})
    ends = [-(2**63) // 3, 2**63 // 3, 2**63 - 1]
    metadata.rebuild_token_map("Murmur3Partitioner", {h: [str(end)] for h, end in zip(hosts, ends, strict=True)})
    return metadata, hosts


def test_log_queries_go_to_the_replicas_of_their_streams_tokens(keyspace: str, scylla_writer: ScyllaCdcWriter) -> None:
    """ScyllaDB places a log row by the CDC partitioner: its stream ID's first 8 bytes are its token
    (scylladb cdc/cdc_partitioner.cc), so a log query must go first to the node owning that token.
    The statements the source really sends are planned by the source's own load-balancing policy
    over a three-node ring."""
    from cassandra.cluster import EXEC_PROFILE_DEFAULT
    from cassandra.policies import RoundRobinPolicy

    writer = scylla_writer
    table = orders_table(writer, keyspace, vnodes=8)
    for i in range(50):
        writer.insert(table, {"id": i, "total": i})
    time.sleep(3.2)
    config = ScyllaCdcSourceConfig.model_validate(source_section(writer, [table]))
    source = ScyllaCdcSource(config, PluginContext(f"routing-{keyspace}", Path("scylla.yaml")))
    source.open()
    queries = LogQueries()
    source._session.add_request_init_listener(queries)
    try:
        for partition in source.partitions():
            start = source.initial_offset(partition)
            source.latest_offset(partition, start, 1000)
        used = source._cluster.profile_manager.profiles[EXEC_PROFILE_DEFAULT].load_balancing_policy
    finally:
        source.close()
    metadata, hosts = three_node_ring(keyspace)
    policy = type(used)(RoundRobinPolicy())
    policy.populate(SimpleNamespace(metadata=metadata), hosts)
    ends = [-(2**63) // 3, 2**63 // 3, 2**63 - 1]
    assert len(queries.statements) >= 8  # a window query of each group at least
    for statement, first_stream in zip(queries.statements, queries.first_streams, strict=True):
        token = int.from_bytes(bytes.fromhex(first_stream)[:8], "big", signed=True)
        owner = hosts[next(i for i, end in enumerate(ends) if token <= end)]
        assert next(iter(policy.make_query_plan(None, statement))) is owner, (first_stream, token)
