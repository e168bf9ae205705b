"""Which log rows the ScyllaDB stand-in makes of a base write, case by case against ScyllaDB's
code: ``cdc/split.cc`` (should_split_visitor, extract_changes_visitor,
process_changes_with/without_splitting), ``cdc/log.cc`` (process_row_visitor,
process_change_visitor, transformer::generate_image) and the expectations of its own tests
(``test/boost/cdc_test.cc``). Rows are written ``op(operation, columns...)``; ``ts`` is the
record's ``cdc$time`` relative to the statement's timestamp."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import pytest

from tests.standins.scylla.split import (
    Add,
    DeleteColumns,
    DeletePartition,
    DeleteRange,
    DeleteRow,
    ImageState,
    Insert,
    Operation,
    Overwrite,
    Remove,
    SetFields,
    TableShape,
    Update,
    build_mutation,
    log_records,
)

T = 1_700_000_000_000_000


def list_key(micros: int, sequence: int, node: int = 0) -> uuid.UUID:
    """The key ScyllaDB gives a list element it appends (scylladb ``cql3/lists.cc`` 154-157,
    ``utils/UUID_gen.hh`` 190-227): a version-1 UUID of the write's time plus the sequence's top 3
    bits in 100 ns units, clock sequence the low 14 bits with 0x80 flipped, variant 10, the node."""
    intervals = micros * 10 + 0x01B21DD213814000 + ((sequence >> 14) & 0b111)
    clock_sequence = ((sequence & 0x3FFF) ^ 0x80) | 0x8000
    return uuid.UUID(
        fields=(
            intervals & 0xFFFFFFFF,
            (intervals >> 32) & 0xFFFF,
            ((intervals >> 48) & 0x0FFF) | 0x1000,
            clock_sequence >> 8,
            clock_sequence & 0xFF,
            node,
        )
    )


# t (pk int, ck int, s int static, v int, w int, m map<int,int>, st set<int>, l list<int>, u ut,
#    PRIMARY KEY (pk, ck)), ut (a int, b text) not frozen
T1 = TableShape(
    ("pk",),
    ("ck",),
    {"s": "atomic", "v": "atomic", "w": "atomic", "m": "map", "st": "set", "l": "list", "u": "udt"},
    frozenset({"s"}),
    {"u": ("a", "b")},
    False,
    False,
    ("int",),
)
# t2 (pk int PRIMARY KEY, v int)
T2 = TableShape(("pk",), (), {"v": "atomic"}, frozenset(), {}, True, False)
K = {"pk": 0, "ck": 0}


def op(operation: int, **columns: Any) -> dict[str, Any]:
    """A log row: d_X is cdc$deleted_X, de_X cdc$deleted_elements_X, ttl cdc$ttl; pk is 0."""
    row: dict[str, Any] = {"cdc$operation": operation, "pk": 0}
    for name, value in columns.items():
        if name == "ttl":
            row["cdc$ttl"] = value
        elif name.startswith("d_"):
            row["cdc$deleted_" + name[2:]] = value
        elif name.startswith("de_"):
            row["cdc$deleted_elements_" + name[3:]] = value
        else:
            row[name] = value
    return row


def logged(
    operations: list[Operation],
    shape: TableShape = T1,
    ttl: int | None = None,
    state: ImageState | None = None,
    **options: bool,
) -> list[tuple[int, list[dict[str, Any]]]]:
    mutation = build_mutation(shape, operations, T, ttl)
    return [(r.ts - T, r.rows) for r in log_records(shape, mutation, state or ImageState(), **options)]


CASES: list[tuple[str, list[Operation], int | None, list[tuple[int, list[dict[str, Any]]]]]] = [
    ("1 insert", [Insert({**K, "v": 1})], None, [(0, [op(2, ck=0, v=1)])]),
    ("2 insert with TTL", [Insert({**K, "v": 1})], 5, [(0, [op(2, ck=0, v=1, ttl=5)])]),
    ("3 insert of keys with TTL: the marker's TTL", [Insert(K)], 5, [(0, [op(2, ck=0, ttl=5)])]),
    ("4 insert of a null", [Insert({**K, "v": 1, "w": None})], None, [(0, [op(2, ck=0, v=1, d_w=True)])]),
    (
        "5 insert of a null with TTL: the dead cell has no TTL, so it is an update of its own",
        [Insert({**K, "v": 1, "w": None})],
        5,
        [(0, [op(2, ck=0, v=1, ttl=5), op(1, ck=0, d_w=True)])],
    ),
    (
        "6 insert of a collection: its tombstone stays in the insert",
        [Insert({**K, "v": 1, "m": {1: 1}})],
        None,
        [(0, [op(2, ck=0, v=1, d_m=True, m={1: 1})])],
    ),
    (
        "7 insert of a collection with TTL (log.cc #6070: three delta rows)",
        [Insert({**K, "v": 1, "m": {1: 1}})],
        5,
        [(0, [op(2, ck=0, v=1, ttl=5), op(1, ck=0, d_m=True), op(1, ck=0, m={1: 1}, ttl=5)])],
    ),
    (
        "8 two collections share the tombstone row and the cells row (split.cc comment)",
        [Insert({**K, "m": {1: 1}, "st": {2}})],
        5,
        [(0, [op(2, ck=0, ttl=5), op(1, ck=0, d_m=True, d_st=True), op(1, ck=0, m={1: 1}, st={2}, ttl=5)])],
    ),
    (
        "9 a user type is a value of every field whenever it is touched",
        [Insert({**K, "u": {"a": 1}})],
        5,
        [(0, [op(2, ck=0, ttl=5), op(1, ck=0, d_u=True, u=(None, None)), op(1, ck=0, u=(1, None), ttl=5)])],
    ),
    (
        "10 update with TTL and a null (CDC docs' example)",
        [Update(K, {"v": 0, "w": None})],
        5,
        [(0, [op(1, ck=0, d_w=True), op(1, ck=0, v=0, ttl=5)])],
    ),
    ("11 only a null with TTL: not split", [Update(K, {"w": None})], 5, [(0, [op(1, ck=0, d_w=True)])]),
    (
        "12 overwrite without TTL: not split",
        [Update(K, {"m": {1: 1}, "v": 2})],
        None,
        [(0, [op(1, ck=0, d_m=True, m={1: 1}, v=2)])],
    ),
    (
        "13 overwrite with TTL",
        [Update(K, {"m": Overwrite({1: 1})})],
        5,
        [(0, [op(1, ck=0, d_m=True), op(1, ck=0, m={1: 1}, ttl=5)])],
    ),
    (
        "14 set to null: a tombstone at T - 1, logged at T",
        [Update(K, {"m": None})],
        None,
        [(0, [op(1, ck=0, d_m=True)])],
    ),
    (
        "15 DELETE m: a tombstone at T, logged at T + 1",
        [DeleteColumns(K, ("m",))],
        None,
        [(1, [op(1, ck=0, d_m=True)])],
    ),
    (
        "16 DELETE v, m: two records",
        [DeleteColumns(K, ("v", "m"))],
        None,
        [(0, [op(1, ck=0, d_v=True)]), (1, [op(1, ck=0, d_m=True)])],
    ),
    ("17 added entries", [Update(K, {"m": Add({2: 2})})], 5, [(0, [op(1, ck=0, m={2: 2}, ttl=5)])]),
    ("18 removed keys", [Update(K, {"m": Remove({1})})], None, [(0, [op(1, ck=0, de_m={1})])]),
    (
        "19 appended list elements, keyed by timeuuid",
        [Update(K, {"l": Add([7])})],
        None,
        [(0, [op(1, ck=0, l={list_key(T, 0): 7})])],
    ),
    ("20 a field set", [Update(K, {"u": SetFields({"a": 1})})], None, [(0, [op(1, ck=0, u=(1, None))])]),
    (
        "21 a field deleted: still a value, and the field index (cdc_test.cc test_udt_logging)",
        [Update(K, {"u": SetFields({"b": None})})],
        None,
        [(0, [op(1, ck=0, u=(None, None), de_u={1})])],
    ),
    (
        "22 a user type overwritten",
        [Update(K, {"u": Overwrite({"a": 1})})],
        None,
        [(0, [op(1, ck=0, d_u=True, u=(1, None))])],
    ),
    ("23 a user type set to null", [Update(K, {"u": None})], None, [(0, [op(1, ck=0, d_u=True, u=(None, None))])]),
    ("24 a static column: the clustering key null", [Update({"pk": 0}, {"s": 1})], None, [(0, [op(1, s=1)])]),
    (
        "25 static and clustered in one insert: split, static first",
        [Insert({**K, "s": 1, "v": 1})],
        None,
        [(0, [op(1, s=1), op(2, ck=0, v=1)])],
    ),
    ("26 row delete", [DeleteRow(K)], None, [(0, [op(3, ck=0)])]),
    (
        "27 range delete (0, 2]",
        [DeleteRange({"pk": 0}, start=(0, False), end=(2, True))],
        None,
        [(0, [op(6, ck=0), op(7, ck=2)])],
    ),
    ("28 range delete < 3", [DeleteRange({"pk": 0}, end=(3, False))], None, [(0, [op(5), op(8, ck=3)])]),
    ("29 partition delete of a table with clustering columns", [DeletePartition({"pk": 0})], None, [(0, [op(4)])]),
    (
        "31 a batch's rows in clustering order, not split",
        [Update({"pk": 0, "ck": 2}, {"v": 1}), Update({"pk": 0, "ck": 1}, {"v": 2})],
        None,
        [(0, [op(1, ck=1, v=2), op(1, ck=2, v=1)])],
    ),
    (
        "32 a row delete after an upsert splits: inserts, then deletions",
        [Insert({"pk": 0, "ck": 1, "v": 1}), DeleteRow({"pk": 0, "ck": 2}), Insert({"pk": 0, "ck": 3, "v": 3})],
        None,
        [(0, [op(2, ck=1, v=1), op(2, ck=3, v=3), op(3, ck=2)])],
    ),
    (
        "33 a row delete before an upsert does not split: clustering order",
        [Insert({"pk": 0, "ck": 2, "v": 2}), DeleteRow({"pk": 0, "ck": 1})],
        None,
        [(0, [op(3, ck=1), op(2, ck=2, v=2)])],
    ),
    (
        "34 a partition delete comes last",
        [DeletePartition({"pk": 0}), Insert({"pk": 0, "ck": 1, "v": 1})],
        None,
        [(0, [op(2, ck=1, v=1), op(4)])],
    ),
    (
        "35 two timestamps: one record each",
        [Update({"pk": 0, "ck": 2}, {"v": 2}, timestamp_us=T + 5), Update({"pk": 0, "ck": 1}, {"v": 1})],
        None,
        [(0, [op(1, ck=1, v=1)]), (5, [op(1, ck=2, v=2)])],
    ),
    (
        "statements on one row merge into one row",
        [Update(K, {"v": 1}), Update(K, {"w": 2})],
        None,
        [(0, [op(1, ck=0, v=1, w=2)])],
    ),
    (
        "two TTLs on one row: a row per TTL, ascending",
        [Update(K, {"v": 1}, ttl_s=9), Update(K, {"w": 2}, ttl_s=3)],
        None,
        [(0, [op(1, ck=0, w=2, ttl=3), op(1, ck=0, v=1, ttl=9)])],
    ),
]


@pytest.mark.parametrize(("operations", "ttl", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_base_write_is_logged_as_scylladb_splits_it(
    operations: list[Operation], ttl: int | None, expected: list[tuple[int, list[dict[str, Any]]]]
) -> None:
    assert logged(operations, ttl=ttl) == expected


def test_a_partition_delete_without_clustering_columns_gets_a_pre_image_of_every_column() -> None:
    # 30: split.cc get_affected_clustered_columns_per_row() (scylladb#26382, since 2026.1): the row
    # existed with v null, so the pre-image flags it.
    state = ImageState(rows={(): {}})
    assert logged([DeleteRow({"pk": 0})], T2, state=state) == [(0, [op(0, d_v=True), op(4)])]
    assert logged([DeletePartition({"pk": 0})], T2, state=ImageState(rows={(): {"v": 3}})) == [(0, [op(0, v=3), op(4)])]
    # no row, no pre-image
    assert logged([DeleteRow({"pk": 0})], T2) == [(0, [op(4)])]


def test_a_partition_delete_with_clustering_columns_gets_no_pre_image() -> None:
    shape = TableShape(("pk",), ("ck",), {"v": "atomic"}, frozenset(), {}, True, False, ("int",))
    assert logged([DeletePartition({"pk": 0})], shape, state=ImageState(rows={(0,): {"v": 1}})) == [(0, [op(4)])]


def test_images_pre_of_touched_columns_post_of_the_whole_row() -> None:
    # 36: preimage + postimage, the row (0, 0) had v = 1, w = 5.
    shape = TableShape(
        ("pk",), ("ck",), {"v": "atomic", "w": "atomic", "m": "map"}, frozenset(), {}, True, True, ("int",)
    )
    state = ImageState(rows={(0,): {"v": 1, "w": 5}})
    assert logged([Update(K, {"v": 2})], shape, state=state) == [
        (0, [op(0, ck=0, v=1), op(1, ck=0, v=2), op(9, ck=0, v=2, w=5)])
    ]
    full = TableShape(
        ("pk",), ("ck",), {"v": "atomic", "w": "atomic", "m": "map"}, frozenset(), {}, "full", False, ("int",)
    )
    assert logged([Update(K, {"v": 2})], full, state=ImageState(rows={(0,): {"v": 1, "w": 5}})) == [
        (0, [op(0, ck=0, v=1, w=5, d_m=True), op(1, ck=0, v=2)])
    ]


def test_a_split_write_carries_image_state_from_record_to_record() -> None:
    # log.cc #6070: the tombstone (TTL 0) is logged before the cells (TTL 5), so the post-image
    # shows only the new entries; the insert's post-image comes after all of them.
    shape = TableShape(("pk",), ("ck",), {"v": "atomic", "m": "map"}, frozenset(), {}, True, True, ("int",))
    state = ImageState(rows={(0,): {"v": 0, "m": {9: 9}}})
    [(ts, rows)] = logged([Insert({**K, "v": 1, "m": {1: 1}})], shape, ttl=5, state=state)
    assert ts == 0
    assert rows == [
        op(0, ck=0, v=0, m={9: 9}),
        op(2, ck=0, v=1, ttl=5),
        op(1, ck=0, d_m=True),
        op(1, ck=0, m={1: 1}, ttl=5),
        op(9, ck=0, v=1, m={1: 1}),
    ]
    # Two timestamps: the second record's images start from the state the first left.
    state = ImageState(rows={(0,): {"v": 0, "m": {9: 9}}})
    records = logged([Update(K, {"v": 5}), Update(K, {"m": Add({2: 2})}, timestamp_us=T + 1)], shape, state=state)
    assert records == [
        (0, [op(0, ck=0, v=0), op(1, ck=0, v=5), op(9, ck=0, v=5, m={9: 9})]),
        (1, [op(0, ck=0, m={9: 9}), op(1, ck=0, m={2: 2}), op(9, ck=0, v=5, m={9: 9, 2: 2})]),
    ]
    # A newer cell of the same column replaces the older one within the mutation: one record.
    state = ImageState(rows={(0,): {"v": 0}})
    assert logged([Update(K, {"v": 5}), Update(K, {"v": 6}, timestamp_us=T + 1)], shape, state=state) == [
        (1, [op(0, ck=0, v=0), op(1, ck=0, v=6), op(9, ck=0, v=6)])
    ]


def test_removing_every_element_leaves_an_empty_collection_in_the_post_image() -> None:
    # log.cc merge(): the image's value is rebuilt from the previous one, minus what was removed.
    shape = TableShape(
        ("pk",), ("ck",), {"m": "map", "u": "udt"}, frozenset(), {"u": ("a", "b")}, False, True, ("int",)
    )
    state = ImageState(rows={(0,): {"m": {1: 1}, "u": (1, "x")}})
    [(_, rows)] = logged([Update(K, {"m": Remove({1}), "u": SetFields({"b": None})})], shape, state=state)
    assert rows[-1] == op(9, ck=0, m={}, u=(1, None))


def test_service_deletes_are_operations_minus_3_and_minus_4() -> None:
    # cdc/log.hh: service_row_delete = -3, service_partition_delete = -4 (expirations).
    assert logged([DeleteRow(K)], system_originated=True) == [(0, [op(-3, ck=0)])]
    assert logged([DeleteRow({"pk": 0})], T2, state=ImageState(rows={(): {"v": 1}}), system_originated=True) == [
        (0, [op(0, v=1), op(-4)])
    ]


def test_two_values_for_one_cell_at_one_timestamp_are_refused_not_guessed() -> None:
    with pytest.raises(ValueError, match="two values for one cell"):
        logged([Update(K, {"v": 1}), Update(K, {"v": 2})])


def test_delta_keys_logs_deltas_of_keys_operation_and_ttl_and_whole_images() -> None:
    # log.cc generate_delta_values (1207-1209): with cdc = {'delta': 'keys'} a delta row has its
    # keys, operation and cdc$ttl (set_ttl is outside the check, lines 1525 and 1576), no value,
    # cdc$deleted_X or cdc$deleted_elements_X; post-images come from the state as in 'full'.
    shape = dataclasses.replace(T1, delta="keys", postimage=True)
    write = [Update(K, {"v": 1, "w": None}), Update({"pk": 0}, {"s": 2})]
    # the null (no TTL) is a row of its own, as in 'full' (case 10)
    assert logged(write, shape, ttl=5) == [
        (0, [op(1, ttl=5), op(1, ck=0), op(1, ck=0, ttl=5), op(9, s=2), op(9, ck=0, v=1)]),
    ]


def test_list_elements_appended_in_one_write_take_scylladb_s_keys_in_append_order() -> None:
    # One sequence across the write's statements (query_options::next_list_append_seq).
    operations: list[Operation] = [Update(K, {"l": Add([5, 6])}), Update(K, {"l": Add([7])})]
    [(_, [row])] = logged(operations)
    assert row["l"] == {list_key(T, 0): 5, list_key(T, 1): 6, list_key(T, 2): 7}
    assert [row["l"][k] for k in sorted(row["l"], key=lambda k: (k.time, k.clock_seq))] == [5, 6, 7]
