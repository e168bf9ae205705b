"""The built-in transforms: ``filter``, ``route``, ``mask`` and ``unwrap``.

Each states how it changes an event's schema (:meth:`~cdcflow.contract.Transform.transform_schema`):
``filter`` and ``route`` keep it, ``mask`` drops columns or makes hashed ones text, ``unwrap`` adds
the ``__`` columns it writes.
"""

from __future__ import annotations

import ast
import hashlib
import operator
import re
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from cdcflow.batches import EventBatch
from cdcflow.contract import PluginConfig, PluginContext, Transform
from cdcflow.errors import TransformError
from cdcflow.events import ChangeEvent, Column, RowSchema, SchemaChangeEvent, SourceInfo

__all__ = [
    "FilterConfig",
    "FilterTransform",
    "MaskConfig",
    "MaskTransform",
    "RouteConfig",
    "RouteTransform",
    "UnwrapConfig",
    "UnwrapTransform",
    "compile_condition",
]

# --- filter --------------------------------------------------------------------------------

_COMPARISONS: Mapping[type[ast.cmpop], Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
}
_NAMES = ("op", "key", "before", "after", "table", "keyspace", "cluster", "ts_us", "topic")


def compile_condition(expression: str) -> Callable[[ChangeEvent], bool]:
    """Compile a small, side-effect-free condition over an event.

    The language is Python's expression syntax restricted to comparisons, ``and``/``or``/``not``,
    literals, field access (``after.amount``, ``after['amount']``) and the names ``op``, ``key``,
    ``before``, ``after``, ``table``, ``keyspace``, ``cluster``, ``ts_us``, ``topic``. A missing
    field reads as None. Anything else is refused when the config is loaded, not at run time.
    """
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"not a valid expression: {exc.msg}") from exc
    evaluate = _compile_node(tree.body)

    def condition(event: ChangeEvent) -> bool:
        scope = {
            "op": event.op.value,
            "key": event.key,
            "before": event.before,
            "after": event.after,
            "table": event.source.table,
            "keyspace": event.source.keyspace,
            "cluster": event.source.cluster,
            "ts_us": event.source.ts_us,
            "topic": event.destination(),
        }
        return bool(evaluate(scope))

    return condition


def _compile_node(node: ast.AST) -> Callable[[dict[str, Any]], Any]:
    if isinstance(node, ast.Constant):
        value = node.value
        return lambda scope: value
    if isinstance(node, ast.Name):
        if node.id not in _NAMES:
            raise ValueError(f"unknown name {node.id!r}; use one of {', '.join(_NAMES)}")
        name = node.id
        return lambda scope: scope[name]
    if isinstance(node, ast.Attribute | ast.Subscript):
        inner = _compile_node(node.value)
        if isinstance(node, ast.Attribute):
            field: str | int = node.attr
        elif isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str | int):
            field = node.slice.value
        else:
            raise ValueError("subscripts must be constants, like after['amount']")
        return lambda scope: _field(inner(scope), field)
    if isinstance(node, ast.BoolOp):
        parts = [_compile_node(v) for v in node.values]
        if isinstance(node.op, ast.And):
            return lambda scope: all(p(scope) for p in parts)
        return lambda scope: any(p(scope) for p in parts)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        operand = _compile_node(node.operand)
        return lambda scope: not operand(scope)
    if isinstance(node, ast.Compare):
        return _compile_comparison(node)
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        items = [_compile_node(e) for e in node.elts]
        return lambda scope: [i(scope) for i in items]
    raise ValueError(f"{type(node).__name__} is not allowed in a filter expression")


def _compile_comparison(node: ast.Compare) -> Callable[[dict[str, Any]], Any]:
    left = _compile_node(node.left)
    steps = []
    for op_node, right_node in zip(node.ops, node.comparators, strict=True):
        compare = _COMPARISONS.get(type(op_node))
        if compare is None:
            raise ValueError(f"{type(op_node).__name__} is not allowed in a filter expression")
        steps.append((compare, _compile_node(right_node)))

    def evaluate(scope: dict[str, Any]) -> bool:
        current = left(scope)
        for compare, right in steps:
            other = right(scope)
            try:
                if not compare(current, other):
                    return False
            except TypeError:  # comparing None with a number: the condition does not hold
                return False
            current = other
        return True

    return evaluate


def _field(container: Any, name: str | int) -> Any:
    if isinstance(container, Mapping):
        return container.get(name)
    if isinstance(container, list | tuple) and isinstance(name, int) and -len(container) <= name < len(container):
        return container[name]
    return None


class FilterConfig(PluginConfig):
    tables: list[str] | None = Field(default=None, description="keep only these tables (table or keyspace.table)")
    ops: list[Literal["c", "u", "d", "r"]] | None = Field(default=None, description="keep only these operations")
    expression: str | None = Field(default=None, description="keep events for which this condition holds")
    drop_schema_changes: bool = False

    @field_validator("expression")
    @classmethod
    def _expression_compiles(cls, value: str | None) -> str | None:
        if value is not None:
            compile_condition(value)
        return value


class FilterTransform(Transform[FilterConfig]):
    """``filter``: keep the events that match every given criterion; drop the rest."""

    type_name = "filter"
    config_model = FilterConfig

    def __init__(self, config: FilterConfig, context: PluginContext) -> None:
        super().__init__(config, context)
        self._tables = set(config.tables) if config.tables is not None else None
        self._ops = set(config.ops) if config.ops is not None else None
        self._condition = compile_condition(config.expression) if config.expression else None

    def apply(self, event: ChangeEvent) -> ChangeEvent | None:
        source = event.source
        if self._tables is not None and not (
            source.table in self._tables or f"{source.keyspace}.{source.table}" in self._tables
        ):
            return None
        if self._ops is not None and event.op.value not in self._ops:
            return None
        if self._condition is not None and not self._condition(event):
            return None
        return event

    def apply_schema_change(self, event: SchemaChangeEvent) -> SchemaChangeEvent | None:
        return None if self.config.drop_schema_changes else event


# --- route ---------------------------------------------------------------------------------


class RouteConfig(PluginConfig):
    regex: str = Field(description="matched against the whole destination topic")
    replacement: str = Field(description="the new topic; $1, $2... name the regex's groups")

    @field_validator("regex")
    @classmethod
    def _regex_compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from exc
        return value


class RouteTransform(Transform[RouteConfig]):
    """``route``: rename the destination topic by regex, like Kafka Connect's RegexRouter."""

    type_name = "route"
    config_model = RouteConfig

    def __init__(self, config: RouteConfig, context: PluginContext) -> None:
        super().__init__(config, context)
        self._pattern = re.compile(config.regex)
        # Kafka Connect writes groups as $1; Python's re wants \1.
        self._template = re.sub(r"\$(\d+)", r"\\g<\1>", config.replacement)
        # A pipeline has few distinct topics; expanding a template per record is costly.
        self._routes: dict[str, str] = {}

    def _route(self, topic: str) -> str:
        routed = self._routes.get(topic)
        if routed is None:
            match = self._pattern.fullmatch(topic)
            routed = match.expand(self._template) if match else topic
            if len(self._routes) < 100_000:
                self._routes[topic] = routed
        return routed

    def apply(self, event: ChangeEvent) -> ChangeEvent | None:
        return event.with_changes(topic=self._route(event.destination()))

    def apply_to_event_batch(self, batch: EventBatch) -> EventBatch:
        # A route depends on the destination only: once per table, not per event.
        return batch.with_topics([self._route(table.destination()) for table in batch.tables])

    def apply_schema_change(self, event: SchemaChangeEvent) -> SchemaChangeEvent | None:
        return event.with_changes(topic=self._route(event.destination()))


# --- mask ----------------------------------------------------------------------------------


class MaskConfig(PluginConfig):
    columns: list[str] = Field(min_length=1, description="column names, or table.column")
    mode: Literal["drop", "hash"] = "hash"
    salt: str = Field(default="", description="mixed into hashes so they cannot be looked up in a table")


class MaskTransform(Transform[MaskConfig]):
    """``mask``: drop or hash (SHA-256, hex) columns in ``before`` and ``after``.

    Key columns are refused when the config names them for ``drop``: a change without its key
    cannot be applied downstream.
    """

    type_name = "mask"
    config_model = MaskConfig

    def _targets(self, table: str) -> set[str]:
        return {
            c.split(".", 1)[1] if "." in c else c
            for c in self.config.columns
            if "." not in c or c.split(".", 1)[0] == table
        }

    def transform_schema(self, schema: RowSchema, source: SourceInfo) -> RowSchema:
        targets = self._targets(source.table)
        if not targets:
            return schema

        def masked(columns: tuple[Column, ...]) -> tuple[Column, ...]:
            if self.config.mode == "drop":
                return tuple(c for c in columns if c.name not in targets)
            # A hash is hex text, whatever the column held.
            return tuple(Column(c.name, "text", c.optional) if c.name in targets else c for c in columns)

        return schema.with_columns(masked(schema.key_columns), masked(schema.value_columns))

    def apply(self, event: ChangeEvent) -> ChangeEvent | None:
        table = event.source.table
        targets = self._targets(table)
        if not targets:
            return event
        if self.config.mode == "drop" and targets & set(event.key):
            raise TransformError(f"mask cannot drop key column(s) {sorted(targets & set(event.key))} of {table}")
        return event.with_changes(before=self._mask(event.before, targets), after=self._mask(event.after, targets))

    def _mask(self, row: dict[str, Any] | None, targets: set[str]) -> dict[str, Any] | None:
        if row is None:
            return None
        masked = dict(row)
        for column in targets & set(row):
            if self.config.mode == "drop":
                del masked[column]
            elif masked[column] is not None:
                digest = hashlib.sha256(f"{self.config.salt}{masked[column]!r}".encode())
                masked[column] = digest.hexdigest()
        return masked


# --- unwrap --------------------------------------------------------------------------------


class UnwrapConfig(PluginConfig):
    delete_handling: Literal["tombstone", "drop", "rewrite"] = Field(
        default="tombstone",
        description="tombstone: a delete becomes a null value; drop: deletes vanish; "
        "rewrite: the before-image (or key) with __deleted = true",
    )
    add_fields: list[Literal["op", "table", "ts_us"]] = Field(default_factory=list, description="copied as __<name>")


class UnwrapTransform(Transform[UnwrapConfig]):
    """``unwrap``: emit just the row state after the change (Debezium's ExtractNewRecordState).

    Its schema is the row's, plus ``__deleted`` (boolean, ``rewrite`` only: true on deletes, false
    otherwise) and the ``__<name>`` columns of ``add_fields``.
    """

    type_name = "unwrap"
    config_model = UnwrapConfig

    _FIELD_TYPES: ClassVar[dict[str, str]] = {"op": "text", "table": "text", "ts_us": "bigint"}

    def transform_schema(self, schema: RowSchema, source: SourceInfo) -> RowSchema:
        added = [Column("__deleted", "boolean")] if self.config.delete_handling == "rewrite" else []
        added += [Column(f"__{name}", self._FIELD_TYPES[name]) for name in self.config.add_fields]
        known = {c.name for c in schema.value_columns}
        return schema.with_columns(value_columns=schema.value_columns + tuple(c for c in added if c.name not in known))

    def apply(self, event: ChangeEvent) -> ChangeEvent | None:
        if not event.envelope:
            return event
        row = event.after
        rewrite = self.config.delete_handling == "rewrite"
        if row is None:
            if self.config.delete_handling == "drop":
                return None
            if rewrite:
                row = {**(event.before or event.key), "__deleted": True}
        elif rewrite:
            row = {**row, "__deleted": False}  # every record says whether it is a delete (Debezium's rewrite)
        if row is not None and self.config.add_fields:
            extra = {"op": event.op.value, "table": event.source.table, "ts_us": event.source.ts_us}
            row = {**row, **{f"__{name}": extra[name] for name in self.config.add_fields}}
        return event.with_changes(after=row, envelope=False)
