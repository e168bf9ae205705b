"""A stopped Spark query's offsets, read from and written to its checkpoint folder.

Spark keeps a query's progress in two logs under the checkpoint location: ``offsets/<batch>``
(a version line, the batch's metadata, then one line per source with the offsets the batch ends
at) and ``commits/<batch>`` (written once the batch's output is durable). A restarted query
whose newest offsets batch is also committed starts the next batch from those offsets. Changing
offsets therefore means appending one more batch to both logs, as if an empty batch had ended at
the new offsets; earlier batches stay as Spark wrote them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cdcflow.checkpoints import FileCheckpointConfig, write_file_atomically
from cdcflow.engine_checks import refuse_engine_mismatches
from cdcflow.errors import CheckpointCorruptError

if TYPE_CHECKING:
    from cdcflow.config import PipelineSpec

__all__ = ["append_committed_batch", "batch_end_offsets", "checkpoint_location", "last_committed_batch"]


def checkpoint_location(spec: PipelineSpec) -> Path:
    """Spark's checkpoint folder: the pipeline's ``checkpoint: {type: file, path: ...}``;
    :class:`~cdcflow.errors.EngineUnsupportedError` for what the spark engine cannot run."""
    refuse_engine_mismatches(spec)
    config = spec.checkpoint.config
    assert isinstance(config, FileCheckpointConfig)  # checkpoint.type file, as refuse_engine_mismatches insists
    return Path(config.path)


def _batches(folder: Path) -> list[int]:
    return sorted(int(p.name) for p in folder.glob("*") if p.name.isdigit()) if folder.is_dir() else []


def _logged_batch(location: Path, batch: int) -> tuple[str, str, Any]:
    """``offsets/<batch>`` as its three lines: the version, the batch metadata and the source's
    end offsets (parsed)."""
    where = location / "offsets" / str(batch)
    lines = where.read_text().splitlines()
    if len(lines) != 3:
        raise CheckpointCorruptError(
            f"{where}: expected a version, the batch metadata and one source's offsets "
            f"(a cdcflow query reads one source), found {len(lines)} lines"
        )
    version, metadata, offsets = lines
    try:
        return version, metadata, json.loads(offsets)
    except json.JSONDecodeError as exc:
        raise CheckpointCorruptError(f"{where}: the source's offsets (line 3) are not JSON: {exc}") from exc


def batch_end_offsets(location: Path, batch: int) -> Any:
    """The end offsets Spark logged for ``batch`` before running it, as its source wrote them (a
    cdcflow source's ``{partition id: offset}``, or what Spark's own connector logs)."""
    return _logged_batch(location, batch)[2]


def last_committed_batch(location: Path) -> tuple[int, Any] | None:
    """The newest batch Spark committed and its source's end offsets as Spark logged them."""
    committed = _batches(location / "commits")
    if not committed:
        return None
    batch = committed[-1]
    return batch, batch_end_offsets(location, batch)


def append_committed_batch(location: Path, source_offsets: Any) -> int:
    """Log a committed batch ending at ``source_offsets`` after the newest one; returns its id.
    The query must be stopped (its next batch would otherwise race this one)."""
    found = last_committed_batch(location)
    if found is None:
        raise CheckpointCorruptError(f"{location}: Spark has committed no batch yet; there are no offsets to change")
    batch, _ = found
    if _batches(location / "offsets")[-1] != batch:
        raise CheckpointCorruptError(
            f"{location}: batch {_batches(location / 'offsets')[-1]} was planned but never committed; run the "
            "pipeline once to finish it, then change offsets"
        )
    version, metadata, _ = _logged_batch(location, batch)
    following = batch + 1
    offsets_text = "\n".join([version, metadata, json.dumps(source_offsets, sort_keys=True)])
    write_file_atomically(location / "offsets" / str(following), offsets_text.encode())
    commit_text = (location / "commits" / str(batch)).read_bytes()
    write_file_atomically(location / "commits" / str(following), commit_text)
    return following
