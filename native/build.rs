//! Without the `extension-module` feature (`cargo test`), the crate links libpython: its
//! directory goes into the binary's rpath so the test binary finds it without LD_LIBRARY_PATH.
//! The Python build (setup.py turns the feature on) links no libpython and gets nothing here.

fn main() {
    pyo3_build_config::add_libpython_rpath_link_args();
}
