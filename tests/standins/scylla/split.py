"""Which log rows ScyllaDB writes for one base write: its ``cdc/split.cc`` and ``cdc/log.cc``,
written here from their code (scylladb/scylladb), for :class:`~tests.standins.scylla.writer.ScyllaCdcWriter`.

A base write (a batch of statements on one partition) is first the *mutation* ScyllaDB's
coordinator builds: per row a row marker, cells with their timestamp and TTL, collection and
user-type tombstones (``SET c = ...`` writes one at ``T - 1``, ``DELETE c`` at ``T``), row, range
and partition tombstones; statements on the same row merge into one row. Then, as
``cdc::cdc_service::impl::augment_mutation_call`` does:

* ``should_split`` (split.cc ``should_split_visitor``) decides whether the mutation is logged as
  it is or split; it splits on a second timestamp or TTL, live collection cells next to a row
  marker, a clustered row after a static row, a row deletion after an upsert, a range deletion
  after a row, a partition deletion after anything, or nothing timestamped at all.
* Split (``process_changes_with_splitting``): every change goes to a bucket of its timestamp (a
  collection tombstone at ``t`` to ``t + 1``) and TTL; each timestamp is one *record* with its own
  ``cdc$time`` and stream: pre-images, static updates, inserts (the bucket of the row marker),
  updates, row deletions, range deletions, the partition deletion, post-images.
* Unsplit (``process_changes_without_splitting``): one record of pre-images, the mutation's rows
  in visiting order (static row, clustered rows in clustering order, range and partition
  tombstones), post-images.
* The columns of each row as ``process_row_visitor`` / ``process_change_visitor`` set them;
  images as ``transformer::generate_image`` builds them from the pre-image read
  (``pre_image_select``) and the state each logged change leaves; with ``delta: keys`` the delta
  rows keep their keys, operation and TTL only.

Not modelled: Alternator's rules, counters, LWT, removing list
elements, images of non-frozen lists (their timeuuid keys are the server's), two live values
for one cell at one timestamp in one write (refused), and overlapping range deletions in one
write (ScyllaDB's range_tombstone_list would merge them).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from cdcflow.sources.scylla_cdc.log_events import DELETED_ELEMENTS_PREFIX, DELETED_PREFIX
from tests.standins.scylla.comparator import clustering_sort_key, compare_prefixes, compare_values

__all__ = [
    "Add",
    "ColumnKind",
    "DeleteColumns",
    "DeletePartition",
    "DeleteRange",
    "DeleteRow",
    "ImageState",
    "Insert",
    "ListKeys",
    "LogRecord",
    "Mutation",
    "Operation",
    "Overwrite",
    "PreimageSelect",
    "Remove",
    "SetFields",
    "TableShape",
    "Update",
    "build_mutation",
    "load_state",
    "log_records",
    "preimage_select",
    "scylla_list_key",
]

Row = dict[str, Any]
Key = tuple[Any, ...]
ListKeys = Mapping[tuple[Key | None, str], Sequence[uuid.UUID]]  # (row key, column) -> its new cells' keys

_GREGORIAN_OFFSET = 0x01B21DD213814000  # 100 ns intervals from 1582-10-15 to 1970-01-01


def scylla_list_key(micros: int, sequence: int, node: int) -> uuid.UUID:
    """The key ScyllaDB gives the ``sequence``-th list element a statement appends at ``micros``:
    ``cql3/lists.cc`` lines 154-157 and ``utils/UUID_gen.hh`` lines 190-227
    (``get_time_UUID_bytes_from_micros_and_submicros``): the write's time plus the sequence's
    high 3 bits in 100 ns units, then the sequence's low 14 bits (sign bit flipped) as clock
    sequence, and the node's spoofed 48-bit node id."""
    if not 0 <= sequence < 1 << 17:
        raise ValueError("Too many list values per single CQL statement or batch")
    intervals = micros * 10 + _GREGORIAN_OFFSET + ((sequence >> 14) & 0b111)
    high = (intervals & 0xFFFFFFFF) << 32 | ((intervals >> 32) & 0xFFFF) << 16 | (intervals >> 48) & 0x0FFF | 0x1000
    clock_sequence = (sequence & 0x3FFF) ^ 0x80
    low = ((clock_sequence | 0x8000) << 48) | (node & 0xFFFFFFFFFFFF)
    return uuid.UUID(int=(high << 64) | low)


# --- what a base write does to one column -------------------------------------------------------


@dataclass(frozen=True)
class Add:
    """Add elements to a non-frozen set (a set), map (a dict) or list (appended values)."""

    elements: Any


@dataclass(frozen=True)
class Remove:
    """Remove elements of a non-frozen set, or keys of a non-frozen map."""

    elements: Any


@dataclass(frozen=True)
class Overwrite:
    """Replace a whole non-frozen collection or user type (``SET c = ...``); None deletes it."""

    value: Any


@dataclass(frozen=True)
class SetFields:
    """Set fields of a non-frozen user type (``SET u.f = ...``); a None value deletes the field."""

    fields: Mapping[str, Any]


# --- base statements: each may carry its own USING TIMESTAMP / TTL ---------------------------------


@dataclass(frozen=True)
class Insert:
    """``INSERT``: the whole primary key and any columns (static ones too; a row of only the
    partition key and static columns writes the static row alone)."""

    row: Row
    timestamp_us: int | None = None
    ttl_s: int | None = None


@dataclass(frozen=True)
class Update:
    """``UPDATE``: the whole primary key (the partition key alone for static columns only)."""

    key: Row
    values: Row  # column -> value, None (deletion), or an Add/Remove/Overwrite/SetFields
    timestamp_us: int | None = None
    ttl_s: int | None = None


@dataclass(frozen=True)
class DeleteColumns:
    """``DELETE c1, c2 FROM``: a null for an atomic column, a tombstone at the statement's own
    timestamp (not one before, as ``SET c = null`` writes) for a collection or user type."""

    key: Row
    columns: tuple[str, ...]
    timestamp_us: int | None = None
    ttl_s: int | None = None


@dataclass(frozen=True)
class DeleteRow:
    """``DELETE FROM ... WHERE`` the whole primary key: a row tombstone, or on a table without
    clustering columns a partition tombstone (``cql3/statements/delete_statement.cc``)."""

    key: Row
    timestamp_us: int | None = None
    ttl_s: int | None = None


@dataclass(frozen=True)
class DeletePartition:
    partition_key: Row
    timestamp_us: int | None = None
    ttl_s: int | None = None


@dataclass(frozen=True)
class DeleteRange:
    """Delete rows of one partition by a clustering range: ``prefix`` fixes leading clustering
    columns, ``start``/``end`` bound the next one as ``(value, inclusive)`` or None (unbounded)."""

    partition_key: Row
    prefix: Row = field(default_factory=dict)
    start: tuple[Any, bool] | None = None
    end: tuple[Any, bool] | None = None
    timestamp_us: int | None = None
    ttl_s: int | None = None


Operation = Insert | Update | DeleteColumns | DeleteRow | DeletePartition | DeleteRange
ColumnKind = Literal["atomic", "set", "map", "list", "udt"]


@dataclass(frozen=True)
class TableShape:
    """What the log rows of a table depend on: its keys, columns and CDC options."""

    partition_key: tuple[str, ...]
    clustering: tuple[str, ...]
    columns: Mapping[str, ColumnKind]  # every non-key column, in the table's order
    static: frozenset[str]
    udt_fields: Mapping[str, tuple[str, ...]]  # non-frozen user-type column -> its field names
    preimage: bool | Literal["full"]
    postimage: bool
    clustering_types: tuple[str, ...] = ()  # CQL types of the clustering columns, in order
    descending: frozenset[str] = frozenset()  # clustering columns ordered DESC
    delta: Literal["full", "keys"] = "full"  # cdc = {'delta': ...}

    def row_key(self) -> Callable[[Sequence[Any]], Any]:
        """Sorts clustering keys in the table's clustering order (the comparator, not Python's
        tuple order: a DESC column, a timeuuid's signed low bytes)."""
        if len(self.clustering_types) != len(self.clustering):
            raise ValueError(f"the clustering columns {self.clustering} need their CQL types for their order")
        return clustering_sort_key(self.clustering_types, [n in self.descending for n in self.clustering])

    def compare_prefix(self, a: Sequence[Any], b: Sequence[Any]) -> int:
        """Clustering prefixes of equal length, by the clustering comparator."""
        return compare_prefixes(self.clustering_types, [n in self.descending for n in self.clustering], a, b)

    @property
    def regular(self) -> list[str]:
        return [n for n in self.columns if n not in self.static]

    def of_kind(self, static: bool) -> list[str]:
        return [n for n in self.columns if (n in self.static) == static]


# --- the mutation --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """A cell: its write timestamp, TTL (0: none; dead cells have none) and value (None: dead)."""

    ts: int
    ttl: int
    value: Any

    @property
    def live(self) -> bool:
        return self.value is not None


@dataclass
class MultiCell:
    """A non-frozen collection or user type in one row: a tombstone and cells by path (set
    element, map key, list timeuuid, user-type field index)."""

    tombstone: int | None = None
    cells: dict[Any, Cell] = field(default_factory=dict)


@dataclass
class RowChange:
    marker: tuple[int, int] | None = None  # (timestamp, TTL) of a row marker (INSERT)
    atomic: dict[str, Cell] = field(default_factory=dict)
    multi: dict[str, MultiCell] = field(default_factory=dict)
    deleted_at: int | None = None  # row tombstone

    @property
    def has_cells(self) -> bool:
        return bool(self.atomic or self.multi)


@dataclass(frozen=True)
class RangeTombstone:
    start: Key  # clustering prefix; () is unbounded
    start_inclusive: bool
    end: Key
    end_inclusive: bool
    ts: int


@dataclass
class Mutation:
    """One partition's changes, as ScyllaDB's coordinator merges a batch's statements."""

    partition_key: Row
    static: RowChange = field(default_factory=RowChange)
    rows: dict[Key, RowChange] = field(default_factory=dict)
    ranges: list[RangeTombstone] = field(default_factory=list)
    tombstone: int | None = None
    row_key: Callable[[Sequence[Any]], Any] = tuple  # the table's clustering order

    def sorted_rows(self) -> list[tuple[Key, RowChange]]:
        """The clustered rows as ``mutation_partition`` keeps them: in clustering order."""
        return sorted(self.rows.items(), key=lambda item: self.row_key(item[0]))


def _merge_cell(into: dict[Any, Cell], path: Any, cell: Cell, where: str) -> None:
    """Cassandra's reconciliation: the newer timestamp wins; at one timestamp a dead cell wins."""
    old = into.get(path)
    if old is None or cell.ts > old.ts or (cell.ts == old.ts and not cell.live and old.live):
        into[path] = cell
    elif cell.ts == old.ts and cell.live and old.live and (cell.value, cell.ttl) != (old.value, old.ttl):
        raise ValueError(f"{where}: two values for one cell at one timestamp in one write are not simulated")


def _later(a: int | None, b: int) -> int:
    return b if a is None else max(a, b)


class _Builder:
    """The cells of base statements (``cql3`` setters, adders, deleters) merged into a mutation."""

    def __init__(
        self, shape: TableShape, default_ts: int, default_ttl: int | None, list_keys: ListKeys | None, node: int
    ) -> None:
        self.shape = shape
        self.default_ts = default_ts
        self.default_ttl = default_ttl
        self.mutation: Mutation | None = None
        self.node = node
        self.list_sequence = 0  # query_options::next_list_append_seq(), across the write's statements
        self.list_keys = {where: list(keys) for where, keys in (list_keys or {}).items()}

    def add(self, op: Operation) -> None:
        ts = op.timestamp_us if op.timestamp_us is not None else self.default_ts
        ttl = op.ttl_s if op.ttl_s is not None else (self.default_ttl or 0)
        shape = self.shape
        if isinstance(op, DeletePartition):
            self._partition(op.partition_key).tombstone = _later(self._partition(op.partition_key).tombstone, ts)
        elif isinstance(op, DeleteRange):
            self._range(op, ts)
        elif isinstance(op, DeleteRow):
            mutation = self._partition(op.key)
            if not shape.clustering:
                mutation.tombstone = _later(mutation.tombstone, ts)
            else:
                row = self._row(mutation, op.key)
                row.deleted_at = _later(row.deleted_at, ts)
        elif isinstance(op, Insert):
            mutation = self._partition(op.row)
            values = {n: v for n, v in op.row.items() if n not in shape.partition_key and n not in shape.clustering}
            regular = {n: v for n, v in values.items() if n not in shape.static}
            static = {n: v for n, v in values.items() if n in shape.static}
            if all(n in op.row for n in shape.clustering):
                row = self._row(mutation, op.row)
                marker = (ts, ttl)
                if row.marker is None or row.marker[0] < ts:
                    row.marker = marker
                elif row.marker[0] == ts and row.marker != marker:
                    raise ValueError("two row markers at one timestamp in one write are not simulated")
                self._assign(row, regular, ts, ttl, self._key(op.row))
            elif regular:
                raise ValueError(f"an INSERT of regular columns {sorted(regular)} needs the whole primary key")
            self._assign(mutation.static, static, ts, ttl, None)
        elif isinstance(op, Update):
            mutation = self._partition(op.key)
            static = {n: v for n, v in op.values.items() if n in shape.static}
            regular = {n: v for n, v in op.values.items() if n not in shape.static}
            if regular:
                self._assign(self._row(mutation, op.key), regular, ts, ttl, self._key(op.key))
            self._assign(mutation.static, static, ts, ttl, None)
        else:
            mutation = self._partition(op.key)
            for name in op.columns:
                target = mutation.static if name in shape.static else self._row(mutation, op.key)
                if shape.columns[name] == "atomic":
                    _merge_cell(target.atomic, name, Cell(ts, 0, None), name)
                else:
                    multi = target.multi.setdefault(name, MultiCell())
                    multi.tombstone = _later(multi.tombstone, ts)  # constants::deleter: make_tombstone()

    def _partition(self, source: Mapping[str, Any]) -> Mutation:
        key = {n: source[n] for n in self.shape.partition_key}
        if self.mutation is None:
            self.mutation = Mutation(key, row_key=self.shape.row_key())
        elif self.mutation.partition_key != key:
            raise ValueError("one write touches one partition; use several writes for several partitions")
        return self.mutation

    def _row(self, mutation: Mutation, source: Mapping[str, Any]) -> RowChange:
        missing = [n for n in self.shape.clustering if n not in source]
        if missing:
            raise ValueError(f"a row change needs the clustering columns {missing}")
        return mutation.rows.setdefault(tuple(source[n] for n in self.shape.clustering), RowChange())

    def _range(self, op: DeleteRange, ts: int) -> None:
        mutation = self._partition(op.partition_key)
        prefix = tuple(op.prefix[n] for n in self.shape.clustering[: len(op.prefix)])
        if not prefix and op.start is None and op.end is None:
            mutation.tombstone = _later(mutation.tombstone, ts)  # the full range: a partition tombstone
            return
        start = prefix + ((op.start[0],) if op.start is not None else ())
        end = prefix + ((op.end[0],) if op.end is not None else ())
        start_inclusive = op.start[1] if op.start is not None else True
        end_inclusive = op.end[1] if op.end is not None else True
        if len(prefix) == len(self.shape.clustering) and op.start is None and op.end is None:
            row = self._row(mutation, dict(zip(self.shape.clustering, prefix, strict=True)))
            row.deleted_at = _later(row.deleted_at, ts)  # a singular range is a row deletion
            return
        mutation.ranges.append(RangeTombstone(start, start_inclusive, end, end_inclusive, ts))

    def _key(self, source: Mapping[str, Any]) -> Key:
        return tuple(source[n] for n in self.shape.clustering)

    def _assign(self, row: RowChange, values: Mapping[str, Any], ts: int, ttl: int, key: Key | None) -> None:
        for name, change in values.items():
            kind = self.shape.columns[name]
            if kind == "atomic":
                value = change.value if isinstance(change, Overwrite) else change
                _merge_cell(row.atomic, name, Cell(ts, ttl if value is not None else 0, value), name)
                continue
            multi = row.multi.setdefault(name, MultiCell())
            if isinstance(change, Add):
                for path, value in self._paths(name, kind, change.elements, ts, key):
                    _merge_cell(multi.cells, path, Cell(ts, ttl, value), name)
            elif isinstance(change, Remove):
                if kind not in ("set", "map"):
                    raise ValueError(f"{name}: removing elements is simulated for sets and maps only")
                for element in change.elements:
                    _merge_cell(multi.cells, element, Cell(ts, 0, None), name)
            elif isinstance(change, SetFields):
                fields = self.shape.udt_fields[name]
                for field_name, value in change.fields.items():
                    cell = Cell(ts, ttl if value is not None else 0, value)
                    _merge_cell(multi.cells, fields.index(field_name), cell, name)
            else:
                # A setter: a tombstone just before the write, then the new elements
                # (update_parameters::make_tombstone_just_before in lists/maps/sets/user_types).
                value = change.value if isinstance(change, Overwrite) else change
                multi.tombstone = _later(multi.tombstone, ts - 1)
                for path, element in self._paths(name, kind, value, ts, key):
                    _merge_cell(multi.cells, path, Cell(ts, ttl, element), name)

    def _paths(self, name: str, kind: ColumnKind, value: Any, ts: int, key: Key | None) -> Iterator[tuple[Any, Any]]:
        """A collection or user-type value as (path, element) cells; nulls make no cell. A list's
        cells are keyed as the base table keys them when ``list_keys`` says (the keys its
        coordinator chose), else as ScyllaDB's coordinator makes them."""
        if value is None:
            return
        if kind == "set":
            yield from ((element, True) for element in value)
        elif kind == "map":
            yield from dict(value).items()
        elif kind == "list":
            taken = self.list_keys.get((key, name))
            for element in value:
                if taken:
                    yield taken.pop(0), element
                else:
                    yield scylla_list_key(ts, self.list_sequence, self.node), element
                    self.list_sequence += 1
        else:
            fields = self.shape.udt_fields[name]
            items = value.items() if isinstance(value, Mapping) else zip(fields, value, strict=False)
            for field_name, element in items:
                if element is not None:
                    yield fields.index(field_name), element


def build_mutation(
    shape: TableShape,
    operations: Sequence[Operation],
    timestamp_us: int,
    ttl_s: int | None,
    *,
    list_keys: ListKeys | None = None,
    node: int = 0,
) -> Mutation:
    """The mutation ScyllaDB's coordinator makes of a batch of ``operations`` on one partition
    (``node``: its spoofed node id, in the keys of list cells it makes; ``list_keys``: the keys
    the base table gave each row's list cells, which take their place)."""
    builder = _Builder(shape, timestamp_us, ttl_s, list_keys, node)
    for op in operations:
        builder.add(op)
    if builder.mutation is None:
        raise ValueError("a write needs at least one operation")
    # range_tombstone_list keeps range deletions by their start (mutation_partition.hh)
    builder.mutation.ranges.sort(key=functools.cmp_to_key(lambda a, b: _compare_starts(shape, a, b)))
    return builder.mutation


def _compare_starts(shape: TableShape, a: RangeTombstone, b: RangeTombstone) -> int:
    """Two range deletions by where they start (``position_in_partition``): an open start first;
    an inclusive start before anything it prefixes, an exclusive one after."""
    common = min(len(a.start), len(b.start))
    found = shape.compare_prefix(a.start[:common], b.start[:common])
    if found or len(a.start) == len(b.start):
        return found or (int(not a.start_inclusive) - int(not b.start_inclusive))
    shorter = a if len(a.start) < len(b.start) else b
    shorter_first = -1 if shorter.start_inclusive or not shorter.start else 1
    return shorter_first if shorter is a else -shorter_first


# --- the pre-image read (cdc/log.cc transformer::pre_image_select) --------------------------------


@dataclass(frozen=True)
class PreimageSelect:
    """What ScyllaDB reads before logging a mutation: the static columns and regular columns it
    selects, and which rows (``rows`` None: the whole partition, for tables without clustering
    columns or a static row alone)."""

    static_columns: tuple[str, ...]
    regular_columns: tuple[str, ...]
    rows: tuple[Key, ...] | None
    static_only: bool


def _no_ck_partition_deletion(shape: TableShape, mutation: Mutation) -> bool:
    return not shape.clustering and mutation.tombstone is not None


def preimage_select(shape: TableShape, mutation: Mutation) -> PreimageSelect | None:
    """The read, or None when ScyllaDB reads nothing (no images, or no row and no static row)."""
    if not (shape.preimage or shape.postimage):
        return None
    no_ck_deletion = _no_ck_partition_deletion(shape, mutation)
    has_static = mutation.static.has_cells
    if not mutation.rows and not has_static and not no_ck_deletion:
        return None
    every = shape.postimage or shape.preimage == "full"
    static_columns: list[str] = []
    if has_static:
        static_columns = shape.of_kind(static=True) if every else _cell_columns(shape, mutation.static)
    regular_columns: list[str] = []
    if mutation.rows or no_ck_deletion:
        row_deleted = any(r.deleted_at is not None for r in mutation.rows.values())
        if row_deleted or every or no_ck_deletion:
            regular_columns = shape.regular
        else:
            # "this assumes all mutations touch the same set of columns": the first row's
            regular_columns = _cell_columns(shape, mutation.sorted_rows()[0][1])
    static_only = has_static and not mutation.rows
    rows = None if (not shape.clustering or static_only) else tuple(k for k, _ in mutation.sorted_rows())
    return PreimageSelect(tuple(static_columns), tuple(regular_columns), rows, static_only)


def _cell_columns(shape: TableShape, row: RowChange) -> list[str]:
    return [n for n in shape.columns if n in row.atomic or n in row.multi]


@dataclass
class ImageState:
    """``_static_row_state`` and ``_clustering_row_states``: non-null column values by row, from
    the pre-image read, then as the logged changes leave them."""

    static: dict[str, Any] = field(default_factory=dict)
    rows: dict[Key, dict[str, Any]] = field(default_factory=dict)


# --- records ------------------------------------------------------------------------------------------------


@dataclass
class LogRecord:
    """One ``cdc$time``: its timestamp and rows in ``cdc$batch_seq_no`` order (each row holds
    ``cdc$operation``, ``cdc$ttl`` when set, keys and value columns; stream, time, sequence
    and ``cdc$end_of_batch`` are the writer's)."""

    ts: int
    rows: list[Row] = field(default_factory=list)


@dataclass
class _Entry:
    """A non-atomic column's part of one bucket (split.cc ``nonatomic_column_update``)."""

    name: str
    tombstone: bool = False
    cells: list[tuple[Any, Cell]] = field(default_factory=list)


@dataclass
class _Piece:
    """One change of a bucket: a static update, clustered insert or update of one TTL."""

    ttl: int
    key: Key | None  # None: the static row
    marker: tuple[int, int] | None = None
    atomic: list[tuple[str, Cell]] = field(default_factory=list)
    entries: list[_Entry] = field(default_factory=list)

    def as_row(self) -> RowChange:
        row = RowChange(marker=self.marker)
        for name, cell in self.atomic:
            row.atomic[name] = cell
        for entry in self.entries:
            multi = row.multi.setdefault(entry.name, MultiCell())
            if entry.tombstone:
                multi.tombstone = 0
            for path, cell in entry.cells:
                multi.cells[path] = cell
        return row


@dataclass
class _Batch:
    """Changes of one timestamp by type (split.cc ``struct batch``)."""

    static_updates: list[_Piece] = field(default_factory=list)
    inserts: list[_Piece] = field(default_factory=list)
    updates: list[_Piece] = field(default_factory=list)
    row_deletions: list[Key] = field(default_factory=list)
    range_deletions: list[RangeTombstone] = field(default_factory=list)
    partition_deletion: bool = False


def _should_split(mutation: Mutation) -> bool:
    """split.cc ``should_split_visitor`` over ``inspect_mutation``'s visiting order."""
    seen: dict[str, Any] = {"ts": None, "ttl": None}
    had_static = had_clustered = had_upsert = had_marker = had_range = False

    def differs(ts: int, ttl: int = 0) -> bool:
        if seen["ts"] is not None and seen["ts"] != ts:
            return True
        if seen["ttl"] is not None and seen["ttl"] != ttl:
            return True
        seen["ts"], seen["ttl"] = ts, ttl
        return False

    def cells_split(row: RowChange) -> bool:
        for cell in row.atomic.values():
            if differs(cell.ts, cell.ttl):
                return True
        for multi in row.multi.values():
            if multi.tombstone is not None and differs(multi.tombstone + 1):
                return True
            for cell in multi.cells.values():
                if cell.live and had_marker:
                    return True  # "nonatomic updates cannot be expressed with an INSERT"
                if differs(cell.ts, cell.ttl):
                    return True
        return False

    if mutation.static.has_cells:
        had_static = True
        if cells_split(mutation.static):
            return True
    for _, row in mutation.sorted_rows():
        if row.marker is not None or row.has_cells:
            if had_static:
                return True
            had_clustered = had_upsert = True
            if row.marker is not None:
                had_marker = True
                if differs(*row.marker):
                    return True
            if cells_split(row):
                return True
        if row.deleted_at is not None:
            if had_static or had_upsert:
                return True
            had_clustered = True
            if differs(row.deleted_at):
                return True
    for tombstone in mutation.ranges:
        if had_static or had_clustered:
            return True
        had_range = True
        if differs(tombstone.ts):
            return True
    if mutation.tombstone is not None and (had_range or had_static or had_clustered):
        return True
    return seen["ts"] is None  # nothing timestamped (a bare partition deletion) is split


def _buckets(row: RowChange) -> dict[tuple[int, int], _Piece]:
    """split.cc ``extract_row_visitor``: a row's cells by (timestamp, TTL); a collection
    tombstone at ``t`` goes to ``(t + 1, 0)``."""
    found: dict[tuple[int, int], _Piece] = {}

    def piece(ts: int, ttl: int) -> _Piece:
        return found.setdefault((ts, ttl), _Piece(ttl, None))

    if row.marker is not None:
        piece(*row.marker)
    for name, cell in row.atomic.items():
        piece(cell.ts, cell.ttl).atomic.append((name, cell))
    for name, multi in row.multi.items():

        def entry(ts: int, ttl: int, name: str = name) -> _Entry:
            entries = piece(ts, ttl).entries
            if not entries or entries[-1].name != name:
                entries.append(_Entry(name))
            return entries[-1]

        if multi.tombstone is not None:
            entry(multi.tombstone + 1, 0).tombstone = True
        for path, cell in sorted(multi.cells.items(), key=lambda item: _path_order(item[0])):
            entry(cell.ts, cell.ttl).cells.append((path, cell))
    return dict(sorted(found.items()))


def _path_order(path: Any) -> Any:
    """A collection's cells in key order: a list's cells by their timeuuid keys' comparator
    (``cdc/change_visitor.hh``: "cells are visited in order of increasing keys")."""
    if isinstance(path, uuid.UUID):
        return functools.cmp_to_key(lambda a, b: compare_values("timeuuid", a, b))(path)
    return path


def _extract_changes(mutation: Mutation) -> dict[int, _Batch]:
    """split.cc ``extract_changes_visitor``: the mutation's changes by timestamp and type."""
    result: dict[int, _Batch] = {}

    def batch(ts: int) -> _Batch:
        return result.setdefault(ts, _Batch())

    if mutation.static.has_cells:
        for (ts, ttl), piece in _buckets(mutation.static).items():
            batch(ts).static_updates.append(_Piece(ttl, None, None, piece.atomic, piece.entries))
    for key, row in mutation.sorted_rows():
        if row.marker is not None or row.has_cells:
            for (ts, ttl), piece in _buckets(row).items():
                if row.marker is not None and (ts, ttl) == row.marker:
                    # An INSERT of a collection always writes its tombstone: entries with one stay
                    # in the insert; cells alone need an update of their own (one for all columns).
                    with_tombstone = [e for e in piece.entries if e.tombstone]
                    cells_only = [e for e in piece.entries if not e.tombstone]
                    batch(ts).inserts.append(_Piece(ttl, key, row.marker, piece.atomic, with_tombstone))
                    if cells_only:
                        batch(ts).updates.append(_Piece(ttl, key, None, [], cells_only))
                else:
                    batch(ts).updates.append(_Piece(ttl, key, None, piece.atomic, piece.entries))
        if row.deleted_at is not None:
            batch(row.deleted_at).row_deletions.append(key)
    for tombstone in mutation.ranges:
        batch(tombstone.ts).range_deletions.append(tombstone)
    if mutation.tombstone is not None:
        batch(mutation.tombstone).partition_deletion = True
    return dict(sorted(result.items()))


def _first_timestamp(mutation: Mutation) -> int:
    """split.cc ``find_timestamp``: the first timestamp in visiting order."""
    rows = ([mutation.static] if mutation.static.has_cells else []) + [r for _, r in mutation.sorted_rows()]
    for row in rows:
        if row.marker is not None:
            return row.marker[0]
        for cell in row.atomic.values():
            return cell.ts
        for multi in row.multi.values():
            if multi.tombstone is not None:
                return multi.tombstone + 1
            for cell in multi.cells.values():
                return cell.ts
        if row.deleted_at is not None:
            return row.deleted_at
    for tombstone in mutation.ranges:
        return tombstone.ts
    assert mutation.tombstone is not None
    return mutation.tombstone


class _Transformer:
    """cdc/log.cc ``transformer``: log rows of each record, and the row states images come from."""

    def __init__(self, shape: TableShape, mutation: Mutation, state: ImageState, system_originated: bool) -> None:
        self.shape = shape
        self.partition_key = mutation.partition_key
        self.state = state
        self.system_originated = system_originated
        self.records: list[LogRecord] = []
        self.updating = False
        self.touched_static = False

    def begin(self, ts: int, is_last: bool) -> None:
        self.records.append(LogRecord(ts))
        self.updating = self.shape.postimage or (not is_last and bool(self.shape.preimage))

    def _row(self, operation: int, key: Key | None = None) -> Row:
        """A new log row: every row carries the partition key; clustered rows (and range bounds)
        their clustering columns, or prefix (log_mutation_builder::allocate_new_log_row)."""
        row: Row = {"cdc$operation": operation, **self.partition_key}
        if key is not None:
            row.update(zip(self.shape.clustering, key, strict=False))
        self.records[-1].rows.append(row)
        return row

    # --- images ---------------------------------------------------------------------------------

    def preimage(self, key: Key | None, columns: Sequence[str]) -> None:
        self._image(0, key, None if self.shape.preimage == "full" else columns)

    def postimage(self, key: Key | None) -> None:
        self._image(9, key, None)

    def _image(self, operation: int, key: Key | None, columns: Sequence[str] | None) -> None:
        """log.cc ``generate_image`` (lines 1841-1912): one kind of column, the static row's static
        columns or a clustered row's regular ones (line 1849); a post-image every column of that
        kind (1909), a pre-image the affected ones (1901-1906) or, ``full``, all of that kind; a
        null flagged ``cdc$deleted_X`` in pre-images only (1887-1897)."""
        if key is not None:
            state = self.state.rows.get(key)
            if state is None:
                return  # no such row: no image
        else:
            state = self.state.static
            if not state and not self.touched_static:
                return
        included = columns if columns is not None else self.shape.of_kind(static=key is None)
        row = self._row(operation, key)
        for name in included:
            value = state.get(name)
            if value is not None:
                if self.shape.columns[name] == "list":
                    raise ValueError(f"{name}: images of non-frozen lists are not simulated")
                row[name] = _log_value(value)
            elif operation == 0:
                row[DELETED_PREFIX + name] = True  # only pre-images flag nulls: post-images are whole

    # --- deltas (process_change_visitor) ----------------------------------------------------------

    def change(self, key: Key | None, row: RowChange) -> None:
        """A static row (key None) or a clustered row's cells, then its row tombstone."""
        if key is None:
            self.touched_static = True
            self._cells(self._row(1), None, row)
            return
        if row.marker is not None or row.has_cells:
            log_row = self._row(2 if row.marker is not None else 1, key)
            self._cells(log_row, key, row)
            if self.updating:
                self.state.rows.setdefault(key, {})  # #7716: a row of keys alone still has an image
        if row.deleted_at is not None:
            self._row(-3 if self.system_originated else 3, key)
            if self.updating:
                self.state.rows.pop(key, None)

    def range_deletion(self, tombstone: RangeTombstone) -> None:
        self._row(5 if tombstone.start_inclusive else 6, tombstone.start)
        self._row(7 if tombstone.end_inclusive else 8, tombstone.end)
        if self.updating:
            for key in [k for k in self.state.rows if _in_range(self.shape, k, tombstone)]:
                del self.state.rows[key]

    def partition_deletion(self) -> None:
        self._row(-4 if self.system_originated else 4)
        if self.updating:
            self.state.rows.clear()

    def _cells(self, log_row: Row, key: Key | None, row: RowChange) -> None:
        """A row's delta columns (log.cc process_row_visitor). ``delta: keys`` writes none of the
        values, ``cdc$deleted_X`` or ``cdc$deleted_elements_X`` (``generate_delta_values``, lines
        1207-1209, checked at 1294, 1306 and 1441), while ``cdc$ttl`` (lines 1525, 1576) and the
        state images are built from stay as in ``full``."""
        values = log_row if self.shape.delta == "full" else {}
        ttl: int | None = None
        if row.marker is not None:
            ttl = row.marker[1] or None  # the row marker's TTL (log.cc lines 1540-1541)
        state = self.state.static if key is None else None
        for name, cell in row.atomic.items():
            if cell.live:
                ttl = cell.ttl or None
                values[name] = cell.value
            else:
                values[DELETED_PREFIX + name] = True
            state = self._update_state(state, key, name, cell.value)
        for name, multi in row.multi.items():
            kind = self.shape.columns[name]
            live = [(p, c) for p, c in sorted(multi.cells.items(), key=lambda i: _path_order(i[0])) if c.live]
            dead = {p for p, c in multi.cells.items() if not c.live}
            if live:
                ttl = live[-1][1].ttl or None
            added = self._added(name, kind, live)
            if multi.tombstone is not None:
                values[DELETED_PREFIX + name] = True
            if dead:
                values[DELETED_ELEMENTS_PREFIX + name] = dead
            if added is not None:
                values[name] = added
            if self.updating:
                current = state if state is not None else self.state.rows.get(key) if key is not None else None
                previous = None if multi.tombstone is not None or current is None else current.get(name)
                if kind == "list" and previous is not None:
                    raise ValueError(f"{name}: images of non-frozen lists are not simulated")
                merged = None
                if added is not None or (dead and previous is not None):
                    merged = _merge(kind, previous, added, dead)
                state = self._update_state(state, key, name, merged)
        if ttl is not None:
            log_row["cdc$ttl"] = ttl

    def _update_state(
        self, state: dict[str, Any] | None, key: Key | None, name: str, value: Any
    ) -> dict[str, Any] | None:
        if not self.updating:
            return state
        if state is None:
            assert key is not None
            state = self.state.rows.setdefault(key, {})
        state[name] = value
        return state

    def _added(self, name: str, kind: ColumnKind, live: list[tuple[Any, Cell]]) -> Any:
        if kind == "udt":
            # The value is built from a vector with one slot per field: whenever the column is
            # touched it is a user-type value, its untouched fields null (log.cc udt_visitor).
            fields: list[Any] = [None] * len(self.shape.udt_fields[name])
            for path, cell in live:
                fields[path] = cell.value
            return tuple(fields)
        if not live:
            return None
        if kind == "set":
            return {p for p, _ in live}
        return {p: c.value for p, c in live}


def _merge(kind: ColumnKind, previous: Any, added: Any, removed: set[Any]) -> Any:
    """log.cc ``merge``: an image's new value from the previous one, what was added and removed."""
    if kind == "udt":
        size = len(added) if added is not None else len(previous)
        fields = list(previous) if previous is not None else [None] * size
        for index, value in enumerate(added or ()):
            if value is not None:
                fields[index] = value
        for index in removed:
            fields[index] = None
        return tuple(fields)
    if kind == "set":
        return (set(previous or ()) | set(added or ())) - removed
    merged = {**dict(previous or {}), **dict(added or {})}
    return {k: v for k, v in merged.items() if k not in removed}


def _log_value(value: Any) -> Any:
    if isinstance(value, set | frozenset):
        return set(value)
    if isinstance(value, Mapping):
        return dict(value)
    return value


def _in_range(shape: TableShape, key: Key, tombstone: RangeTombstone) -> bool:
    """Whether the range deletion covers the row ``key``, by the clustering comparator."""
    from_start = shape.compare_prefix(key[: len(tombstone.start)], tombstone.start)
    to_end = shape.compare_prefix(key[: len(tombstone.end)], tombstone.end)
    after_start = from_start > 0 or (from_start == 0 and tombstone.start_inclusive)
    before_end = to_end < 0 or (to_end == 0 and tombstone.end_inclusive)
    return after_start and before_end


def _affected_rows(shape: TableShape, batch: _Batch, has_partition_deletion: bool) -> dict[Key, list[str]]:
    """split.cc ``get_affected_clustered_columns_per_row``: in clustering order."""
    affected: dict[Key, set[str]] = {}
    for key in batch.row_deletions:
        affected[key] = set(shape.regular)
    if has_partition_deletion and not shape.clustering:
        # Since 2026.1 (scylladb#26382): a table without clustering columns logs a pre-image of
        # its row, all columns, before a partition deletion.
        affected.setdefault((), set()).update(shape.regular)
    for piece in batch.inserts + batch.updates:
        assert piece.key is not None
        columns = affected.setdefault(piece.key, set())
        columns.update(n for n, _ in piece.atomic)
        columns.update(e.name for e in piece.entries)
    return {k: [n for n in shape.regular if n in affected[k]] for k in sorted(affected, key=shape.row_key())}


def log_records(
    shape: TableShape, mutation: Mutation, state: ImageState, *, system_originated: bool = False
) -> list[LogRecord]:
    """The log records ScyllaDB writes for ``mutation`` given the pre-image read's ``state``
    (which the images consume). ``system_originated``: a deletion ScyllaDB made itself (the
    expiration service of Alternator TTL and, since 2026.2, CQL per-row TTL): -3 / -4."""
    transformer = _Transformer(shape, mutation, state, system_originated)
    if _should_split(mutation):
        _with_splitting(shape, mutation, transformer)
    else:
        _without_splitting(shape, mutation, transformer)
    return transformer.records


def _with_splitting(shape: TableShape, mutation: Mutation, transformer: _Transformer) -> None:
    changes = _extract_changes(mutation)
    last = max(changes)
    images = bool(shape.preimage or shape.postimage)
    for ts, batch in changes.items():
        static_columns: list[str] = []
        rows: dict[Key, list[str]] = {}
        if images:
            touched: set[str] = set()
            for piece in batch.static_updates:
                touched.update(name for name, _ in piece.atomic)
                touched.update(entry.name for entry in piece.entries)
            static_columns = [n for n in shape.of_kind(static=True) if n in touched]
            rows = _affected_rows(shape, batch, batch.partition_deletion)
        transformer.begin(ts, ts == last)
        if shape.preimage:
            if static_columns:
                transformer.preimage(None, static_columns)
            for key, columns in rows.items():
                transformer.preimage(key, columns)
        for piece in batch.static_updates:
            transformer.change(None, piece.as_row())
        for piece in batch.inserts + batch.updates:
            transformer.change(piece.key, piece.as_row())
        for key in batch.row_deletions:
            transformer.change(key, RowChange(deleted_at=ts))
        for tombstone in batch.range_deletions:
            transformer.range_deletion(tombstone)
        if batch.partition_deletion:
            transformer.partition_deletion()
        if shape.postimage:
            if static_columns:
                transformer.postimage(None)
            for key in rows:
                transformer.postimage(key)


def _without_splitting(shape: TableShape, mutation: Mutation, transformer: _Transformer) -> None:
    transformer.begin(_first_timestamp(mutation), True)
    rows = mutation.sorted_rows()
    if shape.preimage:
        if mutation.static.has_cells:
            transformer.preimage(None, _cell_columns(shape, mutation.static))
        for key, row in rows:
            transformer.preimage(key, shape.regular if row.deleted_at is not None else _cell_columns(shape, row))
    if mutation.static.has_cells:
        transformer.change(None, mutation.static)
    for key, row in rows:
        transformer.change(key, row)
    for tombstone in mutation.ranges:
        transformer.range_deletion(tombstone)
    if mutation.tombstone is not None:
        transformer.partition_deletion()
    if shape.postimage:
        if mutation.static.has_cells:
            transformer.postimage(None)
        for key, _ in rows:
            transformer.postimage(key)


def load_state(
    select: PreimageSelect,
    static_row: Mapping[str, Any] | None,
    rows: Iterable[tuple[Key, Mapping[str, Any]]],
    convert: Callable[[str, Any], Any],
) -> ImageState:
    """``load_preimage_results_into_state``: the selected columns' non-null values of the rows
    the read found (``convert`` turns a driver value into the state's form)."""
    state = ImageState()
    if static_row is not None:
        state.static = {n: convert(n, static_row[n]) for n in select.static_columns if static_row.get(n) is not None}
    if select.static_only:
        return state
    for key, values in rows:
        state.rows[key] = {n: convert(n, values[n]) for n in select.regular_columns if values.get(n) is not None}
    return state
