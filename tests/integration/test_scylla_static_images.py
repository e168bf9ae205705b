"""Images of a table with static columns, read from the log the stand-in writes into the real node.

ScyllaDB builds a row's image from one kind of column: a clustered row's from the regular columns,
the static row's from the static ones (scylladb ``cdc/log.cc`` line 1849 picks the kind from the
clustering key, line 1909 takes ``_schema->columns(kind)`` for a post-image; a pre-image's affected
columns are of that one kind too). So an image says nothing of the other kind, and an event must
not claim those columns are null: they are absent, and ``cdc.absent`` names them for consumers
whose format cannot leave a field out (Avro).

The expected events below follow those rules by hand, from the writes the test makes (the issue's
reproduction: insert ``s = 7, v = 1``, update ``v = 2``, update ``s = 8``).
"""

from __future__ import annotations

import json
from typing import Any

from cdcflow.events import ChangeEvent
from tests.integration.scylla_helpers import scylla_writer
from tests.integration.test_scylla_split_events import read_all
from tests.standins.scylla.writer import ScyllaCdcWriter

__all__ = ["scylla_writer"]  # the fixture, for pytest


def static_table(writer: ScyllaCdcWriter, keyspace: str, name: str, **options: Any) -> str:
    """``t (pk int, ck int, s int STATIC, v int, w int, PRIMARY KEY (pk, ck))`` with CDC ``options``."""
    writer.create_table(
        keyspace, name, [("pk", "int")], [("ck", "int")], [("s", "int"), ("v", "int"), ("w", "int")],
        static=["s"], **options,
    )  # fmt: skip
    return f"{keyspace}.{name}"


def write_the_reproduction(writer: ScyllaCdcWriter, table: str) -> None:
    past = writer.coordinator_now_us() - 1_500_000
    writer.insert(table, {"pk": 0, "ck": 0, "s": 7, "v": 1}, timestamp_us=past)
    writer.update(table, {"pk": 0, "ck": 0}, {"v": 2}, timestamp_us=past + 1)
    writer.update(table, {"pk": 0}, {"s": 8}, timestamp_us=past + 2)


def summary(events: list[Any]) -> list[tuple[str, dict[str, Any], Any, Any, Any]]:
    assert all(isinstance(e, ChangeEvent) for e in events), events
    return [
        (e.op.value, e.key, e.before, e.after, json.loads((e.headers or {}).get("cdc.absent", "null"))) for e in events
    ]


def test_post_images_of_a_table_with_static_columns_claim_no_null_of_the_other_kind(
    keyspace: str, scylla_writer: ScyllaCdcWriter
) -> None:
    writer = scylla_writer
    writer.bootstrap(vnodes=2, timestamp_us=writer.coordinator_now_us() - 60_000_000)
    table = static_table(writer, keyspace, "t", postimage=True)
    write_the_reproduction(writer, table)

    events = read_all(writer, table, f"static-post-{keyspace}")
    static_row, clustered_row = {"pk": 0}, {"pk": 0, "ck": 0}
    # The first write is one record: the static row's change, then the clustered row's (split.cc
    # visits the static row first), each with its post-image. w was never written: the clustered
    # row's post-image, whole for its kind, says it is null.
    assert summary(events) == [
        ("u", static_row, None, {"pk": 0, "s": 7}, {"after": ["v", "w"]}),
        ("c", clustered_row, None, {"pk": 0, "ck": 0, "v": 1, "w": None}, {"after": ["s"]}),
        ("u", clustered_row, None, {"pk": 0, "ck": 0, "v": 2, "w": None}, {"after": ["s"]}),
        ("u", static_row, None, {"pk": 0, "s": 8}, {"after": ["v", "w"]}),
    ]


def test_full_pre_images_of_a_table_with_static_columns_hold_their_own_kind_only(
    keyspace: str, scylla_writer: ScyllaCdcWriter
) -> None:
    writer = scylla_writer
    writer.bootstrap(vnodes=2, timestamp_us=writer.coordinator_now_us() - 60_000_000)
    table = static_table(writer, keyspace, "fullpre", preimage="full", postimage=True)
    write_the_reproduction(writer, table)

    events = read_all(writer, table, f"static-full-{keyspace}")
    static_row, clustered_row = {"pk": 0}, {"pk": 0, "ck": 0}
    # A full pre-image holds every column of the row's kind, a null one flagged (cdc$deleted_w):
    # the first write has none (nothing was there), the later ones the row as it was.
    assert summary(events) == [
        ("u", static_row, None, {"pk": 0, "s": 7}, {"after": ["v", "w"]}),
        ("c", clustered_row, None, {"pk": 0, "ck": 0, "v": 1, "w": None}, {"after": ["s"]}),
        (
            "u",
            clustered_row,
            {"pk": 0, "ck": 0, "v": 1, "w": None},
            {"pk": 0, "ck": 0, "v": 2, "w": None},
            {"before": ["s"], "after": ["s"]},
        ),
        ("u", static_row, {"pk": 0, "s": 7}, {"pk": 0, "s": 8}, {"before": ["v", "w"], "after": ["v", "w"]}),
    ]


def test_a_pre_image_of_the_changed_columns_names_the_rest_absent(
    keyspace: str, scylla_writer: ScyllaCdcWriter
) -> None:
    writer = scylla_writer
    writer.bootstrap(vnodes=2, timestamp_us=writer.coordinator_now_us() - 60_000_000)
    table = static_table(writer, keyspace, "pre", preimage=True)
    write_the_reproduction(writer, table)

    events = read_all(writer, table, f"static-pre-{keyspace}")
    # preimage: true holds the columns the write changes (v; then s), so w and the other kind are
    # absent from it; without post-images `after` is the delta (untouched columns absent, as always).
    assert summary(events) == [
        ("u", {"pk": 0}, None, {"pk": 0, "s": 7}, None),
        ("c", {"pk": 0, "ck": 0}, None, {"pk": 0, "ck": 0, "v": 1}, None),
        ("u", {"pk": 0, "ck": 0}, {"pk": 0, "ck": 0, "v": 1}, {"pk": 0, "ck": 0, "v": 2}, {"before": ["s", "w"]}),
        ("u", {"pk": 0}, {"pk": 0, "s": 7}, {"pk": 0, "s": 8}, {"before": ["v", "w"]}),
    ]
