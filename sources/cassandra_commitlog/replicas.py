"""Which node's worker emits a change when every replica's commit log holds it (seed 001).

Each partition key's token has an ordered replica list (the ring walk from the token, as the
driver's token map computes it for the keyspace's replication). The first replica is the
*primary* and emits; when the driver sees the primary down, the first replica that is up takes
over. With every node up, each change is emitted once; around a node going down or coming back
some are emitted twice (at least once, never lost while some replica's worker runs).
"""

from __future__ import annotations

from typing import Any

__all__ = ["PrimaryReplicaFilter"]


class PrimaryReplicaFilter:
    """Decides, per keyspace and partition key, whether this node emits (driver metadata based)."""

    def __init__(self, cluster: Any, address: str) -> None:
        self.cluster = cluster
        self.address = address
        self.emitted = 0
        self.skipped = 0

    def emits(self, keyspace: str, partition_key: bytes) -> bool:
        token_map = self.cluster.metadata.token_map
        if token_map is None:  # the driver has no ring yet: emitting is the safe side
            return True
        return self._emits(keyspace, token_map, token_map.token_class.from_key(partition_key))

    def emits_token(self, keyspace: str, token: int) -> bool:
        """The same decision for a row read with its ``token(pk)`` (a snapshot)."""
        token_map = self.cluster.metadata.token_map
        if token_map is None:
            return True
        return self._emits(keyspace, token_map, token_map.token_class(token))

    def _emits(self, keyspace: str, token_map: Any, token: Any) -> bool:
        replicas = token_map.get_replicas(keyspace, token)
        if not replicas:
            return True
        owner = next((host for host in replicas if host.is_up is not False), replicas[0])
        mine = str(owner.address) == self.address
        if mine:
            self.emitted += 1
        else:
            self.skipped += 1
        return mine

    def emits_cluster_wide(self) -> bool:
        """For what every node's log holds alike (schema changes): the first live node by address emits."""
        hosts = sorted(
            (h for h in self.cluster.metadata.all_hosts() if h.is_up is not False), key=lambda h: str(h.address)
        )
        return not hosts or str(hosts[0].address) == self.address

    @property
    def duplicate_avoided_ratio(self) -> float:
        total = self.emitted + self.skipped
        return self.skipped / total if total else 0.0
