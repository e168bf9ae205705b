"""Connecting to ScyllaDB (or a Cassandra node holding ScyllaDB's CDC tables) with cassandra-driver."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cdcflow.sources.cql.connection import CqlClientSecurity

__all__ = ["connect"]


def connect(
    hosts: Sequence[str],
    port: int,
    *,
    consistency: str,
    security: CqlClientSecurity | None = None,
    local_dc: str | None = None,
    protocol_version: int = 4,
    timeout_s: float = 10.0,
) -> tuple[Any, Any, object]:
    """``(cluster, session, profile)``: rows as tuples, the configured consistency, token-aware
    routing (each stream's rows live on the replicas of its token); the caller shuts it down."""
    from cassandra import ConsistencyLevel
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import DCAwareRoundRobinPolicy, RoundRobinPolicy
    from cassandra.query import tuple_factory

    from cdcflow.sources.scylla_cdc.routing import StreamTokenAwarePolicy  # imports the driver

    child = DCAwareRoundRobinPolicy(local_dc=local_dc) if local_dc else RoundRobinPolicy()
    profile = ExecutionProfile(
        load_balancing_policy=StreamTokenAwarePolicy(child),
        consistency_level=ConsistencyLevel.name_to_value[consistency],
        request_timeout=timeout_s,
        row_factory=tuple_factory,
    )
    cluster = Cluster(
        list(hosts),
        port=port,
        protocol_version=protocol_version,
        execution_profiles={EXEC_PROFILE_DEFAULT: profile},
        auth_provider=security.auth_provider() if security is not None else None,
        ssl_context=security.ssl_context() if security is not None else None,
        connect_timeout=timeout_s,
    )
    return cluster, cluster.connect(), EXEC_PROFILE_DEFAULT
