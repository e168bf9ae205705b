"""Where commit-log bytes that cannot be read go, whole, so nothing is lost and the stream goes on.

Seed 001's error store: one record per bad entry or section, with the node, segment, position,
the error and the raw bytes. A Cassandra table by default (created if absent), or a JSON-lines
file. Records are keyed by (node, segment, position): a replay after a crash saves the same
record again, which the table absorbs and the file may repeat.
"""

from __future__ import annotations

import base64
import json
import os
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from cdcflow.config import ResolvedPath
from cdcflow.errors import SourceUnavailableError

__all__ = ["CassandraErrorStore", "ErrorRecord", "ErrorStore", "ErrorStoreConfig", "FileErrorStore"]


@dataclass(frozen=True, slots=True)
class ErrorRecord:
    node: str
    segment: int
    position: int  # logical position where the unreadable bytes end
    error: str
    raw: bytes

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "segment": self.segment,
            "position": self.position,
            "error": self.error,
            "raw": base64.b64encode(self.raw).decode(),
            "saved_at_ms": int(time.time() * 1000),
        }


class ErrorStoreConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["cassandra", "file"] = Field(
        default="cassandra", description="a Cassandra table or a JSON-lines file"
    )
    keyspace: str = Field(default="cdcflow", description="cassandra: the keyspace (created with RF 1 if absent)")
    table: str = Field(default="commitlog_errors", description="cassandra: the table (created if absent)")
    path: ResolvedPath | None = Field(default=None, description="file: the JSON-lines file")


class ErrorStore(ABC):
    @abstractmethod
    def save(self, record: ErrorRecord) -> None:
        """Durable when it returns: the offsets past this record may be committed next."""


class FileErrorStore(ErrorStore):
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def save(self, record: ErrorRecord) -> None:
        with self.path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(record.to_json()) + "\n")
            out.flush()
            os.fsync(out.fileno())


class CassandraErrorStore(ErrorStore):
    def __init__(self, session: Any, keyspace: str, table: str) -> None:
        self.session = session
        try:
            session.execute(
                f"CREATE KEYSPACE IF NOT EXISTS {keyspace} "
                "WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}"
            )
            session.execute(
                f"CREATE TABLE IF NOT EXISTS {keyspace}.{table} ("
                "node text, segment bigint, position int, error text, raw blob, saved_at timestamp, "
                "PRIMARY KEY ((node, segment), position))"
            )
            self.insert = session.prepare(
                f"INSERT INTO {keyspace}.{table} (node, segment, position, error, raw, saved_at) "
                "VALUES (?, ?, ?, ?, ?, toTimestamp(now()))"
            )
        except Exception as exc:  # the driver's errors share no base class worth naming
            raise SourceUnavailableError(f"error store {keyspace}.{table} could not be prepared: {exc}") from exc

    def save(self, record: ErrorRecord) -> None:
        try:
            self.session.execute(self.insert, (record.node, record.segment, record.position, record.error, record.raw))
        except Exception as exc:
            raise SourceUnavailableError(f"error store write failed: {exc}") from exc
