//! Change events in compact form: a batch of one source partition's events whose values are
//! Rust values, not Python objects. A compiled source builds one, a compiled converter encodes it
//! (`encode_avro`) without a Python object per event or per value, and whatever needs Python
//! objects (a transform without a batch form, a rejected record, a sink without one) gets them
//! on demand (`event`, `events`): `cdcflow.batches.EventBatch` turns those tuples into the
//! `ChangeEvent`s the source's `read` gives for the same offsets.

use std::sync::Arc;

use pyo3::exceptions::{PyIndexError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::avro::AvroWriter;
use crate::json::{write_scalar, write_text};

/// A value the compiled core holds itself (a compact batch's), written without a Python object.
#[derive(Clone, Copy)]
pub enum Datum<'a> {
    Null,
    Bool(bool),
    Long(i64),
    Double(f64),
    Text(&'a str),
}

/// What a compact row holds: anything that reads as a [`Datum`].
pub trait AsDatum {
    fn as_datum(&self) -> Datum<'_>;
}

impl AsDatum for Datum<'_> {
    fn as_datum(&self) -> Datum<'_> {
        *self
    }
}

/// One column value, exactly as the source read it.
pub enum Value {
    Null,
    Bool(bool),
    Long(i64),
    Double(f64),
    Text(String),
    /// Text many values share (a generator's names): no copy per value.
    Shared(Arc<str>),
    /// `pool[start..end]` of a shared text (a generator's payloads), at a char boundary.
    Slice(Arc<str>, u32, u32),
}

impl AsDatum for Value {
    fn as_datum(&self) -> Datum<'_> {
        match self {
            Value::Null => Datum::Null,
            Value::Bool(b) => Datum::Bool(*b),
            Value::Long(n) => Datum::Long(*n),
            Value::Double(x) => Datum::Double(*x),
            Value::Text(text) => Datum::Text(text),
            Value::Shared(text) => Datum::Text(text),
            Value::Slice(pool, start, end) => Datum::Text(&pool[*start as usize..*end as usize]),
        }
    }
}

impl Value {
    fn to_py<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        match self.as_datum() {
            Datum::Null => py.None().into_bound(py),
            Datum::Bool(b) => PyBool::new(py, b).to_owned().into_any(),
            Datum::Long(n) => PyInt::new(py, n).into_any(),
            Datum::Double(x) => PyFloat::new(py, x).into_any(),
            Datum::Text(text) => PyString::new(py, text).into_any(),
        }
    }
}

/// One row change. `op` is Debezium's code (`c`, `u`, `d`, `r`); `table` indexes the batch's
/// tables (held by the Python side: schema, names, topic); rows are in the schema's column order.
pub struct Event {
    pub op: u8,
    pub table: u16,
    pub key: Vec<Value>,
    pub before: Option<Vec<Value>>,
    pub after: Option<Vec<Value>>,
    /// The event's place in its partition, as canonical JSON text (`SourceInfo.position_text()`).
    pub position: String,
    pub ts_us: i64,
}

#[pyclass(frozen, module = "cdcflow._native")]
pub struct EventBatch {
    pub events: Vec<Event>,
    pub partition: String,
    pub ts_ms: i64,
    pub snapshot: bool,
}

fn row_to_py<'py>(py: Python<'py>, row: &Option<Vec<Value>>) -> PyResult<Bound<'py, PyAny>> {
    match row {
        None => Ok(py.None().into_bound(py)),
        Some(values) => Ok(PyTuple::new(py, values.iter().map(|v| v.to_py(py)))?.into_any()),
    }
}

/// The fixed fields of a table's source block: `(version, system, cluster, keyspace, table)`.
type SourceHead = (String, String, String, String, String);

/// What one table's events are encoded with: the key's and the value's writer and wire prefix,
/// and the source block's fixed fields.
struct AvroPlan<'py> {
    key: PyRef<'py, AvroWriter>,
    key_prefix: Vec<u8>,
    value: PyRef<'py, AvroWriter>,
    value_prefix: Vec<u8>,
    head: SourceHead,
}

/// `plans[i]` (None for a table with no events in the batch) built by `build`.
fn table_plans<'py, T>(
    plans: &Bound<'py, PyList>,
    build: impl Fn(&Bound<'py, PyAny>) -> PyResult<T>,
) -> PyResult<Vec<Option<T>>> {
    plans
        .iter()
        .map(|plan| {
            if plan.is_none() {
                Ok(None)
            } else {
                build(&plan).map(Some)
            }
        })
        .collect()
}

/// The plan of an event's table.
fn plan_of<T>(plans: &[Option<T>], table: u16) -> Result<&T, String> {
    match plans.get(table as usize) {
        Some(Some(plan)) => Ok(plan),
        _ => Err(format!("no plan for table {table}")),
    }
}

/// `(key writer, key prefix, value writer, value prefix, source head)`.
type PlanTuple<'py> = (
    PyRef<'py, AvroWriter>,
    Vec<u8>,
    PyRef<'py, AvroWriter>,
    Vec<u8>,
    SourceHead,
);

fn op_text(op: u8) -> &'static str {
    match op {
        b'c' => "c",
        b'u' => "u",
        b'd' => "d",
        _ => "r",
    }
}

impl EventBatch {
    fn event_tuple<'py>(&self, py: Python<'py>, event: &Event) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(
            py,
            [
                PyString::new(py, op_text(event.op)).into_any(),
                PyInt::new(py, event.table).into_any(),
                PyTuple::new(py, event.key.iter().map(|v| v.to_py(py)))?.into_any(),
                row_to_py(py, &event.before)?,
                row_to_py(py, &event.after)?,
                PyString::new(py, &event.position).into_any(),
                PyInt::new(py, event.ts_us).into_any(),
            ],
        )
    }

    fn encode_event(
        &self,
        plan: &AvroPlan<'_>,
        event: &Event,
        key: &mut Vec<u8>,
        value: &mut Vec<u8>,
    ) -> Result<(), String> {
        key.extend_from_slice(&plan.key_prefix);
        plan.key.write_record(key, plan.key.root(), &event.key)?;
        value.extend_from_slice(&plan.value_prefix);
        let (version, system, cluster, keyspace, table) = &plan.head;
        let source = [
            Datum::Text(version),
            Datum::Text(system),
            Datum::Text(cluster),
            Datum::Text(keyspace),
            Datum::Text(table),
            Datum::Text(&self.partition),
            Datum::Text(&event.position),
            Datum::Long(event.ts_us),
            Datum::Long(event.ts_us.div_euclid(1000)),
            Datum::Bool(self.snapshot),
        ];
        plan.value.write_envelope(
            value,
            op_text(event.op),
            event.before.as_deref(),
            event.after.as_deref(),
            &source,
            self.ts_ms,
        )
    }
}

/// What one table's events are written with as Kafka Connect JSON: the key's and the value's
/// schema text (None: payload only), the key's and the row's column names, the source block's
/// fixed fields.
struct JsonPlan {
    key_schema: Option<String>,
    value_schema: Option<String>,
    key_names: Vec<String>,
    value_names: Vec<String>,
    head: SourceHead,
}

/// `(key schema, value schema, key names, value names, source head)`.
type JsonPlanTuple = (Option<String>, Option<String>, Vec<String>, Vec<String>, SourceHead);

/// `{"name":value,...}` for a row of `values` with these column names.
fn write_json_row(out: &mut Vec<u8>, names: &[String], values: &[Value]) -> Result<(), String> {
    if names.len() != values.len() {
        return Err(format!("a row of {} values for {} columns", values.len(), names.len()));
    }
    out.push(b'{');
    for (index, (name, value)) in names.iter().zip(values).enumerate() {
        if index > 0 {
            out.push(b',');
        }
        write_text(out, name.as_bytes());
        out.push(b':');
        write_scalar(out, value.as_datum());
    }
    out.push(b'}');
    Ok(())
}

/// `{"schema":<schema>,"payload":` when there is a schema (closed by `close_envelope`).
fn open_envelope(out: &mut Vec<u8>, schema: &Option<String>) {
    if let Some(schema) = schema {
        out.extend_from_slice(b"{\"schema\":");
        out.extend_from_slice(schema.as_bytes());
        out.extend_from_slice(b",\"payload\":");
    }
}

fn close_envelope(out: &mut Vec<u8>, schema: &Option<String>) {
    if schema.is_some() {
        out.push(b'}');
    }
}

impl EventBatch {
    fn encode_json_event(
        &self,
        plan: &JsonPlan,
        event: &Event,
        key: &mut Vec<u8>,
        value: &mut Vec<u8>,
    ) -> Result<(), String> {
        open_envelope(key, &plan.key_schema);
        write_json_row(key, &plan.key_names, &event.key)?;
        close_envelope(key, &plan.key_schema);
        open_envelope(value, &plan.value_schema);
        value.extend_from_slice(b"{\"op\":");
        write_text(value, op_text(event.op).as_bytes());
        for (name, row) in [("before", &event.before), ("after", &event.after)] {
            value.extend_from_slice(format!(",\"{name}\":").as_bytes());
            match row {
                None => value.extend_from_slice(b"null"),
                Some(values) => write_json_row(value, &plan.value_names, values)?,
            }
        }
        let (version, system, cluster, keyspace, table) = &plan.head;
        value.extend_from_slice(b",\"source\":{\"version\":");
        write_text(value, version.as_bytes());
        for (name, text) in [
            ("connector", system.as_str()),
            ("name", cluster.as_str()),
            ("keyspace", keyspace.as_str()),
            ("table", table.as_str()),
            ("partition", self.partition.as_str()),
            ("position", event.position.as_str()),
        ] {
            value.extend_from_slice(format!(",\"{name}\":").as_bytes());
            write_text(value, text.as_bytes());
        }
        value.extend_from_slice(
            format!(
                ",\"ts_us\":{},\"ts_ms\":{},\"snapshot\":{}}},\"ts_ms\":{}}}",
                event.ts_us,
                event.ts_us.div_euclid(1000),
                self.snapshot,
                self.ts_ms
            )
            .as_bytes(),
        );
        close_envelope(value, &plan.value_schema);
        Ok(())
    }
}

#[pymethods]
impl EventBatch {
    fn __len__(&self) -> usize {
        self.events.len()
    }

    #[getter]
    fn partition(&self) -> &str {
        &self.partition
    }

    #[getter]
    fn ts_ms(&self) -> i64 {
        self.ts_ms
    }

    #[getter]
    fn snapshot(&self) -> bool {
        self.snapshot
    }

    /// The `index`-th event as `(op, table, key, before, after, position, ts_us)`, rows as tuples
    /// in column order.
    fn event<'py>(&self, py: Python<'py>, index: usize) -> PyResult<Bound<'py, PyTuple>> {
        let event = self
            .events
            .get(index)
            .ok_or_else(|| PyIndexError::new_err("event index out of range"))?;
        self.event_tuple(py, event)
    }

    /// Every event, as `event` gives each.
    fn events<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let tuples = self
            .events
            .iter()
            .map(|event| self.event_tuple(py, event))
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, tuples)
    }

    /// The index of the first event of table `table`, or None.
    fn first_of_table(&self, table: u16) -> Option<usize> {
        self.events.iter().position(|e| e.table == table)
    }

    /// The batch in Kafka messages, Kafka Connect JSON as `cdcflow.jsontext.json_envelope` writes
    /// each event's key and envelope: `plans[table]` is `(key schema text or None, value schema
    /// text or None, key column names, value column names, (version, system, cluster, keyspace,
    /// table))` (None for a table with no events here). Returns what `encode_avro` returns.
    fn encode_json<'py>(
        &self,
        py: Python<'py>,
        plans: &Bound<'py, PyList>,
        tombstones: bool,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let compiled = table_plans(plans, |plan| {
            let (key_schema, value_schema, key_names, value_names, head): JsonPlanTuple = plan.extract()?;
            Ok(JsonPlan {
                key_schema,
                value_schema,
                key_names,
                value_names,
                head,
            })
        })?;
        self.messages(py, tombstones, |event, key, value| {
            self.encode_json_event(plan_of(&compiled, event.table)?, event, key, value)
        })
    }

    /// The batch in Kafka messages, Avro in the Confluent wire format: `plans[table]` is
    /// `(key writer, key prefix, value writer, value prefix, (version, system, cluster,
    /// keyspace, table))` (None for a table with no events here). Returns `(tables, events,
    /// keys, values)`, a message each: the table it goes to, the event it comes from, its key and
    /// value bytes; with `tombstones`, a delete with a key is followed by a message with the same
    /// key and no value. ValueError when an event does not fit its schema (the caller encodes
    /// the batch event by event, which rejects just that one).
    fn encode_avro<'py>(
        &self,
        py: Python<'py>,
        plans: &Bound<'py, PyList>,
        tombstones: bool,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let compiled = table_plans(plans, |plan| {
            let (key, key_prefix, value, value_prefix, head): PlanTuple<'py> = plan.extract()?;
            Ok(AvroPlan {
                key,
                key_prefix,
                value,
                value_prefix,
                head,
            })
        })?;
        self.messages(py, tombstones, |event, key, value| {
            self.encode_event(plan_of(&compiled, event.table)?, event, key, value)
        })
    }
}

impl EventBatch {
    /// `(tables, events, keys, values)`, a message per event as `encode` writes its key and value,
    /// each keyed delete followed by its tombstone with `tombstones`; ValueError naming the event
    /// `encode` failed on.
    fn messages<'py>(
        &self,
        py: Python<'py>,
        tombstones: bool,
        encode: impl Fn(&Event, &mut Vec<u8>, &mut Vec<u8>) -> Result<(), String>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let capacity = self.events.len() + self.events.len() / 4;
        let mut tables: Vec<u16> = Vec::with_capacity(capacity);
        let mut sources: Vec<usize> = Vec::with_capacity(capacity);
        let mut keys: Vec<Bound<'py, PyAny>> = Vec::with_capacity(capacity);
        let mut values: Vec<Bound<'py, PyAny>> = Vec::with_capacity(capacity);
        let mut key = Vec::with_capacity(64);
        let mut value = Vec::with_capacity(1024);
        for (index, event) in self.events.iter().enumerate() {
            key.clear();
            value.clear();
            encode(event, &mut key, &mut value)
                .map_err(|why| PyValueError::new_err(format!("event {index}: {why}")))?;
            let key_bytes = PyBytes::new(py, &key).into_any();
            tables.push(event.table);
            sources.push(index);
            keys.push(key_bytes.clone());
            values.push(PyBytes::new(py, &value).into_any());
            if tombstones && event.op == b'd' && !event.key.is_empty() {
                tables.push(event.table);
                sources.push(index);
                keys.push(key_bytes);
                values.push(py.None().into_bound(py));
            }
        }
        PyTuple::new(
            py,
            [
                PyList::new(py, tables)?.into_any(),
                PyList::new(py, sources)?.into_any(),
                PyList::new(py, keys)?.into_any(),
                PyList::new(py, values)?.into_any(),
            ],
        )
    }
}
