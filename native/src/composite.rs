//! Collections, user types and tuples held by the compiled core (a compact batch's values): their
//! elements are values the core holds itself, and the Python value is made only when something
//! asks for it (`to_py`), equal to what the reference decoder (`cdcflow.sources.cql.cqltypes`)
//! gives for the same bytes: lists for lists and sets, dicts for maps whose keys are single
//! values, `{field: value}` dicts for user types and tuples (`f0`, `f1`...).

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

use crate::batch::Value;

/// A user type's or tuple's field names, in the type's order (a tuple's are `f0`, `f1`...).
pub struct FieldNames {
    pub text: Vec<String>,
    pub py: Vec<Py<PyString>>,
}

pub enum Composite {
    /// A list or set: its elements in order (a set as the list the reference gives).
    List(Vec<Value>),
    /// A map whose keys are single values the core holds (dict keys in events), in entry order,
    /// no two alike (the decoder leaves any other map to the reference).
    Map(Vec<(Value, Value)>),
    /// A user type's or tuple's fields; `Absent` where a field update wrote none (the
    /// reference's dict then has no such key).
    Fields { names: Arc<FieldNames>, values: Vec<Value> },
}

impl Composite {
    /// A copy (Python objects among the elements referenced anew).
    pub fn clone_ref(&self, py: Python<'_>) -> Composite {
        let values = |values: &[Value]| values.iter().map(|v| v.clone_ref(py)).collect();
        match self {
            Composite::List(items) => Composite::List(values(items)),
            Composite::Map(entries) => Composite::Map(
                entries
                    .iter()
                    .map(|(k, v)| (k.clone_ref(py), v.clone_ref(py)))
                    .collect(),
            ),
            Composite::Fields { names, values: fields } => Composite::Fields {
                names: names.clone(),
                values: values(fields),
            },
        }
    }

    /// The Python value the reference decodes the same bytes to.
    pub fn to_py<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self {
            Composite::List(items) => {
                let list = PyList::empty(py);
                for item in items {
                    list.append(item.to_py(py)?)?;
                }
                Ok(list.into_any())
            }
            Composite::Map(entries) => {
                let dict = PyDict::new(py);
                for (key, value) in entries {
                    dict.set_item(key.to_py(py)?, value.to_py(py)?)?;
                }
                Ok(dict.into_any())
            }
            Composite::Fields { names, values } => {
                let dict = PyDict::new(py);
                for (name, value) in names.py.iter().zip(values) {
                    if !matches!(value, Value::Absent) {
                        dict.set_item(name.bind(py), value.to_py(py)?)?;
                    }
                }
                Ok(dict.into_any())
            }
        }
    }
}
