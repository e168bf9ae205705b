//! Commit-log entries: framing and CRCs of a sync section's entries, and their mutations decoded
//! to row changes. Mirrors `cdcflow.sources.cassandra_commitlog.segment._section_entries`; the
//! section walk itself (markers, decompression) stays in Python, once per section.

pub mod mutation;
pub mod values;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyBufferError, PyRuntimeError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString};

use crate::batch::{Event, EventBatch, Position};
use mutation::{Column, CompactUpdate, FastHash, FastMap, MutationDecoder, Table, Tables, Wanted};
use values::{uuid_text, CqlType, Decline, R};

/// The smallest mutation there can be (Cassandra's own bound): guards against garbage.
const MIN_MUTATION_SIZE: i32 = 10;

/// One framed entry of a section (or the bytes that could not be framed).
#[pyclass(frozen, get_all, module = "cdcflow._native")]
pub struct FramedEntry {
    /// Logical position of the entry's size field.
    start: i64,
    /// Logical position after its trailing CRC: Cassandra's position of this mutation.
    end: i64,
    /// The mutation (for the reference decoder and the error store); None when only positions were
    /// asked for. For a fault: the raw bytes.
    mutation: Option<Py<PyBytes>>,
    /// Why the bytes could not be framed (a fault); None for an entry.
    fault: Option<Py<PyString>>,
    /// The decoded partition updates `[(TableSchema, key, [RowChange])]`; None when not decoded here.
    changes: Option<Py<PyList>>,
}

enum Framed<'a> {
    Entry {
        start: usize,
        end: usize,
        mutation: &'a [u8],
    },
    Fault {
        start: usize,
        end: usize,
        raw: &'a [u8],
        reason: String,
    },
}

/// Every entry of a section's payload, and whether a zero size ended it (a clean end).
fn frame(payload: &[u8]) -> (Vec<Framed<'_>>, bool) {
    let mut items = Vec::new();
    let size_of = payload.len();
    let mut offset = 0usize;
    while offset < size_of {
        let start = offset;
        if size_of - offset < 4 {
            break; // padding at a section's end
        }
        let size = i32::from_be_bytes([
            payload[offset],
            payload[offset + 1],
            payload[offset + 2],
            payload[offset + 3],
        ]);
        if size == 0 {
            return (items, true); // the zero padding after the last entry of a closed segment
        }
        let too_small = size < MIN_MUTATION_SIZE;
        if too_small || offset + 8 + size as usize + 4 > size_of {
            let reason = format!(
                "entry size {size} {}",
                if too_small {
                    "is too small"
                } else {
                    "runs past its section"
                }
            );
            items.push(Framed::Fault {
                start,
                end: size_of,
                raw: &payload[offset..],
                reason,
            });
            return (items, false);
        }
        let size_crc = crc32fast::hash(&payload[offset..offset + 4]);
        let stored_size_crc = u32::from_be_bytes([
            payload[offset + 4],
            payload[offset + 5],
            payload[offset + 6],
            payload[offset + 7],
        ]);
        if stored_size_crc != size_crc {
            // The size itself is unreliable, so nothing after it in this section can be located.
            let reason = "entry size CRC does not match".to_string();
            items.push(Framed::Fault {
                start,
                end: size_of,
                raw: &payload[offset..],
                reason,
            });
            return (items, false);
        }
        let data_start = offset + 8;
        let data_end = data_start + size as usize;
        let mutation = &payload[data_start..data_end];
        let stored_crc = u32::from_be_bytes([
            payload[data_end],
            payload[data_end + 1],
            payload[data_end + 2],
            payload[data_end + 3],
        ]);
        let mut hasher = crc32fast::Hasher::new_with_initial(size_crc);
        hasher.update(mutation);
        if hasher.finalize() != stored_crc {
            let reason = "entry data CRC does not match".to_string();
            items.push(Framed::Fault {
                start,
                end: data_end + 4,
                raw: &payload[offset..data_end + 4],
                reason,
            });
        } else {
            items.push(Framed::Entry {
                start,
                end: data_end + 4,
                mutation,
            });
        }
        offset = data_end + 4;
    }
    (items, false)
}

/// Runs `body` over a contiguous byte buffer (bytes, or a memoryview of a segment).
fn with_bytes<T>(payload: &Bound<'_, PyAny>, body: impl FnOnce(&[u8]) -> PyResult<T>) -> PyResult<T> {
    if let Ok(bytes) = payload.cast::<PyBytes>() {
        return body(bytes.as_bytes());
    }
    let buffer = PyBuffer::<u8>::get(payload)?;
    if !buffer.is_c_contiguous() {
        return Err(PyBufferError::new_err("section payload is not contiguous"));
    }
    // SAFETY: the buffer is held (and so stays valid) for the call; it is read only, and the
    // segment bytes behind it are never written while cdcflow reads them.
    let data = unsafe { std::slice::from_raw_parts(buffer.buf_ptr() as *const u8, buffer.len_bytes()) };
    body(data)
}

fn framed_entry(
    py: Python<'_>,
    base: i64,
    start: usize,
    end: usize,
    mutation: Option<&[u8]>,
    fault: Option<&str>,
    changes: Option<Bound<'_, PyList>>,
) -> PyResult<Py<FramedEntry>> {
    Py::new(
        py,
        FramedEntry {
            start: base + start as i64,
            end: base + end as i64,
            mutation: mutation.map(|m| PyBytes::new(py, m).unbind()),
            fault: fault.map(|f| PyString::new(py, f).unbind()),
            changes: changes.map(Bound::unbind),
        },
    )
}

/// Bytes that could not be framed, as a `FramedEntry` with its fault.
fn fault_entry(
    py: Python<'_>,
    base: i64,
    start: usize,
    end: usize,
    raw: &[u8],
    reason: &str,
) -> PyResult<Py<FramedEntry>> {
    framed_entry(py, base, start, end, Some(raw), Some(reason), None)
}

/// The entries of one section whose end is past `after`, as `FramedEntry` items, and whether the
/// section ended on a zero size. ``with_mutations`` keeps each entry's bytes (else only positions).
#[pyfunction]
#[pyo3(signature = (payload, base, after, with_mutations = true))]
pub fn frame_section(
    py: Python<'_>,
    payload: &Bound<'_, PyAny>,
    base: i64,
    after: i64,
    with_mutations: bool,
) -> PyResult<(Vec<Py<FramedEntry>>, bool)> {
    with_bytes(payload, |data| {
        let (items, clean_end) = frame(data);
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            match item {
                Framed::Entry { start, end, mutation } => {
                    if base + end as i64 > after {
                        let bytes = if with_mutations { Some(mutation) } else { None };
                        out.push(framed_entry(py, base, start, end, bytes, None, None)?);
                    }
                }
                Framed::Fault {
                    start,
                    end,
                    raw,
                    reason,
                } => {
                    if base + end as i64 > after {
                        out.push(fault_entry(py, base, start, end, raw, &reason)?);
                    }
                }
            }
        }
        Ok((out, clean_end))
    })
}

struct PyTables {
    lookup: Py<PyAny>,
    describe: Py<PyAny>,
    decode_table: Py<PyAny>,
    /// The ids (as text) of the tables the source found dropped; None: none are skipped here.
    dropped: Option<Py<PyAny>>,
    known: FastMap<[u8; 16], Arc<Table>>,
    wanted: HashSet<[u8; 16], FastHash>,
    /// The table last looked up, and whether it was wanted: most mutations are of the table the
    /// previous one was.
    last: Option<(Arc<Table>, bool)>,
}

impl PyTables {
    fn build(&self, py: Python<'_>, id: [u8; 16], schema: &Bound<'_, PyAny>) -> PyResult<Table> {
        // (schema, keyspace, table, partition key, clustering, columns): each column (name, type description).
        let description = self.describe.bind(py).call1((schema,))?;
        let columns_of = |index: usize| -> PyResult<Vec<Column>> {
            let mut columns = Vec::new();
            for item in description.get_item(index)?.try_iter()? {
                let item = item?;
                let name = item.get_item(0)?.cast_into::<PyString>()?;
                columns.push(Column {
                    name: name.unbind(),
                    cql: CqlType::from_description(&item.get_item(1)?)?,
                });
            }
            Ok(columns)
        };
        let keyspace = description.get_item(1)?.cast_into::<PyString>()?;
        let columns = columns_of(5)?;
        let partition_key = columns_of(3)?;
        let clustering = columns_of(4)?;
        // The event schema's value columns: the key columns, then the current ones by name (as
        // Python sorts str: by code point, which is UTF-8 byte order).
        let current: usize = description.get_item(6)?.extract()?;
        let mut names: Vec<(String, usize)> = Vec::with_capacity(current);
        for (index, column) in columns.iter().take(current).enumerate() {
            names.push((column.name.bind(py).to_str()?.to_string(), index));
        }
        names.sort();
        let mut value_positions = vec![None; columns.len()];
        for (rank, (_, index)) in names.iter().enumerate() {
            value_positions[*index] = Some(partition_key.len() + clustering.len() + rank);
        }
        let mut by_name = HashMap::new();
        for (index, column) in columns.iter().enumerate() {
            by_name
                .entry(column.name.bind(py).to_str()?.as_bytes().to_vec())
                .or_insert(index);
        }
        Ok(Table {
            id,
            schema: description.get_item(0)?.unbind(),
            schema_table: keyspace.to_str()? == "system_schema",
            keyspace: keyspace.unbind(),
            table: description.get_item(2)?.cast_into::<PyString>()?.unbind(),
            partition_key,
            clustering,
            columns,
            by_name,
            value_positions,
        })
    }
}

impl Tables for PyTables {
    fn table(&mut self, py: Python<'_>, raw_id: &[u8]) -> R<Option<Arc<Table>>> {
        let id: [u8; 16] = raw_id.try_into().map_err(|_| Decline("table id is not 16 bytes"))?;
        if let Some((table, _)) = &self.last {
            if table.id == id {
                return Ok(Some(table.clone()));
            }
        }
        if let Some(table) = self.known.get(&id) {
            return Ok(Some(table.clone()));
        }
        let schema = self.lookup.bind(py).call1((PyBytes::new(py, raw_id),))?;
        if schema.is_none() {
            return Ok(None);
        }
        let table = Arc::new(self.build(py, id, &schema)?);
        self.known.insert(id, table.clone());
        Ok(Some(table))
    }

    fn dropped(&mut self, py: Python<'_>, raw_id: &[u8]) -> R<bool> {
        let (Some(dropped), Ok(id)) = (&self.dropped, <[u8; 16]>::try_from(raw_id)) else {
            return Ok(false);
        };
        Ok(dropped.bind(py).contains(uuid_text(py, &id))?)
    }

    fn wanted(&mut self, py: Python<'_>, table: &Arc<Table>) -> R<Wanted> {
        // Only "yes" is remembered: the source counts what it skips (counter tables) per update.
        if let Some((last, true)) = &self.last {
            if Arc::ptr_eq(last, table) {
                return Ok(Wanted::Yes);
            }
        }
        let yes = self.wanted.contains(&table.id)
            || self
                .decode_table
                .bind(py)
                .call1((table.schema.bind(py),))?
                .is_truthy()?;
        self.last = Some((table.clone(), yes));
        if yes {
            self.wanted.insert(table.id);
            return Ok(Wanted::Yes);
        }
        Ok(Wanted::No)
    }
}

struct DecoderState {
    decoder: MutationDecoder,
    tables: PyTables,
    last_decline: Option<&'static str>,
}

/// Decodes one schema's commit-log entries (versions 7 and 8) straight to row changes.
///
/// ``lookup(raw_id)`` gives the ``TableSchema`` of a 16-byte table id (or None),
/// ``describe(TableSchema)`` what the decoder needs of it, ``decode_table(TableSchema)`` whether
/// its updates are wanted, and ``row_change`` is the ``RowChange`` class to build. ``dropped``
/// (the ids, as text, of tables the source found dropped) lets compact decoding skip their
/// mutations as the reference's reader does.
#[pyclass(module = "cdcflow._native")]
pub struct CommitLogDecoder {
    state: Mutex<DecoderState>,
}

#[pymethods]
impl CommitLogDecoder {
    #[new]
    #[pyo3(signature = (lookup, describe, decode_table, row_change, dropped = None))]
    fn new(
        py: Python<'_>,
        lookup: Py<PyAny>,
        describe: Py<PyAny>,
        decode_table: Py<PyAny>,
        row_change: Py<PyAny>,
        dropped: Option<Py<PyAny>>,
    ) -> Self {
        CommitLogDecoder {
            state: Mutex::new(DecoderState {
                decoder: MutationDecoder::new(py, row_change),
                tables: PyTables {
                    lookup,
                    describe,
                    decode_table,
                    dropped,
                    known: FastMap::default(),
                    wanted: HashSet::default(),
                    last: None,
                },
                last_decline: None,
            }),
        }
    }

    /// ``[(TableSchema, key, [RowChange, ...]), ...]`` for the wanted partition updates of one
    /// mutation, or None when the compiled core declines it (the reference decodes it, or raises).
    fn decode<'py>(&self, py: Python<'py>, mutation: &[u8]) -> PyResult<Option<Bound<'py, PyList>>> {
        let mut state = self
            .state
            .lock()
            .map_err(|_| PyRuntimeError::new_err("decoder lock poisoned"))?;
        let state = &mut *state;
        match state.decoder.decode(py, mutation, &mut state.tables) {
            Ok(changes) => Ok(Some(changes)),
            Err(decline) => {
                state.last_decline = Some(decline.0);
                Ok(None)
            }
        }
    }

    /// The entries of one section past ``after``, each decoded when the compiled core can (its
    /// ``changes``), else carrying its ``mutation`` for the reference; and whether a zero size
    /// ended the section.
    fn decode_section(
        &self,
        py: Python<'_>,
        payload: &Bound<'_, PyAny>,
        base: i64,
        after: i64,
    ) -> PyResult<(Vec<Py<FramedEntry>>, bool)> {
        let mut state = self
            .state
            .lock()
            .map_err(|_| PyRuntimeError::new_err("decoder lock poisoned"))?;
        let state = &mut *state;
        with_bytes(payload, |data| {
            let (items, clean_end) = frame(data);
            let mut out = Vec::with_capacity(items.len());
            for item in items {
                match item {
                    Framed::Entry { start, end, mutation } => {
                        if base + end as i64 <= after {
                            continue;
                        }
                        // The bytes stay with the changes: the source decodes them again with the
                        // reference if the schema changed since this section was decoded.
                        let decoded = match state.decoder.decode(py, mutation, &mut state.tables) {
                            Ok(changes) => Some(changes),
                            Err(decline) => {
                                state.last_decline = Some(decline.0);
                                None
                            }
                        };
                        out.push(framed_entry(py, base, start, end, Some(mutation), None, decoded)?);
                    }
                    Framed::Fault {
                        start,
                        end,
                        raw,
                        reason,
                    } => {
                        if base + end as i64 > after {
                            out.push(fault_entry(py, base, start, end, raw, &reason)?);
                        }
                    }
                }
            }
            Ok((out, clean_end))
        })
    }

    /// The compact changes of the section's entries past ``after`` and up to ``up_to`` (None: to
    /// its end), added to ``builder`` (positions ``{"segment", "position": entry end, "index"}``
    /// in segment ``segment``), leaving out the partition updates for which ``emits(keyspace,
    /// partition key bytes)`` (the source's replica filter) is false, until an entry the compact
    /// form does not carry (a fault, a declined mutation): ``(CompactSection, clean end)``.
    #[pyo3(signature = (payload, base, after, up_to, builder, segment, emits = None))]
    #[allow(clippy::too_many_arguments)]
    fn decode_section_into(
        &self,
        py: Python<'_>,
        payload: &Bound<'_, PyAny>,
        base: i64,
        after: i64,
        up_to: Option<i64>,
        mut builder: PyRefMut<'_, CompactBatchBuilder>,
        segment: i64,
        emits: Option<Bound<'_, PyAny>>,
    ) -> PyResult<(CompactSection, bool)> {
        let mut state = self
            .state
            .lock()
            .map_err(|_| PyRuntimeError::new_err("decoder lock poisoned"))?;
        let state = &mut *state;
        with_bytes(payload, |data| {
            let (items, clean_end) = frame(data);
            let mut outcome = CompactSection {
                end: base,
                skipped: 0,
                dropped: 0,
                refused: None,
                reached_up_to: false,
            };
            for item in items {
                let (end, refused) = match item {
                    Framed::Entry { end, mutation, .. } => {
                        let end = base + end as i64;
                        if end <= after || up_to.is_some_and(|up_to| end > up_to) {
                            (end, None)
                        } else {
                            match state.decoder.decode_compact(py, mutation, &mut state.tables) {
                                Ok(None) => {
                                    outcome.dropped += 1;
                                    (end, None)
                                }
                                Ok(Some(updates)) => {
                                    match builder.add_updates(py, updates, segment, end, emits.as_ref())? {
                                        Some(skipped) => {
                                            outcome.skipped += skipped;
                                            (end, None)
                                        }
                                        None => (end, Some("more tables than a batch can name".to_string())),
                                    }
                                }
                                Err(decline) => {
                                    state.last_decline = Some(decline.0);
                                    (end, Some(decline.0.to_string()))
                                }
                            }
                        }
                    }
                    Framed::Fault { end, reason, .. } => (base + end as i64, Some(reason)),
                };
                if end <= after {
                    continue;
                }
                if up_to.is_some_and(|up_to| end > up_to) {
                    outcome.reached_up_to = true;
                    break;
                }
                outcome.end = end;
                if refused.is_some() {
                    outcome.refused = refused;
                    break;
                }
            }
            Ok((outcome, clean_end))
        })
    }

    /// Why the last declined mutation was declined (for tests and debugging).
    #[getter]
    fn last_decline(&self) -> Option<&'static str> {
        self.state.lock().ok().and_then(|state| state.last_decline)
    }
}

/// What `CommitLogDecoder.decode_section_into` came to for one section.
#[pyclass(frozen, get_all, module = "cdcflow._native")]
pub struct CompactSection {
    /// The logical position after the last entry it took or refused (the section's start when
    /// none): what `read_framed` counts as read.
    end: i64,
    /// Partition updates the replica filter left out.
    skipped: usize,
    /// Mutations skipped whole: they name a table the source found dropped.
    dropped: usize,
    /// Why the entry ending at `end` is not in the batch (a fault, a mutation the compact form
    /// does not carry); None when every entry of the range in the section is.
    refused: Option<String>,
    /// An entry past `up_to` ended the section's part of the range.
    reached_up_to: bool,
}

/// Compact commit-log events gathered entry by entry into `EventBatch`es: the events
/// `CassandraCommitLogSource.read` gives for the same entries (delta row images), without a
/// Python object per event.
#[pyclass(module = "cdcflow._native")]
pub struct CompactBatchBuilder {
    events: Vec<Event>,
    /// The `TableSchema` of each table index the events name.
    tables: Vec<Py<PyAny>>,
    table_index: FastMap<[u8; 16], u16>,
}

#[pymethods]
impl CompactBatchBuilder {
    #[new]
    fn new() -> Self {
        CompactBatchBuilder {
            events: Vec::new(),
            tables: Vec::new(),
            table_index: FastMap::default(),
        }
    }

    fn __len__(&self) -> usize {
        self.events.len()
    }

    /// The ``TableSchema`` of each table index of the batches taken.
    fn tables(&self, py: Python<'_>) -> Vec<Py<PyAny>> {
        self.tables.iter().map(|t| t.clone_ref(py)).collect()
    }

    /// The first ``count`` events gathered (all with None) as a batch of ``partition`` processed
    /// at ``ts_ms``.
    #[pyo3(signature = (partition, ts_ms, count = None))]
    fn take(&mut self, partition: String, ts_ms: i64, count: Option<usize>) -> EventBatch {
        let count = count.unwrap_or(self.events.len()).min(self.events.len());
        let rest = self.events.split_off(count);
        EventBatch {
            events: std::mem::replace(&mut self.events, rest),
            partition,
            ts_ms,
            snapshot: false,
        }
    }
}

impl CompactBatchBuilder {
    /// The changes of an entry ending at ``position`` of ``segment``, but for the partition
    /// updates ``emits`` leaves out: how many it left out, or None when the batch cannot name
    /// another table.
    fn add_updates(
        &mut self,
        py: Python<'_>,
        updates: Vec<CompactUpdate>,
        segment: i64,
        position: i64,
        emits: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<usize>> {
        let mut skipped = 0;
        let mut index = 0;
        for update in updates {
            if let Some(emits) = emits {
                let keyspace = update.table.keyspace.bind(py);
                let key = PyBytes::new(py, &update.mutation[update.key.0..update.key.1]);
                if !emits.call1((keyspace, key))?.is_truthy()? {
                    skipped += 1;
                    continue;
                }
            }
            let next = self.tables.len();
            let table = *self.table_index.entry(update.table.id).or_insert(next as u16);
            if table as usize == next {
                if next >= u16::MAX as usize {
                    return Ok(None);
                }
                self.tables.push(update.table.schema.clone_ref(py));
            }
            for change in update.changes {
                self.events.push(Event {
                    op: change.op,
                    table,
                    key: change.key,
                    before: None,
                    after: change.after,
                    position: Position::CommitLog {
                        segment,
                        position,
                        index,
                    },
                    ts_us: change.ts_us,
                    headers: change.headers,
                });
                index += 1;
            }
        }
        Ok(Some(skipped))
    }
}

#[cfg(test)]
mod tests {
    //! Entries framed as Cassandra writes them (`CommitLog.add`: the size as a big-endian int32,
    //! the CRC32 of those 4 bytes, the mutation, then one CRC32 continued from the size's over the
    //! mutation). The CRC bytes below were computed with Python's `zlib.crc32`, not with this crate.
    use super::{frame, Framed};

    /// `b"0123456789"` framed: size 10, CRC32(00 00 00 0a), the mutation, CRC32 of all 14 bytes.
    const DIGITS: [u8; 22] = [
        0x00, 0x00, 0x00, 0x0a, 0xc1, 0x91, 0x36, 0x02, b'0', b'1', b'2', b'3', b'4', b'5', b'6', b'7', b'8', b'9',
        0x76, 0x1a, 0x8e, 0xf3,
    ];
    /// `b"ABCDEFGHIJK"` framed (size 11).
    const LETTERS: [u8; 23] = [
        0x00, 0x00, 0x00, 0x0b, 0xb6, 0x96, 0x06, 0x94, b'A', b'B', b'C', b'D', b'E', b'F', b'G', b'H', b'I', b'J',
        b'K', 0x8e, 0x92, 0x8b, 0x72,
    ];

    /// An item as (start, end, mutation or raw bytes, fault reason).
    type Item = (usize, usize, Vec<u8>, Option<String>);

    fn items(payload: &[u8]) -> (Vec<Item>, bool) {
        let (items, clean_end) = frame(payload);
        let items = items
            .into_iter()
            .map(|item| match item {
                Framed::Entry { start, end, mutation } => (start, end, mutation.to_vec(), None),
                Framed::Fault {
                    start,
                    end,
                    raw,
                    reason,
                } => (start, end, raw.to_vec(), Some(reason)),
            })
            .collect();
        (items, clean_end)
    }

    fn concat(parts: &[&[u8]]) -> Vec<u8> {
        parts.concat()
    }

    #[test]
    fn an_entry_is_its_mutation_between_the_size_crc_and_the_data_crc() {
        let (items, clean_end) = items(&DIGITS);
        assert_eq!(items, vec![(0, 22, b"0123456789".to_vec(), None)]);
        assert!(!clean_end, "no zero size: the section may go on");
    }

    #[test]
    fn a_zero_size_after_the_last_entry_is_a_clean_end() {
        let payload = concat(&[&DIGITS, &LETTERS, &[0u8; 12]]);
        let (items, clean_end) = items(&payload);
        assert_eq!(
            items,
            vec![
                (0, 22, b"0123456789".to_vec(), None),
                (22, 45, b"ABCDEFGHIJK".to_vec(), None),
            ]
        );
        assert!(clean_end);
    }

    #[test]
    fn fewer_than_four_bytes_left_are_padding_not_a_fault() {
        let payload = concat(&[&DIGITS, &[0xff, 0xff, 0xff]]);
        let (items, clean_end) = items(&payload);
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].3, None);
        assert!(!clean_end);
    }

    #[test]
    fn a_damaged_size_crc_ends_the_section_with_everything_after_it_as_one_fault() {
        let mut damaged = LETTERS;
        damaged[5] ^= 0x01; // a bit of the size's CRC
        let payload = concat(&[&DIGITS, &damaged, &DIGITS]);
        let (items, clean_end) = items(&payload);
        assert_eq!(items.len(), 2, "nothing after an unreliable size can be located");
        assert_eq!(items[0], (0, 22, b"0123456789".to_vec(), None));
        assert_eq!(
            items[1],
            (
                22,
                67,
                payload[22..].to_vec(),
                Some("entry size CRC does not match".to_string())
            )
        );
        assert!(!clean_end);
    }

    #[test]
    fn a_damaged_mutation_is_a_fault_of_that_entry_alone() {
        let mut damaged = DIGITS;
        damaged[12] = b'x'; // the mutation's fifth byte: its data CRC no longer matches
        let payload = concat(&[&damaged, &LETTERS]);
        let (items, _) = items(&payload);
        assert_eq!(
            items,
            vec![
                (
                    0,
                    22,
                    damaged.to_vec(),
                    Some("entry data CRC does not match".to_string())
                ),
                (22, 45, b"ABCDEFGHIJK".to_vec(), None),
            ]
        );
    }

    #[test]
    fn the_data_crc_continues_from_the_sizes_crc() {
        // The same entry with its data CRC over the mutation alone (CRC32(b"0123456789") =
        // a6 84 c7 c6): Cassandra's CRC covers the size too, so this one does not match.
        let mut alone = DIGITS;
        alone[18..].copy_from_slice(&[0xa6, 0x84, 0xc7, 0xc6]);
        let (items, _) = items(&alone);
        assert_eq!(items[0].3.as_deref(), Some("entry data CRC does not match"));
    }

    #[test]
    fn a_size_below_cassandras_smallest_mutation_is_a_fault() {
        // `b"012345678"` framed with correct CRCs: size 9 is below the 10-byte minimum.
        let small = [
            0x00, 0x00, 0x00, 0x09, 0x58, 0x98, 0x67, 0xb8, b'0', b'1', b'2', b'3', b'4', b'5', b'6', b'7', b'8', 0x22,
            0x92, 0xa8, 0x5c,
        ];
        let (items, clean_end) = items(&small);
        assert_eq!(
            items,
            vec![(0, 21, small.to_vec(), Some("entry size 9 is too small".to_string()))]
        );
        assert!(!clean_end);
    }

    #[test]
    fn an_entry_running_past_its_section_is_a_fault() {
        let cut = &DIGITS[..21]; // the data CRC's last byte missing
        let (items, _) = items(cut);
        assert_eq!(
            items,
            vec![(
                0,
                21,
                cut.to_vec(),
                Some("entry size 10 runs past its section".to_string())
            )]
        );
    }
}
