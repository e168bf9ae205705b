//! cdcflow's compiled core, imported as `cdcflow._native` (optional: the pure-Python code it
//! mirrors stays the reference, and property tests hold the two equal).
//!
//! * `commitlog`: commit-log entry framing and CRCs, mutations decoded straight to row changes;
//! * `avro`: Avro binary encoding compiled per schema (byte for byte what fastavro writes);
//! * `json`: JSON text as cdcflow's `compact_json` writes it (Kafka Connect JSON payloads).
//!
//! Nothing here may take the process down on any input: every decoder returns an error value or
//! declines to the reference, and PyO3 turns a panic into a Python exception.

use pyo3::prelude::*;

mod commitlog;
mod objects;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<commitlog::CommitLogDecoder>()?;
    m.add_class::<commitlog::FramedEntry>()?;
    m.add_function(wrap_pyfunction!(commitlog::frame_section, m)?)?;
    Ok(())
}
