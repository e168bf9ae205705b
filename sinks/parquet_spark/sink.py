"""The ``parquet`` sink: a change log in Parquet, written by Spark, exactly once per micro-batch.

Layout: ``<path>/table=<destination>/event_date=<YYYY-MM-DD>/part-b<batch>-<n>.parquet`` (the
partition columns are configurable). Each row is one change: the envelope columns (``op``,
``ts_ms``, ``source_ts_us``, ``source_partition``, ``source_position``, ``snapshot``) and the
table's columns with their types: the row after the change, or before it for a delete (``op = d``).
User types and tuples are structs, collections arrays and maps. A ``decimal`` or ``varint`` column
is a Parquet ``decimal(38, s)`` where the data fixes the scale (``s`` = the largest scale its values
have, every value fits 38 digits), else its exact text (:meth:`ParquetSink._number_types`).

Exactly once per batch, with any Hadoop filesystem and any Parquet reader:

1. a re-run of batch ``b`` (Spark re-runs a batch whose commit a crash prevented) first deletes
   what an earlier attempt of ``b`` left: its staging folder and the files its manifest lists;
2. Spark writes the batch into ``_cdcflow/staging/<b>`` with its own commit protocol (files
   appear only if the write job commits);
3. the manifest ``_cdcflow/manifests/<b>.json`` records the final names, then each staged file
   is renamed into its partition. Readers skip ``_``-prefixed folders, so staging is invisible.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from cdcflow.capabilities import SparkBatchWriter
from cdcflow.config import ResolvedLocation
from cdcflow.contract import PluginConfig, PluginContext, Rejected, Sink
from cdcflow.errors import EngineUnsupportedError
from cdcflow.events import Column, Record, RowSchema, UserType
from cdcflow.schemas import UNTYPED_NULL, parse_cql_type, spark_ddl_type
from cdcflow.sinks.spark_columns import (
    ENVELOPE_COLUMNS,
    TableSchemaConflictError,
    decimal_type,
    keep_or_widen,
    native_values,
)
from cdcflow.sinks.spark_columns import merge_table_columns as merge_columns
from cdcflow.spark_rows import ColumnSelection, StreamBatch, typed_change_rows

__all__ = ["ENVELOPE_COLUMNS", "ParquetSchemaConflictError", "ParquetSink", "ParquetSinkConfig", "merge_table_columns"]

log = logging.getLogger("cdcflow.sinks.parquet")

_KEEP_MANIFESTS = 200  # a re-run only ever concerns the last batch; older manifests are history
_DAY_US = 86_400_000_000
_PARALLEL_TABLE_WRITES = 4


class ParquetSchemaConflictError(TableSchemaConflictError):
    """Rows of one destination hold one column with two types no Parquet column can hold both of."""


def merge_table_columns(
    destination: str, schemas: Sequence[RowSchema], learned: Mapping[tuple[str, str], str] | None = None
) -> list[Column]:
    """The columns of one Parquet table: :func:`cdcflow.sinks.spark_columns.merge_table_columns`,
    a conflict raising :class:`ParquetSchemaConflictError`."""
    return merge_columns(destination, schemas, learned, conflict=ParquetSchemaConflictError, store="Parquet")


class ParquetSinkConfig(PluginConfig):
    path: ResolvedLocation = Field(description="output folder or Hadoop URI (hdfs://, s3a://, file://...)")
    partition_by: list[Literal["table", "event_date"]] = Field(
        default=["table", "event_date"],
        description="partition columns: the destination table and the UTC date of the change",
    )
    compression: Literal["snappy", "zstd", "gzip", "lz4", "none"] = "snappy"
    mark_complete: bool = Field(
        default=True, description="write _SUCCESS into an event_date partition once the watermark passes its end"
    )
    rows_per_file: int = Field(
        default=100_000,
        ge=1,
        description="a batch writes at most about this many rows per file (fewer, larger files), and at least a file"
        " per core Spark runs its tasks on, so that every core writes",
    )
    compact_min_files: int | None = Field(
        default=None, ge=2, description="rewrite a partition's small files into one once it has this many"
    )


class ParquetSink(Sink[ParquetSinkConfig], SparkBatchWriter):
    """``parquet``: Spark's Parquet writer; the spark engine only."""

    type_name = "parquet"
    config_model = ParquetSinkConfig
    engines = frozenset({"spark"})

    def __init__(self, config: ParquetSinkConfig, context: PluginContext) -> None:
        super().__init__(config, context)
        self._pending_dates: set[tuple[str, str]] = set()  # (table folder, date) not yet marked complete
        # (destination, column) -> the type an earlier batch wrote, for a column a batch has only nulls of
        self._learned_types: dict[tuple[str, str], str] = {}
        # (destination, column) -> the Spark type a decimal or varint column is written as
        self._number_columns: dict[tuple[str, str], str] = {}
        self._read_existing: set[str] = set()  # destinations whose files were asked for their types
        # The last grouped batch's (destination, row schema) -> rows and its tables: a batch like it
        # is written in one job (see _write_as_last_batch).
        self._last_groups: dict[tuple[str, str], int] = {}
        self._last_tables: list[_DestinationTable] | None = None
        # The output columns of the typed one-job path, for (destination, column names)
        self._typed_output: tuple[tuple[str, tuple[str, ...]], ColumnSelection] | None = None
        self._manifests_pruned = False  # by listing, once a run; then one delete a batch
        self._files: _HadoopFiles | None = None  # of the Spark context the last batch ran in
        self._cores = 1  # the tasks the Spark context runs at once (its default parallelism)
        self._last_batch_id: int | None = None  # the last batch this query wrote

    def open(self) -> None:
        super().open()
        self._last_batch_id = None  # a query (re)starts: its first batch may be a re-run
        self._manifests_pruned = False

    # --- the record-at-a-time contract does not apply: Spark writes whole batches ------------------

    def write(self, records: Sequence[Record]) -> list[Rejected]:
        raise EngineUnsupportedError("the parquet sink writes Spark micro-batches; run it with engine: {type: spark}")

    def flush(self) -> list[Rejected]:
        return []

    # --- Spark --------------------------------------------------------------------------------

    def write_batch(self, batch: StreamBatch, batch_id: int, watermark_us: int | None) -> None:
        from pyspark.sql import functions as F  # noqa: N812 - Spark's own idiom

        # Standard Parquet timestamps (INT64, microseconds, UTC), not Spark's legacy INT96 default:
        # every reader maps them to a UTC timestamp, to the millisecond Cassandra wrote.
        batch.session.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        context = batch.session.sparkContext
        if self._files is None or self._files.context is not context:
            # foreachBatch wraps each batch's session anew; the context, and its filesystem, stay.
            self._files = _HadoopFiles(context, self.config.path)
            self._cores = max(1, int(context.defaultParallelism))
        files = self._files
        staging = f"_cdcflow/staging/{batch_id}"
        manifest = f"_cdcflow/manifests/{batch_id}.json"
        if self._last_batch_id is None or batch_id <= self._last_batch_id:
            # Only a query's first batch can be a re-run (Spark re-runs the batch a crash left
            # uncommitted when the query starts again) or meet an interrupted compaction; later
            # batches of a query have new ids and a clean slate.
            self._undo_earlier_attempt(files, staging, manifest)
            self._finish_compactions(files)
        self._last_batch_id = batch_id

        started = time.monotonic()
        tables = self._write_as_last_batch(batch, files, staging)
        if tables is None:
            changes = batch.rows().filter(F.col("kind") == "change").persist()
            try:
                counts = changes.groupBy("destination", "row_schema").count().collect()
                log.debug("batch %d: read and grouped in %.1fs", batch_id, time.monotonic() - started)
                tables = self._tables_of(counts)
                self._last_groups = {(g["destination"], g["row_schema"]): g["count"] for g in counts}
                self._last_tables = tables
                self._write_tables(changes, tables, files, staging)
            finally:
                changes.unpersist()

        log.debug("batch %d: written in %.1fs", batch_id, time.monotonic() - started)
        staged = sorted(f for f in files.list_files(staging) if f.endswith(".parquet"))
        moves = {f: _final_name(f, staging, batch_id, n) for n, f in enumerate(staged)}
        files.write_text(manifest, json.dumps(sorted(moves.values())))
        for source, target in moves.items():
            files.rename(source, target)
        files.delete(staging)
        if self._manifests_pruned:  # listing the folder each batch costs more than the batch's renames
            files.delete(f"_cdcflow/manifests/{batch_id - _KEEP_MANIFESTS}.json")
        else:
            files.prune("_cdcflow/manifests", keep=_KEEP_MANIFESTS)
            self._manifests_pruned = True
        log.debug("batch %d: files moved in place in %.2fs", batch_id, time.monotonic() - started)
        if self.config.mark_complete and "event_date" in self.config.partition_by:
            self._pending_dates |= {_date_folder(t) for t in moves.values()}
            self._mark_complete(files, watermark_us)
        if self.config.compact_min_files is not None:
            self._compact(batch.session, files, {_date_folder(t) for t in moves.values()}, batch_id)
        log.debug("batch %d: %d files in %d tables", batch_id, len(moves), len(tables))

    def _write_tables(
        self, changes: Any, tables: Sequence[_DestinationTable], files: _HadoopFiles, staging: str
    ) -> None:
        def write_table(table: _DestinationTable) -> None:
            rows = self._typed_rows(changes, table, files)
            self._write_table(rows, table, files, staging, min(len(tables), _PARALLEL_TABLE_WRITES))

        # One Spark job per destination (jobs that shared a folder would delete each other's
        # _temporary at commit), side by side: a small batch is not a queue of job start-ups.
        with ThreadPoolExecutor(max_workers=max(1, min(len(tables), _PARALLEL_TABLE_WRITES))) as pool:
            for done in [pool.submit(write_table, table) for table in tables]:
                done.result()

    def _write_table(
        self, typed: Any, table: _DestinationTable, files: _HadoopFiles, staging: str, side_by_side: int = 1
    ) -> None:
        # At most about rows_per_file rows a file, and a write task for each core the table gets
        # (its share of the cores when ``side_by_side`` tables are written at once): one task
        # reading every input partition in turn leaves the other cores idle (a 20,000-row Kafka
        # batch on local[2]: 0.6 s in one task). A small batch makes a file per core and date,
        # not one per input partition. (Coalescing never adds partitions: a batch read by fewer
        # tasks keeps them, and the plan need not be asked how many it has.)
        tasks = max(-(-table.rows // self.config.rows_per_file), self._cores // side_by_side)
        typed = typed.coalesce(tasks)
        # No _SUCCESS marker in the staging folder: nothing reads it, and it is one more file to list.
        writer = typed.write.mode("append").options(
            compression=self.config.compression, **{"mapreduce.fileoutputcommitter.marksuccessfuljobs": "false"}
        )
        partition_columns = [c for c in self.config.partition_by if c == "event_date"]
        if partition_columns:
            writer = writer.partitionBy(*partition_columns)
        writer.parquet(files.uri(f"{staging}/{_table_folder(table.destination, self.config)}"))

    def _write_as_last_batch(
        self, batch: StreamBatch, files: _HadoopFiles, staging: str
    ) -> list[_DestinationTable] | None:
        """Write the batch in one Spark job when the last batch had a single destination whose
        row schemas need no decision from the data (no decimals): most pipelines, batch after
        batch. The same job counts the rows of another destination or row schema, and the values
        that do not read exactly as their column's type; when there are any, what it staged is
        deleted and the batch is written the grouping way. None when it was not written."""
        from pyspark.sql import Observation
        from pyspark.sql import functions as F  # noqa: N812

        last = self._last_tables
        if last is None or len(last) != 1 or any(c.type in ("decimal", "varint") for c in last[0].schema.value_columns):
            return None
        (table,) = last
        known = sorted(schema for destination, schema in self._last_groups if destination == table.destination)
        columns = [c for c in table.schema.value_columns if c.type != UNTYPED_NULL]
        typed = typed_change_rows(
            batch, table.destination, known, [(c.name, c.type) for c in columns], ENVELOPE_COLUMNS
        )
        if typed is not None:
            # The images typed beside the Python code that built the rows, not parsed again here.
            key = (table.destination, tuple(c.name for c in columns))
            if self._typed_output is None or self._typed_output[0] != key:
                # Built once: each Spark column expression costs calls into the JVM.
                values = [F.col(f"_c{i}").alias(c.name) for i, c in enumerate(columns)]
                self._typed_output = (key, ColumnSelection(_output_columns(values, set(key[1]))))
            self._write_table(self._typed_output[1].of(typed.counted), table, files, staging)
            misfits = typed.misfits()
        else:
            expected = (F.col("destination") == table.destination) & F.col("row_schema").isin(known)
            unexpected = Observation()
            changes = (
                batch.rows()
                .filter(F.col("kind") == "change")
                .observe(unexpected, F.sum(F.when(expected, 0).otherwise(1)).alias("misfits"))
            )
            self._write_tables(changes, [table], files, staging)
            misfits = int(unexpected.get.get("misfits") or 0)
        if misfits:
            log.debug("a batch with %d rows of other destinations, row schemas or values: grouping it", misfits)
            files.delete(staging)
            self._last_tables = None
            return None
        return [table]

    def _undo_earlier_attempt(self, files: _HadoopFiles, staging: str, manifest: str) -> None:
        files.delete(staging)
        if files.exists(manifest):
            for target in json.loads(files.read_text(manifest)):
                files.delete(target)
            files.delete(manifest)

    def _finish_compactions(self, files: _HadoopFiles) -> None:
        """Complete or undo a compaction a crash interrupted (see :meth:`_compact`)."""
        for plan_file in files.list_files("_cdcflow/compacting", recursive=False):
            if not plan_file.endswith(".json"):
                continue
            plan = json.loads(files.read_text(plan_file))
            if files.exists(plan["target"]):
                for replaced in plan["replaces"]:
                    files.delete(replaced)
            files.delete(plan_file)
        files.delete("_cdcflow/compacting")

    def _tables_of(self, counts: Sequence[Any]) -> list[_DestinationTable]:
        """One table per destination, its columns merged from every row schema it got in the batch."""
        schemas: dict[str, list[RowSchema]] = {}
        rows: dict[str, int] = {}
        for group in counts:
            destination = group["destination"]
            rows[destination] = rows.get(destination, 0) + group["count"]
            # The engine gives every change row a schema (read off its values where the source has none).
            schemas.setdefault(destination, []).append(RowSchema.from_json(group["row_schema"]))
        tables = []
        for destination, listed in schemas.items():
            # Spark collects groups in any order; columns come out in one order batch after batch.
            listed.sort(key=lambda schema: (schema.namespace, schema.version, schema.fingerprint))
            columns = merge_table_columns(destination, listed, self._learned_types)
            self._learned_types.update({(destination, c.name): c.type for c in columns if c.type != UNTYPED_NULL})
            user_types: dict[str, UserType] = {}
            for schema in listed:
                user_types.update({t.name: t for t in schema.user_types if t.name not in user_types})
            merged = RowSchema(destination, (), tuple(columns), user_types=tuple(user_types.values()))
            tables.append(_DestinationTable(destination, merged, rows[destination]))
        return tables

    def _typed_rows(self, changes: Any, table: _DestinationTable, files: _HadoopFiles) -> Any:
        from pyspark.sql import functions as F  # noqa: N812

        rows = changes.filter(F.col("destination") == table.destination)
        schema = table.schema
        image = F.coalesce(F.col("after"), F.col("before"), F.col("key"))
        numbers = self._number_types(rows, image, table, files)
        # A column nothing types yet (only nulls so far) is left out of this batch's files.
        columns = [
            c
            for c in schema.value_columns
            if c.type != UNTYPED_NULL and (c.type not in ("decimal", "varint") or c.name in numbers)
        ]
        envelope = [F.col(c) for c in ENVELOPE_COLUMNS]
        names = {c.name for c in columns}
        if schema.value_columns:
            # Every image of the destination parses with the merged columns: a column a table
            # lacks, or a row leaves out, is null there.
            ddl = ", ".join(f"`{c.name}` {spark_ddl_type(c.type, schema)}" for c in columns)
            parsed = rows.select(*envelope, F.from_json(image, ddl).alias("_row"))
            table_columns = []
            for c in columns:
                value = F.col("_row").getField(c.name)
                if c.name in numbers:
                    typed = value if numbers[c.name] == "string" else value.cast(numbers[c.name])
                else:
                    typed = native_values(value, parse_cql_type(c.type), schema)
                table_columns.append(typed.alias(c.name))
        else:  # a source without schemas: the row stays JSON text
            parsed = rows.select(*envelope, image.alias("_row"))
            table_columns = [F.col("_row").alias("row")]
        return parsed.select(*_output_columns(table_columns, names))

    def _number_types(self, rows: Any, image: Any, table: _DestinationTable, files: _HadoopFiles) -> dict[str, str]:
        """The Spark type of each top-level ``decimal`` and ``varint`` column with a known type.

        A Parquet decimal has one scale: ``decimal(38, s)`` where ``s`` is the largest scale of
        the column's values (decimals are plain text in the row JSON; a varint's scale is 0) and
        every value has at most 38 digits at that scale, so each value is written exactly (a value
        of a smaller scale gains trailing zeros). Otherwise the column is its values' exact text.
        The first batch with values decides; a later batch keeps the decision while its values
        fit and turns the column to text when they do not (logged). A restart takes the type from
        the destination's newest file. A column with no value and no decision is left out.
        """
        from pyspark.sql import functions as F  # noqa: N812

        destination = table.destination
        wanted = [c.name for c in table.schema.value_columns if c.type in ("decimal", "varint")]
        if not wanted:
            return {}
        if destination not in self._read_existing:
            self._read_existing.add(destination)
            for name, kind in _existing_types(rows.sparkSession, files, destination, self.config).items():
                if name in wanted and (kind == "string" or kind.startswith("decimal")):
                    self._number_columns.setdefault((destination, name), kind)
        ddl = ", ".join(f"`{name}` string" for name in wanted)
        text = rows.select(F.from_json(image, ddl).alias("_n")).select(
            *(F.col("_n").getField(name).alias(name) for name in wanted)
        )
        measures = []
        for name in wanted:
            value = F.col(f"`{name}`")
            point = F.instr(value, ".")
            whole = F.regexp_replace(F.split(value, "[.]").getItem(0), "^-?0*", "")
            measures += [
                F.max(F.when(point > 0, F.length(value) - point).otherwise(F.lit(0))),  # its scale
                F.max(F.length(whole)),  # its digits before the point
                F.max(F.instr(F.lower(value), "e")),  # exponent notation: not plain text
            ]
        stats = text.agg(*measures).collect()[0]
        types: dict[str, str] = {}
        for index, name in enumerate(wanted):
            scale, digits, exponent = stats[3 * index], stats[3 * index + 1], stats[3 * index + 2]
            plain = not exponent
            earlier = self._number_columns.get((destination, name))
            chosen = earlier
            if scale is not None:  # the batch has values of this column
                needed = decimal_type(int(scale), int(digits or 0)) if plain else "string"
                chosen = needed if earlier is None else keep_or_widen(earlier, needed)
                if earlier is not None and chosen != earlier:
                    log.warning(
                        "destination %s: column %s was %s, its values now need %s; written as exact text from here",
                        destination,
                        name,
                        earlier,
                        needed,
                    )
            if chosen is not None:
                self._number_columns[(destination, name)] = chosen
                types[name] = chosen
        return types

    def _mark_complete(self, files: _HadoopFiles, watermark_us: int | None) -> None:
        if watermark_us is None:
            return
        done = {
            (table, day) for table, day in self._pending_dates if _date_end_us(day.split("=", 1)[1]) <= watermark_us
        }
        for table, day in sorted(done):
            files.write_text(f"{table}/{day}/_SUCCESS", "")
        self._pending_dates -= done

    def _compact(self, session: Any, files: _HadoopFiles, folders: set[tuple[str, str]], batch_id: int) -> None:
        """Rewrite a partition's files into one when it has many. The plan (target, files it
        replaces) is written before the merged file is renamed into place, so after a crash
        :meth:`_finish_compactions` either deletes the replaced files (the target exists) or drops
        the half-done merge (it does not): no row is lost or left twice once the next batch runs."""
        assert self.config.compact_min_files is not None
        for table, day in sorted(folders):
            folder = f"{table}/{day}"
            small = sorted(f for f in files.list_files(folder, recursive=False) if f.endswith(".parquet"))
            if len(small) < self.config.compact_min_files:
                continue
            staging = f"_cdcflow/compacting/{batch_id}"
            files.delete(staging)
            session.read.option("mergeSchema", "true").parquet(*[files.uri(f) for f in small]).coalesce(1).write.option(
                "compression", self.config.compression
            ).parquet(files.uri(staging))
            merged = [f for f in files.list_files(staging) if f.endswith(".parquet")]
            target = f"{folder}/part-c{batch_id:010d}-00000.parquet"
            files.write_text(f"_cdcflow/compacting/{batch_id}.json", json.dumps({"target": target, "replaces": small}))
            files.rename(merged[0], target)
            for f in small:
                files.delete(f)
            files.delete(staging)
            files.delete(f"_cdcflow/compacting/{batch_id}.json")


def _output_columns(table_columns: Sequence[Any], names: set[str]) -> list[Any]:
    """The columns rows are written with: the envelope's, the table's (``names``), the event date."""
    from pyspark.sql import functions as F  # noqa: N812

    # A table column named like an envelope column wins; the envelope's moves aside.
    envelope_out = [F.col(c).alias(f"cdc_{c}" if c in names else c) for c in ENVELOPE_COLUMNS]
    date = F.to_date(F.timestamp_micros(F.col("source_ts_us"))).alias("event_date")
    return [*envelope_out, *table_columns, date]


@dataclass(frozen=True)
class _DestinationTable:
    """What one write job of a batch writes: a destination's rows, with its merged columns (the
    value columns of ``schema``, with the user types they name)."""

    destination: str
    schema: RowSchema
    rows: int


def _existing_types(session: Any, files: _HadoopFiles, destination: str, config: ParquetSinkConfig) -> dict[str, str]:
    """Column types of the destination's newest file (Spark's simple type names), or nothing."""
    folder = _table_folder(destination, config)
    written = sorted(
        (f for f in files.list_files(folder) if f.endswith(".parquet") and "/_" not in f"/{f}"),
        key=lambda f: f.rsplit("/", 1)[-1],
    )
    if not written:
        return {}
    schema = session.read.parquet(files.uri(written[-1])).schema
    return {field.name: field.dataType.simpleString() for field in schema.fields}


def _table_folder(destination: str, config: ParquetSinkConfig) -> str:
    return f"table={destination}" if "table" in config.partition_by else "."


def _final_name(staged: str, staging: str, batch_id: int, n: int) -> str:
    relative = staged[len(staging) + 1 :]
    folder = relative.rsplit("/", 1)[0] if "/" in relative else ""
    name = f"part-b{batch_id:010d}-{n:05d}.parquet"
    return f"{folder}/{name}".lstrip("./") if folder not in ("", ".") else name


def _date_folder(path: str) -> tuple[str, str]:
    parts = path.split("/")
    day = next(p for p in parts if p.startswith("event_date="))
    return "/".join(parts[: parts.index(day)]) or ".", day


def _date_end_us(day: str) -> int:
    start = dt.datetime.fromisoformat(day).replace(tzinfo=dt.UTC)
    return int(start.timestamp() * 1_000_000) + _DAY_US


class _HadoopFiles:
    """File operations under the sink's root through Spark's Hadoop filesystem, so that every
    URI Spark can write (local, hdfs://, s3a://...) works the same. Paths are relative to the root."""

    def __init__(self, context: Any, root: str) -> None:
        self.context = context
        jvm = context._jvm
        self._jvm = jvm
        self._root = root.rstrip("/")
        # Looked up once: each dotted step of jvm.org.apache... is a call into the JVM.
        self._path_class = jvm.org.apache.hadoop.fs.Path
        self._root_path = self._path_class(self._root)
        self._folders_made: set[str] = set()  # the folders rename made (mkdirs) in this context
        self._fs = self._root_path.getFileSystem(context._jsc.hadoopConfiguration())
        self._prefix = str(self._fs.makeQualified(self._root_path).toString()).rstrip("/")

    def uri(self, relative: str) -> str:
        return f"{self._root}/{relative}"

    def _path(self, relative: str) -> Any:
        return self._path_class(self.uri(relative))

    def exists(self, relative: str) -> bool:
        return bool(self._fs.exists(self._path(relative)))

    def delete(self, relative: str) -> None:
        self._fs.delete(self._path(relative), True)
        self._folders_made = {f for f in self._folders_made if f != relative and not f.startswith(f"{relative}/")}

    def rename(self, source: str, target: str) -> None:
        target_path = self._path(target)
        folder = target.rsplit("/", 1)[0] if "/" in target else ""
        made_before = folder in self._folders_made  # a batch's files go to the folders of the last one
        if not made_before:
            self._fs.mkdirs(target_path.getParent())
            self._folders_made.add(folder)
        if self._fs.rename(self._path(source), target_path):
            return
        if made_before:  # the folder gone since (removed by hand): HDFS's rename wants the parent
            self._fs.mkdirs(target_path.getParent())
            if self._fs.rename(self._path(source), target_path):
                return
        raise OSError(f"cannot rename {self.uri(source)} to {self.uri(target)}")

    def list_files(self, relative: str, recursive: bool = True) -> list[str]:
        path = self._path(relative)
        if not self._fs.exists(path):
            return []
        found = []
        iterator = self._fs.listFiles(path, recursive)
        while iterator.hasNext():
            qualified = str(iterator.next().getPath().toString())
            found.append(qualified[len(self._prefix) + 1 :])
        return found

    def write_text(self, relative: str, text: str) -> None:
        """Write through a temporary name and rename, so a reader never sees half a file."""
        temporary = f"{relative}.tmp"
        stream = self._fs.create(self._path(temporary), True)
        try:
            stream.write(bytearray(text.encode()))
        finally:
            stream.close()
        self._fs.delete(self._path(relative), False)
        self.rename(temporary, relative)

    def read_text(self, relative: str) -> str:
        stream = self._fs.open(self._path(relative))
        try:
            return str(self._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()

    def prune(self, relative: str, keep: int) -> None:
        names = sorted(
            (f for f in self.list_files(relative, recursive=False) if f.endswith(".json")),
            key=lambda f: int(f.rsplit("/", 1)[1].split(".")[0]),
        )
        for name in names[:-keep] if len(names) > keep else []:
            self.delete(name)
