"""The delta sink's mirror rule (``fold_partition``) on the changes Cassandra's commit log and
other sources give: what a MERGE must end with for one partition."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cdcflow.sinks.delta_spark import MirrorLayout, MirrorUnsupportedChangeError, fold_partition

ROW = MirrorLayout(columns=("id", "a", "b"), key=("id",), partition_key=("id",))
CLUSTERED = MirrorLayout(
    columns=("pk", "ck", "s", "v", "tags", "attrs", "addr", "items"),
    key=("pk", "ck"),
    partition_key=("pk",),
    static=("s",),
    multi_cell={"tags": "set", "attrs": "map", "addr": "udt", "items": "list"},
)


def change(
    op: str,
    key: dict[str, Any],
    after: dict[str, Any] | None,
    ts: int,
    n: int,
    system: str = "test",
    partition: str = "p0",
    batch: int = 9,
    **headers: Any,
) -> dict[str, Any]:
    """A change row as the sink hands it to the fold: typed values (here the JSON's), metadata."""
    typed = {**key, **(after or {})}
    return {
        **typed,
        "__kind": 1,
        "__batch": batch,
        "__ord": n,
        "__op": op,
        "__ts": ts,
        "__partition": partition,
        "__position": json.dumps({"n": n}),
        "__system": system,
        "__key": json.dumps(key),
        "__after": None if after is None else json.dumps({**key, **after}),
        "__headers": {k.replace("_", "."): v if isinstance(v, str) else json.dumps(v) for k, v in headers.items()}
        or None,
    }


def stored(values: dict[str, Any], ts: int, n: int = 0, batch: int = 1, partition: str = "p0") -> dict[str, Any]:
    """A row as the table holds it, written by micro-batch ``batch`` from ``partition``."""
    position = json.dumps({"n": n})
    return {
        **values,
        "_cdc_ts_us": ts,
        "_cdc_partition": partition,
        "_cdc_position": position,
        "_cdc_batch": batch,
        "__kind": 0,
    }


def upserts(out: list[dict[str, Any]], *columns: str) -> list[dict[str, Any]]:
    return [{c: r[c] for c in columns} for r in out if r["__action"] == "upsert"]


def test_a_change_of_some_columns_keeps_the_others_and_a_null_is_a_null() -> None:
    state = [stored({"id": 1, "a": "x", "b": 1}, ts=100)]
    out = fold_partition(ROW, state, [change("u", {"id": 1}, {"a": None}, ts=200, n=1)])
    assert upserts(out, "id", "a", "b") == [{"id": 1, "a": None, "b": 1}]


def test_an_older_or_replayed_change_never_overwrites_a_newer_row() -> None:
    state = [stored({"id": 1, "a": "new", "b": 2}, ts=200, n=5, batch=3)]
    # From another partition (another replica, the key's old CDC generation): older by its time.
    late = change("u", {"id": 1}, {"a": "old", "b": 1}, ts=100, n=1, partition="p1")
    # The batch that wrote the row, run again: not later in its partition's read order.
    replayed = change("u", {"id": 1}, {"a": "again", "b": 3}, ts=250, n=5, batch=3)
    assert fold_partition(ROW, state, [late, replayed]) == []
    older_delete = change("d", {"id": 1}, None, ts=150, n=2, partition="p1")
    assert fold_partition(ROW, state, [older_delete]) == []
    newer = change("u", {"id": 1}, {"b": 4}, ts=120, n=1, batch=4)  # later in p0, whatever its clock says
    assert upserts(fold_partition(ROW, state, [newer]), "a", "b") == [{"a": "new", "b": 4}]


def test_a_delete_then_an_insert_in_one_batch_ends_as_the_insert_alone() -> None:
    state = [stored({"id": 1, "a": "x", "b": 1}, ts=100)]
    changes = [change("d", {"id": 1}, None, ts=200, n=1), change("c", {"id": 1}, {"a": "y"}, ts=300, n=2)]
    assert upserts(fold_partition(ROW, state, changes), "id", "a", "b") == [{"id": 1, "a": "y", "b": None}]


def test_one_partitions_changes_apply_in_read_order_and_several_partitions_by_time() -> None:
    one = [
        change("c", {"id": 1}, {"a": "first", "b": 1}, ts=200, n=1),
        change("u", {"id": 1}, {"a": "second"}, ts=100, n=2),  # a clock that went back: position decides
        change("u", {"id": 1}, {"b": 2}, ts=150, n=3),
    ]
    assert upserts(fold_partition(ROW, [], one), "a", "b") == [{"a": "second", "b": 2}]
    moved = [
        change("u", {"id": 1}, {"a": "second"}, ts=200, n=1, partition="new-generation"),
        change("c", {"id": 1}, {"a": "first", "b": 1}, ts=100, n=2, partition="old-generation"),
        change("u", {"id": 1}, {"b": 2}, ts=200, n=3, partition="new-generation"),
    ]
    assert upserts(fold_partition(ROW, [], moved), "a", "b") == [{"a": "second", "b": 2}]


def test_a_range_delete_removes_the_rows_in_its_bounds_that_are_not_newer() -> None:
    # Row 3 was last written from another replica at a later time than the delete.
    state = [stored({"pk": 1, "ck": ck, "v": f"v{ck}"}, ts=100) for ck in (1, 2, 4, 5)]
    state.append(stored({"pk": 1, "ck": 3, "v": "v3"}, ts=900, partition="node2"))
    bounds = {"start": {"ck": 2}, "start_inclusive": True, "end": {"ck": 4}, "end_inclusive": False}
    out = fold_partition(
        CLUSTERED, state, [change("d", {"pk": 1}, None, ts=500, n=1, cdc_deletion="range", cdc_range=bounds)]
    )
    assert sorted(r["ck"] for r in out if r["__action"] == "delete") == [2]  # 3 is newer, 4 is the open end


def test_a_partition_delete_removes_rows_and_static_values() -> None:
    state = [stored({"pk": 1, "ck": ck, "s": "st"}, ts=100) | {"_cdc_static_ts_us": 100} for ck in (1, 2)]
    out = fold_partition(CLUSTERED, state, [change("d", {"pk": 1}, None, ts=500, n=1, cdc_deletion="partition")])
    assert sorted(r["ck"] for r in out if r["__action"] == "delete") == [1, 2]
    assert not upserts(out, "pk")


def test_a_static_change_sets_every_row_and_a_partition_without_rows_shows_one_row() -> None:
    state = [stored({"pk": 1, "ck": ck, "v": "x", "s": None}, ts=100) for ck in (1, 2)]
    out = fold_partition(CLUSTERED, state, [change("u", {"pk": 1}, {"s": "shared"}, ts=200, n=1)])
    assert sorted((r["ck"], r["s"], r["v"]) for r in out if r["__action"] == "upsert") == [
        (1, "shared", "x"),
        (2, "shared", "x"),
    ]
    alone = fold_partition(CLUSTERED, [], [change("u", {"pk": 7}, {"s": "only"}, ts=200, n=1)])
    assert upserts(alone, "pk", "ck", "s", "v") == [{"pk": 7, "ck": None, "s": "only", "v": None}]
    # A row arriving in that partition takes the static value and replaces the row without clustering.
    keyless = stored({"pk": 7, "ck": None, "s": "only"}, ts=200) | {"_cdc_static_ts_us": 200}
    joined = fold_partition(CLUSTERED, [keyless], [change("c", {"pk": 7, "ck": 1}, {"v": "r"}, ts=300, n=2)])
    assert upserts(joined, "pk", "ck", "s", "v") == [{"pk": 7, "ck": 1, "s": "only", "v": "r"}]
    assert [r["ck"] for r in joined if r["__action"] == "delete"] == [None]


def test_cassandra_collection_and_user_type_deltas_merge_into_the_stored_value() -> None:
    state = [
        stored(
            {"pk": 1, "ck": 1, "tags": ["a", "b"], "attrs": [("k1", 1), ("k2", 2)], "addr": {"street": "x", "zip": 1}},
            ts=100,
        )
    ]
    delta = change(
        "u",
        {"pk": 1, "ck": 1},
        {"tags": ["c"], "attrs": {"k3": 3}, "addr": {"zip": 9}},
        ts=200,
        n=1,
        system="cassandra",
        cdc_removed={"tags": ["a"], "attrs": ["k1"]},
    )
    delta["attrs"] = [("k3", 3)]  # as Arrow hands a map column over
    (row,) = upserts(fold_partition(CLUSTERED, state, [delta]), "tags", "attrs", "addr")
    assert row == {"tags": ["b", "c"], "attrs": [("k2", 2), ("k3", 3)], "addr": {"street": "x", "zip": 9}}
    replaced = change("u", {"pk": 1, "ck": 1}, {"tags": ["z"]}, ts=300, n=2, system="cassandra", cdc_replaced=["tags"])
    (row,) = upserts(fold_partition(CLUSTERED, state, [replaced]), "tags")
    assert row == {"tags": ["z"]}


def test_a_list_element_removed_by_cell_id_is_a_clear_error() -> None:
    state = [stored({"pk": 1, "ck": 1, "items": ["a"]}, ts=100)]
    removal = change(
        "u", {"pk": 1, "ck": 1}, {}, ts=200, n=1, system="cassandra", cdc_removed={"items": ["0e5f-cell-id"]}
    )
    with pytest.raises(MirrorUnsupportedChangeError, match="items"):
        fold_partition(CLUSTERED, state, [removal])
