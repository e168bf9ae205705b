"""Which cassandra-driver failures of a read are retried (issue 22, item 6): the split of
scylla-cdc-rust's ``is_transient_error`` (``scylla-cdc/src/stream_reader.rs``), by exception type,
over the exceptions the driver raises (built as the driver builds them from a server's answer)."""

from __future__ import annotations

import pytest

from cdcflow.sources.cql.driver_errors import is_transient_read_failure


def driver_errors() -> dict[str, tuple[BaseException, bool]]:
    from cassandra import (
        ConsistencyLevel,
        InvalidRequest,
        OperationTimedOut,
        ReadFailure,
        ReadTimeout,
        Unauthorized,
        Unavailable,
        WriteTimeout,
        WriteType,
    )
    from cassandra.cluster import NoHostAvailable
    from cassandra.connection import ConnectionBusy, ConnectionShutdown
    from cassandra.protocol import (
        IsBootstrappingErrorMessage,
        OverloadedErrorMessage,
        ServerError,
        SyntaxException,
    )

    quorum = ConsistencyLevel.QUORUM
    return {
        "client timeout": (OperationTimedOut({"127.0.0.1:9042": "Client request timeout"}), True),
        "read timeout": (ReadTimeout("", consistency=quorum, required_responses=2, received_responses=1), True),
        "unavailable": (Unavailable("", consistency=quorum, required_replicas=2, alive_replicas=1), True),
        "no host": (NoHostAvailable("Unable to complete the operation against any hosts", {}), True),
        "connection shut down": (ConnectionShutdown("Connection to 127.0.0.1 was closed"), True),
        "connection busy": (ConnectionBusy("no stream id"), True),
        "overloaded": (OverloadedErrorMessage(0x1001, "Coordinator node overloaded", None), True),
        "bootstrapping": (IsBootstrappingErrorMessage(0x1002, "Coordinator node is bootstrapping", None), True),
        "invalid request": (InvalidRequest("unconfigured table orders_scylla_cdc_log"), False),
        "unauthorized": (Unauthorized("User reader has no SELECT permission"), False),
        "read failure": (ReadFailure("", consistency=quorum, required_responses=2, received_responses=0), False),
        "write timeout": (
            WriteTimeout(
                "", consistency=quorum, required_responses=2, received_responses=1, write_type=WriteType.SIMPLE
            ),
            False,
        ),
        "server error": (ServerError(0x0000, "internal error", None), False),
        "syntax": (SyntaxException(0x2000, "line 1:0 no viable alternative", None), False),
        "a bug": (TypeError("unsupported operand"), False),
    }


@pytest.mark.parametrize("name", sorted(driver_errors()))
def test_a_read_is_retried_only_when_the_cluster_may_serve_it_later(name: str) -> None:
    error, transient = driver_errors()[name]
    assert is_transient_read_failure(error) is transient
