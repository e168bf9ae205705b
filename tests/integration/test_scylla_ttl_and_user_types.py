"""Issue 22, item 8, on the real node: the TTL of an INSERT of keys alone, and a user type that
gains a field while the source runs.

An INSERT writes a row marker (the row exists with its key alone) and logs its TTL in ``cdc$ttl``
of the insert row: scylladb ``cdc/log.cc`` lines 1540-1541 (``marker()`` sets the row's TTL from
the row marker) and 1576 (``set_ttl``). The event names the row marker's TTL for the primary key
columns in ``cdc.ttl`` (the key is what the marker keeps alive), next to the columns the write set.
"""

from __future__ import annotations

import json
from typing import Any

from cdcflow.events import ChangeEvent
from tests.integration.scylla_helpers import scylla_writer
from tests.integration.test_scylla_source import open_source
from tests.integration.test_scylla_writer import log_rows
from tests.standins.scylla.writer import ScyllaCdcWriter

__all__ = ["scylla_writer"]  # the fixture, for pytest


def read_all(writer: ScyllaCdcWriter, table: str, pipeline: str) -> list[ChangeEvent]:
    """Every event the source reads now, in order (log reads at ONE: one node)."""
    source = open_source(writer, [table], pipeline, confidence_window_ms=1000, consistency="ONE")
    found: list[Any] = []
    try:
        for partition in source.partitions():
            start = source.initial_offset(partition)
            while (end := source.latest_offset(partition, start, 10_000)) != start:
                found.extend(source.read(partition, start, end))
                start = end
    finally:
        source.close()
    assert all(isinstance(e, ChangeEvent) for e in found), found
    return found


def test_the_ttl_of_an_insert_of_keys_alone_is_carried(
    cassandra_session: Any, keyspace: str, scylla_writer: ScyllaCdcWriter
) -> None:
    writer = scylla_writer
    writer.bootstrap(vnodes=2, timestamp_us=writer.coordinator_now_us() - 60_000_000)
    writer.create_table(keyspace, "t", [("pk", "int")], [("ck", "int")], [("v", "int")])
    table = f"{keyspace}.t"
    past = writer.coordinator_now_us() - 1_500_000
    writer.insert(table, {"pk": 1, "ck": 1}, timestamp_us=past, ttl_s=300)  # the row marker alone
    writer.insert(table, {"pk": 2, "ck": 2, "v": 2}, timestamp_us=past + 1, ttl_s=600)
    writer.insert(table, {"pk": 3, "ck": 3}, timestamp_us=past + 2)  # no TTL

    assert sorted((r["pk"], r["cdc$operation"], r.get("cdc$ttl")) for r in log_rows(cassandra_session, table)) == [
        (1, 2, 300),
        (2, 2, 600),
        (3, 2, None),
    ]
    events = {e.key["pk"]: e for e in read_all(writer, table, f"ttl-{keyspace}")}
    assert (events[1].op.value, events[1].after) == ("c", {"pk": 1, "ck": 1})
    ttl = {pk: json.loads((e.headers or {}).get("cdc.ttl", "null")) for pk, e in events.items()}
    assert ttl == {1: {"pk": 300, "ck": 300}, 2: {"pk": 600, "ck": 600, "v": 600}, 3: None}
