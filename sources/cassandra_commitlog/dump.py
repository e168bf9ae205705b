"""``cdcflow commitlog dump``: every mutation of a segment as JSON lines, for debugging.

A segment is read with the ``_cdc.idx`` beside it when there is one: a ``COMPLETED`` one whose offset
the file does not reach makes the cut a fault of its own. A segment the source kept in its error
store (cut short) is dumped from there the same way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from cdcflow.jsontext import json_default, with_text_keys
from cdcflow.sources.cassandra_commitlog.cdc_index import CdcIndex, index_path, read_cdc_index
from cdcflow.sources.cassandra_commitlog.changes import row_changes
from cdcflow.sources.cassandra_commitlog.cluster import connect
from cdcflow.sources.cassandra_commitlog.exceptions import CommitLogError
from cdcflow.sources.cassandra_commitlog.mutation import MutationDecoder
from cdcflow.sources.cassandra_commitlog.schema import SchemaCatalog, load_schema_catalog
from cdcflow.sources.cassandra_commitlog.segment import Entry, SegmentRead, read_entries

__all__ = ["DumpSummary", "dump_segment", "schema_catalog_from"]


@dataclass(slots=True)
class DumpSummary:
    mutations: int = 0
    changes: int = 0
    faults: int = 0
    skipped: int = 0  # mutations of tables left out (system tables unless asked for)


def schema_catalog_from(where: str) -> SchemaCatalog:
    """A catalog from a JSON file saved earlier, or read from a node at ``host[:port]``."""
    path = Path(where)
    if path.is_file():
        return SchemaCatalog.load(path)
    host, _, port = where.partition(":")
    cluster, session = connect([host], int(port or 9042))
    try:
        return load_schema_catalog(session)
    finally:
        cluster.shutdown()


def _line(out: TextIO, document: dict[str, Any]) -> None:
    out.write(
        json.dumps(with_text_keys(document), default=json_default, separators=(",", ":"), ensure_ascii=False) + "\n"
    )


def dump_segment(path: Path, catalog: SchemaCatalog, out: TextIO, *, system_tables: bool = False) -> DumpSummary:
    """Write one JSON line per mutation (or fault) of the segment at ``path``, read with its
    ``_cdc.idx`` when there is one; returns the counts."""
    index = read_cdc_index(index_path(path))
    return dump_segment_bytes(path.read_bytes(), path, index, catalog, out, system_tables=system_tables)


def dump_segment_bytes(
    data: bytes,
    path: Path | str,
    index: CdcIndex | None,
    catalog: SchemaCatalog,
    out: TextIO,
    *,
    system_tables: bool = False,
) -> DumpSummary:
    """:func:`dump_segment` of a segment's bytes and index (``path`` names it in messages)."""
    state = SegmentRead()
    summary = DumpSummary()
    decoder: MutationDecoder | None = None
    synced_to = index.offset if index is not None and index.completed else None
    for item in read_entries(data, path, synced_to=synced_to, state=state):
        if not isinstance(item, Entry):
            summary.faults += 1
            _line(out, {"position": item.end, "error": str(item.error), "raw_bytes": len(item.raw)})
            continue
        assert state.header is not None
        decoder = decoder or MutationDecoder(
            catalog, state.header.version, lambda t: system_tables or not t.keyspace.startswith("system")
        )
        try:
            mutation = decoder.decode(item.mutation, path, item.end)
        except CommitLogError as exc:
            summary.faults += 1
            _line(out, {"position": item.end, "error": str(exc), "raw_bytes": len(item.mutation)})
            continue
        if not mutation.updates:
            summary.skipped += 1
            continue
        summary.mutations += 1
        changes = [change.to_json() for update in mutation.updates for change in row_changes(update)]
        summary.changes += len(changes)
        _line(out, {"position": item.end, "changes": changes})
    if state.section_error is not None:
        summary.faults += 1
        _line(out, {"position": state.read_to, "error": str(state.section_error)})
    if state.cut_at is not None and index is not None:
        summary.faults += 1
        error = (
            f"{path}: the file ends at {len(data)} bytes, before position {index.offset} its COMPLETED _cdc.idx says "
            "was synced: the segment was cut short"
        )
        _line(out, {"position": state.cut_at, "error": error, "file_bytes": len(data), "cdc_index": index.offset})
    return summary
