"""The ``delta`` sink: Delta Lake tables written by Spark, exactly once per micro-batch.

One table per destination at ``<path>/<destination>``, created from the event schema on the first
batch. ``mode: changelog`` appends every change with the parquet sink's columns; ``mode: mirror``
keeps the table as it is now by key: each batch's changes to a partition are folded onto the rows
the table holds of it (:mod:`cdcflow.sinks.delta_spark.mirror`), then one ``MERGE`` inserts,
updates and deletes.

Exactly once: every write of batch ``b`` to a table is a Delta transaction with the transaction
identifier ``(app_id, b)`` (``txnAppId``/``txnVersion``; for ``MERGE`` the session settings
``spark.databricks.delta.write.txnAppId``/``txnVersion``): Delta commits a batch's write to a table
once, and skips it when Spark re-runs the batch after a crash. ``app_id`` is the pipeline's name
unless set. A query whose checkpoint did not write the table (its batch ids behind those the
table recorded) is refused, since Delta would skip its batches.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from cdcflow.capabilities import SparkBatchWriter
from cdcflow.config import ResolvedLocation
from cdcflow.contract import PluginConfig, PluginContext, Rejected, Sink
from cdcflow.errors import EngineUnsupportedError
from cdcflow.events import Column, Record, RowSchema, UserType
from cdcflow.schemas import UNTYPED_NULL, parse_cql_type, spark_ddl_type
from cdcflow.sinks.delta_spark.exceptions import DeltaAppIdReusedError, DeltaSchemaConflictError
from cdcflow.sinks.delta_spark.mirror import (
    ACTION,
    CHANGE,
    DELTA_SOURCES,
    STAMP_COLUMNS,
    STATE,
    STATIC_STAMP,
    MirrorLayout,
    fold_partition,
)
from cdcflow.sinks.spark_columns import (
    ENVELOPE_COLUMNS,
    decimal_type,
    keep_or_widen,
    merge_table_columns,
    native_values,
)
from cdcflow.spark_rows import StreamBatch

__all__ = ["DELTA_SESSION_CONF", "DeltaSink", "DeltaSinkConfig"]

log = logging.getLogger("cdcflow.sinks.delta")

DELTA_SESSION_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}
"""What a Spark session needs from its start to run Delta's SQL (MERGE, ALTER TABLE, OPTIMIZE)."""

_PARTITION_KEY_PROPERTY = "cdcflow.partitionKey"
_STATIC_PROPERTY = "cdcflow.staticColumns"
_TXN_APP, _TXN_VERSION = "spark.databricks.delta.write.txnAppId", "spark.databricks.delta.write.txnVersion"
_USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
# Types a Delta column widens through in place (Delta's type widening), as the parquet sink widens.
_WIDENING = (("tinyint", "smallint", "int", "bigint"), ("float", "double"))
_DELTA_MIN_RETENTION_HOURS = 168  # below it Delta asks for its retention check to be switched off


class DeltaSinkConfig(PluginConfig):
    path: ResolvedLocation = Field(description="folder or Hadoop URI holding one Delta table per destination")
    mode: Literal["mirror", "changelog"] = Field(
        default="mirror", description="mirror: the table as it is now, by key; changelog: every change appended"
    )
    app_id: str | None = Field(
        default=None, description="Delta transaction application id (txnAppId); default: the pipeline's name"
    )
    deletion_vectors: bool = Field(
        default=True,
        description="let deletes and updates mark rows in deletion vectors instead of rewriting files "
        "(readers need the deletionVectors table feature)",
    )
    optimize_every_batches: int | None = Field(
        default=None, ge=1, description="compact each table's small files (OPTIMIZE) every N micro-batches"
    )
    vacuum_retention_hours: float | None = Field(
        default=None, ge=0, description="after each OPTIMIZE, VACUUM files no version newer than this needs"
    )


@dataclass(frozen=True)
class _Destination:
    """One destination's table in one batch: its columns merged from every row schema it got, its key."""

    name: str
    schema: RowSchema  # merged value columns and user types
    key: tuple[str, ...]
    partition_keys: frozenset[tuple[str, ...]]  # the key column sets of changes to a whole partition
    static_columns: frozenset[str]  # what those changes wrote besides their key
    sources: tuple[str, ...]  # the tables (namespaces) whose rows it got
    whole_rows: bool  # every change carries the whole row (or deletes it by its whole key), with no cdc.* header
    systems: frozenset[str]  # the source systems of its changes


class DeltaSink(Sink[DeltaSinkConfig], SparkBatchWriter):
    """``delta``: Delta Lake through Spark (delta-spark from Maven Central); the spark engine only."""

    type_name = "delta"
    config_model = DeltaSinkConfig
    engines = frozenset({"spark"})

    def __init__(self, config: DeltaSinkConfig, context: PluginContext) -> None:
        super().__init__(config, context)
        self._app_id = config.app_id or context.pipeline
        self._checked: set[str] = set()  # tables whose recorded batches this query compared with its own
        self._number_columns: dict[tuple[str, str], str] = {}  # (destination, column) -> decimal type chosen

    def open(self) -> None:
        super().open()
        self._checked = set()

    def spark_session_conf(self) -> Mapping[str, str]:
        return DELTA_SESSION_CONF

    def write(self, records: Sequence[Record]) -> list[Rejected]:
        raise EngineUnsupportedError("the delta sink writes Spark micro-batches; run it with engine: {type: spark}")

    def flush(self) -> list[Rejected]:
        return []

    def table_path(self, destination: str) -> str:
        """Where ``destination``'s Delta table is."""
        return f"{self.config.path.rstrip('/')}/{destination}"

    # --- a micro-batch ------------------------------------------------------------------------

    def write_batch(self, batch: StreamBatch, batch_id: int, watermark_us: int | None) -> None:
        from pyspark.sql import functions as F  # noqa: N812 - Spark's own idiom

        session = batch.session
        # The read order of each source partition, before anything shuffles the rows.
        changes = batch.rows().filter(F.col("kind") == "change").withColumn("__ord", F.monotonically_increasing_id())
        changes = changes.persist()
        try:
            destinations = self._destinations(changes)
            for destination in destinations:
                path = self.table_path(destination.name)
                self._check_app_id(session, path, batch_id)
                rows = changes.filter(F.col("destination") == destination.name)
                if self.config.mode == "changelog":
                    self._append_changes(session, rows, destination, path, batch_id)
                else:
                    self._merge_mirror(session, rows, destination, path, batch_id)
                self._maintain(session, path, batch_id)
        finally:
            changes.unpersist()
        log.debug("batch %d: %d tables", batch_id, len(destinations))

    def _destinations(self, changes: Any) -> list[_Destination]:
        from pyspark.sql import functions as F  # noqa: N812

        key_names = F.array_sort(F.json_object_keys(F.col("key")))
        written = F.when(F.col("op") != "d", F.array_sort(F.json_object_keys(F.col("after"))))
        groups = (
            changes.groupBy("destination", "row_schema")
            .agg(
                F.collect_set(F.struct(key_names.alias("key"), written.alias("after"))).alias("shapes"),
                F.max(F.coalesce(F.size(F.col("headers")), F.lit(0))).alias("headers"),
                F.collect_set("system").alias("systems"),
            )
            .collect()
        )
        schemas: dict[str, list[RowSchema]] = {}
        shapes: dict[str, set[tuple[tuple[str, ...], tuple[str, ...]]]] = {}
        with_headers: set[str] = set()
        systems: dict[str, set[str]] = {}
        for group in groups:
            schemas.setdefault(group["destination"], []).append(RowSchema.from_json(group["row_schema"]))
            systems.setdefault(group["destination"], set()).update(group["systems"])
            if group["headers"] > 0:
                with_headers.add(group["destination"])
            shapes.setdefault(group["destination"], set()).update(
                (tuple(s["key"] or ()), tuple(s["after"] or ())) for s in group["shapes"]
            )
        destinations = []
        for name in sorted(schemas):
            listed = sorted(schemas[name], key=lambda s: (s.namespace, s.version, s.fingerprint))
            columns = merge_table_columns(name, listed, conflict=DeltaSchemaConflictError, store="Delta")
            key: list[str] = []
            for schema in listed:
                key += [c.name for c in schema.key_columns if c.name not in key]
            missing = [c for s in listed for c in s.key_columns if c.name not in {m.name for m in columns}]
            columns = [*columns, *{c.name: c for c in missing}.values()]
            user_types: dict[str, UserType] = {}
            for schema in listed:
                user_types.update({t.name: t for t in schema.user_types if t.name not in user_types})
            merged = RowSchema(name, (), tuple(columns), user_types=tuple(user_types.values()))
            partial = {(k, a) for k, a in shapes[name] if k and set(k) < set(key)}
            partition_keys = frozenset(tuple(c for c in key if c in k) for k, _ in partial)
            static = frozenset(c for k, a in partial for c in a if c not in k)
            sources = tuple(sorted({s.namespace for s in listed}))
            value_names = {c.name for c in columns if c.type != UNTYPED_NULL}
            whole_rows = name not in with_headers and all(
                set(k) == set(key) and (not a or value_names <= set(a)) for k, a in shapes[name]
            )
            destinations.append(
                _Destination(
                    name, merged, tuple(key), partition_keys, static, sources, whole_rows, frozenset(systems[name])
                )
            )
        return destinations

    # --- typed rows ---------------------------------------------------------------------------

    def _typed_values(self, rows: Any, image: Any, destination: _Destination, existing: Mapping[str, str]) -> Any:
        """The table's columns of ``rows`` typed from the JSON ``image`` as the parquet sink types
        them (user types as structs, collections as arrays and maps, decimals as decimal(38, s) or text)."""
        from pyspark.sql import functions as F  # noqa: N812

        schema = destination.schema
        numbers = self._number_types(rows, image, destination, existing)
        columns = [
            c
            for c in schema.value_columns
            if c.type != UNTYPED_NULL and (c.type not in ("decimal", "varint") or c.name in numbers)
        ]
        ddl = ", ".join(f"`{c.name}` {spark_ddl_type(c.type, schema)}" for c in columns)
        parsed = F.from_json(image, ddl)
        typed = []
        for c in columns:
            value = parsed.getField(c.name)
            if c.name in numbers:
                value = value if numbers[c.name] == "string" else value.cast(numbers[c.name])
            else:
                value = native_values(value, parse_cql_type(c.type), schema)
            typed.append(value.alias(c.name))
        return typed

    def _number_types(
        self, rows: Any, image: Any, destination: _Destination, existing: Mapping[str, str]
    ) -> dict[str, str]:
        """The Spark type of each ``decimal`` and ``varint`` column: the table's where it has the
        column (a batch whose values it cannot hold exactly is a :class:`DeltaSchemaConflictError`),
        else the parquet sink's choice from the values (``decimal(38, s)``, or exact text)."""
        from pyspark.sql import functions as F  # noqa: N812

        wanted = [c.name for c in destination.schema.value_columns if c.type in ("decimal", "varint")]
        if not wanted:
            return {}
        text = rows.select(F.from_json(image, ", ".join(f"`{n}` string" for n in wanted)).alias("_n"))
        measures = []
        for name in wanted:
            value = F.col("_n").getField(name)
            point = F.instr(value, ".")
            whole = F.regexp_replace(F.split(value, "[.]").getItem(0), "^-?0*", "")
            measures += [
                F.max(F.when(point > 0, F.length(value) - point).otherwise(F.lit(0))),
                F.max(F.length(whole)),
                F.max(F.instr(F.lower(value), "e")),
            ]
        stats = text.agg(*measures).collect()[0]
        types: dict[str, str] = {}
        for index, name in enumerate(wanted):
            scale, digits, exponent = stats[3 * index : 3 * index + 3]
            held = existing.get(name) or self._number_columns.get((destination.name, name))
            chosen = held
            if scale is not None:
                needed = "string" if exponent else decimal_type(int(scale), int(digits or 0))
                chosen = needed if held is None else keep_or_widen(held, needed)
                if held is not None and chosen != held:
                    raise DeltaSchemaConflictError(
                        f"table {self.table_path(destination.name)}: column {name!r} is {held}, and values of "
                        f"{_namespaces(destination)} need {needed}; a Delta column cannot change to that type in "
                        "place. Write these values to another destination (a route transform), or rewrite the table"
                    )
            if chosen is not None:
                self._number_columns[(destination.name, name)] = chosen
                types[name] = chosen
        return types

    # --- tables -------------------------------------------------------------------------------

    def _table_schema(self, session: Any, path: str) -> Any | None:
        """The Delta table's schema, or None when there is no table at ``path`` yet."""
        if not _is_delta_table(session, path):
            return None
        return session.read.format("delta").load(path).schema

    def _create_or_evolve(
        self, session: Any, path: str, wanted: Any, destination: _Destination, properties: Mapping[str, str]
    ) -> Any:
        """Create the table with ``wanted``'s columns, or add those it lacks and widen those it
        holds narrower (Delta's type widening); returns the table's schema afterwards."""
        current = self._table_schema(session, path)
        if current is None:
            table_properties = {"delta.enableDeletionVectors": str(self.config.deletion_vectors).lower(), **properties}
            ddl = _ddl(session, wanted)
            session.sql(
                f"CREATE TABLE IF NOT EXISTS delta.`{path}` ({ddl}) USING delta "
                f"TBLPROPERTIES ({_properties_sql(table_properties)})"
            )
            return self._table_schema(session, path)
        held = {f.name: f.dataType.simpleString() for f in current.fields}
        added = [f for f in wanted.fields if f.name not in held]
        for f in wanted.fields:
            have, need = held.get(f.name), f.dataType.simpleString()
            if have is None or have == need:
                continue
            ladder = next((lad for lad in _WIDENING if have in lad and need in lad), None)
            if ladder is None:
                raise DeltaSchemaConflictError(
                    f"table {path}: column {f.name!r} is {have}, and {_namespaces(destination)} write it as {need}; "
                    "one Delta column cannot hold both. Route these tables to destinations of their own (a route "
                    "transform), or rename the column in one of them"
                )
            if ladder.index(need) > ladder.index(have):
                session.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.enableTypeWidening' = 'true')")
                session.sql(f"ALTER TABLE delta.`{path}` ALTER COLUMN `{f.name}` TYPE {need}")
        if added:
            columns = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in added)
            session.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS ({columns})")
        if properties:
            session.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ({_properties_sql(properties)})")
        return self._table_schema(session, path)

    def _check_app_id(self, session: Any, path: str, batch_id: int) -> None:
        """Refuse a query whose batch ids are behind those this app id recorded in the table: its
        checkpoint did not write the table, and Delta would skip its batches as written."""
        if path in self._checked:
            return
        self._checked.add(path)
        if not _is_delta_table(session, path):
            return
        for entry in session.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 50").select("userMetadata").collect():
            try:
                recorded = json.loads(entry["userMetadata"] or "")
            except ValueError:
                continue
            if isinstance(recorded, dict) and recorded.get("cdcflow_app") == self._app_id:
                if batch_id < int(recorded["batch"]):
                    raise DeltaAppIdReusedError(
                        f"table {path} holds micro-batch {recorded['batch']} of app id {self._app_id!r}, and this "
                        f"query is at batch {batch_id}: its checkpoint is not the one that wrote the table, and "
                        "Delta would skip its batches as already written. Give this pipeline another app_id (or "
                        "path), or run it with the checkpoint that wrote the table"
                    )
                return

    def _transaction(self, session: Any, batch_id: int) -> dict[str, str]:
        return {
            _TXN_APP: self._app_id,
            _TXN_VERSION: str(batch_id),
            _USER_METADATA: json.dumps({"cdcflow_app": self._app_id, "batch": batch_id}),
        }

    def _maintain(self, session: Any, path: str, batch_id: int) -> None:
        every = self.config.optimize_every_batches
        if every is None or (batch_id + 1) % every:
            return
        session.sql(f"OPTIMIZE delta.`{path}`")
        hours = self.config.vacuum_retention_hours
        if hours is not None:
            if hours < _DELTA_MIN_RETENTION_HOURS:
                session.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
            session.sql(f"VACUUM delta.`{path}` RETAIN {hours:g} HOURS")

    # --- changelog ----------------------------------------------------------------------------

    def _append_changes(self, session: Any, rows: Any, destination: _Destination, path: str, batch_id: int) -> None:
        from pyspark.sql import functions as F  # noqa: N812

        existing = _number_columns_of(self._table_schema(session, path))
        image = F.coalesce(F.col("after"), F.col("before"), F.col("key"))
        values = self._typed_values(rows, image, destination, existing)
        names = {c.name for c in destination.schema.value_columns}
        # A table column named like an envelope column wins; the envelope's moves aside.
        envelope = [F.col(c).alias(f"cdc_{c}" if c in names else c) for c in ENVELOPE_COLUMNS]
        date = F.to_date(F.timestamp_micros(F.col("source_ts_us"))).alias("event_date")
        typed = rows.select(*envelope, *values, date)
        table = self._create_or_evolve(session, path, typed.schema, destination, {})
        typed = _aligned(typed, table)
        transaction = self._transaction(session, batch_id)
        (
            typed.write.format("delta")
            .mode("append")
            .option("txnAppId", transaction[_TXN_APP])
            .option("txnVersion", transaction[_TXN_VERSION])
            .option("userMetadata", transaction[_USER_METADATA])
            .save(path)
        )

    # --- mirror -------------------------------------------------------------------------------

    def _merge_mirror(self, session: Any, rows: Any, destination: _Destination, path: str, batch_id: int) -> None:
        from pyspark.sql import functions as F  # noqa: N812
        from pyspark.sql.types import LongType, StringType, StructField, StructType

        current = self._table_schema(session, path)
        layout_properties = _table_properties(session, path) if current is not None else {}
        layout = self._layout(destination, layout_properties)
        image = F.coalesce(F.col("after"), F.col("key"))
        values = self._typed_values(rows, image, destination, _number_columns_of(current))
        meta = [
            F.lit(CHANGE).alias("__kind"),
            F.lit(batch_id).cast("bigint").alias("__batch"),
            F.col("__ord"),
            F.col("op").alias("__op"),
            F.col("source_ts_us").alias("__ts"),
            F.col("source_partition").alias("__partition"),
            F.col("source_position").alias("__position"),
            F.col("system").alias("__system"),
            F.col("key").alias("__key"),
            F.col("after").alias("__after"),
            F.col("headers").alias("__headers"),
        ]
        typed_changes = rows.select(*values, *meta)
        stamps = [
            StructField(STAMP_COLUMNS[0], LongType()),
            StructField(STAMP_COLUMNS[1], StringType()),
            StructField(STAMP_COLUMNS[2], StringType()),
            StructField(STAMP_COLUMNS[3], LongType()),
        ]
        if layout.static:
            stamps.append(StructField(STATIC_STAMP, LongType()))
        value_fields = [f for f in typed_changes.schema.fields if not f.name.startswith("__")]
        wanted = StructType([*value_fields, *stamps])
        properties = {
            _PARTITION_KEY_PROPERTY: json.dumps(list(layout.partition_key)),
            _STATIC_PROPERTY: json.dumps(list(layout.static)),
        }
        if any(layout_properties.get(k) != v for k, v in properties.items()):
            table = self._create_or_evolve(session, path, wanted, destination, properties)
        else:
            table = self._create_or_evolve(session, path, wanted, destination, {})
        layout = MirrorLayout(
            columns=tuple(f.name for f in table.fields if f.name not in (*STAMP_COLUMNS, STATIC_STAMP)),
            key=layout.key,
            partition_key=layout.partition_key,
            static=layout.static,
            multi_cell=layout.multi_cell,
            destination=destination.name,
        )
        changes = _aligned(typed_changes, table, keep_prefix="__")
        if _last_change_decides(destination, layout):
            self._merge_last_changes(session, changes, table, layout, path, batch_id)
            return
        target = session.read.format("delta").load(path)
        partitions = changes.select(*layout.partition_key).distinct()
        state = target.join(F.broadcast(partitions), on=list(layout.partition_key), how="left_semi").select(
            *[F.col(f"`{f.name}`") for f in table.fields], F.lit(STATE).alias("__kind")
        )
        both = changes.unionByName(state, allowMissingColumns=True)
        output = StructType([*table.fields, StructField(ACTION, StringType())])
        fold = functools.partial(_fold_batches, layout, [f.name for f in table.fields], output)
        folded = (
            both.repartition(*[F.col(f"`{c}`") for c in layout.partition_key])
            .sortWithinPartitions(*[F.col(f"`{c}`") for c in layout.partition_key])
            .mapInArrow(fold, output)
            .localCheckpoint(eager=True)
        )
        self._merge(session, folded, table, layout, path, batch_id)

    def _merge_last_changes(
        self, session: Any, changes: Any, table: Any, layout: MirrorLayout, path: str, batch_id: int
    ) -> None:
        """The mirror of a batch whose changes all carry whole rows: each key's last change in
        source order decides (read order when they all come from one source partition, else the
        source timestamp), and the MERGE itself keeps a row whose stamp is later
        (:class:`~cdcflow.sinks.delta_spark.mirror` has the rule). No read of the table before the
        MERGE, no Python."""
        from pyspark.sql import functions as F  # noqa: N812

        values = [F.col(f"`{f.name}`") for f in table.fields if f.name not in STAMP_COLUMNS]
        stamps = [
            F.col("__ts").alias(STAMP_COLUMNS[0]),
            F.col("__partition").alias(STAMP_COLUMNS[1]),
            F.col("__position").alias(STAMP_COLUMNS[2]),
            F.lit(batch_id).cast("bigint").alias(STAMP_COLUMNS[3]),
        ]
        action = F.when(F.col("__op") == "d", "delete").otherwise("upsert").alias(ACTION)
        rows = changes.select(*values, *stamps, action, F.col("__ts"), F.col("__ord"))
        last_values = F.struct(*[F.col(f"`{n}`") for n in rows.columns if n not in ("__ts", "__ord")])
        last = (
            rows.groupBy(*[F.col(f"`{c}`") for c in layout.key])
            .agg(
                F.max_by(last_values, F.col("__ord")).alias("__by_read_order"),
                F.max_by(last_values, F.struct(F.col("__ts"), F.col("__ord"))).alias("__by_time"),
                F.count_distinct(F.col(f"`{STAMP_COLUMNS[1]}`")).alias("__partitions"),
            )
            .select(
                F.when(F.col("__partitions") > 1, F.col("__by_time"))
                .otherwise(F.col("__by_read_order"))
                .alias("__last")
            )
            .select("__last.*")
        )
        ts, partition, _, batch = (f"`{c}`" for c in STAMP_COLUMNS)
        same_partition = f"s.{partition} <=> t.{partition}"
        held_batch = f"coalesce(t.{batch}, -1)"
        later = (
            f"(({same_partition}) AND s.{batch} > {held_batch}) OR (NOT ({same_partition}) AND "
            f"(s.{ts} > t.{ts} OR (s.{ts} = t.{ts} AND s.{batch} > {held_batch})))"
        )
        not_earlier = (
            f"(({same_partition}) AND s.{batch} >= {held_batch}) OR (NOT ({same_partition}) AND s.{ts} >= t.{ts})"
        )
        self._merge(session, last, table, layout, path, batch_id, f"({not_earlier})", f"({later})")

    def _merge(
        self,
        session: Any,
        source: Any,
        table: Any,
        layout: MirrorLayout,
        path: str,
        batch_id: int,
        delete_when: str = "true",
        update_when: str = "true",
    ) -> None:
        """One MERGE of ``source`` (the table's columns and ``__action``) into the table under the
        batch's transaction identifier."""
        view = f"cdcflow_mirror_{abs(hash((path, batch_id)))}"
        source.createOrReplaceTempView(view)
        on = " AND ".join(f"t.`{c}` <=> s.`{c}`" for c in layout.key)
        names = [f.name for f in table.fields]
        update = ", ".join(f"t.`{n}` = s.`{n}`" for n in names)
        insert_columns = ", ".join(f"`{n}`" for n in names)
        insert_values = ", ".join(f"s.`{n}`" for n in names)
        statement = (
            f"MERGE INTO delta.`{path}` t USING {view} s ON {on} "
            f"WHEN MATCHED AND s.`{ACTION}` = 'delete' AND {delete_when} THEN DELETE "
            f"WHEN MATCHED AND s.`{ACTION}` = 'upsert' AND {update_when} THEN UPDATE SET {update} "
            f"WHEN NOT MATCHED AND s.`{ACTION}` = 'upsert' THEN INSERT ({insert_columns}) VALUES ({insert_values})"
        )
        transaction = self._transaction(session, batch_id)
        for name, value in transaction.items():
            session.conf.set(name, value)
        try:
            session.sql(statement)
        finally:
            for name in transaction:
                session.conf.unset(name)
            session.catalog.dropTempView(view)

    def _layout(self, destination: _Destination, properties: Mapping[str, str]) -> MirrorLayout:
        """The key, partition key, static and multi-cell columns of the destination's mirror: what
        the table recorded (its properties) joined with what this batch's changes show."""
        recorded_key = tuple(json.loads(properties.get(_PARTITION_KEY_PROPERTY, "[]")))
        partition_keys = set(destination.partition_keys) | ({recorded_key} if recorded_key else set())
        if len(partition_keys) > 1:
            # Changes name a partition by its partition key alone: the shortest set is it.
            partition_keys = {min(partition_keys, key=len)}
        partition_key = next(iter(partition_keys), destination.key)
        static = set(json.loads(properties.get(_STATIC_PROPERTY, "[]"))) | destination.static_columns
        columns = [c for c in destination.schema.value_columns if c.type != UNTYPED_NULL]
        multi_cell = {c.name: kind for c in columns if (kind := _multi_cell_kind(c, destination.schema)) is not None}
        ordered_static = tuple(c.name for c in columns if c.name in static)
        return MirrorLayout(
            columns=tuple(c.name for c in columns),
            key=destination.key,
            partition_key=tuple(partition_key),
            static=ordered_static,
            multi_cell=multi_cell,
            destination=destination.name,
        )


def _fold_batches(layout: MirrorLayout, names: list[str], output: Any, batches: Iterator[Any]) -> Iterator[Any]:
    """``mapInArrow`` body: rows sorted by partition key, a partition's table rows and changes
    together, folded partition by partition (a partition may span record batches)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(output)
    pending: list[dict[str, Any]] = []
    pending_key: tuple[Any, ...] | None = None
    out: list[dict[str, Any]] = []

    def flush() -> None:
        state = [r for r in pending if r["__kind"] == STATE]
        changes = [r for r in pending if r["__kind"] == CHANGE]
        if changes:
            out.extend(fold_partition(layout, state, changes))

    for batch in batches:
        for row in batch.to_pylist():
            key = tuple(_hashable(row.get(c)) for c in layout.partition_key)
            if key != pending_key and pending:
                flush()
                pending = []
            pending_key = key
            pending.append(row)
        if len(out) >= 4096:
            yield pa.RecordBatch.from_pylist([_complete(r, names) for r in out], schema=schema)
            out = []
    if pending:
        flush()
    if out:
        yield pa.RecordBatch.from_pylist([_complete(r, names) for r in out], schema=schema)


def _complete(row: dict[str, Any], names: list[str]) -> dict[str, Any]:
    return {**{n: row.get(n) for n in names}, ACTION: row[ACTION]}


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


def _last_change_decides(destination: _Destination, layout: MirrorLayout) -> bool:
    """Whether each key's last change alone gives its row: whole rows, no change to a whole
    partition or its static columns, no multi-cell column whose changes may be element deltas."""
    deltas = bool(layout.multi_cell) and bool(destination.systems & DELTA_SOURCES)
    return destination.whole_rows and layout.partition_key == layout.key and not layout.static and not deltas


def _multi_cell_kind(column: Column, schema: RowSchema) -> str | None:
    """``list``, ``set``, ``map`` or ``udt`` for a non-frozen collection or user type (whose
    changes can carry elements rather than the whole value), else None."""
    text = column.type.strip().lower()
    if text.startswith("frozen<"):
        return None
    name = parse_cql_type(column.type)[0]
    if name in ("list", "set", "map"):
        return name
    return "udt" if schema.user_type(name) is not None else None


def _aligned(rows: Any, table: Any, keep_prefix: str | None = None) -> Any:
    """``rows`` with the table's columns in its order and types (a column it lacks as null)."""
    from pyspark.sql import functions as F  # noqa: N812

    have = {f.name: f.dataType for f in rows.schema.fields}
    columns = []
    for f in table.fields:
        if f.name not in have:
            columns.append(F.lit(None).cast(f.dataType).alias(f.name))
        elif have[f.name] != f.dataType:
            columns.append(F.col(f"`{f.name}`").cast(f.dataType).alias(f.name))
        else:
            columns.append(F.col(f"`{f.name}`"))
    extra = [F.col(f"`{n}`") for n in have if keep_prefix and n.startswith(keep_prefix)]
    return rows.select(*columns, *extra)


def _namespaces(destination: _Destination) -> str:
    return ", ".join(destination.sources)


def _number_columns_of(schema: Any | None) -> dict[str, str]:
    if schema is None:
        return {}
    types = {f.name: f.dataType.simpleString() for f in schema.fields}
    return {n: t for n, t in types.items() if t == "string" or t.startswith("decimal")}


def _is_delta_table(session: Any, path: str) -> bool:
    jvm = session.sparkContext._jvm
    return bool(jvm.io.delta.tables.DeltaTable.isDeltaTable(session._jsparkSession, path))


def _table_properties(session: Any, path: str) -> dict[str, str]:
    return {r["key"]: r["value"] for r in session.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()}


def _properties_sql(properties: Mapping[str, str]) -> str:
    return ", ".join(f"'{k}' = '{v}'" for k, v in properties.items())


def _ddl(session: Any, schema: Any) -> str:
    jvm = session.sparkContext._jvm
    return str(jvm.org.apache.spark.sql.types.DataType.fromJson(schema.json()).toDDL())
