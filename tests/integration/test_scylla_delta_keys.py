"""Issue 22, item 7, on the real node: tables whose CDC logs deltas of keys alone.

With ``cdc = {'delta': 'keys'}`` ScyllaDB writes each delta row with its keys, operation and TTL
and nothing else (scylladb ``cdc/log.cc`` ``generate_delta_values``, lines 1207-1209), while
pre- and post-images are written as with ``full``. The source reads the table's options from its
``cdc`` schema extension (``system_schema.tables.extensions['cdc']``, served by the stand-in from a
keyspace of its own):

* with post-images, every change has its row in ``after`` (the post-image), and events carry
  ``cdc.delta: keys``: what only deltas say (``cdc.replaced``, ``cdc.removed``, a column's TTL)
  is not in the log;
* without them an event could say only which key changed, and a Kafka Connect sink would take
  its ``after`` for the row (every other column null): the source refuses the table at start,
  naming it and the options that would make it readable.
"""

from __future__ import annotations

from typing import Any

import pytest

from cdcflow.errors import ConfigError
from cdcflow.events import ChangeEvent
from cdcflow.sources.scylla_cdc.exceptions import KeysOnlyDeltaError
from tests.integration.scylla_helpers import scylla_writer
from tests.integration.test_scylla_source import open_source
from tests.integration.test_scylla_split_events import read_all
from tests.integration.test_scylla_writer import log_rows
from tests.standins.scylla.writer import ScyllaCdcWriter

__all__ = ["scylla_writer"]  # the fixture, for pytest


def open_on(writer: ScyllaCdcWriter, table: str, pipeline: str) -> Any:
    return open_source(writer, [table], pipeline, schema_keyspace=writer.keyspaces.schema)


def test_delta_keys_with_post_images_gives_the_rows_marked_keys_only(
    cassandra_session: Any, keyspace: str, scylla_writer: ScyllaCdcWriter
) -> None:
    writer = scylla_writer
    writer.bootstrap(vnodes=2, timestamp_us=writer.coordinator_now_us() - 60_000_000)
    writer.create_table(
        keyspace, "t", [("pk", "int")], [("ck", "int")], [("v", "int"), ("w", "int")], postimage=True, delta="keys"
    )
    table = f"{keyspace}.t"
    past = writer.coordinator_now_us() - 1_500_000
    writer.insert(table, {"pk": 1, "ck": 1, "v": 1, "w": 1}, timestamp_us=past)
    writer.update(table, {"pk": 1, "ck": 1}, {"v": 2}, timestamp_us=past + 1)
    writer.delete_row(table, {"pk": 1, "ck": 1}, timestamp_us=past + 2)
    # the log holds no value in its delta rows (operations 1, 2, 3), only in post-images (9)
    rows = log_rows(cassandra_session, table)
    assert [(r["cdc$operation"], r.get("v"), r.get("w")) for r in rows] == [
        (2, None, None),
        (9, 1, 1),
        (1, None, None),
        (9, 2, 1),
        (3, None, None),
    ]

    events = read_all(writer, table, f"keys-post-{keyspace}", schema_keyspace=writer.keyspaces.schema)
    assert all(isinstance(e, ChangeEvent) for e in events), events
    assert [(e.op.value, e.after, e.headers) for e in events] == [
        ("c", {"pk": 1, "ck": 1, "v": 1, "w": 1}, {"cdc.delta": "keys"}),
        ("u", {"pk": 1, "ck": 1, "v": 2, "w": 1}, {"cdc.delta": "keys"}),
        ("d", None, {"cdc.deletion": "row", "cdc.delta": "keys"}),
    ]


@pytest.mark.parametrize("preimage", [False, True])
def test_delta_keys_without_post_images_is_refused_naming_the_table(
    keyspace: str, scylla_writer: ScyllaCdcWriter, preimage: bool
) -> None:
    writer = scylla_writer
    writer.bootstrap(vnodes=2, timestamp_us=writer.coordinator_now_us() - 60_000_000)
    writer.create_table(keyspace, "keys_only", [("pk", "int")], [], [("v", "int")], preimage=preimage, delta="keys")
    writer.create_table(keyspace, "plain", [("pk", "int")], [], [("v", "int")])
    with pytest.raises(KeysOnlyDeltaError) as refused:
        open_on(writer, f"{keyspace}.keys_only", f"keys-only-{keyspace}")
    assert isinstance(refused.value, ConfigError)
    message = str(refused.value)
    assert f"{keyspace}.keys_only" in message and "'postimage': true" in message and "'delta': 'full'" in message
    # a table that logs full deltas beside it opens as before
    open_on(writer, f"{keyspace}.plain", f"plain-{keyspace}").close()
