"""Connecting to Cassandra with cassandra-driver, quietly and with explicit policies."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cdcflow.sources.cql.connection import CqlClientSecurity

__all__ = ["LOCAL_NODE_PROFILE", "connect"]

# An execution profile that sends requests to one node only (full row images read the local copy).
LOCAL_NODE_PROFILE = "local-node"


def connect(
    contact_points: Sequence[str],
    port: int = 9042,
    *,
    protocol_version: int = 5,
    timeout_s: float = 10.0,
    local_node: str | None = None,
    security: CqlClientSecurity | None = None,
) -> Any:
    """A ``(cluster, session)`` pair; the caller shuts the cluster down. ``security``: the
    credentials (PasswordAuthenticator) and TLS settings of the source's config.

    The protocol version is set rather than negotiated (Cassandra 4.0+ speaks v5), and the load
    balancing policy is explicit, so the driver does not log a warning for either on every connect.
    """
    from cassandra import ConsistencyLevel
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import RoundRobinPolicy, WhiteListRoundRobinPolicy

    profiles = {
        EXEC_PROFILE_DEFAULT: ExecutionProfile(load_balancing_policy=RoundRobinPolicy(), request_timeout=timeout_s)
    }
    if local_node is not None:
        profiles[LOCAL_NODE_PROFILE] = ExecutionProfile(
            load_balancing_policy=WhiteListRoundRobinPolicy([local_node]),
            consistency_level=ConsistencyLevel.ONE,
            request_timeout=timeout_s,
        )
    cluster = Cluster(
        list(contact_points),
        port=port,
        protocol_version=protocol_version,
        execution_profiles=profiles,
        connect_timeout=timeout_s,
        auth_provider=security.auth_provider() if security is not None else None,
        ssl_context=security.ssl_context() if security is not None else None,
    )
    return cluster, cluster.connect()
