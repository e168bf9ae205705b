"""Runs the built oracle over one table's log and returns the rows it delivered."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

__all__ = ["OracleRunError", "read_log"]


class OracleRunError(Exception):
    """The oracle exited with an error or printed something that is not a JSON line."""


def read_log(
    binary: Path,
    *,
    host: str,
    metadata_keyspace: str,
    keyspace: str,
    table: str,
    start_ms: int,
    end_ms: int,
    timeout_s: float = 120.0,
) -> list[dict[str, Any]]:
    """Every log row scylla-cdc delivers for ``keyspace.table`` from ``start_ms`` to ``end_ms``
    (epoch ms), in the order it printed them, finding the metadata tables in ``metadata_keyspace``."""
    command = [
        str(binary),
        *("--host", host, "--metadata-keyspace", metadata_keyspace, "--keyspace", keyspace, "--table", table),
        *("--start-ms", str(start_ms), "--end-ms", str(end_ms)),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
    if result.returncode != 0:
        raise OracleRunError(f"{' '.join(command)} exited {result.returncode}: {result.stderr.strip()}")
    rows = []
    for number, line in enumerate(result.stdout.splitlines(), 1):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise OracleRunError(f"line {number} of the oracle's output is not JSON: {line!r}") from exc
    return rows
