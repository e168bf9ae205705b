//! Instances of cdcflow's record classes (slots dataclasses such as `RowChange`) built from Rust.
//!
//! Calling a dataclass runs its generated `__init__` in the interpreter, about a microsecond for
//! eleven fields; when the class is a plain slots class whose fields are exactly the given ones,
//! the instance is allocated and its slots filled directly, which is what `__init__` amounts to.
//! Anything else (a `__post_init__`, other slots, a changed field list) is built by calling it.

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyTuple, PyType};

/// `T_OBJECT_EX`: a slot holding an object reference (AttributeError when unset).
const T_OBJECT_EX: i32 = 16;

pub struct RecordClass {
    class: Py<PyAny>,
    /// Slot offsets in argument order, when the class is built directly.
    offsets: Option<Vec<isize>>,
}

impl RecordClass {
    /// `class`, called with `fields` (in this order) as positional arguments.
    pub fn new(py: Python<'_>, class: Py<PyAny>, fields: &[&str]) -> RecordClass {
        let offsets = Self::slot_offsets(class.bind(py), fields).ok().flatten();
        RecordClass { class, offsets }
    }

    fn slot_offsets(class: &Bound<'_, PyAny>, fields: &[&str]) -> PyResult<Option<Vec<isize>>> {
        let Ok(class) = class.cast::<PyType>() else {
            return Ok(None);
        };
        if class.hasattr("__post_init__")? {
            return Ok(None);
        }
        let slots: Vec<String> = match class.getattr("__slots__")?.extract() {
            Ok(slots) => slots,
            Err(_) => return Ok(None),
        };
        if slots.len() != fields.len() || slots.iter().any(|s| !fields.contains(&s.as_str())) {
            return Ok(None);
        }
        // Every slot of the object must be one of ours: no slots from a base class.
        let basic_size: isize = class.getattr("__basicsize__")?.extract()?;
        let expected = std::mem::size_of::<ffi::PyObject>() + fields.len() * std::mem::size_of::<*mut ffi::PyObject>();
        if basic_size as usize != expected {
            return Ok(None);
        }
        let namespace = class.getattr("__dict__")?;
        let mut offsets = Vec::with_capacity(fields.len());
        for field in fields {
            let descriptor = namespace.get_item(field)?;
            if descriptor.get_type().name()?.to_str()? != "member_descriptor" {
                return Ok(None);
            }
            // SAFETY: a member_descriptor object is a PyMemberDescrObject, whose d_member points
            // to the class's PyMemberDef for this slot (alive as long as the class).
            let member = unsafe { &*(*(descriptor.as_ptr() as *mut ffi::PyMemberDescrObject)).d_member };
            if member.type_code != T_OBJECT_EX || member.flags != 0 {
                return Ok(None);
            }
            offsets.push(member.offset);
        }
        Ok(Some(offsets))
    }

    /// An instance with `values` as its fields, in the order given to `new`.
    pub fn instance<'py, const N: usize>(
        &self,
        py: Python<'py>,
        values: [Bound<'py, PyAny>; N],
    ) -> PyResult<Bound<'py, PyAny>> {
        let class = self.class.bind(py);
        let Some(offsets) = &self.offsets else {
            return class.call1(PyTuple::new(py, values)?);
        };
        if offsets.len() != N {
            return class.call1(PyTuple::new(py, values)?);
        }
        // SAFETY: the class is a heap type checked above to hold exactly these object slots at
        // these offsets; tp_alloc returns a zeroed instance (GC-tracked if the type is), and each
        // slot receives a new reference, as the slot descriptor's __set__ would store it.
        unsafe {
            let type_object = class.as_ptr() as *mut ffi::PyTypeObject;
            let alloc = (*type_object).tp_alloc.unwrap_or(ffi::PyType_GenericAlloc);
            let object = alloc(type_object, 0);
            if object.is_null() {
                return Err(PyErr::fetch(py));
            }
            for (offset, value) in offsets.iter().zip(values) {
                let slot = (object as *mut u8).offset(*offset) as *mut *mut ffi::PyObject;
                *slot = value.into_ptr();
            }
            Ok(Bound::from_owned_ptr(py, object))
        }
    }
}
