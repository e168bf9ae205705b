"""The CQL type system shared by the Cassandra and ScyllaDB sources: how CQL values are stored and
what they decode to (:mod:`cdcflow.sources.cql.cqltypes`)."""

from cdcflow.sources.cql.cqltypes import CqlType, ValueDecodeError, build_type, from_driver

__all__ = ["CqlType", "ValueDecodeError", "build_type", "from_driver"]
