//! Avro binary encoding, compiled per schema: byte for byte what fastavro writes, as
//! `cdcflow._avro_writer` (the pure-Python reference) does, over any Avro schema: records,
//! enums, fixed, arrays, maps, unions (`[null, T]` as the reference writes them, any other union
//! by fastavro's own branch choice), and logical types through the same preparers.
//!
//! A datum that does not fit its schema raises ValueError, TypeError, KeyError or
//! AttributeError, as the reference does (the converter turns each into a ConverterError).

use std::collections::HashMap;

use pyo3::exceptions::{PyKeyError, PyOverflowError, PyRecursionError, PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::batch::{datum_to_py, slot_object, Datum, RowValue, Slot};
use crate::commitlog::values::write_uuid_text;

/// Datum nesting deeper than this is refused (a recursive schema and a cyclic datum would
/// otherwise recurse until the stack runs out).
const MAX_DEPTH: usize = 512;

#[derive(Clone, Copy, PartialEq)]
enum Primitive {
    Null,
    Boolean,
    Int,
    Long,
    Float,
    Double,
    Bytes,
    String,
}

enum FieldValue {
    /// `datum[name]`: a KeyError when missing.
    Required,
    /// `datum.get(name)`: None when missing (a null default, or a union with null).
    OrNone,
    /// `datum.get(name, default)`.
    OrDefault(Py<PyAny>),
}

struct Field {
    name: Py<PyString>,
    node: usize,
    value: FieldValue,
}

enum Node {
    Primitive(Primitive),
    Record {
        full_name: String,
        fields: Vec<Field>,
    },
    Enum {
        symbols: Py<PyDict>,
        symbol_list: Py<PyList>,
    },
    Fixed {
        size: usize,
    },
    Array {
        items: usize,
    },
    Map {
        values: usize,
    },
    /// `[null, T]` (either order): None is the null branch, anything else the other one.
    Nullable {
        null_index: u8,
        other: usize,
    },
    /// `[T]`: branch 0, whatever the datum (as the reference writes it).
    Single {
        branch: usize,
    },
    /// Any other union: fastavro's branch choice (the first branch the datum validates against,
    /// the record sharing the most fields, double over float).
    Union {
        branches: Vec<usize>,
    },
    /// A logical type: `prepare(datum, schema)` (skipped for a datum of `passes`), then `base`.
    Logical {
        base: usize,
        prepare: Py<PyAny>,
        schema: Py<PyAny>,
        passes: Passes,
    },
    /// Not compiled yet (a named type's placeholder while its own definition is compiled).
    Pending,
}

/// Data a logical type's preparer returns unchanged, written without calling it.
#[derive(Clone, Copy)]
enum Passes {
    Int,
    Str,
    Bytes,
    Nothing,
}

/// Python objects the writer checks data against, fetched once per writer.
struct Types {
    mapping: Py<PyAny>,
    sequence: Py<PyAny>,
    integral: Py<PyAny>,
    real: Py<PyAny>,
    array: Py<PyAny>,
}

#[pyclass(frozen, module = "cdcflow._native")]
pub struct AvroWriter {
    nodes: Vec<Node>,
    root: usize,
    types: Types,
    /// Records may be given as rows: tuples of their fields' values in field order.
    rows: bool,
}

struct Compiler<'py> {
    py: Python<'py>,
    nodes: Vec<Node>,
    named: HashMap<String, usize>,
    /// Named types' schemas, found before any is compiled so a reference to a later one resolves.
    declared: HashMap<String, Bound<'py, PyAny>>,
    /// `(type, logicalType)` -> the preparer (cdcflow's or fastavro's).
    preparers: Bound<'py, PyDict>,
}

fn unsupported(message: String) -> PyErr {
    PyValueError::new_err(message)
}

fn full_name(name: &str, namespace: &str) -> String {
    if name.contains('.') || namespace.is_empty() {
        name.to_string()
    } else {
        format!("{namespace}.{name}")
    }
}

fn primitive(name: &str) -> Option<Primitive> {
    Some(match name {
        "null" => Primitive::Null,
        "boolean" => Primitive::Boolean,
        "int" => Primitive::Int,
        "long" => Primitive::Long,
        "float" => Primitive::Float,
        "double" => Primitive::Double,
        "bytes" => Primitive::Bytes,
        "string" => Primitive::String,
        _ => return None,
    })
}

impl<'py> Compiler<'py> {
    fn push(&mut self, node: Node) -> usize {
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    /// Registers named types (depth first), so references by name resolve.
    fn declare(&mut self, schema: &Bound<'py, PyAny>, namespace: &str) -> PyResult<()> {
        if let Ok(branches) = schema.cast::<PyList>() {
            for branch in branches.iter() {
                self.declare(&branch, namespace)?;
            }
            return Ok(());
        }
        let Ok(dict) = schema.cast::<PyDict>() else {
            return Ok(());
        };
        let Some(kind) = dict.get_item("type")? else {
            return Ok(());
        };
        if let Ok(kind_name) = kind.extract::<String>() {
            match kind_name.as_str() {
                "record" | "error" | "enum" | "fixed" => {
                    let name: String = dict
                        .get_item("name")?
                        .ok_or_else(|| unsupported("a named type without a name".into()))?
                        .extract()?;
                    let own_namespace: Option<String> = dict.get_item("namespace")?.map(|n| n.extract()).transpose()?;
                    let full = full_name(&name, own_namespace.as_deref().unwrap_or(namespace));
                    self.declared.insert(full.clone(), schema.clone());
                    let inner = full.rsplit_once('.').map(|(ns, _)| ns.to_string()).unwrap_or_default();
                    if let Some(fields) = dict.get_item("fields")? {
                        for field in fields.try_iter()? {
                            let field = field?;
                            self.declare(&field.get_item("type")?, &inner)?;
                        }
                    }
                }
                "array" => {
                    if let Some(items) = dict.get_item("items")? {
                        self.declare(&items, namespace)?;
                    }
                }
                "map" => {
                    if let Some(values) = dict.get_item("values")? {
                        self.declare(&values, namespace)?;
                    }
                }
                _ => {}
            }
        } else {
            self.declare(&kind, namespace)?;
        }
        Ok(())
    }

    fn named(&mut self, full: &str) -> PyResult<usize> {
        if let Some(index) = self.named.get(full) {
            return Ok(*index);
        }
        let schema = self
            .declared
            .get(full)
            .cloned()
            .ok_or_else(|| unsupported(format!("unknown named type {full:?}")))?;
        // A placeholder first: a record may refer to itself.
        let index = self.push(Node::Pending);
        self.named.insert(full.to_string(), index);
        let namespace = full.rsplit_once('.').map(|(ns, _)| ns.to_string()).unwrap_or_default();
        let dict = schema.cast::<PyDict>()?;
        let kind: String = dict
            .get_item("type")?
            .map(|k| k.extract())
            .transpose()?
            .unwrap_or_default();
        let node = match kind.as_str() {
            "record" | "error" => {
                let mut fields = Vec::new();
                let field_list = dict
                    .get_item("fields")?
                    .ok_or_else(|| unsupported(format!("record {full} without fields")))?;
                for field in field_list.try_iter()? {
                    let field = field?.cast_into::<PyDict>()?;
                    let name: String = field
                        .get_item("name")?
                        .ok_or_else(|| unsupported("a field without a name".into()))?
                        .extract()?;
                    let field_type = field
                        .get_item("type")?
                        .ok_or_else(|| unsupported(format!("field {name} without a type")))?;
                    let node = self.compile(&field_type, &namespace)?;
                    let value = match field.get_item("default")? {
                        Some(default) if default.is_none() => FieldValue::OrNone,
                        Some(default) => FieldValue::OrDefault(default.unbind()),
                        None => {
                            let nullable_union = match field_type.cast::<PyList>() {
                                Ok(branches) => branches
                                    .iter()
                                    .any(|b| b.extract::<String>().map(|s| s == "null").unwrap_or(false)),
                                Err(_) => false,
                            };
                            if nullable_union {
                                FieldValue::OrNone
                            } else {
                                FieldValue::Required
                            }
                        }
                    };
                    fields.push(Field {
                        name: PyString::intern(self.py, &name).unbind(),
                        node,
                        value,
                    });
                }
                Node::Record {
                    full_name: full.to_string(),
                    fields,
                }
            }
            "enum" => {
                let symbols = PyDict::new(self.py);
                let symbol_list = PyList::empty(self.py);
                let listed = dict
                    .get_item("symbols")?
                    .ok_or_else(|| unsupported(format!("enum {full} without symbols")))?;
                for (index, symbol) in listed.try_iter()?.enumerate() {
                    let symbol = symbol?;
                    symbols.set_item(&symbol, index)?;
                    symbol_list.append(&symbol)?;
                }
                Node::Enum {
                    symbols: symbols.unbind(),
                    symbol_list: symbol_list.unbind(),
                }
            }
            "fixed" => {
                let size: usize = dict
                    .get_item("size")?
                    .ok_or_else(|| unsupported(format!("fixed {full} without a size")))?
                    .extract()?;
                let logical = self.logical_of(dict, "fixed")?;
                match logical {
                    Some(prepare) => {
                        let base = self.push(Node::Fixed { size });
                        Node::Logical {
                            base,
                            prepare: prepare.unbind(),
                            schema: schema.clone().unbind(),
                            passes: Passes::Bytes,
                        }
                    }
                    None => Node::Fixed { size },
                }
            }
            other => return Err(unsupported(format!("named type {full} of type {other:?}"))),
        };
        self.nodes[index] = node;
        Ok(index)
    }

    /// The preparer of a schema's logical type on `base`, when it has one.
    fn logical_of(&self, dict: &Bound<'py, PyDict>, base: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
        let Some(logical) = dict.get_item("logicalType")? else {
            return Ok(None);
        };
        let Ok(logical) = logical.extract::<String>() else {
            return Ok(None);
        };
        self.preparers.get_item((base, logical.as_str()))
    }

    fn compile(&mut self, schema: &Bound<'py, PyAny>, namespace: &str) -> PyResult<usize> {
        if let Ok(name) = schema.extract::<String>() {
            if let Some(kind) = primitive(&name) {
                return Ok(self.push(Node::Primitive(kind)));
            }
            let full = if name.contains('.') || self.declared.contains_key(&name) {
                name.clone()
            } else {
                full_name(&name, namespace)
            };
            return self.named(&full);
        }
        if let Ok(branches) = schema.cast::<PyList>() {
            return self.union(branches, namespace);
        }
        let dict = schema
            .cast::<PyDict>()
            .map_err(|_| unsupported(format!("not an Avro schema: {schema}")))?;
        let kind = dict
            .get_item("type")?
            .ok_or_else(|| unsupported("a schema without a type".into()))?;
        let Ok(kind_name) = kind.extract::<String>() else {
            return self.compile(&kind, namespace); // {"type": {...}} or {"type": [...]}
        };
        if let Some(base) = primitive(&kind_name) {
            let base_node = self.push(Node::Primitive(base));
            let Some(prepare) = self.logical_of(dict, &kind_name)? else {
                return Ok(base_node);
            };
            let passes = match base {
                Primitive::Int | Primitive::Long => Passes::Int,
                Primitive::String => Passes::Str,
                Primitive::Bytes => Passes::Bytes,
                _ => Passes::Nothing,
            };
            return Ok(self.push(Node::Logical {
                base: base_node,
                prepare: prepare.unbind(),
                schema: schema.clone().unbind(),
                passes,
            }));
        }
        match kind_name.as_str() {
            "record" | "error" | "enum" | "fixed" => {
                let name: String = dict
                    .get_item("name")?
                    .ok_or_else(|| unsupported("a named type without a name".into()))?
                    .extract()?;
                let own_namespace: Option<String> = dict.get_item("namespace")?.map(|n| n.extract()).transpose()?;
                let full = full_name(&name, own_namespace.as_deref().unwrap_or(namespace));
                self.named(&full)
            }
            "array" => {
                let items = dict
                    .get_item("items")?
                    .ok_or_else(|| unsupported("an array without items".into()))?;
                let items = self.compile(&items, namespace)?;
                Ok(self.push(Node::Array { items }))
            }
            "map" => {
                let values = dict
                    .get_item("values")?
                    .ok_or_else(|| unsupported("a map without values".into()))?;
                let values = self.compile(&values, namespace)?;
                Ok(self.push(Node::Map { values }))
            }
            other => {
                // A named type referred to as {"type": "Name"}.
                let full = if other.contains('.') || self.declared.contains_key(other) {
                    other.to_string()
                } else {
                    full_name(other, namespace)
                };
                if self.declared.contains_key(&full) {
                    self.named(&full)
                } else {
                    Err(unsupported(format!("unsupported Avro type {other:?}")))
                }
            }
        }
    }

    fn union(&mut self, branches: &Bound<'py, PyList>, namespace: &str) -> PyResult<usize> {
        let mut compiled = Vec::new();
        let mut null_index = None;
        for (index, branch) in branches.iter().enumerate() {
            if branch.cast::<PyList>().is_ok() {
                return Err(unsupported("a union directly inside a union".into()));
            }
            if branch.extract::<String>().map(|s| s == "null").unwrap_or(false) {
                null_index.get_or_insert(index);
            }
            compiled.push(self.compile(&branch, namespace)?);
        }
        if compiled.is_empty() {
            return Err(unsupported("an empty union".into()));
        }
        if compiled.len() == 1 {
            return Ok(self.push(Node::Single { branch: compiled[0] }));
        }
        if let (2, Some(null_index)) = (compiled.len(), null_index) {
            return Ok(self.push(Node::Nullable {
                null_index: null_index as u8,
                other: compiled[1 - null_index],
            }));
        }
        Ok(self.push(Node::Union { branches: compiled }))
    }
}

/// The Avro name of Debezium's variable-scale decimal record (`cdcflow.schemas`).
const VARIABLE_SCALE_DECIMAL: &str = "io.debezium.data.VariableScaleDecimal";

#[inline]
fn write_long(out: &mut Vec<u8>, value: i64) {
    let mut n = ((value << 1) ^ (value >> 63)) as u64;
    while n > 0x7F {
        out.push((n as u8 & 0x7F) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

fn repr(value: &Bound<'_, PyAny>) -> String {
    value
        .repr()
        .map(|r| r.to_string())
        .unwrap_or_else(|_| "<unrepresentable>".into())
}

/// An int for an Avro int or long: ints (and bools, as the reference writes them) and objects
/// with `__index__`; ValueError when it does not fit.
fn integer(value: &Bound<'_, PyAny>, min: i64, max: i64, avro: &str) -> PyResult<i64> {
    let py = value.py();
    let number = if value.cast::<PyInt>().is_ok() {
        value.clone()
    } else {
        // SAFETY: PyNumber_Index returns a new reference or NULL with a TypeError set.
        unsafe {
            let index = ffi::PyNumber_Index(value.as_ptr());
            if index.is_null() {
                drop(PyErr::fetch(py));
                return Err(PyTypeError::new_err(format!("{} is not an int", repr(value))));
            }
            Bound::from_owned_ptr(py, index)
        }
    };
    match number.extract::<i64>() {
        Ok(n) if n >= min && n <= max => Ok(n),
        _ => Err(PyValueError::new_err(format!(
            "{} does not fit an Avro {avro}",
            repr(value)
        ))),
    }
}

impl AvroWriter {
    fn write(
        &self,
        py: Python<'_>,
        out: &mut Vec<u8>,
        node: usize,
        datum: &Bound<'_, PyAny>,
        depth: usize,
    ) -> PyResult<()> {
        if depth > MAX_DEPTH {
            return Err(PyRecursionError::new_err(
                "datum nested deeper than the Avro writer goes",
            ));
        }
        match &self.nodes[node] {
            Node::Primitive(kind) => Self::write_primitive(*kind, out, datum),
            Node::Record { fields, .. } => {
                if let (true, Ok(row)) = (self.rows, datum.cast_exact::<PyTuple>()) {
                    // A row: the fields' values in their order (cdcflow's envelope rows).
                    if row.len() != fields.len() {
                        return Err(PyValueError::new_err(format!(
                            "a row of {} values for a record of {} fields",
                            row.len(),
                            fields.len()
                        )));
                    }
                    for (field, value) in fields.iter().zip(row.iter()) {
                        self.write(py, out, field.node, &value, depth + 1)?;
                    }
                    return Ok(());
                }
                let exact_dict = datum.is_exact_instance_of::<PyDict>();
                for field in fields {
                    let name = field.name.bind(py);
                    let value = if exact_dict {
                        // SAFETY: datum is a dict; the key is a str (hash cached), so the lookup
                        // runs no Python code; the borrowed result is made owned at once.
                        let found = unsafe { ffi::PyDict_GetItemWithError(datum.as_ptr(), name.as_ptr()) };
                        if found.is_null() {
                            if let Some(error) = PyErr::take(py) {
                                return Err(error);
                            }
                            match &field.value {
                                FieldValue::Required => return Err(PyKeyError::new_err(name.clone().unbind())),
                                FieldValue::OrNone => py.None().into_bound(py),
                                FieldValue::OrDefault(default) => default.bind(py).clone(),
                            }
                        } else {
                            unsafe { Bound::from_borrowed_ptr(py, found) }
                        }
                    } else {
                        match &field.value {
                            FieldValue::Required => datum.get_item(name)?,
                            FieldValue::OrNone => datum.call_method1("get", (name,))?,
                            FieldValue::OrDefault(default) => datum.call_method1("get", (name, default.bind(py)))?,
                        }
                    };
                    self.write(py, out, field.node, &value, depth + 1)?;
                }
                Ok(())
            }
            Node::Enum { symbols, .. } => {
                let index = symbols
                    .bind(py)
                    .get_item(datum)?
                    .ok_or_else(|| PyKeyError::new_err(datum.clone().unbind()))?;
                write_long(out, index.extract()?);
                Ok(())
            }
            Node::Fixed { size } => {
                let length = datum.len()?;
                if length != *size {
                    return Err(PyValueError::new_err(format!(
                        "fixed takes {size} bytes, found {length}"
                    )));
                }
                Self::append_bytes_like(out, datum)
            }
            Node::Array { items } => {
                if let Ok(list) = datum.cast::<PyList>() {
                    if !list.is_empty() {
                        write_long(out, list.len() as i64);
                        for item in list.iter() {
                            self.write(py, out, *items, &item, depth + 1)?;
                        }
                    }
                } else if let Ok(tuple) = datum.cast::<PyTuple>() {
                    if !tuple.is_empty() {
                        write_long(out, tuple.len() as i64);
                        for item in tuple.iter() {
                            self.write(py, out, *items, &item, depth + 1)?;
                        }
                    }
                } else if datum.is_truthy()? {
                    write_long(out, datum.len()? as i64);
                    for item in datum.try_iter()? {
                        self.write(py, out, *items, &item?, depth + 1)?;
                    }
                }
                out.push(0);
                Ok(())
            }
            Node::Map { values } => {
                if datum.is_truthy()? {
                    write_long(out, datum.len()? as i64);
                    if let Ok(dict) = datum.cast::<PyDict>() {
                        for (key, value) in dict.iter() {
                            Self::write_primitive(Primitive::String, out, &key)?;
                            self.write(py, out, *values, &value, depth + 1)?;
                        }
                    } else {
                        for pair in datum.call_method0("items")?.try_iter()? {
                            let pair = pair?;
                            Self::write_primitive(Primitive::String, out, &pair.get_item(0)?)?;
                            self.write(py, out, *values, &pair.get_item(1)?, depth + 1)?;
                        }
                    }
                }
                out.push(0);
                Ok(())
            }
            Node::Nullable { null_index, other } => {
                if datum.is_none() {
                    out.push(2 * null_index);
                    Ok(())
                } else {
                    out.push(2 * (1 - null_index));
                    self.write(py, out, *other, datum, depth + 1)
                }
            }
            Node::Single { branch } => {
                out.push(0);
                self.write(py, out, *branch, datum, depth + 1)
            }
            Node::Union { branches } => {
                let index = self.choose_branch(py, branches, datum, depth)?;
                write_long(out, index as i64);
                self.write(py, out, branches[index], datum, depth + 1)
            }
            Node::Logical {
                base,
                prepare,
                schema,
                passes,
            } => {
                let passes = match passes {
                    Passes::Int => datum.cast::<PyInt>().is_ok() && datum.cast::<PyBool>().is_err(),
                    Passes::Str => datum.cast::<PyString>().is_ok(),
                    Passes::Bytes => datum.cast::<PyBytes>().is_ok(),
                    Passes::Nothing => false,
                };
                if passes {
                    self.write(py, out, *base, datum, depth + 1)
                } else {
                    let prepared = prepare.bind(py).call1((datum, schema.bind(py)))?;
                    self.write(py, out, *base, &prepared, depth + 1)
                }
            }
            Node::Pending => Err(PyValueError::new_err("Avro writer used while being compiled")),
        }
    }

    fn append_bytes_like(out: &mut Vec<u8>, datum: &Bound<'_, PyAny>) -> PyResult<()> {
        if let Ok(bytes) = datum.cast::<PyBytes>() {
            out.extend_from_slice(bytes.as_bytes());
        } else if let Ok(array) = datum.cast::<PyByteArray>() {
            out.extend_from_slice(&array.to_vec());
        } else {
            let buffer = pyo3::buffer::PyBuffer::<u8>::get(datum)
                .map_err(|_| PyTypeError::new_err(format!("{} is not bytes", type_name(datum))))?;
            out.extend_from_slice(&buffer.to_vec(datum.py())?);
        }
        Ok(())
    }

    fn write_primitive(kind: Primitive, out: &mut Vec<u8>, datum: &Bound<'_, PyAny>) -> PyResult<()> {
        match kind {
            Primitive::String => {
                if let Ok(text) = datum.cast_exact::<PyString>() {
                    let mut size: ffi::Py_ssize_t = 0;
                    // SAFETY: a str; the UTF-8 form is cached in the object and valid while it lives.
                    let data = unsafe { ffi::PyUnicode_AsUTF8AndSize(text.as_ptr(), &mut size) };
                    if data.is_null() {
                        return Err(PyErr::fetch(datum.py())); // a lone surrogate: UnicodeEncodeError
                    }
                    write_long(out, size as i64);
                    out.extend_from_slice(unsafe { std::slice::from_raw_parts(data as *const u8, size as usize) });
                } else {
                    // As the reference: value.encode() (AttributeError for what has none).
                    let encoded = datum.call_method0("encode")?;
                    let bytes = encoded
                        .cast::<PyBytes>()
                        .map_err(|_| PyTypeError::new_err("encode() did not return bytes"))?;
                    write_long(out, bytes.as_bytes().len() as i64);
                    out.extend_from_slice(bytes.as_bytes());
                }
                Ok(())
            }
            Primitive::Long => {
                write_long(out, integer(datum, i64::MIN, i64::MAX, "long")?);
                Ok(())
            }
            Primitive::Int => {
                write_long(out, integer(datum, i32::MIN as i64, i32::MAX as i64, "int")?);
                Ok(())
            }
            Primitive::Double => {
                let value: f64 = if let Ok(float) = datum.cast_exact::<PyFloat>() {
                    float.value()
                } else {
                    datum.extract()?
                };
                out.extend_from_slice(&value.to_le_bytes());
                Ok(())
            }
            Primitive::Float => {
                let value: f64 = if let Ok(float) = datum.cast_exact::<PyFloat>() {
                    float.value()
                } else {
                    datum.extract()?
                };
                let single = value as f32;
                if single.is_infinite() && !value.is_infinite() {
                    return Err(PyOverflowError::new_err("float too large to pack with f format"));
                }
                out.extend_from_slice(&single.to_le_bytes());
                Ok(())
            }
            Primitive::Boolean => {
                if datum.is(&*PyBool::new(datum.py(), true)) {
                    out.push(1);
                } else if datum.is(&*PyBool::new(datum.py(), false)) {
                    out.push(0);
                } else {
                    return Err(PyTypeError::new_err(format!("{} is not a boolean", repr(datum))));
                }
                Ok(())
            }
            Primitive::Bytes => {
                if let Ok(bytes) = datum.cast::<PyBytes>() {
                    write_long(out, bytes.as_bytes().len() as i64);
                    out.extend_from_slice(bytes.as_bytes());
                } else if let Ok(array) = datum.cast::<PyByteArray>() {
                    let data = array.to_vec();
                    write_long(out, data.len() as i64);
                    out.extend_from_slice(&data);
                } else {
                    return Err(PyTypeError::new_err(format!("{} is not bytes", type_name(datum))));
                }
                Ok(())
            }
            Primitive::Null => {
                if !datum.is_none() {
                    return Err(PyTypeError::new_err(format!("{} is not null", repr(datum))));
                }
                Ok(())
            }
        }
    }

    // --- unions: fastavro's choice of branch ------------------------------------------------------

    /// The record type a branch writes as (named types resolved): "record", "float", "double"...
    fn kind_of(&self, node: usize) -> &'static str {
        match &self.nodes[node] {
            Node::Primitive(Primitive::Float) => "float",
            Node::Primitive(Primitive::Double) => "double",
            Node::Record { .. } => "record",
            Node::Logical { base, .. } => self.kind_of(*base),
            _ => "other",
        }
    }

    fn choose_branch(
        &self,
        py: Python<'_>,
        branches: &[usize],
        datum: &Bound<'_, PyAny>,
        depth: usize,
    ) -> PyResult<usize> {
        let mut best: Option<usize> = None;
        let mut most_fields: i64 = -1;
        let mut could_be_float = false;
        for (index, branch) in branches.iter().enumerate() {
            if could_be_float {
                if self.kind_of(*branch) == "double" {
                    best = Some(index);
                    break;
                }
                continue;
            }
            if !self.validate(py, *branch, datum, depth + 1)? {
                continue;
            }
            match &self.nodes[*branch] {
                Node::Record { fields, .. } => {
                    let mut shared = 0i64;
                    for field in fields {
                        if datum.contains(field.name.bind(py))? {
                            shared += 1;
                        }
                    }
                    if shared > most_fields {
                        best = Some(index);
                        most_fields = shared;
                    }
                }
                _ if self.kind_of(*branch) == "float" => {
                    best = Some(index);
                    could_be_float = true;
                }
                _ => {
                    best = Some(index);
                    break;
                }
            }
        }
        best.ok_or_else(|| {
            PyValueError::new_err(format!(
                "{} (type {}) matches no branch of the union",
                repr(datum),
                type_name(datum)
            ))
        })
    }

    fn is_instance(&self, py: Python<'_>, datum: &Bound<'_, PyAny>, class: &Py<PyAny>) -> PyResult<bool> {
        datum.is_instance(class.bind(py))
    }

    /// fastavro's `_validate`: whether `datum` is an instance of the schema at `node`.
    fn validate(&self, py: Python<'_>, node: usize, datum: &Bound<'_, PyAny>, depth: usize) -> PyResult<bool> {
        if depth > MAX_DEPTH {
            return Err(PyRecursionError::new_err(
                "datum nested deeper than the Avro writer goes",
            ));
        }
        let is_bool = datum.cast::<PyBool>().is_ok();
        Ok(match &self.nodes[node] {
            Node::Primitive(kind) => match kind {
                Primitive::Null => datum.is_none(),
                Primitive::Boolean => is_bool,
                Primitive::String => datum.cast::<PyString>().is_ok(),
                Primitive::Bytes => datum.cast::<PyBytes>().is_ok() || datum.cast::<PyByteArray>().is_ok(),
                Primitive::Int | Primitive::Long => {
                    if is_bool
                        || !(datum.cast::<PyInt>().is_ok() || self.is_instance(py, datum, &self.types.integral)?)
                    {
                        false
                    } else {
                        let (min, max) = if *kind == Primitive::Int {
                            (i32::MIN as i64, i32::MAX as i64)
                        } else {
                            (i64::MIN, i64::MAX)
                        };
                        datum.ge(min)? && datum.le(max)?
                    }
                }
                Primitive::Float | Primitive::Double => {
                    !is_bool
                        && (datum.cast::<PyInt>().is_ok()
                            || datum.cast::<PyFloat>().is_ok()
                            || self.is_instance(py, datum, &self.types.real)?)
                }
            },
            Node::Fixed { size } => {
                (datum.cast::<PyBytes>().is_ok() || datum.cast::<PyByteArray>().is_ok()) && datum.len()? == *size
            }
            Node::Enum { symbol_list, .. } => symbol_list.bind(py).contains(datum)?,
            Node::Array { items } => {
                let sequence = datum.cast::<PyList>().is_ok()
                    || datum.cast::<PyTuple>().is_ok()
                    || self.is_instance(py, datum, &self.types.sequence)?
                    || self.is_instance(py, datum, &self.types.array)?;
                if !sequence || datum.cast::<PyString>().is_ok() {
                    false
                } else {
                    let mut all = true;
                    for item in datum.try_iter()? {
                        if !self.validate(py, *items, &item?, depth + 1)? {
                            all = false;
                            break;
                        }
                    }
                    all
                }
            }
            Node::Map { values } => {
                if !(datum.cast::<PyDict>().is_ok() || self.is_instance(py, datum, &self.types.mapping)?) {
                    false
                } else {
                    let mut all = true;
                    for key in datum.try_iter()? {
                        if key?.cast::<PyString>().is_err() {
                            all = false;
                            break;
                        }
                    }
                    if all {
                        for value in datum.call_method0("values")?.try_iter()? {
                            if !self.validate(py, *values, &value?, depth + 1)? {
                                all = false;
                                break;
                            }
                        }
                    }
                    all
                }
            }
            Node::Record { full_name, fields } => {
                let mapping = datum.cast::<PyDict>().is_ok() || self.is_instance(py, datum, &self.types.mapping)?;
                // A "-type" naming another record rules this one out (fastavro's convention).
                let other_type =
                    mapping && datum.contains("-type")? && !datum.get_item("-type")?.eq(full_name.as_str())?;
                if !mapping || other_type {
                    false
                } else {
                    let mut all = true;
                    for field in fields {
                        let default = match &field.value {
                            FieldValue::OrDefault(default) => default.bind(py).clone(),
                            _ => py.None().into_bound(py),
                        };
                        let value = datum.call_method1("get", (field.name.bind(py), default))?;
                        if !self.validate(py, field.node, &value, depth + 1)? {
                            all = false;
                            break;
                        }
                    }
                    all
                }
            }
            Node::Nullable { other, .. } => datum.is_none() || self.validate(py, *other, datum, depth + 1)?,
            Node::Single { branch } => self.validate(py, *branch, datum, depth + 1)?,
            Node::Union { branches } => {
                let mut any = false;
                for branch in branches {
                    if self.validate(py, *branch, datum, depth + 1)? {
                        any = true;
                        break;
                    }
                }
                any
            }
            Node::Logical {
                base, prepare, schema, ..
            } => {
                let prepared = prepare.bind(py).call1((datum, schema.bind(py)))?;
                self.validate(py, *base, &prepared, depth + 1)?
            }
            Node::Pending => false,
        })
    }
}

impl AvroWriter {
    pub(crate) fn root(&self) -> usize {
        self.root
    }

    /// The fields of the record `node` is, through a `[T]` union.
    fn record_fields(&self, node: usize) -> Result<&[Field], String> {
        match &self.nodes[node] {
            Node::Record { fields, .. } => Ok(fields),
            _ => Err("not a record".into()),
        }
    }

    /// `values` as the record `node` (field `i` takes `values[i]`, rewritten by `prepare[i]`
    /// when there is one): what the reference writes for a row with those values in field order,
    /// an absent value as a dict without that key.
    pub(crate) fn write_record<T: RowValue>(
        &self,
        py: Python<'_>,
        out: &mut Vec<u8>,
        node: usize,
        values: &[T],
        prepare: &[Option<Py<PyAny>>],
    ) -> Result<(), String> {
        let fields = self.record_fields(node)?;
        if fields.len() != values.len() {
            return Err(format!(
                "a row of {} values for a record of {} fields",
                values.len(),
                fields.len()
            ));
        }
        for (index, (field, value)) in fields.iter().zip(values).enumerate() {
            match (value.slot(), prepare.get(index).and_then(Option::as_ref)) {
                (Slot::Datum(datum), None) => {
                    let start = out.len();
                    if let Err(why) = self.write_datum(out, field.node, datum) {
                        // A schema construct the direct path does not take (a logical type with a
                        // preparer): the Python value it stands for, through the object path.
                        out.truncate(start);
                        let object = datum_to_py(py, datum).map_err(|e| e.to_string())?;
                        self.write(py, out, field.node, &object, 0).map_err(|_| why)?;
                    }
                }
                (Slot::Datum(datum @ Datum::Decimal(_)), Some(prepare)) => {
                    // The column's rewrite is the converter's decimal form, which the schema
                    // names (Debezium's variable-scale record, a double, plain text): written
                    // straight from the decimal; anything else through the rewrite.
                    let start = out.len();
                    if self.write_datum(out, field.node, datum).is_err() {
                        out.truncate(start);
                        let object = slot_object(py, Slot::Datum(datum), Some(prepare))?;
                        self.write(py, out, field.node, &object, 0).map_err(|e| e.to_string())?;
                    }
                }
                (Slot::Absent, _) => match &field.value {
                    FieldValue::Required => return Err(format!("KeyError: {}", field.name)),
                    FieldValue::OrNone => self.write_datum(out, field.node, Datum::Null)?,
                    FieldValue::OrDefault(default) => self
                        .write(py, out, field.node, default.bind(py), 0)
                        .map_err(|e| e.to_string())?,
                },
                (slot, prepare) => {
                    let object = slot_object(py, slot, prepare)?;
                    self.write(py, out, field.node, &object, 0).map_err(|e| e.to_string())?;
                }
            }
        }
        Ok(())
    }

    /// A row or null as the `[null, record]` (or plain record) `node`.
    fn write_optional_record<T: RowValue>(
        &self,
        py: Python<'_>,
        out: &mut Vec<u8>,
        node: usize,
        row: Option<&[T]>,
        prepare: &[Option<Py<PyAny>>],
    ) -> Result<(), String> {
        match (&self.nodes[node], row) {
            (Node::Nullable { null_index, .. }, None) => {
                out.push(2 * null_index);
                Ok(())
            }
            (Node::Nullable { null_index, other }, Some(values)) => {
                out.push(2 * (1 - null_index));
                self.write_record(py, out, *other, values, prepare)
            }
            (Node::Single { branch }, Some(values)) => {
                out.push(0);
                self.write_record(py, out, *branch, values, prepare)
            }
            (Node::Record { .. }, Some(values)) => self.write_record(py, out, node, values, prepare),
            _ => Err("a null row for a record that takes none".into()),
        }
    }

    /// A change event as the root `Envelope` record (`op`, `before`, `after`, `source`, `ts_ms`,
    /// as `cdcflow.schemas.avro_envelope_row` gives it), the rows' values rewritten by `prepare`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn write_envelope<T: RowValue>(
        &self,
        py: Python<'_>,
        out: &mut Vec<u8>,
        prepare: &[Option<Py<PyAny>>],
        op: &str,
        before: Option<&[T]>,
        after: Option<&[T]>,
        source: &[Datum<'_>],
        ts_ms: i64,
    ) -> Result<(), String> {
        let fields = self.record_fields(self.root)?;
        if fields.len() != 5 {
            return Err("the value schema is not a change-event envelope".into());
        }
        self.write_datum(out, fields[0].node, Datum::Text(op))?;
        self.write_optional_record(py, out, fields[1].node, before, prepare)?;
        self.write_optional_record(py, out, fields[2].node, after, prepare)?;
        self.write_record(py, out, fields[3].node, source, &[])?;
        self.write_datum(out, fields[4].node, Datum::Long(ts_ms))
    }

    /// One value as `node`, exactly as `write` writes the Python value it stands for; an Err for
    /// a schema construct this path does not take (the caller falls back to Python objects).
    fn write_datum(&self, out: &mut Vec<u8>, node: usize, datum: Datum<'_>) -> Result<(), String> {
        match (&self.nodes[node], datum) {
            (Node::Primitive(Primitive::Null), Datum::Null) => Ok(()),
            (Node::Primitive(Primitive::Boolean), Datum::Bool(b)) => {
                out.push(b as u8);
                Ok(())
            }
            (Node::Primitive(Primitive::Long), Datum::Long(n)) => {
                write_long(out, n);
                Ok(())
            }
            (Node::Primitive(Primitive::Int), Datum::Long(n)) if n >= i32::MIN as i64 && n <= i32::MAX as i64 => {
                write_long(out, n);
                Ok(())
            }
            (Node::Primitive(Primitive::Double), Datum::Double(x)) => {
                out.extend_from_slice(&x.to_le_bytes());
                Ok(())
            }
            (Node::Primitive(Primitive::Double), Datum::Long(n)) => {
                out.extend_from_slice(&(n as f64).to_le_bytes());
                Ok(())
            }
            (Node::Primitive(Primitive::Float), Datum::Double(x)) => {
                let single = x as f32;
                if single.is_infinite() && !x.is_infinite() {
                    return Err("float too large to pack with f format".into());
                }
                out.extend_from_slice(&single.to_le_bytes());
                Ok(())
            }
            (Node::Primitive(Primitive::String), Datum::Text(text)) => {
                write_long(out, text.len() as i64);
                out.extend_from_slice(text.as_bytes());
                Ok(())
            }
            (Node::Primitive(Primitive::String), Datum::Uuid(bytes)) => {
                write_long(out, 36);
                write_uuid_text(out, bytes);
                Ok(())
            }
            (Node::Primitive(Primitive::Double), Datum::Decimal(decimal)) => {
                let double = decimal.to_f64();
                if !double.is_finite() {
                    return Err("a decimal past a double's range is left to Python".into());
                }
                out.extend_from_slice(&double.to_le_bytes());
                Ok(())
            }
            (Node::Primitive(Primitive::String), Datum::Decimal(decimal)) => {
                if !decimal.plain_fits() {
                    return Err("a decimal whose plain text is left to Python".into());
                }
                let mut text = Vec::with_capacity(24);
                decimal.write_plain(&mut text);
                write_long(out, text.len() as i64);
                out.extend_from_slice(&text);
                Ok(())
            }
            (Node::Record { full_name, fields }, Datum::Decimal(decimal))
                if full_name == VARIABLE_SCALE_DECIMAL
                    && fields.len() == 2
                    && matches!(self.nodes[fields[0].node], Node::Primitive(Primitive::Int))
                    && matches!(self.nodes[fields[1].node], Node::Primitive(Primitive::Bytes)) =>
            {
                write_long(out, decimal.scale as i64);
                let mut unscaled = Vec::with_capacity(16);
                decimal.write_unscaled(&mut unscaled);
                write_long(out, unscaled.len() as i64);
                out.extend_from_slice(&unscaled);
                Ok(())
            }
            (Node::Nullable { null_index, .. }, Datum::Null) => {
                out.push(2 * null_index);
                Ok(())
            }
            (Node::Nullable { null_index, other }, value) => {
                out.push(2 * (1 - null_index));
                self.write_datum(out, *other, value)
            }
            (Node::Single { branch }, value) => {
                out.push(0);
                self.write_datum(out, *branch, value)
            }
            (
                Node::Logical {
                    base,
                    passes: Passes::Int,
                    ..
                },
                Datum::Long(n),
            ) => self.write_datum(out, *base, Datum::Long(n)),
            (
                Node::Logical {
                    base,
                    passes: Passes::Str,
                    ..
                },
                datum @ (Datum::Text(_) | Datum::Uuid(_)),
            ) => self.write_datum(out, *base, datum),
            _ => Err("a value the compact path does not write for this schema".into()),
        }
    }
}

#[pymethods]
impl AvroWriter {
    /// Compiles ``schema`` (the JSON form: dicts, lists, names). ``preparers`` maps
    /// ``(type, logicalType)`` to ``prepare(datum, schema)``; a logical type without one is
    /// written as its base type (as fastavro does). With ``rows``, a record may also be given as a
    /// tuple of its fields' values in field order. ValueError for what does not compile.
    #[new]
    #[pyo3(signature = (schema, preparers, rows = false))]
    fn new(py: Python<'_>, schema: &Bound<'_, PyAny>, preparers: &Bound<'_, PyDict>, rows: bool) -> PyResult<Self> {
        let mut compiler = Compiler {
            py,
            nodes: Vec::new(),
            named: HashMap::new(),
            declared: HashMap::new(),
            preparers: preparers.clone(),
        };
        compiler.declare(schema, "")?;
        let root = compiler.compile(schema, "")?;
        let abc = py.import("collections.abc")?;
        let numbers = py.import("numbers")?;
        let types = Types {
            mapping: abc.getattr("Mapping")?.unbind(),
            sequence: abc.getattr("Sequence")?.unbind(),
            integral: numbers.getattr("Integral")?.unbind(),
            real: numbers.getattr("Real")?.unbind(),
            array: py.import("array")?.getattr("array")?.unbind(),
        };
        Ok(AvroWriter {
            nodes: compiler.nodes,
            root,
            types,
            rows,
        })
    }

    /// Appends the Avro binary encoding of ``datum`` to ``buffer`` (a bytearray): the
    /// ``AvroWriter`` signature of ``cdcflow._avro_writer``.
    fn __call__(&self, py: Python<'_>, buffer: &Bound<'_, PyByteArray>, datum: &Bound<'_, PyAny>) -> PyResult<()> {
        let mut out = Vec::with_capacity(256);
        self.write(py, &mut out, self.root, datum, 0)?;
        let start = buffer.len();
        buffer.resize(start + out.len())?;
        // SAFETY: the bytearray was just resized to hold `out` after its old content, and no
        // Python code runs while its buffer is written.
        unsafe { buffer.as_bytes_mut()[start..].copy_from_slice(&out) };
        Ok(())
    }

    /// ``prefix`` followed by the Avro binary encoding of ``datum``, as bytes.
    #[pyo3(signature = (datum, prefix = None))]
    fn encode<'py>(
        &self,
        py: Python<'py>,
        datum: &Bound<'py, PyAny>,
        prefix: Option<&[u8]>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let mut out = Vec::with_capacity(256);
        if let Some(prefix) = prefix {
            out.extend_from_slice(prefix);
        }
        self.write(py, &mut out, self.root, datum, 0)?;
        Ok(PyBytes::new(py, &out))
    }
}

#[cfg(test)]
mod tests {
    //! Expected bytes from the Avro 1.11 specification's binary encoding: int and long as zig-zag
    //! varints (its table: 0 → 00, -1 → 01, 1 → 02, -2 → 03, 2 → 04, -64 → 7f, 64 → 80 01), strings
    //! and bytes as a long length then the bytes, float and double as little-endian IEEE 754,
    //! boolean as one byte, a union as the branch's index then its value, arrays and maps as
    //! blocks (a count, the items, a zero count), enums as the symbol's index, fixed as its bytes.
    use super::{write_long, AvroWriter};
    use crate::batch::Datum;
    use crate::decimal::Decimal;
    use pyo3::prelude::*;
    use pyo3::types::PyDict;

    fn writer(py: Python<'_>, schema: &str) -> AvroWriter {
        let schema = py.import("json").unwrap().call_method1("loads", (schema,)).unwrap();
        AvroWriter::new(py, &schema, &PyDict::new(py), false).unwrap()
    }

    /// The encoding of the Python value `datum` (a Python expression) with `schema`.
    fn encoded(schema: &str, datum: &std::ffi::CStr) -> PyResult<Vec<u8>> {
        Python::attach(|py| {
            let writer = writer(py, schema);
            let datum = py.eval(datum, None, None)?;
            let mut out = Vec::new();
            writer.write(py, &mut out, writer.root, &datum, 0)?;
            Ok(out)
        })
    }

    #[test]
    fn longs_are_zig_zag_varints() {
        let long = |value: i64| {
            let mut out = Vec::new();
            write_long(&mut out, value);
            out
        };
        assert_eq!(long(0), [0x00]);
        assert_eq!(long(-1), [0x01]);
        assert_eq!(long(1), [0x02]);
        assert_eq!(long(-2), [0x03]);
        assert_eq!(long(2), [0x04]);
        assert_eq!(long(-64), [0x7f]);
        assert_eq!(long(64), [0x80, 0x01]);
        assert_eq!(long(8192), [0x80, 0x80, 0x01]);
        assert_eq!(
            long(i64::MAX),
            [0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]
        );
        assert_eq!(
            long(i64::MIN),
            [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]
        );
    }

    const RECORD: &str = r#"{"type": "record", "name": "R", "fields": [
        {"name": "id", "type": "long"}, {"name": "name", "type": "string"},
        {"name": "score", "type": ["null", "int"]}, {"name": "ok", "type": "boolean"},
        {"name": "ratio", "type": "double"}, {"name": "f", "type": "float"}]}"#;

    #[test]
    fn a_record_is_its_fields_in_order() {
        let datum = c"{'id': -3, 'name': 'hé', 'score': 64, 'ok': True, 'ratio': 0.5, 'f': 1.0}";
        let expected = [
            0x05, // id -3
            0x06, b'h', 0xc3, 0xa9, // name: 3 UTF-8 bytes
            0x02, 0x80, 0x01, // score: branch 1 (int), 64
            0x01, // ok
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xe0, 0x3f, // ratio 0.5
            0x00, 0x00, 0x80, 0x3f, // f 1.0
        ];
        assert_eq!(encoded(RECORD, datum).unwrap(), expected);
        let datum = c"{'id': 0, 'name': '', 'score': None, 'ok': False, 'ratio': 0.0, 'f': 0.0}";
        // Each field's zero: one byte each for the first four, 8 and 4 zero bytes for the floats.
        assert_eq!(encoded(RECORD, datum).unwrap(), vec![0u8; 16]);
    }

    #[test]
    fn a_union_writes_the_index_of_the_branch_it_takes() {
        // null second: None is branch 1, an int branch 0.
        assert_eq!(encoded(r#"["int", "null"]"#, c"None").unwrap(), [0x02]);
        assert_eq!(encoded(r#"["int", "null"]"#, c"-1").unwrap(), [0x00, 0x01]);
        assert_eq!(encoded(r#"["null", "string"]"#, c"'a'").unwrap(), [0x02, 0x02, b'a']);
    }

    #[test]
    fn arrays_and_maps_are_blocks_ended_by_a_zero_count() {
        let array = r#"{"type": "array", "items": "int"}"#;
        assert_eq!(encoded(array, c"[1, 2, 3]").unwrap(), [0x06, 0x02, 0x04, 0x06, 0x00]);
        assert_eq!(encoded(array, c"[]").unwrap(), [0x00]);
        let map = r#"{"type": "map", "values": "long"}"#;
        assert_eq!(encoded(map, c"{'a': 1}").unwrap(), [0x02, 0x02, b'a', 0x02, 0x00]);
    }

    #[test]
    fn enums_fixed_and_bytes() {
        let enum_schema = r#"{"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}"#;
        assert_eq!(encoded(enum_schema, c"'C'").unwrap(), [0x04]);
        assert!(encoded(enum_schema, c"'D'").is_err(), "not a symbol");
        let fixed = r#"{"type": "fixed", "name": "F", "size": 2}"#;
        assert_eq!(encoded(fixed, c"b'\\x01\\x02'").unwrap(), [0x01, 0x02]);
        assert!(encoded(fixed, c"b'\\x01'").is_err(), "a fixed of the wrong size");
        assert_eq!(encoded(r#""bytes""#, c"b'\\x00\\xff'").unwrap(), [0x04, 0x00, 0xff]);
    }

    #[test]
    fn an_int_out_of_range_is_refused() {
        assert_eq!(
            encoded(r#""int""#, c"2**31 - 1").unwrap(),
            [0xfe, 0xff, 0xff, 0xff, 0x0f]
        );
        assert!(encoded(r#""int""#, c"2**31").is_err());
        assert!(encoded(r#""long""#, c"2**63").is_err());
    }

    #[test]
    fn a_held_decimal_is_debeziums_variable_scale_record() {
        // io.debezium.data.VariableScaleDecimal: the scale (an int), the unscaled number as
        // big-endian two's complement bytes; -123.45 is scale 2, unscaled -12345 = cf c7.
        let schema = r#"["null", {"type": "record", "name": "VariableScaleDecimal",
            "namespace": "io.debezium.data",
            "fields": [{"name": "scale", "type": "int"}, {"name": "value", "type": "bytes"}]}]"#;
        Python::attach(|py| {
            let writer = writer(py, schema);
            let decimal = Decimal {
                scale: 2,
                unscaled: -12345,
            };
            let mut out = Vec::new();
            writer
                .write_datum(&mut out, writer.root, Datum::Decimal(decimal))
                .unwrap();
            assert_eq!(out, [0x02, 0x04, 0x04, 0xcf, 0xc7]);
            out.clear();
            writer.write_datum(&mut out, writer.root, Datum::Null).unwrap();
            assert_eq!(out, [0x00]);
        });
    }
}
