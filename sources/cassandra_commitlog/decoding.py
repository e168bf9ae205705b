"""How the node's log is decoded: the schema it is decoded with, which tables are emitted, and the one
place that chooses between the reference reader and the compiled core's.

The reference is pure Python (:mod:`.segment` frames entries, :mod:`.mutation` decodes them,
:mod:`.changes` makes row changes). The compiled core (:mod:`.compiled`, ``cdcflow._native``) is
the one compiled path: when it is built, :meth:`CommitLogDecoding.entries` frames every segment with
it, and asks it to decode (delta row changes, or whole sections into compact batches) where the
caller wants decoded entries; each mutation it declines is decoded by the reference
(:meth:`CommitLogDecoding.changes`), as is everything of ``row_image: full``. docs/fast-paths.md
lists what it declines and why.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from cdcflow.errors import SourceUnavailableError
from cdcflow.native import native_module
from cdcflow.sources.cassandra_commitlog.changes import row_changes
from cdcflow.sources.cassandra_commitlog.compiled import (
    CompactInto,
    CompiledDecoder,
    CompiledFramer,
    UpdateChanges,
)
from cdcflow.sources.cassandra_commitlog.exceptions import CommitLogError, UnknownTableError
from cdcflow.sources.cassandra_commitlog.mutation import Mutation, MutationDecoder, PartitionUpdate
from cdcflow.sources.cassandra_commitlog.reporting import CommitLogReport
from cdcflow.sources.cassandra_commitlog.schema import SchemaCatalog, TableSchema, load_schema_catalog
from cdcflow.sources.cassandra_commitlog.segment import SegmentRead, read_entries, read_framed

__all__ = ["SCHEMA_TABLES", "CommitLogDecoding", "FramedEntry", "MutationChanges"]

SCHEMA_TABLES = frozenset({"tables", "columns", "dropped_columns"})
"""The system_schema tables whose mutations (in the commit log like any other) change a table's schema."""


class FramedEntry(Protocol):
    """An entry as either reader frames it (``segment.Entry`` or the compiled core's ``FramedEntry``)."""

    @property
    def end(self) -> int: ...

    @property
    def mutation(self) -> bytes | None: ...


@dataclass(slots=True)
class MutationChanges:
    """delta: what one mutation changes, decoded (row changes per partition update) and the
    ``system_schema`` updates that become schema-change events."""

    updates: list[UpdateChanges]
    schema_updates: list[PartitionUpdate]


class CommitLogDecoding:
    """The schema catalog (re-read every ``schema_refresh_s`` and when a mutation names a table it
    does not know), the tables emitted, and the decoders made from them."""

    def __init__(
        self, tables: list[str] | None, schema_refresh_s: float, report: CommitLogReport, logger: logging.Logger
    ) -> None:
        self.catalog = SchemaCatalog()
        self.wanted_tables = {name.lower() for name in tables} if tables else None
        self.native: Any = native_module()  # None: the reference reads everything
        self._refresh_s = schema_refresh_s
        self._report = report
        self._logger = logger
        self._session: Any = None
        self._read_at = 0.0
        self._cdc_off_warned: set[str] = set()
        self._reference: dict[int, MutationDecoder] = {}
        self._compiled: CompiledDecoder | None = None
        self.dropped_tables: set[str] = set()  # ids absent from the schema after a refresh

    # --- schema ------------------------------------------------------------------------------

    def load(self, session: Any) -> None:
        """The schema, read through ``session`` now and again at each refresh."""
        self._session = session
        self.refresh()

    def refresh(self) -> None:
        try:
            self.catalog = load_schema_catalog(self._session)
        except Exception as exc:
            raise SourceUnavailableError(f"cannot read system_schema: {exc}") from exc
        refreshed = self._read_at > 0  # at open, the start's own check refuses such tables
        self._read_at = time.monotonic()
        self._reference.clear()
        self._compiled = None
        if refreshed:
            self._warn_of_tables_without_cdc()

    def _refresh_if_due(self) -> None:
        if time.monotonic() - self._read_at > self._refresh_s:
            self.refresh()

    def _warn_of_tables_without_cdc(self) -> None:
        """A table of ``tables`` with ``cdc = false`` (turned off while the pipeline ran: the start
        refuses it) writes nothing to cdc_raw: say so once, rather than deliver nothing silently."""
        for name in sorted(self.wanted_tables or ()):
            keyspace, _, table_name = name.partition(".")
            table = self.catalog.by_name(keyspace, table_name)
            if table is not None and not table.cdc and name not in self._cdc_off_warned:
                self._cdc_off_warned.add(name)
                self._logger.warning(
                    "%s has cdc = false: its changes no longer reach cdc_raw and are not delivered; "
                    "ALTER TABLE %s WITH cdc = true",
                    name,
                    name,
                )

    def emits(self, table: TableSchema) -> bool:
        """Whether ``table``'s updates are decoded: the tables emitted, and the schema's own."""
        if table.keyspace == "system_schema" and table.table in SCHEMA_TABLES:
            return True  # read for schema changes (see .events)
        if not table.cdc:
            return False
        if any(c.type_text == "counter" for c in table.columns.values()):
            self._report.counted("skipped_counter_table_update")
            return False  # counter updates are deltas of a shard's value, not a row state
        if self.wanted_tables is not None:
            return f"{table.keyspace}.{table.table}".lower() in self.wanted_tables
        return True

    def is_wanted(self, keyspace: str, table: str) -> bool:
        """Whether ``tables`` (when set) names the table."""
        return self.wanted_tables is None or f"{keyspace}.{table}".lower() in self.wanted_tables

    # --- the choice --------------------------------------------------------------------------

    def entries(
        self,
        data: bytes,
        path: Path,
        state: SegmentRead,
        *,
        after: int,
        durable_to: int | None = None,
        synced_to: int | None = None,
        decode: bool = False,
        with_mutations: bool = True,
        compact: CompactInto | None = None,
    ) -> tuple[Iterator[Any], CompiledFramer | None]:
        """A segment's entries and faults, framed by the compiled core when it is built (then also
        decoded to row changes with ``decode``), else by the reference reader; with ``compact``,
        each section's entries decoded into its builder instead (a ``CompactSection`` each).
        ``synced_to``: see :func:`.cdc_raw.synced_to`."""
        bounds: dict[str, Any] = {"after": after, "durable_to": durable_to, "synced_to": synced_to, "state": state}
        if self.native is None:
            return read_entries(data, path, **bounds), None
        decoder = self._compiled_decoder if decode or compact is not None else None
        framer = CompiledFramer(self.native, after, decoder, with_mutations, compact)
        return read_framed(data, path, framer, **bounds), framer

    def decoded_with_current_schema(self, framer: CompiledFramer | None) -> bool:
        """Whether the compiled core decoded the section being read with the current schema (a
        schema refreshed since must show in events exactly as the reference has it)."""
        decoder = framer.decoder if framer is not None else None
        return decoder is not None and decoder.catalog is self.catalog

    def _compiled_decoder(self) -> CompiledDecoder:
        self._refresh_if_due()
        if self._compiled is None:
            self._compiled = CompiledDecoder(self.catalog, self.emits, self.native, self.dropped_tables)
        return self._compiled

    # --- the reference -----------------------------------------------------------------------

    def reference(self, version: int) -> MutationDecoder:
        """The reference decoder for segments of commit-log ``version``."""
        self._refresh_if_due()
        decoder = self._reference.get(version)
        if decoder is None:
            decoder = self._reference[version] = MutationDecoder(self.catalog, version, self.emits)
        return decoder

    def mutation(self, version: int, entry: FramedEntry, path: Path, segment_id: int) -> Mutation | None:
        """The entry's mutation, decoded by the reference; None when it went to the error store
        (or names a table dropped since)."""
        assert entry.mutation is not None
        try:
            return self.reference(version).decode(entry.mutation, path, entry.end)
        except UnknownTableError as exc:
            if exc.table_id not in self.dropped_tables:
                self.refresh()  # a table created since the schema was read?
                if self.catalog.table(exc.table_id) is not None:
                    return self.mutation(version, entry, path, segment_id)
                # Not in the current schema either: the table was dropped since this was written.
                self.dropped_tables.add(exc.table_id)
                # cdc_raw holds every table dropped since its segments were written: one line, the rest at DEBUG.
                first = len(self.dropped_tables) == 1
                (self._logger.info if first else self._logger.debug)(
                    "skipping mutations of table id %s: not in the schema (dropped)%s",
                    exc.table_id,
                    "; further dropped tables are logged at DEBUG" if first else "",
                )
            self._report.counted("skipped_dropped_table_mutation")
        except CommitLogError as exc:
            self._report.store_error(segment_id, entry.end, str(exc), entry.mutation)
        return None

    def changes(
        self, version: int, entry: FramedEntry, path: Path, segment_id: int, framer: CompiledFramer | None
    ) -> MutationChanges | None:
        """delta: the entry's row changes, from the compiled core when it decoded the entry with
        the current schema, else from the reference (a mutation it declined, a schema refreshed since)."""
        native: list[UpdateChanges] | None = getattr(entry, "changes", None)
        if native is not None and self.decoded_with_current_schema(framer):
            return MutationChanges(native, [])
        mutation = self.mutation(version, entry, path, segment_id)
        if mutation is None:
            return None
        changes = MutationChanges([], [])
        try:
            for update in mutation.updates:
                if update.table.keyspace == "system_schema":
                    changes.schema_updates.append(update)
                else:
                    changes.updates.append((update.table, update.key, list(row_changes(update))))
        except CommitLogError as exc:  # a value that does not fit its type: the whole mutation is kept aside
            assert entry.mutation is not None
            self._report.store_error(segment_id, entry.end, str(exc), entry.mutation)
            return None
        return changes
