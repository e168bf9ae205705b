//! CQL values as the commit log stores them, decoded to the Python values cdcflow's events carry.
//!
//! This is the one place that says what each CQL type decodes to in the compiled core. It mirrors
//! `cdcflow.sources.cql.cqltypes` (the reference) for the types decoded here (`decimal` to the
//! same `Decimal`, made from the same text; collections, user types and tuples, which a compact
//! batch holds as [`Composite`] values, to the same lists and dicts); every other type (IPv6
//! `inet`; `duration`; custom types; `empty`) is handed to the reference's own decoder, so a
//! change to how the reference represents them needs no change here. A type moved from the reference to
//! Rust must keep its exact result: `tests/unit/sources/cassandra_commitlog/test_compiled_commitlog.py` holds the two equal
//! over random tables of every type.
//!
//! Every function here returns `Err(Decline)` instead of raising: the caller then lets the
//! reference decode the whole mutation, which raises the error cdcflow reports.

use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

use std::sync::Arc;

use crate::batch::Value;
use crate::composite::{Composite, FieldNames};
use crate::decimal::Decimal;

/// The compiled core declines an input: the reference decides (it decodes, or raises the error).
#[derive(Debug, Clone, Copy)]
pub struct Decline(pub &'static str);

pub type R<T> = Result<T, Decline>;

impl From<PyErr> for Decline {
    fn from(_: PyErr) -> Self {
        Decline("a Python call raised")
    }
}

/// How a type's values decode.
pub enum Kind {
    Text,
    Blob,
    Boolean,
    TinyInt,
    SmallInt,
    Int,
    /// bigint, counter, timestamp (epoch millis) and time (nanoseconds): 8 bytes, signed.
    BigInt,
    Varint,
    /// An int32 scale, then the unscaled number (big-endian two's complement).
    Decimal,
    Float,
    Double,
    /// Days since the epoch, stored unsigned with the epoch at 2^31.
    Date,
    /// uuid and timeuuid, as their canonical text.
    Uuid,
    /// Its text: IPv4 here, IPv6 (whose text has several spellings) by the reference.
    Inet,
    List,
    Set,
    Map,
    Tuple,
    Vector {
        dimension: usize,
    },
    /// A user type: a dict of its fields (`compact`, `collect_compact`; the object path's
    /// `decode` and `collect_user_type` ask the reference).
    UserType,
    /// Decoded by the reference: its `CqlType.decode` (and `collect`/`path_label`).
    Reference,
}

pub struct CqlType {
    pub kind: Kind,
    /// Bytes in storage, or -1 when a vint length precedes the value.
    pub fixed_length: i64,
    pub multi_cell: bool,
    /// The element's identity in a cell path (list: timeuuid, set: the element, map: the key).
    pub path: Option<Box<CqlType>>,
    /// The cell's value (list: the element, map: the value, vector: the element).
    pub value: Option<Box<CqlType>>,
    pub members: Vec<CqlType>,
    /// A user type's or tuple's field names (a tuple's `f0`, `f1`...), `members` their types.
    pub names: Option<Arc<FieldNames>>,
    /// The reference's `CqlType`: `decode`, `collect` and `path_label` for what is not compiled.
    pub reference: Py<PyAny>,
}

impl CqlType {
    /// Built from `cdcflow.sources.cassandra_commitlog.compiled.type_description`:
    /// `(name, fixed_length, multi_cell, reference, path, value, members, dimension, field names)`.
    pub fn from_description(description: &Bound<'_, PyAny>) -> PyResult<CqlType> {
        let name: String = description.get_item(0)?.extract()?;
        let fixed_length: i64 = description.get_item(1)?.extract()?;
        let multi_cell: bool = description.get_item(2)?.extract()?;
        let reference = description.get_item(3)?.unbind();
        let child = |index: usize| -> PyResult<Option<Box<CqlType>>> {
            let item = description.get_item(index)?;
            if item.is_none() {
                Ok(None)
            } else {
                Ok(Some(Box::new(CqlType::from_description(&item)?)))
            }
        };
        let path = child(4)?;
        let value = child(5)?;
        let mut members = Vec::new();
        for member in description.get_item(6)?.try_iter()? {
            members.push(CqlType::from_description(&member?)?);
        }
        let dimension: usize = description.get_item(7)?.extract()?;
        let field_names: Vec<String> = match name.as_str() {
            "tuple" => (0..members.len()).map(|i| format!("f{i}")).collect(),
            "udt" => description.get_item(8)?.extract()?,
            _ => Vec::new(),
        };
        let names = if matches!(name.as_str(), "tuple" | "udt") {
            if field_names.len() != members.len() {
                return Err(PyValueError::new_err(
                    "a user type's field names do not match its field types",
                ));
            }
            let py_names = field_names
                .iter()
                .map(|n| PyString::new(description.py(), n).unbind())
                .collect();
            Some(Arc::new(FieldNames {
                text: field_names,
                py: py_names,
            }))
        } else {
            None
        };
        let kind = match name.as_str() {
            "ascii" | "text" | "varchar" => Kind::Text,
            "blob" => Kind::Blob,
            "boolean" => Kind::Boolean,
            "tinyint" => Kind::TinyInt,
            "smallint" => Kind::SmallInt,
            "int" => Kind::Int,
            "bigint" | "counter" | "timestamp" | "time" => Kind::BigInt,
            "varint" => Kind::Varint,
            "decimal" => Kind::Decimal,
            "float" => Kind::Float,
            "double" => Kind::Double,
            "date" => Kind::Date,
            "uuid" | "timeuuid" => Kind::Uuid,
            "inet" => Kind::Inet,
            "list" if value.is_some() && path.is_some() => Kind::List,
            "set" if path.is_some() => Kind::Set,
            "map" if path.is_some() && value.is_some() => Kind::Map,
            "tuple" => Kind::Tuple,
            "vector" if value.is_some() && dimension > 0 => Kind::Vector { dimension },
            "udt" => Kind::UserType,
            "reference" => Kind::Reference,
            other => {
                return Err(PyValueError::new_err(format!("unknown CQL type description {other:?}")));
            }
        };
        Ok(CqlType {
            kind,
            fixed_length,
            multi_cell,
            path,
            value,
            members,
            names,
            reference,
        })
    }

    /// The value of `raw` (a cell's value, a key part, a clustering value).
    pub fn decode<'py>(&self, py: Python<'py>, raw: &[u8]) -> R<Bound<'py, PyAny>> {
        match self.kind {
            Kind::Text => text(py, raw),
            Kind::Blob => Ok(PyBytes::new(py, raw).into_any()),
            Kind::Boolean => Ok(if raw.is_empty() {
                py.None().into_bound(py)
            } else {
                pybool(py, raw != [0u8])
            }),
            Kind::TinyInt => fixed::<1>(py, raw, |b| b[0] as i8 as i64),
            Kind::SmallInt => fixed::<2>(py, raw, |b| i16::from_be_bytes(*b) as i64),
            Kind::Int => fixed::<4>(py, raw, |b| i32::from_be_bytes(*b) as i64),
            Kind::BigInt => fixed::<8>(py, raw, |b| i64::from_be_bytes(*b)),
            Kind::Float => match <[u8; 4]>::try_from(raw) {
                Ok(bytes) => Ok(float(py, f32::from_be_bytes(bytes) as f64)),
                Err(_) if raw.is_empty() => Ok(py.None().into_bound(py)),
                Err(_) => Err(Decline("float of the wrong length")),
            },
            Kind::Double => match <[u8; 8]>::try_from(raw) {
                Ok(bytes) => Ok(float(py, f64::from_be_bytes(bytes))),
                Err(_) if raw.is_empty() => Ok(py.None().into_bound(py)),
                Err(_) => Err(Decline("double of the wrong length")),
            },
            Kind::Varint => varint(py, raw, &self.reference),
            Kind::Decimal => match Decimal::from_cql(raw) {
                Some(decimal) => Ok(decimal.to_py(py)?),
                None if raw.is_empty() => Ok(py.None().into_bound(py)),
                None => self.reference_decode(py, raw), // wider than 128 bits, or cut short
            },
            Kind::Date => match <[u8; 4]>::try_from(raw) {
                Ok(bytes) => Ok(int(py, u32::from_be_bytes(bytes) as i64 - (1i64 << 31))),
                Err(_) if raw.is_empty() => Ok(py.None().into_bound(py)),
                Err(_) => Err(Decline("date of the wrong length")),
            },
            Kind::Uuid => match <[u8; 16]>::try_from(raw) {
                Ok(bytes) => Ok(uuid_text(py, &bytes).into_any()),
                Err(_) if raw.is_empty() => Ok(py.None().into_bound(py)),
                Err(_) => Err(Decline("uuid of the wrong length")),
            },
            Kind::Inet => match <[u8; 4]>::try_from(raw) {
                Ok([a, b, c, d]) => Ok(PyString::new(py, &format!("{a}.{b}.{c}.{d}")).into_any()),
                Err(_) if raw.is_empty() => Ok(py.None().into_bound(py)),
                Err(_) => self.reference_decode(py, raw),
            },
            Kind::List | Kind::Set => {
                let element = if matches!(self.kind, Kind::List) {
                    &self.value
                } else {
                    &self.path
                };
                let element = element
                    .as_deref()
                    .ok_or(Decline("collection without an element type"))?;
                let items = frozen_collection(raw)?;
                let list = PyList::empty(py);
                for item in items {
                    list.append(optional(py, element, item)?)?;
                }
                Ok(list.into_any())
            }
            Kind::Map => {
                let key = self.path.as_deref().ok_or(Decline("map without a key type"))?;
                let value = self.value.as_deref().ok_or(Decline("map without a value type"))?;
                let items = frozen_collection(raw)?;
                let dict = PyDict::new(py);
                let mut index = 0;
                while index + 1 < items.len() {
                    dict.set_item(optional(py, key, items[index])?, optional(py, value, items[index + 1])?)?;
                    index += 2;
                }
                Ok(dict.into_any())
            }
            Kind::Tuple => {
                let (items, _) = elements(raw)?;
                let dict = PyDict::new(py);
                for (index, member) in self.members.iter().enumerate() {
                    let value = match items.get(index) {
                        Some(item) => optional(py, member, *item)?,
                        None => py.None().into_bound(py),
                    };
                    dict.set_item(PyString::new(py, &format!("f{index}")), value)?;
                }
                Ok(dict.into_any())
            }
            Kind::Vector { dimension } => {
                if raw.is_empty() {
                    return Ok(py.None().into_bound(py));
                }
                let element = self.value.as_deref().ok_or(Decline("vector without an element type"))?;
                let list = PyList::empty(py);
                let size = element.fixed_length;
                if size > 0 {
                    let size = size as usize;
                    if Some(raw.len()) != size.checked_mul(dimension) {
                        return Err(Decline("vector of the wrong length"));
                    }
                    for chunk in raw.chunks(size) {
                        list.append(element.decode(py, chunk)?)?;
                    }
                } else {
                    // The reference slices past the end silently (a shorter value) and checks no
                    // trailing bytes; only a length vint past the end fails.
                    let mut offset: usize = 0;
                    for _ in 0..dimension {
                        let (length, next) = read_unsigned_vint(raw, offset)?;
                        let end = (next as u128 + length as u128).min(raw.len() as u128) as usize;
                        let start = next.min(raw.len());
                        list.append(element.decode(py, &raw[start..end])?)?;
                        offset = (next as u128 + length as u128).min(usize::MAX as u128) as usize;
                    }
                }
                Ok(list.into_any())
            }
            Kind::Reference | Kind::UserType => self.reference_decode(py, raw),
        }
    }

    /// The value `decode` gives for `data[start..end]`, held by the core where it can be
    /// (numbers, text, booleans, uuids, decimals: what a compact batch writes without a Python
    /// object; text as a range of `data`, which the value shares), else as that Python object.
    pub fn compact(&self, py: Python<'_>, data: &Arc<[u8]>, start: usize, end: usize) -> R<Value> {
        let raw = data.get(start..end).ok_or(Decline("a value past its mutation"))?;
        fn fixed<const N: usize>(raw: &[u8], convert: impl Fn(&[u8; N]) -> i64) -> R<Value> {
            match <[u8; N]>::try_from(raw) {
                Ok(bytes) => Ok(Value::Long(convert(&bytes))),
                Err(_) if raw.is_empty() => Ok(Value::Null),
                Err(_) => Err(Decline("integer of the wrong length")),
            }
        }
        match self.kind {
            // Strict UTF-8 both ways: Rust's check refuses exactly what CPython's strict decoder does.
            Kind::Text => Value::text_in(data, start, end).ok_or(Decline("not UTF-8")),
            Kind::Boolean => Ok(if raw.is_empty() {
                Value::Null
            } else {
                Value::Bool(raw != [0u8])
            }),
            Kind::TinyInt => fixed::<1>(raw, |b| b[0] as i8 as i64),
            Kind::SmallInt => fixed::<2>(raw, |b| i16::from_be_bytes(*b) as i64),
            Kind::Int => fixed::<4>(raw, |b| i32::from_be_bytes(*b) as i64),
            Kind::BigInt => fixed::<8>(raw, |b| i64::from_be_bytes(*b)),
            Kind::Date => fixed::<4>(raw, |b| u32::from_be_bytes(*b) as i64 - (1i64 << 31)),
            Kind::Double => match <[u8; 8]>::try_from(raw) {
                Ok(bytes) => Ok(Value::Double(f64::from_be_bytes(bytes))),
                Err(_) if raw.is_empty() => Ok(Value::Null),
                Err(_) => Err(Decline("double of the wrong length")),
            },
            Kind::Float => match <[u8; 4]>::try_from(raw) {
                Ok(bytes) => Ok(Value::Double(f32::from_be_bytes(bytes) as f64)),
                Err(_) if raw.is_empty() => Ok(Value::Null),
                Err(_) => Err(Decline("float of the wrong length")),
            },
            Kind::Uuid => match <[u8; 16]>::try_from(raw) {
                Ok(bytes) => Ok(Value::Uuid(bytes)),
                Err(_) if raw.is_empty() => Ok(Value::Null),
                Err(_) => Err(Decline("uuid of the wrong length")),
            },
            Kind::Decimal => match Decimal::from_cql(raw) {
                Some(decimal) => Ok(Value::Decimal(decimal)),
                None => self.compact_object(py, raw), // empty, wider than 128 bits, or cut short
            },
            Kind::List | Kind::Set => {
                let element = self.element()?;
                let mut items = Vec::new();
                for item in frozen_collection(raw)? {
                    items.push(compact_optional(py, element, data, item)?);
                }
                Ok(Value::Composite(Box::new(Composite::List(items))))
            }
            Kind::Map => {
                let (key, value) = self.entry_types()?;
                if !key.keys_compare_as_bytes() {
                    return self.compact_object(py, raw);
                }
                let items = frozen_collection(raw)?;
                let pairs: Vec<KeyValue<'_>> = items.chunks_exact(2).map(|pair| (pair[0], pair[1])).collect();
                match compact_map(py, key, value, data, &pairs)? {
                    Some(map) => Ok(map),
                    None => self.compact_object(py, raw),
                }
            }
            Kind::Tuple | Kind::UserType if !self.multi_cell => {
                let names = self
                    .names
                    .as_ref()
                    .ok_or(Decline("a user type without its field names"))?;
                let (items, _) = elements(raw)?;
                // A field the value does not hold (it was written before the type grew) is null.
                let mut values = Vec::with_capacity(self.members.len());
                for (index, member) in self.members.iter().enumerate() {
                    values.push(compact_optional(py, member, data, items.get(index).copied().flatten())?);
                }
                Ok(fields(names, values))
            }
            _ => self.compact_object(py, raw),
        }
    }

    /// A list's or set's element type.
    fn element(&self) -> R<&CqlType> {
        match self.kind {
            Kind::List => self.value.as_deref(),
            _ => self.path.as_deref(),
        }
        .ok_or(Decline("collection without an element type"))
    }

    /// A map's key and value types.
    fn entry_types(&self) -> R<(&CqlType, &CqlType)> {
        match (self.path.as_deref(), self.value.as_deref()) {
            (Some(key), Some(value)) => Ok((key, value)),
            _ => Err(Decline("map without its key and value types")),
        }
    }

    /// Whether two keys of this type are one dict key exactly when their bytes are equal (text,
    /// uuids, fixed-size integers and dates): a map of such keys is held by the core, any other
    /// (decimal keys, where `1.0` and `1.00` are one key; booleans; collections) by the reference.
    fn keys_compare_as_bytes(&self) -> bool {
        matches!(
            self.kind,
            Kind::Text | Kind::Uuid | Kind::TinyInt | Kind::SmallInt | Kind::Int | Kind::BigInt | Kind::Date
        )
    }

    /// A multi-cell column's value from its cells, as `CqlType.collect(cells, whole)` gives it:
    /// `(path, value)` pairs, None for a deleted cell. A collection's value is made of its live
    /// cells; a user type's names every field when `whole` (null where no cell), else only the
    /// fields the cells wrote (a deleted one as null).
    pub fn collect_compact(
        &self,
        py: Python<'_>,
        data: &Arc<[u8]>,
        cells: &[(&[u8], Option<&[u8]>)],
        whole: bool,
    ) -> R<Value> {
        let live = cells.iter().filter_map(|(path, value)| value.map(|v| (*path, v)));
        match self.kind {
            Kind::List | Kind::Set => {
                let element = self.element()?;
                let of_path = matches!(self.kind, Kind::Set);
                let mut items = Vec::with_capacity(cells.len());
                for (path, value) in live {
                    items.push(compact_optional(
                        py,
                        element,
                        data,
                        Some(if of_path { path } else { value }),
                    )?);
                }
                Ok(Value::Composite(Box::new(Composite::List(items))))
            }
            Kind::Map => {
                let (key, value) = self.entry_types()?;
                let pairs: Vec<KeyValue<'_>> = live.map(|(p, v)| (Some(p), Some(v))).collect();
                if key.keys_compare_as_bytes() {
                    if let Some(map) = compact_map(py, key, value, data, &pairs)? {
                        return Ok(map);
                    }
                }
                let live: Vec<(&[u8], &[u8])> = cells.iter().filter_map(|(p, v)| v.map(|v| (*p, v))).collect();
                Ok(Value::Py(self.collect(py, &live)?.unbind()))
            }
            Kind::UserType => {
                let names = self
                    .names
                    .as_ref()
                    .ok_or(Decline("a user type without its field names"))?;
                let mut values: Vec<Value> = (0..names.text.len())
                    .map(|_| if whole { Value::Null } else { Value::Absent })
                    .collect();
                let mut last: Option<i16> = None;
                for (path, value) in cells {
                    let index = <[u8; 2]>::try_from(*path)
                        .map_err(|_| Decline("a user type field path that is not 2 bytes"))?;
                    let index = i16::from_be_bytes(index);
                    // Cassandra writes a row's cells by path; a field update's fields twice or out
                    // of order make a dict in their own order, which the reference makes.
                    if !whole && last.is_some_and(|last| index <= last) {
                        return Ok(Value::Py(self.collect_user_type(py, cells, whole)?.unbind()));
                    }
                    last = Some(index);
                    let Some(slot) = usize::try_from(index).ok().and_then(|i| values.get_mut(i)) else {
                        continue; // user_type_value leaves out a field the type does not have
                    };
                    *slot = match value {
                        None => Value::Null,
                        Some(raw) => {
                            let start = offset_in(data, raw)?;
                            self.members[index as usize].compact(py, data, start, start + raw.len())?
                        }
                    };
                }
                Ok(fields(names, values))
            }
            _ => Err(Decline("a multi-cell column of a type that has no cells")),
        }
    }

    /// `path_label` as a compact value: a list element's timeuuid (hex when it is not 16 bytes),
    /// a set element or map key, a user type's field name (its index for a field the type does
    /// not have).
    pub fn path_label_compact(&self, py: Python<'_>, data: &Arc<[u8]>, path: &[u8]) -> R<Value> {
        match self.kind {
            Kind::List => Ok(match <[u8; 16]>::try_from(path) {
                Ok(bytes) => Value::Uuid(bytes),
                Err(_) => Value::Text(hex(path)),
            }),
            Kind::Set | Kind::Map => {
                let element = self.path.as_deref().ok_or(Decline("collection without a path type"))?;
                compact_optional(py, element, data, Some(path))
            }
            Kind::UserType => {
                let names = self
                    .names
                    .as_ref()
                    .ok_or(Decline("a user type without its field names"))?;
                let index =
                    <[u8; 2]>::try_from(path).map_err(|_| Decline("a user type field path that is not 2 bytes"))?;
                let index = i16::from_be_bytes(index);
                Ok(match usize::try_from(index).ok().and_then(|i| names.text.get(i)) {
                    Some(name) => Value::Text(name.clone()),
                    None => Value::Long(index as i64),
                })
            }
            _ => Ok(Value::Py(self.path_label(py, path)?.unbind())),
        }
    }

    /// The value `decode` gives, as the Python object (None as null).
    fn compact_object(&self, py: Python<'_>, raw: &[u8]) -> R<Value> {
        let object = self.decode(py, raw)?;
        Ok(if object.is_none() {
            Value::Null
        } else {
            Value::Py(object.unbind())
        })
    }

    fn reference_decode<'py>(&self, py: Python<'py>, raw: &[u8]) -> R<Bound<'py, PyAny>> {
        Ok(self
            .reference
            .bind(py)
            .getattr("decode")?
            .call1((PyBytes::new(py, raw),))?)
    }

    /// The value of a multi-cell column from its live cells, as (path, value) pairs: `CqlType.collect`.
    pub fn collect<'py>(&self, py: Python<'py>, cells: &[(&[u8], &[u8])]) -> R<Bound<'py, PyAny>> {
        match self.kind {
            Kind::List => {
                let element = self.value.as_deref().ok_or(Decline("list without an element type"))?;
                let list = PyList::empty(py);
                for (_, value) in cells {
                    list.append(element.decode(py, value)?)?;
                }
                Ok(list.into_any())
            }
            Kind::Set => {
                let element = self.path.as_deref().ok_or(Decline("set without an element type"))?;
                let list = PyList::empty(py);
                for (path, _) in cells {
                    list.append(element.decode(py, path)?)?;
                }
                Ok(list.into_any())
            }
            Kind::Map => {
                let key = self.path.as_deref().ok_or(Decline("map without a key type"))?;
                let value = self.value.as_deref().ok_or(Decline("map without a value type"))?;
                let dict = PyDict::new(py);
                for (path, item) in cells {
                    dict.set_item(key.decode(py, path)?, value.decode(py, item)?)?;
                }
                Ok(dict.into_any())
            }
            _ => {
                let pairs = PyList::empty(py);
                for (path, value) in cells {
                    pairs.append(PyTuple::new(py, [PyBytes::new(py, path), PyBytes::new(py, value)])?)?;
                }
                Ok(self.reference.bind(py).getattr("collect")?.call1((pairs,))?)
            }
        }
    }

    /// A non-frozen user type's value from every cell of the row (a deleted one as `None`: a field
    /// set to null), `whole` when the column was replaced: `CqlType.collect(cells, whole)`, which
    /// gives only the fields written unless the value is whole.
    pub fn collect_user_type<'py>(
        &self,
        py: Python<'py>,
        cells: &[(&[u8], Option<&[u8]>)],
        whole: bool,
    ) -> R<Bound<'py, PyAny>> {
        let pairs = PyList::empty(py);
        for (path, value) in cells {
            let value = match value {
                Some(value) => PyBytes::new(py, value).into_any(),
                None => py.None().into_bound(py),
            };
            pairs.append(PyTuple::new(py, [PyBytes::new(py, path).into_any(), value])?)?;
        }
        Ok(self.reference.bind(py).getattr("collect")?.call1((pairs, whole))?)
    }

    /// How a delta event names one removed element of a multi-cell column: `CqlType.path_label`.
    pub fn path_label<'py>(&self, py: Python<'py>, path: &[u8]) -> R<Bound<'py, PyAny>> {
        match self.kind {
            Kind::List => Ok(match <[u8; 16]>::try_from(path) {
                Ok(bytes) => uuid_text(py, &bytes).into_any(),
                Err(_) => PyString::new(py, &hex(path)).into_any(),
            }),
            Kind::Set | Kind::Map => self
                .path
                .as_deref()
                .ok_or(Decline("collection without a path type"))?
                .decode(py, path),
            _ => Ok(self
                .reference
                .bind(py)
                .getattr("path_label")?
                .call1((PyBytes::new(py, path),))?),
        }
    }
}

/// A map entry's key and value bytes (None: null).
type KeyValue<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

/// Where `part` (a slice of `data`) starts in it.
fn offset_in(data: &[u8], part: &[u8]) -> R<usize> {
    let start = (part.as_ptr() as usize).wrapping_sub(data.as_ptr() as usize);
    if start > data.len() || data.len() - start < part.len() {
        return Err(Decline("a value outside its mutation"));
    }
    Ok(start)
}

/// An element of a collection, user type or tuple (a slice of `data`; None: null) in compact form.
fn compact_optional(py: Python<'_>, element: &CqlType, data: &Arc<[u8]>, raw: Option<&[u8]>) -> R<Value> {
    match raw {
        None => Ok(Value::Null),
        Some(raw) => {
            let start = offset_in(data, raw)?;
            element.compact(py, data, start, start + raw.len())
        }
    }
}

fn fields(names: &Arc<FieldNames>, values: Vec<Value>) -> Value {
    Value::Composite(Box::new(Composite::Fields {
        names: names.clone(),
        values,
    }))
}

/// A map of keys that compare as bytes, from its `(key, value)` slices of `data`; None (the
/// reference's dict decides) when a key is null or empty (a null key) or comes twice (a dict
/// keeps one, at the first one's place, with the last one's value).
fn compact_map(
    py: Python<'_>,
    key: &CqlType,
    value: &CqlType,
    data: &Arc<[u8]>,
    pairs: &[KeyValue<'_>],
) -> R<Option<Value>> {
    // Most maps are short: a scan of the keys before costs less than hashing them.
    let mut seen: Option<std::collections::HashSet<&[u8]>> =
        (pairs.len() > 16).then(|| std::collections::HashSet::with_capacity(pairs.len()));
    let mut entries = Vec::with_capacity(pairs.len());
    for (index, (raw_key, raw_value)) in pairs.iter().enumerate() {
        let Some(raw_key) = raw_key else {
            return Ok(None);
        };
        let twice = match seen.as_mut() {
            Some(seen) => !seen.insert(raw_key),
            None => pairs[..index].iter().any(|(other, _)| *other == Some(*raw_key)),
        };
        if raw_key.is_empty() || twice {
            return Ok(None);
        }
        entries.push((
            compact_optional(py, key, data, Some(raw_key))?,
            compact_optional(py, value, data, *raw_value)?,
        ));
    }
    Ok(Some(Value::Composite(Box::new(Composite::Map(entries)))))
}

fn optional<'py>(py: Python<'py>, element: &CqlType, raw: Option<&[u8]>) -> R<Bound<'py, PyAny>> {
    match raw {
        None => Ok(py.None().into_bound(py)),
        Some(raw) => element.decode(py, raw),
    }
}

/// A fixed-size integer: empty is null (CQL allows it for every type), any other length an error.
fn fixed<'py, const N: usize>(py: Python<'py>, raw: &[u8], convert: impl Fn(&[u8; N]) -> i64) -> R<Bound<'py, PyAny>> {
    match <[u8; N]>::try_from(raw) {
        Ok(bytes) => Ok(int(py, convert(&bytes))),
        Err(_) if raw.is_empty() => Ok(py.None().into_bound(py)),
        Err(_) => Err(Decline("integer of the wrong length")),
    }
}

fn varint<'py>(py: Python<'py>, raw: &[u8], reference: &Py<PyAny>) -> R<Bound<'py, PyAny>> {
    if raw.is_empty() {
        return Ok(py.None().into_bound(py));
    }
    if raw.len() <= 8 {
        let mut value: i64 = if raw[0] & 0x80 != 0 { -1 } else { 0 };
        for byte in raw {
            value = (value << 8) | *byte as i64;
        }
        return Ok(int(py, value));
    }
    // Wider than 64 bits: the reference builds the Python int.
    Ok(reference.bind(py).getattr("decode")?.call1((PyBytes::new(py, raw),))?)
}

pub fn int(py: Python<'_>, value: i64) -> Bound<'_, PyAny> {
    // SAFETY: PyLong_FromLongLong returns a new reference or NULL with an exception set.
    unsafe { Bound::from_owned_ptr(py, ffi::PyLong_FromLongLong(value)) }
}

pub fn int128(py: Python<'_>, value: i128) -> Bound<'_, PyAny> {
    match i64::try_from(value) {
        Ok(small) => int(py, small),
        Err(_) => value.into_pyobject(py).expect("an i128 always converts").into_any(),
    }
}

fn float(py: Python<'_>, value: f64) -> Bound<'_, PyAny> {
    // SAFETY: PyFloat_FromDouble returns a new reference.
    unsafe { Bound::from_owned_ptr(py, ffi::PyFloat_FromDouble(value)) }
}

pub fn pybool(py: Python<'_>, value: bool) -> Bound<'_, PyAny> {
    pyo3::types::PyBool::new(py, value).to_owned().into_any()
}

/// Strict UTF-8, exactly as `bytes.decode("utf-8")` (CPython's own decoder).
pub fn text<'py>(py: Python<'py>, raw: &[u8]) -> R<Bound<'py, PyAny>> {
    // SAFETY: the pointer and length describe `raw`; a NULL result carries a UnicodeDecodeError,
    // which PyErr::fetch clears.
    unsafe {
        let object = ffi::PyUnicode_DecodeUTF8(raw.as_ptr().cast(), raw.len() as ffi::Py_ssize_t, c"strict".as_ptr());
        if object.is_null() {
            drop(PyErr::fetch(py));
            return Err(Decline("not UTF-8"));
        }
        Ok(Bound::from_owned_ptr(py, object))
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// `str(uuid.UUID(bytes=raw))`: lowercase 8-4-4-4-12.
pub fn uuid_text<'py>(py: Python<'py>, raw: &[u8; 16]) -> Bound<'py, PyString> {
    PyString::new(py, &uuid_string(raw))
}

/// `str(uuid.UUID(bytes=raw))` as a Rust string.
pub fn uuid_string(raw: &[u8; 16]) -> String {
    let mut out = Vec::with_capacity(36);
    write_uuid_text(&mut out, raw);
    // SAFETY: hex digits and dashes only.
    unsafe { String::from_utf8_unchecked(out) }
}

/// `str(uuid.UUID(bytes=raw))` appended to `out`.
pub fn write_uuid_text(out: &mut Vec<u8>, raw: &[u8; 16]) {
    let mut text = [0u8; 36];
    let mut at = 0;
    for (index, byte) in raw.iter().enumerate() {
        if matches!(index, 4 | 6 | 8 | 10) {
            text[at] = b'-';
            at += 1;
        }
        text[at] = HEX[(byte >> 4) as usize];
        text[at + 1] = HEX[(byte & 0xF) as usize];
        at += 2;
    }
    out.extend_from_slice(&text);
}

fn hex(raw: &[u8]) -> String {
    let mut out = String::with_capacity(raw.len() * 2);
    for byte in raw {
        out.push(HEX[(byte >> 4) as usize] as char);
        out.push(HEX[(byte & 0xF) as usize] as char);
    }
    out
}

/// Cassandra's unsigned vint at `offset`: (value, next offset), as `cqltypes.read_unsigned_vint`.
pub fn read_unsigned_vint(data: &[u8], offset: usize) -> R<(u64, usize)> {
    let first = *data.get(offset).ok_or(Decline("vint past the end"))?;
    if first < 0x80 {
        return Ok((first as u64, offset + 1));
    }
    let extra = first.leading_ones() as usize;
    let end = offset + 1 + extra;
    if end > data.len() {
        return Err(Decline("vint runs past the end of its buffer"));
    }
    let mut value: u128 = (first as u128) & (0xFFu128 >> extra);
    for byte in &data[offset + 1..end] {
        value = (value << 8) | *byte as u128;
    }
    Ok((value as u64, end))
}

/// A frozen collection or tuple value: int32 lengths, -1 for null; every byte is read.
fn elements(raw: &[u8]) -> R<(Vec<Option<&[u8]>>, usize)> {
    let mut items = Vec::new();
    let mut offset = 0usize;
    while offset < raw.len() {
        if offset + 4 > raw.len() {
            return Err(Decline("collection cut short"));
        }
        let length = i32::from_be_bytes([raw[offset], raw[offset + 1], raw[offset + 2], raw[offset + 3]]);
        offset += 4;
        if length < 0 {
            items.push(None);
            continue;
        }
        let length = length as usize;
        if offset + length > raw.len() {
            return Err(Decline("collection element runs past the value"));
        }
        items.push(Some(&raw[offset..offset + length]));
        offset += length;
    }
    Ok((items, offset))
}

fn frozen_collection(raw: &[u8]) -> R<Vec<Option<&[u8]>>> {
    if raw.is_empty() {
        return Ok(Vec::new());
    }
    if raw.len() < 4 {
        return Err(Decline("collection count cut short"));
    }
    let count = i32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]);
    let (items, _) = elements(&raw[4..])?;
    if (items.len() as i64) < count as i64 {
        return Err(Decline("collection holds fewer elements than it says"));
    }
    Ok(items)
}

#[cfg(test)]
mod tests {
    //! Expected values from Cassandra's formats: `VIntCoding` (the unsigned vint: as many 1 bits
    //! leading the first byte as bytes follow it), the native protocol's collection and value
    //! encodings (int32 counts and lengths, -1 for null; `date` as days with the epoch at 2^31;
    //! `decimal` as an int32 scale then a big-endian two's complement), RFC 4122's uuid text.
    use super::{frozen_collection, read_unsigned_vint, uuid_string, CqlType, FieldNames, Kind};
    use pyo3::prelude::*;
    use pyo3::types::PyString;
    use std::sync::Arc;

    #[test]
    fn unsigned_vints_take_as_many_extra_bytes_as_leading_ones() {
        let read = |bytes: &[u8]| read_unsigned_vint(bytes, 0).ok();
        assert_eq!(read(&[0x00]), Some((0, 1)));
        assert_eq!(read(&[0x7f]), Some((127, 1)));
        assert_eq!(read(&[0x80, 0x80]), Some((128, 2)));
        assert_eq!(read(&[0xbf, 0xff]), Some((16383, 2)));
        assert_eq!(read(&[0xc0, 0x40, 0x00]), Some((16384, 3)));
        assert_eq!(
            read(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]),
            Some((u64::MAX, 9))
        );
        // At an offset, the next offset is past the vint.
        assert_eq!(read_unsigned_vint(&[0x01, 0x81, 0x00], 1).ok(), Some((256, 3)));
    }

    #[test]
    fn a_vint_cut_short_is_declined() {
        assert!(read_unsigned_vint(&[], 0).is_err());
        assert!(read_unsigned_vint(&[0xc0, 0x40], 0).is_err());
        assert!(read_unsigned_vint(&[0x05], 1).is_err());
    }

    #[test]
    fn uuid_text_is_rfc_4122s() {
        let bytes = [
            0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff,
        ];
        assert_eq!(uuid_string(&bytes), "00112233-4455-6677-8899-aabbccddeeff");
    }

    #[test]
    fn frozen_collections_hold_int32_lengths_and_minus_one_for_null() {
        // list<int> [7, null]: count 2, then (4, 00 00 00 07) and (-1).
        let raw = [0, 0, 0, 2, 0, 0, 0, 4, 0, 0, 0, 7, 0xff, 0xff, 0xff, 0xff];
        let items = frozen_collection(&raw).expect("a sound collection");
        assert_eq!(items, vec![Some(&[0u8, 0, 0, 7][..]), None]);
        assert_eq!(frozen_collection(&[]).ok(), Some(vec![]));
        // Says 3 elements, holds 2; an element longer than what is left; a count cut short.
        assert!(frozen_collection(&[[0, 0, 0, 3].as_slice(), &raw[4..]].concat()).is_err());
        assert!(frozen_collection(&[0, 0, 0, 1, 0, 0, 0, 5, 1, 2]).is_err());
        assert!(frozen_collection(&[0, 0, 1]).is_err());
    }

    fn cql(kind: Kind, fixed_length: i64, py: Python<'_>) -> CqlType {
        CqlType {
            kind,
            fixed_length,
            multi_cell: false,
            path: None,
            value: None,
            members: Vec::new(),
            names: None,
            reference: py.None(),
        }
    }

    /// `collection<element>` (list: the value, set: the path) or `map<path, value>`.
    fn collection(kind: Kind, path: CqlType, value: Option<CqlType>, multi_cell: bool, py: Python<'_>) -> CqlType {
        CqlType {
            multi_cell,
            path: Some(Box::new(path)),
            value: value.map(Box::new),
            ..cql(kind, -1, py)
        }
    }

    /// A user type (or tuple) of `fields`.
    fn fields_of(kind: Kind, fields: Vec<(&str, CqlType)>, multi_cell: bool, py: Python<'_>) -> CqlType {
        let text: Vec<String> = fields.iter().map(|(n, _)| n.to_string()).collect();
        let names = text.iter().map(|n| PyString::new(py, n).unbind()).collect();
        CqlType {
            multi_cell,
            names: Some(Arc::new(FieldNames { text, py: names })),
            members: fields.into_iter().map(|(_, t)| t).collect(),
            ..cql(kind, -1, py)
        }
    }

    /// `address (street text, zip int, deposit decimal)`.
    fn address(multi_cell: bool, py: Python<'_>) -> CqlType {
        let fields = vec![
            ("street", cql(Kind::Text, -1, py)),
            ("zip", cql(Kind::Int, -1, py)),
            ("deposit", cql(Kind::Decimal, -1, py)),
        ];
        fields_of(Kind::UserType, fields, multi_cell, py)
    }

    /// `repr()` of the compact value of `raw` (composites made Python values as `to_py` makes
    /// them), or None when it declines.
    fn compacted(py: Python<'_>, cql: &CqlType, raw: &[u8]) -> Option<String> {
        let data: Arc<[u8]> = Arc::from(raw);
        let value = cql.compact(py, &data, 0, raw.len()).ok()?;
        Some(value.to_py(py).unwrap().repr().unwrap().to_string())
    }

    /// `repr()` of a multi-cell column's value from `(path, value)` cells (None: a deleted cell).
    fn collected(py: Python<'_>, cql: &CqlType, cells: &[(&[u8], Option<&[u8]>)], whole: bool) -> Option<String> {
        // The cells as slices of one mutation's bytes, as the decoder hands them.
        let mut bytes = Vec::new();
        let mut spans = Vec::new();
        for (path, value) in cells {
            let path_at = bytes.len();
            bytes.extend_from_slice(path);
            let value_at = bytes.len();
            bytes.extend_from_slice(value.unwrap_or(&[]));
            spans.push((path_at, value_at, bytes.len(), value.is_some()));
        }
        let data: Arc<[u8]> = Arc::from(bytes);
        let cells: Vec<(&[u8], Option<&[u8]>)> = spans
            .iter()
            .map(|&(p, v, end, live)| (&data[p..v], if live { Some(&data[v..end]) } else { None }))
            .collect();
        let value = cql.collect_compact(py, &data, &cells, whole).ok()?;
        Some(value.to_py(py).unwrap().repr().unwrap().to_string())
    }

    #[test]
    fn frozen_lists_and_sets_hold_their_elements_decimals_and_nulls_too() {
        Python::attach(|py| {
            // list<decimal> [1.5, null]: count 2, (5: scale 1, unscaled 15), (-1).
            let list = collection(
                Kind::List,
                cql(Kind::Uuid, 16, py),
                Some(cql(Kind::Decimal, -1, py)),
                false,
                py,
            );
            let raw = [0, 0, 0, 2, 0, 0, 0, 5, 0, 0, 0, 1, 0x0f, 0xff, 0xff, 0xff, 0xff];
            assert_eq!(compacted(py, &list, &raw).as_deref(), Some("[Decimal('1.5'), None]"));
            assert_eq!(compacted(py, &list, &[]).as_deref(), Some("[]"));
            // set<text> {'a', 'bc'}.
            let set = collection(Kind::Set, cql(Kind::Text, -1, py), None, false, py);
            let raw = [0, 0, 0, 2, 0, 0, 0, 1, b'a', 0, 0, 0, 2, b'b', b'c'];
            assert_eq!(compacted(py, &set, &raw).as_deref(), Some("['a', 'bc']"));
            // Says 3 elements, holds 2: declined (the reference raises).
            let raw = [0, 0, 0, 3, 0, 0, 0, 1, b'a', 0, 0, 0, 2, b'b', b'c'];
            assert_eq!(compacted(py, &set, &raw), None);
        });
    }

    #[test]
    fn frozen_maps_are_dicts_a_key_twice_kept_once_as_a_dict_keeps_it() {
        Python::attach(|py| {
            // map<text, int> {'a': 1, 'b': -1}: count 2, then key, value, key, value.
            let map = collection(
                Kind::Map,
                cql(Kind::Text, -1, py),
                Some(cql(Kind::Int, -1, py)),
                false,
                py,
            );
            let raw = [
                0, 0, 0, 2, 0, 0, 0, 1, b'a', 0, 0, 0, 4, 0, 0, 0, 1, 0, 0, 0, 1, b'b', 0, 0, 0, 4, 0xff, 0xff, 0xff,
                0xff,
            ];
            assert_eq!(compacted(py, &map, &raw).as_deref(), Some("{'a': 1, 'b': -1}"));
            // {'a': 1, 'a': 2} (not what Cassandra writes, but what a dict makes of it).
            let raw = [
                0, 0, 0, 2, 0, 0, 0, 1, b'a', 0, 0, 0, 4, 0, 0, 0, 1, 0, 0, 0, 1, b'a', 0, 0, 0, 4, 0, 0, 0, 2,
            ];
            assert_eq!(compacted(py, &map, &raw).as_deref(), Some("{'a': 2}"));
        });
    }

    #[test]
    fn frozen_user_types_and_tuples_name_every_field_null_where_the_value_ends() {
        Python::attach(|py| {
            // address ('Quay', 1000): a value written before the type grew its third field.
            let raw = [0, 0, 0, 4, b'Q', b'u', b'a', b'y', 0, 0, 0, 4, 0, 0, 0x03, 0xe8];
            let value = compacted(py, &address(false, py), &raw);
            assert_eq!(
                value.as_deref(),
                Some("{'street': 'Quay', 'zip': 1000, 'deposit': None}")
            );
            // tuple<int, text> (7, null).
            let fields = vec![("f0", cql(Kind::Int, -1, py)), ("f1", cql(Kind::Text, -1, py))];
            let tuple = fields_of(Kind::Tuple, fields, false, py);
            let raw = [0, 0, 0, 4, 0, 0, 0, 7, 0xff, 0xff, 0xff, 0xff];
            assert_eq!(compacted(py, &tuple, &raw).as_deref(), Some("{'f0': 7, 'f1': None}"));
        });
    }

    #[test]
    fn multi_cell_collections_are_their_live_cells() {
        Python::attach(|py| {
            // set<text>: the elements are the cells' paths, their values empty.
            let set = collection(Kind::Set, cql(Kind::Text, -1, py), None, true, py);
            let cells: [(&[u8], Option<&[u8]>); 3] = [(b"x", Some(b"")), (b"y", None), (b"z", Some(b""))];
            assert_eq!(collected(py, &set, &cells, false).as_deref(), Some("['x', 'z']"));
            // map<text, decimal>: path the key, value the value (scale 2, unscaled -5).
            let map = collection(
                Kind::Map,
                cql(Kind::Text, -1, py),
                Some(cql(Kind::Decimal, -1, py)),
                true,
                py,
            );
            let cells: [(&[u8], Option<&[u8]>); 2] = [(b"k", Some(&[0, 0, 0, 2, 0xfb])), (b"z", None)];
            assert_eq!(
                collected(py, &map, &cells, false).as_deref(),
                Some("{'k': Decimal('-0.05')}")
            );
            // list<int>: paths are timeuuids, the values the elements.
            let list = collection(
                Kind::List,
                cql(Kind::Uuid, 16, py),
                Some(cql(Kind::Int, -1, py)),
                true,
                py,
            );
            let cells: [(&[u8], Option<&[u8]>); 2] = [(&[1; 16], Some(&[0, 0, 0, 9])), (&[2; 16], Some(&[0, 0, 0, 8]))];
            assert_eq!(collected(py, &list, &cells, true).as_deref(), Some("[9, 8]"));
        });
    }

    #[test]
    fn a_user_type_field_update_names_the_fields_it_wrote_a_whole_value_every_field() {
        Python::attach(|py| {
            // Field paths are the field's index as a short: street (0) set to null, deposit (2) 7.
            let cells: [(&[u8], Option<&[u8]>); 2] = [(&[0, 0], None), (&[0, 2], Some(&[0, 0, 0, 0, 7]))];
            let home = address(true, py);
            let update = collected(py, &home, &cells, false);
            assert_eq!(update.as_deref(), Some("{'street': None, 'deposit': Decimal('7')}"));
            let whole = collected(py, &home, &cells, true);
            assert_eq!(
                whole.as_deref(),
                Some("{'street': None, 'zip': None, 'deposit': Decimal('7')}")
            );
            // A field the type does not have (index 5) is left out.
            let cells: [(&[u8], Option<&[u8]>); 1] = [(&[0, 5], Some(&[0, 0, 0, 1]))];
            assert_eq!(collected(py, &home, &cells, false).as_deref(), Some("{}"));
        });
    }

    #[test]
    fn removed_elements_are_named_by_timeuuid_element_or_field() {
        Python::attach(|py| {
            let data: Arc<[u8]> = Arc::from(&b"tag"[..]);
            let label = |cql: &CqlType, path: &[u8]| {
                let value = cql.path_label_compact(py, &data, path).ok()?;
                Some(value.to_py(py).unwrap().repr().unwrap().to_string())
            };
            let list = collection(
                Kind::List,
                cql(Kind::Uuid, 16, py),
                Some(cql(Kind::Int, -1, py)),
                true,
                py,
            );
            let timeuuid = [0x11u8; 16];
            assert_eq!(
                label(&list, &timeuuid).as_deref(),
                Some("'11111111-1111-1111-1111-111111111111'")
            );
            assert_eq!(label(&list, &[0xab, 0x01]).as_deref(), Some("'ab01'"));
            let set = collection(Kind::Set, cql(Kind::Text, -1, py), None, true, py);
            assert_eq!(label(&set, &data[..]).as_deref(), Some("'tag'"));
            assert_eq!(label(&address(true, py), &[0, 1]).as_deref(), Some("'zip'"));
            assert_eq!(label(&address(true, py), &[0, 5]).as_deref(), Some("5"));
        });
    }

    /// `repr()` of what `kind` decodes `raw` to, or None when it declines.
    fn decoded(kind: Kind, raw: &[u8]) -> Option<String> {
        Python::attach(|py| {
            let value = cql(kind, -1, py).decode(py, raw).ok()?;
            Some(value.repr().unwrap().to_string())
        })
    }

    #[test]
    fn integers_are_big_endian_and_signed_and_empty_is_null() {
        assert_eq!(decoded(Kind::TinyInt, &[0xff]).as_deref(), Some("-1"));
        assert_eq!(decoded(Kind::SmallInt, &[0x80, 0x00]).as_deref(), Some("-32768"));
        assert_eq!(decoded(Kind::Int, &[0x00, 0x01, 0x00, 0x00]).as_deref(), Some("65536"));
        let bigint = [0x80, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(decoded(Kind::BigInt, &bigint).as_deref(), Some("-9223372036854775808"));
        assert_eq!(decoded(Kind::Int, &[]).as_deref(), Some("None"));
        assert_eq!(decoded(Kind::Int, &[0, 0, 1]), None, "a wrong length is declined");
        // varint: the shortest two's complement, any length.
        assert_eq!(decoded(Kind::Varint, &[0x00, 0x80]).as_deref(), Some("128"));
        assert_eq!(decoded(Kind::Varint, &[0xff, 0x7f]).as_deref(), Some("-129"));
    }

    #[test]
    fn dates_count_days_from_an_epoch_at_two_to_the_31() {
        assert_eq!(decoded(Kind::Date, &[0x80, 0x00, 0x00, 0x00]).as_deref(), Some("0"));
        assert_eq!(decoded(Kind::Date, &[0x7f, 0xff, 0xff, 0xff]).as_deref(), Some("-1"));
        // 2^31 + 19723 (2024-01-01 is 19723 days after 1970-01-01).
        assert_eq!(decoded(Kind::Date, &[0x80, 0x00, 0x4d, 0x0b]).as_deref(), Some("19723"));
    }

    #[test]
    fn floats_doubles_booleans_and_ipv4_addresses() {
        assert_eq!(decoded(Kind::Float, &[0x3f, 0xc0, 0x00, 0x00]).as_deref(), Some("1.5"));
        let double = [0xc0, 0x09, 0x21, 0xfb, 0x54, 0x44, 0x2d, 0x18]; // -pi
        assert_eq!(decoded(Kind::Double, &double).as_deref(), Some("-3.141592653589793"));
        assert_eq!(decoded(Kind::Boolean, &[0x00]).as_deref(), Some("False"));
        assert_eq!(decoded(Kind::Boolean, &[0x02]).as_deref(), Some("True"));
        assert_eq!(decoded(Kind::Inet, &[192, 168, 0, 1]).as_deref(), Some("'192.168.0.1'"));
        assert_eq!(decoded(Kind::Uuid, &[0u8; 15]), None, "a uuid is 16 bytes");
    }

    #[test]
    fn text_is_strict_utf8() {
        assert_eq!(decoded(Kind::Text, "zürich".as_bytes()).as_deref(), Some("'zürich'"));
        assert_eq!(
            decoded(Kind::Text, &[b'a', 0xc3]),
            None,
            "a cut-short sequence is declined"
        );
        assert_eq!(
            decoded(Kind::Text, &[0xed, 0xa0, 0x80]),
            None,
            "a surrogate is not UTF-8"
        );
    }

    #[test]
    fn decimals_are_a_scale_then_the_unscaled_number() {
        // scale 2, unscaled 0x3039 = 12345; scale -3, unscaled -1.
        let value = decoded(Kind::Decimal, &[0, 0, 0, 2, 0x30, 0x39]);
        assert_eq!(value.as_deref(), Some("Decimal('123.45')"));
        let value = decoded(Kind::Decimal, &[0xff, 0xff, 0xff, 0xfd, 0xff]);
        assert_eq!(value.as_deref(), Some("Decimal('-1E+3')"));
    }
}
