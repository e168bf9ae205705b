"""Where commit-log bytes that cannot be read go, whole, so nothing is lost and the stream goes on.

Seed 001's error store: one record per bad entry or section, with the node, segment, position,
the error and the raw bytes. A Cassandra table by default (created if absent), or a JSON-lines
file. Records are keyed by (node, segment, position): a replay after a crash saves the same
record again, which the table absorbs and the file may repeat.

A segment cut short (its file ends before what its ``COMPLETED`` ``_cdc.idx`` says was synced) is
also kept whole, with its index (:class:`KeptSegment`): in a second table, ``<table>_segments``, in
chunks a Cassandra mutation can hold; or beside the file, in ``<file>.segments/<node>/`` as
``CommitLog-*.log`` and ``_cdc.idx`` files ``cdcflow commitlog dump`` reads as they are. Keeping
one again (a replay) writes the same copy again.
"""

from __future__ import annotations

import base64
import json
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from cdcflow.checkpoints import write_file_atomically
from cdcflow.config import ResolvedPath
from cdcflow.errors import SourceUnavailableError
from cdcflow.sources.cassandra_commitlog.exceptions import KeptSegmentNotFoundError

__all__ = [
    "CassandraErrorStore",
    "ErrorRecord",
    "ErrorStore",
    "ErrorStoreConfig",
    "FileErrorStore",
    "KeptSegment",
    "KeptSegmentInfo",
    "open_error_store",
]

# A kept segment's bytes per row of the Cassandra table: a mutation must stay under half the node's
# commitlog_segment_size (Cassandra's max_mutation_size; the test node's segments are 1 MiB).
_SEGMENT_CHUNK = 256 << 10


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


@dataclass(frozen=True, slots=True)
class KeptSegmentInfo:
    """What the error store says of a segment it keeps."""

    node: str
    segment: int
    name: str  # the file's name in cdc_raw: CommitLog-<version>-<id>.log
    size: int  # bytes of the file as it was found
    index: str  # its _cdc.idx, as Cassandra wrote it
    error: str

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "segment": self.segment,
            "name": self.name,
            "size": self.size,
            "index": self.index,
            "error": self.error,
        }


@dataclass(frozen=True, slots=True)
class KeptSegment:
    """A segment kept whole, with its index: every byte the file had, to be read again later."""

    info: KeptSegmentInfo
    data: bytes


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

    @abstractmethod
    def keep_segment(self, kept: KeptSegment) -> None:
        """Keep a whole segment and its index; durable when it returns, as :meth:`save`."""

    @abstractmethod
    def kept_segments(self) -> list[KeptSegmentInfo]:
        """Every segment kept whole, oldest first per node."""

    @abstractmethod
    def kept_segment(self, node: str, segment: int) -> KeptSegment:
        """A kept segment's bytes and index; :class:`KeptSegmentNotFoundError` when it is not kept."""


class FileErrorStore(ErrorStore):
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def save(self, record: ErrorRecord) -> None:
        with self.path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(record.to_json()) + "\n")
            out.flush()
            os.fsync(out.fileno())

    @property
    def segments_dir(self) -> Path:
        """Where kept segments are: ``<file>.segments/<node>/``."""
        return self.path.with_name(self.path.name + ".segments")

    def keep_segment(self, kept: KeptSegment) -> None:
        info = kept.info
        folder = self.segments_dir / info.node
        folder.mkdir(parents=True, exist_ok=True)
        stem = Path(info.name).stem
        write_file_atomically(folder / info.name, kept.data)
        write_file_atomically(folder / f"{stem}_cdc.idx", info.index.encode("ascii"))
        # Written last: a copy without it was cut off by a crash, and is written again by the replay.
        write_file_atomically(folder / f"{stem}.kept.json", json.dumps(info.to_json()).encode())

    def kept_segments(self) -> list[KeptSegmentInfo]:
        found = [_info_of(json.loads(p.read_text())) for p in self.segments_dir.glob("*/*.kept.json")]
        return sorted(found, key=lambda info: (info.node, info.segment))

    def kept_segment(self, node: str, segment: int) -> KeptSegment:
        for info in self.kept_segments():
            if info.node == node and info.segment == segment:
                return KeptSegment(info, (self.segments_dir / node / info.name).read_bytes())
        raise _not_kept(node, segment, f"in {self.segments_dir}")


class CassandraErrorStore(ErrorStore):
    def __init__(self, session: Any, keyspace: str, table: str) -> None:
        self.session = session
        self.segments_table = f"{keyspace}.{table}_segments"
        self._kept_table_ready = False
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

    def _segments_table(self) -> str:
        """``<table>_segments``, created when first needed: most stores never keep a segment."""
        if self._kept_table_ready:
            return self.segments_table
        try:
            self.session.execute(
                f"CREATE TABLE IF NOT EXISTS {self.segments_table} ("
                "node text, segment bigint, chunk int, data blob, "
                "name text static, size bigint static, index_text text static, error text static, "
                "chunks int static, saved_at timestamp static, "
                "PRIMARY KEY ((node, segment), chunk))"
            )
        except Exception as exc:
            raise SourceUnavailableError(
                f"error store table {self.segments_table} could not be created: {exc}"
            ) from exc
        self._kept_table_ready = True
        return self.segments_table

    def keep_segment(self, kept: KeptSegment) -> None:
        info, table = kept.info, self._segments_table()
        chunks = [kept.data[at : at + _SEGMENT_CHUNK] for at in range(0, len(kept.data), _SEGMENT_CHUNK)]
        try:
            insert_chunk = self.session.prepare(f"INSERT INTO {table} (node, segment, chunk, data) VALUES (?, ?, ?, ?)")
            for number, chunk in enumerate(chunks):
                self.session.execute(insert_chunk, (info.node, info.segment, number, chunk))
            # Written last: a copy whose chunk count is not set yet was cut off, and is not listed.
            self.session.execute(
                f"INSERT INTO {table} (node, segment, name, size, index_text, error, chunks, saved_at) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, toTimestamp(now()))",
                (info.node, info.segment, info.name, info.size, info.index, info.error, len(chunks)),
            )
        except Exception as exc:
            raise SourceUnavailableError(f"error store write of segment {info.name} failed: {exc}") from exc

    def kept_segments(self) -> list[KeptSegmentInfo]:
        table = self._segments_table()
        try:
            rows = list(
                self.session.execute(
                    f"SELECT DISTINCT node, segment, name, size, index_text, error, chunks FROM {table}"
                )
            )
        except Exception as exc:
            raise SourceUnavailableError(f"error store read of {table} failed: {exc}") from exc
        found = [
            KeptSegmentInfo(row.node, row.segment, row.name, row.size, row.index_text, row.error)
            for row in rows
            if row.chunks is not None
        ]
        return sorted(found, key=lambda info: (info.node, info.segment))

    def kept_segment(self, node: str, segment: int) -> KeptSegment:
        table = self._segments_table()
        try:
            rows = list(
                self.session.execute(
                    f"SELECT chunk, data, name, size, index_text, error, chunks FROM {table} "
                    "WHERE node = %s AND segment = %s",
                    (node, segment),
                )
            )
        except Exception as exc:
            raise SourceUnavailableError(f"error store read of {table} failed: {exc}") from exc
        first = rows[0] if rows else None
        chunks = sorted((row for row in rows if row.chunk is not None), key=lambda row: row.chunk)
        # A partition with only its static columns reads as one row without a chunk.
        if first is None or first.chunks is None or len(chunks) != first.chunks:
            raise _not_kept(node, segment, f"in {table}")
        data = b"".join(bytes(row.data or b"") for row in chunks)
        info = KeptSegmentInfo(node, segment, first.name, first.size, first.index_text, first.error)
        return KeptSegment(info, data)


def _info_of(document: dict[str, Any]) -> KeptSegmentInfo:
    return KeptSegmentInfo(
        str(document["node"]),
        int(document["segment"]),
        str(document["name"]),
        int(document["size"]),
        str(document["index"]),
        str(document["error"]),
    )


def _not_kept(node: str, segment: int, where: str) -> KeptSegmentNotFoundError:
    return KeptSegmentNotFoundError(
        f"no kept copy of node {node}'s segment {segment} {where}; "
        "`cdcflow commitlog kept PIPELINE` lists the kept ones"
    )


def open_error_store(config: ErrorStoreConfig, default_file: Path, session: Callable[[], Any]) -> ErrorStore:
    """The store ``config`` names: a file (``default_file`` unless it gives a path), or a table
    through the Cassandra session ``session`` returns."""
    if config.type == "file":
        return FileErrorStore(config.path or default_file)
    return CassandraErrorStore(session(), config.keyspace, config.table)
