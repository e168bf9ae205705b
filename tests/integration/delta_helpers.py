"""Reading what the delta sink wrote with delta-rs (``deltalake``), a reader that is not Spark."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder


def read_delta(table: Path) -> list[dict[str, Any]]:
    """Every row of the Delta table at ``table`` as delta-rs reads it (deletion vectors applied:
    through its query engine, which reads the tables the sink writes by default)."""
    found = DeltaTable(str(table))
    return pa.table(QueryBuilder().register("t", found).execute("SELECT * FROM t").read_all()).to_pylist()


def delta_version(table: Path) -> int:
    """The table's newest version, -1 while there is no table."""
    if not (table / "_delta_log").is_dir():
        return -1
    try:
        return int(DeltaTable(str(table)).version())
    except Exception:  # the first commit is being written
        return -1


def written_batches(table: Path) -> list[int]:
    """The micro-batch of each commit the sink made (its commit metadata), oldest first."""
    batches = []
    for commit in reversed(DeltaTable(str(table)).history()):
        metadata = commit.get("userMetadata")
        if metadata:
            batches.append(int(json.loads(metadata)["batch"]))
    return batches
