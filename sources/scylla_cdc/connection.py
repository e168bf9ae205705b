"""Connecting to ScyllaDB (or a Cassandra node holding ScyllaDB's CDC tables) with cassandra-driver.

Two execution profiles: log-table reads at the configured ``consistency`` (the log lives in the
user's keyspace, at the user's replication), and CDC metadata reads in a profile of their own,
each at the consistency ScyllaDB itself uses for them (:func:`metadata_consistency`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cdcflow.sources.cql.connection import CqlClientSecurity, refusal
from cdcflow.sources.scylla_cdc.exceptions import CdcMetadataUnavailableError

if TYPE_CHECKING:
    from cdcflow.sources.scylla_cdc.source import ScyllaCdcSourceConfig

__all__ = [
    "METADATA_PROFILE",
    "CqlConnection",
    "connect",
    "connect_as_configured",
    "metadata_consistency",
    "token_owner_count",
]

METADATA_PROFILE = "scylla_cdc_metadata"


@dataclass(frozen=True)
class CqlConnection:
    """A driver cluster and session; ``log_profile`` and ``metadata_profile`` name the execution
    profiles of log reads and of CDC metadata reads. The caller shuts the cluster down."""

    cluster: Any
    session: Any
    log_profile: object
    metadata_profile: object


def token_owner_count(cluster: Any) -> int:
    """How many nodes own tokens, as the driver's token map sees them (``num_token_owners``);
    every known host when the driver keeps no token map."""
    token_map = cluster.metadata.token_map
    if token_map is None or not token_map.token_to_host_owner:
        return len(cluster.metadata.all_hosts())
    return len(set(token_map.token_to_host_owner.values()))


def metadata_consistency(token_owners: int) -> int:
    """``quorum_if_many`` (scylladb ``db/system_distributed_keyspace.cc`` lines 404-423): QUORUM
    when more than one node owns tokens, ONE on a single node (whose one replica holds every row
    of ``system_distributed``, RF 3 or not)."""
    from cassandra import ConsistencyLevel

    level: int = ConsistencyLevel.QUORUM if token_owners > 1 else ConsistencyLevel.ONE
    return level


def connect(
    hosts: Sequence[str],
    port: int,
    *,
    consistency: str,
    security: CqlClientSecurity | None = None,
    local_dc: str | None = None,
    protocol_version: int = 4,
    timeout_s: float = 10.0,
) -> CqlConnection:
    """Rows as tuples, token-aware routing (each stream's rows live on the replicas of its token);
    log reads at ``consistency``, metadata reads at ONE unless a statement says otherwise."""
    from cassandra import ConsistencyLevel
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import DCAwareRoundRobinPolicy, RoundRobinPolicy
    from cassandra.query import tuple_factory

    from cdcflow.sources.scylla_cdc.routing import StreamTokenAwarePolicy  # imports the driver

    def profile(level: int) -> ExecutionProfile:
        child = DCAwareRoundRobinPolicy(local_dc=local_dc) if local_dc else RoundRobinPolicy()
        return ExecutionProfile(
            load_balancing_policy=StreamTokenAwarePolicy(child),
            consistency_level=level,
            request_timeout=timeout_s,
            row_factory=tuple_factory,
        )

    cluster = Cluster(
        list(hosts),
        port=port,
        protocol_version=protocol_version,
        execution_profiles={
            EXEC_PROFILE_DEFAULT: profile(ConsistencyLevel.name_to_value[consistency]),
            METADATA_PROFILE: profile(ConsistencyLevel.ONE),
        },
        auth_provider=security.auth_provider() if security is not None else None,
        ssl_context=security.ssl_context() if security is not None else None,
        connect_timeout=timeout_s,
    )
    return CqlConnection(cluster, cluster.connect(), EXEC_PROFILE_DEFAULT, METADATA_PROFILE)


def connect_as_configured(config: ScyllaCdcSourceConfig, timeout_s: float = 10.0) -> CqlConnection:
    """:func:`connect` with the source's settings (the source's start and ``cdcflow doctor``); a
    refusal (credentials, TLS) raises its own error, a cluster not reached
    :class:`CdcMetadataUnavailableError` naming the hosts."""
    try:
        return connect(
            config.hosts,
            config.port,
            consistency=config.consistency,
            security=config,
            local_dc=config.local_dc,
            protocol_version=config.protocol_version,
            timeout_s=timeout_s,
        )
    except Exception as exc:
        refused = refusal(config.hosts, exc)
        if refused is not None:
            raise refused from exc
        raise CdcMetadataUnavailableError(f"cannot reach {config.hosts}: {type(exc).__name__}: {exc}") from exc
