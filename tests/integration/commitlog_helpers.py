"""Reading back what the real Cassandra node wrote to cdc_raw, for the commit-log tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cdcflow.sources.cassandra_commitlog.changes import RowChange, row_changes
from cdcflow.sources.cassandra_commitlog.exceptions import UnknownTableError
from cdcflow.sources.cassandra_commitlog.mutation import MutationDecoder
from cdcflow.sources.cassandra_commitlog.schema import SchemaCatalog, load_schema_catalog
from cdcflow.sources.cassandra_commitlog.segment import Entry, SegmentRead, parse_segment_name, read_entries


def segments(cdc_raw: Path) -> list[Path]:
    named = [(parse_segment_name(p.name), p) for p in cdc_raw.glob("CommitLog-*.log")]
    return [p for name, p in sorted((n, p) for n, p in named if n is not None)]


def segment_changes(path: Path, catalog: SchemaCatalog, keyspace: str, cdc_only: bool = False) -> list[RowChange]:
    """Every change to ``keyspace``'s tables (with ``cdc = true`` only, if asked) in one segment."""
    changes: list[RowChange] = []
    state = SegmentRead()
    decoder: MutationDecoder | None = None
    for item in read_entries(path.read_bytes(), path, state=state):
        assert isinstance(item, Entry), item.error
        assert state.header is not None
        decoder = decoder or MutationDecoder(
            catalog, state.header.version, lambda t: t.keyspace == keyspace and (t.cdc or not cdc_only)
        )
        try:
            mutation = decoder.decode(item.mutation, path, item.end)
        except UnknownTableError:
            continue  # a table another test created and dropped since
        for update in mutation.updates:
            changes.extend(row_changes(update))
    assert state.section_error is None, state.section_error
    return changes


def keyspace_changes(cdc_raw: Path, session: Any, keyspace: str, cdc_only: bool = False) -> list[RowChange]:
    """Every change to ``keyspace``'s tables in every segment, in commit-log order."""
    catalog = load_schema_catalog(session)
    return [change for path in segments(cdc_raw) for change in segment_changes(path, catalog, keyspace, cdc_only)]


def wait_for_changes(
    cdc_raw: Path,
    session: Any,
    keyspace: str,
    done: Callable[[list[RowChange]], bool],
    timeout_s: float = 30.0,
    cdc_only: bool = False,
) -> list[RowChange]:
    """Poll cdc_raw until ``done`` holds for the keyspace's changes (Cassandra syncs about every second)."""
    deadline = time.monotonic() + timeout_s
    while True:
        changes = keyspace_changes(cdc_raw, session, keyspace, cdc_only)
        if done(changes) or time.monotonic() > deadline:
            return changes
        time.sleep(0.5)


def has_row(table: str, **key: Any) -> Callable[[list[RowChange]], bool]:
    return lambda changes: any(c.table == table and c.key == key for c in changes)
