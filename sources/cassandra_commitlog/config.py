"""The ``cassandra_commitlog`` source's configuration model."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from cdcflow.config import ResolvedPath
from cdcflow.contract import PluginConfig, PluginContext
from cdcflow.sources.cassandra_commitlog.error_store import ErrorStoreConfig
from cdcflow.sources.cql.connection import CqlClientSecurity
from cdcflow.sources.cql.snapshot import SnapshotConfig

__all__ = ["CassandraCommitLogSourceConfig", "default_error_file"]


class CassandraCommitLogSourceConfig(PluginConfig, CqlClientSecurity, SnapshotConfig):
    cdc_raw: ResolvedPath = Field(description="the node's cdc_raw_directory, read locally")
    hosts: list[str] = Field(default_factory=lambda: ["127.0.0.1"], description="nodes to read the schema from")
    port: int = Field(default=9042, ge=1, le=65535)
    cluster: str = Field(default="cassandra", description="the server name: topics are <cluster>.<keyspace>.<table>")
    node: str | None = Field(default=None, description="this node's name in events and offsets; default the hostname")
    tables: list[str] | None = Field(
        default=None, description="keyspace.table names to emit; default every table with cdc = true"
    )
    replicas: Literal["primary", "all"] = Field(
        default="primary",
        description="primary: emit only changes this node is the primary (or first live) replica of; all: every change",
    )
    node_address: str | None = Field(
        default=None, description="this node's address in the ring (for replicas: primary); default the first host"
    )
    row_image: Literal["delta", "full"] = Field(
        default="delta",
        description="delta: the columns each mutation carried; full: the whole row, read back from the local node"
        " once the change's time bucket closed (seed 001's stateless processing)",
    )
    window_count: int = Field(default=5, ge=1, description="full: open time buckets (seed 001: 5)")
    window_interval_ms: int = Field(
        default=60_000, ge=100, description="full: one time bucket's width (seed 001: 1 min)"
    )
    processed_segments: Literal["delete", "archive", "keep"] = Field(
        default="delete", description="what happens to a segment once it is read and checkpointed"
    )
    archive_dir: ResolvedPath | None = Field(default=None, description="where processed segments go (archive)")
    schema_refresh_s: float = Field(default=60.0, gt=0, description="how often the schema is re-read")
    error_store: ErrorStoreConfig = Field(default_factory=ErrorStoreConfig)

    @property
    def ring_address(self) -> str:
        """This node's address in the ring: ``node_address``, else the first host."""
        return self.node_address or self.hosts[0]


def default_error_file(context: PluginContext) -> Path:
    """The file error store's path when ``error_store.path`` is not set."""
    return context.base_dir / f"{context.pipeline}.commitlog_errors.jsonl"
