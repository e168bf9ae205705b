"""Reference clients no one here wrote, built from their public registries, that read what cdcflow
reads so a test can compare the two (``scylla_cdc``: ScyllaDB's Rust CDC library)."""
