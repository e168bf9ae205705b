"""Issue 22, item 8, on the real node: the TTL of an INSERT of keys alone, and a user type that
gains a field while the source runs.

An INSERT writes a row marker (the row exists with its key alone) and logs its TTL in ``cdc$ttl``
of the insert row: scylladb ``cdc/log.cc`` lines 1540-1541 (``marker()`` sets the row's TTL from
the row marker) and 1576 (``set_ttl``). The event names the row marker's TTL for the primary key
columns in ``cdc.ttl`` (the key is what the marker keeps alive), next to the columns the write set.
"""

from __future__ import annotations

import json
import time
from typing import Any

from cdcflow.events import ChangeEvent
from tests.integration.scylla_helpers import scylla_writer
from tests.integration.test_scylla_source import open_source
from tests.integration.test_scylla_split_events import read_all, read_on
from tests.integration.test_scylla_writer import log_rows
from tests.standins.scylla.writer import ScyllaCdcWriter

__all__ = ["scylla_writer"]  # the fixture, for pytest


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
    assert all(isinstance(e, ChangeEvent) for e in events.values()), events
    assert (events[1].op.value, events[1].after) == ("c", {"pk": 1, "ck": 1})
    ttl = {pk: json.loads((e.headers or {}).get("cdc.ttl", "null")) for pk, e in events.items()}
    assert ttl == {1: {"pk": 300, "ck": 300}, 2: {"pk": 600, "ck": 600, "v": 600}, 3: None}


def test_a_field_added_to_a_user_type_is_read_without_a_restart(
    cassandra_session: Any, keyspace: str, scylla_writer: ScyllaCdcWriter
) -> None:
    writer = scylla_writer
    writer.bootstrap(vnodes=2, timestamp_us=writer.coordinator_now_us() - 60_000_000)
    cassandra_session.execute(f"CREATE TYPE {keyspace}.addr (street text, zip int)")
    writer.create_table(keyspace, "t", [("pk", "int")], [], [("home", "addr"), ("frozen_home", "frozen<addr>")])
    table = f"{keyspace}.t"
    past = writer.coordinator_now_us() - 3_000_000
    writer.insert(table, {"pk": 1, "home": {"street": "a", "zip": 1}}, timestamp_us=past)
    source = open_source(writer, [table], f"alter-type-{keyspace}", confidence_window_ms=1000)
    try:
        offsets = {p.id: source.initial_offset(p) for p in source.partitions()}
        [first] = read_on(source, offsets)
        # ALTER TYPE ... ADD while the source runs: the base and log tables take the new field.
        writer.alter_type_add_field(keyspace, "addr", "city", "text")
        writer.insert(table, {"pk": 2, "home": {"street": "b", "zip": 2, "city": "x"}})
        writer.update(table, {"pk": 3}, {"frozen_home": ("c", 3, "y")})
        later: list[Any] = []
        deadline = time.monotonic() + 30
        while len(later) < 2 and time.monotonic() < deadline:  # until the confidence window passed them
            later += read_on(source, offsets)
            time.sleep(0.2)
    finally:
        source.close()

    assert isinstance(first, ChangeEvent) and first.after is not None
    assert first.after["home"] == {"street": "a", "zip": 1}
    assert all(isinstance(e, ChangeEvent) for e in later), later
    by_key = {e.key["pk"]: e for e in later}
    assert by_key[2].after == {"pk": 2, "home": {"street": "b", "zip": 2, "city": "x"}}
    assert by_key[3].after == {"pk": 3, "frozen_home": {"street": "c", "zip": 3, "city": "y"}}
    # the events' schema describes the new field, so Avro and Parquet carry it too
    [addr] = [t for t in by_key[2].schema.user_types if t.name == "addr"]  # type: ignore[union-attr]
    assert [name for name, _ in addr.fields] == ["street", "zip", "city"]
