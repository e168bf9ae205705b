"""Stand-ins for services that cannot run on the build machines (see docs/scylla.md and docs/tikv.md)."""
