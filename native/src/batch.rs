//! Change events in compact form: a batch of one source partition's events whose values are
//! Rust values, not Python objects. A compiled source builds one, a compiled converter encodes it
//! (`encode_avro`) without a Python object per event or per value, and whatever needs Python
//! objects (a transform without a batch form, a rejected record, a sink without one) gets them
//! on demand (`event`, `events`): `cdcflow.batches.EventBatch` turns those tuples into the
//! `ChangeEvent`s the source's `read` gives for the same offsets.

use std::sync::Arc;

use pyo3::exceptions::{PyIndexError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::avro::AvroWriter;
use crate::commitlog::values::uuid_text;
pub use crate::composite::Composite;
pub use crate::decimal::Decimal;
use crate::json::{write_base64, write_float, write_scalar, write_text, JsonEncoder};

/// A value the compiled core holds itself (a compact batch's), written without a Python object.
#[derive(Clone, Copy)]
pub enum Datum<'a> {
    Null,
    Bool(bool),
    Long(i64),
    Double(f64),
    Text(&'a str),
    /// A uuid or timeuuid: its text is the canonical 8-4-4-4-12 form.
    Uuid(&'a [u8; 16]),
    /// A CQL decimal: each converter's form is written from its scale and unscaled number.
    Decimal(Decimal),
}

/// A row's value as the writers take it: a value the core holds, the Python object a source
/// decoded (what the core does not hold itself: decimals, collections, bytes...), or no value at
/// all (a column a delta row did not touch: written as a dict without that key is).
#[derive(Clone, Copy)]
pub enum Slot<'a> {
    Datum(Datum<'a>),
    /// A collection, user type or tuple the core holds: written as the Python value it stands
    /// for (`Composite::to_py`), through the column's rewrite.
    Composite(&'a Composite),
    Object(&'a Py<PyAny>),
    Absent,
}

/// What a compact row holds: anything that reads as a [`Slot`].
pub trait RowValue {
    fn slot(&self) -> Slot<'_>;
}

impl RowValue for Datum<'_> {
    fn slot(&self) -> Slot<'_> {
        Slot::Datum(*self)
    }
}

/// The object `EventBatch.event` gives for an absent value (`cdcflow._native.ABSENT`):
/// `cdcflow.batches` leaves such columns out of the row's dict.
static ABSENT: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

pub fn absent(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    let object = ABSENT.get_or_try_init(py, || -> PyResult<Py<PyAny>> {
        Ok(py.import("builtins")?.getattr("object")?.call0()?.unbind())
    })?;
    Ok(object.bind(py))
}

/// The Python value a datum stands for.
pub fn datum_to_py<'py>(py: Python<'py>, datum: Datum<'_>) -> PyResult<Bound<'py, PyAny>> {
    Ok(match datum {
        Datum::Null => py.None().into_bound(py),
        Datum::Bool(b) => PyBool::new(py, b).to_owned().into_any(),
        Datum::Long(n) => PyInt::new(py, n).into_any(),
        Datum::Double(x) => PyFloat::new(py, x).into_any(),
        Datum::Text(text) => PyString::new(py, text).into_any(),
        Datum::Uuid(bytes) => uuid_text(py, bytes).into_any(),
        Datum::Decimal(decimal) => decimal.to_py(py)?,
    })
}

/// A slot's value as the Python object it stands for (None for an absent one: the caller handles
/// absence before asking), through `prepare` (a converter's rewrite of the column) when given.
pub fn slot_object<'py>(
    py: Python<'py>,
    slot: Slot<'_>,
    prepare: Option<&Py<PyAny>>,
) -> Result<Bound<'py, PyAny>, String> {
    let object = match slot {
        Slot::Datum(datum) => datum_to_py(py, datum).map_err(|e| e.to_string())?,
        Slot::Composite(composite) => composite.to_py(py).map_err(|e| e.to_string())?,
        Slot::Object(object) => object.bind(py).clone(),
        Slot::Absent => py.None().into_bound(py),
    };
    match prepare {
        None => Ok(object),
        Some(prepare) => prepare.bind(py).call1((object,)).map_err(|e| e.to_string()),
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
    /// UTF-8 text inside bytes several values share (a commit-log mutation's): `bytes[start..end]`,
    /// checked to be UTF-8 when the value was made (see [`Value::text_in`]).
    TextIn(Arc<[u8]>, u32, u32),
    /// A uuid or timeuuid's 16 bytes.
    Uuid([u8; 16]),
    /// A CQL decimal.
    Decimal(Decimal),
    /// A collection, user type or tuple.
    Composite(Box<Composite>),
    /// A value the core does not hold itself, as the source's reference decoder gave it.
    Py(Py<PyAny>),
    /// A column the change did not touch (a delta row image).
    Absent,
}

impl RowValue for Value {
    fn slot(&self) -> Slot<'_> {
        match self {
            Value::Py(object) => Slot::Object(object),
            Value::Absent => Slot::Absent,
            Value::Composite(composite) => Slot::Composite(composite),
            _ => Slot::Datum(self.as_datum()),
        }
    }
}

impl Value {
    /// The value as a [`Datum`]; a Python object or an absent value reads as null here (the
    /// writers ask for [`RowValue::slot`]).
    fn as_datum(&self) -> Datum<'_> {
        match self {
            Value::Py(_) | Value::Absent | Value::Composite(_) => Datum::Null,
            Value::Null => Datum::Null,
            Value::Bool(b) => Datum::Bool(*b),
            Value::Long(n) => Datum::Long(*n),
            Value::Double(x) => Datum::Double(*x),
            Value::Text(text) => Datum::Text(text),
            Value::Shared(text) => Datum::Text(text),
            Value::Slice(pool, start, end) => Datum::Text(&pool[*start as usize..*end as usize]),
            // SAFETY: checked to be UTF-8 when made (text_in), and the bytes never change.
            Value::TextIn(bytes, start, end) => {
                Datum::Text(unsafe { std::str::from_utf8_unchecked(&bytes[*start as usize..*end as usize]) })
            }
            Value::Uuid(bytes) => Datum::Uuid(bytes),
            Value::Decimal(decimal) => Datum::Decimal(*decimal),
        }
    }

    /// The value as a [`Datum`], when it is one (not a Python object, a composite or absent).
    pub fn datum(&self) -> Option<Datum<'_>> {
        match self {
            Value::Py(_) | Value::Absent | Value::Composite(_) => None,
            _ => Some(self.as_datum()),
        }
    }

    /// `bytes[start..end]` as text, when it is UTF-8 (strictly, as CPython's decoder reads it).
    pub fn text_in(bytes: &Arc<[u8]>, start: usize, end: usize) -> Option<Value> {
        let text = bytes.get(start..end)?;
        if std::str::from_utf8(text).is_err() || end > u32::MAX as usize {
            return None;
        }
        Some(Value::TextIn(bytes.clone(), start as u32, end as u32))
    }
}

impl Value {
    pub fn to_py<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self {
            Value::Py(object) => Ok(object.bind(py).clone()),
            Value::Absent => Ok(absent(py)?.clone()),
            Value::Composite(composite) => composite.to_py(py),
            _ => datum_to_py(py, self.as_datum()),
        }
    }

    /// A copy (a Python object's reference counted anew, which needs the interpreter).
    pub fn clone_ref(&self, py: Python<'_>) -> Value {
        match self {
            Value::Null => Value::Null,
            Value::Bool(b) => Value::Bool(*b),
            Value::Long(n) => Value::Long(*n),
            Value::Double(x) => Value::Double(*x),
            Value::Text(text) => Value::Text(text.clone()),
            Value::Shared(text) => Value::Shared(text.clone()),
            Value::Slice(pool, start, end) => Value::Slice(pool.clone(), *start, *end),
            Value::TextIn(bytes, start, end) => Value::TextIn(bytes.clone(), *start, *end),
            Value::Uuid(bytes) => Value::Uuid(*bytes),
            Value::Decimal(decimal) => Value::Decimal(*decimal),
            Value::Composite(composite) => Value::Composite(Box::new(composite.clone_ref(py))),
            Value::Py(object) => Value::Py(object.clone_ref(py)),
            Value::Absent => Value::Absent,
        }
    }
}

/// An event's place in its partition, written as canonical JSON text (`SourceInfo.position_text()`).
pub enum Position {
    Text(String),
    /// A commit-log entry's change: `{"index":…,"position":…,"segment":…}` (numbers until written).
    CommitLog {
        segment: i64,
        position: i64,
        index: u32,
    },
}

impl Position {
    pub fn text(&self) -> std::borrow::Cow<'_, str> {
        match self {
            Position::Text(text) => std::borrow::Cow::Borrowed(text),
            Position::CommitLog {
                segment,
                position,
                index,
            } => std::borrow::Cow::Owned(format!(
                "{{\"index\":{index},\"position\":{position},\"segment\":{segment}}}"
            )),
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
    /// The event's place in its partition.
    pub position: Position,
    pub ts_us: i64,
    /// The event's own headers (`ChangeEvent.headers`), in their order.
    pub headers: Option<Vec<(String, String)>>,
}

#[pyclass(frozen, module = "cdcflow._native")]
pub struct EventBatch {
    pub events: Vec<Event>,
    pub partition: String,
    pub ts_ms: i64,
    pub snapshot: bool,
}

fn values_to_py<'py>(py: Python<'py>, values: &[Value]) -> PyResult<Bound<'py, PyAny>> {
    let objects = values.iter().map(|v| v.to_py(py)).collect::<PyResult<Vec<_>>>()?;
    Ok(PyTuple::new(py, objects)?.into_any())
}

fn row_to_py<'py>(py: Python<'py>, row: &Option<Vec<Value>>) -> PyResult<Bound<'py, PyAny>> {
    match row {
        None => Ok(py.None().into_bound(py)),
        Some(values) => values_to_py(py, values),
    }
}

fn headers_to_py<'py>(py: Python<'py>, headers: &Option<Vec<(String, String)>>) -> PyResult<Bound<'py, PyAny>> {
    match headers {
        None => Ok(py.None().into_bound(py)),
        Some(pairs) => {
            let dict = PyDict::new(py);
            for (name, value) in pairs {
                dict.set_item(name, value)?;
            }
            Ok(dict.into_any())
        }
    }
}

/// A column rewrite per field (`prepare[i]` for field `i`; an empty list: none).
type Prepares = Vec<Option<Py<PyAny>>>;

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
    key_prepare: Prepares,
    value_prepare: Prepares,
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

/// `(key writer, key prefix, value writer, value prefix, source head, key prepares, value prepares)`.
type PlanTuple<'py> = (
    PyRef<'py, AvroWriter>,
    Vec<u8>,
    PyRef<'py, AvroWriter>,
    Vec<u8>,
    SourceHead,
    Prepares,
    Prepares,
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
                values_to_py(py, &event.key)?,
                row_to_py(py, &event.before)?,
                row_to_py(py, &event.after)?,
                PyString::new(py, &event.position.text()).into_any(),
                PyInt::new(py, event.ts_us).into_any(),
                headers_to_py(py, &event.headers)?,
            ],
        )
    }

    fn encode_event(
        &self,
        py: Python<'_>,
        plan: &AvroPlan<'_>,
        event: &Event,
        key: &mut Vec<u8>,
        value: &mut Vec<u8>,
    ) -> Result<(), String> {
        key.extend_from_slice(&plan.key_prefix);
        plan.key
            .write_record(py, key, plan.key.root(), &event.key, &plan.key_prepare)?;
        value.extend_from_slice(&plan.value_prefix);
        let (version, system, cluster, keyspace, table) = &plan.head;
        let position = event.position.text();
        let source = [
            Datum::Text(version),
            Datum::Text(system),
            Datum::Text(cluster),
            Datum::Text(keyspace),
            Datum::Text(table),
            Datum::Text(&self.partition),
            Datum::Text(&position),
            Datum::Long(event.ts_us),
            Datum::Long(event.ts_us.div_euclid(1000)),
            Datum::Bool(self.snapshot),
        ];
        plan.value.write_envelope(
            py,
            value,
            &plan.value_prepare,
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
struct JsonPlan<'py> {
    key_schema: Option<String>,
    value_schema: Option<String>,
    key_names: Vec<String>,
    value_names: Vec<String>,
    head: SourceHead,
    /// Writes the values the core does not hold (`compact_json`'s encoder).
    objects: PyRef<'py, JsonEncoder>,
    key_prepare: Prepares,
    value_prepare: Prepares,
    /// The converter's `decimal_handling`, for the decimals the core holds (None: each through
    /// its column's rewrite).
    decimals: Option<DecimalForm>,
}

/// How a JSON converter writes a decimal (`decimal_handling`, `cdcflow.wire_values`).
#[derive(Clone, Copy)]
enum DecimalForm {
    /// Debezium's `{"scale": s, "value": <unscaled two's complement, base64>}`.
    Precise,
    Double,
    /// Plain text.
    Text,
}

impl DecimalForm {
    fn of(name: &str) -> PyResult<DecimalForm> {
        match name {
            "precise" => Ok(DecimalForm::Precise),
            "double" => Ok(DecimalForm::Double),
            "string" => Ok(DecimalForm::Text),
            other => Err(PyValueError::new_err(format!("unknown decimal_handling {other:?}"))),
        }
    }

    /// `decimal` in this form, as the column's rewrite and `compact_json` write it; false when
    /// left to them (plain text too long to write here, a magnitude no double holds).
    fn write(self, out: &mut Vec<u8>, decimal: Decimal) -> bool {
        match self {
            DecimalForm::Precise => {
                out.extend_from_slice(format!("{{\"scale\":{},\"value\":\"", decimal.scale).as_bytes());
                let mut unscaled = Vec::with_capacity(16);
                decimal.write_unscaled(&mut unscaled);
                write_base64(out, &unscaled);
                out.extend_from_slice(b"\"}");
            }
            DecimalForm::Double => {
                let double = decimal.to_f64();
                if !double.is_finite() {
                    return false; // past a double's range: the column's rewrite refuses it
                }
                write_float(out, double)
            }
            DecimalForm::Text => {
                if !decimal.plain_fits() {
                    return false;
                }
                write_scalar(out, Datum::Decimal(decimal));
            }
        }
        true
    }
}

/// `(key schema, value schema, key names, value names, source head, object encoder, key
/// prepares, value prepares)`.
type JsonPlanTuple<'py> = (
    Option<String>,
    Option<String>,
    Vec<String>,
    Vec<String>,
    SourceHead,
    PyRef<'py, JsonEncoder>,
    Prepares,
    Prepares,
);

/// `{"name":value,...}` for a row of `values` with these column names, as `compact_json` writes
/// the dict of the row: absent values left out, objects (and every value `prepare` rewrites)
/// written as the encoder writes them, decimals the core holds in the converter's form.
fn write_json_row(
    py: Python<'_>,
    out: &mut Vec<u8>,
    names: &[String],
    values: &[Value],
    plan: &JsonPlan<'_>,
    prepare: &[Option<Py<PyAny>>],
) -> Result<(), String> {
    if names.len() != values.len() {
        return Err(format!("a row of {} values for {} columns", values.len(), names.len()));
    }
    out.push(b'{');
    let mut first = true;
    for (index, (name, value)) in names.iter().zip(values).enumerate() {
        let slot = value.slot();
        if let Slot::Absent = slot {
            continue;
        }
        if !first {
            out.push(b',');
        }
        first = false;
        write_text(out, name.as_bytes());
        out.push(b':');
        let start = out.len();
        let written = match (slot, prepare.get(index).and_then(Option::as_ref)) {
            // A decimal column's rewrite is the converter's decimal form.
            (Slot::Datum(Datum::Decimal(decimal)), Some(_)) => match plan.decimals {
                Some(form) => form.write(out, decimal),
                None => false,
            },
            (Slot::Datum(Datum::Decimal(decimal)), None) => {
                decimal.plain_fits() && {
                    write_scalar(out, Datum::Decimal(decimal));
                    true
                }
            }
            (Slot::Datum(datum), None) => {
                write_scalar(out, datum);
                true
            }
            _ => false,
        };
        if !written {
            out.truncate(start);
            let object = slot_object(py, slot, prepare.get(index).and_then(Option::as_ref))?;
            plan.objects.write_value(py, out, &object).map_err(|e| e.to_string())?;
        }
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
        py: Python<'_>,
        plan: &JsonPlan<'_>,
        event: &Event,
        key: &mut Vec<u8>,
        value: &mut Vec<u8>,
    ) -> Result<(), String> {
        open_envelope(key, &plan.key_schema);
        write_json_row(py, key, &plan.key_names, &event.key, plan, &plan.key_prepare)?;
        close_envelope(key, &plan.key_schema);
        open_envelope(value, &plan.value_schema);
        value.extend_from_slice(b"{\"op\":");
        write_text(value, op_text(event.op).as_bytes());
        for (name, row) in [("before", &event.before), ("after", &event.after)] {
            value.extend_from_slice(format!(",\"{name}\":").as_bytes());
            match row {
                None => value.extend_from_slice(b"null"),
                Some(values) => write_json_row(py, value, &plan.value_names, values, plan, &plan.value_prepare)?,
            }
        }
        let (version, system, cluster, keyspace, table) = &plan.head;
        let position = event.position.text();
        value.extend_from_slice(b",\"source\":{\"version\":");
        write_text(value, version.as_bytes());
        for (name, text) in [
            ("connector", system.as_str()),
            ("name", cluster.as_str()),
            ("keyspace", keyspace.as_str()),
            ("table", table.as_str()),
            ("partition", self.partition.as_str()),
            ("position", &position),
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
    /// table), object encoder, key rewrites, value rewrites[, decimal_handling])` (None for a
    /// table with no events here). Returns what `encode_avro` returns.
    fn encode_json<'py>(
        &self,
        py: Python<'py>,
        plans: &Bound<'py, PyList>,
        tombstones: bool,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let compiled = table_plans(plans, |plan| {
            let plan = plan.cast::<PyTuple>()?;
            let (key_schema, value_schema, key_names, value_names, head, objects, key_prepare, value_prepare): JsonPlanTuple =
                plan.get_slice(0, 8).extract()?;
            let decimals = match plan.len() {
                8 => None,
                _ => Some(DecimalForm::of(plan.get_item(8)?.extract::<&str>()?)?),
            };
            Ok(JsonPlan {
                key_schema,
                value_schema,
                key_names,
                value_names,
                head,
                objects,
                key_prepare,
                value_prepare,
                decimals,
            })
        })?;
        self.messages(py, tombstones, |event, key, value| {
            self.encode_json_event(py, plan_of(&compiled, event.table)?, event, key, value)
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
            let (key, key_prefix, value, value_prefix, head, key_prepare, value_prepare): PlanTuple<'py> =
                plan.extract()?;
            Ok(AvroPlan {
                key,
                key_prefix,
                value,
                value_prefix,
                head,
                key_prepare,
                value_prepare,
            })
        })?;
        self.messages(py, tombstones, |event, key, value| {
            self.encode_event(py, plan_of(&compiled, event.table)?, event, key, value)
        })
    }
}

impl EventBatch {
    /// `(tables, events, keys, values, headers)`, a message per event as `encode` writes its key
    /// and value (with the event's own headers), each keyed delete followed by its tombstone
    /// (headers None: the sink gives tombstones theirs) with `tombstones`; ValueError naming the
    /// event `encode` failed on.
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
        let mut headers: Vec<Bound<'py, PyAny>> = Vec::with_capacity(capacity);
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
            headers.push(match &event.headers {
                None => py.None().into_bound(py),
                Some(pairs) => PyList::new(py, pairs)?.into_any(),
            });
            if tombstones && event.op == b'd' && !event.key.is_empty() {
                tables.push(event.table);
                sources.push(index);
                keys.push(key_bytes);
                values.push(py.None().into_bound(py));
                headers.push(py.None().into_bound(py));
            }
        }
        PyTuple::new(
            py,
            [
                PyList::new(py, tables)?.into_any(),
                PyList::new(py, sources)?.into_any(),
                PyList::new(py, keys)?.into_any(),
                PyList::new(py, values)?.into_any(),
                PyList::new(py, headers)?.into_any(),
            ],
        )
    }
}
