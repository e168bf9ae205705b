"""List cell keys as the base table holds them, read back from the real node's commit log.

ScyllaDB logs a list element under the key its coordinator gave the base table's cell: log and
base table come from one mutation (``cdc/log.cc`` builds the log row from the base mutation's
cells). The stand-in's base table lives on a Cassandra node, whose coordinator picks its own
timeuuid keys, and CQL never shows a list's keys. Cassandra's commit log does: with the base
table at Cassandra's ``cdc = true`` its segments appear in ``cdc_raw``, and the mutation's list
cells carry their keys as cell paths. :func:`read_list_keys` finds the write there (by table,
partition, timestamp) and returns each row's new list cells' keys, in the base table's order.

It waits for Cassandra to sync the segment (``commitlog_sync_period``, a second here).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cdcflow.sources.cassandra_commitlog.exceptions import UnknownTableError
from cdcflow.sources.cassandra_commitlog.mutation import MutationDecoder, PartitionUpdate
from cdcflow.sources.cassandra_commitlog.schema import load_schema_catalog
from cdcflow.sources.cassandra_commitlog.segment import Entry, SegmentRead, read_entries

__all__ = ["BaseListKeysMissingError", "read_list_keys"]

Key = tuple[Any, ...]


class BaseListKeysMissingError(AssertionError):
    """The base write's list cells did not appear in the commit log in time."""


def _updates(segment: Path, decoder_for: Any, keyspace: str, table: str) -> list[PartitionUpdate]:
    found: list[PartitionUpdate] = []
    state = SegmentRead()
    decoder: MutationDecoder | None = None
    try:
        data = segment.read_bytes()
    except FileNotFoundError:
        return found  # a consumer of cdc_raw removed it meanwhile
    for item in read_entries(data, segment, state=state):
        if not isinstance(item, Entry) or state.header is None:
            break  # the end of what is synced so far
        decoder = decoder or decoder_for(state.header.version)
        try:
            mutation = decoder.decode(item.mutation, segment, item.end)
        except UnknownTableError:
            continue
        found += [u for u in mutation.updates if (u.table.keyspace, u.table.table) == (keyspace, table)]
    return found


def read_list_keys(
    session: Any,
    cdc_raw: Path,
    keyspace: str,
    table: str,
    partition_key: Mapping[str, Any],
    expected: Mapping[tuple[Key | None, str, int], int],
    timeout_s: float = 30.0,
) -> dict[tuple[Key | None, str], list[uuid.UUID]]:
    """The keys the base table gave the list cells of one write in the partition
    ``partition_key``, per (clustering key or None for the static row, column), in timestamp then
    key order; ``expected`` says how many cells each (row, column, timestamp) has."""
    catalog = load_schema_catalog(session)

    def decoder_for(version: int) -> MutationDecoder:
        return MutationDecoder(catalog, version, lambda t: (t.keyspace, t.table) == (keyspace, table))

    deadline = time.monotonic() + timeout_s
    recent = time.time() - 120  # segments written to lately
    while True:
        found: dict[tuple[Key | None, str, int], list[uuid.UUID]] = {}
        for segment in sorted(cdc_raw.glob("CommitLog-*.log")):
            try:
                if segment.stat().st_mtime < recent:
                    continue
            except FileNotFoundError:
                continue
            for update in _updates(segment, decoder_for, keyspace, table):
                key = {
                    c.name: c.type.decode(raw)
                    for c, raw in zip(update.table.partition_key, update.key_parts, strict=True)
                }
                if key != dict(partition_key):
                    continue
                rows = ([update.static_row] if update.static_row is not None else []) + update.rows
                for row in rows:
                    clustering = None
                    if not row.static:
                        clustering = tuple(
                            c.type.decode(raw) for c, raw in zip(update.table.clustering, row.clustering, strict=False)
                        )
                    for cell in row.cells:
                        where = (clustering, cell.column.name, cell.timestamp)
                        if where in expected and cell.path and not cell.deleted:
                            found.setdefault(where, []).append(uuid.UUID(bytes=cell.path))
        if all(len(found.get(where, ())) >= count for where, count in expected.items()):
            keys: dict[tuple[Key | None, str], list[uuid.UUID]] = {}
            for row_key, column, ts in sorted(expected, key=lambda where: where[2]):
                keys.setdefault((row_key, column), []).extend(
                    found[(row_key, column, ts)][-expected[(row_key, column, ts)] :]
                )
            return keys
        if time.monotonic() > deadline:
            raise BaseListKeysMissingError(
                f"{keyspace}.{table}: the list cells of a write ({dict(expected)}) are not in "
                f"{cdc_raw} after {timeout_s} s; is the base table at cdc = true?"
            )
        time.sleep(0.3)
