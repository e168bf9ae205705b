"""Reference clients no one here wrote, built from their public registries, that read what cdcflow
reads so a test can compare the two (``scylla_cdc``: ScyllaDB's Rust CDC library;
``tikv_client_go``: TiKV's Go client, driving the TiKV stand-in through its ``rawkv`` API)."""
