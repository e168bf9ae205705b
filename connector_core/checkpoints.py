"""The local-file checkpoint store, the embedded default.

One file per partition under ``path``, replaced atomically (write a temp file, fsync, rename,
fsync the folder), so a crash leaves either the old checkpoint or the new one, never a torn one.
One file per partition also lets several worker processes of a pipeline share the folder: each
partition has exactly one owner, so no two processes write the same file.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import Field

from cdcflow.config import ResolvedPath
from cdcflow.contract import Checkpoint, CheckpointStore, CheckpointStoreConfig, PluginContext
from cdcflow.errors import CheckpointCorruptError, CheckpointUnavailableError

__all__ = ["FileCheckpointConfig", "FileCheckpointStore", "write_file_atomically"]

_SUFFIX = ".checkpoint.json"


class FileCheckpointConfig(CheckpointStoreConfig):
    path: ResolvedPath = Field(description="folder holding this pipeline's checkpoints")
    fsync: bool = Field(default=True, description="fsync each checkpoint; off only for throwaway runs")


def write_file_atomically(target: Path, data: bytes, fsync: bool = True) -> None:
    """Replace ``target`` with ``data`` so that readers see the old or the new content, never a mix."""
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    with open(temporary, "wb") as handle:
        handle.write(data)
        if fsync:
            handle.flush()
            os.fsync(handle.fileno())
    os.replace(temporary, target)
    if fsync:
        # The rename itself is durable only once the folder's entry is on disk.
        folder = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)


class FileCheckpointStore(CheckpointStore[FileCheckpointConfig]):
    type_name = "file"
    config_model = FileCheckpointConfig

    def __init__(self, config: FileCheckpointConfig, context: PluginContext) -> None:
        super().__init__(config, context)
        self.folder = config.path

    def open(self) -> None:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CheckpointUnavailableError(f"cannot create checkpoint folder {self.folder}: {exc}") from exc

    def load(self) -> dict[str, Checkpoint]:
        checkpoints: dict[str, Checkpoint] = {}
        if not self.folder.is_dir():
            return checkpoints
        for file in sorted(self.folder.glob(f"*{_SUFFIX}")):
            partition_id = urllib.parse.unquote(file.name[: -len(_SUFFIX)])
            try:
                checkpoints[partition_id] = Checkpoint.from_json(json.loads(file.read_bytes()))
            except (ValueError, KeyError, TypeError) as exc:
                raise CheckpointCorruptError(
                    f"checkpoint file {file} cannot be read ({exc}); fix or delete it, then "
                    f"`cdcflow offsets reset` that partition"
                ) from exc
        return checkpoints

    def commit(self, checkpoints: Mapping[str, Checkpoint]) -> None:
        try:
            for partition_id, checkpoint in checkpoints.items():
                payload = json.dumps(checkpoint.to_json(), sort_keys=True).encode()
                write_file_atomically(self._file_for(partition_id), payload, self.config.fsync)
        except OSError as exc:
            raise CheckpointUnavailableError(f"cannot write checkpoint in {self.folder}: {exc}") from exc

    def reset(self, partition_ids: Sequence[str] | None = None) -> None:
        targets = (
            [self._file_for(p) for p in partition_ids]
            if partition_ids is not None
            else list(self.folder.glob(f"*{_SUFFIX}"))
        )
        for file in targets:
            file.unlink(missing_ok=True)

    def _file_for(self, partition_id: str) -> Path:
        # Partition ids may hold '/', ':' and the like; quoting keeps one flat, reversible name each.
        return self.folder / (urllib.parse.quote(partition_id, safe="") + _SUFFIX)
