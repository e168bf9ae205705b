"""Which cassandra-driver failures a retry of the same read may cure.

A read is refused for good when the request itself is wrong for the cluster (an invalid request: a
dropped table or keyspace, a consistency level it does not take), when the role may not read it
(unauthorized), or when a replica failed to execute it (a read failure: too many tombstones, a
corrupt sstable); retrying those only hides them. It may pass when the cluster cannot serve it now:
a coordinator that timed out waiting for replicas, too few live replicas, an overloaded or
bootstrapping node, a lost connection, or the client's own request timeout.

The same split as ScyllaDB's reference consumer (scylla-cdc-rust ``stream_reader.rs``,
``is_transient_error``: RequestTimeout, broken connections, Unavailable, ReadTimeout, Overloaded,
IsBootstrapping are retried; Invalid, Unauthorized, ReadFailure, ServerError... are not), told by
the driver's exception types, never by their text.
"""

from __future__ import annotations

__all__ = ["is_transient_read_failure"]


def is_transient_read_failure(error: BaseException) -> bool:
    """True when ``error`` (raised by a cassandra-driver read) may pass if the read is sent again."""
    from cassandra import OperationTimedOut, ReadTimeout, Unavailable
    from cassandra.cluster import NoHostAvailable
    from cassandra.connection import ConnectionBusy, ConnectionException
    from cassandra.protocol import IsBootstrappingErrorMessage, OverloadedErrorMessage

    transient = (
        OperationTimedOut,  # the client's request timeout: no answer in time
        ReadTimeout,  # the coordinator's: replicas did not answer in time
        Unavailable,  # too few live replicas for the consistency level
        NoHostAvailable,  # no host could be sent the request (all down, pools reconnecting)
        ConnectionException,  # the connection broke, or is shut down, under the request
        ConnectionBusy,  # every stream of the connection is in use (rust: UnableToAllocStreamId)
        OverloadedErrorMessage,
        IsBootstrappingErrorMessage,
    )
    return isinstance(error, transient)
