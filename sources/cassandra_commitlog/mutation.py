"""Mutations as the commit log stores them (Cassandra's messaging serialisation, versions 12 and 13).

::

    mutation          uvint count | partition update * count
    partition update  16-byte table id | vint-length key | flags
                      [stats | static columns | regular columns]      unless empty
                      [deletion time]                                  partition deletion
                      [static row] [uvint row estimate]
                      (row | range tombstone marker)* | 0x01           end of partition
    row               flags [extended flags] clustering body
    body              [pk timestamp [ttl local-expiry]] [deletion] [column subset]
                      cell per present simple column, (deletion?) count cells per complex column
    cell              flags [timestamp] [local deletion time] [ttl] [path] [value]

Timestamps, deletion times and TTLs are stored as unsigned vints relative to the partition's
encoding stats, which are themselves relative to fixed epochs. Values stay raw bytes here: the
column's :class:`~cdcflow.sources.cql.cqltypes.CqlType` decodes them where they are used.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cdcflow.sources.cassandra_commitlog.exceptions import MutationDecodeError, UnknownTableError
from cdcflow.sources.cassandra_commitlog.schema import ColumnSchema, SchemaCatalog, TableSchema, table_id_text
from cdcflow.sources.cql.cqltypes import ValueDecodeError, read_unsigned_vint

__all__ = [
    "BOUND_KINDS",
    "Cell",
    "DeletionTime",
    "Mutation",
    "MutationDecoder",
    "PartitionUpdate",
    "RangeTombstoneMarker",
    "RowUpdate",
    "newest_timestamp",
]

# EncodingStats' epochs: 2015-09-22T00:00:00Z, in microseconds and in seconds.
_TIMESTAMP_EPOCH_US = 1_442_880_000_000_000
_DELETION_TIME_EPOCH_S = 1_442_880_000
_U64 = 1 << 64
# DeletionTime.LIVE's markedForDeleteAt (Long.MIN_VALUE): "not deleted".
_LIVE = -(1 << 63)

# ClusteringPrefix.Kind, by ordinal.
BOUND_KINDS = (
    "excl_end",
    "incl_start",
    "excl_end_incl_start",
    "static",
    "clustering",
    "incl_end_excl_start",
    "incl_end",
    "excl_start",
)
_BOUNDARY_KINDS = (2, 5)

# Partition flags.
_IS_EMPTY, _HAS_PARTITION_DELETION, _HAS_STATIC_ROW, _HAS_ROW_ESTIMATE = 0x01, 0x04, 0x08, 0x10
# Unfiltered flags.
_END_OF_PARTITION, _IS_MARKER, _HAS_TIMESTAMP, _HAS_TTL = 0x01, 0x02, 0x04, 0x08
_HAS_DELETION, _HAS_ALL_COLUMNS, _HAS_COMPLEX_DELETION, _EXTENSION_FLAG = 0x10, 0x20, 0x40, 0x80
_IS_STATIC, _HAS_SHADOWABLE_DELETION = 0x01, 0x02
# Cell flags.
_CELL_DELETED, _CELL_EXPIRING, _CELL_EMPTY, _CELL_ROW_TIMESTAMP, _CELL_ROW_TTL = 0x01, 0x02, 0x04, 0x08, 0x10

_USHORT = struct.Struct(">H")


@dataclass(frozen=True, slots=True)
class DeletionTime:
    marked_for_delete_at: int  # write timestamp of the deletion, microseconds
    local_deletion_time: int  # seconds since the epoch, when the deletion happened on the node


@dataclass(slots=True)
class Cell:
    column: ColumnSchema
    timestamp: int
    value: bytes
    path: bytes | None = None  # the element's identity in a multi-cell column
    deleted: bool = False
    ttl: int | None = None
    local_deletion_time: int | None = None  # expiry (expiring cells) or deletion time (tombstones)


@dataclass(slots=True)
class RowUpdate:
    clustering: tuple[bytes | None, ...]  # raw clustering values; empty for the static row
    static: bool = False
    timestamp: int | None = None  # primary-key liveness: set by INSERT, absent for UPDATE
    ttl: int | None = None
    expires_at: int | None = None
    deletion: DeletionTime | None = None  # a row deletion (DELETE FROM t WHERE full key)
    shadowable: bool = False
    cells: list[Cell] = field(default_factory=list)
    complex_deletions: dict[str, DeletionTime] = field(default_factory=dict)  # a whole collection replaced/removed


@dataclass(slots=True)
class RangeTombstoneMarker:
    kind: str  # one of BOUND_KINDS
    clustering: tuple[bytes | None, ...]
    deletion: DeletionTime | None  # for a bound
    end_deletion: DeletionTime | None = None  # for a boundary: the range it closes
    start_deletion: DeletionTime | None = None  # and the range it opens


@dataclass(slots=True)
class PartitionUpdate:
    table: TableSchema
    key: bytes
    key_parts: list[bytes]  # the partition key's column values (a composite key split into its parts)
    partition_deletion: DeletionTime | None = None
    static_row: RowUpdate | None = None
    rows: list[RowUpdate] = field(default_factory=list)
    markers: list[RangeTombstoneMarker] = field(default_factory=list)


def _split_partition_key(key: bytes, columns: int) -> list[bytes]:
    # A composite key: per column an unsigned short length, the value and an end-of-component byte.
    if columns <= 1:
        return [key]
    parts = []
    offset = 0
    for _ in range(columns):
        if offset + 2 > len(key):
            raise ValueDecodeError(f"composite partition key cut short at byte {offset}")
        (length,) = _USHORT.unpack_from(key, offset)
        if offset + 2 + length + 1 > len(key):
            raise ValueDecodeError(f"composite partition key component of {length} bytes runs past the key")
        parts.append(key[offset + 2 : offset + 2 + length])
        offset += 2 + length + 1
    if offset != len(key):
        raise ValueDecodeError(f"composite partition key has {len(key) - offset} bytes after its components")
    return parts


@dataclass(slots=True)
class Mutation:
    updates: list[PartitionUpdate]
    skipped_tables: int = 0  # partition updates of tables not decoded (no cdc, when asked to skip)


class _Input:
    """A cursor over one mutation's bytes; every read raises IndexError/ValueDecodeError past the end."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def byte(self) -> int:
        value = self.data[self.pos]
        self.pos += 1
        return value

    def uvint(self) -> int:
        first = self.data[self.pos]
        if first < 0x80:  # most lengths, deltas and counts fit one byte
            self.pos += 1
            return first
        value, self.pos = read_unsigned_vint(self.data, self.pos)
        return value

    def uvint32(self) -> int:
        first = self.data[self.pos]
        if first < 0x80:
            self.pos += 1
            return first
        # writeUnsignedVInt32 sign-extends a negative int to a 64-bit vint; undo that.
        value, self.pos = read_unsigned_vint(self.data, self.pos)
        return value - _U64 if value >= 1 << 63 else value

    def take(self, size: int) -> bytes:
        end = self.pos + size
        if size < 0 or end > len(self.data):
            raise ValueDecodeError(f"value of {size} bytes runs past the mutation's end")
        value = self.data[self.pos : end]
        self.pos = end
        return value

    def value(self, fixed_length: int) -> bytes:
        size = fixed_length if fixed_length >= 0 else self.uvint32()
        end = self.pos + size
        if size < 0 or end > len(self.data):
            raise ValueDecodeError(f"value of {size} bytes runs past the mutation's end")
        value = self.data[self.pos : end]
        self.pos = end
        return value


@dataclass(slots=True)
class _Stats:
    min_timestamp: int
    min_local_deletion_time: int
    min_ttl: int
    signed_deletion_times: bool  # messaging version 12 (commit log 7); 13 stores them unsigned

    def timestamp(self, stream: _Input) -> int:
        value = (stream.uvint() + self.min_timestamp) % _U64
        return value - _U64 if value >= 1 << 63 else value

    def local_deletion_time(self, stream: _Input) -> int:
        value = (stream.uvint32() + self.min_local_deletion_time) & 0xFFFFFFFF
        if value >= 1 << 31 and self.signed_deletion_times:
            value -= 1 << 32
        return value

    def ttl(self, stream: _Input) -> int:
        return stream.uvint32() + self.min_ttl

    def deletion(self, stream: _Input) -> DeletionTime:
        return DeletionTime(self.timestamp(stream), self.local_deletion_time(stream))


class MutationDecoder:
    """Decodes entry bytes into a :class:`Mutation` against a :class:`SchemaCatalog`.

    ``decode_table`` says which tables to decode; a partition update of any other table is parsed
    past (its types are known) but not kept, and when it is the mutation's last update it is not
    even parsed, which is what makes tables without ``cdc = true`` cheap.
    """

    def __init__(
        self, catalog: SchemaCatalog, commitlog_version: int, decode_table: Callable[[TableSchema], bool] | None = None
    ) -> None:
        self.catalog = catalog
        self.signed_deletion_times = commitlog_version < 8
        self.decode_table = decode_table or (lambda table: True)
        # Per decoder (one schema): tables by raw id, and each table's last column header, which
        # nearly every mutation of the table repeats byte for byte.
        self._tables: dict[bytes, TableSchema] = {}
        self._headers: dict[tuple[str, bool], tuple[bytes, list[ColumnSchema]]] = {}

    def decode(self, data: bytes, path: Path | str = "<segment>", position: int | None = None) -> Mutation:
        stream = _Input(data)
        try:
            count = stream.uvint32()
            if count <= 0:
                raise MutationDecodeError(f"mutation with {count} partition updates", path, position)
            mutation = Mutation([])
            for index in range(count):
                raw_id = stream.take(16)
                table = self._tables.get(raw_id)
                if table is None:
                    table = self.catalog.table(table_id_text(raw_id))
                    if table is None:
                        raise UnknownTableError(table_id_text(raw_id), path, position)
                    self._tables[raw_id] = table
                wanted = self.decode_table(table)
                if not wanted and index == count - 1:
                    mutation.skipped_tables += 1
                    return mutation
                update = self._partition_update(stream, table)
                if wanted:
                    mutation.updates.append(update)
                else:
                    mutation.skipped_tables += 1
            if stream.pos != len(data):
                raise MutationDecodeError(f"{len(data) - stream.pos} bytes left after the mutation", path, position)
            return mutation
        except MutationDecodeError:
            raise
        except (IndexError, ValueError, struct.error, KeyError, OverflowError) as exc:  # ValueError: bad UTF-8 too
            raise MutationDecodeError(f"mutation does not decode at byte {stream.pos}: {exc}", path, position) from exc

    def _partition_update(self, stream: _Input, table: TableSchema) -> PartitionUpdate:
        key = stream.take(stream.uvint32())
        update = PartitionUpdate(table, key, _split_partition_key(key, len(table.partition_key)))
        flags = stream.byte()
        if flags & _IS_EMPTY:
            return update
        stats = _Stats(
            (stream.uvint() + _TIMESTAMP_EPOCH_US) % _U64,
            stream.uvint32() + _DELETION_TIME_EPOCH_S,
            stream.uvint32(),
            self.signed_deletion_times,
        )
        statics = self._columns(stream, table, True) if flags & _HAS_STATIC_ROW else []
        regulars = self._columns(stream, table, False)
        if flags & _HAS_PARTITION_DELETION:
            update.partition_deletion = stats.deletion(stream)
        if flags & _HAS_STATIC_ROW:
            row_flags = stream.byte()
            extended = stream.byte() if row_flags & _EXTENSION_FLAG else 0
            if not extended & _IS_STATIC:
                raise ValueDecodeError(f"static row without its static flag (flags {row_flags:#x})")
            update.static_row = self._row_body(stream, stats, statics, RowUpdate((), static=True), row_flags, extended)
        if flags & _HAS_ROW_ESTIMATE:
            stream.uvint()
        clustering_lengths = table.clustering_lengths
        while True:
            row_flags = stream.byte()
            if row_flags & _END_OF_PARTITION:
                return update
            if row_flags & _IS_MARKER:
                update.markers.append(self._marker(stream, stats, clustering_lengths))
                continue
            extended = stream.byte() if row_flags & _EXTENSION_FLAG else 0
            if extended & _IS_STATIC:
                raise ValueDecodeError("a second static row")
            clustering = self._clustering(stream, len(clustering_lengths), clustering_lengths)
            update.rows.append(self._row_body(stream, stats, regulars, RowUpdate(clustering), row_flags, extended))

    def _columns(self, stream: _Input, table: TableSchema, static: bool) -> list[ColumnSchema]:
        slot = (table.table_id, static)
        known = self._headers.get(slot)
        if known is not None and stream.data.startswith(known[0], stream.pos):
            stream.pos += len(known[0])
            return known[1]
        start = stream.pos
        columns = self._read_columns(stream, table)
        self._headers[slot] = (stream.data[start : stream.pos], columns)
        return columns

    @staticmethod
    def _read_columns(stream: _Input, table: TableSchema) -> list[ColumnSchema]:
        columns = []
        for _ in range(stream.uvint32()):
            name = stream.take(stream.uvint32()).decode("utf-8")
            column = table.column(name)
            if column is None:
                raise ValueDecodeError(f"column {name!r} is not in {table.keyspace}.{table.table}'s schema")
            columns.append(column)
        return columns

    @staticmethod
    def _clustering(stream: _Input, size: int, lengths: tuple[int, ...]) -> tuple[bytes | None, ...]:
        values: list[bytes | None] = []
        offset = 0
        while offset < size:
            header = stream.uvint()
            limit = min(size, offset + 32)
            while offset < limit:
                shift = (offset * 2) % 64
                if header & (1 << (shift + 1)):
                    values.append(None)
                elif header & (1 << shift):
                    values.append(b"")
                else:
                    values.append(stream.value(lengths[offset]))
                offset += 1
        return tuple(values)

    def _marker(self, stream: _Input, stats: _Stats, lengths: tuple[int, ...]) -> RangeTombstoneMarker:
        kind = stream.byte()
        size = _USHORT.unpack(stream.take(2))[0]
        if kind >= len(BOUND_KINDS) or size > len(lengths):
            raise ValueDecodeError(f"range tombstone bound kind {kind} with {size} values")
        clustering = self._clustering(stream, size, lengths) if size else ()
        if kind in _BOUNDARY_KINDS:
            end = stats.deletion(stream)
            start = stats.deletion(stream)
            return RangeTombstoneMarker(BOUND_KINDS[kind], clustering, None, end, start)
        return RangeTombstoneMarker(BOUND_KINDS[kind], clustering, stats.deletion(stream))

    def _row_body(
        self,
        stream: _Input,
        stats: _Stats,
        header_columns: list[ColumnSchema],
        row: RowUpdate,
        flags: int,
        extended: int,
    ) -> RowUpdate:
        if flags & _HAS_TIMESTAMP:
            row.timestamp = stats.timestamp(stream)
            if flags & _HAS_TTL:
                row.ttl = stats.ttl(stream)
                row.expires_at = stats.local_deletion_time(stream)
        if flags & _HAS_DELETION:
            row.deletion = stats.deletion(stream)
            row.shadowable = bool(extended & _HAS_SHADOWABLE_DELETION)
        columns = header_columns if flags & _HAS_ALL_COLUMNS else self._subset(stream, header_columns)
        has_complex_deletion = bool(flags & _HAS_COMPLEX_DELETION)
        for column in columns:
            if column.type.multi_cell:
                if has_complex_deletion:
                    # Once one complex column of the row has a deletion every one carries a
                    # deletion time, LIVE for those that were only added to.
                    deletion = stats.deletion(stream)
                    if deletion.marked_for_delete_at != _LIVE:
                        row.complex_deletions[column.name] = deletion
                for _ in range(stream.uvint32()):
                    row.cells.append(self._cell(stream, stats, column, row, True))
            else:
                row.cells.append(self._cell(stream, stats, column, row, False))
        return row

    @staticmethod
    def _subset(stream: _Input, superset: list[ColumnSchema]) -> list[ColumnSchema]:
        encoded = stream.uvint()
        if encoded == 0:
            return superset
        count = len(superset)
        if count < 64:
            # A bitmap of the columns that are *missing*.
            return [column for index, column in enumerate(superset) if not encoded >> index & 1]
        present_count = count - encoded
        if present_count < count // 2:
            return [superset[stream.uvint32()] for _ in range(present_count)]
        missing: set[int] = set()
        for _ in range(encoded):
            missing.add(stream.uvint32())
        return [column for index, column in enumerate(superset) if index not in missing]

    @staticmethod
    def _cell(stream: _Input, stats: _Stats, column: ColumnSchema, row: RowUpdate, complex_column: bool) -> Cell:
        flags = stream.byte()
        if flags & _CELL_ROW_TIMESTAMP:
            if row.timestamp is None:
                raise ValueDecodeError(f"cell of {column.name!r} uses the row timestamp, the row has none")
            timestamp = row.timestamp
        else:
            timestamp = stats.timestamp(stream)
        deleted = bool(flags & _CELL_DELETED)
        expiring = bool(flags & _CELL_EXPIRING)
        ttl = local_deletion_time = None
        if flags & _CELL_ROW_TTL:
            ttl, local_deletion_time = row.ttl, row.expires_at
        else:
            if deleted or expiring:
                local_deletion_time = stats.local_deletion_time(stream)
            if expiring:
                ttl = stats.ttl(stream)
        path = stream.take(stream.uvint32()) if complex_column else None
        # A multi-cell column's cells are sized by the collection type, which is never fixed.
        value = b"" if flags & _CELL_EMPTY else stream.value(-1 if complex_column else column.type.fixed_length)
        return Cell(column, timestamp, value, path, deleted, ttl, local_deletion_time)


def newest_timestamp(update: PartitionUpdate) -> int:
    """The newest write timestamp (µs) anywhere in a partition update: which time bucket it falls in."""
    newest = update.partition_deletion.marked_for_delete_at if update.partition_deletion else 0
    for marker in update.markers:
        for deletion in (marker.deletion, marker.start_deletion, marker.end_deletion):
            if deletion is not None:
                newest = max(newest, deletion.marked_for_delete_at)
    rows = update.rows if update.static_row is None else [update.static_row, *update.rows]
    for row in rows:
        newest = max(newest, row.timestamp or 0, row.deletion.marked_for_delete_at if row.deletion else 0)
        for cell in row.cells:
            newest = max(newest, cell.timestamp)
        for deletion in row.complex_deletions.values():
            newest = max(newest, deletion.marked_for_delete_at)
    return newest
