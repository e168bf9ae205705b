//! cdcflow's compiled core, imported as `cdcflow._native` (optional: the pure-Python code it
//! mirrors stays the reference, and property tests hold the two equal).
//!
//! * `commitlog`: commit-log entry framing and CRCs, mutations decoded straight to row changes;
//! * `avro`: Avro binary encoding compiled per schema (byte for byte what fastavro writes);
//! * `json`: JSON text as cdcflow's `compact_json` writes it (Kafka Connect JSON payloads);
//! * `batch`: change events in compact form, encoded to Kafka messages without Python objects;
//! * `datagen`: the `datagen` source's events built straight into a compact batch;
//! * `envelopes`: Kafka messages of JSON change envelopes straight into the spark engine's rows.
//!
//! Nothing here may take the process down on any input: every decoder returns an error value or
//! declines to the reference, and PyO3 turns a panic into a Python exception.

use pyo3::prelude::*;

// The decoders make and drop many small values a row (cells, keys, collection elements); mimalloc's
// thread-local free lists cost a fraction of glibc malloc's bins for that churn. Only this crate's
// own allocations use it: what crosses to Python is copied into Python's objects.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod avro;
mod batch;
mod commitlog;
mod composite;
mod datagen;
mod decimal;
mod envelopes;
mod json;
mod objects;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<commitlog::CommitLogDecoder>()?;
    m.add_class::<commitlog::FramedEntry>()?;
    m.add_class::<commitlog::CompactBatchBuilder>()?;
    m.add_class::<commitlog::CompactSection>()?;
    m.add_function(wrap_pyfunction!(commitlog::frame_section, m)?)?;
    m.add_class::<avro::AvroWriter>()?;
    m.add_class::<json::JsonEncoder>()?;
    m.add_class::<batch::EventBatch>()?;
    m.add("ABSENT", batch::absent(m.py())?)?;
    m.add_class::<datagen::DatagenPlan>()?;
    m.add_function(wrap_pyfunction!(envelopes::json_envelope_rows, m)?)?;
    m.add_function(wrap_pyfunction!(envelopes::json_envelope_typed_rows, m)?)?;
    m.add_function(wrap_pyfunction!(json::float_text, m)?)?;
    Ok(())
}
