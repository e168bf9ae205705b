"""datagen's determinism and sharding, and the built-in transforms' semantics."""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

import pytest
from pydantic import ValidationError

from cdcflow.contract import PluginContext
from cdcflow.errors import TransformError
from cdcflow.events import ChangeEvent, Op, SourceInfo
from cdcflow.sources.datagen import DatagenConfig, DatagenSource, expected_event_ids
from cdcflow.transforms import (
    FilterConfig,
    FilterTransform,
    MaskConfig,
    MaskTransform,
    RouteConfig,
    RouteTransform,
    UnwrapConfig,
    UnwrapTransform,
)

CONTEXT = PluginContext("t", Path("t.yaml"))


def datagen(**fields: object) -> DatagenSource:
    return DatagenSource(DatagenConfig.model_validate({"type": "datagen", **fields}), CONTEXT)


def read_all(source: DatagenSource) -> list[ChangeEvent]:
    events = []
    for partition in source.partitions():
        start = source.initial_offset(partition)
        while not source.is_finished(partition, start):
            end = source.latest_offset(partition, start, 700)
            events += list(source.read(partition, start, end))  # type: ignore[arg-type]
            start = end
    return events


def row_seq(event: ChangeEvent) -> int:
    return int((event.after or event.before or {})["seq"])


def test_the_same_range_reads_the_same_events() -> None:
    source = datagen(count=5000, partitions=2)
    partition = source.partitions()[1]
    start = source.initial_offset(partition)
    end = source.latest_offset(partition, start, 1000)
    first, second = list(source.read(partition, start, end)), list(source.read(partition, start, end))
    assert [e.with_changes(ts_ms=0) for e in first] == [e.with_changes(ts_ms=0) for e in second]
    assert len(first) == 1000


def test_bounded_count_yields_every_id_once_and_keys_stay_in_one_partition() -> None:
    config = {"count": 10_001, "partitions": 4, "keys": 1000}
    events = read_all(datagen(**config))
    assert Counter(row_seq(e) for e in events) == Counter(expected_event_ids(DatagenConfig(type="datagen", **config)))
    partitions_of_key: dict[int, set[str]] = {}
    for event in events:
        partitions_of_key.setdefault(event.key["id"], set()).add(event.source.partition)
    assert all(len(p) == 1 for p in partitions_of_key.values())


def test_op_mix_is_respected() -> None:
    events = read_all(datagen(count=20_000, op_mix={"c": 0.2, "u": 0.7, "d": 0.1}))
    shares = {op: n / len(events) for op, n in Counter(e.op.value for e in events).items()}
    # 20,000 draws: the standard error of a share p is sqrt(p(1-p)/n) <= 0.0036; allow 4 of them.
    assert shares == pytest.approx({"c": 0.2, "u": 0.7, "d": 0.1}, abs=0.015)
    assert all((e.after is None) == (e.op is Op.DELETE) for e in events)


def test_rate_mode_releases_events_as_time_passes() -> None:
    now = [1_000.0]
    source = DatagenSource(DatagenConfig(type="datagen", rate=400, partitions=4), CONTEXT, clock=lambda: now[0])
    partition = source.partitions()[0]
    start = source.initial_offset(partition)
    assert source.latest_offset(partition, start, None) == start
    now[0] += 2.5
    assert source.latest_offset(partition, start, None)["seq"] == 250  # 400/s over 4 partitions for 2.5 s
    assert source.latest_offset(partition, start, 100)["seq"] == 100


def event(after: dict[str, object] | None, op: Op = Op.UPDATE, table: str = "orders") -> ChangeEvent:
    return ChangeEvent(op, {"id": 1}, {"id": 1, "amount": 1}, after, SourceInfo("t", "c1", "ks", table, "p", {}, 5), 0)


def test_filter_by_table_op_and_expression() -> None:
    keep = FilterTransform(
        FilterConfig(
            type="filter",
            tables=["ks.orders"],
            ops=["u"],
            expression="after.amount > 10 and after['tag'] in ['a', 'b']",
        ),
        CONTEXT,
    )
    assert keep.apply(event({"id": 1, "amount": 11, "tag": "a"})) is not None
    assert keep.apply(event({"id": 1, "amount": 11, "tag": "z"})) is None
    assert keep.apply(event({"id": 1, "amount": 9, "tag": "a"})) is None
    assert keep.apply(event({"id": 1, "amount": None, "tag": "a"})) is None  # None never compares
    assert keep.apply(event(None, Op.DELETE)) is None
    assert keep.apply(event({"id": 1, "amount": 11, "tag": "a"}, table="other")) is None


@pytest.mark.parametrize("expression", ["__import__('os')", "after.amount.bit_length()", "len(after)", "x == 1"])
def test_filter_refuses_anything_but_conditions_at_load_time(expression: str) -> None:
    with pytest.raises(ValidationError):
        FilterConfig(type="filter", expression=expression)


def test_route_renames_by_regex_with_dollar_groups() -> None:
    route = RouteTransform(RouteConfig(type="route", regex=r"c1\.(\w+)\.(\w+)", replacement="cdc.$2.$1"), CONTEXT)
    routed = route.apply(event({"id": 1}))
    assert routed is not None and routed.destination() == "cdc.orders.ks"
    unchanged = RouteTransform(RouteConfig(type="route", regex="nomatch", replacement="x"), CONTEXT)
    assert unchanged.apply(event({"id": 1})).destination() == "c1.ks.orders"  # type: ignore[union-attr]


def test_mask_hashes_with_salt_drops_and_guards_keys() -> None:
    hashed = MaskTransform(MaskConfig(type="mask", columns=["amount"], salt="s"), CONTEXT).apply(
        event({"id": 1, "amount": 7})
    )
    assert hashed is not None and hashed.after is not None and hashed.before is not None
    assert hashed.after["amount"] == hashlib.sha256(b"s7").hexdigest()
    assert hashed.before["amount"] == hashlib.sha256(b"s1").hexdigest()
    dropped = MaskTransform(MaskConfig(type="mask", columns=["orders.amount"], mode="drop"), CONTEXT)
    assert dropped.apply(event({"id": 1, "amount": 7})).after == {"id": 1}  # type: ignore[union-attr]
    with pytest.raises(TransformError, match="key column"):
        MaskTransform(MaskConfig(type="mask", columns=["id"], mode="drop"), CONTEXT).apply(event({"id": 1}))


def test_unwrap_delete_handling_and_extra_fields() -> None:
    def unwrap(**config: object) -> UnwrapTransform:
        return UnwrapTransform(UnwrapConfig.model_validate({"type": "unwrap", **config}), CONTEXT)

    update = unwrap(add_fields=["op", "table"]).apply(event({"id": 1, "amount": 3}))
    assert update is not None and not update.envelope
    assert update.value_payload() == {"id": 1, "amount": 3, "__op": "u", "__table": "orders"}
    deleted = event(None, Op.DELETE)
    assert unwrap().apply(deleted).value_payload() is None  # type: ignore[union-attr]
    assert unwrap(delete_handling="drop").apply(deleted) is None
    rewritten = unwrap(delete_handling="rewrite").apply(deleted)
    assert rewritten is not None and rewritten.value_payload() == {"id": 1, "amount": 1, "__deleted": True}
