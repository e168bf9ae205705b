"""Schemas follow the data: every transform states its schema change, the runtime applies and checks it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cdcflow_example_plugin import ReshapeConfig, ReshapeTransform

from cdcflow.contract import PluginConfig, PluginContext, Rejected, Transform
from cdcflow.converters import JsonConverter, JsonConverterConfig
from cdcflow.errors import TransformError
from cdcflow.events import ChangeEvent, Column, Op, RowSchema, SourceInfo
from cdcflow.pipeline import apply_transforms
from cdcflow.schemas import avro_value_schema
from cdcflow.transforms import MaskConfig, MaskTransform, UnwrapConfig, UnwrapTransform

CONTEXT = PluginContext("t", Path("t.yaml"))
SCHEMA = RowSchema(
    "c1.ks.orders",
    (Column("id", "bigint", False),),
    (Column("id", "bigint", False), Column("name", "text"), Column("amount", "double"), Column("note", "text")),
)
SOURCE = SourceInfo("cassandra", "c1", "ks", "orders", "n1", {"p": 1}, 1_000_000)


def event(op: Op = Op.UPDATE, **after: Any) -> ChangeEvent:
    row = {"id": 1, "name": "ann", "amount": 250.0, "note": "x", **after}
    before = {"id": 1, "name": "ann", "amount": 50.0, "note": "x"}
    return ChangeEvent(op, {"id": 1}, before, None if op is Op.DELETE else row, SOURCE, 9, SCHEMA)


def run(transforms: list[Transform[Any]], *events: ChangeEvent) -> tuple[list[ChangeEvent], list[Rejected]]:
    output, rejected = apply_transforms(transforms, list(events))
    return [e for e in output if isinstance(e, ChangeEvent)], rejected


def value_columns(event: ChangeEvent) -> list[tuple[str, str]]:
    assert event.schema is not None
    return [(c.name, c.type) for c in event.schema.value_columns]


def test_a_third_party_transform_adds_renames_and_drops_columns_in_the_schema_too() -> None:
    reshape = ReshapeTransform(
        ReshapeConfig(type="reshape", bucket="amount", rename={"name": "customer"}, drop=["note"]), CONTEXT
    )
    [out], rejected = run([reshape], event())
    assert rejected == []
    assert value_columns(out) == [
        ("id", "bigint"),
        ("customer", "text"),
        ("amount", "double"),
        ("amount_bucket", "text"),
    ]
    assert out.after == {"id": 1, "customer": "ann", "amount": 250.0, "amount_bucket": "large"}
    assert out.before == {"id": 1, "customer": "ann", "amount": 50.0, "amount_bucket": "small"}
    # Every converter describes exactly those fields.
    document = json.loads(JsonConverter(JsonConverterConfig(type="json"), CONTEXT).serialize_value(out, "t") or b"")
    after = next(f for f in document["schema"]["fields"] if f["field"] == "after")
    assert [f["field"] for f in after["fields"]] == list(out.after)
    avro_after = next(f for f in avro_value_schema(out)["fields"] if f["name"] == "before")["type"][1]
    assert [f["name"] for f in avro_after["fields"]] == list(out.after)


class _Sneaky(Transform[PluginConfig]):
    """Adds a column without stating it: what issue 13 found silently dropped by avro and parquet."""

    type_name = "sneaky"
    config_model = PluginConfig

    def apply(self, event: ChangeEvent) -> ChangeEvent | None:
        return event.with_changes(after={**(event.after or {}), "amount_bucket": "large"})


def test_a_column_a_transform_does_not_state_is_an_error_for_that_record_not_a_silent_drop() -> None:
    [], [rejected] = run([_Sneaky(PluginConfig(type="sneaky"), CONTEXT)], event())
    assert rejected.stage == "transform:sneaky" and isinstance(rejected.error, TransformError)
    assert "amount_bucket" in str(rejected.error) and "transform_schema" in str(rejected.error)


def test_mask_drop_removes_the_column_and_hash_makes_it_text() -> None:
    dropped = MaskTransform(MaskConfig(type="mask", columns=["orders.amount"], mode="drop"), CONTEXT)
    hashed = MaskTransform(MaskConfig(type="mask", columns=["amount"]), CONTEXT)
    [out], _ = run([dropped], event())
    assert value_columns(out) == [("id", "bigint"), ("name", "text"), ("note", "text")]
    [out], _ = run([hashed], event())
    assert ("amount", "text") in value_columns(out) and isinstance(out.after["amount"], str)  # type: ignore[index]
    other_table = event().with_changes(source=SourceInfo("cassandra", "c1", "ks", "users", "n1", {}, 1))
    [out], _ = run([dropped], other_table)
    assert out.schema is SCHEMA  # orders.amount names another table: nothing changes


def test_unwrap_adds_the_columns_it_writes() -> None:
    unwrap = UnwrapTransform(
        UnwrapConfig.model_validate({"type": "unwrap", "delete_handling": "rewrite", "add_fields": ["op", "ts_us"]}),
        CONTEXT,
    )
    [update, delete], _ = run([unwrap], event(), event(Op.DELETE))
    added = [("__deleted", "boolean"), ("__op", "text"), ("__ts_us", "bigint")]
    assert value_columns(update)[-3:] == added and value_columns(delete)[-3:] == added
    assert update.after["__deleted"] is False and delete.after["__deleted"] is True  # type: ignore[index]
    document = json.loads(JsonConverter(JsonConverterConfig(type="json"), CONTEXT).serialize_value(delete, "t") or b"")
    assert [f["field"] for f in document["schema"]["fields"]] == [
        "id",
        "name",
        "amount",
        "note",
        *(n for n, _ in added),
    ]
    expected = {"id": 1, "name": "ann", "amount": 50.0, "note": "x", "__deleted": True, "__op": "d"}
    assert document["payload"] == {**expected, "__ts_us": 1_000_000}
