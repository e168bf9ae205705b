"""Reading what the parquet sink wrote, as a reader of an evolving table does."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds


def read_parquet(folder: Path) -> pa.Table:
    """Every file under ``folder`` (hive partitions ``table=``/``event_date=`` where present), with
    the union of their columns: a batch whose rows lack a column wrote files without it."""
    fragments = list(ds.dataset(folder, format="parquet", partitioning="hive").get_fragments())
    partitions = [
        (name, pa.string()) for name in ("table", "event_date") if any(f"/{name}=" in f.path for f in fragments)
    ]
    partition_schema = pa.schema(partitions)
    schema = pa.unify_schemas([*(f.physical_schema for f in fragments), partition_schema])
    partitioning = ds.partitioning(partition_schema, flavor="hive")
    return ds.dataset(folder, format="parquet", partitioning=partitioning, schema=schema).to_table()


def read_parquet_while_written(folder: Path) -> pa.Table | None:
    """:func:`read_parquet` of a folder a running pipeline writes into: None while it has no file
    or when a file moved between listing and reading (look again)."""
    try:
        if not _has_parquet_file(folder):
            return None
        return read_parquet(folder)
    except (OSError, pa.ArrowInvalid):
        return None


def _has_parquet_file(folder: Path) -> bool:
    """Whether a data file is under ``folder``, not descending into the sink's ``_cdcflow/`` staging
    (or any ``_``/``.`` folder, which readers skip too): Spark's committer deletes folders there
    while we walk, and ``os.walk`` passes over a folder that vanished where ``rglob`` raises."""
    for _, folders, files in os.walk(folder):
        folders[:] = [name for name in folders if not name.startswith(("_", "."))]
        if any(name.endswith(".parquet") for name in files):
            return True
    return False
