//! Mutations (Cassandra's messaging serialisation, versions 12 and 13) decoded straight to row
//! changes, mirroring `cdcflow.sources.cassandra_commitlog.mutation` and `.changes`.
//!
//! A mutation is parsed into spans over its bytes first (no Python object), then the wanted
//! partition updates become `RowChange` objects. Anything unexpected declines the mutation, and
//! the reference decodes it: it gives the same changes or raises the error cdcflow stores.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

use super::values::{int, int128, read_unsigned_vint, write_uuid_text, CqlType, Decline, Kind, R};
use crate::batch::{Datum, Value};
use crate::envelopes::write_ascii_text;
use crate::objects::RecordClass;

const TIMESTAMP_EPOCH_US: u64 = 1_442_880_000_000_000;

// Partition flags.
const IS_EMPTY: u8 = 0x01;
const HAS_PARTITION_DELETION: u8 = 0x04;
const HAS_STATIC_ROW: u8 = 0x08;
const HAS_ROW_ESTIMATE: u8 = 0x10;
// Unfiltered flags.
const END_OF_PARTITION: u8 = 0x01;
const IS_MARKER: u8 = 0x02;
const HAS_TIMESTAMP: u8 = 0x04;
const HAS_TTL: u8 = 0x08;
const HAS_DELETION: u8 = 0x10;
const HAS_ALL_COLUMNS: u8 = 0x20;
const HAS_COMPLEX_DELETION: u8 = 0x40;
const EXTENSION_FLAG: u8 = 0x80;
const IS_STATIC: u8 = 0x01;
// Cell flags.
const CELL_DELETED: u8 = 0x01;
const CELL_EXPIRING: u8 = 0x02;
const CELL_EMPTY: u8 = 0x04;
const CELL_ROW_TIMESTAMP: u8 = 0x08;
const CELL_ROW_TTL: u8 = 0x10;

// ClusteringPrefix.Kind ordinals.
const INCL_START: u8 = 1;
const EXCL_END_INCL_START: u8 = 2;
const INCL_END_EXCL_START: u8 = 5;
const INCL_END: u8 = 6;
const BOUND_KINDS: u8 = 8;

/// A hasher for the decoder's small maps (table ids, a table's column headers), keyed by what
/// no one chooses to collide: cheaper than the default SipHash, which is built to resist that.
#[derive(Default)]
pub struct FastHasher(u64);

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.write_u64(*byte as u64);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = (self.0.rotate_left(5) ^ value).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_usize(&mut self, value: usize) {
        self.write_u64(value as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

pub type FastHash = BuildHasherDefault<FastHasher>;
pub type FastMap<K, V> = HashMap<K, V, FastHash>;

/// A byte range of the mutation.
#[derive(Clone, Copy, Default)]
struct Span {
    start: usize,
    end: usize,
}

impl Span {
    fn of<'a>(&self, data: &'a [u8]) -> &'a [u8] {
        &data[self.start..self.end]
    }
}

struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn byte(&mut self) -> R<u8> {
        let value = *self.data.get(self.pos).ok_or(Decline("byte past the end"))?;
        self.pos += 1;
        Ok(value)
    }

    fn uvint(&mut self) -> R<u64> {
        let (value, next) = read_unsigned_vint(self.data, self.pos)?;
        self.pos = next;
        Ok(value)
    }

    /// `writeUnsignedVInt32` sign-extends a negative int to a 64-bit vint; read back as signed.
    fn uvint32(&mut self) -> R<i64> {
        Ok(self.uvint()? as i64)
    }

    fn take(&mut self, size: i64) -> R<Span> {
        if size < 0 {
            return Err(Decline("negative length"));
        }
        let end = self.pos.checked_add(size as usize).ok_or(Decline("length overflows"))?;
        if end > self.data.len() {
            return Err(Decline("value runs past the mutation's end"));
        }
        let span = Span { start: self.pos, end };
        self.pos = end;
        Ok(span)
    }

    fn value(&mut self, fixed_length: i64) -> R<Span> {
        let size = if fixed_length >= 0 {
            fixed_length
        } else {
            self.uvint32()?
        };
        self.take(size)
    }
}

#[derive(Clone, Copy)]
struct Deletion {
    marked_for_delete_at: i64,
}

struct Stats {
    min_timestamp: u64,
    min_ttl: i64,
}

impl Stats {
    fn timestamp(&self, cursor: &mut Cursor) -> R<i64> {
        Ok(cursor.uvint()?.wrapping_add(self.min_timestamp) as i64)
    }

    // Read for its bytes: row changes do not carry local deletion times.
    fn local_deletion_time(&self, cursor: &mut Cursor) -> R<()> {
        cursor.uvint32()?;
        Ok(())
    }

    fn ttl(&self, cursor: &mut Cursor) -> R<i128> {
        Ok(cursor.uvint32()? as i128 + self.min_ttl as i128)
    }

    fn deletion(&self, cursor: &mut Cursor) -> R<Deletion> {
        let marked_for_delete_at = self.timestamp(cursor)?;
        self.local_deletion_time(cursor)?;
        Ok(Deletion { marked_for_delete_at })
    }
}

pub struct Column {
    pub name: Py<PyString>,
    pub cql: CqlType,
}

/// What the decoder needs of a `TableSchema`.
pub struct Table {
    pub id: [u8; 16],
    pub schema: Py<PyAny>,
    pub keyspace: Py<PyString>,
    pub table: Py<PyString>,
    pub partition_key: Vec<Column>,
    pub clustering: Vec<Column>,
    /// Static and regular columns, then dropped ones the table no longer has.
    pub columns: Vec<Column>,
    pub by_name: HashMap<Vec<u8>, usize>,
    /// `keyspace == "system_schema"`: such updates feed schema-change events, left to the reference.
    pub schema_table: bool,
    /// Where each of `columns` sits among the events' value columns (`TableSchema.row_schema`:
    /// the key columns, then the current columns by name); None for a dropped column.
    pub value_positions: Vec<Option<usize>>,
}

impl Table {
    fn key_width(&self) -> usize {
        self.partition_key.len() + self.clustering.len()
    }

    fn value_width(&self) -> usize {
        self.key_width() + self.value_positions.iter().filter(|p| p.is_some()).count()
    }
}

/// One partition update's row changes in compact form, with its raw partition key (for the
/// source's replica filter): `mutation[key.0..key.1]`.
pub struct CompactUpdate {
    pub table: Arc<Table>,
    pub mutation: Arc<[u8]>,
    pub key: (usize, usize),
    pub changes: Vec<CompactChange>,
}

/// One row change in compact form: what `changes.change_event` makes an event of, with the key
/// and the row in the event schema's column order (an untouched column absent).
pub struct CompactChange {
    pub op: u8,
    pub key: Vec<Value>,
    pub after: Option<Vec<Value>>,
    pub ts_us: i64,
    pub headers: Option<Vec<(String, String)>>,
}

struct Cell {
    column: usize,
    timestamp: i64,
    value: Span,
    path: Option<Span>,
    deleted: bool,
    ttl: Option<i128>,
}

struct Row {
    clustering: (usize, usize),
    timestamp: Option<i64>,
    ttl: Option<i128>,
    deletion: Option<Deletion>,
    cells: (usize, usize),
    complex_deletions: (usize, usize),
}

struct Marker {
    kind: u8,
    clustering: (usize, usize),
    deletion: Option<Deletion>,
    end_deletion: Option<Deletion>,
    start_deletion: Option<Deletion>,
}

struct Update {
    table: Arc<Table>,
    key: Span,
    key_parts: Vec<Span>,
    partition_deletion: Option<Deletion>,
    static_row: Option<usize>,
    rows: (usize, usize),
    markers: (usize, usize),
}

/// Parsed spans of one mutation, reused from one mutation to the next.
#[derive(Default)]
struct Arena {
    updates: Vec<Update>,
    rows: Vec<Row>,
    cells: Vec<Cell>,
    markers: Vec<Marker>,
    clustering: Vec<Option<Span>>,
    complex_deletions: Vec<(usize, Deletion)>,
}

impl Arena {
    fn clear(&mut self) {
        self.updates.clear();
        self.rows.clear();
        self.cells.clear();
        self.markers.clear();
        self.clustering.clear();
        self.complex_deletions.clear();
    }
}

/// Where a table's mutations go: decoded, or parsed past.
pub enum Wanted {
    Yes,
    No,
}

/// Looks tables up (and asks whether to decode them) through the source's Python callables.
pub trait Tables {
    /// The table of a 16-byte id; None when the schema has none of that id.
    fn table(&mut self, py: Python<'_>, raw_id: &[u8]) -> R<Option<Arc<Table>>>;
    fn wanted(&mut self, py: Python<'_>, table: &Arc<Table>) -> R<Wanted>;
    /// Whether an id the schema does not know is one the source found dropped (its mutations
    /// are skipped whole, as the reference's reader skips them).
    fn dropped(&mut self, py: Python<'_>, raw_id: &[u8]) -> R<bool>;
}

/// `RowChange`'s fields, in the order the decoder gives them.
const ROW_CHANGE_FIELDS: [&str; 11] = [
    "op", "keyspace", "table", "key", "after", "ts_us", "deletion", "range", "replaced", "removed", "ttl",
];

pub struct MutationDecoder {
    row_change: RecordClass,
    strings: Strings,
    /// Each table's last column header (static, regular): nearly every mutation repeats it.
    headers: FastMap<(usize, bool), (Vec<u8>, Vec<usize>)>,
    arena: Arena,
}

/// Python strings made once.
struct Strings {
    c: Py<PyString>,
    u: Py<PyString>,
    d: Py<PyString>,
    partition: Py<PyString>,
    range: Py<PyString>,
    row: Py<PyString>,
    start: Py<PyString>,
    start_inclusive: Py<PyString>,
    end: Py<PyString>,
    end_inclusive: Py<PyString>,
}

impl MutationDecoder {
    /// Commit-log versions 7 and 8 differ only in how local deletion times are signed, which row
    /// changes do not carry: one decoder reads both.
    pub fn new(py: Python<'_>, row_change: Py<PyAny>) -> Self {
        let intern = |text: &str| PyString::intern(py, text).unbind();
        MutationDecoder {
            row_change: RecordClass::new(py, row_change, &ROW_CHANGE_FIELDS),
            strings: Strings {
                c: intern("c"),
                u: intern("u"),
                d: intern("d"),
                partition: intern("partition"),
                range: intern("range"),
                row: intern("row"),
                start: intern("start"),
                start_inclusive: intern("start_inclusive"),
                end: intern("end"),
                end_inclusive: intern("end_inclusive"),
            },
            headers: FastMap::default(),
            arena: Arena::default(),
        }
    }

    /// The mutation's wanted partition updates as `[(TableSchema, key bytes, [RowChange, ...]), ...]`.
    pub fn decode<'py>(&mut self, py: Python<'py>, data: &[u8], tables: &mut dyn Tables) -> R<Bound<'py, PyList>> {
        // A table the schema does not know: the reference decides (it refreshes the schema, or
        // skips and counts the mutation of a dropped table).
        let wanted_updates = self.parse(py, data, tables, false)?.ok_or(Decline("unknown table"))?;
        let result = PyList::empty(py);
        for index in wanted_updates {
            let update = &self.arena.updates[index];
            let changes = self.row_changes(py, data, update)?;
            let entry = PyTuple::new(
                py,
                [
                    update.table.schema.bind(py).clone(),
                    PyBytes::new(py, update.key.of(data)).into_any(),
                    changes.into_any(),
                ],
            )?;
            result.append(entry)?;
        }
        Ok(result)
    }

    /// The mutation's wanted row changes in compact form, in the order `decode` gives them;
    /// None for a mutation of a table the source found dropped (skipped whole). Declines what
    /// compact changes do not carry (the caller reads those through `decode` and the
    /// reference's events).
    pub fn decode_compact(
        &mut self,
        py: Python<'_>,
        data: &[u8],
        tables: &mut dyn Tables,
    ) -> R<Option<Vec<CompactUpdate>>> {
        let Some(wanted_updates) = self.parse(py, data, tables, true)? else {
            return Ok(None);
        };
        let mut updates = Vec::with_capacity(wanted_updates.len());
        // The values' text stays in (a copy of) the mutation, which they share.
        let shared: Arc<[u8]> = Arc::from(data);
        for index in wanted_updates {
            let update = &self.arena.updates[index];
            let mut changes = Vec::new();
            self.compact_changes(py, &shared, update, &mut changes)?;
            updates.push(CompactUpdate {
                table: update.table.clone(),
                mutation: shared.clone(),
                key: (update.key.start, update.key.end),
                changes,
            });
        }
        Ok(Some(updates))
    }

    /// Parses the mutation into the arena; the indexes of the wanted partition updates. With
    /// `skip_dropped`, None for a mutation naming a table the source found dropped (the
    /// reference's reader skips such a mutation whole); else that declines.
    fn parse(
        &mut self,
        py: Python<'_>,
        data: &[u8],
        tables: &mut dyn Tables,
        skip_dropped: bool,
    ) -> R<Option<Vec<usize>>> {
        self.arena.clear();
        let mut wanted_updates: Vec<usize> = Vec::new();
        let mut cursor = Cursor { data, pos: 0 };
        let count = cursor.uvint32()?;
        if count <= 0 {
            return Err(Decline("mutation without partition updates"));
        }
        let mut finished_early = false;
        for index in 0..count {
            let raw_id = cursor.take(16)?;
            let Some(table) = tables.table(py, raw_id.of(data))? else {
                if skip_dropped && tables.dropped(py, raw_id.of(data))? {
                    return Ok(None);
                }
                return Err(Decline("unknown table")); // the reference raises UnknownTableError
            };
            let wanted = matches!(tables.wanted(py, &table)?, Wanted::Yes);
            if wanted && table.schema_table {
                return Err(Decline(
                    "a system_schema update: schema-change events come from the reference",
                ));
            }
            if !wanted && index == count - 1 {
                finished_early = true; // the reference does not even parse it
                break;
            }
            self.partition_update(&mut cursor, table)?;
            if wanted {
                wanted_updates.push(self.arena.updates.len() - 1);
            }
        }
        if !finished_early && cursor.pos != data.len() {
            return Err(Decline("bytes left after the mutation"));
        }
        Ok(Some(wanted_updates))
    }

    // --- parsing ----------------------------------------------------------------------------------

    fn partition_update(&mut self, cursor: &mut Cursor, table: Arc<Table>) -> R<()> {
        let key_length = cursor.uvint32()?;
        let key = cursor.take(key_length)?;
        let key_parts = split_partition_key(key, cursor.data, table.partition_key.len())?;
        let mut update = Update {
            table: table.clone(),
            key,
            key_parts,
            partition_deletion: None,
            static_row: None,
            rows: (self.arena.rows.len(), self.arena.rows.len()),
            markers: (self.arena.markers.len(), self.arena.markers.len()),
        };
        let flags = cursor.byte()?;
        if flags & IS_EMPTY != 0 {
            self.arena.updates.push(update);
            return Ok(());
        }
        let min_timestamp = cursor.uvint()?.wrapping_add(TIMESTAMP_EPOCH_US);
        cursor.uvint32()?; // the minimum local deletion time: row changes carry none
        let min_ttl = cursor.uvint32()?;
        let stats = Stats { min_timestamp, min_ttl };
        let statics = if flags & HAS_STATIC_ROW != 0 {
            self.columns(cursor, &table, true)?
        } else {
            Vec::new()
        };
        let regulars = self.columns(cursor, &table, false)?;
        if flags & HAS_PARTITION_DELETION != 0 {
            update.partition_deletion = Some(stats.deletion(cursor)?);
        }
        if flags & HAS_STATIC_ROW != 0 {
            let row_flags = cursor.byte()?;
            let extended = if row_flags & EXTENSION_FLAG != 0 {
                cursor.byte()?
            } else {
                0
            };
            if extended & IS_STATIC == 0 {
                return Err(Decline("static row without its static flag"));
            }
            let clustering = (self.arena.clustering.len(), self.arena.clustering.len());
            let row = self.row_body(cursor, &stats, &table, &statics, clustering, row_flags, extended)?;
            self.arena.rows.push(row);
            update.static_row = Some(self.arena.rows.len() - 1);
            update.rows = (self.arena.rows.len(), self.arena.rows.len());
        }
        if flags & HAS_ROW_ESTIMATE != 0 {
            cursor.uvint()?;
        }
        let lengths: Vec<i64> = table.clustering.iter().map(|c| c.cql.fixed_length).collect();
        loop {
            let row_flags = cursor.byte()?;
            if row_flags & END_OF_PARTITION != 0 {
                update.rows.1 = self.arena.rows.len();
                update.markers.1 = self.arena.markers.len();
                self.arena.updates.push(update);
                return Ok(());
            }
            if row_flags & IS_MARKER != 0 {
                let marker = self.marker(cursor, &stats, &lengths)?;
                self.arena.markers.push(marker);
                continue;
            }
            let extended = if row_flags & EXTENSION_FLAG != 0 {
                cursor.byte()?
            } else {
                0
            };
            if extended & IS_STATIC != 0 {
                return Err(Decline("a second static row"));
            }
            let clustering = self.clustering(cursor, lengths.len(), &lengths)?;
            let row = self.row_body(cursor, &stats, &table, &regulars, clustering, row_flags, extended)?;
            self.arena.rows.push(row);
        }
    }

    fn columns(&mut self, cursor: &mut Cursor, table: &Arc<Table>, statics: bool) -> R<Vec<usize>> {
        let slot = (Arc::as_ptr(table) as usize, statics);
        if let Some((header, columns)) = self.headers.get(&slot) {
            if cursor.data[cursor.pos..].starts_with(header) {
                cursor.pos += header.len();
                return Ok(columns.clone());
            }
        }
        let start = cursor.pos;
        let count = cursor.uvint32()?;
        let mut columns = Vec::new();
        for _ in 0..count.max(0) {
            let length = cursor.uvint32()?;
            let name = cursor.take(length)?;
            let index = table
                .by_name
                .get(name.of(cursor.data))
                .ok_or(Decline("a column not in the schema"))?;
            columns.push(*index);
        }
        self.headers
            .insert(slot, (cursor.data[start..cursor.pos].to_vec(), columns.clone()));
        Ok(columns)
    }

    fn clustering(&mut self, cursor: &mut Cursor, size: usize, lengths: &[i64]) -> R<(usize, usize)> {
        let first = self.arena.clustering.len();
        let mut offset = 0usize;
        while offset < size {
            let header = cursor.uvint()?;
            let limit = size.min(offset + 32);
            while offset < limit {
                let shift = (offset * 2) % 64;
                if header & (1u64 << (shift + 1)) != 0 {
                    self.arena.clustering.push(None);
                } else if header & (1u64 << shift) != 0 {
                    self.arena.clustering.push(Some(Span {
                        start: cursor.pos,
                        end: cursor.pos,
                    }));
                } else {
                    let length = *lengths.get(offset).ok_or(Decline("clustering past the table's"))?;
                    let value = cursor.value(length)?;
                    self.arena.clustering.push(Some(value));
                }
                offset += 1;
            }
        }
        Ok((first, self.arena.clustering.len()))
    }

    fn marker(&mut self, cursor: &mut Cursor, stats: &Stats, lengths: &[i64]) -> R<Marker> {
        let kind = cursor.byte()?;
        let size_bytes = cursor.take(2)?.of(cursor.data);
        let size = u16::from_be_bytes([size_bytes[0], size_bytes[1]]) as usize;
        if kind >= BOUND_KINDS || size > lengths.len() {
            return Err(Decline("range tombstone bound out of range"));
        }
        let clustering = if size > 0 {
            self.clustering(cursor, size, lengths)?
        } else {
            (self.arena.clustering.len(), self.arena.clustering.len())
        };
        if kind == EXCL_END_INCL_START || kind == INCL_END_EXCL_START {
            let end = stats.deletion(cursor)?;
            let start = stats.deletion(cursor)?;
            return Ok(Marker {
                kind,
                clustering,
                deletion: None,
                end_deletion: Some(end),
                start_deletion: Some(start),
            });
        }
        let deletion = stats.deletion(cursor)?;
        Ok(Marker {
            kind,
            clustering,
            deletion: Some(deletion),
            end_deletion: None,
            start_deletion: None,
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn row_body(
        &mut self,
        cursor: &mut Cursor,
        stats: &Stats,
        table: &Table,
        header_columns: &[usize],
        clustering: (usize, usize),
        flags: u8,
        extended: u8,
    ) -> R<Row> {
        let _ = extended; // shadowable deletions read like any other
        let mut row = Row {
            clustering,
            timestamp: None,
            ttl: None,
            deletion: None,
            cells: (self.arena.cells.len(), self.arena.cells.len()),
            complex_deletions: (self.arena.complex_deletions.len(), self.arena.complex_deletions.len()),
        };
        if flags & HAS_TIMESTAMP != 0 {
            row.timestamp = Some(stats.timestamp(cursor)?);
            if flags & HAS_TTL != 0 {
                row.ttl = Some(stats.ttl(cursor)?);
                stats.local_deletion_time(cursor)?;
            }
        }
        if flags & HAS_DELETION != 0 {
            row.deletion = Some(stats.deletion(cursor)?);
        }
        let subset;
        let columns: &[usize] = if flags & HAS_ALL_COLUMNS != 0 {
            header_columns
        } else {
            subset = Self::subset(cursor, header_columns)?;
            subset.as_deref().unwrap_or(header_columns)
        };
        let has_complex_deletion = flags & HAS_COMPLEX_DELETION != 0;
        for &column in columns {
            let cql = &table.columns[column].cql;
            if cql.multi_cell {
                if has_complex_deletion {
                    // Once one complex column of the row has a deletion every one carries a
                    // deletion time, LIVE (Long.MIN_VALUE) for those that were only added to.
                    let deletion = stats.deletion(cursor)?;
                    if deletion.marked_for_delete_at != i64::MIN {
                        self.arena.complex_deletions.push((column, deletion));
                    }
                }
                let count = cursor.uvint32()?;
                for _ in 0..count.max(0) {
                    let cell = Self::cell(cursor, stats, column, cql, &row, true)?;
                    self.arena.cells.push(cell);
                }
            } else {
                let cell = Self::cell(cursor, stats, column, cql, &row, false)?;
                self.arena.cells.push(cell);
            }
        }
        row.cells.1 = self.arena.cells.len();
        row.complex_deletions.1 = self.arena.complex_deletions.len();
        Ok(row)
    }

    /// The row's columns when not all are present (None: all of them).
    fn subset(cursor: &mut Cursor, superset: &[usize]) -> R<Option<Vec<usize>>> {
        let encoded = cursor.uvint()?;
        if encoded == 0 {
            return Ok(None);
        }
        let count = superset.len();
        if count < 64 {
            // A bitmap of the columns that are missing.
            return Ok(Some(
                superset
                    .iter()
                    .enumerate()
                    .filter(|(index, _)| encoded >> index & 1 == 0)
                    .map(|(_, c)| *c)
                    .collect(),
            ));
        }
        let present_count = count as i128 - encoded as i128;
        if present_count < (count / 2) as i128 {
            let mut present = Vec::new();
            for _ in 0..present_count.max(0) {
                let index = cursor.uvint32()?;
                // A negative index counts from the end, as a Python list index does.
                let index = if index < 0 { index + count as i64 } else { index };
                if index < 0 || index >= count as i64 {
                    return Err(Decline("column index out of range"));
                }
                present.push(superset[index as usize]);
            }
            return Ok(Some(present));
        }
        let mut missing = Vec::new();
        let mut remaining = encoded;
        while remaining > 0 {
            missing.push(cursor.uvint32()?);
            remaining -= 1;
        }
        Ok(Some(
            superset
                .iter()
                .enumerate()
                .filter(|(index, _)| !missing.contains(&(*index as i64)))
                .map(|(_, c)| *c)
                .collect(),
        ))
    }

    fn cell(
        cursor: &mut Cursor,
        stats: &Stats,
        column: usize,
        cql: &CqlType,
        row: &Row,
        complex_column: bool,
    ) -> R<Cell> {
        let flags = cursor.byte()?;
        let timestamp = if flags & CELL_ROW_TIMESTAMP != 0 {
            row.timestamp
                .ok_or(Decline("a cell uses the row timestamp, the row has none"))?
        } else {
            stats.timestamp(cursor)?
        };
        let deleted = flags & CELL_DELETED != 0;
        let expiring = flags & CELL_EXPIRING != 0;
        let mut ttl = None;
        if flags & CELL_ROW_TTL != 0 {
            ttl = row.ttl;
        } else {
            if deleted || expiring {
                stats.local_deletion_time(cursor)?;
            }
            if expiring {
                ttl = Some(stats.ttl(cursor)?);
            }
        }
        let path = if complex_column {
            let length = cursor.uvint32()?;
            Some(cursor.take(length)?)
        } else {
            None
        };
        let value = if flags & CELL_EMPTY != 0 {
            Span {
                start: cursor.pos,
                end: cursor.pos,
            }
        } else {
            cursor.value(if complex_column { -1 } else { cql.fixed_length })?
        };
        Ok(Cell {
            column,
            timestamp,
            value,
            path,
            deleted,
            ttl,
        })
    }

    // --- row changes --------------------------------------------------------------------------------

    fn row_changes<'py>(&self, py: Python<'py>, data: &[u8], update: &Update) -> R<Bound<'py, PyList>> {
        let table = &update.table;
        let changes = PyList::empty(py);
        let partition_key = self.partition_key(py, data, update)?;
        let strings = &self.strings;
        if let Some(deletion) = update.partition_deletion {
            changes.append(self.change(
                py,
                table,
                &strings.d,
                partition_key.clone(),
                deletion.marked_for_delete_at,
                &strings.partition,
                None,
            )?)?;
        }
        self.range_deletions(py, data, update, &partition_key, &changes)?;
        if let Some(static_row) = update.static_row {
            let key = partition_key.copy()?;
            changes.append(self.row_change(py, data, table, key, &self.arena.rows[static_row])?)?;
        }
        for row in &self.arena.rows[update.rows.0..update.rows.1] {
            let key = partition_key.copy()?;
            let clustering = &self.arena.clustering[row.clustering.0..row.clustering.1];
            for (column, value) in table.clustering.iter().zip(clustering) {
                key.set_item(column.name.bind(py), decode_optional(py, data, &column.cql, *value)?)?;
            }
            changes.append(self.row_change(py, data, table, key, row)?)?;
        }
        Ok(changes)
    }

    fn partition_key<'py>(&self, py: Python<'py>, data: &[u8], update: &Update) -> R<Bound<'py, PyDict>> {
        let table = &update.table;
        if table.partition_key.len() != update.key_parts.len() {
            return Err(Decline("partition key parts do not match the table's key columns"));
        }
        let dict = PyDict::new(py);
        for (column, part) in table.partition_key.iter().zip(&update.key_parts) {
            dict.set_item(column.name.bind(py), column.cql.decode(py, part.of(data))?)?;
        }
        Ok(dict)
    }

    fn clustering_dict<'py>(
        &self,
        py: Python<'py>,
        data: &[u8],
        table: &Table,
        values: (usize, usize),
    ) -> R<Bound<'py, PyDict>> {
        let dict = PyDict::new(py);
        for (column, value) in table.clustering.iter().zip(&self.arena.clustering[values.0..values.1]) {
            dict.set_item(column.name.bind(py), decode_optional(py, data, &column.cql, *value)?)?;
        }
        Ok(dict)
    }

    fn range_deletions<'py>(
        &self,
        py: Python<'py>,
        data: &[u8],
        update: &Update,
        partition_key: &Bound<'py, PyDict>,
        changes: &Bound<'py, PyList>,
    ) -> R<()> {
        for (start, end, deletion) in self.ranges(update)? {
            changes.append(self.range_change(py, data, &update.table, partition_key, start, end, deletion)?)?;
        }
        Ok(())
    }

    /// The update's deleted ranges, `(start bound, end bound, deletion)`, in order.
    fn ranges(&self, update: &Update) -> R<Vec<(&Marker, &Marker, Deletion)>> {
        // Markers come in order: a start bound (or boundary) opens a range, the next end bound closes it.
        let mut ranges = Vec::new();
        let mut opened: Option<(&Marker, Deletion)> = None;
        for marker in &self.arena.markers[update.markers.0..update.markers.1] {
            let opens = matches!(marker.kind, 1 | 2 | 5 | 7); // incl_start, boundaries, excl_start
            if opens {
                if let (Some((start, deletion)), Some(_)) = (opened, marker.end_deletion) {
                    ranges.push((start, marker, deletion));
                }
                let start_deletion = marker
                    .start_deletion
                    .or(marker.deletion)
                    .ok_or(Decline("a bound without deletion"))?;
                opened = Some((marker, start_deletion));
            } else if let Some((start, deletion)) = opened {
                ranges.push((start, marker, deletion));
                opened = None;
            }
        }
        Ok(ranges)
    }

    /// A range deletion's bounds as the reference's dict: `start`, `start_inclusive`, `end`,
    /// `end_inclusive` (the event's `cdc.range`).
    fn range_bounds<'py>(
        &self,
        py: Python<'py>,
        data: &[u8],
        table: &Table,
        start: &Marker,
        end: &Marker,
    ) -> R<Bound<'py, PyDict>> {
        let strings = &self.strings;
        let bounds = PyDict::new(py);
        bounds.set_item(
            strings.start.bind(py),
            self.clustering_dict(py, data, table, start.clustering)?,
        )?;
        bounds.set_item(strings.start_inclusive.bind(py), starts_inclusive(start))?;
        bounds.set_item(
            strings.end.bind(py),
            self.clustering_dict(py, data, table, end.clustering)?,
        )?;
        bounds.set_item(strings.end_inclusive.bind(py), ends_inclusive(end))?;
        Ok(bounds)
    }

    #[allow(clippy::too_many_arguments)]
    fn range_change<'py>(
        &self,
        py: Python<'py>,
        data: &[u8],
        table: &Arc<Table>,
        partition_key: &Bound<'py, PyDict>,
        start: &Marker,
        end: &Marker,
        deletion: Deletion,
    ) -> R<Bound<'py, PyAny>> {
        let strings = &self.strings;
        let bounds = self.range_bounds(py, data, table, start, end)?;
        self.change(
            py,
            table,
            &strings.d,
            partition_key.copy()?,
            deletion.marked_for_delete_at,
            &strings.range,
            Some(bounds),
        )
    }

    fn row_change<'py>(
        &self,
        py: Python<'py>,
        data: &[u8],
        table: &Arc<Table>,
        key: Bound<'py, PyDict>,
        row: &Row,
    ) -> R<Bound<'py, PyAny>> {
        let strings = &self.strings;
        let cells = &self.arena.cells[row.cells.0..row.cells.1];
        if let (Some(deletion), true) = (row.deletion, cells.is_empty()) {
            return self.change(
                py,
                table,
                &strings.d,
                key,
                deletion.marked_for_delete_at,
                &strings.row,
                None,
            );
        }
        let op = if row.timestamp.is_some() {
            &strings.c
        } else {
            &strings.u
        };
        let after = PyDict::new(py);
        let ttl = PyDict::new(py);
        let mut ts_us = row.timestamp.unwrap_or(0);
        // Multi-cell columns in the order their first cell came, with their cells.
        let mut multi_cell: Vec<(usize, Vec<&Cell>)> = Vec::new();
        for cell in cells {
            ts_us = ts_us.max(cell.timestamp);
            let column = &table.columns[cell.column];
            if let (Some(cell_ttl), false) = (cell.ttl, cell.deleted) {
                ttl.set_item(column.name.bind(py), int128(py, cell_ttl))?;
            }
            if cell.path.is_some() {
                match multi_cell.iter_mut().find(|(c, _)| *c == cell.column) {
                    Some((_, group)) => group.push(cell),
                    None => multi_cell.push((cell.column, vec![cell])),
                }
            } else if cell.deleted {
                after.set_item(column.name.bind(py), py.None())?;
            } else {
                after.set_item(column.name.bind(py), column.cql.decode(py, cell.value.of(data))?)?;
            }
        }
        let complex_deletions = &self.arena.complex_deletions[row.complex_deletions.0..row.complex_deletions.1];
        let replaced = PyList::empty(py);
        for (column, deletion) in complex_deletions {
            ts_us = ts_us.max(deletion.marked_for_delete_at);
            let name = table.columns[*column].name.bind(py);
            replaced.append(name)?;
            if !multi_cell.iter().any(|(c, _)| c == column) {
                after.set_item(name, py.None())?; // the whole collection deleted (or set to null)
            }
        }
        let removed = PyDict::new(py);
        for (column, group) in &multi_cell {
            let spec = &table.columns[*column];
            let live: Vec<(&[u8], &[u8])> = group
                .iter()
                .filter(|c| !c.deleted)
                .map(|c| (c.path.map(|p| p.of(data)).unwrap_or(&[]), c.value.of(data)))
                .collect();
            let whole = complex_deletions.iter().any(|(c, _)| c == column);
            if let Kind::UserType = spec.cql.kind {
                // A field update names the fields it wrote; a field set to null is a cell
                // tombstone, so it is there too, as None (as the reference's row_changes).
                let written: Vec<(&[u8], Option<&[u8]>)> = group
                    .iter()
                    .map(|c| {
                        let path = c.path.map(|p| p.of(data)).unwrap_or(&[]);
                        (path, if c.deleted { None } else { Some(c.value.of(data)) })
                    })
                    .collect();
                after.set_item(spec.name.bind(py), spec.cql.collect_user_type(py, &written, whole)?)?;
            } else if !live.is_empty() || whole {
                after.set_item(spec.name.bind(py), spec.cql.collect(py, &live)?)?;
            }
            if group.iter().any(|c| c.deleted) {
                let labels = PyList::empty(py);
                for cell in group.iter().filter(|c| c.deleted) {
                    labels.append(spec.cql.path_label(py, cell.path.map(|p| p.of(data)).unwrap_or(&[]))?)?;
                }
                removed.set_item(spec.name.bind(py), labels)?;
            }
        }
        // A row with multi-cell columns: its columns by name, as the reference sorts them (its
        // simple cells come by name already, but before its multi-cell ones).
        let after = if multi_cell.is_empty() && complex_deletions.is_empty() {
            after
        } else {
            sorted_by_name(py, &after)?
        };
        Ok(self.row_change.instance(
            py,
            [
                op.bind(py).clone().into_any(),
                table.keyspace.bind(py).clone().into_any(),
                table.table.bind(py).clone().into_any(),
                key.into_any(),
                after.into_any(),
                int(py, ts_us),
                py.None().into_bound(py),
                py.None().into_bound(py),
                replaced.into_any(),
                removed.into_any(),
                ttl.into_any(),
            ],
        )?)
    }

    /// A deletion's `RowChange` (partition, range or row).
    #[allow(clippy::too_many_arguments)]
    fn change<'py>(
        &self,
        py: Python<'py>,
        table: &Arc<Table>,
        op: &Py<PyString>,
        key: Bound<'py, PyDict>,
        ts_us: i64,
        deletion: &Py<PyString>,
        range: Option<Bound<'py, PyDict>>,
    ) -> R<Bound<'py, PyAny>> {
        let none = || py.None().into_bound(py);
        Ok(self.row_change.instance(
            py,
            [
                op.bind(py).clone().into_any(),
                table.keyspace.bind(py).clone().into_any(),
                table.table.bind(py).clone().into_any(),
                key.into_any(),
                none(),
                int(py, ts_us),
                deletion.bind(py).clone().into_any(),
                range.map(|r| r.into_any()).unwrap_or_else(none),
                PyList::empty(py).into_any(),
                PyDict::new(py).into_any(),
                PyDict::new(py).into_any(),
            ],
        )?)
    }
}

// --- compact row changes -----------------------------------------------------------------------

impl MutationDecoder {
    /// `row_changes` in compact form, appended to `out`.
    fn compact_changes(
        &self,
        py: Python<'_>,
        data: &Arc<[u8]>,
        update: &Update,
        out: &mut Vec<CompactChange>,
    ) -> R<()> {
        let table = &update.table;
        if table.partition_key.len() != update.key_parts.len() {
            return Err(Decline("partition key parts do not match the table's key columns"));
        }
        // The partition key, the clustering columns absent (a partition's own changes have none).
        let mut partition_key = Vec::with_capacity(table.key_width());
        for (column, part) in table.partition_key.iter().zip(&update.key_parts) {
            partition_key.push(column.cql.compact(py, data, part.start, part.end)?);
        }
        let key_of = |clustering: &[Option<Span>]| -> R<Vec<Value>> {
            let mut key: Vec<Value> = partition_key.iter().map(|v| v.clone_ref(py)).collect();
            for (index, column) in table.clustering.iter().enumerate() {
                key.push(match clustering.get(index) {
                    None => Value::Absent,
                    Some(None) => Value::Null,
                    Some(Some(span)) => column.cql.compact(py, data, span.start, span.end)?,
                });
            }
            Ok(key)
        };
        if let Some(deletion) = update.partition_deletion {
            out.push(deletion_change(
                key_of(&[])?,
                deletion.marked_for_delete_at,
                "partition",
                None,
            ));
        }
        for (start, end, deletion) in self.ranges(update)? {
            let bounds = self.range_header(py, data, table, start, end)?;
            out.push(deletion_change(
                key_of(&[])?,
                deletion.marked_for_delete_at,
                "range",
                Some(bounds),
            ));
        }
        if let Some(static_row) = update.static_row {
            out.push(self.compact_row(py, data, table, key_of(&[])?, &self.arena.rows[static_row])?);
        }
        for row in &self.arena.rows[update.rows.0..update.rows.1] {
            let key = key_of(&self.arena.clustering[row.clustering.0..row.clustering.1])?;
            out.push(self.compact_row(py, data, table, key, row)?);
        }
        Ok(())
    }

    /// `row_change` in compact form: the row's values in the event schema's column order, which
    /// is the order of the reference's dict (`changes._row_change`): its cells come by name
    /// (Cassandra's order of a row's simple cells), or it is sorted by name (a row with
    /// multi-cell columns).
    fn compact_row(
        &self,
        py: Python<'_>,
        data: &Arc<[u8]>,
        table: &Arc<Table>,
        key: Vec<Value>,
        row: &Row,
    ) -> R<CompactChange> {
        let cells = &self.arena.cells[row.cells.0..row.cells.1];
        if let (Some(deletion), true) = (row.deletion, cells.is_empty()) {
            return Ok(deletion_change(key, deletion.marked_for_delete_at, "row", None));
        }
        let complex_deletions = &self.arena.complex_deletions[row.complex_deletions.0..row.complex_deletions.1];
        let sorted = !complex_deletions.is_empty() || cells.iter().any(|c| c.path.is_some());
        let mut after: Vec<Value> = Vec::with_capacity(table.value_width());
        after.extend(key.iter().map(|v| v.clone_ref(py)));
        after.resize_with(table.value_width(), || Value::Absent);
        let position_of = |column: usize| table.value_positions[column].ok_or(Decline("a cell of a dropped column"));
        let mut ts_us = row.timestamp.unwrap_or(0);
        let mut ttl: Vec<(usize, i128)> = Vec::new();
        let mut last_position = None;
        // Each multi-cell column's cells, which Cassandra writes together: (column, first, end).
        let mut groups: Vec<(usize, usize, usize)> = Vec::new();
        for (index, cell) in cells.iter().enumerate() {
            ts_us = ts_us.max(cell.timestamp);
            let position = position_of(cell.column)?;
            // The reference's dict is in cell order unless it is sorted: the same order as the
            // compact row's only while cells come by name, as Cassandra writes them.
            if !sorted && last_position.is_some_and(|last| position <= last) {
                return Err(Decline("cells out of column order"));
            }
            last_position = Some(position);
            if let (Some(cell_ttl), false) = (cell.ttl, cell.deleted) {
                // One entry per column, the last live cell's TTL, as the reference's dict keeps it.
                match ttl.iter_mut().find(|(column, _)| *column == cell.column) {
                    Some(entry) => entry.1 = cell_ttl,
                    None => ttl.push((cell.column, cell_ttl)),
                }
            }
            if cell.path.is_some() {
                let continues = groups.last().is_some_and(|g| g.0 == cell.column && g.2 == index);
                if continues {
                    if let Some(group) = groups.last_mut() {
                        group.2 = index + 1;
                    }
                } else if groups.iter().any(|group| group.0 == cell.column) {
                    return Err(Decline("a multi-cell column's cells apart"));
                } else {
                    groups.push((cell.column, index, index + 1));
                }
            } else {
                after[position] = if cell.deleted {
                    Value::Null
                } else {
                    let value = cell.value;
                    table.columns[cell.column]
                        .cql
                        .compact(py, data, value.start, value.end)?
                };
            }
        }
        let mut replaced = Vec::with_capacity(complex_deletions.len());
        for (column, deletion) in complex_deletions {
            ts_us = ts_us.max(deletion.marked_for_delete_at);
            replaced.push(*column);
            if !groups.iter().any(|group| group.0 == *column) {
                after[position_of(*column)?] = Value::Null; // the whole collection deleted (or set to null)
            }
        }
        let mut removed: Vec<(usize, Vec<&[u8]>)> = Vec::new();
        for &(column, first, end) in &groups {
            let group = &cells[first..end];
            let spec = &table.columns[column];
            let path = |cell: &Cell| cell.path.map(|p| p.of(data)).unwrap_or(&[]);
            let whole = complex_deletions.iter().any(|(c, _)| *c == column);
            let written: Vec<(&[u8], Option<&[u8]>)> = group
                .iter()
                .map(|c| (path(c), if c.deleted { None } else { Some(c.value.of(data)) }))
                .collect();
            // A user type's field update names what it wrote, deleted fields too; a collection
            // has a value when a cell is live or it was replaced as a whole.
            if matches!(spec.cql.kind, Kind::UserType) || whole || group.iter().any(|c| !c.deleted) {
                after[position_of(column)?] = spec.cql.collect_compact(py, data, &written, whole)?;
            }
            let deleted: Vec<&[u8]> = group.iter().filter(|c| c.deleted).map(path).collect();
            if !deleted.is_empty() {
                removed.push((column, deleted));
            }
        }
        let mut headers = Vec::new();
        if !replaced.is_empty() {
            headers.push(("cdc.replaced".to_string(), replaced_header(py, table, &replaced)?));
        }
        if !removed.is_empty() {
            headers.push((
                "cdc.removed".to_string(),
                self.removed_header(py, data, table, &removed)?,
            ));
        }
        if !ttl.is_empty() {
            headers.push(("cdc.ttl".to_string(), ttl_header(py, table, &ttl)?));
        }
        Ok(CompactChange {
            op: if row.timestamp.is_some() { b'c' } else { b'u' },
            key,
            after: Some(after),
            ts_us,
            headers: if headers.is_empty() { None } else { Some(headers) },
        })
    }

    /// `cdc.removed`: each multi-cell column's removed elements, named as the reference names
    /// them (`CqlType.path_label`), in the reference's JSON (`changes.header_json`): written here
    /// when every name is text, an integer or a uuid, else by the reference.
    fn removed_header(
        &self,
        py: Python<'_>,
        data: &Arc<[u8]>,
        table: &Table,
        removed: &[(usize, Vec<&[u8]>)],
    ) -> R<String> {
        let mut columns: Vec<(&str, Vec<Value>)> = Vec::with_capacity(removed.len());
        for (column, paths) in removed {
            let spec = &table.columns[*column];
            let mut labels = Vec::with_capacity(paths.len());
            for path in paths {
                labels.push(spec.cql.path_label_compact(py, data, path)?);
            }
            columns.push((spec.name.bind(py).to_str()?, labels));
        }
        columns.sort_by(|a, b| a.0.cmp(b.0));
        let mut out = Vec::with_capacity(64);
        out.push(b'{');
        let mut written = true;
        for (index, (name, labels)) in columns.iter().enumerate() {
            if index > 0 {
                out.extend_from_slice(b", ");
            }
            write_ascii_text(&mut out, name);
            out.extend_from_slice(b": [");
            for (at, label) in labels.iter().enumerate() {
                if at > 0 {
                    out.extend_from_slice(b", ");
                }
                written &= write_header_value(&mut out, label);
            }
            out.push(b']');
        }
        out.push(b'}');
        if written {
            return String::from_utf8(out).map_err(|_| Decline("a header that is not UTF-8"));
        }
        let named = PyDict::new(py);
        for (column, paths) in removed {
            let spec = &table.columns[*column];
            let labels = PyList::empty(py);
            for path in paths {
                labels.append(spec.cql.path_label(py, path)?)?;
            }
            named.set_item(spec.name.bind(py), labels)?;
        }
        header_json(py, named.as_any())
    }

    /// `cdc.range`: a range deletion's clustering bounds, in the reference's JSON: written here
    /// when every bound value is text, an integer, a boolean or a uuid, else by the reference.
    fn range_header(&self, py: Python<'_>, data: &Arc<[u8]>, table: &Table, start: &Marker, end: &Marker) -> R<String> {
        let mut out = Vec::with_capacity(96);
        let mut written = true;
        let inclusive = |flag: bool| if flag { "true" } else { "false" };
        for (index, (bound, flag)) in [(end, ends_inclusive(end)), (start, starts_inclusive(start))]
            .into_iter()
            .enumerate()
        {
            // Keys sorted: end, end_inclusive, start, start_inclusive.
            let key = if index == 0 { "end" } else { "start" };
            out.extend_from_slice(if index == 0 { b"{\"" } else { b", \"" });
            out.extend_from_slice(key.as_bytes());
            out.extend_from_slice(b"\": {");
            let mut named: Vec<(&str, Value)> = Vec::new();
            for (column, value) in table
                .clustering
                .iter()
                .zip(&self.arena.clustering[bound.clustering.0..bound.clustering.1])
            {
                let value = match value {
                    None => Value::Null,
                    Some(span) => column.cql.compact(py, data, span.start, span.end)?,
                };
                named.push((column.name.bind(py).to_str()?, value));
            }
            named.sort_by(|a, b| a.0.cmp(b.0));
            for (at, (name, value)) in named.iter().enumerate() {
                if at > 0 {
                    out.extend_from_slice(b", ");
                }
                write_ascii_text(&mut out, name);
                out.extend_from_slice(b": ");
                written &= write_header_value(&mut out, value);
            }
            out.extend_from_slice(format!("}}, \"{key}_inclusive\": {}", inclusive(flag)).as_bytes());
        }
        out.push(b'}');
        if written {
            return String::from_utf8(out).map_err(|_| Decline("a header that is not UTF-8"));
        }
        let bounds = self.range_bounds(py, data, table, start, end)?;
        header_json(py, bounds.as_any())
    }
}

/// A dict of columns (text keys) with its items by name, as Python's `sorted` orders text.
fn sorted_by_name<'py>(py: Python<'py>, dict: &Bound<'py, PyDict>) -> R<Bound<'py, PyDict>> {
    let mut items = Vec::with_capacity(dict.len());
    for (key, value) in dict.iter() {
        let name = key.cast::<PyString>().map_err(PyErr::from)?.to_str()?.to_owned();
        items.push((name, key, value));
    }
    items.sort_by(|a, b| a.0.cmp(&b.0)); // UTF-8 byte order is code point order
    let sorted = PyDict::new(py);
    for (_, key, value) in items {
        sorted.set_item(key, value)?;
    }
    Ok(sorted)
}

/// A value as `json.dumps` writes it (ASCII only), when it is text, an integer, a boolean, null
/// or a uuid (its text); false for any other (floats, decimals, collections): the reference's.
fn write_header_value(out: &mut Vec<u8>, value: &Value) -> bool {
    match value.datum() {
        Some(Datum::Null) => out.extend_from_slice(b"null"),
        Some(Datum::Bool(flag)) => out.extend_from_slice(if flag { b"true" } else { b"false" }),
        Some(Datum::Long(n)) => out.extend_from_slice(n.to_string().as_bytes()),
        Some(Datum::Text(text)) => write_ascii_text(out, text),
        Some(Datum::Uuid(bytes)) => {
            out.push(b'"');
            write_uuid_text(out, bytes);
            out.push(b'"');
        }
        _ => return false,
    }
    true
}

static HEADER_JSON: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// The reference's JSON of a `cdc.*` header's value (`changes.header_json`: sorted keys, `str`
/// of what JSON has no form for), for the rarer headers (removed elements, range bounds).
fn header_json(py: Python<'_>, value: &Bound<'_, PyAny>) -> R<String> {
    let function = HEADER_JSON.get_or_try_init(py, || -> PyResult<Py<PyAny>> {
        Ok(py
            .import("cdcflow.sources.cassandra_commitlog.changes")?
            .getattr("header_json")?
            .unbind())
    })?;
    Ok(function.bind(py).call1((value,))?.extract()?)
}

/// A deletion's compact change: no row, its kind in `cdc.deletion` (and a range's bounds in
/// `cdc.range`).
fn deletion_change(key: Vec<Value>, ts_us: i64, kind: &str, range: Option<String>) -> CompactChange {
    let mut headers = vec![("cdc.deletion".to_string(), kind.to_string())];
    if let Some(bounds) = range {
        headers.push(("cdc.range".to_string(), bounds));
    }
    CompactChange {
        op: b'd',
        key,
        after: None,
        ts_us,
        headers: Some(headers),
    }
}

/// A column's name, when `json.dumps` writes it as it is (printable ASCII but `"` and `\`):
/// the compact headers write no escapes, such names go to the reference.
fn plain_column_name<'a>(py: Python<'a>, table: &'a Table, column: usize) -> R<&'a str> {
    let name = table.columns[column].name.bind(py).to_str()?;
    if !name
        .bytes()
        .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
    {
        return Err(Decline("a column name json.dumps would escape"));
    }
    Ok(name)
}

/// `json.dumps(replaced)` of the replaced columns' names, in the order the row names them.
fn replaced_header(py: Python<'_>, table: &Table, replaced: &[usize]) -> R<String> {
    let mut out = String::with_capacity(16 * replaced.len() + 2);
    out.push('[');
    for (index, column) in replaced.iter().enumerate() {
        if index > 0 {
            out.push_str(", ");
        }
        out.push('"');
        out.push_str(plain_column_name(py, table, *column)?);
        out.push('"');
    }
    out.push(']');
    Ok(out)
}

/// `json.dumps(ttl, sort_keys=True)` of `{column name: seconds}`, as the reference's header.
fn ttl_header(py: Python<'_>, table: &Table, ttl: &[(usize, i128)]) -> R<String> {
    let mut named: Vec<(&str, i128)> = Vec::with_capacity(ttl.len());
    for (column, seconds) in ttl {
        named.push((plain_column_name(py, table, *column)?, *seconds));
    }
    named.sort();
    let entries: Vec<String> = named
        .iter()
        .map(|(name, seconds)| format!("\"{name}\": {seconds}"))
        .collect();
    Ok(format!("{{{}}}", entries.join(", ")))
}

fn decode_optional<'py>(py: Python<'py>, data: &[u8], cql: &CqlType, value: Option<Span>) -> R<Bound<'py, PyAny>> {
    match value {
        None => Ok(py.None().into_bound(py)),
        Some(span) => cql.decode(py, span.of(data)),
    }
}

/// A composite key's parts: per column an unsigned short length, the value and an end-of-component byte.
fn split_partition_key(key: Span, data: &[u8], columns: usize) -> R<Vec<Span>> {
    if columns <= 1 {
        return Ok(vec![key]);
    }
    let bytes = key.of(data);
    let mut parts = Vec::with_capacity(columns);
    let mut offset = 0usize;
    for _ in 0..columns {
        if offset + 2 > bytes.len() {
            return Err(Decline("composite partition key cut short"));
        }
        let length = u16::from_be_bytes([bytes[offset], bytes[offset + 1]]) as usize;
        if offset + 2 + length + 1 > bytes.len() {
            return Err(Decline("composite partition key component runs past the key"));
        }
        parts.push(Span {
            start: key.start + offset + 2,
            end: key.start + offset + 2 + length,
        });
        offset += 2 + length + 1;
    }
    if offset != bytes.len() {
        return Err(Decline("bytes after the composite partition key's components"));
    }
    Ok(parts)
}

/// Whether a range marker that opens a range includes its bound (an inclusive start, or the
/// boundary `EXCL_END_INCL_START`).
fn starts_inclusive(marker: &Marker) -> bool {
    marker.kind == INCL_START || marker.kind == EXCL_END_INCL_START
}

/// Whether a range marker that closes a range includes its bound.
fn ends_inclusive(marker: &Marker) -> bool {
    marker.kind == INCL_END || marker.kind == INCL_END_EXCL_START
}
