"""Token-aware routing of log queries, by the stream IDs' own tokens.

ScyllaDB places the partitions of a CDC log table with the CDC partitioner: a stream ID's token is
its first 8 bytes, read as a signed big-endian integer (scylladb ``cdc/cdc_partitioner.cc``; every
log table is created with it, ``cdc/log.cc`` line 733), not the Murmur3 hash of the key.
cassandra-driver knows one partitioner per cluster (scylladb/python-driver#96, #407, both open), so
its ``TokenAwarePolicy`` given a stream ID as routing key would send the query to the replicas of
the ID's hash: nodes that hold nothing of it, which then read from the right ones. So a log query
carries the token of its first stream (:class:`StreamQuery`), and :class:`StreamTokenAwarePolicy`
sends it to that token's live local replicas first, then to the rest as the child policy orders
them. The streams of a vnode group lie in one token range and have the same replicas, so a query
naming several of them goes to where all of them live. (A tablet keyspace places its tablets
apart from the token ring the driver knows; its queries go to the ring's replicas, and the node
forwards them.)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from cassandra.policies import HostDistance, TokenAwarePolicy
from cassandra.query import SimpleStatement

__all__ = ["StreamQuery", "StreamTokenAwarePolicy"]


class StreamQuery(SimpleStatement):  # type: ignore[misc]  # the driver is untyped
    """A read of a log table's streams, routed by the token of ``routing_token``'s stream.

    Reads are idempotent: the driver may send one again to another replica.
    """

    def __init__(self, query_string: str, keyspace: str, routing_token: int, fetch_size: int | None) -> None:
        super().__init__(query_string, fetch_size=fetch_size, keyspace=keyspace, is_idempotent=True)
        self.routing_token = routing_token


class StreamTokenAwarePolicy(TokenAwarePolicy):  # type: ignore[misc]  # the driver is untyped
    """``TokenAwarePolicy`` that routes a :class:`StreamQuery` by its stream's token (any other
    statement as ``TokenAwarePolicy`` does, by its routing key)."""

    def make_query_plan(self, working_keyspace: str | None = None, query: Any = None) -> Iterator[Any]:
        metadata = self._cluster_metadata
        token_map = metadata.token_map if metadata is not None else None
        if not isinstance(query, StreamQuery) or token_map is None:
            yield from super().make_query_plan(working_keyspace, query)
            return
        keyspace = query.keyspace or working_keyspace
        child = self._child_policy
        replicas = token_map.get_replicas(keyspace, token_map.token_class(query.routing_token))
        first = [host for host in replicas if host.is_up and child.distance(host) == HostDistance.LOCAL]
        yield from first
        for host in child.make_query_plan(keyspace, query):
            if host not in first:
                yield host
