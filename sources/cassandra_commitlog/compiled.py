"""The commit log through the compiled core (``cdcflow._native``), when it is built.

Two things run in Rust: each sync section's entry framing and CRCs (:class:`CompiledFramer`), and
a mutation decoded straight to its row changes (:class:`CompiledDecoder`), or a whole section's
into a compact batch (:class:`CompactInto`: no Python object per entry or per value). The Python reader
(``segment``, ``mutation``, ``changes``) stays the reference: the compiled decoder *declines* any
mutation it does not decode exactly as the reference does (a value it cannot read, an unknown
table, a ``system_schema`` update), and the reference then decodes it, or raises the error cdcflow
stores. What the compiled core does not decode itself (``duration``, custom types, IPv6
addresses, maps whose keys it does not compare as bytes) is decoded by the reference's own
``CqlType``, so a change there needs no change in Rust; a type it does decode
(``native/src/commitlog/values.rs``: ``decimal`` to the same ``Decimal``, made from the same text;
collections, user types and tuples to the same lists and dicts) must follow a change of the
reference (``cqltypes``).
``test_compiled_commitlog.py`` and ``test_compact_commitlog.py`` (``tests/unit/sources/cassandra_commitlog/``)
hold the paths equal.

Whether this runs is decided in one place, :meth:`.decoding.CommitLogDecoding.entries` (the
compact batches in :meth:`.readers.CommitLogReader.compact_batches`, which goes through it); the
classes here take the compiled core (``cdcflow._native``) as an argument. docs/fast-paths.md
lists every hot path of cdcflow this way.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cdcflow.schemas import parse_cql_type
from cdcflow.sources.cassandra_commitlog.changes import RowChange
from cdcflow.sources.cassandra_commitlog.exceptions import CorruptEntryError
from cdcflow.sources.cassandra_commitlog.schema import SchemaCatalog, TableSchema, table_id_text
from cdcflow.sources.cassandra_commitlog.segment import EntryFault, Section, SegmentRead
from cdcflow.sources.cql.cqltypes import CqlType, native_type_name

__all__ = ["CompactInto", "CompiledDecoder", "CompiledFramer", "UpdateChanges", "type_description"]

UpdateChanges = tuple[TableSchema, bytes, list[RowChange]]
"""A wanted partition update's table, raw partition key and row changes."""

# Native types the compiled core decodes itself (values.rs); every other one goes to the reference.
_COMPILED_NATIVE = frozenset(
    {
        "ascii",
        "text",
        "varchar",
        "blob",
        "boolean",
        "tinyint",
        "smallint",
        "int",
        "bigint",
        "counter",
        "timestamp",
        "time",
        "varint",
        "decimal",
        "float",
        "double",
        "date",
        "uuid",
        "timeuuid",
        "inet",
    }
)


def type_description(cql: CqlType) -> tuple[Any, ...]:
    """What the compiled decoder needs of a column type: ``(name, fixed_length, multi_cell,
    reference CqlType, path, value, members, vector dimension, field names)`` (members and field
    names: a tuple's and a user type's fields)."""

    def described(child: CqlType | None) -> tuple[Any, ...] | None:
        return None if child is None else type_description(child)

    name = "reference"
    members: tuple[Any, ...] = ()
    field_names: tuple[str, ...] = ()
    dimension = 0
    if cql.kind == "native":
        native = native_type_name(cql)
        if native in _COMPILED_NATIVE:
            name = native
    elif cql.kind == "udt":
        name, field_names = "udt", cql.field_names
        members = tuple(type_description(m) for m in cql.field_types)
    elif cql.kind in ("list", "set", "map"):
        name = cql.kind
    elif cql.kind == "tuple":
        name, members = "tuple", tuple(type_description(m) for m in cql.field_types)
    elif cql.kind == "vector":
        arguments = parse_cql_type(cql.text)[1]
        if len(arguments) == 2 and isinstance(arguments[1], int):
            name, dimension = "vector", arguments[1]
    return (
        name,
        cql.fixed_length,
        cql.multi_cell,
        cql,
        described(cql.path),
        described(cql.value),
        members,
        dimension,
        field_names,
    )


def _table_description(table: TableSchema) -> tuple[Any, ...]:
    def columns(of: Any) -> list[tuple[str, tuple[Any, ...]]]:
        return [(column.name, type_description(column.type)) for column in of]

    # Current columns first: TableSchema.column() prefers them to a dropped one of the same name.
    current = list(table.columns.values())
    dropped = [c for name, c in table.dropped.items() if name not in table.columns]
    return (
        table,
        table.keyspace,
        table.table,
        columns(table.partition_key),
        columns(table.clustering),
        columns([*current, *dropped]),
        len(current),
    )


class CompiledDecoder:
    """One schema's mutations decoded by the compiled core, as the reference decodes them.

    ``decode_table`` is the reference decoder's: which tables' updates are wanted. Results are
    ``[(TableSchema, key, [RowChange, ...]), ...]``; None means declined: decode with the reference.
    ``dropped`` holds the ids (text) of tables the source found dropped, whose mutations compact
    decoding skips whole (:attr:`CompactSection.dropped`), as the source skips them in ``read``.
    """

    def __init__(
        self, catalog: SchemaCatalog, decode_table: Any, native: Any, dropped: Collection[str] | None = None
    ) -> None:
        self.catalog = catalog
        self._native = native.CommitLogDecoder(
            lambda raw: catalog.table(table_id_text(raw)), _table_description, decode_table, RowChange, dropped
        )

    def decode(self, mutation: bytes) -> list[UpdateChanges] | None:
        result: list[UpdateChanges] | None = self._native.decode(mutation)
        return result

    @property
    def last_decline(self) -> str | None:
        """Why the last declined mutation was declined."""
        reason: str | None = self._native.last_decline
        return reason

    def section_entries(self, section: Section, after: int) -> tuple[list[Any], bool]:
        """The section's entries past ``after`` (``FramedEntry``: ``changes`` set when decoded here)."""
        items, clean_end = self._native.decode_section(section.payload, section.logical_start, after)
        return items, clean_end

    def section_into(self, section: Section, after: int, into: CompactInto) -> tuple[Any, bool]:
        """The section's entries past ``after`` (and up to ``into.up_to``) decoded into
        ``into.builder``, up to the first one compact changes do not carry: a ``CompactSection``
        (``end``, ``skipped``, ``dropped``, ``refused``, ``reached_up_to``) and whether the section
        ended clean."""
        return self._native.decode_section_into(  # type: ignore[no-any-return]
            section.payload, section.logical_start, after, into.up_to, into.builder, into.segment, into.emits
        )


@dataclass(frozen=True, slots=True)
class CompactInto:
    """Where a :class:`CompiledFramer` puts a segment's changes in compact form: ``builder`` (a
    ``CompactBatchBuilder``) takes each entry's, their positions in segment ``segment``, up to
    the entry ending past ``up_to`` (None: the segment's end), leaving out the partition updates
    for which ``emits(keyspace, partition key bytes)`` (the source's replica filter) is false."""

    builder: Any
    segment: int
    up_to: int | None = None
    emits: Callable[[str, bytes], bool] | None = None


class CompiledFramer:
    """A :data:`~cdcflow.sources.cassandra_commitlog.segment.SectionFramer` running in the compiled
    core: ``FramedEntry`` items (``start``, ``end``, ``mutation``, ``changes``) and, for bytes that
    cannot be framed, the reference's own :class:`EntryFault`.

    With ``decoder`` (called once per section, so a schema refreshed meanwhile is picked up), each
    entry past ``after`` is also decoded to row changes, or with ``compact`` into its builder:
    then each section gives one ``CompactSection`` instead of its entries. :attr:`decoder` is the
    one that decoded the section being read. ``with_mutations=False`` frames positions only.
    """

    def __init__(
        self,
        native: Any,
        after: int = 0,
        decoder: Callable[[], CompiledDecoder] | None = None,
        with_mutations: bool = True,
        compact: CompactInto | None = None,
    ) -> None:
        self._native = native
        self._after = after
        self._decoder_for_section = decoder
        self._with_mutations = with_mutations
        self._compact = compact
        self.decoder: CompiledDecoder | None = None

    def __call__(self, section: Section, path: Path | str, state: SegmentRead) -> Iterator[Any]:
        if self._decoder_for_section is not None and self._compact is not None:
            self.decoder = self._decoder_for_section()
            outcome, clean_end = self.decoder.section_into(section, self._after, self._compact)
            yield outcome
            if clean_end:
                state.clean_end = True
            return
        if self._decoder_for_section is not None:
            self.decoder = self._decoder_for_section()
            items, clean_end = self.decoder.section_entries(section, self._after)
        else:
            items, clean_end = self._native.frame_section(
                section.payload, section.logical_start, self._after, self._with_mutations
            )
        for item in items:
            if item.fault is not None:
                yield EntryFault(item.start, item.end, item.mutation, CorruptEntryError(item.fault, path, item.start))
            else:
                yield item
        if clean_end:
            state.clean_end = True
