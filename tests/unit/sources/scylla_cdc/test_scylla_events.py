"""Log rows to change events, on the examples of ScyllaDB's CDC documentation; and the source's
config rules."""

from __future__ import annotations

import json
import uuid
from collections import namedtuple
from typing import Any

import pytest
from pydantic import ValidationError

from cdcflow.contract import Rejected
from cdcflow.events import ChangeEvent, Op
from cdcflow.sources.cql.cqltypes import build_type
from cdcflow.sources.scylla_cdc.exceptions import LogRowError
from cdcflow.sources.scylla_cdc.log_events import LogLayout, LogRow, batch_events, batches
from cdcflow.sources.scylla_cdc.log_reader import stream_chunks
from cdcflow.sources.scylla_cdc.source import ScyllaCdcSourceConfig
from cdcflow.sources.scylla_cdc.timeuuids import micros_of

STREAM = bytes.fromhex("7ffe0c687fcce86e0783343730000001")
TIME = uuid.UUID("84d18fd6-3eea-11eb-81e4-bb608d1b47fc")


def layout(**columns: str) -> LogLayout:
    """``pk int, ck int`` and the given columns, with their log types (and cdc$deleted_* flags)."""
    types = {"pk": "int", "ck": "int", **columns}
    for name in columns:
        if not name.startswith("cdc$"):
            types[f"cdc$deleted_{name}"] = "boolean"
    return LogLayout(
        "scy",
        "ks",
        "t",
        ("pk",),
        ("ck",),
        tuple(sorted(n for n in columns if not n.startswith("cdc$"))),
        {name: build_type(text, {"ut": (["a", "b", "c"], ["int", "int", "int"])}) for name, text in types.items()},
    )


def row(seq: int, operation: int, ttl: int | None = None, time: uuid.UUID = TIME, **values: Any) -> LogRow:
    return LogRow(STREAM, time, micros_of(time), seq, operation, ttl, None, values)


def events(table: LogLayout, rows: list[LogRow]) -> list[ChangeEvent]:
    found = list(batch_events(table, rows, "p", 0))
    assert all(isinstance(e, ChangeEvent) for e in found), found
    return [e for e in found if isinstance(e, ChangeEvent)]


def test_a_pre_image_becomes_before_and_the_delta_after() -> None:
    # cdc-preimages: a pre-image row (operation 0) then the update's delta (operation 1).
    table = layout(v1="int", v2="frozen<map<int, int>>")
    [event] = events(table, [row(0, 0, pk=0, ck=0, v2={1: 1, 2: 2}), row(1, 1, pk=0, ck=0, v2={2: 3, 3: 4})])
    assert event.op is Op.UPDATE
    assert event.key == {"pk": 0, "ck": 0}
    assert event.before == {"pk": 0, "ck": 0, "v2": {1: 1, 2: 2}}
    assert event.after == {"pk": 0, "ck": 0, "v2": {2: 3, 3: 4}}  # the delta: v1 was not touched
    assert event.source.ts_us == micros_of(TIME)
    assert json.loads(event.source.to_payload()["position"]) == {"seq": 1, "stream": STREAM.hex(), "time": str(TIME)}


def test_a_post_image_is_the_whole_row_after_the_write() -> None:
    table = layout(v1="int", v2="int")
    [event] = events(table, [row(0, 2, pk=1, ck=2, v1=5), row(1, 9, pk=1, ck=2, v1=5, v2=7)])
    assert event.op is Op.CREATE
    assert event.before is None
    assert event.after == {"pk": 1, "ck": 2, "v1": 5, "v2": 7}


def test_an_image_holds_the_columns_of_its_row_kind_and_names_the_rest_absent() -> None:
    # cdc/log.cc generate_image: a static row's image has the static columns (s), a clustered
    # row's the regular ones (v, w); pre-images only the columns the write changed.
    types = {"pk": "int", "ck": "int", "s": "int", "v": "int", "w": "int"}
    types.update({f"cdc$deleted_{n}": "boolean" for n in ("s", "v", "w")})
    table = LogLayout(
        "scy", "ks", "t", ("pk",), ("ck",), ("s", "v", "w"),
        {n: build_type(t, {}) for n, t in types.items()}, frozenset({"s"}),
    )  # fmt: skip
    rows = [
        row(0, 0, pk=0, s=7),
        row(1, 0, pk=0, ck=0, **{"cdc$deleted_v": True}),
        row(2, 1, pk=0, s=8),
        row(3, 1, pk=0, ck=0, v=2),
        row(4, 9, pk=0, s=8),
        row(5, 9, pk=0, ck=0, v=2),
    ]
    static_row, clustered_row = events(table, rows)
    assert (static_row.key, static_row.before, static_row.after) == ({"pk": 0}, {"pk": 0, "s": 7}, {"pk": 0, "s": 8})
    assert (clustered_row.before, clustered_row.after) == (
        {"pk": 0, "ck": 0, "v": None},
        {"pk": 0, "ck": 0, "v": 2, "w": None},
    )
    assert static_row.headers is not None and clustered_row.headers is not None
    assert json.loads(static_row.headers["cdc.absent"]) == {"before": ["v", "w"], "after": ["v", "w"]}
    assert json.loads(clustered_row.headers["cdc.absent"]) == {"before": ["s", "w"], "after": ["s"]}


def test_images_are_matched_to_the_delta_of_their_own_row() -> None:
    # A batch writing two rows of one partition: all pre-images, then deltas, then post-images.
    table = layout(v="int")
    rows = [
        row(0, 0, pk=0, ck=1, v=10),
        row(1, 0, pk=0, ck=2, v=20),
        row(2, 1, pk=0, ck=2, v=21),
        row(3, 1, pk=0, ck=1, v=11),
        row(4, 9, pk=0, ck=2, v=21),
        row(5, 9, pk=0, ck=1, v=11),
    ]
    first, second = events(table, rows)
    assert (first.key, first.before, first.after) == (
        {"pk": 0, "ck": 2},
        {"pk": 0, "ck": 2, "v": 20},
        {"pk": 0, "ck": 2, "v": 21},
    )
    assert (second.key, second.before, second.after) == (
        {"pk": 0, "ck": 1},
        {"pk": 0, "ck": 1, "v": 10},
        {"pk": 0, "ck": 1, "v": 11},
    )


def test_a_column_set_to_null_is_none_and_untouched_columns_are_absent() -> None:
    table = layout(a="int", b="int", c="int")
    [event] = events(table, [row(0, 1, pk=0, ck=0, a=3, **{"cdc$deleted_b": True})])
    assert event.after == {"pk": 0, "ck": 0, "a": 3, "b": None}


def test_a_row_split_by_ttl_is_one_event() -> None:
    # cdc-log-table: UPDATE ... USING TTL 5 SET a = 0, b = null gives two rows in one record
    # (cdc/split.cc: the dead cell has no TTL); the commit log holds it as one row change.
    table = layout(a="int", b="int")
    [event] = events(table, [row(0, 1, pk=0, ck=0, **{"cdc$deleted_b": True}), row(1, 1, 5, pk=0, ck=0, a=0)])
    assert event.op is Op.UPDATE
    assert event.after == {"pk": 0, "ck": 0, "a": 0, "b": None}
    assert event.headers == {"cdc.ttl": json.dumps({"a": 5})}
    assert json.loads(event.source.to_payload()["position"])["seq"] == 0


def test_an_insert_of_a_collection_with_ttl_is_one_insert_event() -> None:
    # log.cc #6070: INSERT (pk, ck, v, m) VALUES (0, 0, 1, {1: 1}) USING TTL 5 is logged as an
    # insert (row marker, v), the collection's tombstone, then its cells.
    table = layout(v="int", m="frozen<map<int, int>>", **{"cdc$deleted_elements_m": "frozen<set<int>>"})
    rows = [
        row(0, 2, 5, pk=0, ck=0, v=1),
        row(1, 1, None, pk=0, ck=0, **{"cdc$deleted_m": True}),
        row(2, 1, 5, pk=0, ck=0, m={1: 1}),
        row(3, 2, None, pk=0, ck=1, v=2),  # another row of the batch: an event of its own
    ]
    first, second = events(table, rows)
    assert (first.op, first.after) == (Op.CREATE, {"pk": 0, "ck": 0, "v": 1, "m": {1: 1}})
    # the row marker's TTL (the insert row's cdc$ttl) for the key columns, beside the columns'
    expected_ttl = {"ck": 5, "m": 5, "pk": 5, "v": 5}
    assert first.headers == {"cdc.replaced": '["m"]', "cdc.ttl": json.dumps(expected_ttl, sort_keys=True)}
    assert (second.op, second.key, second.after) == (Op.CREATE, {"pk": 0, "ck": 1}, {"pk": 0, "ck": 1, "v": 2})


def test_a_user_type_of_null_fields_only_marks_the_column_touched() -> None:
    # log.cc udt_visitor: SET u = null logs cdc$deleted_u and u = (null, null, null); SET u.b = null
    # logs u = (null, null, null) and the field's index.
    ut = namedtuple("ut", ["a", "b", "c"])
    table = layout(u="frozen<ut>", **{"cdc$deleted_elements_u": "frozen<set<smallint>>"})
    [nulled] = events(table, [row(0, 1, pk=0, ck=0, u=ut(None, None, None), **{"cdc$deleted_u": True})])
    assert nulled.after == {"pk": 0, "ck": 0, "u": None}
    assert nulled.headers == {"cdc.replaced": '["u"]'}
    [field_removed] = events(table, [row(0, 1, pk=0, ck=0, u=ut(None, None, None), **{"cdc$deleted_elements_u": {1}})])
    # Issue 13: a field update carries the fields it wrote, a field set to null as None.
    assert field_removed.after == {"pk": 0, "ck": 0, "u": {"b": None}}
    assert field_removed.headers == {"cdc.removed": json.dumps({"u": ["b"]})}
    [field_set] = events(table, [row(0, 1, pk=0, ck=0, u=ut(None, 7, None))])
    assert field_set.after == {"pk": 0, "ck": 0, "u": {"b": 7}}
    [overwritten] = events(table, [row(0, 1, pk=0, ck=0, u=ut(1, None, None), **{"cdc$deleted_u": True})])
    assert overwritten.after == {"pk": 0, "ck": 0, "u": {"a": 1, "b": None, "c": None}}


def test_parts_of_one_collection_in_two_rows_are_merged() -> None:
    # UPDATE ... SET m = m + {1: 1} USING TTL 3 and m = m + {2: 2} USING TTL 9 in one batch.
    table = layout(m="frozen<map<int, int>>", **{"cdc$deleted_elements_m": "frozen<set<int>>"})
    [event] = events(table, [row(0, 1, 3, pk=0, ck=0, m={1: 1}), row(1, 1, 9, pk=0, ck=0, m={2: 2})])
    assert event.after == {"pk": 0, "ck": 0, "m": {1: 1, 2: 2}}
    assert event.headers == {"cdc.ttl": json.dumps({"m": 9})}


def test_a_partition_delete_of_a_table_without_clustering_columns_gets_its_pre_image() -> None:
    # split.cc (scylladb#26382, 2026.1): a pre-image of every column, then the partition delete.
    table = LogLayout("scy", "ks", "t2", ("pk",), (), ("v", "w"), {n: build_type("int", {}) for n in ("pk", "v", "w")})
    found = list(batch_events(table, [row(0, 0, pk=3, v=1, **{"cdc$deleted_w": True}), row(1, 4, pk=3)], "p", 0))
    [event] = found
    assert isinstance(event, ChangeEvent)
    assert (event.op, event.key, event.before, event.after) == (
        Op.DELETE,
        {"pk": 3},
        {"pk": 3, "v": 1, "w": None},
        None,
    )
    assert event.headers == {"cdc.deletion": "partition"}


def test_deletions_scylladb_made_itself_are_deletes_with_their_origin() -> None:
    # cdc/log.hh service_row_delete = -3, service_partition_delete = -4 (TTL expirations).
    table = layout(v="int")
    row_delete, partition_delete = events(table, [row(0, -3, pk=0, ck=1)]) + events(table, [row(0, -4, pk=0)])
    assert (row_delete.op, row_delete.key) == (Op.DELETE, {"pk": 0, "ck": 1})
    assert row_delete.headers == {"cdc.deletion": "row", "cdc.origin": "service"}
    assert (partition_delete.key, partition_delete.headers) == (
        {"pk": 0},
        {"cdc.deletion": "partition", "cdc.origin": "service"},
    )


@pytest.mark.parametrize(
    ("left", "right", "expected"),
    [
        # cdc-row-range-deletions: DELETE ... WHERE pk = 0 AND ck <= 2 AND ck > 0
        ((6, 0), (7, 2), {"start": {"ck": 0}, "start_inclusive": False, "end": {"ck": 2}, "end_inclusive": True}),
        # ... AND ck < 3: the left bound is unbounded (null clustering value, operation 5)
        ((5, None), (8, 3), {"start": {}, "start_inclusive": True, "end": {"ck": 3}, "end_inclusive": False}),
    ],
)
def test_a_range_deletion_is_one_delete_event_with_its_bounds(
    left: tuple[int, int | None], right: tuple[int, int], expected: dict[str, Any]
) -> None:
    table = layout(v="int")
    [event] = events(table, [row(0, left[0], pk=0, ck=left[1]), row(1, right[0], pk=0, ck=right[1])])
    assert (event.op, event.key, event.after) == (Op.DELETE, {"pk": 0}, None)
    assert event.headers is not None
    assert event.headers["cdc.deletion"] == "range"
    assert json.loads(event.headers["cdc.range"]) == expected


def test_row_and_partition_deletions_are_delete_events() -> None:
    table = layout(v="int")
    row_delete, partition_delete = events(table, [row(0, 3, pk=0, ck=4)]) + events(table, [row(0, 4, pk=9)])
    assert (row_delete.op, row_delete.key, row_delete.headers) == (
        Op.DELETE,
        {"pk": 0, "ck": 4},
        {"cdc.deletion": "row"},
    )
    assert (partition_delete.key, partition_delete.headers) == ({"pk": 9}, {"cdc.deletion": "partition"})


def test_collections_overwritten_and_elements_removed() -> None:
    # cdc-advanced-types: overwriting a map sets the value and cdc$deleted_v; removing keys fills
    # cdc$deleted_elements_v.
    table = layout(v="frozen<map<int, text>>", **{"cdc$deleted_elements_v": "frozen<set<int>>"})
    overwritten, removed = events(
        table, [row(0, 1, pk=0, ck=0, v={1: "v1", 2: "v2"}, **{"cdc$deleted_v": True})]
    ) + events(table, [row(0, 1, pk=0, ck=0, **{"cdc$deleted_elements_v": {3, 1, 2}})])
    assert overwritten.after == {"pk": 0, "ck": 0, "v": {1: "v1", 2: "v2"}}
    assert overwritten.headers == {"cdc.replaced": '["v"]'}
    assert removed.after == {"pk": 0, "ck": 0}
    assert removed.headers == {"cdc.removed": json.dumps({"v": [1, 2, 3]})}


def test_list_elements_are_keyed_by_timeuuid_and_udt_fields_named() -> None:
    key = uuid.UUID("cc5baec0-2fec-11eb-af55-000000000001")
    table = layout(
        l="frozen<map<timeuuid, int>>",
        u="frozen<ut>",
        **{"cdc$deleted_elements_l": "frozen<set<timeuuid>>", "cdc$deleted_elements_u": "frozen<set<smallint>>"},
    )
    [added] = events(table, [row(0, 1, pk=0, ck=0, l={key: 1})])
    assert added.after == {"pk": 0, "ck": 0, "l": {str(key): 1}}
    [removed] = events(
        table, [row(0, 1, pk=0, ck=0, **{"cdc$deleted_elements_l": {key}, "cdc$deleted_elements_u": {2, 0}})]
    )
    assert removed.headers == {"cdc.removed": json.dumps({"l": [str(key)], "u": ["a", "c"]}, sort_keys=True)}


def test_unknown_operations_and_images_without_a_delta_are_rejected_not_dropped() -> None:
    table = layout(v="int")
    found = list(batch_events(table, [row(0, 11, pk=0, ck=0, v=1), row(1, 9, pk=0, ck=5, v=2)], "p", 0))
    rejected = [r for r in found if isinstance(r, Rejected)]
    assert len(found) == len(rejected) == 2
    assert all(r.stage == "source" and isinstance(r.error, LogRowError) for r in rejected)
    assert "unknown cdc$operation 11" in str(rejected[0].error)
    assert "post-image with no delta" in str(rejected[1].error)
    assert rejected[1].record.after == {"pk": 0, "ck": 5, "v": 2}  # type: ignore[union-attr]


def test_rows_are_cut_into_base_writes_by_stream_and_time() -> None:
    other_time = uuid.UUID("84d2059c-3eea-11eb-f572-692d1e15a146")
    rows = [row(0, 2), row(1, 2), row(0, 2, time=other_time)]
    rows.append(LogRow(b"\x01" * 16, other_time, micros_of(other_time), 0, 2, None, None, {}))
    assert [len(b) for b in batches(rows)] == [2, 1, 1]


def config(**fields: Any) -> ScyllaCdcSourceConfig:
    return ScyllaCdcSourceConfig.model_validate({"type": "scylla_cdc", "tables": ["ks.t"], **fields})


def test_the_confidence_window_cannot_be_shorter_than_the_write_timeout() -> None:
    with pytest.raises(ValidationError, match="shorter than cluster_write_timeout_ms"):
        config(confidence_window_ms=1000)
    window = config(confidence_window_ms=1000, cluster_write_timeout_ms=500, generation_leeway_ms=500)
    assert window.confidence_window_ms == 1000


@pytest.mark.parametrize("start", ["earliest", "latest", "2024-05-01T10:00:00Z", "1714557600000"])
def test_start_accepts_earliest_latest_a_time_or_epoch_ms(start: str) -> None:
    assert config(start=start).start == start


@pytest.mark.parametrize(("field", "value"), [("start", "yesterday"), ("tables", ["no_keyspace"])])
def test_bad_fields_are_named(field: str, value: Any) -> None:
    with pytest.raises(ValidationError, match=field):
        config(**{field: value})


@pytest.mark.parametrize(
    ("streams", "sizes"), [(1, [1]), (100, [100]), (101, [51, 50]), (128, [64, 64]), (201, [67, 67, 67])]
)
def test_a_group_is_queried_in_chunks_of_at_most_100_streams(streams: int, sizes: list[int]) -> None:
    # ScyllaDB refuses more than max_partition_key_restrictions_per_query (100) keys in an IN list.
    raws = [i.to_bytes(16, "big") for i in range(streams)]
    chunks = stream_chunks(raws, 100)
    assert [len(c) for c in chunks] == sizes
    assert [s for c in chunks for s in c] == raws
    assert config().max_streams_per_query == 100
