"""Connecting to Cassandra with cassandra-driver, quietly and with explicit policies."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["connect"]


def connect(
    contact_points: Sequence[str], port: int = 9042, *, protocol_version: int = 5, timeout_s: float = 10.0
) -> Any:
    """A ``(cluster, session)`` pair; the caller shuts the cluster down.

    The protocol version is set rather than negotiated (Cassandra 4.0+ speaks v5), and the load
    balancing policy is explicit, so the driver does not log a warning for either on every connect.
    """
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import RoundRobinPolicy

    profile = ExecutionProfile(load_balancing_policy=RoundRobinPolicy(), request_timeout=timeout_s)
    cluster = Cluster(
        list(contact_points),
        port=port,
        protocol_version=protocol_version,
        execution_profiles={EXEC_PROFILE_DEFAULT: profile},
        connect_timeout=timeout_s,
    )
    return cluster, cluster.connect()
