"""Commit-log mutations written the way Cassandra serialises them (messaging versions 12 and 13),
and Hypothesis strategies for random tables and their mutations, for the property tests that hold
the compiled core and the pure-Python reader equal.

The format is the one ``cdcflow.sources.cassandra_commitlog.mutation`` documents (and Cassandra's
``PartitionUpdate.PartitionUpdateSerializer``, ``UnfilteredSerializer``, ``Cell.Serializer`` and
``ClusteringPrefix.Serializer`` write). Values are raw bytes per type, mostly well formed and
sometimes not (a wrong length, bad UTF-8), so both readers also meet what they must refuse.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from cdcflow.sources.cassandra_commitlog.schema import ColumnSchema, SchemaCatalog, TableSchema
from cdcflow.sources.cql.cqltypes import CqlType

_TIMESTAMP_EPOCH_US = 1_442_880_000_000_000
_DELETION_TIME_EPOCH_S = 1_442_880_000
_U64 = (1 << 64) - 1


# --- encoding ---------------------------------------------------------------------------------------


def uvint(value: int) -> bytes:
    """Cassandra's unsigned vint of ``value`` taken as an unsigned 64-bit int."""
    value &= _U64
    if value < 0x80:
        return bytes([value])
    extra = 1
    while extra < 8 and value >= 1 << (8 * extra + 7 - extra):
        extra += 1
    first = ((0xFF << (8 - extra)) & 0xFF) | (value >> (8 * extra) if extra < 8 else 0)
    return bytes([first]) + (value & ((1 << (8 * extra)) - 1)).to_bytes(extra, "big")


def signed_vint(value: int) -> bytes:
    return uvint((value << 1) ^ (value >> 63))  # zig-zag


@dataclass
class CellSpec:
    column: ColumnSchema
    value: bytes = b""
    path: bytes | None = None  # multi-cell columns
    timestamp: int | None = None  # None: the row's (USE_ROW_TIMESTAMP)
    deleted: bool = False
    ttl: int | None = None  # expiring
    local_deletion_time: int = 0
    empty: bool = False  # the EMPTY flag: no value bytes
    row_ttl: bool = False  # USE_ROW_TTL: the row's TTL and expiry


@dataclass
class RowSpec:
    clustering: list[bytes | None]  # None: null; b"" written as the "empty" bit when empty_bits
    timestamp: int | None = None
    ttl: int | None = None
    expires_at: int = 0
    deletion: tuple[int, int] | None = None
    cells: list[CellSpec] = field(default_factory=list)
    complex_deletions: dict[str, tuple[int, int]] = field(default_factory=dict)
    columns: list[ColumnSchema] | None = None  # None: all of the header's columns
    empty_bits: bool = False


@dataclass
class MarkerSpec:
    kind: int  # ClusteringPrefix.Kind ordinal
    clustering: list[bytes | None]
    deletion: tuple[int, int] = (0, 0)
    start_deletion: tuple[int, int] = (0, 0)  # boundaries: the range opened


@dataclass
class UpdateSpec:
    table: TableSchema
    key: bytes
    empty: bool = False
    partition_deletion: tuple[int, int] | None = None
    static_row: RowSpec | None = None
    items: list[RowSpec | MarkerSpec] = field(default_factory=list)
    row_estimate: int | None = None
    min_timestamp: int = 0
    min_local_deletion_time: int = 0
    min_ttl: int = 0


def _header(columns: list[ColumnSchema]) -> bytes:
    out = bytearray(uvint(len(columns)))
    for column in columns:
        name = column.name.encode()
        out += uvint(len(name)) + name
    return bytes(out)


class _Writer:
    def __init__(self, update: UpdateSpec) -> None:
        self.update = update
        self.out = bytearray()

    def timestamp(self, value: int) -> None:
        self.out += uvint(value - self.update.min_timestamp)

    def deletion_time(self, value: int) -> None:
        self.out += uvint(value - self.update.min_local_deletion_time)

    def ttl(self, value: int) -> None:
        self.out += uvint(value - self.update.min_ttl)

    def deletion(self, deletion: tuple[int, int]) -> None:
        self.timestamp(deletion[0])
        self.deletion_time(deletion[1])

    def value(self, cql: CqlType, raw: bytes, complex_column: bool = False) -> None:
        if complex_column or cql.fixed_length < 0:
            self.out += uvint(len(raw))
        self.out += raw

    def clustering(self, values: list[bytes | None], columns: tuple[ColumnSchema, ...], empty_bits: bool) -> None:
        for first in range(0, len(values), 32):
            chunk = values[first : first + 32]
            header = 0
            # An empty value is the "empty" bit (always for a fixed-length type, which has no length
            # to say 0 with), or a zero length.
            fixed = [columns[first + i].type.fixed_length >= 0 for i in range(len(chunk))]
            empty = [raw == b"" and (empty_bits or fixed[i]) for i, raw in enumerate(chunk)]
            for offset, raw in enumerate(chunk):
                shift = (offset * 2) % 64
                if raw is None:
                    header |= 1 << (shift + 1)
                elif empty[offset]:
                    header |= 1 << shift
            self.out += uvint(header)
            for offset, raw in enumerate(chunk):
                if raw is None or empty[offset]:
                    continue
                self.value(columns[first + offset].type, raw)

    def row(self, row: RowSpec, header: list[ColumnSchema], static: bool) -> None:
        flags = 0x80 if static else 0
        if row.timestamp is not None:
            flags |= 0x04
            if row.ttl is not None:
                flags |= 0x08
        if row.deletion is not None:
            flags |= 0x10
        if row.columns is None:
            flags |= 0x20
        if row.complex_deletions:
            flags |= 0x40
        self.out.append(flags)
        if static:
            self.out.append(0x01)
        else:
            self.clustering(row.clustering, self.update.table.clustering, row.empty_bits)
        if row.timestamp is not None:
            self.timestamp(row.timestamp)
            if row.ttl is not None:
                self.ttl(row.ttl)
                self.deletion_time(row.expires_at)
        if row.deletion is not None:
            self.deletion(row.deletion)
        present = header if row.columns is None else [c for c in header if c in row.columns]
        if row.columns is not None:
            self.subset(present, header)
        for column in present:
            cells = [c for c in row.cells if c.column.name == column.name]
            if column.type.multi_cell:
                if row.complex_deletions:
                    # Every complex column gets one; LIVE (Long.MIN_VALUE, Integer.MAX_VALUE) when not deleted.
                    self.deletion(row.complex_deletions.get(column.name, (-(1 << 63), (1 << 31) - 1)))
                self.out += uvint(len(cells))
                for cell in cells:
                    self.cell(cell, row, True)
            else:
                self.cell(cells[0], row, False)

    def subset(self, present: list[ColumnSchema], header: list[ColumnSchema]) -> None:
        count = len(header)
        if len(present) == count:
            self.out += uvint(0)
            return
        if count < 64:
            missing = 0
            for index, column in enumerate(header):
                if column not in present:
                    missing |= 1 << index
            self.out += uvint(missing)
            return
        missing_count = count - len(present)
        self.out += uvint(missing_count)
        if len(present) < count // 2:
            for column in present:
                self.out += uvint(header.index(column))
        else:
            for index, column in enumerate(header):
                if column not in present:
                    self.out += uvint(index)

    def cell(self, cell: CellSpec, row: RowSpec, complex_column: bool) -> None:
        flags = 0
        if cell.deleted:
            flags |= 0x01
        if cell.ttl is not None:
            flags |= 0x02
        if cell.empty:
            flags |= 0x04
        if cell.timestamp is None:
            flags |= 0x08
        if cell.row_ttl:
            flags |= 0x10
        self.out.append(flags)
        if cell.timestamp is not None:
            self.timestamp(cell.timestamp)
        if not cell.row_ttl and (cell.deleted or cell.ttl is not None):
            self.deletion_time(cell.local_deletion_time)
        if not cell.row_ttl and cell.ttl is not None:
            self.ttl(cell.ttl)
        if complex_column:
            path = cell.path or b""
            self.out += uvint(len(path)) + path
        if not cell.empty:
            self.value(cell.column.type, cell.value, complex_column)

    def marker(self, marker: MarkerSpec) -> None:
        self.out.append(0x02)
        self.out.append(marker.kind)
        self.out += struct.pack(">H", len(marker.clustering))
        if marker.clustering:
            self.clustering(marker.clustering, self.update.table.clustering, False)
        self.deletion(marker.deletion)
        if marker.kind in (2, 5):
            self.deletion(marker.start_deletion)


def table_columns(table: TableSchema, static: bool) -> list[ColumnSchema]:
    """The static (or regular, dropped ones included) columns a row of ``table`` can write."""
    if static:
        return [c for c in table.columns.values() if c.kind == "static"]
    regular = [c for c in table.columns.values() if c.kind == "regular"]
    return regular + [c for name, c in table.dropped.items() if name not in table.columns]


def _columns_of(update: UpdateSpec, static: bool) -> list[ColumnSchema]:
    rows = [update.static_row] if static else [i for i in update.items if isinstance(i, RowSpec)]
    used = {c.column.name for row in rows if row is not None for c in row.cells}
    return sorted((c for c in table_columns(update.table, static) if c.name in used), key=lambda c: c.name)


def partition_update_bytes(update: UpdateSpec) -> bytes:
    writer = _Writer(update)
    out = writer.out
    out += bytes.fromhex(update.table.table_id.replace("-", ""))
    out += uvint(len(update.key)) + update.key
    if update.empty:
        out.append(0x01)
        return bytes(out)
    statics = _columns_of(update, True)
    regulars = _columns_of(update, False)
    flags = 0
    if update.partition_deletion is not None:
        flags |= 0x04
    if update.static_row is not None:
        flags |= 0x08
    if update.row_estimate is not None:
        flags |= 0x10
    out.append(flags)
    out += uvint(update.min_timestamp - _TIMESTAMP_EPOCH_US)
    out += uvint(update.min_local_deletion_time - _DELETION_TIME_EPOCH_S)
    out += uvint(update.min_ttl)
    if update.static_row is not None:
        out += _header(statics)
    out += _header(regulars)
    if update.partition_deletion is not None:
        writer.deletion(update.partition_deletion)
    if update.static_row is not None:
        writer.row(update.static_row, statics, True)
    if update.row_estimate is not None:
        out += uvint(update.row_estimate)
    for item in update.items:
        if isinstance(item, MarkerSpec):
            writer.marker(item)
        else:
            writer.row(item, regulars, False)
    out.append(0x01)
    return bytes(out)


def mutation_bytes(updates: list[UpdateSpec]) -> bytes:
    return uvint(len(updates)) + b"".join(partition_update_bytes(u) for u in updates)


def partition_key_bytes(table: TableSchema, parts: list[bytes]) -> bytes:
    if len(table.partition_key) == 1:
        return parts[0]
    return b"".join(struct.pack(">H", len(p)) + p + b"\x00" for p in parts)


# --- strategies: types and values ----------------------------------------------------------------------

_NATIVE_TYPES = [
    "ascii",
    "text",
    "varchar",
    "blob",
    "boolean",
    "tinyint",
    "smallint",
    "int",
    "bigint",
    "varint",
    "float",
    "double",
    "decimal",
    "timestamp",
    "date",
    "time",
    "uuid",
    "timeuuid",
    "inet",
    "duration",
]
_KEYABLE = [t for t in _NATIVE_TYPES if t != "duration"]
USER_TYPES = {"address": (["street", "number"], ["text", "int"]), "point": (["x", "y"], ["int", "double"])}


def _frozen_type(depth: int) -> st.SearchStrategy[str]:
    natives = st.sampled_from(_KEYABLE)
    if depth >= 2:
        return natives
    inner = st.deferred(lambda: _frozen_type(depth + 1))
    return st.one_of(
        natives,
        natives,
        inner.map(lambda t: f"frozen<list<{t}>>"),
        st.sampled_from(_KEYABLE).map(lambda t: f"frozen<set<{t}>>"),
        st.tuples(st.sampled_from(_KEYABLE), inner).map(lambda kv: f"frozen<map<{kv[0]}, {kv[1]}>>"),
        st.lists(inner, min_size=1, max_size=3).map(lambda ts: f"frozen<tuple<{', '.join(ts)}>>"),
        st.sampled_from(sorted(USER_TYPES)).map(lambda t: f"frozen<{t}>"),
        st.sampled_from(["float", "int", "bigint", "double", "text", "uuid"]).flatmap(
            lambda t: st.integers(1, 4).map(lambda n: f"vector<{t}, {n}>")
        ),
    )


def column_types(regular: bool) -> st.SearchStrategy[str]:
    """A CQL column type; ``regular`` columns may also be multi-cell (non-frozen collections, user types)."""
    if not regular:
        return _frozen_type(1)
    frozen = _frozen_type(0)
    return st.one_of(
        frozen,
        frozen,
        frozen.map(lambda t: f"list<{t}>"),
        st.sampled_from(_KEYABLE).map(lambda t: f"set<{t}>"),
        st.tuples(st.sampled_from(_KEYABLE), frozen).map(lambda kv: f"map<{kv[0]}, {kv[1]}>"),
        st.sampled_from(sorted(USER_TYPES)),
        st.just("duration"),
    )


_FIXED_SIZES = {"tinyint": 1, "smallint": 2, "int": 4, "bigint": 8, "timestamp": 8, "time": 8, "date": 4}
_FIXED_SIZES |= {"float": 4, "double": 8, "uuid": 16, "timeuuid": 16, "boolean": 1}


@st.composite
def value_bytes(draw: st.DrawFn, cql: CqlType, sound: bool = True) -> bytes:
    """Raw bytes of a value of ``cql`` (well formed unless ``sound`` is False and the draw says so)."""
    if not sound and cql.fixed_length < 0 and draw(st.integers(0, 9)) == 0:
        return draw(st.binary(max_size=12))  # anything: most types must refuse it
    kind = cql.kind
    name = cql.text.split("<")[0].strip().lower()
    if kind == "native":
        if cql.fixed_length >= 0:
            return draw(st.binary(min_size=cql.fixed_length, max_size=cql.fixed_length))
        if draw(st.integers(0, 15)) == 0:
            return b""  # CQL's empty value
        if name in ("ascii", "text", "varchar"):
            return draw(st.text(max_size=12)).encode("utf-8", "surrogatepass")
        if name in _FIXED_SIZES:
            size = _FIXED_SIZES[name]
            return draw(st.binary(min_size=size, max_size=size))
        if name == "varint":
            return draw(st.binary(min_size=1, max_size=20))
        if name == "decimal":
            scale = draw(st.one_of(st.integers(-20, 20), st.integers(-(1 << 31), (1 << 31) - 1)))
            return struct.pack(">i", scale) + draw(st.binary(min_size=1, max_size=14))
        if name == "inet":
            return draw(st.binary(min_size=4, max_size=4) | st.binary(min_size=16, max_size=16))
        if name == "duration":
            months, days, nanos = draw(st.tuples(*[st.integers(-(1 << 40), 1 << 40)] * 3))
            return signed_vint(months) + signed_vint(days) + signed_vint(nanos)
        return draw(st.binary(max_size=12))
    if kind in ("list", "set", "map", "tuple", "udt"):
        if kind in {"tuple", "udt"}:
            members = list(cql.field_types)
            count = draw(st.integers(0, len(members))) if kind == "udt" else len(members)
            items = [draw(_optional_value(m, sound)) for m in members[:count]]
            return b"".join(_element(i) for i in items)
        if kind == "map":
            assert cql.path is not None and cql.value is not None
            pairs = draw(st.lists(st.tuples(value_bytes(cql.path, sound), value_bytes(cql.value, sound)), max_size=3))
            items = [x for pair in pairs for x in pair]
            count = len(pairs)
        else:
            element = cql.value if kind == "list" else cql.path
            assert element is not None
            items = draw(st.lists(_optional_value(element, sound), max_size=4))
            count = len(items)
        if not items and draw(st.booleans()):
            return b""
        return struct.pack(">i", count) + b"".join(_element(i) for i in items)
    if kind == "vector":
        assert cql.value is not None
        dimension = int(cql.text.rsplit(",", 1)[1].strip(" >"))
        if cql.fixed_length >= 0:
            return draw(st.binary(min_size=cql.fixed_length, max_size=cql.fixed_length))
        parts = [draw(value_bytes(cql.value, sound)) for _ in range(dimension)]
        return b"".join(uvint(len(p)) + p for p in parts)
    return draw(st.binary(max_size=8))


@st.composite
def _optional_value(draw: st.DrawFn, cql: CqlType, sound: bool) -> bytes | None:
    return None if draw(st.integers(0, 7)) == 0 else draw(value_bytes(cql, sound))


def _element(raw: bytes | None) -> bytes:
    return struct.pack(">i", -1) if raw is None else struct.pack(">i", len(raw)) + raw


# --- strategies: tables and mutations -------------------------------------------------------------------

_NAMES = st.from_regex(r"[a-z][a-z0-9_]{0,5}", fullmatch=True)


@st.composite
def catalogs(draw: st.DrawFn, tables: int = 2) -> SchemaCatalog:
    """A schema of random tables (with dropped columns now and then) in keyspace ``ks``."""
    described = []
    for index in range(tables):
        names = draw(st.lists(_NAMES, min_size=2, max_size=10, unique=True))
        partition_count = draw(st.integers(1, min(3, len(names) - 1)))
        clustering_count = draw(st.integers(0, min(3, len(names) - partition_count - 1)))
        columns = []
        for position, name in enumerate(names):
            if position < partition_count:
                columns.append([name, "partition_key", position, draw(column_types(False))])
            elif position < partition_count + clustering_count:
                columns.append([name, "clustering", position - partition_count, draw(column_types(False))])
            else:
                kind = "static" if clustering_count and draw(st.integers(0, 4)) == 0 else "regular"
                columns.append([name, kind, -1, draw(column_types(True))])
        if draw(st.integers(0, 9)) == 0:
            # A wide table: the column-subset encoding for 64 columns and more.
            columns += [[f"w{i}", "regular", -1, "int"] for i in range(draw(st.integers(60, 70)))]
        dropped = [[f"gone{i}", draw(column_types(True))] for i in range(draw(st.integers(0, 1)))]
        described.append(
            {
                "id": str(uuid.UUID(int=draw(st.integers(1, (1 << 128) - 1)))),
                "keyspace": "ks",
                "table": f"t{index}",
                "cdc": True,
                "columns": columns,
                "dropped": dropped,
            }
        )
    types = {"ks": {name: [list(spec[0]), list(spec[1])] for name, spec in USER_TYPES.items()}}
    return SchemaCatalog.from_description({"tables": described, "types": types})


_TIMESTAMPS = st.one_of(
    st.integers(1_400_000_000_000_000, 1_900_000_000_000_000), st.integers(-(1 << 63), (1 << 63) - 1)
)
_DELETION = st.tuples(_TIMESTAMPS, st.integers(0, (1 << 32) - 1))


@st.composite
def _cells(
    draw: st.DrawFn, column: ColumnSchema, row_timestamp: int | None, row_ttl: int | None, sound: bool
) -> list[CellSpec]:
    cql = column.type

    def one(path: bytes | None, value_type: CqlType | None) -> CellSpec:
        deleted = draw(st.integers(0, 5)) == 0
        ttl = draw(st.one_of(st.none(), st.integers(1, 1 << 31))) if not deleted else None
        use_row = row_timestamp is not None and draw(st.booleans())
        empty = deleted or value_type is None or draw(st.integers(0, 20)) == 0
        if row_ttl is not None and not deleted and draw(st.integers(0, 3)) == 0:
            ttl = None
        return CellSpec(
            column,
            b"" if empty else draw(value_bytes(value_type, sound)),
            path,
            None if use_row else draw(_TIMESTAMPS),
            deleted,
            ttl,
            draw(st.integers(0, (1 << 32) - 1)),
            empty,
            row_ttl is not None and not deleted and ttl is None,
        )

    if not cql.multi_cell:
        return [one(None, cql)]
    cells = []
    for _ in range(draw(st.integers(0, 3))):
        if cql.kind == "list":
            cells.append(one(uuid.UUID(int=draw(st.integers(0, (1 << 128) - 1))).bytes, cql.value))
        elif cql.kind == "set":
            assert cql.path is not None
            cells.append(one(draw(value_bytes(cql.path, sound)), None))
        elif cql.kind == "map":
            assert cql.path is not None
            cells.append(one(draw(value_bytes(cql.path, sound)), cql.value))
        else:  # a user type's field: its index, then the field's value
            index = draw(st.integers(0, len(cql.field_types)))
            field_type = cql.field_types[index] if index < len(cql.field_types) else None
            cells.append(one(struct.pack(">h", index), field_type))
    return cells


@st.composite
def _row(draw: st.DrawFn, table: TableSchema, static: bool, sound: bool) -> RowSpec:
    available = table_columns(table, static)
    clustering: list[bytes | None] = []
    if not static:
        for column in table.clustering:
            choice = draw(st.integers(0, 12))
            clustering.append(None if choice == 0 else b"" if choice == 1 else draw(value_bytes(column.type, sound)))
    timestamp = draw(st.one_of(st.none(), _TIMESTAMPS))
    row = RowSpec(
        clustering,
        timestamp,
        draw(st.integers(1, 1 << 31)) if timestamp is not None and draw(st.integers(0, 4)) == 0 else None,
        draw(st.integers(0, (1 << 32) - 1)),
        draw(_DELETION) if draw(st.integers(0, 5)) == 0 else None,
        empty_bits=draw(st.booleans()),
    )
    written = draw(st.lists(st.sampled_from(available), unique=True)) if available else []
    for column in written:
        row.cells += draw(_cells(column, timestamp, row.ttl, sound))
        if column.type.multi_cell and draw(st.integers(0, 3)) == 0:
            row.complex_deletions[column.name] = draw(_DELETION)
    # A column with no cells (a multi-cell column of zero elements) is still written.
    used = {c.column.name for c in row.cells} | set(row.complex_deletions)
    if draw(st.booleans()):
        row.columns = [c for c in available if c.name in used]
    else:
        for column in available:
            if column.name not in used:
                if column.type.multi_cell:
                    continue
                row.cells += draw(_cells(column, timestamp, row.ttl, sound))
    return row


@st.composite
def partition_updates(draw: st.DrawFn, catalog: SchemaCatalog, sound: bool = True) -> UpdateSpec:
    table = draw(st.sampled_from(sorted(catalog.tables.values(), key=lambda t: t.table)))
    parts = [draw(value_bytes(c.type, sound)) for c in table.partition_key]
    update = UpdateSpec(
        table,
        partition_key_bytes(table, parts),
        empty=draw(st.integers(0, 30)) == 0,
        partition_deletion=draw(_DELETION) if draw(st.integers(0, 6)) == 0 else None,
        row_estimate=draw(st.integers(0, 100)) if draw(st.booleans()) else None,
        min_timestamp=draw(_TIMESTAMPS),
        min_local_deletion_time=draw(st.integers(0, 1 << 32)),
        min_ttl=draw(st.integers(0, 1 << 20)),
    )
    if any(c.kind == "static" for c in table.columns.values()) and draw(st.booleans()):
        update.static_row = draw(_row(table, True, sound))
    for _ in range(draw(st.integers(0, 3))):
        if table.clustering and draw(st.integers(0, 3)) == 0:
            size = draw(st.integers(0, len(table.clustering)))
            update.items.append(
                MarkerSpec(
                    draw(st.sampled_from([0, 1, 2, 5, 6, 7])),
                    [draw(value_bytes(c.type, sound)) for c in table.clustering[:size]],
                    draw(_DELETION),
                    draw(_DELETION),
                )
            )
        else:
            update.items.append(draw(_row(table, False, sound)))
    return update


@st.composite
def mutations(draw: st.DrawFn, catalog: SchemaCatalog, sound: bool = True) -> bytes:
    """A mutation of one to three partition updates of ``catalog``'s tables."""
    return mutation_bytes(draw(st.lists(partition_updates(catalog, sound), min_size=1, max_size=3)))


def any_value(cql: CqlType) -> Any:
    """A well-formed value's bytes drawn once (for examples outside Hypothesis)."""
    return value_bytes(cql).example()
