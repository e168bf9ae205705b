"""JSON lines appended to a local file; ``flush`` fsyncs, so what it acknowledges survives a crash."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import IO, Any

from pydantic import Field

from cdcflow.config import ResolvedPath
from cdcflow.contract import PluginConfig, PluginContext, Rejected, Sink
from cdcflow.errors import SinkUnavailableError
from cdcflow.events import Record
from cdcflow.jsontext import compact_json

__all__ = ["FileSink", "FileSinkConfig"]


class FileSinkConfig(PluginConfig):
    path: ResolvedPath = Field(description="the file records are appended to (folders are created)")


class FileSink(Sink[FileSinkConfig]):
    """``file``: one JSON object per line: destination, key, value, headers."""

    type_name = "file"
    config_model = FileSinkConfig

    def __init__(self, config: FileSinkConfig, context: PluginContext) -> None:
        super().__init__(config, context)
        self._handle: IO[str] | None = None

    def open(self) -> None:
        try:
            self.config.path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = open(self.config.path, "a", encoding="utf-8")  # noqa: SIM115 - held open
        except OSError as exc:
            raise SinkUnavailableError(f"cannot open {self.config.path}: {exc}") from exc

    def write(self, records: Sequence[Record]) -> list[Rejected]:
        assert self._handle is not None, "open() first"
        lines = []
        for record in records:
            line: dict[str, Any] = {
                "destination": record.destination(),
                "key": record.key_payload(),
                "value": record.value_payload(),
            }
            if record.headers:
                line["headers"] = record.headers
            lines.append(compact_json(line) + "\n")
        self._handle.writelines(lines)
        return []

    def flush(self) -> list[Rejected]:
        if self._handle is not None:
            try:
                self._handle.flush()
                os.fsync(self._handle.fileno())
            except OSError as exc:
                raise SinkUnavailableError(f"cannot fsync {self.config.path}: {exc}") from exc
        return []

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
